"""Certified search for the crossing point of a monotone predicate.

`holds(x)` returns True/False when Arb has decided it and None when it could not. It must be monotone:
for `increasing=True` it is False below some x* and True from x* on (e.g. "δ(ε) ≤ δ_target" in ε);
for `increasing=False` it is True up to x* and False above (e.g. "δ(ε; μ) ≤ δ_target" in μ).
The search returns a bracket whose "holds" end is certified to satisfy the predicate and whose other end
is certified not to; the exact crossing lies between them. Floats are used only to propose points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from privcheck.errors import CertificationError

__all__ = ["Bracket", "certified_crossing", "certified_log_crossing"]


@dataclass(frozen=True)
class Bracket:
    holds_end: float      # certified: predicate True here (the safe answer)
    fails_end: float      # certified: predicate False here (or the domain edge if it holds everywhere)
    evaluations: int
    exhausted: bool       # True when Arb could not decide a point nearer the crossing

    @property
    def lower(self) -> float:
        return min(self.holds_end, self.fails_end)

    @property
    def upper(self) -> float:
        return max(self.holds_end, self.fails_end)


def certified_crossing(holds: Callable[[float], bool | None], estimate: float, *, domain: tuple[float, float],
                       increasing: bool = True, rel_width: float = 1e-10, abs_width: float = 1e-300,
                       max_evaluations: int = 400) -> Bracket:
    lo_dom, hi_dom = domain
    evals = 0

    def check(x: float) -> bool | None:
        nonlocal evals
        evals += 1
        if evals > max_evaluations:
            raise CertificationError("certified search exceeded its evaluation limit")
        return holds(x)

    # Orient so that the search always looks for the smallest x where `good(x)` is True.
    sign = 1.0 if increasing else -1.0
    good = lambda y: check(sign * y)  # noqa: E731
    y_lo_dom, y_hi_dom = sorted((sign * lo_dom, sign * hi_dom))
    y0 = min(max(sign * estimate, y_lo_dom), y_hi_dom)

    step = max(abs(y0) * 1e-9, abs_width, 1e-15)
    # Find a certified good point at or above y0.
    y_good = y0
    while True:
        r = good(y_good)
        if r is True:
            break
        if y_good >= y_hi_dom:
            raise CertificationError("predicate does not hold anywhere in the domain")
        y_good = min(y_good + step, y_hi_dom)
        step *= 4
    # Step down from the good point until a certified bad point (or the domain edge).
    step = max(abs(y_good) * 1e-9, abs_width, 1e-15)
    while True:
        if y_good <= y_lo_dom:  # the predicate holds on the whole domain: the edge is the answer
            return Bracket(sign * y_lo_dom, sign * y_lo_dom, evals, exhausted=False)
        y_next = max(y_good - step, y_lo_dom)
        r = good(y_next)
        if r is True:
            y_good = y_next
            step *= 4
            continue
        y_bad, exhausted = y_next, r is None
        break
    if exhausted:  # undecided: the crossing is within arithmetic resolution of y_bad
        return Bracket(sign * y_good, sign * y_bad, evals, exhausted=True)
    # Bisection keeping good(y_good) True, good(y_bad) False.
    while y_good - y_bad > max(rel_width * max(abs(y_good), abs(y_bad)), abs_width):
        mid = 0.5 * (y_good + y_bad)
        if mid in (y_good, y_bad) or not math.isfinite(mid):
            break
        r = good(mid)
        if r is True:
            y_good = mid
        elif r is False:
            y_bad = mid
        else:
            exhausted = True
            break
    return Bracket(sign * y_good, sign * y_bad, evals, exhausted)


def certified_log_crossing(holds: Callable[[float], bool | None], estimate: float, *, domain: tuple[float, float],
                           increasing: bool = True, rel_width: float = 1e-11,
                           max_evaluations: int = 400) -> Bracket:
    """`certified_crossing` on a positive domain, searched in log x: scale-free from subnormals to 1e308.

    The search variable is t = log x and the point handed to `holds` is the float x(t) = exp(t) clamped to the
    domain, a monotone map, so every end of the returned bracket is a float at which `holds` was decided (the
    bracket's ends are those floats, not their logs). `rel_width` is the relative width of the final bracket in x.
    A bracket whose two ends coincide at a domain edge means that the predicate holds on the whole domain.
    """
    lo, hi = domain
    if not (0 < lo < hi) or not math.isfinite(hi):
        raise ValueError(f"certified_log_crossing needs 0 < lo < hi < inf, got {domain}")
    t_lo, t_hi = math.log(lo), math.log(hi)

    def point(t: float) -> float:   # the domain's own ends exactly (exp(log(x)) may differ from x by an ulp)
        if t <= t_lo:
            return lo
        if t >= t_hi:
            return hi
        return min(max(math.exp(t), lo), hi)

    t0 = math.log(estimate) if estimate > 0 and math.isfinite(estimate) else 0.5 * (t_lo + t_hi)
    br = certified_crossing(lambda t: holds(point(t)), min(max(t0, t_lo), t_hi), domain=(t_lo, t_hi),
                            increasing=increasing, rel_width=0.0, abs_width=rel_width,
                            max_evaluations=max_evaluations)
    return Bracket(point(br.holds_end), point(br.fails_end), br.evaluations, br.exhausted)
