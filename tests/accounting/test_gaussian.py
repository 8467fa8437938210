"""Analytic Gaussian mechanism (Balle & Wang 2018) and μ-GDP conversions.

Reference: the exact privacy profile written here in mpmath at 60 digits,

    δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ),   μ = Δ/σ,

(Balle & Wang 2018, Thm. 8; Dong, Roth & Su 2019, Cor. 2.13), decreasing in ε and increasing in μ. A
certified ε bracket [lower, upper] must satisfy δ(lower) > δ_target ≥ δ(upper).
"""

from __future__ import annotations

import dataclasses
import json
import math

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting import dp_to_gdp, gaussian_epsilon, gaussian_sigma, gdp_to_dp

DPS = 60


def mp_delta(eps, mu):
    """Exact Gaussian privacy profile at 60 digits (inputs taken exactly from floats)."""
    with mpmath.workdps(DPS):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)


def mp_mu(sensitivity, sigma):
    with mpmath.workdps(DPS):
        return mpmath.mpf(sensitivity) / mpmath.mpf(sigma)


def assert_epsilon_bracket(rec, mu, delta):
    cert = rec.certified
    assert cert is not None and cert.side == "upper"
    assert rec.value == cert.upper and cert.lower <= cert.upper
    if cert.upper == 0.0:
        assert cert.lower == 0.0
        assert mp_delta(0, mu) <= delta, "ε = 0 reported although δ(0) > δ"
        return
    d_hi, d_lo = mp_delta(cert.upper, mu), mp_delta(cert.lower, mu)
    assert d_hi <= delta, f"δ(upper={cert.upper!r}) = {mpmath.nstr(d_hi, 20)} > δ = {delta}"
    assert d_lo > delta, f"δ(lower={cert.lower!r}) = {mpmath.nstr(d_lo, 20)} ≤ δ = {delta}: not the smallest ε"
    assert cert.upper - cert.lower <= 1e-9 * cert.upper


GAUSS_CASES = [  # (sigma, delta, sensitivity)
    (1.0, 1e-5, 1.0), (3.73, 1e-5, 1.0), (0.5, 1e-10, 1.0), (10.0, 1e-3, 1.0), (4.0, 1e-6, 2.0),
    (0.2, 1e-6, 1.0), (50.0, 1e-2, 1.0), (0.05, 0.5, 1.0), (1e6, 1e-5, 1.0),
]


@pytest.mark.parametrize("sigma,delta,sens", GAUSS_CASES)
def test_gaussian_epsilon_bracket_contains_the_exact_root(sigma, delta, sens):
    rec = gaussian_epsilon(sigma, delta, sens)
    assert rec.quantity == "epsilon" and rec.mechanism == "gaussian"
    assert_epsilon_bracket(rec, mp_mu(sens, sigma), delta)


def test_huge_sigma_gives_epsilon_zero():
    # δ(0; μ) = 2Φ(μ/2) − 1 ≈ μ φ(0) = 4e-7 ≤ 1e-5 for σ = 1e6: ε = 0 is exact (and certified).
    rec = gaussian_epsilon(1e6, 1e-5)
    assert rec.value == 0.0
    assert mp_delta(0, mp_mu(1, 1e6)) <= 1e-5


def test_balle_wang_published_sigma():
    """Balle & Wang 2018: ε = 1, δ = 1e-5 needs σ ≈ 3.73 (the classical √(2 ln(1.25/δ))/ε gives 4.84)."""
    rec = gaussian_sigma(1.0, 1e-5)
    assert abs(rec.value - 3.73) < 5e-3
    assert rec.value < math.sqrt(2 * math.log(1.25 / 1e-5))


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (0.1, 1e-6), (0.9, 1e-3)])
def test_analytic_sigma_beats_the_classical_bound(eps, delta):
    """For ε < 1 the classical σ = √(2 ln(1.25/δ))/ε is sufficient (Dwork & Roth Thm A.1); the exact one is smaller."""
    classical = math.sqrt(2 * math.log(1.25 / delta)) / eps
    rec = gaussian_sigma(eps, delta)
    assert rec.value < classical
    assert mp_delta(eps, mp_mu(1, classical)) <= delta   # the classical σ does meet the target


@pytest.mark.parametrize("eps,delta,sens", [(1.0, 1e-5, 1.0), (0.5, 1e-6, 1.0), (4.0, 1e-3, 1.0),
                                            (2.0, 1e-5, 3.0), (10.0, 1e-8, 1.0), (0.05, 1e-2, 1.0)])
