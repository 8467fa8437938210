"""`privcheck` command line. Each subcommand prints one JSON object with --json, a table otherwise.

Every argument is checked before any work starts, output directories included (claimed and locked by
`privcheck.artifacts.claim_output_directory` before the first computation). Errors go to stderr as one line.

Exit status (the same for every subcommand):

* 0 — done.
* 1 — done, with a negative result: `verify` found a failing check, `report` found an artifact that does not
  check out (a first-line warning on stdout), or a run stopped at its wall-clock guard (status "incomplete").
* 2 — the input or the environment is at fault. Bad input is refused before any work, with nothing written: a
  usage error (argparse), an invalid parameter (`privcheck: error: invalid NAME=VALUE: allowed range is ...`) or
  another writer holding the output directory (`privcheck: error: invalid out=...: process PID is writing this
  directory ...`). An operating-system error reading an input or writing an output (`privcheck: error: PATH:
  reason`) leaves no partial artifact either.
* 3 — internal error: an unexpected exception, reported as `privcheck: internal error: TYPE: message (rerun with
  --debug for the traceback)`; `privcheck --debug ...` (or `--debug` after the subcommand) prints the traceback.
* 130 — interrupted (SIGINT, Ctrl-C, or SIGTERM, which every command turns into the same interruption), wherever
  the signal landed, native code included (an extension that turns the KeyboardInterrupt of a Python callback into
  another exception): `privcheck: interrupted`, no traceback. Nothing was committed: the output directory is as it
  was. Every command's commit is its last act, so a signal during or after it lets the command finish with its
  status (`privcheck.interrupts`; docs/artifacts.md, "Interrupted commands").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from pathlib import Path

import privcheck
from privcheck.cli_args import integer, number, seed
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.serialization import jsonable

__all__ = ["EXIT_FAILED", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "dispatch",
           "dpsgd_event", "emit", "epsilon_in_range", "main", "scheme_event"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_STATUS_HELP = """exit status:
  0    done
  1    done, with a negative result (a failing verify check, an artifact that does not check out, a run
       stopped by its wall-clock guard)
  2    bad input (refused before any work, nothing written) or an error reading an input or writing an output
  3    internal error (rerun with --debug for the traceback)
  130  interrupted (Ctrl-C, SIGTERM); nothing was written"""


def emit(args, payload: dict, rows: list[tuple[str, object]]) -> None:
    """Print `payload` as one JSON object with --json, else `rows` as an aligned table (plugins use it)."""
    if args.json:
        print(json.dumps(jsonable(payload), sort_keys=True, allow_nan=False))
        return
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        shown = f"{value:.10g}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")


# --- subcommands --------------------------------------------------------------------------------------

def epsilon_in_range(eps: float, name: str, value) -> None:
    """Refuse, naming the parameter `name` that drives it, an ε beyond the documented range of every ε figure,
    (0, EPS_MAX = 10⁴] (docs/accounting.md: a larger ε is no guarantee, and 2Δ/σ with σ = 1e-300 would print 2e+300);
    such an ε is never printed."""
    from privcheck.accounting.gaussian import EPS_MAX
    if not eps <= EPS_MAX:                   # NaN too
        raise InvalidParameter(name, value, f"values whose epsilon is at most {EPS_MAX:g} (the range of every "
                                            f"epsilon privcheck reports; here epsilon = {eps:.4g})")


def _history(text: str):
    """--history: "σ:q:steps,..." or a JSON file holding [[σ, q, steps], ...] (an Opacus accountant's history) or
    {"phases": [{"noise_multiplier", "sampling_rate", "steps"}, ...]}."""
    from privcheck.accounting import CompositionHistory, PoissonGaussianEvent
    path = Path(text)
    if not path.suffix == ".json":
        return CompositionHistory.parse(text)
    from privcheck.inputs import read_json
    doc = read_json(path, "history", "history")       # a regular file, bounded, strict JSON (privcheck.inputs)
    if isinstance(doc, dict) and isinstance(doc.get("phases"), list):
        try:
            return CompositionHistory(tuple(PoissonGaussianEvent(
                sampling_rate=p["sampling_rate"], noise_multiplier=p["noise_multiplier"], steps=p["steps"])
                for p in doc["phases"]))
        except (KeyError, TypeError):
            raise InvalidParameter("history", text, "phases with sampling_rate, noise_multiplier and steps") from None
    return CompositionHistory.from_opacus(doc)


def dpsgd_event(args):
    from privcheck.accounting import PoissonGaussianEvent
    given = [name for name in ("sampling_rate", "noise_multiplier", "steps") if getattr(args, name) is not None]
    if args.history is not None:
        if given:
            raise InvalidParameter(given[0], getattr(args, given[0]), "not given together with --history")
        return _history(args.history)
    for name in ("sampling_rate", "noise_multiplier", "steps"):
        if getattr(args, name) is None:
            raise InvalidParameter(name, None, "required (or give --history)")
    return PoissonGaussianEvent(args.sampling_rate, args.noise_multiplier, args.steps)


# What each --sampling needs (besides --noise-multiplier and --delta): the event's parameters in order.
SCHEME_ARGS = {
    "fixed-size": ("dataset_size", "batch_size", "steps"),
    "fixed-size-replacement": ("dataset_size", "batch_size", "steps"),
    "shuffle": ("dataset_size", "batch_size", "epochs"),
    "balls-in-bins": ("steps_per_epoch", "epochs"),
    "truncated-poisson": ("dataset_size", "sampling_rate", "max_batch_size", "steps"),
}
_SCHEME_ONLY = ("dataset_size", "batch_size", "epochs", "steps_per_epoch", "max_batch_size")


def scheme_event(args):
    """The event of `--sampling` other than poisson; every needed option present and no other one given, checked
    before any work (docs/accounting.md, "Sampling schemes")."""
    from privcheck.accounting import (
        BallsInBinsGaussianEvent,
        FixedSizeGaussianEvent,
        ShuffledGaussianEvent,
        TruncatedPoissonGaussianEvent,
    )
    needed = SCHEME_ARGS[args.sampling]
    if args.history is not None:
        raise InvalidParameter("history", args.history, "only with --sampling poisson")
    for name in ("noise_multiplier", *needed):
        if getattr(args, name) is None:
            raise InvalidParameter(name, None, f"required with --sampling {args.sampling} (needs --"
                                               + " --".join(n.replace("_", "-") for n in needed)
                                               + " --noise-multiplier)")
    for name in ("sampling_rate", "steps", *_SCHEME_ONLY):
        if name not in needed and getattr(args, name) is not None:
            raise InvalidParameter(name, getattr(args, name), f"not used by --sampling {args.sampling}")
    a = args
    if a.sampling in ("fixed-size", "fixed-size-replacement"):
        return FixedSizeGaussianEvent(a.dataset_size, a.batch_size, a.noise_multiplier, a.steps,
                                      replacement=a.sampling == "fixed-size-replacement")
    if a.sampling == "shuffle":
        return ShuffledGaussianEvent(a.dataset_size, a.batch_size, a.noise_multiplier, a.epochs)
    if a.sampling == "balls-in-bins":
        return BallsInBinsGaussianEvent(a.steps_per_epoch, a.noise_multiplier, a.epochs)
    return TruncatedPoissonGaussianEvent(a.dataset_size, a.sampling_rate, a.max_batch_size, a.noise_multiplier,
                                         a.steps)


def cmd_account_scheme(args) -> int:
    """`account dp-sgd --sampling X` for X other than poisson: the record, its certified ends (upper null with the
    reason where none is proven) and the Poisson figure at the same rate and steps beside it."""
    from privcheck.accounting import epsilon
    event = scheme_event(args)
    rec = epsilon(event, args.delta)
    if math.isfinite(rec.value):
        epsilon_in_range(rec.value, "noise_multiplier", args.noise_multiplier)
    cert = rec.certified
    lower = None if cert is None else cert.lower
    upper = None if cert is None or not math.isfinite(cert.upper) else cert.upper
    poisson = rec.details.get("poisson_add_remove_epsilon")
    payload = {"epsilon": rec.value, "delta": args.delta, "sampling": args.sampling, "neighboring": rec.neighboring,
               "certified_lower": lower, "certified_upper": upper, "reason": rec.reason,
               "poisson_epsilon": poisson, "record": rec.to_json()}
    rows = [("epsilon (upper bound)", rec.value if upper is not None else "none proven"),
            ("certified lower bound", lower if lower is not None else "none"), ("delta", args.delta),
            ("sampling", args.sampling), ("neighbouring relation", rec.neighboring)]
    replace_lower = rec.details.get("lower_replace_one")
    if replace_lower is not None:
        payload["certified_lower_replace_one"] = replace_lower
        rows.append(("lower bound (replace-one)", replace_lower))
    if rec.reason:
        rows.append(("reason", rec.reason))
    if poisson is not None:
        rows.append(("poisson figure (not a bound)", poisson))
    emit(args, payload, rows)
    return 0


def cmd_account_dpsgd(args) -> int:
    from privcheck.accounting import epsilon
    if getattr(args, "sampling", "poisson") != "poisson":
        return cmd_account_scheme(args)
    for name in _SCHEME_ONLY:
        if getattr(args, name, None) is not None:
            raise InvalidParameter(name, getattr(args, name), "only with --sampling other than poisson")
    event = dpsgd_event(args)
    pld = epsilon(event, args.delta)
    floats = epsilon(event, args.delta, method="pld_float")
    rdp = epsilon(event, args.delta, method="rdp")
    main, others = (pld, (floats, rdp)) if args.accountant == "pld" else (rdp, (pld, floats))
    for rec in (main, *others):
        epsilon_in_range(rec.value, *(("history", args.history) if args.history is not None
                                       else ("noise_multiplier", args.noise_multiplier)))
    payload = {"epsilon": main.value, "delta": args.delta, "accountant": args.accountant,
               "cross_check": {"accountant": others[-1].method, "epsilon": jsonable(others[-1].value)},
               "cross_checks": {o.method: jsonable(o.value) for o in others},
               "record": main.to_json()}
    if pld.certified is not None:
        payload["enclosure"] = [pld.certified.lower, pld.certified.upper]
    rows = [("epsilon", main.value), ("delta", args.delta), ("accountant", args.accountant)]
    if pld.certified is not None:
        rows.append(("pld enclosure", f"[{pld.certified.lower:.9f}, {pld.certified.upper:.9f}]"))
    rows += [(f"{o.method} (cross-check)", o.value) for o in others]
    if main.method == "rdp":
        rows.append(("rdp order", main.details["order"]))
    if args.history is not None:
        rows.append(("phases", len(event.phases)))
        rows.append(("steps (total)", event.steps))
    emit(args, payload, rows)
    return 0


def cmd_calibrate_dpsgd(args) -> int:
    from privcheck.accounting import calibrate_sigma
    cal = calibrate_sigma(args.sampling_rate, args.steps, args.delta, args.epsilon)
    payload = {"noise_multiplier": cal.value, "epsilon": cal.epsilon, "target_epsilon": args.epsilon,
               "delta": args.delta, "bracket": list(cal.bracket), "record": cal.to_json()}
    emit(args, payload, [("noise_multiplier", repr(cal.value)), ("epsilon (achieved)", cal.epsilon),
                          ("target epsilon", args.epsilon), ("bracket", f"[{cal.bracket[0]!r}, {cal.bracket[1]!r}]"),
                          ("PLD evaluations", cal.evaluations)])
    return 0


def cmd_calibrate_steps(args) -> int:
    from privcheck.accounting import calibrate_steps
    cal = calibrate_steps(args.sampling_rate, args.noise_multiplier, args.delta, args.epsilon)
    payload = {"steps": int(cal.value), "epsilon": cal.epsilon, "target_epsilon": args.epsilon,
               "delta": args.delta, "record": cal.to_json()}
    emit(args, payload, [("steps", int(cal.value)), ("epsilon (achieved)", cal.epsilon),
                          ("target epsilon", args.epsilon)])
    return 0


def cmd_account_gaussian(args) -> int:
    from privcheck.accounting import GaussianEvent, epsilon
    rec = epsilon(GaussianEvent(args.sigma, args.sensitivity), args.delta)
    epsilon_in_range(rec.value, "sigma", args.sigma)
    payload = {"epsilon": rec.value, "delta": args.delta, "enclosure": [rec.certified.lower, rec.certified.upper],
               "record": rec.to_json()}
    emit(args, payload, [("epsilon", rec.value), ("delta", args.delta),
                          ("enclosure", f"[{rec.certified.lower!r}, {rec.certified.upper!r}]"),
                          ("method", "analytic Gaussian (Balle-Wang), certified in Arb")])
    return 0


def _enclosure(rec) -> list[float]:
    return [rec.certified.lower, rec.certified.upper]


def cmd_account_privbon(args) -> int:
    from privcheck.accounting import PrivBoNEvent, epsilon
    if (args.candidates is None) != (args.r_max is None):
        raise InvalidParameter("candidates" if args.candidates is None else "r_max", None,
                               "--candidates and --r-max are given together")
    nominal = epsilon(PrivBoNEvent(args.sensitivity, args.sigma, mode="nominal"))
    epsilon_in_range(nominal.value, "sigma", args.sigma)         # 2Δ/σ, before the bounded-range integral
    payload = {"epsilon": nominal.value, "epsilon_enclosure": _enclosure(nominal), "record": nominal.to_json()}
    rows = [("epsilon (2Δ/σ)", nominal.value)]
    if args.candidates is not None:
        exact = epsilon(PrivBoNEvent(args.sensitivity, args.sigma, candidates=args.candidates, r_max=args.r_max,
                                     r_lo=args.r_lo))
        epsilon_in_range(exact.value, "sigma", args.sigma)
        payload.update(epsilon_bounded_range=exact.value, epsilon_bounded_range_enclosure=_enclosure(exact),
                       bounded_range_record=exact.to_json())
        rows.append((f"epsilon_bounded_range (n={args.candidates})", exact.value))
    emit(args, payload, rows)
    return 0


def cmd_account_privitp(args) -> int:
    from privcheck.accounting import PrivITPEvent, PrivITPParams, epsilon
    if args.halting_time is None and not args.fallback:
        raise InvalidParameter("halting_time", None, "an integer in 1..candidates, or --fallback")
    params = PrivITPParams(candidates=args.candidates, beta=1.0, sigma_x=args.sigma_x, sigma_z=args.sigma_z,
                           headroom=args.headroom, sensitivity=args.sensitivity, delta=args.delta,
                           r_max=args.r_max, r_lo=args.r_lo)
    rec = epsilon(PrivITPEvent(params, args.lambda_tilde, None if args.fallback else args.halting_time))
    d = rec.details
    epsilon_in_range(d["eps1"], "sigma_x", args.sigma_x)
    epsilon_in_range(rec.value, "sigma_z", args.sigma_z)
    payload = {"eps1": d["eps1"], "kappa": d["kappa"]["value"], "kappa_acc": d["kappa_acc"]["value"],
               "eps2_post": d["eps2_post"]["value"], "epsilon": rec.value, "delta": args.delta, "c": d["c"],
               "halting_time": "fallback" if args.fallback else args.halting_time,
               "enclosures": {"eps1": [d["eps1_record"]["certified"]["lower"], d["eps1_record"]["certified"]["upper"]],
                              "kappa": [d["kappa"]["lower"], d["kappa"]["upper"]],
                              "kappa_acc": [d["kappa_acc"]["lower"], d["kappa_acc"]["upper"]],
                              "eps2_post": [d["eps2_post"]["lower"], d["eps2_post"]["upper"]],
                              "epsilon": _enclosure(rec)},
               "record": rec.to_json()}
    emit(args, payload, [("eps1", d["eps1"]), ("kappa", d["kappa"]["value"]), ("kappa_acc", d["kappa_acc"]["value"]),
                         ("eps2_post", d["eps2_post"]["value"]), ("epsilon (eps1 + eps2_post)", rec.value),
                         ("delta", args.delta), ("c", d["c"])])
    return 0


def cmd_account_rnm(args) -> int:
    from privcheck.accounting import GaussianReportNoisyMaxEvent, epsilon
    a, b = args.range
    rec = epsilon(GaussianReportNoisyMaxEvent(args.queries, args.sigma, args.sensitivity, a, b))
    epsilon_in_range(rec.value, "sigma", args.sigma)
    emit(args, {"epsilon": rec.value, "enclosure": _enclosure(rec), "record": rec.to_json()},
         [("epsilon", rec.value), ("enclosure", f"[{rec.certified.lower!r}, {rec.certified.upper!r}]"),
          ("guarantee", "pure ex-ante (same loss for every output)")])
    return 0


def cmd_account_at(args) -> int:
    from privcheck.accounting import GaussianAboveThresholdEvent, epsilon
    a, b = args.range
    rec = epsilon(GaussianAboveThresholdEvent(args.halting_time, args.threshold, args.sigma_threshold,
                                              args.sigma_query, args.sensitivity, a, b))
    epsilon_in_range(rec.value, "sigma_query", args.sigma_query)
    emit(args, {"epsilon": rec.value, "enclosure": _enclosure(rec), "record": rec.to_json()},
         [("epsilon", rec.value), ("enclosure", f"[{rec.certified.lower!r}, {rec.certified.upper!r}]"),
          ("guarantee", f"pure ex-post, for halting at round {args.halting_time}")])
    return 0


def cmd_convert_group(args) -> int:
    from privcheck.accounting import group_privacy
    rec = group_privacy(args.epsilon, args.delta, args.k)
    epsilon_in_range(args.epsilon, "epsilon", args.epsilon)
    epsilon_in_range(rec.value, "k", args.k)
    payload = {"epsilon": rec.value, "delta": rec.details["delta"], "k": args.k, "record": rec.to_json()}
    emit(args, payload, [("epsilon", rec.value), ("delta", rec.details["delta"]), ("k", args.k)])
    return 0


def cmd_convert_replace_one(args) -> int:
    from privcheck.accounting import replace_one
    rec = replace_one(args.epsilon, args.delta)
    epsilon_in_range(rec.value, "epsilon", args.epsilon)
    payload = {"epsilon": rec.value, "delta": rec.details["delta"], "record": rec.to_json()}
    emit(args, payload, [("epsilon", rec.value), ("delta", rec.details["delta"]),
                          ("neighboring", "replace_one")])
    return 0


def cmd_verify(args) -> int:
    from privcheck.artifacts import claim_output_directory
    from privcheck.verify import run_verification, write_verification
    key = None
    if args.sign is not None:            # read before any work: a bad key file is a usage error, not a lost run
        from privcheck.artifacts.signature import load_private_key
        key = load_private_key(args.sign, "sign")
    with claim_output_directory(args.out, name="out") as out:
        doc = run_verification(args.suite, seed=args.seed)
        path = write_verification(doc, out, signing_key=key)
    s = doc["summary"]
    payload = {"status": doc["status"], "artifact": str(path), "sha256": doc["sha256"], **s}
    rows = [("status", doc["status"]), ("checks", f"{s['passed']}/{s['checks']} passed"),
            ("artifact", str(path)), ("report", str(Path(args.out) / "report.md")), ("sha256", doc["sha256"])]
    if key is not None:
        from privcheck.artifacts.signature import SIGNATURE, fingerprint
        payload["signature"] = {"file": str(Path(args.out) / SIGNATURE), "fingerprint": fingerprint(key.public_key())}
        rows.append(("signature", f"{Path(args.out) / SIGNATURE} (ed25519, {fingerprint(key.public_key())})"))
    rows += [("FAILED", c["name"]) for c in doc["checks"] if not c["passed"]]
    emit(args, payload, rows)
    return 0 if doc["status"] == "pass" else 1


def _report_runs(args) -> int:
    """`privcheck report` on a run directory (run-*.json, no verification.json): check every run artifact."""
    from privcheck.artifacts.report import EXIT_PROBLEMS, check_run_artifacts, warning_line
    checked = check_run_artifacts(args.dir)
    bad = [(path, problems) for path, _, problems in checked if problems]
    warning = warning_line(bad[0][1], str(bad[0][0])) if bad else None
    payload = {"intact": not bad, "warning": warning,
               "artifacts": [{"artifact": str(path), "problems": problems, "sha256": doc.get("sha256")}
                             for path, doc, problems in checked]}
    rows = [(f"problem {path.name}", p) for path, _, problems in checked for p in problems]
    rows += [(path.name, "intact" if not problems else f"{len(problems)} problem(s)") for path, _, problems in checked]
    if warning and not args.json:
        print(warning)
    emit(args, payload, rows)
    return EXIT_PROBLEMS if bad else 0


def cmd_report(args) -> int:
    """Exit 0 when the artifact checks out, EXIT_PROBLEMS (1) with a first-line warning when it does not."""
    from privcheck.artifacts.report import ARTIFACT, EXIT_PROBLEMS, RUN_ARTIFACTS, render_report, warning_line
    if not (Path(args.dir) / ARTIFACT).is_file() and any(Path(args.dir).glob(RUN_ARTIFACTS)):
        return _report_runs(args)
    done = render_report(args.dir, trust=args.trust)
    warning = warning_line(done.problems, str(done.artifact)) if done.problems else None
    counts = done.counts or {}
    payload = {"report": str(done.report), "artifact": str(done.artifact), "intact": not done.problems,
               "warning": warning, "problems": done.problems, "sha256": done.sha256,
               "sha256_recomputed": done.sha256_recomputed, "status": counts.get("status"),
               "checks": counts.get("checks"), "passed": counts.get("passed"), "failed": counts.get("failed"),
               "suites": counts.get("suites"), "signature": done.signature, "rederived": list(done.rederived),
               "not_rederived": list(done.not_rederived)}
    rows = [("problem", p) for p in done.problems]
    if counts:
        rows += [("status", f"{counts['status']} (counted from the checks)"),
                 ("checks", f"{counts['passed']}/{counts['checks']} passed"),
                 ("verdicts", f"{len(done.rederived)}/{counts['checks']} re-derived from the recorded figures"
                              + (f"; not re-derivable: {len(done.not_rederived)} (listed in report.md)"
                                 if done.not_rederived else ""))]
        rows += [(f"suite {name}", f"{c['passed']}/{c['checks']} passed") for name, c in counts["suites"].items()]
    rows += [("signature", done.signature)] if done.signature is not None else []
    rows += [("sha256", done.sha256 + ("" if done.sha256 == done.sha256_recomputed else
                                       f" (MISMATCH: recomputed {done.sha256_recomputed})")),
             ("report", str(done.report))]
    if warning and not args.json:
        print(warning)
    emit(args, payload, rows)
    return EXIT_PROBLEMS if done.problems else 0


# --- parser -------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The whole command line: privcheck's own commands and those of every `privcheck.commands` plugin."""
    parser, _, verbs, common = _core_parser()
    _register_plugins(verbs, common)
    return parser


def _core_parser():
    """(parser, its subcommands action, the plugin verbs' subparsers, the --json parent) with privcheck's own
    commands only."""
    p = _Parser(prog="privcheck", description=__doc__.splitlines()[0], epilog=EXIT_STATUS_HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"privcheck {privcheck.__version__}")
    p.add_argument("--debug", action="store_true", help="print the traceback of an internal error (exit 3)")
    sub = p.add_subparsers(dest="command", required=True)
    common = common_parent()

    account = sub.add_parser("account", help="privacy loss of a mechanism").add_subparsers(dest="what", required=True)
    a = account.add_parser("dp-sgd", parents=[common], help="Poisson-subsampled Gaussian composed T times")
    a.add_argument("--sampling-rate", type=number, help="q in (0, 1]")
    a.add_argument("--noise-multiplier", type=number, help="σ > 0")
    a.add_argument("--steps", type=integer, help="T >= 1")
    a.add_argument("--history", help="instead of the three above: phases 'σ:q:steps,σ:q:steps,...' or a JSON "
                                     "file (an Opacus accountant's history [[σ, q, steps], ...])")
    a.add_argument("--delta", type=number, required=True, help="δ in (0, 1)")
    a.add_argument("--accountant", choices=("pld", "rdp"), default="pld")
    a.add_argument("--sampling", choices=("poisson", *SCHEME_ARGS), default="poisson",
                   help="how batches are drawn (docs/accounting.md, 'Sampling schemes'); other than poisson: "
                        "fixed-size(-replacement): --dataset-size --batch-size --steps; shuffle: --dataset-size "
                        "--batch-size --epochs; balls-in-bins: --steps-per-epoch --epochs; truncated-poisson: "
                        "--dataset-size --sampling-rate --max-batch-size --steps")
    a.add_argument("--dataset-size", type=integer, help="n >= 1 (public)")
    a.add_argument("--batch-size", type=integer, help="b in [1, n]")
    a.add_argument("--epochs", type=integer, help="E >= 1")
    a.add_argument("--steps-per-epoch", type=integer, help="t >= 1 (balls-in-bins)")
    a.add_argument("--max-batch-size", type=integer, help="public maximum batch size (truncated-poisson)")
    a.set_defaults(func=cmd_account_dpsgd)
    g = account.add_parser("gaussian", parents=[common], help="Gaussian mechanism (exact, certified)")
    g.add_argument("--sensitivity", type=number, required=True, help="L2 sensitivity Δ > 0")
    g.add_argument("--sigma", type=number, required=True, help="noise standard deviation σ > 0")
    g.add_argument("--delta", type=number, required=True, help="δ in (0, 1)")
    g.set_defaults(func=cmd_account_gaussian)
    pb = account.add_parser("privbon", parents=[common], help="PrivBoN (exponential mechanism), certified")
    pb.add_argument("--sensitivity", type=number, required=True, help="score sensitivity Δ > 0")
    pb.add_argument("--sigma", type=number, required=True, help="Gumbel scale σ > 0")
    pb.add_argument("--candidates", type=integer, help="n >= 1 (with --r-max: bounded-range ε_BoN(n))")
    pb.add_argument("--r-max", type=number, help="upper score bound (public)")
    pb.add_argument("--r-lo", type=number, default=0.0, help="lower score bound (default 0)")
    pb.set_defaults(func=cmd_account_privbon)
    pi = account.add_parser("privitp", parents=[common], help="PrivITP ex-post loss of one query, certified")
    pi.add_argument("--sensitivity", type=number, required=True, help="score sensitivity Δ")
    pi.add_argument("--r-max", type=number, required=True)
    pi.add_argument("--r-lo", type=number, default=0.0)
    pi.add_argument("--sigma-x", type=number, required=True, help="Phase-1 noise std σ_X")
    pi.add_argument("--sigma-z", type=number, required=True, help="Phase-2 noise std σ_Z")
    pi.add_argument("--headroom", type=number, required=True, help="L >= 0 (units of σ_Z)")
    pi.add_argument("--candidates", type=integer, required=True, help="n per phase")
    pi.add_argument("--lambda-tilde", type=number, required=True, help="the released λ̃")
    stop = pi.add_mutually_exclusive_group(required=True)
    stop.add_argument("--halting-time", type=integer, help="round t of acceptance (1..n)")
    stop.add_argument("--fallback", action="store_true", help="nothing was accepted")
    pi.add_argument("--delta", type=number, required=True, help="Phase-1 δ in (0, 1)")
    pi.set_defaults(func=cmd_account_privitp)
    rn = account.add_parser("gaussian-rnm", parents=[common], help="Gaussian Report-Noisy-Max, certified")
    rn.add_argument("--sigma", type=number, required=True)
    rn.add_argument("--sensitivity", type=number, required=True)
    rn.add_argument("--queries", type=integer, required=True, help="number of queries d >= 1")
    rn.add_argument("--range", type=number, nargs=2, metavar=("A", "B"), default=(0.0, 1.0))
    rn.set_defaults(func=cmd_account_rnm)
    at = account.add_parser("gaussian-above-threshold", parents=[common],
                            help="Gaussian AboveThreshold, ex-post, certified")
    at.add_argument("--threshold", type=number, required=True, help="public threshold ρ")
    at.add_argument("--sigma-threshold", type=number, required=True, help="threshold noise σ_X")
    at.add_argument("--sigma-query", type=number, required=True, help="query noise σ_Z")
    at.add_argument("--sensitivity", type=number, required=True)
    at.add_argument("--halting-time", type=integer, required=True, help="round t >= 1")
    at.add_argument("--range", type=number, nargs=2, metavar=("A", "B"), default=(0.0, 1.0))
    at.set_defaults(func=cmd_account_at)

    calibrate = sub.add_parser("calibrate", help="noise or steps for a target (ε, δ)").add_subparsers(
        dest="what", required=True)
    c = calibrate.add_parser("dp-sgd", parents=[common], help="smallest σ with ε ≤ target")
    c.add_argument("--sampling-rate", type=number, required=True)
    c.add_argument("--steps", type=integer, required=True)
    c.add_argument("--delta", type=number, required=True)
    c.add_argument("--epsilon", type=number, required=True, help="target ε > 0")
    c.set_defaults(func=cmd_calibrate_dpsgd)
    cs = calibrate.add_parser("dp-sgd-steps", parents=[common], help="largest T with ε ≤ target")
    cs.add_argument("--sampling-rate", type=number, required=True)
    cs.add_argument("--noise-multiplier", type=number, required=True)
    cs.add_argument("--delta", type=number, required=True)
    cs.add_argument("--epsilon", type=number, required=True)
    cs.set_defaults(func=cmd_calibrate_steps)

    convert = sub.add_parser("convert", help="group privacy and neighbouring relations").add_subparsers(
        dest="what", required=True)
    cg = convert.add_parser("group", parents=[common], help="(kε, k·e^{(k−1)ε}·δ)")
    cg.add_argument("--epsilon", type=number, required=True)
    cg.add_argument("--delta", type=number, required=True)
    cg.add_argument("--k", type=integer, required=True, help="group size k >= 1")
    cg.set_defaults(func=cmd_convert_group)
    cr = convert.add_parser("replace-one", parents=[common], help="(2ε, (1+e^ε)δ) from add/remove")
    cr.add_argument("--epsilon", type=number, required=True)
    cr.add_argument("--delta", type=number, required=True)
    cr.set_defaults(func=cmd_convert_replace_one)

    v = sub.add_parser("verify", parents=[common], help="run verification suites and write the artifact")
    v.add_argument("--out", required=True, help="output directory (verification.json, report.md, plots)")
    v.add_argument("--suite", action="extend", nargs="+", metavar="NAME",
                   help="suite names (repeatable; default: all registered)")
    v.add_argument("--seed", type=seed, default=None, help="seed for suites with statistical checks, in [0, 2^63 − 1]")
    v.add_argument("--sign", metavar="KEY", default=None,
                   help="sign verification.json with this ed25519 private key (unencrypted PEM or OpenSSH file; "
                        "needs privcheck[sign]), writing verification.signature.json")
    v.set_defaults(func=cmd_verify)

    r = sub.add_parser("report", parents=[common], help="render DIR/verification.json as Markdown, or check the run "
                                                        "artifacts DIR/run-*.json")
    r.add_argument("dir")
    r.add_argument("--trust", metavar="PUBKEY", default=None,
                   help="require DIR/verification.signature.json to be a valid ed25519 signature by this public key "
                        "(PEM or OpenSSH file; needs privcheck[sign])")
    r.set_defaults(func=cmd_report)

    verbs = {"account": account, "calibrate": calibrate, "convert": convert,
             "simulate": sub.add_parser("simulate", help="simulations writing curves, plots and an artifact")
             .add_subparsers(dest="what", required=True),
             "run": sub.add_parser("run", help="run a mechanism end to end (presets)")
             .add_subparsers(dest="what", required=True),
             "audit": sub.add_parser("audit", help="empirical privacy audits (lower bounds; see docs/audits.md)")
             .add_subparsers(dest="what", required=True)}
    return p, sub, verbs, common


def _needs_plugins(sub, verbs: dict, argv: list[str]) -> bool:
    """Whether parsing `argv` needs the plugins' commands.

    Plugins only add commands under the verbs (argparse refuses a second subparser of the same name), so the top-level
    options (--help, --version, --debug), `verify`, `report`, an unknown command and a verb with one of privcheck's
    own subcommands parse and run the same without them; `main` then skips loading them, and with them torch and
    the mechanisms' other heavy imports. A bare verb and a plugin command get the whole parser.
    """
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return False
        if not word.startswith("-"):
            verb = word
            break
    else:
        return False                          # no command: argparse's usage error is the same
    if verb not in verbs:
        return False                          # verify, report, or an unknown command
    return next(words, None) not in verbs[verb].choices


def common_parent() -> argparse.ArgumentParser:
    """The options every subcommand takes (argparse `parents=`): --json, and --debug also after the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return common


def _register_plugins(verbs: dict, common: argparse.ArgumentParser) -> None:
    """Subcommands contributed by `mechanisms` and `audits` through the `privcheck.commands` entry points.

    Each entry point is a callable `register(verbs, common)` that adds parsers under `verbs[verb]`
    (verb ∈ account, calibrate, convert, simulate, run, audit) with `set_defaults(func=...)`; `privcheck` never
    imports those packages itself. Handlers return the exit code and raise InvalidParameter on bad input.
    """
    import importlib.metadata
    for ep in sorted(importlib.metadata.entry_points(group="privcheck.commands"), key=lambda e: e.name):
        try:
            ep.load()(verbs, common)
        except ImportError as exc:  # a broken plugin must not take the core commands down with it
            print(f"privcheck: warning: command plugin {ep.name!r} unavailable: {exc}", file=sys.stderr)


LINE_MAX = 400      # characters of an error line (a value in it is cut first, to SHOWN_MAX)


def _one_line(text: str) -> str:
    """`text` on one line, at most LINE_MAX characters (a longer one ends in "… (N characters)")."""
    line = " ".join(str(text).splitlines())
    return line if len(line) <= LINE_MAX else f"{line[:LINE_MAX]}… ({len(line)} characters)"


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose error line (an unknown argument, an invalid choice: argparse echoes the value) is cut
    like every other error line (`_one_line`); subcommand parsers are of the same class."""

    def error(self, message: str):
        super().error(_one_line(message))


def _ascii_safe_output() -> None:
    """On a terminal whose encoding cannot write every character (PYTHONIOENCODING=ascii, LC_ALL=C without UTF-8
    mode), write σ, ε, … as backslash escapes instead of failing with UnicodeEncodeError."""
    import codecs
    for stream in (sys.stdout, sys.stderr):
        encoding, reconfigure = getattr(stream, "encoding", None), getattr(stream, "reconfigure", None)
        if reconfigure is None or not encoding:
            continue
        try:
            if codecs.lookup(encoding).name.startswith("utf"):
                continue
            reconfigure(errors="backslashreplace")
        except (LookupError, ValueError, OSError):      # an unknown codec, a closed or detached stream
            continue


def _os_error(exc: OSError) -> str:
    """`PATH: reason` for an error reading an input or writing an output."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return f"privcheck: error: {reason}"
    where = str(exc.filename) + ("" if exc.filename2 is None else f" -> {exc.filename2}")
    return f"privcheck: error: {where}: {reason}"


def _report(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(_one_line(message), file=sys.stderr)
    return code


def _guarded(command, debug: bool) -> int:
    """Run `command()` and turn every way it can end into an exit status and at most one line on stderr (module
    docstring); SystemExit (argparse's usage errors, --help, --version) passes through. Call it inside
    `command_interrupts()`: signals then interrupt the command only, never the reporting of its outcome."""
    from privcheck.interrupts import interruptible, is_interruption
    try:
        return interruptible(command)
    except KeyboardInterrupt:
        return _report("privcheck: interrupted", EXIT_INTERRUPTED, False)
    except Exception as exc:                   # noqa: BLE001 — the one place every unexpected error is reported
        if is_interruption(exc):               # native code re-raised the KeyboardInterrupt of a callback as another
            return _report("privcheck: interrupted", EXIT_INTERRUPTED, False)
        return _failed(exc, debug)


def _failed(exc: Exception, debug: bool) -> int:
    """The exit status and error line of an exception that is not an interruption (called in its `except`)."""
    if isinstance(exc, PrivcheckError):        # InvalidParameter, OutputBusy, CertificationError, ...
        return _report(f"privcheck: error: {exc}", EXIT_USAGE, debug)
    if isinstance(exc, BrokenPipeError):       # e.g. `privcheck ... | head`
        sys.stderr.close()
        return EXIT_OK
    if isinstance(exc, OSError):
        return _report(_os_error(exc), EXIT_USAGE, debug)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _report(f"privcheck: internal error: {detail} (rerun with --debug for the traceback)", EXIT_INTERNAL,
                   debug)


def dispatch(args, *, exiting: bool = False) -> int:
    """Run a parsed command with `main`'s error handling (for the plugins' stand-alone command lines); `exiting`:
    the process exits next (as `main` without `argv`)."""
    from privcheck.interrupts import command_interrupts
    with command_interrupts(exiting=exiting):
        return _guarded(lambda: args.func(args), getattr(args, "debug", False))


def _parse_and_run(argv: list[str]) -> int:
    parser, sub, verbs, _ = _core_parser()
    if _needs_plugins(sub, verbs, argv):
        parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


def main(argv: list[str] | None = None) -> int:
    """`privcheck ARGS`; returns the exit status of the module docstring (argparse's usage errors and --help and
    --version leave through SystemExit, with status 2 and 0). Building the parser is guarded too: a plugin that
    fails while parsing, or Ctrl-C during its imports, is reported like any command. Without `argv` (the
    `privcheck` script) the process exits next, so SIGINT and SIGTERM are ignored after the command: a signal while
    it shuts down changes neither its output nor its exit status."""
    from privcheck.interrupts import command_interrupts
    entry = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    _ascii_safe_output()
    with command_interrupts(exiting=entry):   # SIGINT and SIGTERM unwind alike, so every writer cleans up
        return _guarded(lambda: _parse_and_run(argv), "--debug" in argv)


if __name__ == "__main__":
    sys.exit(main())
