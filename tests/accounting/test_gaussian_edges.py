"""Soundness at the edges of the certified Gaussian accountants (fast tier).

Oracles: tests/accounting/gaussian_oracles.py (mpmath, ≥ 60 digits, written independently of the library): the
Balle–Wang profile δ(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) solved by log-scale bisection, and mpmath.quad for
the report-noisy-max and AboveThreshold integrals. Each property covers the documented legal range
(docs/accounting.md, "Legal ranges of the certified Gaussian accountants"): the reported value is on the safe side
of the oracle, the oracle lies in the claimed enclosure, and no legal input raises. The slow tier
(test_gaussian_edges_slow.py) draws more examples from the same strategies.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from privcheck.accounting import gaussian
from privcheck.accounting.gaussian import dp_to_gdp, gaussian_epsilon, gaussian_sigma, gdp_to_dp
from privcheck.accounting.gaussian_selection import gaussian_at_expost_eps, gaussian_rnm_eps
from privcheck.errors import InvalidParameter
from tests.accounting import gaussian_oracles as O

EPS_MAX = 10_000
SIGMA_MAX = 1e300

# δ over (0, 1): log-uniform down to the smallest subnormal, plus the largest float below 1.
deltas = st.one_of(st.floats(-323.3, -1e-9).map(lambda x: 10.0 ** x).filter(lambda d: 0 < d < 1),
                   st.sampled_from([5e-324, 1e-300, 1e-10, 1e-5, 0.5, 1 - 2 ** -53]))


def _mp_delta_le(eps, mu_exact, delta) -> bool:
    with mpmath.workdps(O.DPS + 20):
        return O.gauss_delta(eps, mu_exact) <= mpmath.mpf(delta)


def check_epsilon_record(rec, mu_exact: Fraction, delta: float):
    """ε reported ≥ the exact ε* (δ(ε_rep) ≤ δ at 60+ digits), the root oracle inside [lower, upper]."""
    cert = rec.certified
    assert rec.value == cert.upper and cert.side == "upper" and 0 <= cert.lower <= cert.upper <= EPS_MAX
    assert _mp_delta_le(cert.upper, mu_exact, delta), "reported ε below the exact ε* (δ(ε) > δ there)"
    lo, hi = O.gauss_epsilon_root(mu_exact, delta)
    assert cert.lower <= hi and lo <= cert.upper, (cert, mpmath.nstr(lo, 20), mpmath.nstr(hi, 20))
    if cert.lower > 0:
        assert not _mp_delta_le(cert.lower, mu_exact, delta), "claimed lower end already meets δ"


def check_mu_bracket(mu_holds: float, mu_fails: float, eps: float, delta: float):
    lo, hi = O.gauss_mu_root(eps, delta)
    assert mu_holds <= hi and lo <= mu_fails
    assert _mp_delta_le(eps, Fraction(mu_holds), delta), "reported μ does not meet (ε, δ)"


def test_stored_oracles_match_live():
    for i, name in enumerate(("gauss_mu_max", "gauss_epsilon_root", "gauss_mu_root")):
        O.STORE.recheck(5, seed=i, function=name)
    O.STORE.recheck(1, seed=3, function="rnm_eps")
    O.STORE.recheck(1, seed=4, function="at_eps")


# --- analytic Gaussian: ε -------------------------------------------------------------------------------------

def legal_sigma(delta: float, u: float, k: int) -> tuple[float, float, Fraction] | None:
    """(σ, Δ, exact Δ/σ) with Δ = 10^k and Δ/σ ≤ μ_max(δ)·(1 − 1e-9)·10^{−330u}, or None if σ is not a float."""
    with mpmath.workdps(O.DPS + 20):
        mu_target = O.gauss_mu_max(delta) * (1 - mpmath.mpf("1e-9")) * mpmath.mpf(10) ** (-330 * u)
        sens = float(10.0 ** k)
        if not 0 < sens < math.inf:
            return None
        sigma = float(mpmath.mpf(sens) / mu_target)
        if not 0 < sigma < math.inf:
            return None
        target = O.to_fraction(mu_target)
        while Fraction(sens) / Fraction(sigma) > target:
            sigma = math.nextafter(sigma, math.inf)
        return sigma, sens, Fraction(sens) / Fraction(sigma)


@settings(max_examples=25)
@given(delta=deltas, u=st.floats(0, 1), k=st.integers(-300, 300))
@example(delta=1e-5, u=0.0, k=0)        # the cap: Δ/σ at μ_max(δ), ε ≈ 9.8e3 (before: σ = 0.006 raised)
@example(delta=5e-324, u=0.0, k=0)
@example(delta=1 - 2 ** -53, u=0.0, k=0)
@example(delta=1e-300, u=0.99, k=-300)
def test_gaussian_epsilon_full_range(delta, u, k):
    gaussian_epsilon_case(delta, u, k)


def gaussian_epsilon_case(delta, u, k):
    """One analytic-Gaussian point of the legal range against the oracle (shared with the slow sweep)."""
    legal = legal_sigma(delta, u, k)
    if legal is None:
        return
    sigma, sens, mu = legal
    check_epsilon_record(gaussian_epsilon(sigma, delta, sens), mu, delta)


def test_mu_max_is_the_documented_cap():
    """mu_max(δ) = √(z² + 2·10⁴) − z rounded down, z = Φ̄⁻¹(δ): within 1e-9 of the 60-digit value, never above."""
    for delta in (5e-324, 1e-300, 1e-10, 1e-5, 0.5, 1 - 2 ** -53):
        ref = O.gauss_mu_max(delta)
        assert ref * (1 - mpmath.mpf("1e-9")) <= gaussian.mu_max(delta) <= ref


def test_gaussian_epsilon_refuses_beyond_the_cap_before_work():
    """Before: σ = 0.006 at δ = 1e-5 (μ = 166.7 > 137.2) raised CertificationError after a search; Δ = 1e300,
    σ = 1e-300 raised scipy's RuntimeError (the float Δ/σ overflowed). Now: InvalidParameter naming σ."""
    for sigma, delta, sens in ((0.006, 1e-5, 1.0), (1e-300, 0.5, 1e300)):
        with pytest.raises(InvalidParameter) as info:
            gaussian_epsilon(sigma, delta, sens)
        assert info.value.name == "sigma" and "μ_max" in info.value.allowed
    top = gaussian.mu_max(1e-5)
    sigma = 1.0 / top
    while Fraction(1) / Fraction(sigma) > Fraction(top):
        sigma = math.nextafter(sigma, math.inf)
    rec = gaussian_epsilon(sigma, 1e-5)                   # the last legal σ: ε just below the cap
    assert 9000 < rec.value <= EPS_MAX
    with pytest.raises(InvalidParameter):
        gaussian_epsilon(math.nextafter(1.0 / top, 0.0) * (1 - 1e-12), 1e-5)
    with pytest.raises(InvalidParameter) as info:
        gdp_to_dp(top * 1.001, 1e-5)
    assert info.value.name == "mu"


