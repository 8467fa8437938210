"""`privcheck audit selection`: black-box pair audit of PrivBoN or PrivITP on a worst-case pair (docs/audits.md).

    privcheck audit selection --mechanism privbon|privitp [--pair worst|example|phase1] [--sigma S]
        [--candidates N] [--sensitivity D] [--r-max R] [--headroom L] [--lambda-tilde X|auto]
        [--target T|fallback] [--event-family target|singletons|prefixes|thresholds ...]
        [--criterion plugin_ratio|predicted_bound] [--split-frac F]
        --samples N --out DIR [--seed S] [--confidence C] [--delta D] [--json]

Pairs (audits.selection_pairs): PrivBoN `worst` (--sigma is the Gumbel scale) and `example` (the
exponential-mechanism pair, ln-ratio 0.5000); PrivITP `worst` (Phase 2 given a fixed λ̃, event {t = target};
--sigma is σ_Z, and `--lambda-tilde auto` picks λ̃ from the exact law so that the event is auditable at
--samples) and `phase1` (the λ̃ release; --sigma is σ_X, --delta the Phase-1 δ).

Writes the sealed artifact DIR/audit.json (audits.statistics.report.write_audit: schema-validated, atomic) and prints a
table, or with --json one JSON object: the audit report with `eps_lower`, `epsilon_certified` (the claim
compared with: the certified ε, or for PrivITP the largest certified ex-post loss over the tested event),
`exact_log_ratio` (exact law of the reference mechanism, for the tested event) and `artifact` at the top
level. Every argument is validated before any sampling and before anything is written (InvalidParameter,
exit 2 through `privcheck.cli.main`). `audits.cli` registers `add_selection_parser` under `audit`.
"""

from __future__ import annotations

import dataclasses

from privcheck.cli_args import integer, number, seed

DEFAULTS = {  # per mechanism: (sigma, candidates, sensitivity)
    "privbon": (2.0, 16, 1.0),
    "privitp": (0.25, 4, 0.25),
}
FAMILY_CHOICES = ("target", "singletons", "prefixes", "thresholds")


def add_selection_parser(audit_subparsers, common) -> None:
    """Add `selection` under the `audit` verb (`audit_subparsers` is the verb's subparsers action)."""
    p = audit_subparsers.add_parser(
        "selection", parents=[common],
        help="black-box pair audit of PrivBoN / PrivITP on a worst-case neighbour pair: ε lower bound")
    p.add_argument("--mechanism", choices=("privbon", "privitp"), required=True)
    p.add_argument("--pair", choices=("worst", "example", "phase1"), default="worst",
                   help="worst (default); example: the exponential-mechanism pair (privbon); phase1: the λ̃ "
                        "release (privitp)")
    p.add_argument("--sigma", type=number, default=None,
                   help="noise scale: PrivBoN Gumbel σ (default 2), PrivITP σ_Z (default 0.25; σ_X for phase1)")
    p.add_argument("--candidates", type=integer, default=None, help="n (default 16 PrivBoN, 4 PrivITP)")
    p.add_argument("--sensitivity", type=number, default=None, help="score sensitivity Δ (default 1 / 0.25)")
    p.add_argument("--r-max", type=number, default=1.0, help="public upper score bound (default 1; r_lo = 0)")
    p.add_argument("--headroom", type=number, default=0.5, help="PrivITP headroom L >= 0 (default 0.5)")
    p.add_argument("--beta", type=number, default=0.05, help="PrivITP β (default 0.05)")
    p.add_argument("--lambda-tilde", default="auto",
                   help="PrivITP released λ̃ fixed by the harness, or 'auto' (exact-law plan; default)")
    p.add_argument("--target", default="1", help="PrivITP target halting time 1..n or 'fallback' (default 1)")
    p.add_argument("--event-family", choices=FAMILY_CHOICES, nargs="+", default=None,
                   help="events searched on the selection half (default: the pair's target event; thresholds "
                        "for phase1)")
    p.add_argument("--criterion", choices=("plugin_ratio", "predicted_bound"), default=None,
                   help="event choice on the selection half (default plugin_ratio; predicted_bound for phase1)")
    p.add_argument("--split-frac", type=number, default=0.5, help="fraction of draws that select (default 0.5)")
    p.add_argument("--samples", type=integer, required=True, help="draws per side, N >= 2")
    p.add_argument("--out", required=True, help="directory for the sealed artifact audit.json")
    p.add_argument("--seed", type=seed, default=None, help="seed of the audit and the samplers, in [0, 2^63 − 1] "
                                                             "(default: OS entropy)")
    p.add_argument("--confidence", type=number, default=0.95, help="1 − p, in (0, 1) (default 0.95)")
    p.add_argument("--delta", type=number, default=None,
                   help="δ of the audited claim (default 0 for the pure pairs; 1e-5, the Phase-1 δ, for phase1)")
    p.set_defaults(func=cmd_audit_selection)


