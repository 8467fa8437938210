"""Independent high-precision reference evaluations in mpmath (never a certificate, only a cross-check).

Each function evaluates at `dps` decimal digits (default 60) with mpmath's own special functions, so a
disagreement with the Arb path points at a bug in one of two unrelated code paths.
"""

from __future__ import annotations

import mpmath

__all__ = ["DEFAULT_DPS", "analytic_gaussian_delta", "gauss_G", "log_diff_exp", "log_gauss_G", "log_normal_cdf",
           "normal_cdf", "subsampled_gaussian_delta_single_round"]

DEFAULT_DPS = 60


def _mp(x):
    return mpmath.mpf(x) if not isinstance(x, mpmath.mpf) else x


def normal_cdf(u, dps: int = DEFAULT_DPS):
    with mpmath.workdps(dps):
        return mpmath.ncdf(_mp(u))


def log_normal_cdf(u, dps: int = DEFAULT_DPS):
    with mpmath.workdps(dps):
        return mpmath.log(mpmath.ncdf(_mp(u)))


def gauss_G(u, dps: int = DEFAULT_DPS):
    """G(u) = E[(u+Z)+] = ∫_{-u}^∞ (u+z) φ(z) dz, by mpmath quadrature (independent of the closed form)."""
    with mpmath.workdps(dps + 20):
        u = _mp(u)
        val = mpmath.quad(lambda z: (u + z) * mpmath.npdf(z), [-u, -u + 1, -u + 10, mpmath.inf])
    with mpmath.workdps(dps):
        return +val


def log_gauss_G(u, dps: int = DEFAULT_DPS):
    with mpmath.workdps(dps):
        return mpmath.log(gauss_G(u, dps))


def log_diff_exp(a, b, dps: int = DEFAULT_DPS):
    with mpmath.workdps(dps):
        return mpmath.log(mpmath.exp(_mp(a)) - mpmath.exp(_mp(b)))


def analytic_gaussian_delta(epsilon, mu, dps: int = DEFAULT_DPS):
    """δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) for the Gaussian mechanism with μ = Δ/σ."""
    with mpmath.workdps(dps):
        e, m = _mp(epsilon), _mp(mu)
        return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)


def subsampled_gaussian_delta_single_round(q, sigma, epsilon, dps: int = DEFAULT_DPS):
    """max of both hockey-stick divergences of A=(1−q)N(0,σ²)+qN(1,σ²) and B=N(0,σ²) at e^ε, by quadrature.

    Integrates (a − e^ε b)₊ and (b − e^ε a)₊ numerically over the half-line where each is positive; the
    crossing point is found by mpmath root finding on the log density ratio, not by the closed form.
    """
    with mpmath.workdps(dps + 20):
        q, s, eps = _mp(q), _mp(sigma), _mp(epsilon)
        alpha = mpmath.exp(eps)

        def b(x):
            return mpmath.npdf(x, 0, s)

        def a(x):
            return (1 - q) * mpmath.npdf(x, 0, s) + q * mpmath.npdf(x, 1, s)

        def loss(x):
            return mpmath.log(1 - q + q * mpmath.exp((2 * x - 1) / (2 * s * s)))

        inf_loss = mpmath.log(1 - q) if q < 1 else -mpmath.inf
        span = 400 * s * s + 10 * s + 10

        def crossing(level):  # bisection on the increasing log ratio: slow but cannot wander off
            lo, hi = -span, span
            for _ in range(mpmath.mp.prec + 40):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if loss(mid) < level else (lo, mid)
            return (lo + hi) / 2

        def integral(f, lo, hi):
            pts = [lo] + [p for p in (-10 * s, 0, 1, 1 + 10 * s) if lo < p < hi] + [hi]
            return mpmath.quad(f, pts)

        if eps <= inf_loss:
            h_ab = integral(lambda x: a(x) - alpha * b(x), -mpmath.inf, mpmath.inf)
        else:
            h_ab = integral(lambda x: a(x) - alpha * b(x), crossing(eps), mpmath.inf)
        if -eps <= inf_loss:
            h_ba = mpmath.mpf(0)
        else:
            h_ba = integral(lambda x: b(x) - alpha * a(x), -mpmath.inf, crossing(-eps))
    with mpmath.workdps(dps):
        return +max(h_ab, h_ba, mpmath.mpf(0))
