"""Calibration of the DP-SGD noise multiplier σ (or step count T) against a target (ε, δ).

The one rule: the returned value is always on the safe side. `calibrate_sigma` returns the upper end of a
bracket `[σ_lo, σ_hi]` with ε_PLD(σ_lo) > target ≥ ε_PLD(σ_hi), both evaluated at the fine interval, and
the achieved ε is that evaluation; `calibrate_steps` returns the largest T whose ε is at most the target.
Two stages keep it cheap: a bracket at the coarse interval 1e-3, then a safeguarded regula falsi at the
fine interval 1e-4 inside [σ_c − 2e-3, σ_c + 2e-3] (widened until both ends are confirmed).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from privcheck import validation as v
from privcheck.accounting.dpsgd import DEFAULT_INTERVAL, _pld_epsilon, epsilon_pld
from privcheck.accounting.records import AccountingRecord, _frozen, _jsonable
from privcheck.environment import library_versions
from privcheck.errors import PrivcheckError

SIGMA_FLOOR, SIGMA_CEILING = 1e-3, 1e4
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

    def __post_init__(self):
        object.__setattr__(self, "inputs", _frozen(self.inputs))
        object.__setattr__(self, "libraries", _frozen(self.libraries))
        if not self.achieved.value <= self.target_epsilon:
            raise AssertionError("calibration invariant broken: achieved epsilon above target")

    @property
    def epsilon(self) -> float:
        return self.achieved.value

    def to_json(self) -> dict:
        return {"parameter": self.parameter, "value": self.value, "bracket": list(self.bracket),
                "target_epsilon": self.target_epsilon, "epsilon": self.achieved.value,
                "achieved": self.achieved.to_json(), "inputs": _jsonable(self.inputs),
                "evaluations": self.evaluations, "wall_time_s": self.wall_time_s,
                "libraries": dict(self.libraries)}


_CACHE: dict[tuple, Calibration] = {}


def calibrate_sigma(q, T, delta, target_eps, *, interval: float = DEFAULT_INTERVAL, coarse: float = 1e-3,
                    sigma_tol: float = 1e-6) -> Calibration:
    """Smallest σ (to `sigma_tol`) whose PLD ε at `interval` is at most `target_eps`."""
    q = v.sampling_rate("sampling_rate", q)
    T = v.count("steps", T)
    delta = v.open_unit("delta", delta)
    target = v.positive("epsilon", target_eps)
    interval = v.positive("interval", interval)
    coarse = v.positive("coarse", coarse)
    sigma_tol = v.positive("sigma_tol", sigma_tol)
    key = (q, T, delta, target, interval, coarse, sigma_tol, library_versions()["dp-accounting"])
    if key in _CACHE:
        return _CACHE[key]
    start = time.perf_counter()
    evals = 0

    def eps(sigma: float, iv: float) -> float:
        nonlocal evals
        evals += 1
        return _pld_epsilon(q, sigma, T, delta, iv)

    # Stage 1: bracket at the coarse interval, bisect to ~coarse width in σ.
    lo, hi = _bracket(lambda s: eps(s, coarse), target)
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid, coarse) > target else (lo, mid)
    # Stage 2: confirm a bracket at the fine interval around the coarse answer (widen if needed).
    width = 2e-3
    lo, hi = max(hi - width, SIGMA_FLOOR), hi + width
    while (e_hi := eps(hi, interval)) > target:
        hi += width
        width *= 2
        if hi > SIGMA_CEILING:
            raise CalibrationInfeasible(f"no sigma <= {SIGMA_CEILING} reaches epsilon {target}")
    width = 2e-3
    while (e_lo := eps(lo, interval)) <= target:
        if lo <= SIGMA_FLOOR:
            hi, e_hi = lo, e_lo
            break
        hi, e_hi = lo, e_lo
        lo = max(lo - width, SIGMA_FLOOR)
        width *= 2
    lo, hi = _refine(lambda s: eps(s, interval), target, lo, e_lo, hi, e_hi, sigma_tol)
    achieved = epsilon_pld(q, hi, T, delta, interval=interval)
    result = Calibration(
        parameter="noise_multiplier", value=hi, bracket=(lo, hi), target_epsilon=target, achieved=achieved,
        inputs={"sampling_rate": q, "steps": T, "delta": delta, "interval": interval, "coarse": coarse,
                "sigma_tol": sigma_tol},
        evaluations=evals, wall_time_s=time.perf_counter() - start)
    _CACHE[key] = result
    return result


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


def calibrate_steps(q, sigma, delta, target_eps, *, interval: float = DEFAULT_INTERVAL) -> Calibration:
    """Largest T whose PLD ε at (q, σ, δ) is at most `target_eps`."""
    q = v.sampling_rate("sampling_rate", q)
    sigma = v.positive("noise_multiplier", sigma)
    delta = v.open_unit("delta", delta)
    target = v.positive("epsilon", target_eps)
    interval = v.positive("interval", interval)
    start = time.perf_counter()
    evals = 0

    def eps(t: int) -> float:
        nonlocal evals
        evals += 1
        return _pld_epsilon(q, sigma, t, delta, interval)

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
    achieved = epsilon_pld(q, sigma, good, delta, interval=interval)
    return Calibration(
        parameter="steps", value=good, bracket=(bad, good), target_epsilon=target, achieved=achieved,
        inputs={"sampling_rate": q, "noise_multiplier": sigma, "delta": delta, "interval": interval},
        evaluations=evals, wall_time_s=time.perf_counter() - start)
