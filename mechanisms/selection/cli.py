"""The command line of `mechanisms.selection`: `privcheck run selection` and `privcheck simulate selection`.

The one home of the package's argparse code. `register` is the `privcheck.commands` entry point; the same
commands run stand-alone as `python -m mechanisms.selection.cli run selection ...` (for machines where the
entry point is not installed). Building the parser imports neither torch, transformers nor matplotlib: the
pipeline and the benchmark load them when they run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mechanisms.selection.pipeline.presets import PRESETS
from mechanisms.selection.simulate.run import DEFAULT_SEED
from privcheck.cli_args import integer

__all__ = ["add_run_parser", "add_simulate_parser", "build_parser", "cmd_run_selection", "cmd_simulate_selection",
           "main", "register"]


def register(verbs: dict, common) -> None:
    """Add `simulate selection` and `run selection` (the `privcheck.commands` entry point)."""
    add_simulate_parser(verbs, common)
    add_run_parser(verbs, common)


# --- privcheck run selection ----------------------------------------------------------------------------------

def add_run_parser(verbs: dict, common) -> None:
    """`privcheck run selection --preset P --out DIR [--seed N] [--selectors ...] [--json]`."""
    r = verbs["run"].add_parser("selection", parents=[common],
                                help="LLM selection pipeline: sample, score, BoN/PrivBoN/ITP/PrivITP")
    r.add_argument("--preset", default="cpu-tiny", metavar="{" + ",".join(PRESETS) + "}",
                   help="run configuration (default cpu-tiny)")
    r.add_argument("--device", default="cpu", metavar="{cpu,cuda}", help="torch device (default cpu)")
    r.add_argument("--out", required=True, help="output directory (selection_run.json)")
    r.add_argument("--seed", type=int, default=None,
                   help="seed for mechanism noise and candidate sampling (seeded: privacy_release false)")
    r.add_argument("--selectors", nargs="+", default=None, metavar="NAME",
                   help="subset of bon privbon itp privitp (default: all; commas also accepted)")
    r.add_argument("--n", type=int, default=None, help="candidates per prompt and phase (preset default)")
    r.add_argument("--prompts", type=int, default=None, help="number of prompts (preset default)")
    r.add_argument("--time-limit-s", type=float, default=None, help="wall-clock guard for generation + scoring")
    r.add_argument("--r-max", type=float, default=None, help="public score range [0, R_max]")
    r.add_argument("--sensitivity", type=float, default=None, help="public score sensitivity Δ (<= R_max)")
    r.add_argument("--sigma", type=float, default=None, help="PrivBoN Gumbel scale σ (PrivITP σ_X = σ_Z = σ/2)")
    r.add_argument("--beta", type=float, default=None, help="ITP/PrivITP χ² strength β")
    r.set_defaults(func=cmd_run_selection)


def cmd_run_selection(args) -> int:
    """Handler: run, write the artifact, print a summary; exit 0 when complete, 1 when the guard stopped it."""
    from mechanisms.selection.pipeline import run_selection
    from privcheck.cli import emit

    doc, path, _ = run_selection(args.preset, out=args.out, device=args.device, seed=args.seed,
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
    p.add_argument("--seed", type=integer, default=DEFAULT_SEED,
                   help=f"seed of the synthetic data and of every draw (default {DEFAULT_SEED}); seeded runs are "
                        "not privacy releases")
    p.add_argument("--quick", action="store_true", help="reduced sizes (tests, smoke runs)")
    p.set_defaults(func=cmd_simulate_selection)


def cmd_simulate_selection(args) -> int:
    """Handler: run the benchmark, write the artifact and plots, print the observations."""
    from mechanisms.selection.simulate import ARTIFACT, run_simulation
    from privcheck.cli import emit

    doc, paths = run_simulation(args.out, seed=args.seed, quick=args.quick)
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
    parser = argparse.ArgumentParser(prog="python -m mechanisms.selection.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    verbs = {verb: sub.add_parser(verb).add_subparsers(dest="what", required=True) for verb in ("run", "simulate")}
    register(verbs, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m mechanisms.selection.cli run selection --preset ... --out DIR` (same as `privcheck run`)."""
    from privcheck.errors import PrivcheckError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PrivcheckError as exc:
        print(f"privcheck: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
