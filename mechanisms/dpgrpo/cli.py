"""`privcheck` subcommands contributed by `mechanisms.dpgrpo` (entry point `privcheck.commands`).

    privcheck run dp-grpo --preset tiny-cpu|gpu-h200 --out DIR [--seeds 0 1 2 | --seed S] [--arms ...]
                          [--model PATH] [--device cpu|cuda] [--reduced] [--time-limit-s X]
                          [--skip-verification] [--no-timing] [--json]

Exit status: 0 when every run completed, 1 when the wall-clock guard stopped one (status "incomplete"),
2 on bad input (raised as `InvalidParameter` before anything is written; printed by `privcheck.cli.main`).
DIR is claimed (`privcheck.artifacts.claim_output_directory`: checked and locked) before any work.
Under `torchrun` or `accelerate launch` every rank runs the command (docs/scaling.md); rank 0 claims and writes DIR
and prints the summary, every rank returns the same status, and bad input exits 2 on every rank.
torch and the trainer are imported lazily by the handler, so `privcheck --help` stays fast.
"""

from __future__ import annotations

from privcheck.cli_args import integer, number, seed

__all__ = ["cmd_run_dpgrpo", "register"]

def register(verbs: dict, common) -> None:
    """Add `run dp-grpo` (heavy dependencies are imported lazily by the handler)."""
    r = verbs["run"].add_parser("dp-grpo", parents=[common],
                                help="DP-GRPO end to end: public pretraining, private training, evaluation")
    r.add_argument("--preset", required=True, metavar="{tiny-cpu,gpu-h200}", help="run configuration")
    r.add_argument("--out", required=True, help="output directory (run artifacts, compare.json, report.md)")
    seeds = r.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=seed, nargs="+", default=None, metavar="S",
                       help="seeded replicates, each in [0, 2^63 − 1] (reproducible; never a privacy release)")
    seeds.add_argument("--seed", type=seed, default=None, help="one seeded replicate, in [0, 2^63 − 1]")
    r.add_argument("--arms", nargs="+", default=None, metavar="ARM",
                   help="arms (default dp_grpo zero_advantage; also dp_sft_filtered, dp_sft_gold, "
                        "nonprivate_reference)")
    r.add_argument("--model", default=None, metavar="PATH", help="local weights directory or .gguf file")
    r.add_argument("--device", default=None, metavar="{cpu,cuda}", help="torch device (default: the preset's)")
    r.add_argument("--reduced", action="store_true", help="the preset's reduced shapes (same code path)")
    r.add_argument("--time-limit-s", type=number, default=None, help="wall-clock guard for the whole invocation")
    r.add_argument("--rounds", type=integer, default=None, metavar="T",
                   help="override the public round count T (σ is recalibrated)")
    r.add_argument("--skip-verification", action="store_true",
                   help="do not run the float64 dpgrpo suite (recorded as skipped; blocks a privacy release)")
    r.add_argument("--no-timing", action="store_true", help="skip the private/non-private round-time ratio")
    r.set_defaults(func=cmd_run_dpgrpo)


def cmd_run_dpgrpo(args) -> int:
    """Handler: claim DIR (rank 0 of a launched run), run, write DIR, print a summary; 0 complete, 1 incomplete (2 via
    InvalidParameter)."""
    import contextlib

    from mechanisms.dpgrpo.pipeline.launch import detect_launch
    from privcheck.artifacts import claim_output_directory

    launch = detect_launch()
    writer = launch is None or launch.writer
    with claim_output_directory(args.out, name="out") if writer else contextlib.nullcontext(args.out) as out:
        return _run(args, out)


def _run(args, out) -> int:
    from mechanisms.dpgrpo.pipeline.run import run_dpgrpo
    from mechanisms.dpgrpo.pipeline.setup import DEFAULT_ARMS
    from mechanisms.dpgrpo.presets import MAX_ROUNDS
    from privcheck import validation as val
    from privcheck.cli import emit

    overrides = {"T": val.count("rounds", args.rounds, 1, MAX_ROUNDS)} if args.rounds is not None else None
    outcome = run_dpgrpo(args.preset, out=out, arms=args.arms or DEFAULT_ARMS, seeds=args.seeds, seed=args.seed,
                         model_path=args.model, time_limit_s=args.time_limit_s, device=args.device,
                         reduced=args.reduced, overrides=overrides, skip_verification=args.skip_verification,
                         measure_timing=not args.no_timing)
    if outcome.compare is None:                # rank r > 0 of a launched run: rank 0 writes and reports
        return 0 if outcome.status == "complete" else 1
    cmp = outcome.compare
    runs = [{"arm": r["arm"], "replicate": r["replicate"], "status": r["status"], "before": r["before"],
             "after": r["after"], "privacy_release": r["privacy_release"], "artifact": r["path"]}
            for r in cmp["runs"]]
    first = next((d["privacy"] for _, d in outcome.artifacts if d.get("privacy")), None)
    payload = {"status": outcome.status, "preset": cmp["preset"], "reduced": cmp["reduced"], "runs": runs,
               "contrast": cmp["contrast"], "shared_privacy": cmp["shared_privacy"]["passed"],
               "epsilon": None if first is None else first["epsilon"],
               "delta": None if first is None else first["delta"],
               "compare": str(outcome.compare_path), "compare_sha256": cmp["sha256"],
               "report": str(outcome.report_path)}
    rows = [("status", outcome.status), ("preset", cmp["preset"] + (" (reduced)" if cmp["reduced"] else ""))]
    if first is not None:
        rows += [("epsilon", first["epsilon"]), ("delta", first["delta"]),
                 ("q, sigma, T", f"{first['q']:.6g}, {first['sigma']!r}, {first['T']}")]
    for r in runs:
        rows.append((f"{r['arm']} [{r['replicate']}]",
                     f"accuracy {r['before']:.4f} -> {r['after']:.4f}  ({r['status']}, "
                     f"privacy_release {r['privacy_release']})"))
    for c in cmp["contrast"]:
        rows.append((f"dp_grpo - {c['control']} [{c['replicate']}]", f"{c['difference']:+.4f}"))
    rows += [("shared (q, sigma, T, delta)", cmp["shared_privacy"]["passed"]),
             ("compare", str(outcome.compare_path)), ("report", str(outcome.report_path))]
    emit(args, payload, rows)
    return 0 if outcome.status == "complete" else 1