def test_gaussian_sigma_meets_target_and_is_minimal(eps, delta, sens):
    rec = gaussian_sigma(eps, delta, sens)
    sigma = rec.value
    assert rec.quantity == "sigma" and rec.certified.side == "upper" and sigma == rec.certified.upper
    assert mp_delta(eps, mp_mu(sens, sigma)) <= delta, "returned σ does not meet (ε, δ)"
    smaller = sigma * (1 - 1e-8)
    assert mp_delta(eps, mp_mu(sens, smaller)) > delta, "σ·(1 − 1e-8) still meets the target: σ not minimal"


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.3, 1e-6), (5.0, 1e-3), (20.0, 1e-9)])
def test_dp_to_gdp_is_certified_on_the_lower_side(eps, delta):
    rec = dp_to_gdp(eps, delta)
    mu = rec.value
    assert rec.quantity == "mu" and rec.certified.side == "lower" and mu == rec.certified.lower
    assert mp_delta(eps, mu) <= delta, "μ-GDP at the reported μ does not imply (ε, δ)"
    assert mp_delta(eps, mu * (1 + 1e-8)) > delta, "μ·(1 + 1e-8) still implies (ε, δ): μ not maximal"


@pytest.mark.parametrize("mu,delta", [(1.0, 1e-5), (0.1, 1e-6), (3.0, 1e-3), (10.0, 1e-10), (0.5, 0.2)])
def test_gdp_to_dp_is_certified_on_the_upper_side(mu, delta):
    rec = gdp_to_dp(mu, delta)
    assert_epsilon_bracket(rec, mpmath.mpf(mu), delta)
    if rec.value > 0:
        assert mp_delta(rec.value * (1 - 1e-8), mu) > delta


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.2, 1e-6), (8.0, 1e-4)])
def test_round_trip_dp_gdp_dp_is_safe(eps, delta):
    """ε → μ' = dp_to_gdp(ε) → ε'' = gdp_to_dp(μ'). μ' ≤ μ*(ε) so ε*(μ') ≤ ε; ε'' is ε*(μ') rounded up by at
    most the bracket width (relative 1e-10). Hence ε'' ≤ ε·(1 + 1e-9), μ' meets (ε, δ), and ε'' is close to ε."""
    mu = dp_to_gdp(eps, delta).value
    back = gdp_to_dp(mu, delta).value
    assert mp_delta(eps, mu) <= delta
    assert mp_delta(back, mu) <= delta
    assert back <= eps * (1 + 1e-9)
    assert abs(back - eps) <= 1e-8 * eps


@pytest.mark.parametrize("mu,delta", [(1.0, 1e-5), (0.25, 1e-6), (4.0, 1e-3)])
def test_round_trip_gdp_dp_gdp_is_safe(mu, delta):
    """μ → ε' = gdp_to_dp(μ) ≥ ε*(μ) → μ'' = dp_to_gdp(ε') ≥ μ·(1 − 1e-9) (μ itself meets (ε', δ))."""
    eps = gdp_to_dp(mu, delta).value
    back = dp_to_gdp(eps, delta).value
    assert mp_delta(eps, mu) <= delta
    assert mp_delta(eps, back) <= delta
    assert back >= mu * (1 - 1e-9)
    assert abs(back - mu) <= 1e-8 * mu


def test_gaussian_epsilon_equals_gdp_to_dp_and_scales_with_sensitivity():
    a = gaussian_epsilon(2.0, 1e-6)
    b = gaussian_epsilon(4.0, 1e-6, sensitivity=2.0)   # same μ = 0.5 exactly
    c = gdp_to_dp(0.5, 1e-6)
    assert a.value == b.value == c.value


def test_records_are_frozen_and_serialisable():
    rec = gaussian_sigma(1.0, 1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.value = 0.0
    with pytest.raises(TypeError):
        rec.inputs["epsilon"] = 2.0
    out = json.loads(json.dumps(rec.to_json(), allow_nan=False))
    assert out["value"] == rec.value and out["certified"]["upper"] == rec.value
    assert out["inputs"] == {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1.0}
    assert out["libraries"]["python-flint"] and out["libraries"]["mpmath"]


@settings(max_examples=25)
@given(sigma=st.floats(0.3, 30.0), factor=st.floats(1.001, 3.0),
       delta=st.sampled_from([1e-9, 1e-6, 1e-5, 1e-3, 0.1]))
def test_property_epsilon_decreasing_in_sigma(sigma, factor, delta):
    e1 = gaussian_epsilon(sigma, delta)
    e2 = gaussian_epsilon(sigma * factor, delta)
    assert e1.value >= e2.value
    if e2.value > 0:
        assert e1.value > e2.value
    assert_epsilon_bracket(e1, mp_mu(1, sigma), delta)


@settings(max_examples=15)
@given(sigma=st.floats(0.3, 30.0), d1=st.floats(1e-10, 0.5), ratio=st.floats(1.01, 100.0))
def test_property_epsilon_non_increasing_in_delta(sigma, d1, ratio):
    d2 = min(d1 * ratio, 0.9)
    assert gaussian_epsilon(sigma, d1).value >= gaussian_epsilon(sigma, d2).value


@settings(max_examples=15)
@given(eps=st.floats(0.05, 20.0), factor=st.floats(1.001, 2.0), delta=st.sampled_from([1e-8, 1e-5, 1e-3]))
def test_property_sigma_decreasing_in_epsilon(eps, factor, delta):
    s1, s2 = gaussian_sigma(eps, delta).value, gaussian_sigma(eps * factor, delta).value
    assert s1 > s2
    assert mp_delta(eps, mp_mu(1, s1)) <= delta
