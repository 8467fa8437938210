"""`privcheck audit power`: plan a one-run canary audit before running it (docs/audits.md, "Power analysis").

    privcheck audit power --canaries M --delta D [--confidence C] --score-model perfect|gdp:MU|
        dpsgd_dirac:Q,SIGMA,T,llr|sum[,TAU] [--epsilon-nominal E] [--sims N] [--seed S] [--no-noiseless-guard]
        [--backend serial|ray] [--ray-address ADDR] [--max-retries R] [--json]

With --json it prints one JSON object: the power report (`audits.statistics.power.PowerReport.to_json`, whose top level
holds the headline keys eps_ceiling, planned_eps_lower, guesses (k*) and min_correct_for_nominal), the audit report's
`power` block under `power`, and `eps_nominal_source`. Without --epsilon-nominal, a `dpsgd_dirac` plan compares
with the PLD accountant's ε for (q, σ, T, δ) and a `gdp` plan with the μ-GDP ε; the source is printed. Bad input
raises InvalidParameter (exit 2 through `privcheck.cli.main`) before any simulation. `--backend ray` runs the
Monte Carlo tasks on Ray (`audits.backends`); the output's `execution` and `sims_finished` record where they ran
and how many simulated audits finished.
"""

from __future__ import annotations

from audits.cli.backend import add_backend_arguments, backend_kwargs
from privcheck.cli_args import integer, number, seed

__all__ = ["add_power_parser", "cmd_audit_power"]


def add_power_parser(audit_subparsers, common) -> None:
    """Add `power` under the `audit` verb (`audit_subparsers` is the verb's subparsers action)."""
    p = audit_subparsers.add_parser("power", parents=[common],
                                    help="power analysis of a one-run canary audit, before running it")
    p.add_argument("--canaries", type=integer, required=True, help="m, the number of randomised canaries (>= 1)")
    p.add_argument("--delta", type=number, required=True, help="the claim's own δ in [0, 1]")
    p.add_argument("--confidence", type=number, default=0.95, help="1 − significance, in (0, 1) (default 0.95)")
    p.add_argument("--score-model", required=True,
                   help="perfect | gdp:MU | dpsgd_dirac:Q,SIGMA,T,llr|sum[,TAU] (TAU: interference, default 0)")
    p.add_argument("--epsilon-nominal", type=number, default=None,
                   help="the claimed ε (default: PLD ε for dpsgd_dirac, μ-GDP ε for gdp, none for perfect)")
    p.add_argument("--sims", type=integer, default=200, help="Monte Carlo audits (default 200)")
    p.add_argument("--seed", type=seed, default=None, help="seed of the simulation, in [0, 2^63 − 1] (default: OS "
                                                          "entropy)")
    p.add_argument("--no-noiseless-guard", dest="noiseless_guard", action="store_false",
                   help="choose k* for an honest run only (default: k* also rejects a run with its noise removed, "
                        "docs/audits.md)")
    add_backend_arguments(p)
    p.set_defaults(func=cmd_audit_power)


def cmd_audit_power(args) -> int:
    from audits.cli import emit_with_plan
    from audits.statistics.power import assess, nominal_epsilon, plan, validate_plan_inputs
    from audits.statistics.pvalue import MAX_CANARIES
    from privcheck import validation as val

    val.count("canaries", args.canaries, 1, MAX_CANARIES)   # named as the flag; the rest is named as in `plan`
    inputs = validate_plan_inputs(args.canaries, delta=args.delta, confidence=args.confidence,
                                  eps_nominal=args.epsilon_nominal, score_model=args.score_model, sims=args.sims,
                                  seed=args.seed, noiseless_guard=args.noiseless_guard,
                                  **backend_kwargs(args))   # before the accountant or simulation
    model = inputs.model
    eps_nominal, source = args.epsilon_nominal, "given"
    if eps_nominal is None:
        derived = nominal_epsilon(model, args.delta) if 0 < args.delta < 1 else None
        eps_nominal, source = derived if derived is not None else (None, None)
    report = plan(args.canaries, delta=args.delta, confidence=args.confidence, eps_nominal=eps_nominal,
                  score_model=model, sims=args.sims, seed=args.seed, noiseless_guard=args.noiseless_guard,
                  **backend_kwargs(args))
    verdict = assess(report)                 # the one definition of UNDERPOWERED (no canary search: see docs)
    payload = {**report.to_json(), **verdict.fields(), "power": verdict.power_block(), "eps_nominal_source": source}
    need = report.min_correct_for_nominal
    rows = [("eps_ceiling", report.eps_ceiling),
            ("planned_eps_lower", report.planned_eps_lower),
            ("guesses (k*)", f"{report.guesses} (k+ = {report.k_plus}, k- = {report.k_minus})"),
            ("planned correct", f"{report.planned_correct} (precision {report.planned_precision:.4f})"),
            ("Monte Carlo median [p10, p90]",
             f"{report.mc_median:.4f} [{report.mc_p10:.4f}, {report.mc_p90:.4f}] over "
             + (f"{report.sims} audits" if report.sims_finished == report.sims
                else f"{report.sims_finished} of {report.sims} audits (failed tasks: {_failed(report)})")),
            ("prob_zero", report.prob_zero),
            ("epsilon_nominal", "none" if eps_nominal is None else f"{eps_nominal:.10g} ({source})"),
            ("min_correct_for_nominal", "n/a" if eps_nominal is None else ("none (cannot reject)" if need is None
                                                                           else need)),
            ("score model", report.score_model),
            *([] if report.noiseless is None else [("noiseless guard", _guard_row(report.noiseless))]),
            ("backend", _backend_row(report.execution)),
            ("randomness", payload["randomness"]["note"]),
            ("verdict", report.message)]
    emit_with_plan(args, payload, rows, verdict.power_block())
    return 0


def _failed(report) -> str:
    return "; ".join(f"#{f['index']} {f['error']}" for f in report.execution["failed"])


def _backend_row(execution: dict) -> str:
    text = f"{execution['backend']} ({execution['tasks']} tasks"
    if execution["ray_version"] is not None:
        text += f", ray {execution['ray_version']}"
    return text + ")"


def _guard_row(guard: dict) -> str:
    """The noiseless-run guard (docs/audits.md, "Runs without noise"); printed only when it applies."""
    if not guard["guarded"]:
        return f"none (never sampled {guard['never_sampled']:.4g})"
    return f"miss <= {guard['miss_bound']:.3g} (never sampled {guard['never_sampled']:.4g})"
