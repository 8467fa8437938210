"""`privcheck audit ...` subcommands contributed by `audits` (entry point `privcheck.commands`: `audits.cli:register`).

The one CLI home of the package. Commands: `one-run` (from counts, or `--scores FILE`: a scores file of
`audits.scores_file`), `clopper-pearson`, `gdp`, `fdp-one-run` (here), `power`
(`audits.cli.power`), `multi-run` (`audits.cli.multirun`), `fdp-claim-curve` (`audits.cli.fdp_claim`), `selection`
and `dp-grpo` (registered from
`audits.cli.selection` and `audits.cli.dpgrpo`).
Each audit command prints a table, or with `--json` one JSON object: the audit report with the command's headline
keys copied to the top level (GDP-family commands never print `eps_lower`). `--out DIR` also writes the sealed
artifact DIR/audit.json; inputs are validated before anything is written, and bad input exits with code 2.
"""

from __future__ import annotations

from privcheck.cli_args import integer, number, seed

PLAN_SIMS = 200          # simulated audits of a plan made by `one-run --score-model` (as `audit power`)

__all__ = ["PLAN_SIMS", "add_count_args", "add_level_args", "add_out_arg", "add_plan_args", "ceiling_rows",
           "check_counts", "check_plan_args", "claimed_output", "cmd_clopper_pearson", "cmd_fdp_one_run", "cmd_gdp",
           "cmd_one_run", "emit_report", "emit_with_plan", "plan_rows", "register"]


def register(verbs: dict, common) -> None:
    """Add the `audit` verb's commands."""
    audit = verbs["audit"]
    o = audit.add_parser("one-run", parents=[common],
                         help="one-run canary audit (Steinke, Nasr & Jagielski) from counts or from a scores file "
                              "(--scores): ε lower bound")
    add_count_args(o, required=False)
    o.add_argument("--scores", default=None, metavar="FILE",
                   help="scores file (.csv or .npz: canary scores, revealed membership, its commitment and salt; "
                        "docs/audit_your_model.md) instead of --canaries/--guesses/--correct")
    o.add_argument("--k-plus", type=integer, default=None,
                   help="with --scores: k₊, top-ranked canaries guessed included (default: the file's "
                        "preregistration)")
    o.add_argument("--k-minus", type=integer, default=None,
                   help="with --scores: k₋, bottom-ranked canaries guessed left out (default: the preregistration's, "
                        "else 0)")
    add_level_args(o)
    o.add_argument("--epsilon-nominal", type=number, default=None, help="claimed ε to test (optional)")
    add_plan_args(o, "planned ε_lower, Monte Carlo spread, and UNDERPOWERED with the canary count that would "
                     "reach --epsilon-nominal; with --scores the plan is of the audit's own rule (k₊, k₋)")
    add_out_arg(o)
    o.set_defaults(func=cmd_one_run)

    c = audit.add_parser("clopper-pearson", parents=[common],
                         help="multi-run audit with Clopper–Pearson bounds on FPR and FNR: ε lower bound")
    _runs(c)
    add_level_args(c)
    c.add_argument("--one-sided", action="store_true", help="test only the event {score >= t} (drop ε₂)")
    c.add_argument("--thresholds", type=integer, default=1,
                   help="K thresholds declared in advance (Bonferroni: CP at p/(2K); default 1)")
    c.add_argument("--epsilon-nominal", type=number, default=None, help="claimed ε to test (optional)")
    add_out_arg(c)
    c.set_defaults(func=cmd_clopper_pearson)

    g = audit.add_parser("gdp", parents=[common],
                         help="multi-run μ-GDP lower bound (valid only for a Gaussian trade-off curve)")
    _runs(g)
    add_level_args(g)
    g.add_argument("--hypotheses", type=integer, default=1, help="K tested hypotheses (CP at p/(2K); default 1)")
    add_out_arg(g)
    g.set_defaults(func=cmd_gdp)

    f = audit.add_parser("fdp-one-run", parents=[common],
                         help="one-run f-DP audit in the Gaussian family: μ lower bound (Mahloujifar et al.)")
    add_count_args(f)
    add_level_args(f)
    add_out_arg(f)
    f.set_defaults(func=cmd_fdp_one_run)

    from audits.cli.dpgrpo import add_dpgrpo_parser
    from audits.cli.fdp_claim import add_fdp_claim_parser
    from audits.cli.multirun import add_multirun_parser
    from audits.cli.power import add_power_parser
    from audits.cli.selection import add_selection_parser
    add_power_parser(audit, common)
    add_multirun_parser(audit, common)
    add_selection_parser(audit, common)
    add_dpgrpo_parser(audit, common)
    add_fdp_claim_parser(audit, common)


