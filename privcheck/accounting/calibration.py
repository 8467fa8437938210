"""Calibration: the one routine that finds a mechanism's parameter for a target (ε, δ), always on the safe side.

`calibrate(make_event, target_epsilon, delta, parameter=...)` searches a family of events. For a noise parameter
(ε decreasing in it) the search runs on dp-accounting's float PLD and ends with a bracket `[x_lo, x_hi]`,
ε(x_lo) > target ≥ ε(x_hi), of width `tolerance`; for `parameter="steps"` (ε increasing) it ends at the largest
integer whose float ε is at most the target. The value is then checked with the certified accountant (the
reported figure, `epsilon(event, delta)`) and moved to the safe side until the certified ε meets the target;
that certified record is the calibration's `achieved` ε. `calibrate_sigma` / `calibrate_steps` are the DP-SGD
families.

The float search only positions σ, so it runs on coarse lattices: a bracket at 1e-2 narrowed to 1e-4 relative,
then a bracket confirmed at 1e-3 and refined to `tolerance`, both by regula falsi on (log σ, log ε). The float
PLD at 1e-3 sits within about 2e-5 of the certified upper end on the Table VI rows, which the certified check
then settles (`Calibration.certified_step` says how far it moved σ).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from privcheck import validation as v
from privcheck.accounting.accountant import epsilon, epsilon_value
from privcheck.accounting.dpsgd import DEFAULT_INTERVAL
from privcheck.accounting.events import Event, NeighboringRelation, PoissonGaussianEvent
from privcheck.accounting.records import AccountingRecord
from privcheck.environment import library_versions
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.serialization import freeze, jsonable

__all__ = ["COARSE_INTERVAL", "Calibration", "CalibrationInfeasible", "MAX_STEPS", "PARAMETERS", "SEARCH_INTERVAL",
           "SIGMA_CEILING", "SIGMA_FLOOR",
           "calibrate", "calibrate_sigma", "clear_cache", "calibrate_steps"]

SIGMA_FLOOR, SIGMA_CEILING = 1e-3, 1e4
_SAFE_STEPS = 8
SEARCH_INTERVAL = 1e-3      # float PLD lattice of the search's fine stage (σ); the certified check decides
COARSE_INTERVAL = 1e-2      # and of its bracketing stage
_COARSE_RESOLUTION = 1e-4   # the coarse stage narrows σ to this relative width
_FINE_WINDOW = 2e-3         # the fine bracket starts this far (relative) either side of the coarse crossing
MAX_STEPS = 10**7


class CalibrationInfeasible(PrivcheckError):
    """No value in the search range meets the target (e.g. one step already exceeds ε)."""


@dataclass(frozen=True)
class Calibration:
    """Result of a calibration: the parameter value, the bracket and the achieved ε record."""

    parameter: str                # "noise_multiplier" or "steps"
    value: float
    bracket: tuple[float, float]  # (unsafe end, safe end)
    target_epsilon: float
    achieved: AccountingRecord    # ε at `value`, fine interval; achieved.value <= target_epsilon
    inputs: Mapping[str, Any]
    evaluations: int
    wall_time_s: float
    libraries: Mapping[str, str] = field(default_factory=library_versions)
    event: Event | None = None     # the event at `value`: what the achieved ε was computed from
    delta: float | None = None
    certified_step: float = 0.0    # how far `value` moved from the float search's end to meet the certified ε

    def __post_init__(self):
        object.__setattr__(self, "inputs", freeze(self.inputs))
        object.__setattr__(self, "libraries", freeze(self.libraries))
        if not self.achieved.value <= self.target_epsilon:
            raise AssertionError("calibration invariant broken: achieved epsilon above target")

    @property
    def epsilon(self) -> float:
        return self.achieved.value

    def to_json(self) -> dict:
        return {"parameter": self.parameter, "value": self.value, "bracket": list(self.bracket),
                "target_epsilon": self.target_epsilon, "epsilon": self.achieved.value,
                "achieved": self.achieved.to_json(), "inputs": jsonable(self.inputs),
                "evaluations": self.evaluations, "wall_time_s": self.wall_time_s,
                "libraries": dict(self.libraries), "delta": self.delta, "certified_step": self.certified_step,
                "event": None if self.event is None else self.event.to_json()}


PARAMETERS = ("noise_multiplier", "steps")
_CACHE: dict[tuple, Calibration] = {}


def clear_cache() -> None:
    """Forget cached `calibrate_sigma` results (benchmarks time the search itself)."""
    _CACHE.clear()


def _probe(make_event, parameter: str) -> Event:
    probe = make_event(1.0 if parameter == "noise_multiplier" else 1)
    if not isinstance(probe, Event):
        raise InvalidParameter("make_event", type(probe).__name__, "a callable returning a privcheck.accounting "
                                                                    "event")
    return probe


def calibrate(make_event, target_epsilon, delta=None, *, parameter: str = "noise_multiplier",
              interval: float | None = None, coarse: float = COARSE_INTERVAL, tolerance: float = 1e-6,
              inputs: Mapping[str, Any] | None = None) -> Calibration:
    """The value x of `parameter` for which `make_event(x)` meets `target_epsilon` at `delta`, never overshooting.

    "noise_multiplier" (any noise scale; ε must decrease in it): the smallest x to `tolerance` with float
    ε(make_event(x)) ≤ target, searched in [SIGMA_FLOOR, SIGMA_CEILING], then raised until the certified ε meets
    the target. "steps" (ε must increase in it): the largest integer, lowered likewise. PLD events are
    bracketed at the `coarse` interval, then refined at `interval` (default SEARCH_INTERVAL for a noise
    parameter, DEFAULT_INTERVAL for steps); the achieved ε is `epsilon(make_event(x), delta)`, the certified one.
    """
    if parameter not in PARAMETERS:
        raise InvalidParameter("parameter", parameter, " or ".join(repr(p) for p in PARAMETERS))
    target = v.positive("epsilon", target_epsilon)
    if interval is None:
        interval = SEARCH_INTERVAL if parameter == "noise_multiplier" else DEFAULT_INTERVAL
    interval = v.positive("interval", interval)
    coarse = v.positive("coarse", coarse)
    tolerance = v.positive("tolerance", tolerance)
    probe = _probe(make_event, parameter)
    if delta is not None or probe.needs_delta:
        delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    evals = 0
    pld = hasattr(probe, "sampling_rate") or hasattr(probe, "phases")

    def eps(x, iv: float) -> float:
        nonlocal evals
        evals += 1
        return epsilon_value(make_event(x), delta, **({"interval": iv} if pld else {}))

    if parameter == "steps":
        value, bracket = _search_steps(lambda t: eps(t, interval), target)
    else:
        value, bracket = _search_noise(eps, target, interval if pld else None, coarse if pld else None, tolerance)
    event = make_event(value)
    searched = value
    # The search runs on the float PLD; the certified figure (the reported one) can sit slightly above it. Step
    # to the safe side until the certified ε meets the target (in practice none or one step of ~1e-5 relative).
    achieved = epsilon(event, delta)
    for _ in range(_SAFE_STEPS):
        if achieved.value <= target:
            break
        if parameter == "steps":
            if value <= 1:
                raise CalibrationInfeasible(f"one step already costs more than epsilon {target}")
            value -= 1
        else:
            excess = achieved.value / target - 1 if math.isfinite(achieved.value) else 1.0
            value = min(value * (1 + max(excess, tolerance)), SIGMA_CEILING)
        evals += 1
        event = make_event(value)
        achieved = epsilon(event, delta)
    if not achieved.value <= target:
        raise CalibrationInfeasible(f"the certified epsilon {achieved.value} stays above the target {target}")
    bracket = (bracket[0], value)
    return Calibration(
        parameter=parameter, value=value, bracket=bracket, target_epsilon=target, achieved=achieved,
        inputs=dict(inputs or {"event": probe.to_json(), "delta": delta, "interval": interval}),
        evaluations=evals, wall_time_s=time.perf_counter() - start, event=event, delta=delta,
        certified_step=abs(value - searched))


def _search_noise(eps, target: float, interval, coarse, tol: float):
    """Two stages, each a regula falsi on log ε against log σ (ε is close to a power of σ, so the interpolant
    lands within a few 1e-6 of the crossing and guard probes close the bracket): a bracket at the coarse
    interval narrowed to 1e-4 relative, then a bracket confirmed at the fine interval around it (widened until
    both ends hold) and refined to `tol`."""
    coarse_eps = lambda s: eps(s, coarse)  # noqa: E731
    fine = lambda s: eps(s, interval)  # noqa: E731
    lo, hi = _bracket(coarse_eps, target)
    lo, hi = _refine(coarse_eps, target, lo, coarse_eps(lo), hi, coarse_eps(hi), _COARSE_RESOLUTION * hi)
    width = _FINE_WINDOW * hi
    lo, hi = max(hi - width, SIGMA_FLOOR), hi + width
    while (e_hi := fine(hi)) > target:
        hi += width
        width *= 2
        if hi > SIGMA_CEILING:
            raise CalibrationInfeasible(f"no sigma <= {SIGMA_CEILING} reaches epsilon {target}")
    width = _FINE_WINDOW * hi
    while (e_lo := fine(lo)) <= target:
        if lo <= SIGMA_FLOOR:
            hi, e_hi = lo, e_lo
            break
        hi, e_hi = lo, e_lo
        lo = max(lo - width, SIGMA_FLOOR)
        width *= 2
    lo, hi = _refine(fine, target, lo, e_lo, hi, e_hi, tol)
    return hi, (lo, hi)


def _search_steps(eps, target: float):
    if eps(1) > target:
        raise CalibrationInfeasible(f"one step already costs more than epsilon {target}")
    good, bad = 1, 2
    while eps(bad) <= target:
        good, bad = bad, bad * 2
        if bad > MAX_STEPS:
            raise CalibrationInfeasible(f"more than {MAX_STEPS} steps fit in epsilon {target}")
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if eps(mid) <= target else (good, mid)
    return good, (bad, good)


def calibrate_sigma(sampling_rate, steps, delta, target_epsilon, *, interval: float = SEARCH_INTERVAL,
                    coarse: float = COARSE_INTERVAL, sigma_tol: float = 1e-6,
                    relation=NeighboringRelation.ADD_REMOVE) -> Calibration:
    """Smallest noise multiplier σ (to `sigma_tol`) whose float PLD ε at `interval` is at most `target_epsilon`,
    raised until the certified ε meets it (`calibrate` on the family σ ↦ PoissonGaussianEvent(q, σ, T); cached)."""
    q = v.sampling_rate("sampling_rate", sampling_rate)
    T = v.count("steps", steps)
    delta = v.open_unit("delta", delta)
    target = v.positive("epsilon", target_epsilon)
    interval = v.positive("interval", interval)
    coarse = v.positive("coarse", coarse)
    sigma_tol = v.positive("sigma_tol", sigma_tol)
    relation = NeighboringRelation.coerce(relation)
    key = (q, T, delta, target, interval, coarse, sigma_tol, relation, library_versions()["dp-accounting"])
    if key not in _CACHE:
        _CACHE[key] = calibrate(
            lambda s: PoissonGaussianEvent(q, s, T, relation), target, delta, interval=interval, coarse=coarse,
            tolerance=sigma_tol,
            inputs={"sampling_rate": q, "steps": T, "delta": delta, "interval": interval, "coarse": coarse,
                    "sigma_tol": sigma_tol})
    return _CACHE[key]


def _bracket(eps, target: float) -> tuple[float, float]:
    """(lo, hi) with eps(lo) > target >= eps(hi), by doubling/halving from σ = 1."""
    s = 1.0
    if eps(s) <= target:
        while s > SIGMA_FLOOR:
            s_next = max(s / 2, SIGMA_FLOOR)
            if eps(s_next) > target:
                return s_next, s
            s = s_next
        raise CalibrationInfeasible(f"even sigma={SIGMA_FLOOR} meets epsilon {target}: target too loose")
    while s < SIGMA_CEILING:
        s_next = s * 2
        if eps(s_next) <= target:
            return s, s_next
        s = s_next
    raise CalibrationInfeasible(f"no sigma <= {SIGMA_CEILING} reaches epsilon {target}")


def _refine(eps, target, lo, e_lo, hi, e_hi, tol):
    """Shrink [lo, hi] (eps(lo) > target >= eps(hi)) to width <= tol.

    Regula falsi on (log σ, log ε) proposes the crossing; two probes at ±0.45·tol around it usually straddle
    it, so the loop ends in a few evaluations; a bisection step is forced whenever the bracket fails to halve.
    """
    while hi - lo > tol:
        width_before = hi - lo
        x = _crossing_estimate(lo, e_lo, hi, e_hi, target)
        guard = min(0.45 * tol, 0.25 * (hi - lo))
        for probe in (x + guard, x - guard):
            if not lo < probe < hi:      # keep the probe strictly inside the (possibly just narrowed) bracket
                probe = min(max(probe, lo + 0.01 * (hi - lo)), hi - 0.01 * (hi - lo))
            e = eps(probe)
            if e > target:
                lo, e_lo = probe, e
            else:
                hi, e_hi = probe, e
            if hi - lo <= tol:
                break
        if hi - lo > 0.5 * width_before and hi - lo > tol:
            mid = 0.5 * (lo + hi)
            e = eps(mid)
            if e > target:
                lo, e_lo = mid, e
            else:
                hi, e_hi = mid, e
    return lo, hi


def _crossing_estimate(lo, e_lo, hi, e_hi, target) -> float:
    """Where log ε, interpolated linearly in log σ between the bracket's ends, meets log target (the midpoint
    when an end's ε is not a positive finite number)."""
    if not (math.isfinite(e_lo) and e_lo > e_hi > 0 and lo > 0):
        return 0.5 * (lo + hi)
    t = (math.log(e_lo) - math.log(target)) / (math.log(e_lo) - math.log(e_hi))
    return math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))


def calibrate_steps(sampling_rate, noise_multiplier, delta, target_epsilon, *,
                    interval: float = DEFAULT_INTERVAL) -> Calibration:
    """Largest T whose PLD ε at (q, σ, δ) is at most `target_epsilon` (`calibrate(..., parameter="steps")`)."""
    q = v.sampling_rate("sampling_rate", sampling_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    delta = v.open_unit("delta", delta)
    target = v.positive("epsilon", target_epsilon)
    interval = v.positive("interval", interval)
    return calibrate(lambda t: PoissonGaussianEvent(q, sigma, t), target, delta, parameter="steps",
                     interval=interval,
                     inputs={"sampling_rate": q, "noise_multiplier": sigma, "delta": delta, "interval": interval})
