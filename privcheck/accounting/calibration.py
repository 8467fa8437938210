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

Every search is bounded (docs/accounting.md, "Calibration"): the target ε lies in (0, EPS_MAX]; σ is searched in
[SIGMA_FLOOR, SIGMA_CEILING], where one float PLD takes at most seconds (a σ of 10⁻³ needs 5·10⁷ buckets per round
and took minutes per evaluation); T in [1, MAX_STEPS] (what the certified PLD takes). A target that no value in
the range meets, or that every value down to the floor meets, is refused with `CalibrationInfeasible` (an
InvalidParameter naming `epsilon` and the ε reachable in the range), after at most a few dozen evaluations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from privcheck import validation as v
from privcheck.accounting.accountant import epsilon, epsilon_value
from privcheck.accounting.dpsgd import DEFAULT_INTERVAL, FLOAT_PLD_DELTA_MIN, INTERVAL_RANGE, check_interval
from privcheck.accounting.events import Event, NeighboringRelation, PoissonGaussianEvent
from privcheck.accounting.gaussian import check_epsilon
from privcheck.accounting.pld_certified import MAX_STEPS, NOISE_RANGE, check_noise
from privcheck.accounting.records import AccountingRecord
from privcheck.environment import library_versions
from privcheck.errors import InvalidParameter
from privcheck.serialization import freeze, jsonable

__all__ = ["CERTIFIED_GAP", "COARSE_INTERVAL", "Calibration", "CalibrationInfeasible", "PARAMETERS", "PLD_TARGET_MAX",
           "SEARCH_INTERVAL",
           "SIGMA_CEILING", "SIGMA_FLOOR", "calibrate", "calibrate_sigma", "clear_cache", "calibrate_steps"]

# The noise range searched: the floor is the accountant's own (pld_certified.NOISE_RANGE; below it one round's float
# PLD needs ≥ 1.5·10⁵ buckets at the search interval and grows like 1/σ², and ε is already ≈ 92 for one full
# Gaussian release, q = 1, T = 1, δ = 1e-5). Above 10⁴ a noise multiplier is not a useful training setting.
SIGMA_FLOOR, SIGMA_CEILING = NOISE_RANGE[0], 1e4
_SAFE_STEPS = 8
# A noise calibration ends with its certified ε in [target − CERTIFIED_GAP, target], or says why it could not (the
# certified figure jumped across that window between adjacent values: the lattice's limit); a steps calibration ends
# at the largest T whose certified ε meets the target. At most _TIGHTEN_EVALS certified evaluations are spent on it.
CERTIFIED_GAP = 1e-5
_TIGHTEN_EVALS = 24
_JUMP_WIDTH = 1e-7        # a bracket this narrow (relative) that still straddles a gap > CERTIFIED_GAP is a jump
SEARCH_INTERVAL = 1e-3      # float PLD lattice of the search's fine stage (σ); the certified check decides
COARSE_INTERVAL = 1e-2      # and of its bracketing stage
_COARSE_RESOLUTION = 1e-4   # the coarse stage narrows σ to this relative width
_FINE_WINDOW = 2e-3         # the fine bracket starts this far (relative) either side of the coarse crossing
# The float PLD's bias grows like T·h² (σ = 111, q = 0.01, T = 10⁶, δ = 1e-5: ε = 3.6 at h = 1e-2, 1.0 at 1e-3, 0.34
# at 1e-4), so for more than this many rounds both search lattices shrink by √(_LATTICE_STEPS/T).
_LATTICE_STEPS = 1000
# Targets for the PLD families: above a few thousand the certified PLD coarsens its lattice to fit its FFT and its
# enclosure widens (q = 1, σ = 1: [2487.6, 2801.6] at T = 5000, [8922, 15003] at T = 19000), so a calibration
# there would move far from the float search's answer; up to 10³ it is tight (T = 1000: width 1e-4).
PLD_TARGET_MAX = 1e3