def _target(text: str, candidates: int):
    from privcheck import validation as v
    from privcheck.errors import InvalidParameter

    allowed = f"an integer in [1, candidates={candidates}] or 'fallback'"
    if text == "fallback":
        return None
    try:
        return v.count("target", int(text), 1, candidates)
    except ValueError:
        raise InvalidParameter("target", text, allowed) from None


def _lambda(text: str):
    from privcheck import validation as v
    from privcheck.errors import InvalidParameter

    if text == "auto":
        return None
    try:
        return v.finite("lambda_tilde", float(text))
    except ValueError:
        raise InvalidParameter("lambda_tilde", text, "a finite number or 'auto'") from None


def _settings(args):
    """(sigma, candidates, sensitivity) with the mechanism's defaults filled in."""
    sigma, candidates, sensitivity = DEFAULTS[args.mechanism]
    return (sigma if args.sigma is None else args.sigma, candidates if args.candidates is None else args.candidates,
            sensitivity if args.sensitivity is None else args.sensitivity)


def _privitp_params(args):
    """The PrivITP constants of the arguments (validated by `PrivITPParams`; builds nothing)."""
    from privcheck.accounting import PrivITPParams

    sigma, candidates, sensitivity = _settings(args)
    phase1_delta = 1e-5 if args.delta is None else args.delta
    if args.pair != "phase1" and not 0 < phase1_delta < 1:
        phase1_delta = 1e-5                    # Phase 2 given λ̃ does not involve the Phase-1 δ
    return PrivITPParams(candidates=candidates, beta=args.beta, sigma_x=sigma, sigma_z=sigma, headroom=args.headroom,
                         sensitivity=sensitivity, delta=phase1_delta, r_max=args.r_max)


def _validate(args) -> None:
    """Every argument, checked before any pair is built, anything sampled or written (the mechanism's constants by
    the accountant's own event and parameter types, which compute nothing)."""
    from audits import selection_pairs as sp
    from privcheck import validation as v
    from privcheck.accounting import PrivBoNEvent
    from privcheck.errors import InvalidParameter

    v.open_unit("confidence", args.confidence)
    v.open_unit("split_frac", args.split_frac)
    if args.delta is not None:
        v.half_open_unit("delta", args.delta)
    if args.mechanism == "privbon" and args.pair == "phase1":
        raise InvalidParameter("pair", args.pair, "'worst' or 'example' for privbon")
    if args.mechanism == "privitp" and args.pair == "example":
        raise InvalidParameter("pair", args.pair, "'worst' or 'phase1' for privitp")
    if args.pair == "phase1" and args.delta is not None and args.delta == 0.0:
        raise InvalidParameter("delta", args.delta, "(0, 1) for the Phase-1 release (an approximate-DP claim)")
    sigma, candidates, sensitivity = _settings(args)
    v.count("candidates", candidates, 1, sp.MAX_CANDIDATES)
    _target(args.target, candidates), _lambda(args.lambda_tilde)     # checked even where the pair ignores them
    v.positive("sigma", sigma), v.positive("beta", args.beta), v.nonnegative("headroom", args.headroom)
    if args.mechanism == "privbon":
        PrivBoNEvent(sensitivity, sigma, candidates=candidates, r_max=args.r_max)
    else:
        _privitp_params(args)
    sp.check_samples(args.samples, 2 if args.pair == "example" else candidates)


