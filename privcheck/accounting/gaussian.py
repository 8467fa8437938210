"""Exact (Balle–Wang analytic) Gaussian mechanism accounting, certified in Arb, and μ-GDP conversions.

For the Gaussian mechanism with L2 sensitivity Δ and noise N(0, σ²), μ = Δ/σ and the exact privacy profile
is (Balle & Wang 2018, Thm. 8; Dong, Roth & Su 2019 for μ-GDP)

    δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε · Φ(−μ/2 − ε/μ),

decreasing in ε and increasing in μ. Every figure reported here is certified: a float search proposes a
point and Arb decides `δ(ε; μ) ≤ δ` on the whole ball. The reported ε is the certified end (δ(ε) ≤ δ holds
there); the reported σ likewise; the reported μ is the largest certified one. Proof sketch: docs/accounting.md.
"""

from __future__ import annotations

import math
import time

import numpy as np
from flint import arb
from scipy.optimize import brentq
from scipy.special import log_ndtr

from privcheck import validation as v
from privcheck.accounting.records import AccountingRecord
from privcheck.numerics.ball import ThresholdPredicate, normal_cdf
from privcheck.numerics.bracket import certified_crossing
from privcheck.numerics.certified import Certified

__all__ = ["EPS_MAX", "MU_MAX", "delta_ball", "delta_float", "dp_to_gdp", "gaussian_epsilon", "gaussian_sigma",
    "gdp_to_dp"]

EPS_MAX = 1e4       # search ceiling for ε (a larger ε is meaningless as a DP guarantee)
MU_MAX = 1e3


def delta_ball(epsilon, mu) -> arb:
    """δ(ε; μ) as an Arb ball at the current working precision (ε, μ: floats or balls)."""
    e, m = arb(epsilon), arb(mu)
    return normal_cdf(m / 2 - e / m) - e.exp() * normal_cdf(-m / 2 - e / m)


def delta_float(epsilon: float, mu: float) -> float:
    """Float δ(ε; μ) for proposing search points (never reported)."""
    a = log_ndtr(mu / 2 - epsilon / mu)
    b = epsilon + log_ndtr(-mu / 2 - epsilon / mu)
    return float(np.exp(a) - np.exp(b)) if a > b else 0.0


def _float_root(f, lo: float, hi: float) -> float:
    """Root of a decreasing-in-x sign change, widening `hi` if needed; falls back to lo on failure."""
    while f(hi) > 0 and hi < 1e12:
        hi *= 2
    try:
        return brentq(f, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500)
    except ValueError:
        return lo


def _certified_epsilon(mu_ball, mu_float: float, delta: float) -> tuple[Certified, int]:
    """Smallest certified ε with δ(ε; μ) ≤ δ, μ given exactly as a ball (`mu_ball()`)."""
    holds = ThresholdPredicate(lambda e: delta_ball(e, mu_ball()), delta)
    if holds(0.0) is True:
        return Certified.from_bracket(0.0, 0.0, "analytic_gaussian_arb", holds.precision_bits), 1
    est = _float_root(lambda e: delta_float(e, mu_float) - delta, 0.0, max(1.0, mu_float * mu_float))
    br = certified_crossing(holds, est, domain=(0.0, EPS_MAX), increasing=True)
    cert = Certified.from_bracket(br.fails_end, br.holds_end, "analytic_gaussian_arb", holds.precision_bits)
    return cert, br.evaluations + 1


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> AccountingRecord:
    """ε of the Gaussian mechanism N(0, σ²) at L2 sensitivity Δ and target δ (certified upper bound)."""
    sigma = v.positive("sigma", sigma)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    start = time.perf_counter()
    cert, evals = _certified_epsilon(lambda: arb(sensitivity) / arb(sigma), sensitivity / sigma, delta)
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="gaussian", method="analytic_gaussian",
        inputs={"sigma": sigma, "sensitivity": sensitivity, "delta": delta}, certified=cert,
        details={"reference": "Balle & Wang 2018, Theorem 8", "arb_evaluations": evals},
        wall_time_s=time.perf_counter() - start)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> AccountingRecord:
    """Smallest σ (certified) with δ(ε; Δ/σ) ≤ δ: the returned σ always meets (ε, δ)."""
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    start = time.perf_counter()
    holds = ThresholdPredicate(lambda s: delta_ball(epsilon, arb(sensitivity) / arb(s)), delta)
    mu_est = _mu_estimate(epsilon, delta)
    br = certified_crossing(holds, sensitivity / mu_est, domain=(sensitivity / MU_MAX, 1e12), increasing=True)
    cert = Certified.from_bracket(br.fails_end, br.holds_end, "analytic_gaussian_arb", holds.precision_bits)
    return AccountingRecord(
        quantity="sigma", value=cert.value, mechanism="gaussian", method="analytic_gaussian",
        inputs={"epsilon": epsilon, "delta": delta, "sensitivity": sensitivity}, certified=cert,
        details={"reference": "Balle & Wang 2018, Algorithm 1 (certified search)",
                 "arb_evaluations": br.evaluations},
        wall_time_s=time.perf_counter() - start)


def _mu_estimate(epsilon: float, delta: float) -> float:
    # δ(ε; μ) increases in μ: find μ with δ(ε; μ) = δ.
    return _float_root(lambda m: delta - delta_float(epsilon, m), 1e-6, max(1.0, 2 * math.sqrt(epsilon) + 1))


def gdp_to_dp(mu: float, delta: float) -> AccountingRecord:
    """ε such that μ-GDP implies (ε, δ)-DP (certified upper bound)."""
    mu = v.positive("mu", mu)
    delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    cert, evals = _certified_epsilon(lambda: arb(mu), mu, delta)
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="mu_gdp", method="gdp_to_dp",
        inputs={"mu": mu, "delta": delta}, certified=cert,
        details={"reference": "Dong, Roth & Su 2019, Corollary 2.13", "arb_evaluations": evals},
        wall_time_s=time.perf_counter() - start)


def dp_to_gdp(epsilon: float, delta: float) -> AccountingRecord:
    """Largest μ (certified) such that μ-GDP implies (ε, δ)-DP. Reported on the safe (lower) side."""
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    holds = ThresholdPredicate(lambda m: delta_ball(epsilon, m), delta)
    br = certified_crossing(holds, _mu_estimate(epsilon, delta), domain=(1e-12, MU_MAX), increasing=False)
    cert = Certified.from_bracket(br.holds_end, br.fails_end, "analytic_gaussian_arb", holds.precision_bits,
                                  side="lower")
    return AccountingRecord(
        quantity="mu", value=cert.value, mechanism="mu_gdp", method="dp_to_gdp",
        inputs={"epsilon": epsilon, "delta": delta}, certified=cert,
        details={"reference": "Dong, Roth & Su 2019, Corollary 2.13 (certified search)",
                 "arb_evaluations": br.evaluations},
        wall_time_s=time.perf_counter() - start)