class CalibrationInfeasible(InvalidParameter):
    """No value in the search range meets the target ε (e.g. one step already exceeds it): an InvalidParameter
    naming `epsilon`, whose allowed range is the ε reachable in the search range."""

    def __init__(self, target, reachable: str):
        super().__init__("epsilon", target, reachable)


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
    limit: str | None = None       # why the certified ε stops short of the target by more than CERTIFIED_GAP
                                   # (noise) or T + 1 was not shown to exceed it (steps); None: minimal

    def __post_init__(self):
        object.__setattr__(self, "inputs", freeze(self.inputs))
        object.__setattr__(self, "libraries", freeze(self.libraries))
        if not self.achieved.value <= self.target_epsilon:
            raise AssertionError("calibration invariant broken: achieved epsilon above target")

    @property
    def epsilon(self) -> float:
        return self.achieved.value

    @property
    def gap(self) -> float:
        """target − certified ε: the privacy the calibration leaves unspent (≤ CERTIFIED_GAP for a minimal noise
        calibration)."""
        return self.target_epsilon - self.achieved.value

    @property
    def minimal(self) -> bool:
        """No smaller noise (larger T) is certified to meet the target, to CERTIFIED_GAP in ε (to one step)."""
        return self.limit is None

    def to_json(self) -> dict:
        return {"parameter": self.parameter, "value": self.value, "bracket": list(self.bracket),
                "target_epsilon": self.target_epsilon, "epsilon": self.achieved.value,
                "achieved": self.achieved.to_json(), "inputs": jsonable(self.inputs),
                "evaluations": self.evaluations, "wall_time_s": self.wall_time_s,
                "libraries": dict(self.libraries), "delta": self.delta, "certified_step": self.certified_step,
                "gap": self.gap, "minimal": self.minimal, "limit": self.limit,
                "event": None if self.event is None else self.event.to_json()}


PARAMETERS = ("noise_multiplier", "steps")