# --- analytic Gaussian: σ and μ -------------------------------------------------------------------------------

@settings(max_examples=25)
@given(delta=deltas, x=st.floats(-323.0, 4.0), k=st.integers(-323, 308))
@example(delta=1e-5, x=0.0, k=20)            # before: CertificationError (σ = 3.7e20 beyond the 1e12 cap)
@example(delta=1e-20, x=-14.0, k=0)          # before: CertificationError (μ* = 2.4e-15 below the 1e-12 floor)
@example(delta=1e-300, x=-300.0, k=0)        # before: CertificationError; σ = 2.8e299
@example(delta=1e-5, x=4.0, k=0)             # ε = 1e4, the top of the range
@example(delta=5e-324, x=-323.0, k=-323)
def test_gaussian_sigma_full_range(delta, x, k):
    eps = min(10.0 ** x, float(EPS_MAX))
    sens = float(10.0 ** k)
    if not (eps > 0 and sens > 0):
        return
    with mpmath.workdps(O.DPS + 20):
        z = O.gauss_z(delta)
        e = O.exact(eps)
        mu_lo = max(delta * mpmath.sqrt(2 * mpmath.pi),
                    2 * e / (mpmath.sqrt(z * z + 2 * e) + z) if z > 0 else mpmath.sqrt(z * z + 2 * e) - z)
        legal = mpmath.mpf(sens) <= SIGMA_MAX * mu_lo * (1 - mpmath.mpf("1e-6"))
        illegal = mpmath.mpf(sens) > SIGMA_MAX * mu_lo * (1 + mpmath.mpf("1e-6"))
    if illegal:
        with pytest.raises(InvalidParameter) as info:
            gaussian_sigma(eps, delta, sens)
        assert info.value.name == "sensitivity"
        return
    if not legal:
        return
    rec = gaussian_sigma(eps, delta, sens)
    cert = rec.certified
    assert rec.value == cert.upper and 0 <= cert.lower <= cert.upper < math.inf
    assert _mp_delta_le(eps, Fraction(sens) / Fraction(cert.upper), delta), "reported σ does not meet (ε, δ)"
    lo, hi = O.gauss_mu_root(eps, delta)
    with mpmath.workdps(O.DPS + 20):
        # μ* ∈ [lo, hi] so σ* = Δ/μ* ∈ [Δ/hi, Δ/lo]: the enclosure must meet that interval
        assert O.exact(cert.lower) <= mpmath.mpf(sens) / lo
        assert mpmath.mpf(sens) / hi <= O.exact(cert.upper)


