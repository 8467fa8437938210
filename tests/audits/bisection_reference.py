"""The plain ε search the library's search replaced (tests/audits/test_pvalue_search.py, the p-value benchmark):
[0, 1], double the upper end while rejected (capped at EPS_CAP, read at call time), bisect to BISECTION_WIDTH."""

from __future__ import annotations

from audits.statistics import pvalue
from audits.statistics.pvalue import BISECTION_WIDTH

__all__ = ["plain_search"]


def plain_search(m: int, r: int, v: int, delta: float, p: float) -> tuple[float, bool, int]:
    """(ε, capped, evaluations) of the plain search, the same invariant: PVAL(lo) < p ≤ PVAL(hi), width ≤ 1e-9."""
    calls = 0

    def below(eps: float) -> bool:
        nonlocal calls
        calls += 1
        return pvalue.p_value_unchecked(m, r, v, eps, delta, p) < p

    cap = pvalue.EPS_CAP                           # read at call time: a test may lower it
    if v == 0 or not below(0.0):
        return 0.0, False, calls
    lo, hi = 0.0, 1.0
    while below(hi):
        if hi >= cap:
            return cap, True, calls
        lo, hi = hi, min(2.0 * hi, cap)
    while hi - lo > BISECTION_WIDTH:
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
    return lo, False, calls
