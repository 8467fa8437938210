"""Exact (Balle–Wang analytic) Gaussian mechanism accounting, certified in Arb, and μ-GDP conversions.

For the Gaussian mechanism with L2 sensitivity Δ and noise N(0, σ²), μ = Δ/σ and the exact privacy profile
is (Balle & Wang 2018, Thm. 8; Dong, Roth & Su 2019 for μ-GDP)

    δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε · Φ(−μ/2 − ε/μ),

decreasing in ε and increasing in μ. Every figure reported here is certified: a float search proposes a
point and Arb decides `δ(ε; μ) ≤ δ` on the whole ball. The reported ε is the certified end (δ(ε) ≤ δ holds
there); the reported σ likewise; the reported μ is the largest certified one. Proof sketch: docs/accounting.md.

Legal range (docs/accounting.md, "Legal ranges of the certified Gaussian accountants"): every ε, as input or
answer, lies in [0, EPS_MAX]. With z = Φ̄⁻¹(δ), Φ(μ/2 − ε/μ) ≥ δ(ε; μ) gives ε*(μ) ≤ μ²/2 + zμ, so
μ ≤ μ_max(δ) = √(z² + 2·EPS_MAX) − z keeps the answer of `gaussian_epsilon`/`gdp_to_dp` at most EPS_MAX; a
larger Δ/σ is refused with InvalidParameter before any search. The searches run in log scale between analytic
bounds, so they are scale-free (σ, Δ from subnormal to 1e308) and never stop at a fixed cap inside the range.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
from flint import arb, ctx
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtri

from privcheck import validation as v
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.ball import ThresholdPredicate, decide, normal_cdf, normal_sf
from privcheck.numerics.bracket import certified_log_crossing
from privcheck.numerics.certified import Certified, float_down, float_up

__all__ = ["EPS_MAX", "SIGMA_MAX", "check_epsilon", "delta_ball", "delta_float", "dp_to_gdp", "gaussian_epsilon",
           "gaussian_sigma", "gdp_to_dp", "mu_bounds", "mu_max"]

EPS_MAX = 1e4       # ceiling for every ε, input or answer (a larger ε is meaningless as a DP guarantee)
SIGMA_MAX = 1e300   # ceiling for a calibrated σ (a larger one is not a useful float)
_TINY = math.ulp(0.0)   # the smallest positive float: the lower end of the ε search
_BOUND_PREC = 128


def delta_ball(epsilon, mu) -> arb:
    """δ(ε; μ) as an Arb ball at the current working precision (ε, μ: floats or balls)."""
    e, m = arb(epsilon), arb(mu)
    return normal_cdf(m / 2 - e / m) - e.exp() * normal_cdf(-m / 2 - e / m)


def delta_float(epsilon: float, mu: float) -> float:
    """Float δ(ε; μ) for proposing search points (never reported)."""
    a = log_ndtr(mu / 2 - epsilon / mu)
    b = epsilon + log_ndtr(-mu / 2 - epsilon / mu)
    return float(np.exp(a) - np.exp(b)) if a > b else 0.0


# --- analytic bounds (Arb, rounded to the safe side) ----------------------------------------------

def _z_upper(delta: float) -> float:
    """A float z ≥ Φ̄⁻¹(δ), certified by Arb (Φ̄(z) ≤ δ): ndtri proposes, Arb confirms, z moves up if needed."""
    z = float(-ndtri(delta))
    step = 2.0 ** -40 * (1.0 + abs(z))
    for _ in range(64):
        ok, _ball, _prec = decide(lambda: normal_sf(arb(z)), delta)
        if ok is True:
            return z
        z += step
        step *= 2
    raise CertificationError(f"could not bound the normal quantile at delta={delta!r}")


def _root_bound(z: float, eps) -> arb:
    """√(z² + 2ε) − z (the μ solving μ/2 − ε/μ = −z), without cancellation for z > 0."""
    zz, e2 = arb(z), 2 * arb(eps)
    r = (zz * zz + e2).sqrt()
    return e2 / (r + zz) if z > 0 else r - zz


def mu_max(delta: float) -> float:
    """The largest legal μ = Δ/σ at δ: μ ≤ mu_max(δ) guarantees ε*(μ, δ) ≤ EPS_MAX (rounded down)."""
    z = _z_upper(delta)
    with ctx.workprec(_BOUND_PREC):
        return float_down(_root_bound(z, EPS_MAX))


def mu_bounds(epsilon: float, delta: float) -> tuple[float, float]:
    """Floats [μ_lo, μ_hi] around μ*(ε, δ) = sup{μ : δ(ε; μ) ≤ δ}, for 0 < ε ≤ EPS_MAX and 0 < δ < 1.

    μ_lo: δ(ε; μ) ≤ δ(0; μ) = 2Φ(μ/2) − 1 ≤ μ/√(2π), so μ = δ√(2π) meets δ; and δ(ε; μ) ≤ Φ(μ/2 − ε/μ) ≤ δ
    for μ ≤ √(z² + 2ε) − z. μ_hi = 2√(2ε) + 80: there u = μ/2 − ε/μ ≥ 40 and v = μ/2 + ε/μ ≥ u, and
    δ(ε; μ) = Φ(u) − φ(u)·Φ̄(v)/φ(v) ≥ 1 − φ(u)(1/u + 1/v) > 1 − 10⁻³⁰⁰ > δ (Mills ratio ≤ 1/v).
    """
    z = _z_upper(delta)
    with ctx.workprec(_BOUND_PREC):
        # 1 − 2^-30: both bounds can be tight to far below an ulp (δ(0; μ) < μ/√(2π) by a factor 1 − μ²/24),
        # and the search must find its lower end certified
        shrink = 1 - arb(2) ** -30
        lo = max(float_down(arb(delta) * (2 * arb.pi()).sqrt() * shrink), float_down(_root_bound(z, epsilon) * shrink))
        hi = float_up(2 * (2 * arb(epsilon)).sqrt() + 80)
    return lo, hi


# --- validation of the legal range ----------------------------------------------------------------

def _check_mu(name: str, value, mu_exact: Fraction, delta: float) -> float:
    """Refuse μ (given exactly, e.g. Δ/σ as a fraction) above mu_max(δ); returns mu_max(δ)."""
    top = mu_max(delta)
    if mu_exact > Fraction(top):
        raise InvalidParameter(name, value, f"Δ/σ ≤ μ_max(δ) = {top!r} at delta={delta!r} (so that ε ≤ {EPS_MAX:g})")
    return top


def check_epsilon(epsilon) -> float:
    """An ε in (0, EPS_MAX] (the one ceiling for every ε, input or target: a larger ε is no guarantee)."""
    allowed = f"(0, {EPS_MAX:g}]"
    x = v.real("epsilon", epsilon, allowed)
    if not 0 < x <= EPS_MAX:
        raise InvalidParameter("epsilon", epsilon, allowed)
    return x


# --- certified searches ---------------------------------------------------------------------------

def _float_root(f, lo: float, hi: float) -> float | None:
    """Root of a decreasing-in-x sign change, widening `hi` if needed; None when floats cannot find it."""
    try:
        while f(hi) > 0 and hi < 1e12:
            hi *= 2
        return brentq(f, lo, hi, xtol=1e-300, rtol=1e-13, maxiter=500)
    except (ValueError, RuntimeError, ArithmeticError):
        return None


def _certified_epsilon(mu_ball, mu_float: float, delta: float) -> tuple[Certified, int]:
    """Smallest certified ε with δ(ε; μ) ≤ δ, μ given exactly as a ball (`mu_ball()`); μ ≤ mu_max(δ) checked."""
    holds = ThresholdPredicate(lambda e: delta_ball(e, mu_ball()), delta)
    if holds(0.0) is True:
        return Certified.from_bracket(0.0, 0.0, "analytic_gaussian_arb", holds.precision_bits), 1
    est = None
    if mu_float >= 1e-150:   # floats cannot propose below that (δ_float's difference underflows)
        est = _float_root(lambda e: delta_float(e, mu_float) - delta, 0.0, max(1.0, mu_float * mu_float))
    if est is None or not est > 0:   # ε* ≤ μ²/2 + zμ: a proposer within a small factor
        est = min(EPS_MAX, 0.5 * mu_float * mu_float + mu_float * max(float(-ndtri(delta)), 1.0))
    br = certified_log_crossing(holds, est, domain=(_TINY, EPS_MAX), increasing=True)
    if br.fails_end == br.holds_end:
        if br.holds_end != _TINY:   # holds at EPS_MAX only if the legal-range check was bypassed
            raise CertificationError("certified search for epsilon did not find a failing point")
        fails = 0.0    # δ(0) > δ was decided above: ε* ∈ (0, smallest float]
    else:
        fails = br.fails_end
    cert = Certified.from_bracket(fails, br.holds_end, "analytic_gaussian_arb", holds.precision_bits)
    return cert, br.evaluations + 1


def _certified_mu(epsilon: float, delta: float):
    """Bracket [μ_holds, μ_fails] of μ*(ε, δ), searched in log scale inside `mu_bounds` (both ends decided)."""
    holds = ThresholdPredicate(lambda m: delta_ball(epsilon, m), delta)
    lo, hi = mu_bounds(epsilon, delta)
    est = _float_root(lambda m: delta - delta_float(epsilon, m), 1e-6, max(1.0, 2 * math.sqrt(epsilon) + 1))
    if est is None or not lo <= est <= hi:
        est = lo
    br = certified_log_crossing(holds, est, domain=(lo, hi), increasing=False)
    if br.holds_end == br.fails_end:   # μ_hi is proven to fail, so this cannot happen unless Arb misjudged
        raise CertificationError("certified search for mu did not find a failing point")
    return br, holds.precision_bits


# --- public API -----------------------------------------------------------------------------------

def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> AccountingRecord:
    """ε of the Gaussian mechanism N(0, σ²) at L2 sensitivity Δ and target δ (certified upper bound).

    Legal range: σ > 0, Δ > 0, 0 < δ < 1 and Δ/σ ≤ mu_max(δ) (then ε ≤ EPS_MAX).
    """
    sigma = v.positive("sigma", sigma)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    _check_mu("sigma", sigma, Fraction(sensitivity) / Fraction(sigma), delta)
    start = time.perf_counter()
    cert, evals = _certified_epsilon(lambda: arb(sensitivity) / arb(sigma), sensitivity / sigma, delta)
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="gaussian", method="analytic_gaussian",
        inputs={"sigma": sigma, "sensitivity": sensitivity, "delta": delta}, certified=cert,
        details={"reference": "Balle & Wang 2018, Theorem 8", "arb_evaluations": evals},
        wall_time_s=time.perf_counter() - start)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> AccountingRecord:
    """Smallest σ (certified) with δ(ε; Δ/σ) ≤ δ: the returned σ always meets (ε, δ).

    Legal range: 0 < ε ≤ EPS_MAX, 0 < δ < 1, Δ > 0 with Δ/μ_lo(ε, δ) ≤ SIGMA_MAX (`mu_bounds`), so that the
    answer σ = Δ/μ* is a float. The search is over μ; σ = Δ/μ is rounded up from the certified μ end.
    """
    epsilon = check_epsilon(epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    mu_lo, _ = mu_bounds(epsilon, delta)
    if Fraction(sensitivity) > Fraction(SIGMA_MAX) * Fraction(mu_lo):
        raise InvalidParameter("sensitivity", sensitivity,
                               f"(0, {SIGMA_MAX:g}·μ_lo(ε, δ)] with μ_lo = {mu_lo!r} (the σ = Δ/μ* must be ≤ "
                               f"{SIGMA_MAX:g})")
    start = time.perf_counter()
    br, prec = _certified_mu(epsilon, delta)
    with ctx.workprec(64):   # σ ≥ Δ/μ_holds meets (ε, δ) since δ increases in μ; σ* > Δ/μ_fails
        s_hi = float_up(arb(sensitivity) / arb(br.holds_end))
        s_lo = float_down(arb(sensitivity) / arb(br.fails_end))
    cert = Certified.from_bracket(s_lo, s_hi, "analytic_gaussian_arb", prec)
    return AccountingRecord(
        quantity="sigma", value=cert.value, mechanism="gaussian", method="analytic_gaussian",
        inputs={"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity}, certified=cert,
        details={"reference": "Balle & Wang 2018, Algorithm 1 (certified search)",
                 "arb_evaluations": br.evaluations},
        wall_time_s=time.perf_counter() - start)


def gdp_to_dp(mu: float, delta: float) -> AccountingRecord:
    """ε such that μ-GDP implies (ε, δ)-DP (certified upper bound). Legal range: 0 < μ ≤ mu_max(δ)."""
    mu = v.positive("mu", mu)
    delta = v.open_unit("delta", delta)
    top = mu_max(delta)
    if mu > top:
        raise InvalidParameter("mu", mu, f"(0, μ_max(δ)] = (0, {top!r}] at delta={delta!r} (so that ε ≤ {EPS_MAX:g})")
    start = time.perf_counter()
    cert, evals = _certified_epsilon(lambda: arb(mu), mu, delta)
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="mu_gdp", method="gdp_to_dp",
        inputs={"mu": mu, "delta": delta}, certified=cert,
        details={"reference": "Dong, Roth & Su 2019, Corollary 2.13", "arb_evaluations": evals},
        wall_time_s=time.perf_counter() - start)


def dp_to_gdp(epsilon: float, delta: float) -> AccountingRecord:
    """Largest μ (certified) such that μ-GDP implies (ε, δ)-DP. Reported on the safe (lower) side.

    Legal range: 0 < ε ≤ EPS_MAX, 0 < δ < 1.
    """
    epsilon = check_epsilon(epsilon)
    delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    br, prec = _certified_mu(epsilon, delta)
    cert = Certified.from_bracket(br.holds_end, br.fails_end, "analytic_gaussian_arb", prec, side="lower")
    return AccountingRecord(
        quantity="mu", value=cert.value, mechanism="mu_gdp", method="dp_to_gdp",
        inputs={"epsilon": epsilon, "delta": delta}, certified=cert,
        details={"reference": "Dong, Roth & Su 2019, Corollary 2.13 (certified search)",
                 "arb_evaluations": br.evaluations},
        wall_time_s=time.perf_counter() - start)