@settings(max_examples=10)
@given(delta=deltas, x=st.floats(-323.0, 4.0))
@example(delta=1e-20, x=-14.0)               # before: CertificationError
def test_dp_to_gdp_full_range(delta, x):
    eps = min(10.0 ** x, float(EPS_MAX))
    if not eps > 0:
        return
    rec = dp_to_gdp(eps, delta)
    assert rec.value == rec.certified.lower > 0
    check_mu_bracket(rec.certified.lower, rec.certified.upper, eps, delta)


def test_gaussian_sigma_range_errors():
    with pytest.raises(InvalidParameter) as info:
        gaussian_sigma(2e4, 1e-5)                     # before: accepted (ε above the cap of the ε axis)
    assert info.value.name == "epsilon" and "10000" in info.value.allowed
    with pytest.raises(InvalidParameter) as info:
        gaussian_sigma(1e-320, 5e-324, 1.0)           # σ* ≈ 8e322 is not a float: refused, not inf
    assert info.value.name == "sensitivity"
    with pytest.raises(InvalidParameter):
        dp_to_gdp(1e4 * (1 + 1e-15), 1e-5)


# --- Gaussian report-noisy-max and AboveThreshold ------------------------------------------------------------

def check_selection(rec, oracle):
    value, err = oracle
    cert = rec.certified
    assert rec.value == cert.upper and cert.side == "upper" and cert.lower >= 0
    assert cert.upper >= value - err, f"reported ε {cert.upper!r} below the oracle {mpmath.nstr(value, 25)}"
    assert cert.lower <= value + err, f"oracle {mpmath.nstr(value, 25)} below the enclosure {cert}"


def score_span(a_units: float, s: float, scale: float) -> tuple[float, float]:
    a = a_units * scale
    b = a + s * scale
    if not b > a:
        b = math.nextafter(a, math.inf)
    return a, b


def delta_in(frac: float, a: float, b: float) -> float:
    gap = Fraction(b) - Fraction(a)
    sens = max(float(gap * Fraction(frac)), 5e-324)
    while Fraction(sens) > gap:
        sens = math.nextafter(sens, 0.0)
    return sens


@settings(max_examples=2)
@given(d=st.one_of(st.integers(2, 64), st.integers(2, 2 ** 53)), k=st.integers(-300, 300),
       a_units=st.floats(-50, 50), s=st.floats(1e-3, 100.0), frac=st.floats(-300, 0).map(lambda x: 10.0 ** x))
def test_rnm_full_range(d, k, a_units, s, frac):
    rnm_case(d, k, a_units, s, frac)


def rnm_case(d, k, a_units, s, frac):
    """One report-noisy-max point of the legal range against the oracle (shared with the slow sweep)."""
    sigma = 10.0 ** k
    a, b = score_span(a_units, s, sigma)
    if Fraction(b) - Fraction(a) > 100 * Fraction(sigma):
        return
    sens = delta_in(frac, a, b)
    check_selection(gaussian_rnm_eps(d, sigma, sens, a, b), O.rnm_eps(d, sigma, sens, a, b))


@settings(max_examples=2)
@given(t=st.one_of(st.integers(1, 32), st.integers(1, 2 ** 53)), k=st.integers(-300, 300),
       a_units=st.floats(-50, 50), s=st.floats(1e-3, 50.0), rho_u=st.floats(0, 1), ratio=st.floats(-3, 2),
       frac=st.floats(-300, 0).map(lambda x: 10.0 ** x))
