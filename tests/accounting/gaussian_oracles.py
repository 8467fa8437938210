"""Independent mpmath oracles (≥ 60 digits) for the certified Gaussian accountants' edge tests.

Nothing here calls privcheck: the analytic Gaussian profile is the Balle–Wang closed form
δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), solved by bisection in log scale; the selection integrals are
`mpmath.quad` over [m − 45, m + 45] around the integrand's mode m, split at breakpoints; outside it the
log-integrand is below its peak by at least 45²/2 (f″ ≤ −1), see `log_integral`.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
from scipy.special import ndtri  # a float starting point only

from tests.accounting.reference_store import ReferenceStore

DPS = 60
# the oracles' values for the fast tier's inputs are stored (tests/accounting/reference_store.py);
# test_gaussian_edges.py::test_stored_oracles_match_live recomputes a seeded sample on every run (exact: mpmath)
STORE = ReferenceStore("gaussian_edges", mpmath_dps=DPS, rel_tol=0.0)
M = mpmath.mpf


def exact(x) -> mpmath.mpf:
    """A float (or Fraction) as an exact mpf at the current precision (floats are exact binary numbers)."""
    if isinstance(x, Fraction):
        return mpmath.mpf(x.numerator) / x.denominator
    return mpmath.mpf(x)


def to_fraction(x) -> Fraction:
    """An mpf as the exact rational it is."""
    man, exp = mpmath.mpf(x).man_exp
    return Fraction(int(man)) * Fraction(2) ** int(exp)


# --- analytic Gaussian (Balle & Wang 2018, Thm. 8) -----------------------------------------------------------

def gauss_delta(eps, mu):
    """δ(ε; μ) at ≥ 60 significant digits of the result (ε, μ: floats, Fractions or mpf, taken exactly).

    The two terms cancel when μ is small (both near 1/2); the precision is raised by the digits lost."""
    dps = DPS + 20
    while True:
        with mpmath.workdps(dps):
            e, m = exact(eps), exact(mu)
            t1 = mpmath.ncdf(m / 2 - e / m)
            t2 = mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)
            diff = t1 - t2
            lost = int(mpmath.log10(t1 / abs(diff))) + 1 if diff != 0 else dps
            if lost + DPS + 10 <= dps:
                return +diff
        dps = lost + DPS + 20


def gauss_z(delta):
    """z = Φ̄⁻¹(δ) to 60 digits: Newton on log Φ(−z) = log δ (from a float start), exact at the caller's scale."""
    with mpmath.workdps(DPS + 20):
        d = mpmath.mpf(delta)
        z = mpmath.mpf(float(-ndtri(float(delta))))
        for _ in range(100):
            g = mpmath.log(mpmath.ncdf(-z)) - mpmath.log(d)
            step = g / (-mpmath.npdf(z) / mpmath.ncdf(-z))
            z -= step
            if abs(step) < mpmath.mpf(10) ** (-DPS - 5) * (1 + abs(z)):
                break
        return z


@STORE.memo
def gauss_mu_max(delta, eps_max=10_000):
    """The μ at which Φ(μ/2 − ε_max/μ) = δ: √(z² + 2ε_max) − z (above it, ε* may exceed ε_max)."""
    with mpmath.workdps(DPS + 20):
        z = gauss_z(delta)
        return mpmath.sqrt(z * z + 2 * eps_max) - z


@STORE.memo
def gauss_epsilon_root(mu_exact, delta, steps: int = 45):
    """Bracket (lo, hi) of ε* = inf{ε ≥ 0 : δ(ε; μ) ≤ δ} by log-scale bisection (relative width ≈ ln 2·2^-steps).

    Starts from the upper bound μ²/2 + zμ (Φ(μ/2 − ε/μ) ≥ δ(ε; μ)) and halves until the profile exceeds δ.
    """
    with mpmath.workdps(DPS + 20):
        mu, d = exact(mu_exact), mpmath.mpf(delta)
        if gauss_delta(M(0), mu) <= d:
            return M(0), M(0)
        hi = mu * mu / 2 + max(gauss_z(d), M(0)) * mu + mu * M("1e-30")
        if gauss_delta(hi, mu) > d:
            hi *= 2
        assert gauss_delta(hi, mu) <= d
        lo = hi / 2
        while gauss_delta(lo, mu) <= d:
            hi, lo = lo, lo / 2
        return geometric_bisection(lambda m: gauss_delta(m, mu) <= d, lo, hi, steps)