def _pld_target(value) -> float:
    """A target ε of a Poisson-subsampled Gaussian family, in (0, PLD_TARGET_MAX]."""
    allowed = (f"(0, {PLD_TARGET_MAX:g}] for a Poisson-subsampled Gaussian family (the certified PLD widens above a "
               "few thousand)")
    x = v.real("epsilon", value, allowed)
    if not 0 < x <= PLD_TARGET_MAX:
        raise InvalidParameter("epsilon", value, allowed)
    return x


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
    target = check_epsilon(target_epsilon)
    if interval is None:
        interval = SEARCH_INTERVAL if parameter == "noise_multiplier" else DEFAULT_INTERVAL
    interval = check_interval("interval", interval)
    coarse = check_interval("coarse", coarse)
    tolerance = v.positive("tolerance", tolerance)
    probe = _probe(make_event, parameter)
    if delta is not None or probe.needs_delta:
        delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    evals = 0
    pld = hasattr(probe, "sampling_rate") or hasattr(probe, "phases")
    if pld:
        _pld_target(target)
    if pld and delta < FLOAT_PLD_DELTA_MIN:
        raise InvalidParameter("delta", delta, f"[{FLOAT_PLD_DELTA_MIN:g}, 1) for a calibration (its search runs on "
                                               "dp-accounting's float PLD, which truncates 1e-15 of the mass)")
    if pld and parameter == "noise_multiplier" and probe.steps > _LATTICE_STEPS:
        shrink = math.sqrt(_LATTICE_STEPS / probe.steps)
        interval, coarse = (max(INTERVAL_RANGE[0], h * shrink) for h in (interval, coarse))

    def eps(x, iv: float) -> float:
        """ε at x; a value the event family refuses (e.g. a Gaussian σ with Δ/σ above its legal range) costs more
        than any legal target, so the search moves away from it."""
        nonlocal evals
        evals += 1
        try:
            return epsilon_value(make_event(x), delta, **({"interval": iv} if pld else {}))
        except (InvalidParameter, ValueError):      # ValueError: a float PLD too large to run
            return math.inf

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
                raise CalibrationInfeasible(target, f"at least the certified ε of one step, {achieved.value!r}")
            # ε grows at least like √T, so T·(target/ε)² has ε below the target (one step down at the least)
            ratio = target / achieved.value if math.isfinite(achieved.value) else 0.5
            value = max(1, min(value - 1, math.floor(value * ratio * ratio)))
        else:
            excess = achieved.value / target - 1 if math.isfinite(achieved.value) else 1.0
            value = min(value * (1 + max(excess, tolerance)), SIGMA_CEILING)
        evals += 1
        event = make_event(value)
        achieved = epsilon(event, delta)
    if not achieved.value <= target:
        raise CalibrationInfeasible(target, f"an ε the certified accountant confirms near the float search's "
                                            f"answer (it gave {achieved.value!r} at {parameter} = {value!r})")
    bracket = (bracket[0], value)

    def certified(x) -> AccountingRecord | None:
        """The certified record at x (None where the family refuses x: treated as not meeting the target)."""
        nonlocal evals
        evals += 1
        try:
            return epsilon(make_event(x), delta)
        except (InvalidParameter, ValueError, ArithmeticError):
            return None

    # The float search's pessimistic lattice can leave privacy unspent: move to the certified figure's own crossing.
    tighten = _tighten_steps if parameter == "steps" else _tighten_noise
    value, achieved, unsafe, limit = tighten(certified, target, value, achieved)
    event = make_event(value)
    if unsafe is not None:
        bracket = (unsafe, value)
    return Calibration(
        parameter=parameter, value=value, bracket=bracket, target_epsilon=target, achieved=achieved,
        inputs=dict(inputs or {"event": probe.to_json(), "delta": delta, "interval": interval}),
        evaluations=evals, wall_time_s=time.perf_counter() - start, event=event, delta=delta,
        certified_step=abs(value - searched), limit=limit)


def _meets(rec, target: float) -> bool:
    return rec is not None and rec.value <= target


def _tighten_noise(certified, target: float, hi: float, rec_hi):
    """From hi (certified ε ≤ target) down to the smallest noise whose certified ε is in [target − CERTIFIED_GAP,
    target]: a first probe at hi·(ε/target), which lies at or below the crossing whenever ε falls at least like 1/σ
    (then lowered by halving the log-distance's complement until a probe misses the target), then regula falsi on
    (log σ, log ε) with guard probes. Returns (value, record, lowest probe that missed the target or None, limit)."""
    lo = None
    rec_lo = None
    for i in range(_TIGHTEN_EVALS):
        if target - rec_hi.value <= CERTIFIED_GAP:
            return hi, rec_hi, lo, None
        if lo is None:
            ratio = rec_hi.value / target if rec_hi.value > 0 else 0.5
            x = hi * max(ratio, 0.5)
        elif i % 3 == 2:                 # a bisection step (in log σ) every third probe: the bracket always shrinks
            x = math.sqrt(lo * hi)
        else:
            x = _crossing_estimate(lo, rec_lo.value if _finite(rec_lo) else math.inf, hi, rec_hi.value,
                                   target - 0.5 * CERTIFIED_GAP)
            guard = 1e-3 * (hi - lo)
            x = min(max(x, lo + guard), hi - guard)
        if not (lo or 0.0) < x < hi or x == hi:
            break
        rec = certified(x)
        if _meets(rec, target):
            hi, rec_hi = x, rec
        else:
            lo, rec_lo = x, rec
        if lo is not None and hi - lo <= _JUMP_WIDTH * hi:   # the certified figure jumps here: the lattice's limit
            break
    if target - rec_hi.value <= CERTIFIED_GAP:
        return hi, rec_hi, lo, None
    shown = "none below it was evaluated" if lo is None else (
        f"noise {lo!r} gives {rec_lo.value if rec_lo is not None else 'no certified figure'!r}")
    return hi, rec_hi, lo, (f"the certified ε at noise {hi!r} is {rec_hi.value!r}, {target - rec_hi.value:.3g} below "
                            f"the target, and {shown}: the certified figure does not reach the target more "
                            f"closely here (its lattice and tails; docs/accounting.md, \"Calibration\")")


