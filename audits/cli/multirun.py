"""`privcheck audit multi-run`: train N₁ runs with the canary and N₀ without, threshold the scores, and report the
Clopper–Pearson bound (docs/audits.md, "Multi-run audits that train"; `audits.multirun_driver`).

    privcheck audit multi-run --runs-in N1 --runs-out N0 --delta D [--confidence C] [--one-sided]
        [--target gaussian --sigma S [--steps T] | --target MODULE:FUNCTION --threshold t]
        [--threshold t] [--epsilon-nominal E] [--seed S] [--backend serial|ray] [--ray-address ADDR]
        [--max-retries R] [--out DIR] [--json]

`--target gaussian` (the default) is `audits.multirun_driver.GaussianRuns(σ, T)`: its threshold defaults to μ/2 and
its claimed ε to the μ-GDP ε (μ = √T/σ). `--target MODULE:FUNCTION` imports a picklable
`train_and_score(seed, include_canary) -> score` (importable on every Ray worker) and needs `--threshold`. Every
input is checked before the first run; bad input exits with code 2 and writes nothing.
"""

from __future__ import annotations

from audits.cli.backend import add_backend_arguments, backend_kwargs
from privcheck.cli_args import integer, number, seed
from privcheck.interrupts import reraise_if_interrupted

__all__ = ["add_multirun_parser", "cmd_audit_multi_run", "load_target"]


def add_multirun_parser(audit_subparsers, common) -> None:
    """Add `multi-run` under the `audit` verb."""
    p = audit_subparsers.add_parser("multi-run", parents=[common],
                                    help="run N1 trainings with the canary and N0 without (serial or Ray tasks), "
                                         "threshold their scores: Clopper–Pearson ε lower bound")
    p.add_argument("--runs-in", type=integer, required=True, help="N₁, runs with the canary")
    p.add_argument("--runs-out", type=integer, required=True, help="N₀, runs without the canary")
    p.add_argument("--target", default="gaussian",
                   help="gaussian (built-in, default) or MODULE:FUNCTION, a train_and_score(seed, include_canary)")
    p.add_argument("--sigma", type=number, default=None, help="gaussian target: noise multiplier σ (required)")
    p.add_argument("--steps", type=integer, default=None, help="gaussian target: T noisy steps (default 1)")
    p.add_argument("--threshold", type=number, default=None,
                   help="t of the test 'present iff score >= t', fixed before the runs (gaussian default: μ/2)")
    p.add_argument("--delta", type=number, required=True, help="δ of the claim being audited")
    p.add_argument("--confidence", type=number, default=0.95, help="1 − p, in (0, 1) (default 0.95)")
    p.add_argument("--one-sided", action="store_true", help="test only the event {score >= t} (drop ε₂)")
    p.add_argument("--epsilon-nominal", type=number, default=None,
                   help="claimed ε to test (gaussian default: the μ-GDP ε at δ)")
    p.add_argument("--seed", type=seed, default=None, help="seed of the runs, in [0, 2^63 − 1] (default: OS entropy)")
    add_backend_arguments(p)
    p.add_argument("--out", default=None, help="directory for the sealed artifact audit.json (optional)")
    p.set_defaults(func=cmd_audit_multi_run)


def load_target(text: str):
    """`MODULE:FUNCTION` → the callable (InvalidParameter naming `target` when it cannot be imported)."""
    import importlib

    from privcheck.errors import InvalidParameter

    allowed = "gaussian or MODULE:FUNCTION naming an importable callable"
    module, _, name = text.partition(":")
    if not module or not name:
        raise InvalidParameter("target", text, allowed)
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 — importing the user's module is reading the user's input
        reraise_if_interrupted(exc)
        raise InvalidParameter("target", text, f"{allowed} ({type(exc).__name__}: {exc})") from None
    if not callable(obj):
        raise InvalidParameter("target", text, allowed)
    return obj


def _target(args):
    """(train_and_score, threshold): the target checked and built, before any run (nothing computed)."""
    from audits.multirun_driver import GaussianRuns
    from privcheck.errors import InvalidParameter

    if args.target != "gaussian":
        for flag in ("sigma", "steps"):
            if getattr(args, flag) is not None:
                raise InvalidParameter(flag, getattr(args, flag), "only with --target gaussian")
        if args.threshold is None:
            raise InvalidParameter("threshold", None, "required with --target MODULE:FUNCTION")
        return load_target(args.target), args.threshold
    if args.sigma is None:
        raise InvalidParameter("sigma", None, "required with --target gaussian (a number > 0)")
    target = GaussianRuns(args.sigma, 1 if args.steps is None else args.steps)
    target.check_runs(args.runs_in + args.runs_out)
    return target, target.default_threshold if args.threshold is None else args.threshold


def _nominal(args, target):
    """(claimed ε, its source): given, or for the gaussian target its μ-GDP ε at δ (computed after validation)."""
    from audits.multirun_driver import GaussianRuns

    if args.epsilon_nominal is not None:
        return args.epsilon_nominal, "given"
    if isinstance(target, GaussianRuns) and args.delta > 0:
        return target.nominal_epsilon(args.delta), f"gdp(mu={target.mu!r})"
    return None, None


def cmd_audit_multi_run(args) -> int:
    from audits.cli import claimed_output

    with claimed_output(args) as out:
        return _multi_run(args, out)


def _multi_run(args, out) -> int:
    from audits.cli import emit_report
    from audits.multirun_driver import run_multirun_audit
    from audits.statistics.clopper_pearson import MAX_RUNS
    from privcheck import validation as val

    val.count("runs_in", args.runs_in, 1, MAX_RUNS), val.count("runs_out", args.runs_out, 1, MAX_RUNS)
    val.half_open_unit("delta", args.delta), val.open_unit("confidence", args.confidence)
    if args.epsilon_nominal is not None:
        val.nonnegative("epsilon_nominal", args.epsilon_nominal)
    if args.threshold is not None:
        val.finite("threshold", args.threshold)
    kwargs = backend_kwargs(args)
    target, threshold = _target(args)             # every input is checked before the accountant or the first run
    eps_nominal, source = _nominal(args, target)
    res = run_multirun_audit(target, runs_in=args.runs_in, runs_out=args.runs_out, threshold=threshold,
                             delta=args.delta, confidence=args.confidence, two_sided=not args.one_sided,
                             eps_nominal=eps_nominal, seed=args.seed, **kwargs)
    r, d = res.report.result, res.report.diagnostics
    ex = d["execution"]
    rows = [("eps_lower", r["eps_lower"]), ("FPR_up", r["fpr_up"]), ("FNR_up", r["fnr_up"]),
            ("direction", r["direction"] or "none"),
            ("runs in / out (finished)", f"{r['n_in']} / {r['n_out']} of {args.runs_in} / {args.runs_out}"),
            ("false negatives / positives", f"{r['fn']} / {r['fp']}"),
            ("threshold", threshold), ("confidence", args.confidence), ("delta", args.delta)]
    if eps_nominal is not None:
        rows += [("epsilon_nominal", f"{eps_nominal:.10g} ({source})"), ("rejects_nominal", r["rejects_nominal"])]
    rows.append(("backend", f"{ex['backend']} ({ex['tasks']} tasks, {ex['finished']} finished"
                 + (f", ray {ex['ray_version']}" if ex["ray_version"] else "") + ")"))
    rows += [(f"failed run ({f['arm']} #{f['run']})", f"{f['error']} after {f['attempts']} attempts")
             for f in res.failed]
    return emit_report(args, res.report, rows + [("ceiling (perfect guessing)", res.report.power["eps_ceiling"])],
                       out)