def geometric_bisection(moves_hi, lo, hi, steps: int):
    """Shrink [lo, hi] by geometric midpoints: the midpoint becomes hi when `moves_hi(mid)`, else lo."""
    for _ in range(steps):
        mid = mpmath.sqrt(lo * hi)
        if moves_hi(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


@STORE.memo
def gauss_mu_root(eps, delta, steps: int = 45):
    """Bracket (lo, hi) of μ* = sup{μ : δ(ε; μ) ≤ δ} (δ increases in μ), starting from the lower bound
    max(δ√(2π), √(z² + 2ε) − z): δ(ε; μ) ≤ δ(0; μ) ≤ μ/√(2π), and Φ(μ/2 − ε/μ) ≤ δ below the second."""
    with mpmath.workdps(DPS + 20):
        e, d = exact(eps), mpmath.mpf(delta)
        z = gauss_z(d)
        lo = max(d * mpmath.sqrt(2 * mpmath.pi), 2 * e / (mpmath.sqrt(z * z + 2 * e) + z) if z > 0
                 else mpmath.sqrt(z * z + 2 * e) - z) * (1 - M("1e-20"))
        assert gauss_delta(e, lo) <= d
        hi = 2 * lo
        while gauss_delta(e, hi) <= d:
            lo, hi = hi, 2 * hi
        return geometric_bisection(lambda m: not gauss_delta(e, m) <= d, lo, hi, steps)


# --- selection integrals -----------------------------------------------------------------------------------

def log_integral(factors):
    """(log ∫ φ(x)·Π Φ(αx + β)^p dx, absolute error bound), factors = [(α, β, p)] as mpf/int, at DPS digits.

    f(x) = −x²/2 + Σ p log Φ(αx + β) is concave with f″ ≤ −1. The mode m solves f′ = 0 (bisection: f′ decreases);
    the integral is taken over [m − 45, m + 45] with breakpoints at m ± 2^k·w (w = 1/√(−f″(m))); outside it
    f(x) ≤ f(m) − (x − m)²/2, so each tail is at most e^{f(m)}·√(2π)·Φ̄(45) < e^{f(m) − 1012}.
    The returned error (absolute, on the log) is the quadrature estimate plus that tail, relative to the integral,
    plus the rounding of 60-digit arithmetic.
    """
    with mpmath.workdps(DPS):
        def f(x):
            return -x * x / 2 + sum(p * mpmath.log(mpmath.ncdf(a * x + b)) for a, b, p in factors)

        def fp(x):
            return -x + sum(p * a * mpmath.npdf(a * x + b) / mpmath.ncdf(a * x + b) for a, b, p in factors)

        lo, hi = M(-1), M(1)
        while fp(lo) < 0:
            lo *= 2
        while fp(hi) > 0:
            hi *= 2
        with mpmath.workdps(20):   # the mode only places breakpoints; |f′(m)| ≲ 1e-9 leaves the tail bound intact
            for _ in range(200):
                mid = (lo + hi) / 2
                if fp(mid) > 0:
                    lo = mid
                else:
                    hi = mid
                if hi - lo < M("1e-12") * (1 + abs(mid)):
                    break
        m = (lo + hi) / 2
        h = M("1e-12")
        curv = -(fp(m + h) - fp(m - h)) / (2 * h)
        w = 1 / mpmath.sqrt(max(curv, M(1)))
        peak = f(m)
        pts = sorted({m + s * (2 ** k) * w for s in (-1, 1) for k in range(0, 80, 2) if (2 ** k) * w < 45}
                     | {m - 45, m, m + 45})
        val, err = mpmath.quad(lambda x: mpmath.exp(f(x) - peak), pts, error=True)
        tail = 2 * mpmath.exp(-M(45) ** 2 / 2)     # f(x) ≤ f(m) − (x − m)²/2: each tail ≤ √(2π)Φ̄(45) < e^{-1012}
        log_i = mpmath.log(val) + peak - mpmath.log(mpmath.sqrt(2 * mpmath.pi))
        return log_i, (err + tail) / val + M(10) ** (5 - DPS) * (1 + abs(log_i))


@STORE.memo
def rnm_eps(d, sigma, sensitivity, a, b):
    """(ε_RNM, error) = log J(a − b + 2Δ) − log J(a − b), J(y) = ∫ φ(z) Φ(z + y/σ)^{d−1} dz; inputs exact."""
    with mpmath.workdps(DPS):
        A, B, D, S = map(exact, (a, b, sensitivity, sigma))
        num, e1 = log_integral([(M(1), (A - B + 2 * D) / S, d - 1)])
        den, e2 = log_integral([(M(1), (A - B) / S, d - 1)])
        return num - den, e1 + e2


@STORE.memo
def at_eps(t, rho, sigma_x, sigma_z, sensitivity, a, b):
    """(ε_AT(t), error) = log I(Δ) − log I(0),
    I(v) = ∫ φ(x) Φ((ρ + σ_X x − b + v)/σ_Z)^{t−1} Φ((a + v − ρ − σ_X x)/σ_Z) dx; inputs exact."""
    with mpmath.workdps(DPS):
        R, SX, SZ, D, A, B = map(exact, (rho, sigma_x, sigma_z, sensitivity, a, b))

        def log_i(v):
            facs = [(SX / SZ, (R - B + v) / SZ, t - 1), (-SX / SZ, (A + v - R) / SZ, 1)]
            return log_integral([fa for fa in facs if fa[2]])

        num, e1 = log_i(D)
        den, e2 = log_i(M(0))
        return num - den, e1 + e2