def _finite(rec) -> bool:
    return rec is not None and math.isfinite(rec.value)


def _tighten_steps(certified, target: float, good: int, rec_good):
    """From T = good (certified ε ≤ target) up to the largest T whose certified ε meets the target: galloping
    from good + 1, then bisection. Returns (T, record, the least T shown to miss the target or None, limit)."""
    bad = None
    step = 1
    spent = 0
    while bad is None:
        if good >= MAX_STEPS:
            return good, rec_good, None, None
        if spent >= _TIGHTEN_EVALS:
            return good, rec_good, None, f"T = {good + step} was not evaluated (evaluation budget)"
        cand = min(good + step, MAX_STEPS)
        rec = certified(cand)
        spent += 1
        if _meets(rec, target):
            good, rec_good, step = cand, rec, 2 * step
        else:
            bad = cand
    while bad - good > 1:
        if spent >= _TIGHTEN_EVALS:
            return good, rec_good, bad, f"T in ({good}, {bad}) not settled (evaluation budget)"
        mid = (good + bad) // 2
        rec = certified(mid)
        spent += 1
        if _meets(rec, target):
            good, rec_good = mid, rec
        else:
            bad = mid
    return good, rec_good, bad, None


def _search_noise(eps, target: float, interval, coarse, tol: float):
    """Two stages, each a regula falsi on log ε against log σ (ε is close to a power of σ, so the interpolant
    lands within a few 1e-6 of the crossing and guard probes close the bracket): a bracket at the coarse
    interval narrowed to 1e-4 relative, then a bracket confirmed at the fine interval around it (widened until
    both ends hold) and refined to `tol`."""
    coarse_eps = lambda s: eps(s, coarse)  # noqa: E731
    fine = lambda s: eps(s, interval)  # noqa: E731

    def reach(e_floor: float | None) -> str:
        """The ε reachable with σ in [SIGMA_FLOOR, SIGMA_CEILING] (ε at the floor is known only when the search got
        there: it is never evaluated for the message, since a small σ can be costly)."""
        top = f"{e_floor!r}" if e_floor is not None else f"ε(noise = {SIGMA_FLOOR})"
        return (f"[{coarse_eps(SIGMA_CEILING)!r}, {top}], the ε reachable with noise in [{SIGMA_FLOOR}, "
                f"{SIGMA_CEILING:g}] (float PLD at interval {coarse!r})")

    lo, hi = _bracket(coarse_eps, target, reach)
    lo, hi = _refine(coarse_eps, target, lo, coarse_eps(lo), hi, coarse_eps(hi), _COARSE_RESOLUTION * hi)
    width = _FINE_WINDOW * hi
    lo, hi = max(hi - width, SIGMA_FLOOR), hi + width
    while (e_hi := fine(hi)) > target:
        hi += width
        width *= 2
        if hi > SIGMA_CEILING:
            raise CalibrationInfeasible(target, reach(None))
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
    """The largest T in [1, MAX_STEPS] with ε(T) ≤ target: doubling, then integer regula falsi on (log T, ε) with a
    bisection step whenever the bracket fails to halve (ε(T) is smooth and increasing, so about ten evaluations
    close a bracket of 10⁶)."""
    e_one = eps(1)
    if e_one > target:
        raise CalibrationInfeasible(target, f"at least {e_one!r}, the ε of one step")
    good, e_good, bad = 1, e_one, 2
    while (e_bad := eps(bad)) <= target:
        if bad == MAX_STEPS:
            raise CalibrationInfeasible(target, f"[{e_one!r}, {e_bad!r}] (the ε of 1 to {MAX_STEPS} steps, the "
                                                "largest number of steps the accountant takes)")
        good, e_good, bad = bad, e_bad, min(2 * bad, MAX_STEPS)
    while bad - good > 1:
        width = bad - good
        mid = good + 1
        if math.isfinite(e_bad) and e_bad > e_good:    # interpolate ε linearly in log T
            t = (target - e_good) / (e_bad - e_good)
            mid = round(math.exp(math.log(good) + t * (math.log(bad) - math.log(good))))
        mid = min(max(mid, good + 1), bad - 1)
        for probe in (mid, mid + 1):     # the crossing usually lies between them: the bracket then closes
            if not good < probe < bad:
                continue
            e = eps(probe)
            if e <= target:
                good, e_good = probe, e
            else:
                bad, e_bad = probe, e
                break
        if bad - good > width // 2 and bad - good > 1:
            half = (good + bad) // 2
            e = eps(half)
            good, e_good, bad, e_bad = (half, e, bad, e_bad) if e <= target else (good, e_good, half, e)
    return good, (bad, good)


