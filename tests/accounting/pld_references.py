"""Independent references for the certified PLD tests (tests/accounting/test_pld_certified*.py).

- `gdp_delta`, `gdp_epsilon`: the exact privacy profile of T rounds of the Gaussian mechanism with q = 1, which is
  μ-GDP with μ = √T/σ; δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2019,
  Cor. 2.13), in mpmath at 60 digits. Nothing here calls privcheck.
- dp-accounting's PLD (optimistic and pessimistic connect-the-dots) and prv_accountant's bracket, the two peers
  the certified enclosure must intersect.
"""

from __future__ import annotations

import math
import warnings

import mpmath

from tests.accounting.reference_store import FFT_REL_TOL, ReferenceStore

__all__ = ["DPS", "STORE", "dpa_bracket", "gdp_delta", "gdp_epsilon", "gdp_epsilon_bracket", "gdp_epsilon_float",
           "gdp_epsilon_float_bracket", "prv_bracket"]

DPS = 60
_MP = mpmath.MPContext()
_MP.dps = DPS
# the expensive references of tests/accounting/test_pld_certified.py, stored (tests/accounting/reference_store.py);
STORE = ReferenceStore("pld_certified", libraries=("dp-accounting", "prv-accountant"), mpmath_dps=DPS,
                       rel_tol=FFT_REL_TOL)


def gdp_delta(eps, mu) -> mpmath.mpf:
    """δ(ε) of μ-GDP at 60 digits (ε, μ exact binary floats or mpf)."""
    e, m = _MP.mpf(eps), _MP.mpf(mu)
    return _MP.ncdf(-e / m + m / 2) - _MP.exp(e) * _MP.ncdf(-e / m - m / 2)


def gdp_epsilon_float(mu: float, delta: float) -> float:
    """Float solve of δ(ε) = δ (scipy, log-space): only a starting point for `gdp_epsilon`'s bracket."""
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    def f(e):
        a, b = log_ndtr(-e / mu + mu / 2), e + log_ndtr(-e / mu - mu / 2)
        return a + math.log1p(-math.exp(min(b - a, 0.0))) - math.log(delta) if b < a else -math.inf

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-14)


def gdp_epsilon_bracket(mu: float, delta: float, rel_tol: float = 1e-13) -> tuple[mpmath.mpf, mpmath.mpf]:
    """[lo, hi] with gdp_delta(lo) > δ ≥ gdp_delta(hi) and hi − lo ≤ rel_tol·max(1, ε), by bisection on gdp_delta
    (decreasing in ε): the bracket starts around the float solution and is widened until gdp_delta itself confirms
    the sign change. (0, 0) when δ(0) ≤ δ already."""
    d = _MP.mpf(delta)
    if gdp_delta(0, mu) <= d:
        return _MP.mpf(0), _MP.mpf(0)
    g = gdp_epsilon_float(mu, delta)
    w = 1e-7 * max(1.0, g)
    lo, hi = max(0.0, g - w), g + w
    while lo > 0 and gdp_delta(lo, mu) < d:
        lo = max(0.0, lo - 8 * w)
        w *= 8
    while gdp_delta(hi, mu) > d:
        hi += 8 * w
        w *= 8
    lo, hi = _MP.mpf(lo), _MP.mpf(hi)
    tol = rel_tol * max(1.0, float(hi))
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if gdp_delta(mid, mu) > d:
            lo = mid
        else:
            hi = mid
    return lo, hi


@STORE.memo
def gdp_epsilon(mu: float, delta: float, rel_tol: float = 1e-13) -> mpmath.mpf:
    """ε with δ(ε) = δ to |width| ≤ rel_tol·max(1, ε): the midpoint of `gdp_epsilon_bracket`."""
    lo, hi = gdp_epsilon_bracket(mu, delta, rel_tol)
    return (lo + hi) / 2


@STORE.memo
def gdp_epsilon_float_bracket(mu: float, delta: float) -> tuple[float, float]:
    """Floats a ≤ lo and b ≥ hi around `gdp_epsilon_bracket`, so gdp_delta(a) > δ ≥ gdp_delta(b) (δ(ε) decreases):
    an enclosure [lower, upper] with upper ≥ b and lower ≤ a (or lower = 0) contains the exact ε."""
    lo, hi = gdp_epsilon_bracket(mu, delta)
    a, b = float(lo), float(hi)
    if a > lo:
        a = math.nextafter(a, -math.inf)
    if b < hi:
        b = math.nextafter(b, math.inf)
    return a, b


def _dpa_pld(q: float, sigma: float, steps: int, interval: float, pessimistic: bool, relation: str):
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as pld

    rel = {"add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
           "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}[relation]
    one = pld.from_gaussian_mechanism(standard_deviation=sigma, sensitivity=1.0, sampling_prob=q,
                                      value_discretization_interval=interval, pessimistic_estimate=pessimistic,
                                      use_connect_dots=pessimistic, neighboring_relation=rel)
    return one.self_compose(steps)


@STORE.memo
def dpa_bracket(phases, deltas, interval: float, relation: str = "add_remove") -> list[tuple[float, float]]:
    """dp-accounting's [optimistic, pessimistic connect-the-dots] ε for each δ, phases composed in order."""
    out = {}
    for pessimistic in (False, True):
        total = None
        for q, sigma, steps in phases:
            p = _dpa_pld(q, sigma, steps, interval, pessimistic, relation)
            total = p if total is None else total.compose(p)
        out[pessimistic] = [float(total.get_epsilon_for_delta(d)) for d in deltas]
    return list(zip(out[False], out[True]))


@STORE.memo
def prv_bracket(q: float, sigma: float, steps: int, deltas, eps_error: float) -> list[tuple[float, float] | None]:
    """prv_accountant 0.2.0's (eps_low, eps_up) for each δ (one composition, delta_error = min δ/1000); None
    where it refuses (its float guard for tiny δ, or a δ below its mass at infinity)."""
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    prv = PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            acc = PRVAccountant(prvs=[prv], max_self_compositions=[steps], eps_error=eps_error,
                                delta_error=min(deltas) / 1000)
            composed = acc.compute_composition([steps])
    except RuntimeError:          # its own discretisation guard ("discrete mean differs ..."): no reference
        return [None] * len(deltas)
    out = []
    for d in deltas:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                low, _, up = composed.compute_epsilon(d, acc.delta_error, acc.eps_error)
        except (ValueError, RuntimeError, FloatingPointError):
            out.append(None)
            continue
        out.append((float(low), float(up)) if math.isfinite(low) and math.isfinite(up) else None)
    return out
