"""Calibration: the one routine that finds a mechanism's parameter for a target (ε, δ), always on the safe side.

`calibrate(make_event, target_epsilon, delta, parameter=...)` searches a family of events. For a noise parameter
(ε decreasing in it) it returns the upper end of a bracket `[x_lo, x_hi]` with ε(x_lo) > target ≥ ε(x_hi), both
evaluated at the fine PLD interval, and the achieved ε is that evaluation; for `parameter="steps"` (ε increasing)
it returns the largest integer whose ε is at most the target. `calibrate_sigma` / `calibrate_steps` are the
DP-SGD families.
Two stages keep it cheap: a bracket at the coarse interval 1e-3, then a safeguarded regula falsi at the
fine interval 1e-4 inside [σ_c − 2e-3, σ_c + 2e-3] (widened until both ends are confirmed). The search runs on
dp-accounting's float PLD; the returned value is then checked with the certified accountant (the reported
figure) and moved to the safe side until the certified ε meets the target.
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

__all__ = ["Calibration", "CalibrationInfeasible", "MAX_STEPS", "PARAMETERS", "SIGMA_CEILING", "SIGMA_FLOOR",
           "calibrate", "calibrate_sigma", "clear_cache", "calibrate_steps"]

SIGMA_FLOOR, SIGMA_CEILING = 1e-3, 1e4
_SAFE_STEPS = 8
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
              interval: float = DEFAULT_INTERVAL, coarse: float = 1e-3, tolerance: float = 1e-6,
              inputs: Mapping[str, Any] | None = None) -> Calibration:
    """The value x of `parameter` for which `make_event(x)` meets `target_epsilon` at `delta`, never overshooting.

    "noise_multiplier" (any noise scale; ε must decrease in it): the smallest x to `tolerance` with
    ε(make_event(x)) ≤ target, searched in [SIGMA_FLOOR, SIGMA_CEILING]. "steps" (ε must increase in it): the
    largest integer. PLD events are bracketed at the `coarse` interval first, then refined at `interval`; the
    achieved ε is `epsilon(make_event(x), delta)` at the fine interval.
    """
    if parameter not in PARAMETERS:
        raise InvalidParameter("parameter", parameter, " or ".join(repr(p) for p in PARAMETERS))
    target = v.positive("epsilon", target_epsilon)
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
    # to the safe side until the certified ε meets the target (in practice one step of a few 1e-6 relative).
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
    """Two stages: a bracket at the coarse interval bisected to ~1e-3 in x, then a bracket confirmed at the fine
    interval around it (widened until both ends hold) and refined to `tol`."""
    fine = lambda s: eps(s, interval)  # noqa: E731
    lo, hi = _bracket(lambda s: eps(s, coarse), target)
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid, coarse) > target else (lo, mid)
    width = 2e-3
    lo, hi = max(hi - width, SIGMA_FLOOR), hi + width
    while (e_hi := fine(hi)) > target:
        hi += width
        width *= 2
        if hi > SIGMA_CEILING:
            raise CalibrationInfeasible(f"no sigma <= {SIGMA_CEILING} reaches epsilon {target}")
    width = 2e-3
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


def calibrate_sigma(sampling_rate, steps, delta, target_epsilon, *, interval: float = DEFAULT_INTERVAL,
                    coarse: float = 1e-3, sigma_tol: float = 1e-6,
                    relation=NeighboringRelation.ADD_REMOVE) -> Calibration:
    """Smallest noise multiplier σ (to `sigma_tol`) whose PLD ε at `interval` is at most `target_epsilon`
    (`calibrate` on the family σ ↦ PoissonGaussianEvent(q, σ, T); cached)."""
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

    Regula falsi proposes the crossing; two probes at ±0.45·tol around it usually straddle it, so the
    loop ends in a few evaluations; a bisection step is forced whenever the bracket fails to halve.
    """
    while hi - lo > tol:
        width_before = hi - lo
        if math.isfinite(e_lo) and e_lo > e_hi:
            x = lo + (hi - lo) * (e_lo - target) / (e_lo - e_hi)
        else:
            x = 0.5 * (lo + hi)
        guard = min(0.45 * tol, 0.25 * (hi - lo))
        for probe in (x + guard, x - guard):
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