def calibrate_sigma(sampling_rate, steps, delta, target_epsilon, *, interval: float = SEARCH_INTERVAL,
                    coarse: float = COARSE_INTERVAL, sigma_tol: float = 1e-6,
                    relation=NeighboringRelation.ADD_REMOVE) -> Calibration:
    """Smallest noise multiplier σ (to `sigma_tol`) whose float PLD ε at `interval` is at most `target_epsilon`,
    raised until the certified ε meets it (`calibrate` on the family σ ↦ PoissonGaussianEvent(q, σ, T); cached)."""
    q = v.sampling_rate("sampling_rate", sampling_rate)
    T = v.count("steps", steps, maximum=MAX_STEPS)
    delta = v.open_unit("delta", delta)
    target = _pld_target(target_epsilon)
    interval = check_interval("interval", interval)
    coarse = check_interval("coarse", coarse)
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


def _bracket(eps, target: float, reach) -> tuple[float, float]:
    """(lo, hi) with eps(lo) > target >= eps(hi), by doubling/halving from σ = 1 inside [SIGMA_FLOOR,
    SIGMA_CEILING]. Halving stops at the first σ above the target, so no evaluation sits far above it."""
    s = 1.0
    if eps(s) <= target:
        while s > SIGMA_FLOOR:
            s_next = max(s / 2, SIGMA_FLOOR)
            if (e := eps(s_next)) > target:
                return s_next, s
            s = s_next
        raise CalibrationInfeasible(target, reach(e) + f": even noise {SIGMA_FLOOR} meets {target!r}")
    while s < SIGMA_CEILING:
        s_next = min(s * 2, SIGMA_CEILING)
        if eps(s_next) <= target:
            return s, s_next
        s = s_next
    raise CalibrationInfeasible(target, reach(None))


def _refine(eps, target, lo, e_lo, hi, e_hi, tol):
    """Shrink [lo, hi] (eps(lo) > target >= eps(hi)) to width <= tol.

    Regula falsi on (log σ, log ε) proposes the crossing; two probes at ±0.45·tol around it usually straddle
    it, so the loop ends in a few evaluations; a bisection step is forced whenever the bracket fails to halve.
    """
    while hi - lo > tol:
        if not lo < 0.5 * (lo + hi) < hi:     # adjacent floats: no tolerance below float resolution is reachable
            break
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
    sigma = check_noise("noise_multiplier", noise_multiplier)
    delta = v.open_unit("delta", delta)
    target = _pld_target(target_epsilon)
    interval = check_interval("interval", interval)
    return calibrate(lambda t: PoissonGaussianEvent(q, sigma, t), target, delta, parameter="steps",
                     interval=interval,
                     inputs={"sampling_rate": q, "noise_multiplier": sigma, "delta": delta, "interval": interval})
