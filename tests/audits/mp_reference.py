"""Independent mpmath (60-digit) evaluation of the one-run p-value formula (docs/audits.md, "Proof notes").

Written from the formula only: exact binomial pmf sums, every window i = 1..v, no early stopping and no
survival-function tricks. Slow; used on small r only.
"""

from __future__ import annotations

import mpmath as mp

DPS = 60


def pval(m: int, r: int, v: int, eps, delta) -> mp.mpf:
    with mp.workdps(DPS):
        if v == 0:
            return mp.mpf(1)
        eps, delta = mp.mpf(eps), mp.mpf(delta)
        rho = mp.e ** eps / (1 + mp.e ** eps)
        pmf = [mp.binomial(r, k) * rho ** k * (1 - rho) ** (r - k) for k in range(r + 1)]
        beta = mp.fsum(pmf[v:])
        best, window = mp.mpf(0), mp.mpf(0)
        for i in range(1, v + 1):
            window += pmf[v - i]                    # P[v − i ≤ W ≤ v − 1]
            best = max(best, window / i)
        return min(mp.mpf(1), beta + 2 * m * delta * best)


def eps_lower(m: int, r: int, v: int, delta, p, tol=mp.mpf("1e-12")) -> mp.mpf:
    """inf{ε ≥ 0 : PVAL(ε) ≥ p} by plain bisection on [0, 20] (PVAL is monotone in ε)."""
    with mp.workdps(DPS):
        p = mp.mpf(p)
        if v == 0 or pval(m, r, v, 0, delta) >= p:
            return mp.mpf(0)
        lo, hi = mp.mpf(0), mp.mpf(20)
        while hi - lo > tol:
            mid = (lo + hi) / 2
            if pval(m, r, v, mid, delta) < p:
                lo = mid
            else:
                hi = mid
        return lo