def test_at_full_range(t, k, a_units, s, rho_u, ratio, frac):
    at_case(t, k, a_units, s, rho_u, ratio, frac)


def at_case(t, k, a_units, s, rho_u, ratio, frac):
    """One AboveThreshold point of the legal range against the oracle (shared with the slow sweep)."""
    sigma_z = 10.0 ** k
    sigma_x = sigma_z * 10.0 ** ratio
    a, b = score_span(a_units, s, sigma_z)
    rho = (b - 100 * sigma_z) + rho_u * ((a + 100 * sigma_z) - (b - 100 * sigma_z))
    A, B, R, SZ, SX = map(Fraction, (a, b, rho, sigma_z, sigma_x))
    if not (B - A <= 100 * SZ and SX <= 100 * SZ and B - 100 * SZ <= R <= A + 100 * SZ):
        return
    sens = delta_in(frac, a, b)
    check_selection(gaussian_at_expost_eps(t, rho, sigma_x, sigma_z, sens, a, b),
                    O.at_eps(t, rho, sigma_x, sigma_z, sens, a, b))


def test_tiny_sensitivity_is_accepted_at_its_absolute_resolution():
    """Before: Δ = 1e-300 took 2048 bits and 15 s for RNM (5e-324: 4096 bits, 94 s) and > 15 s for AT, because the
    relative radius 1e-12 of ε ≈ 1e-299 needs the integrals to ~1e-311. Now the absolute resolution 1e-30 is met at
    the first precision, and the enclosure still contains the 60-digit value."""
    rec = gaussian_rnm_eps(2, 0.3, 1e-300)
    assert rec.certified.precision_bits == 256
    check_selection(rec, O.rnm_eps(2, 0.3, 1e-300, 0.0, 1.0))
    at = gaussian_at_expost_eps(3, 0.75, 0.3, 0.5, 5e-324)
    assert at.certified.precision_bits == 256 and 0 < at.value <= 1e-28


def test_score_span_enters_exactly():
    """a = −1e308, b = 1e308: b − a overflows in floats (before: CertificationError, the float mode search saw
    −inf); the span is exact now, and the ε is the 60-digit one."""
    a, b, sigma = -1e308, 1e308, 1e307
    rec = gaussian_rnm_eps(3, sigma, 1e307, a, b)
    check_selection(rec, O.rnm_eps(3, sigma, 1e307, a, b))


def test_selection_range_errors_name_the_parameter():
    """Beyond the documented range the accountants refuse before any work (before: `gaussian_rnm_eps(3, 1e-7, 0.5)`
    raised CertificationError "mode too far out" after the mode search; d = 10³⁰ likewise)."""
    cases = [
        (lambda: gaussian_rnm_eps(3, 1e-7, 0.5), "sigma"),
        (lambda: gaussian_rnm_eps(10 ** 30, 0.3, 0.1), "queries"),
        (lambda: gaussian_rnm_eps(2 ** 53 + 1, 0.3, 0.1), "queries"),
        (lambda: gaussian_at_expost_eps(2 ** 53 + 1, 0.5, 0.3, 0.3, 0.1), "halting_time"),
        (lambda: gaussian_at_expost_eps(3, 0.5, 1.0, 0.001, 0.5), "sigma_query"),
        (lambda: gaussian_at_expost_eps(3, 0.5, 10.0, 0.05, 0.5), "sigma_threshold"),
        (lambda: gaussian_at_expost_eps(3, 1e300, 1.0, 1.0, 0.5), "threshold"),
        (lambda: gaussian_at_expost_eps(3, -99.5, 1.0, 1.0, 0.5), "threshold"),
    ]
    for call, name in cases:
        with pytest.raises(InvalidParameter) as info:
            call()
        assert info.value.name == name and info.value.allowed


def test_counts_are_python_ints_without_wrap():
    """numpy integers are accepted as the same Python int (no int64 arithmetic downstream); 2^53 is legal."""
    assert gaussian_rnm_eps(np.int64(5), 0.3, 0.1).value == gaussian_rnm_eps(5, 0.3, 0.1).value
    rec = gaussian_rnm_eps(2 ** 53, 0.3, 0.1)
    assert rec.inputs["queries"] == 2 ** 53 and isinstance(rec.inputs["queries"], int)
    assert gaussian_rnm_eps(2 ** 52, 0.3, 0.1).certified.lower <= rec.certified.upper   # nondecreasing in d