def add_count_args(p, required: bool = True) -> None:
    p.add_argument("--canaries", type=integer, required=required, help="m, number of randomised canaries")
    p.add_argument("--guesses", type=integer, required=required, help="r, number of non-abstaining guesses (<= m)")
    p.add_argument("--correct", type=integer, required=required, help="v, number of correct guesses (<= r)")


def _runs(p) -> None:
    p.add_argument("--runs-in", type=integer, required=True, help="N₁, runs with the canary")
    p.add_argument("--runs-out", type=integer, required=True, help="N₀, runs without the canary")
    p.add_argument("--false-negatives", type=integer, required=True, help="FN out of N₁")
    p.add_argument("--false-positives", type=integer, required=True, help="FP out of N₀")


def add_level_args(p) -> None:
    p.add_argument("--delta", type=number, required=True, help="δ of the claim being audited")
    p.add_argument("--confidence", type=number, default=0.95, help="1 − p, in (0, 1) (default 0.95)")


def add_out_arg(p) -> None:
    p.add_argument("--out", default=None, help="directory for the sealed artifact audit.json (optional)")


def claimed_output(args):
    """`claim_output_directory(args.out)` when --out is given (checked and locked before any work), else a block
    without an output directory; either yields the directory to write (or None)."""
    import contextlib

    from privcheck.artifacts import claim_output_directory

    return contextlib.nullcontext(None) if args.out is None else claim_output_directory(args.out, name="out")


def emit_report(args, rep, rows, out=None) -> int:
    """Print the report (+ headline keys); with an output directory `out` (the claimed --out), write the sealed
    artifact first and print it."""
    from audits.statistics.report import audit_document, write_audit

    if out is not None:
        doc = audit_document(rep)
        path = write_audit(rep, out, document=doc)
        payload = dict(doc, artifact=str(path))
        rows = rows + [("artifact", str(path)), ("sha256", doc["sha256"])]
    else:
        payload = rep.to_json()
    payload.update(rep.headline())
    emit_with_plan(args, payload, rows, rep.power)
    return 0


def plan_rows(power) -> list:
    """The power plan's rows of an audit table (`power`: the report's `power` block)."""
    rows = [("plan", power["plan_note"])]
    if power.get("mc_median") is not None or power.get("score_model") not in (None, "perfect"):
        rows.append(("planned_eps_lower", power["planned_eps_lower"]))
    if power.get("mc_median") is not None:
        rows.append(("plan Monte Carlo median [p10, p90]",
                     f"{power['mc_median']:.4f} [{power['mc_p10']:.4f}, {power['mc_p90']:.4f}]"))
    if power.get("canaries_needed") is not None:
        rows.append(("canaries needed (plan)", power["canaries_needed"]))
    return rows


def emit_with_plan(args, payload: dict, rows: list, power) -> None:
    """`privcheck.cli.emit` with the plan: its rows in the table, `underpowered` and `plan_note` at the JSON top
    level, and the "UNDERPOWERED: ..." line first when the plan cannot reach its fraction of the claim."""
    from privcheck.cli import emit

    payload = dict(payload, underpowered=power["underpowered"], plan_note=power["plan_note"])
    if power["underpowered"] and not args.json:
        print(power["plan_note"])
    labels = {k for k, _ in rows}
    shown = [row for row in plan_rows(power) if row[0] not in labels
             and not (row[0].startswith("plan Monte Carlo") and any("Monte Carlo" in k for k in labels))]
    emit(args, payload, rows + shown)


def _or_none(value, text: str):
    return text if value is None else value


def ceiling_rows(rep) -> list:
    return [("ceiling (perfect guessing)", rep.power["eps_ceiling"])]


def check_counts(args) -> None:
    """--canaries, --guesses, --correct, named as the flags (the library names them m, r, v)."""
    from audits.statistics.pvalue import MAX_CANARIES
    from privcheck import validation as val

    val.ordered_counts(args.canaries, args.guesses, args.correct, m_name="canaries", r_name="guesses",
                       v_name="correct", maximum=MAX_CANARIES)