def build_pair(args):
    """The SelectionPair for validated arguments (the plan for `--lambda-tilde auto` uses the exact law)."""
    from audits import selection_pairs as sp

    sigma, candidates, sensitivity = _settings(args)
    if args.mechanism == "privbon":
        if args.pair == "example":
            return sp.exponential_mechanism_pair()
        return sp.privbon_worst_pair(sensitivity, sigma, candidates, args.r_max)
    params = _privitp_params(args)
    if args.pair == "phase1":
        return sp.privitp_phase1_pair(params)
    target, lambda_tilde = _target(args.target, candidates), _lambda(args.lambda_tilde)
    if lambda_tilde is None:
        lambda_tilde = sp.plan_privitp_phase2(params, target, args.samples, confidence=args.confidence,
                                              split_frac=args.split_frac).lambda_tilde
    return sp.privitp_phase2_pair(params, lambda_tilde, target)


def _families(args, pair):
    from audits.blackbox import Fixed, Singletons, Thresholds, TopPrefixes

    if args.event_family is None:
        return None
    make = {"singletons": Singletons, "prefixes": TopPrefixes, "thresholds": Thresholds}
    out = []
    for name in args.event_family:
        if name == "target":
            if pair.target is not None:
                out.append(Fixed((pair.target,)))
        else:
            out.append(make[name]())
    return tuple(out)


def cmd_audit_selection(args) -> int:
    from privcheck.artifacts import claim_output_directory

    with claim_output_directory(args.out, name="out") as out:
        return _audit_selection(args, out)


def _audit_selection(args, out) -> int:
    from audits.blackbox import Event
    from audits.statistics.report import audit_document, write_audit
    from privcheck.cli import emit

    _validate(args)
    pair = build_pair(args)
    criterion = args.criterion or ("predicted_bound" if args.pair == "phase1" else "plugin_ratio")
    delta = pair.delta if args.delta is None else args.delta
    if delta != pair.delta:
        pair = dataclasses.replace(pair, delta=delta)
    report = pair.audit(args.samples, seed=args.seed, confidence=args.confidence, split_frac=args.split_frac,
                        event_family=_families(args, pair), criterion=criterion)
    res = report.result
    e = res["event"]
    event = Event(e["family"], tuple(e["outputs"] or ()), e["op"], e["threshold"])
    exact = pair.exact_log_ratio(event, res["direction"])
    doc = audit_document(report)
    path = write_audit(report, out, document=doc)
    payload = {**doc, "artifact": str(path), **report.headline(), "epsilon_certified": report.claim["epsilon"],
               "exact_log_ratio": exact if abs(exact) != float("inf") else None}
    shown = e["outputs"] if e["op"] is None else f"{e['op']} {e['threshold']:.6g}"
    rows = [("eps_lower", res["eps_lower"]), ("epsilon certified (claim)", report.claim["epsilon"]),
            ("exact ln-ratio of the event", exact), ("rejects claim", res["rejects_nominal"]),
            ("pair", res["pair_id"]), ("event", f"{e['family']}: {shown}"), ("direction", res["direction"]),
            ("k1 / n1, k2 / n2", f"{res['k1']} / {res['n1_test']}, {res['k2']} / {res['n2_test']}"),
            ("p1_lo, p2_up", f"{res['p1_lo']:.6g}, {res['p2_up']:.6g}"), ("confidence", args.confidence),
            ("delta", delta), ("artifact", str(path)), ("sha256", doc["sha256"])]
    emit(args, payload, rows)
    return 0


__all__ = ["add_selection_parser", "build_pair", "cmd_audit_selection"]
