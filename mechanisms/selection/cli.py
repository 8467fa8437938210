"""The command line of `mechanisms.selection`: `privcheck run selection` and `privcheck simulate selection`.

The one home of the package's argparse code. `register` is the `privcheck.commands` entry point; the same
commands run stand-alone as `python -m mechanisms.selection.cli run selection ...` (for machines where the
entry point is not installed). Building the parser imports nothing of the package (no accountant, torch,
transformers or matplotlib): the preset names and the default seed are spelled here (tests check them against the
pipeline's and the benchmark's), and the handlers load the rest when they run. Every argument is checked, and the
output directory claimed, before any work (exit 2 through `privcheck.cli.main`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from privcheck.cli_args import integer, number, seed

__all__ = ["DEFAULT_SEED", "DEVICES", "MAX_CANDIDATES", "PRESET_NAMES", "add_run_parser", "add_simulate_parser",
           "build_parser", "cmd_run_selection", "cmd_simulate_selection", "main", "register"]

PRESET_NAMES = ("cpu-tiny", "gpu-h200")   # mechanisms.selection.pipeline.presets.PRESETS
DEVICES = ("cpu", "cuda")                 # mechanisms.selection.pipeline.models.DEVICES
DEFAULT_SEED = 20240917                   # mechanisms.selection.simulate.run.DEFAULT_SEED
# The pipeline allocates its candidate arrays up front (prompts × n × max_new_tokens token ids per phase), so a run
# holds at most MAX_CANDIDATES candidates per phase (15 times the gpu-h200 preset's 64 × 1,024).
MAX_CANDIDATES = 10**6


def register(verbs: dict, common) -> None:
    """Add `simulate selection` and `run selection` (the `privcheck.commands` entry point)."""
    add_simulate_parser(verbs, common)
    add_run_parser(verbs, common)


# --- privcheck run selection ----------------------------------------------------------------------------------

def add_run_parser(verbs: dict, common) -> None:
    """`privcheck run selection --preset P --out DIR [--seed N] [--selectors ...] [--json]`."""
    r = verbs["run"].add_parser("selection", parents=[common],
                                help="LLM selection pipeline: sample, score, BoN/PrivBoN/ITP/PrivITP")
    r.add_argument("--preset", default="cpu-tiny", metavar="{" + ",".join(PRESET_NAMES) + "}",
                   help="run configuration (default cpu-tiny)")
    r.add_argument("--device", default="cpu", metavar="{" + ",".join(DEVICES) + "}", help="torch device (default cpu)")
    r.add_argument("--out", required=True, help="output directory (selection_run.json)")
    r.add_argument("--seed", type=seed, default=None,
                   help="seed for mechanism noise and candidate sampling, in [0, 2^63 − 1] (seeded: privacy_release "
                        "false)")
    r.add_argument("--selectors", nargs="+", default=None, metavar="NAME",
                   help="subset of bon privbon itp privitp (default: all; commas also accepted)")
    r.add_argument("--n", type=integer, default=None,
                   help=f"candidates per prompt and phase (preset default; prompts × n <= {MAX_CANDIDATES})")
    r.add_argument("--prompts", type=integer, default=None, help="number of prompts (preset default)")
    r.add_argument("--time-limit-s", type=number, default=None, help="wall-clock guard for generation + scoring")
    r.add_argument("--r-max", type=number, default=None, help="public score range [0, R_max]")
    r.add_argument("--sensitivity", type=number, default=None, help="public score sensitivity Δ (<= R_max)")
    r.add_argument("--sigma", type=number, default=None, help="PrivBoN Gumbel scale σ (PrivITP σ_X = σ_Z = σ/2)")
    r.add_argument("--beta", type=number, default=None, help="ITP/PrivITP χ² strength β")
    r.set_defaults(func=cmd_run_selection)


def _check_sizes(args) -> None:
    """The candidate arrays of the run fit: n and prompts (given or the preset's) with prompts × n <= MAX_CANDIDATES;
    and the device is one the pipeline knows (whether CUDA is present is checked when torch is loaded)."""
    from mechanisms.selection.pipeline import get_preset
    from privcheck import validation as val
    from privcheck.errors import InvalidParameter

    if args.device not in DEVICES:
        raise InvalidParameter("device", args.device, " or ".join(repr(d) for d in DEVICES))
    preset = get_preset(args.preset)
    n = preset.n if args.n is None else val.count("n", args.n, 1, MAX_CANDIDATES)
    if args.prompts is not None:
        val.count("prompts", args.prompts, 1, MAX_CANDIDATES // n)
    elif preset.prompts * n > MAX_CANDIDATES:
        raise InvalidParameter("n", n, f"an integer in [1, {MAX_CANDIDATES // preset.prompts}] (prompts × n <= "
                                       f"{MAX_CANDIDATES} candidates per phase)")


def cmd_run_selection(args) -> int:
    """Handler: claim the output directory, run, write the artifact, print a summary; exit 0 when complete, 1 when
    the guard stopped it."""
    from privcheck.artifacts import claim_output_directory

    with claim_output_directory(args.out, name="out") as out:
        return _run_selection(args, out)


def _run_selection(args, out) -> int:
    from mechanisms.selection.pipeline import run_selection
    from privcheck.cli import emit

    _check_sizes(args)
    doc, path, _ = run_selection(args.preset, out=out, device=args.device, seed=args.seed,
                                 selectors=args.selectors, n=args.n, prompts=args.prompts,
                                 time_limit_s=args.time_limit_s, r_max=args.r_max, sensitivity=args.sensitivity,
                                 sigma=args.sigma, beta=args.beta)
    thr = doc["throughput"]
    sel = {name: {"seconds": e["seconds"], "fallbacks": e["fallbacks"], "epsilon": e.get("epsilon")}
           for name, e in doc["selection"].items()}
    payload = {"status": doc["status"], "artifact": str(path), "sha256": doc["sha256"], "preset": doc["preset"],
               "device": doc["device"], "n": doc["n"], "prompts_completed": doc["prompts"]["completed"],
               "generation_tokens_per_s": thr["generation"]["tokens_per_s"],
               "generation_candidates_per_s": thr["generation"]["candidates_per_s"],
               "scoring_candidates_per_s": thr["scoring"]["candidates_per_s"], "selection": sel,
               "privacy_release": doc["privacy_release"], "total_s": doc["timing"]["total_s"]}
    rows = [("status", doc["status"]), ("preset", doc["preset"]), ("device", doc["device"]), ("n", doc["n"]),
            ("prompts", f"{doc['prompts']['completed']}/{doc['prompts']['requested']}"),
            ("generation tokens/s", thr["generation"]["tokens_per_s"]),
            ("scoring candidates/s", thr["scoring"]["candidates_per_s"])]
    for name, e in doc["selection"].items():
        eps = e.get("epsilon")
        shown = "no privacy record" if eps is None else (
            f"eps/prompt {eps['per_prompt']:.6g}" if "per_prompt" in eps
            else f"eps/prompt {eps['per_prompt_min']:.6g}..{eps['per_prompt_max']:.6g}")
        rows.append((f"{name}", f"{e['seconds'] * 1e3:.2f} ms, {e['fallbacks']} fallbacks, {shown}"))
    rows += [("privacy_release", doc["privacy_release"]), ("total_s", doc["timing"]["total_s"]),
             ("artifact", str(path)), ("sha256", doc["sha256"])]
    if doc["status"] != "complete":
        rows.append(("incomplete", doc["incomplete_reason"]))
    emit(args, payload, rows)
    return 0 if doc["status"] == "complete" else 1


# --- privcheck simulate selection -----------------------------------------------------------------------------

def add_simulate_parser(verbs: dict, common) -> None:
    """`privcheck simulate selection --out DIR [--seed N] [--quick] [--json]`."""
    p = verbs["simulate"].add_parser(
        "selection", parents=[common],
        help="synthetic benchmark of BoN/PrivBoN/ITP/PrivITP scaling and the PrivITP ex-post filter")
    p.add_argument("--out", required=True, help="output directory (selection_simulation.json and PNG plots)")
    p.add_argument("--seed", type=seed, default=DEFAULT_SEED,
                   help=f"seed of the synthetic data and of every draw, in [0, 2^63 − 1] (default {DEFAULT_SEED}); "
                        "seeded runs are not privacy releases")
    p.add_argument("--quick", action="store_true", help="reduced sizes (tests, smoke runs)")
    p.set_defaults(func=cmd_simulate_selection)


def cmd_simulate_selection(args) -> int:
    """Handler: claim the output directory, run the benchmark, write the artifact and plots, print the
    observations."""
    from privcheck.artifacts import claim_output_directory

    with claim_output_directory(args.out, name="out") as out:
        return _simulate_selection(args, out)


def _simulate_selection(args, out) -> int:
    from mechanisms.selection.simulate import ARTIFACT, run_simulation
    from privcheck.cli import emit

    doc, paths = run_simulation(out, seed=args.seed, quick=args.quick)
    obs = doc["observations"]
    artifact = str(Path(args.out) / ARTIFACT)
    payload = {"artifact": artifact, "sha256": doc["sha256"], "files": [str(p) for p in paths],
               "observations": obs, "randomness": doc["randomness"], "wall_time_s": doc["wall_time_s"]}
    ratios = obs["filter_vs_basic"]["ratio_per_sigma"]
    rows = [("artifact", artifact), ("sha256", doc["sha256"]),
            ("(a) BoN rises then falls, proxy rises", obs["bon_non_monotone"]["value"]),
            (f"(a) PrivBoN & PrivITP monotone (σ = {obs['private_monotone']['sigma']})",
             obs["private_monotone"]["value"]),
            ("(b) PrivITP >= PrivBoN at n_max, every σ", obs["privitp_ge_privbon"]["value"]),
            ("(c) filter/basic answered, per σ", ", ".join("n/a" if r is None else f"{r:.2f}" for r in ratios)),
            ("(d) PrivITP -> ITP as σ decreases", obs["privitp_approaches_itp"]["value"]),
            ("randomness", f"seeded (seed {doc['randomness']['seed']}): not a privacy release"),
            ("wall time (s)", round(doc["wall_time_s"], 2))]
    emit(args, payload, rows)
    return 0


# --- stand-alone ----------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """A stand-alone parser with `run selection` and `simulate selection` (no entry point needed)."""
    from privcheck.cli import common_parent

    parser = argparse.ArgumentParser(prog="python -m mechanisms.selection.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    common = common_parent()
    verbs = {verb: sub.add_parser(verb).add_subparsers(dest="what", required=True) for verb in ("run", "simulate")}
    register(verbs, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m mechanisms.selection.cli run selection --preset ... --out DIR` (same as `privcheck run`, with its
    exit statuses)."""
    from privcheck.cli import dispatch

    return dispatch(build_parser().parse_args(argv), exiting=argv is None)


if __name__ == "__main__":
    sys.exit(main())
