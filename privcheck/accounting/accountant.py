"""The one accounting entry point: `epsilon(event, delta) -> AccountingRecord`.

Every ε that privcheck reports, in Python, on the command line, in a run artifact or in an audit's claim, comes
from this function applied to an event describing the mechanism. The methods per event:

| event | methods (first = reported figure) |
|---|---|
| `GaussianEvent` | `analytic` (Balle–Wang, certified in Arb) |
| `PoissonGaussianEvent` | `pld` (certified), `pld_float` (dp-accounting), `rdp`, `exact_single_round`, `quadrature` |
| `CompositionHistory` | `pld`, `pld_float`, `rdp` |
| `PrivBoNEvent` | `exponential_mechanism` (certified; tight bounded range in mode "exact") |
| `PrivITPEvent`, `PrivITPPhase1Event`, `PrivITPWorstCaseEvent` | `ex_post` (certified) |
| `GaussianReportNoisyMaxEvent`, `GaussianAboveThresholdEvent` | `integral` (certified by `acb.integral`) |
| `FixedSizeGaussianEvent` | `sampling_scheme` (without replacement: certified upper and lower; with: lower only) |
| `ShuffledGaussianEvent`, `BallsInBinsGaussianEvent` | `sampling_scheme` (certified lower bound; no upper) |
| `TruncatedPoissonGaussianEvent` | `sampling_scheme` (certified only without truncation) |

Cross-check methods go through the same function, so a cross-check can never drift from the event it checks. The
returned record carries the event (`record.event`) and the δ it was computed at (`record.delta`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

from flint import arb

from privcheck import validation as v
from privcheck.accounting import dpsgd, gaussian, gaussian_selection, pld_certified, schemes, selection
from privcheck.accounting.events import (
    BallsInBinsGaussianEvent,
    CompositionHistory,
    Event,
    FixedSizeGaussianEvent,
    GaussianAboveThresholdEvent,
    GaussianEvent,
    GaussianReportNoisyMaxEvent,
    NeighboringRelation,
    PoissonGaussianEvent,
    PrivBoNEvent,
    PrivITPEvent,
    PrivITPPhase1Event,
    PrivITPWorstCaseEvent,
    ShuffledGaussianEvent,
    TruncatedPoissonGaussianEvent,
)
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.certified import float_up

__all__ = ["METHODS", "PROFILE_BATCH", "epsilon", "epsilon_lower_bound", "epsilon_profile", "epsilon_value"]

METHODS = {
    GaussianEvent: ("analytic",),
    PoissonGaussianEvent: ("pld", "pld_float", "rdp", "exact_single_round", "quadrature"),
    CompositionHistory: ("pld", "pld_float", "rdp"),
    PrivBoNEvent: ("exponential_mechanism",),
    PrivITPEvent: ("ex_post",),
    PrivITPPhase1Event: ("analytic",),
    PrivITPWorstCaseEvent: ("ex_post",),
    GaussianReportNoisyMaxEvent: ("integral",),
    GaussianAboveThresholdEvent: ("integral",),
    FixedSizeGaussianEvent: ("sampling_scheme",),
    ShuffledGaussianEvent: ("sampling_scheme",),
    BallsInBinsGaussianEvent: ("sampling_scheme",),
    TruncatedPoissonGaussianEvent: ("sampling_scheme",),
}
_SCHEMES = (FixedSizeGaussianEvent, ShuffledGaussianEvent, BallsInBinsGaussianEvent, TruncatedPoissonGaussianEvent)
PROFILE_BATCH = 7          # δ per certified composition in `epsilon_profile` (one tilt serves about 3 decades)
_OPTIONS = {"pld": {"interval", "tolerance"}, "pld_float": {"interval"}, "rdp": {"orders"}}


def _delta(event: Event, delta):
    if delta is None:
        if event.needs_delta and not isinstance(event, (PrivITPEvent, PrivITPPhase1Event, PrivITPWorstCaseEvent)):
            raise InvalidParameter("delta", None, "(0, 1): this event is approximate DP")
        return None
    if isinstance(event, (PoissonGaussianEvent, CompositionHistory, *_SCHEMES)):
        return pld_certified.check_delta("delta", delta)      # the range of the certified PLD, for every method
    return v.open_unit("delta", delta)


def _check_itp_delta(event, delta) -> float:
    own = event.params.delta
    if delta is not None and delta != own:
        raise InvalidParameter("delta", delta, f"None or the event's own Phase-1 delta = {own!r}")
    return own


def _relation_add_remove(event, method: str) -> None:
    if event.relation is not NeighboringRelation.ADD_REMOVE:
        raise InvalidParameter("method", method, "'pld' for the replace-one relation")


def _history_pld(event: CompositionHistory, delta: float, interval: float) -> AccountingRecord:
    start = time.perf_counter()
    phases = tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in event.phases)
    reason = None
    try:
        eps = dpsgd.pld_history_epsilon_value(phases, delta, interval, event.relation.value)
        if not math.isfinite(eps) or eps < 0:
            eps, reason = math.inf, f"PLD returned {eps!r}"
    except (ArithmeticError, ValueError, OverflowError, MemoryError) as exc:  # fail closed
        eps, reason = math.inf, f"PLD failed: {exc}"
    return AccountingRecord(
        quantity="epsilon", value=eps, method="pld_float",
        mechanism=dpsgd.MECHANISM if len(phases) == 1 else dpsgd.MECHANISM + "_history",
        inputs={"phases": [{"sampling_rate": q, "noise_multiplier": s, "steps": t} for q, s, t in phases],
                "delta": delta},
        neighboring=event.relation.value,
        details={"library": "dp-accounting", "interval": interval, "pessimistic": True, "connect_dots": True,
                 "bound": "float estimate of an upper bound (pessimistic discretisation, float FFT)"},
        wall_time_s=time.perf_counter() - start, reason=reason)


def _phases(event) -> tuple:
    events = event.phases if isinstance(event, CompositionHistory) else (event,)
    return tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in events)


def _certified(event, delta: float, options: dict) -> AccountingRecord:
    return dpsgd.epsilon_pld_certified(_phases(event), delta, relation=event.relation.value, **options)


def _history_rdp(event: CompositionHistory, delta: float, orders) -> AccountingRecord:
    _relation_add_remove(event, "rdp")
    return dpsgd.epsilon_rdp_history([(p.sampling_rate, p.noise_multiplier, p.steps) for p in event.phases],
                                     delta, orders=orders)


def _poisson(event: PoissonGaussianEvent, delta: float, method: str, options: dict) -> AccountingRecord:
    q, s, t = event.sampling_rate, event.noise_multiplier, event.steps
    if method == "pld":
        return _certified(event, delta, options)
    if method == "pld_float":
        if event.relation is NeighboringRelation.ADD_REMOVE:
            return dpsgd.epsilon_pld(q, s, t, delta, **options)
        return _history_pld(CompositionHistory((event,)), delta, options.get("interval", dpsgd.DEFAULT_INTERVAL))
    _relation_add_remove(event, method)
    if method == "rdp":
        return dpsgd.epsilon_rdp(q, s, t, delta, **options)
    if method == "exact_single_round":
        if t != 1:
            raise InvalidParameter("steps", t, "1 for method 'exact_single_round'")
        return dpsgd.epsilon_single_round_certified(q, s, delta)
    return dpsgd.epsilon_quadrature(q, s, t, delta)


@functools.lru_cache(maxsize=256)
def _params_json(params) -> dict:
    return params.to_json()


def _worst_case(event: PrivITPWorstCaseEvent) -> AccountingRecord:
    start = time.perf_counter()
    eps1 = selection.privitp_phase1_epsilon(event.params)
    phase2 = selection.privitp_worst_phase2(event.params, event.lambda_tilde, event.rounds)
    total = float_up(arb(eps1.value) + arb(phase2))
    return AccountingRecord(
        quantity="epsilon", value=total, mechanism="privitp", method="ex_post_worst_case",
        inputs={"lambda_tilde": event.lambda_tilde, "rounds": event.rounds, **_params_json(event.params)},
        neighboring=NeighboringRelation.SCORE_SENSITIVITY.value,
        details={"eps1": eps1.value, "phase2": phase2, "delta": event.params.delta, "ex_post": True,
                 "bound": "certified upper bound: Arb sum of the certified upper ends, rounded up (no enclosure)"},
        wall_time_s=time.perf_counter() - start)


def _compute(event: Event, delta, method: str, options: dict) -> AccountingRecord:
    if isinstance(event, GaussianEvent):
        return gaussian.gaussian_epsilon(event.sigma, delta, event.sensitivity)
    if isinstance(event, PoissonGaussianEvent):
        return _poisson(event, delta, method, options)
    if isinstance(event, CompositionHistory):
        if method == "pld":
            return _certified(event, delta, options)
        if method == "pld_float":
            return _history_pld(event, delta, options.get("interval", dpsgd.DEFAULT_INTERVAL))
        return _history_rdp(event, delta, options.get("orders", dpsgd.DEFAULT_ORDERS))
    if isinstance(event, PrivBoNEvent):
        return selection.privbon_epsilon(event.sensitivity, event.sigma, candidates=event.candidates,
                                         r_max=event.r_max, r_lo=event.r_lo, mode=event.mode)
    if isinstance(event, PrivITPEvent):
        return selection.privitp_loss(event.params, event.lambda_tilde, event.halting_time)
    if isinstance(event, PrivITPPhase1Event):
        return selection.privitp_phase1_epsilon(event.params)
    if isinstance(event, PrivITPWorstCaseEvent):
        return _worst_case(event)
    if isinstance(event, _SCHEMES):
        return schemes.scheme_record(event, delta)
    if isinstance(event, GaussianReportNoisyMaxEvent):
        return gaussian_selection.gaussian_rnm_eps(event.queries, event.sigma, event.sensitivity, event.a, event.b)
    return gaussian_selection.gaussian_at_expost_eps(event.halting_time, event.threshold, event.sigma_threshold,
                                                     event.sigma_query, event.sensitivity, event.a, event.b)


def epsilon(event: Event, delta: float | None = None, *, method: str | None = None, **options) -> AccountingRecord:
    """ε of `event` at `delta` (None for pure and ex-post events; PrivITP events use their own Phase-1 δ).

    `method` picks a cross-check where the event has several (table in the module docstring); the default is
    the reported figure. `options`: `interval` for PLD, `orders` for RDP. Every check of the arguments happens
    before any computation, and a numerical failure gives ε = inf with a reason (fail closed).
    """
    if not isinstance(event, Event) or type(event) not in METHODS:
        raise InvalidParameter("event", type(event).__name__, "a privcheck.accounting event "
                               f"({', '.join(sorted(c.__name__ for c in METHODS))})")
    allowed = METHODS[type(event)]
    method = allowed[0] if method is None else method
    if method not in allowed:
        raise InvalidParameter("method", method, " or ".join(repr(m) for m in allowed))
    unknown = set(options) - _OPTIONS.get(method, set())
    if unknown:
        raise InvalidParameter(sorted(unknown)[0], options[sorted(unknown)[0]],
                               f"no such option for method {method!r} (allowed: "
                               f"{sorted(_OPTIONS.get(method, set())) or 'none'})")
    if "interval" in options:
        options["interval"] = dpsgd.check_interval("interval", options["interval"])
    if "tolerance" in options:
        options["tolerance"] = v.positive("tolerance", options["tolerance"])
    if isinstance(event, (PoissonGaussianEvent, CompositionHistory)) and method != "exact_single_round":
        for p in _phases(event):        # the σ range of the lattice methods (the closed form takes any σ > 0)
            pld_certified.check_noise("noise_multiplier", p[1])
    if isinstance(event, _SCHEMES):
        schemes.check_scheme(event)
    if isinstance(event, (PrivITPEvent, PrivITPPhase1Event, PrivITPWorstCaseEvent)):
        delta = _check_itp_delta(event, None if delta is None else v.open_unit("delta", delta))
    else:
        delta = _delta(event, delta)
    record = _compute(event, delta, method, options)
    return dataclasses.replace(record, event=event, delta=delta)


def epsilon_lower_bound(event, delta: float, *, interval: float | None = None) -> float:
    """A certified lower bound on the exact ε of a `PoissonGaussianEvent` or `CompositionHistory` at δ: the lower
    end of the certified PLD enclosure (a dominated discretisation composed with proven error bounds). It is
    never a reported ε: it tells whether another accountant's figure is provably below the exact one. Arguments
    are checked before any work; a numerical failure gives 0 (the bound then says nothing)."""
    if isinstance(event, PoissonGaussianEvent):
        event = CompositionHistory((event,))
    if not isinstance(event, CompositionHistory):
        raise InvalidParameter("event", type(event).__name__, "a PoissonGaussianEvent or CompositionHistory")
    delta = pld_certified.check_delta("delta", delta)
    if interval is not None:
        interval = dpsgd.check_interval("interval", interval)
    record = _certified(event, delta, {} if interval is None else {"interval": interval})
    if record.certified is None:
        return 0.0
    value = record.certified.lower
    return value if math.isfinite(value) and value > 0 else 0.0


def epsilon_value(event: Event, delta: float | None = None, **options) -> float:
    """A fast float ε for searches (calibration's inner loop): dp-accounting's PLD for PoissonGaussianEvent and
    CompositionHistory (the "pld_float" cross-check, cached), `epsilon(event, delta).value` otherwise. Never a
    reported figure: `calibrate` certifies the value it returns."""
    interval = dpsgd.check_interval("interval", options.get("interval", dpsgd.DEFAULT_INTERVAL))
    if isinstance(event, PoissonGaussianEvent) and set(options) <= {"interval"}:
        return dpsgd.pld_epsilon_value(event.sampling_rate, event.noise_multiplier, event.steps,
                                       pld_certified.check_delta("delta", delta), interval, event.relation.value)
    if isinstance(event, CompositionHistory) and set(options) <= {"interval"}:
        phases = tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in event.phases)
        return dpsgd.pld_history_epsilon_value(phases, pld_certified.check_delta("delta", delta), interval,
                                               event.relation.value)
    return epsilon(event, delta).value


def epsilon_profile(event: Event, deltas) -> tuple[float, ...]:
    """Certified upper bounds ε_i on the exact ε(δ_i) of `event`, one per δ_i (a privacy profile: the mechanism is
    (ε_i, δ_i)-DP for every i). Never a reported ε: the audits build from it a trade-off curve that lies below the
    mechanism's (docs/audits.md, "f-DP against the claim's own curve").

    `PoissonGaussianEvent` and `CompositionHistory`: the upper ends of the certified PLD (dominating
    discretisation), composed once per batch of PROFILE_BATCH consecutive δ (sorted), so that each batch gets a
    tilt of its own; other events: `epsilon(event, δ).value` per δ. A numerical failure gives ε = inf for the
    δ concerned (the pair then says nothing). Arguments are checked before any work."""
    if not isinstance(event, Event) or type(event) not in METHODS:
        raise InvalidParameter("event", type(event).__name__, "a privcheck.accounting event")
    deltas = tuple(_delta(event, d) for d in deltas)
    if not deltas:
        raise InvalidParameter("deltas", deltas, "at least one δ")
    if not isinstance(event, (PoissonGaussianEvent, CompositionHistory)):
        return tuple(epsilon(event, d).value for d in deltas)
    phases = _phases(event)
    for p in phases:
        pld_certified.check_noise("noise_multiplier", p[1])
    order = sorted(range(len(deltas)), key=lambda i: deltas[i])
    out = [math.inf] * len(deltas)
    for start in range(0, len(order), PROFILE_BATCH):
        idx = order[start:start + PROFILE_BATCH]
        try:
            bounds = pld_certified.certified_epsilons(phases, tuple(deltas[i] for i in idx), event.relation.value)
        except (CertificationError, ArithmeticError, ValueError, OverflowError, MemoryError):  # fail closed
            continue
        for i, b in zip(idx, bounds):
            out[i] = b.upper if math.isfinite(b.upper) and b.upper >= 0 else math.inf
    return tuple(out)