def _check_runs(args, hypotheses: str) -> None:
    """--runs-in, --runs-out, --false-negatives, --false-positives and --thresholds / --hypotheses (K), named as the
    flags (the library names them n_in, n_out, fn, fp, n_thresholds / n_hypotheses)."""
    from audits.statistics.clopper_pearson import MAX_HYPOTHESES, MAX_RUNS
    from privcheck import validation as val

    runs_in = val.count("runs_in", args.runs_in, 1, MAX_RUNS)
    runs_out = val.count("runs_out", args.runs_out, 1, MAX_RUNS)
    val.count("false_negatives", args.false_negatives, 0, runs_in)
    val.count("false_positives", args.false_positives, 0, runs_out)
    val.count(hypotheses, getattr(args, hypotheses), 1, MAX_HYPOTHESES)


def add_plan_args(parser, what: str) -> None:
    """--score-model, --plan-sims, --seed: plan an audit that has run (`check_plan_args`)."""
    parser.add_argument("--score-model", default=None, metavar="SPEC",
                        help="plan the audit under this score model, as `audit power` does (perfect | gdp:MU | "
                             "dpsgd_dirac:Q,SIGMA,T,llr|sum[,TAU]): " + what)
    parser.add_argument("--plan-sims", type=integer, default=None,
                        help=f"with --score-model: simulated audits of the plan (default {PLAN_SIMS})")
    parser.add_argument("--seed", type=seed, default=None,
                        help="with --score-model: seed of the plan's simulation, in [0, 2^63 − 1] (default: OS "
                             "entropy)")


def check_plan_args(args) -> None:
    """The plan's flags only with --score-model; the model parsed and --plan-sims checked (InvalidParameter before
    any work)."""
    from audits.statistics.score_models import parse_score_model
    from privcheck import validation as val
    from privcheck.errors import InvalidParameter

    if args.score_model is None:
        for name in ("plan_sims", "seed"):
            if getattr(args, name) is not None:
                raise InvalidParameter(name, getattr(args, name), "only with --score-model SPEC")
        return
    args.score_model = parse_score_model(args.score_model)
    args.plan_sims = val.count("plan_sims", PLAN_SIMS if args.plan_sims is None else args.plan_sims)


def _one_run_inputs(args) -> None:
    """Counts xor a scores file; k₊/k₋ only with a scores file; the plan's flags only with --score-model
    (InvalidParameter before any work)."""
    from privcheck.errors import InvalidParameter

    check_plan_args(args)
    counts = {"canaries": args.canaries, "guesses": args.guesses, "correct": args.correct}
    if args.scores is not None:
        for name, value in counts.items():
            if value is not None:
                raise InvalidParameter(name, value, "not given together with --scores")
        return
    for name, value in counts.items():
        if value is None:
            raise InvalidParameter(name, None, "required (or give --scores FILE)")
    for name in ("k_plus", "k_minus"):
        if getattr(args, name) is not None:
            raise InvalidParameter(name, getattr(args, name), "only with --scores FILE")
    check_counts(args)
    if args.score_model is not None:
        from audits.statistics.power import validate_plan_inputs
        validate_plan_inputs(args.canaries, delta=args.delta, confidence=args.confidence,
                             eps_nominal=args.epsilon_nominal, score_model=args.score_model, sims=args.plan_sims,
                             seed=args.seed)


def cmd_one_run(args) -> int:
    with claimed_output(args) as out:
        return _one_run(args, out)


