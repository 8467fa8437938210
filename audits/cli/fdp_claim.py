"""`privcheck audit fdp-claim-curve`: the one-run f-DP audit against the claimed mechanism's own trade-off curve
(`audits.statistics.fdp_claim.fdp_claim_curve`; docs/audits.md, "f-DP against the claim's own curve").

The claim is a DP-SGD / DP-GRPO event: `--sampling-rate Q --noise-multiplier S --steps T`, or `--history`
(the phases of `privcheck account dp-sgd --history`). Every input is checked before any work (exit 2, one line
naming the flag); the heavy modules load only when the command runs, never for `--help`.
"""

from __future__ import annotations

from privcheck.cli_args import integer, number

__all__ = ["add_fdp_claim_parser", "cmd_fdp_claim_curve"]


def add_fdp_claim_parser(audit, common) -> None:
    from audits.cli import add_count_args, add_level_args, add_out_arg, add_plan_args

    f = audit.add_parser("fdp-claim-curve", parents=[common],
                         help="one-run f-DP audit against the claimed DP-SGD event's own trade-off curve: ε lower "
                              "bound under the claim-family assumption, beside the assumption-free one-run bound")
    add_count_args(f)
    f.add_argument("--sampling-rate", type=number, help="q in (0, 1] of the claimed event")
    f.add_argument("--noise-multiplier", type=number, help="σ of the claimed event")
    f.add_argument("--steps", type=integer, help="T >= 1 of the claimed event")
    f.add_argument("--history", help="instead of the three above: phases 'σ:q:steps,σ:q:steps,...' or a JSON "
                                     "file (an Opacus accountant's history [[σ, q, steps], ...])")
    add_level_args(f)
    add_plan_args(f, "this method's own plan of the audit's r guesses (top-only or split evenly) under the score "
                     "model: planned ε_lower, Monte Carlo spread, UNDERPOWERED")
    add_out_arg(f)
    f.set_defaults(func=cmd_fdp_claim_curve)


def _claimed_event(args):
    """The claimed event, its noise multipliers in the certified PLD's range and its ε finite and in range (named
    as the flags), and the claimed ε."""
    from privcheck.accounting import epsilon
    from privcheck.accounting.pld_certified import check_noise
    from privcheck.cli import dpsgd_event, epsilon_in_range

    event = dpsgd_event(args)
    phases = getattr(event, "phases", (event,))
    culprit = ("history", args.history) if args.history is not None else ("noise_multiplier", args.noise_multiplier)
    for p in phases:
        check_noise(culprit[0], p.noise_multiplier)
    claimed = epsilon(event, args.delta).value
    epsilon_in_range(claimed, *culprit)
    return event, claimed


def cmd_fdp_claim_curve(args) -> int:
    from audits.cli import PLAN_SIMS, ceiling_rows, check_counts, check_plan_args, claimed_output, emit_report
    from privcheck import validation as val

    with claimed_output(args) as out:
        check_counts(args)
        val.open_unit("delta", args.delta)
        val.open_unit("confidence", args.confidence)
        check_plan_args(args)
        event, claimed = _claimed_event(args)
        from audits.statistics.fdp_claim import fdp_claim_curve

        rep = fdp_claim_curve(args.canaries, args.guesses, args.correct, event=event, delta=args.delta,
                              confidence=args.confidence, score_model=args.score_model,
                              plan_sims=args.plan_sims or PLAN_SIMS, plan_seed=args.seed)
        r = rep.result
        rows = [("eps_lower", r["eps_lower"]), ("assumption", rep.extra_assumptions[0]),
                ("eps_lower_steinke", r["eps_lower_steinke"]), ("assumption (steinke)", "none beyond one run"),
                ("claimed epsilon", claimed), ("rejects_nominal", r["rejects_nominal"]),
                ("noise_scale", "none rejected" if r["noise_scale"] is None else r["noise_scale"]),
                ("canaries / guesses / correct", f"{args.canaries} / {args.guesses} / {args.correct}"),
                ("confidence", args.confidence), ("delta", args.delta)]
        if r["search_capped"]:
            rows.append(("search_capped", True))
        return emit_report(args, rep, rows + ceiling_rows(rep), out)