def _one_run(args, out) -> int:
    from audits.statistics.one_run import from_counts

    _one_run_inputs(args)
    if args.scores is not None:
        return _one_run_scores(args, out)
    power = None
    if args.score_model is not None:
        from audits.statistics.power import planned_verdict
        # the audit's own r guesses, top-only or split evenly (the counts do not say which): the plan's
        # min_correct_for_nominal then speaks of these r guesses
        r = args.guesses
        power = planned_verdict(args.canaries, delta=args.delta, confidence=args.confidence,
                                eps_nominal=args.epsilon_nominal, score_model=args.score_model, sims=args.plan_sims,
                                seed=args.seed, rules=[(r, 0), ((r + 1) // 2, r // 2)] if r else None)
    rep = from_counts(args.canaries, args.guesses, args.correct, delta=args.delta, confidence=args.confidence,
                      eps_nominal=args.epsilon_nominal, power=power)
    r = rep.result
    rows = [("eps_lower", r["eps_lower"]), ("canaries / guesses / correct", f"{args.canaries} / {args.guesses} / "
                                                                           f"{args.correct}"),
            ("confidence", args.confidence), ("delta", args.delta)]
    if args.epsilon_nominal is not None:
        rows += [("p_value_at_nominal", r["p_value_at_nominal"]), ("rejects_nominal", r["rejects_nominal"]),
                 ("min correct for nominal", _or_none(rep.power["min_correct_for_nominal"],
                                                      "none (even v = r cannot reach it)"))]
    rows += ceiling_rows(rep)
    if r["search_capped"]:
        rows.append(("search_capped", True))
    return emit_report(args, rep, rows, out)


def _one_run_scores(args, out) -> int:
    from audits.scores_file import audit_scores_file

    rep = audit_scores_file(args.scores, delta=args.delta, confidence=args.confidence, k_plus=args.k_plus,
                            k_minus=args.k_minus, eps_nominal=args.epsilon_nominal, score_model=args.score_model,
                            plan_sims=args.plan_sims or PLAN_SIMS, plan_seed=args.seed)
    r, g, c = rep.result, rep.guessing, rep.canaries
    rows = [("eps_lower", r["eps_lower"]),
            ("canaries / guesses / correct", f"{c['m']} / {r['guesses']} / {r['correct']}"),
            ("k_plus / k_minus", f"{g['k_plus']} / {g['k_minus']}"),
            ("included / left out", f"{c['n_in']} / {c['n_out']}"),
            ("membership commitment", f"{c['membership_commitment']} (verified)"),
            ("preregistration", _or_none(g["preregistration"], "none")),
            ("confidence", args.confidence), ("delta", args.delta)]
    if args.epsilon_nominal is not None:
        rows += [("p_value_at_nominal", r["p_value_at_nominal"]), ("rejects_nominal", r["rejects_nominal"])]
    rows += ceiling_rows(rep) + [("auroc (diagnostic)", rep.diagnostics["auroc"])]
    if r["search_capped"]:
        rows.append(("search_capped", True))
    return emit_report(args, rep, rows, out)


def cmd_clopper_pearson(args) -> int:
    with claimed_output(args) as out:
        return _clopper_pearson(args, out)


def _clopper_pearson(args, out) -> int:
    from audits.statistics.clopper_pearson import clopper_pearson

    _check_runs(args, "thresholds")
    rep = clopper_pearson(args.false_positives, args.runs_out, args.false_negatives, args.runs_in, delta=args.delta,
                          confidence=args.confidence, two_sided=not args.one_sided, n_thresholds=args.thresholds,
                          eps_nominal=args.epsilon_nominal)
    r = rep.result
    rows = [("eps_lower", r["eps_lower"]), ("FPR_up", r["fpr_up"]), ("FNR_up", r["fnr_up"]),
            ("direction", r["direction"] or "none"), ("confidence", args.confidence), ("delta", args.delta)]
    if args.epsilon_nominal is not None:
        rows.append(("rejects_nominal", r["rejects_nominal"]))
    return emit_report(args, rep, rows + ceiling_rows(rep), out)


def _gdp_rows(rep) -> list:
    r = rep.result
    return [("mu_lower", r["mu_lower"]), ("eps_estimate_gdp_family", r["eps_estimate_gdp_family"]),
            ("extra_assumptions", ", ".join(rep.extra_assumptions)),
            ("note", "valid for μ-GDP claims; the ε is a lower bound only if the trade-off curve is Gaussian")]


def cmd_gdp(args) -> int:
    from audits.statistics.gdp import from_rates

    with claimed_output(args) as out:
        _check_runs(args, "hypotheses")
        rep = from_rates(args.false_positives, args.runs_out, args.false_negatives, args.runs_in, delta=args.delta,
                         confidence=args.confidence, n_hypotheses=args.hypotheses)
        return emit_report(args, rep, _gdp_rows(rep) + [("FPR_up", rep.result["fpr_up"]),
                                                        ("FNR_up", rep.result["fnr_up"])], out)


def cmd_fdp_one_run(args) -> int:
    from audits.statistics.gdp import fdp_one_run

    with claimed_output(args) as out:
        check_counts(args)
        rep = fdp_one_run(args.canaries, args.guesses, args.correct, delta=args.delta, confidence=args.confidence)
        return emit_report(args, rep, _gdp_rows(rep), out)
