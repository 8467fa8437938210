"""Poisson-subsampled Gaussian (DP-SGD / DP-GRPO): PLD, RDP, exact single round, small-T quadrature.

Independent references used here:
- Table VI of the DP-GRPO paper and the JAX-Privacy reference (docs/accounting.md);
- dp-accounting called directly through its `PLDAccountant` / event API (a different call path from the
  library's `from_gaussian_mechanism(...).self_compose(T)`);
- the exact single-round profile written below in mpmath at 60 digits, and mpmath quadrature
  (`privcheck.numerics.crosscheck`, which integrates the densities and finds the crossing by bisection).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import dp_accounting
import mpmath
import pytest
from dp_accounting.pld import pld_privacy_accountant
from flint import ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting import (
    composed_delta_quadrature,
    epsilon_pld,
    epsilon_quadrature,
    epsilon_rdp,
    epsilon_single_round_certified,
    gaussian_epsilon,
    single_round_delta_ball,
    single_round_delta_integral,
)
from privcheck.accounting.dpsgd import delta_single_float
from privcheck.numerics import crosscheck
from tests.accounting.reference_store import FFT_REL_TOL, ReferenceStore

DPS = 60
# dp-accounting's accountant and the mpmath quadrature below are stored references (tests/accounting/
# reference_store.py); `test_stored_references_match_live` recomputes a seeded sample of them on every run
STORE = ReferenceStore("dpsgd", libraries=("dp-accounting",), mpmath_dps=DPS, rel_tol=FFT_REL_TOL)

# Table VI (docs/accounting.md): (id, n, m, T, σ from Table VII, PLD paper, PLD repro, RDP dp-accounting 0.6.0,
# optimal RDP order printed in the paper)
TABLE_VI = [
    ("math_eps1", 6988, 128, 50, 1.0023417361080647, 1.000, 1.0000, 1.4628, 7.6),
    ("math_eps4.23", 6988, 128, 50, 0.612058477104, 4.235, 4.2349, 5.3225, 3.2),
    ("math_eps8_reference", 6988, 128, 50, 0.4842404738068581, 8.000, 8.0000, 9.8330, 2.3),
    ("math_dpsft_T100", 6988, 128, 100, 0.519267738191411, 8.000, 8.0000, 9.7081, 2.3),
    ("math_coverage_G2", 6988, 512, 50, 0.7022244453430175, 8.000, 7.99998, 9.3410, 2.6),
    ("math_canary_rank4", 6988, 128, 100, 0.612058477104, 5.038, 5.038498, 6.1847, 3.0),
    ("gsm8k_csqa", 6961, 128, 100, 0.5196564674377442, 8.000, 8.0000, 9.7074, 2.3),
]
ROWS = [pytest.param(*row[1:], id=row[0]) for row in TABLE_VI]


@STORE.memo
def dpa_epsilon(q, sigma, T, delta, interval=1e-4):
    """ε from dp-accounting's own accountant API not through the library."""
    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=interval)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)
    return float(acc.get_epsilon(delta))


# --- exact single round in mpmath (written here) --------------------------------------------------

@STORE.memo
def quadrature_delta_single(q, sigma, eps):
    """mpmath quadrature of the single-round densities (privcheck.numerics.crosscheck, its default precision)."""
    return crosscheck.subsampled_gaussian_delta_single_round(q, sigma, eps)


def test_stored_references_match_live():
    STORE.recheck(2, seed=1, function="dpa_epsilon", where=lambda a: a[2] <= 20)
    STORE.recheck(1, seed=2, function="dpa_epsilon", where=lambda a: a[2] >= 50 and a[1] > 1)   # MATH ε=1 row
    STORE.recheck(2, seed=3, function="quadrature_delta_single", rel_tol=1e-12)   # mpmath: no FFT


def mp_delta_ab(q, sigma, eps):
    """H_{e^ε}(A‖B), A = (1−q)N(0,σ²) + qN(1,σ²), B = N(0,σ²), for any real ε.

    The loss L(x) = log(1 − q + q e^{(2x−1)/(2σ²)}) increases from log(1−q): {a > e^ε b} = (x*, ∞) with
    x* = σ² log((e^ε − 1 + q)/q) + 1/2, or the whole line when ε ≤ log(1 − q) (then H = 1 − e^ε).
    """
    with mpmath.workdps(DPS):
        q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)
        alpha = mpmath.exp(e)
        if q < 1 and e <= mpmath.log(1 - q):
            return 1 - alpha
        x = s**2 * mpmath.log((alpha - 1 + q) / q) + mpmath.mpf(1) / 2
        return q * mpmath.ncdf(-(x - 1) / s) - (alpha - 1 + q) * mpmath.ncdf(-x / s)


def mp_delta_ba(q, sigma, eps):
    """H_{e^ε}(B‖A): {b > e^ε a} = (−∞, x**), x** = σ² log((e^{−ε} − 1 + q)/q) + 1/2, empty if e^{−ε} ≤ 1 − q."""
    with mpmath.workdps(DPS):
        q, s, e = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(eps)
        alpha = mpmath.exp(e)
        if mpmath.exp(-e) <= 1 - q:
            return mpmath.mpf(0)
        x = s**2 * mpmath.log((mpmath.exp(-e) - 1 + q) / q) + mpmath.mpf(1) / 2
        return (1 - alpha * (1 - q)) * mpmath.ncdf(x / s) - alpha * q * mpmath.ncdf((x - 1) / s)


def mp_delta_single(q, sigma, eps):
    return max(mp_delta_ab(q, sigma, eps), mp_delta_ba(q, sigma, eps))


def mp_gauss_delta(eps, mu):
    with mpmath.workdps(DPS):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)


def _frac_exact(x) -> Fraction:
    man, exp = x.man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def _mp_in_ball(ball, value) -> bool:
    """Exact containment test: [mid − rad, mid + rad] against the mpf's exact binary value."""
    mid, rad = _frac_exact(ball.mid()), _frac_exact(ball.rad())
    man, exp = value.man_exp                       # unsigned in mpmath
    v = (-1 if value < 0 else 1) * Fraction(int(man)) * Fraction(2) ** int(exp)
    return mid - rad <= v <= mid + rad


# --- Table VI -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,T,sigma,paper,repro,rdp060,order", ROWS)
def test_table_vi_pld(n, m, T, sigma, paper, repro, rdp060, order):
    rec = epsilon_pld(m / n, sigma, T, 1 / (10 * n))
    assert rec.reason is None and math.isfinite(rec.value)
    assert abs(rec.value - paper) <= 1e-3, f"PLD {rec.value} vs paper {paper}"
    assert abs(rec.value - repro) <= 1e-4, f"PLD {rec.value} vs reproduced {repro}"
    assert rec.method == "pld_float" and rec.neighboring == "add_remove"
    assert rec.details["interval"] == 1e-4 and rec.details["pessimistic"] is True
    assert rec.details["connect_dots"] is True
    assert rec.libraries["dp-accounting"] == "0.6.0"


@pytest.mark.parametrize("n,m,T,sigma,paper,repro,rdp060,order", ROWS)
def test_table_vi_rdp_cross_check(n, m, T, sigma, paper, repro, rdp060, order):
    q, delta = m / n, 1 / (10 * n)
    rdp = epsilon_rdp(q, sigma, T, delta)
    pld = epsilon_pld(q, sigma, T, delta)
    assert abs(rdp.value - rdp060) <= 5e-3, f"RDP {rdp.value} vs dp-accounting 0.6.0 column {rdp060}"
    assert rdp.value >= pld.value - 1e-6, "RDP (looser) below PLD"
    assert rdp.details["order"] == pytest.approx(order), "optimal order differs from the paper's"


def test_coverage_row_integer_order_and_excluded_orders():
    """§5.5: for the coverage row order 2 gives 11.5086 (both versions) and orders 1.1–1.5 are excluded."""
    q, sigma, T, delta = 512 / 6988, 0.7022244453430175, 50, 1 / 69880
    assert abs(epsilon_rdp(q, sigma, T, delta, orders=(2,)).value - 11.5086) <= 1e-4
    full = epsilon_rdp(q, sigma, T, delta)
    assert full.details["excluded_orders"] == [1.1, 1.2, 1.3, 1.4, 1.5]


@pytest.mark.parametrize("n,m,T,sigma,paper,repro,rdp060,order", ROWS)
def test_pld_equals_dp_accounting_accountant(n, m, T, sigma, paper, repro, rdp060, order):
    q, delta = m / n, 1 / (10 * n)
    assert abs(epsilon_pld(q, sigma, T, delta).value - dpa_epsilon(q, sigma, T, delta)) <= 1e-8


@pytest.mark.parametrize("q,sigma,T,delta", [(0.1, 1.0, 1, 1e-5), (0.3, 2.0, 7, 1e-5), (1.0, 1.5, 3, 1e-6),
                                             (0.02, 0.8, 20, 1e-7)])
def test_pld_equals_dp_accounting_small_configs(q, sigma, T, delta):
    assert abs(epsilon_pld(q, sigma, T, delta).value - dpa_epsilon(q, sigma, T, delta)) <= 1e-8
    coarse = epsilon_pld(q, sigma, T, delta, interval=1e-3)
    assert coarse.details["interval"] == 1e-3
    assert abs(coarse.value - dpa_epsilon(q, sigma, T, delta, interval=1e-3)) <= 1e-8


def test_jax_privacy_reference():
    """JAX-Privacy: q = 0.1, σ = 3, T = 512, δ = 1e-6 → PLD 3.7697 (published 3.77); RDP 4.0510 at order 6.9."""
    pld = epsilon_pld(0.1, 3.0, 512, 1e-6)
    assert abs(pld.value - 3.7697) <= 1e-4
    assert abs(pld.value - 3.77) <= 5e-3
    assert abs(pld.value - dpa_epsilon(0.1, 3.0, 512, 1e-6)) <= 1e-8
    rdp = epsilon_rdp(0.1, 3.0, 512, 1e-6)
    assert abs(rdp.value - 4.0510) <= 2e-4 and rdp.details["order"] == pytest.approx(6.9)
    integer = epsilon_rdp(0.1, 3.0, 512, 1e-6, orders=tuple(range(2, 65)))
    assert abs(integer.value - 4.0519) <= 2e-4 and integer.details["order"] == 7


def test_pld_record_serialises():
    rec = epsilon_pld(0.1, 3.0, 512, 1e-6)
    out = json.loads(json.dumps(rec.to_json(), allow_nan=False))
    assert out["value"] == rec.value and out["certified"] is None
    assert out["inputs"] == {"sampling_rate": 0.1, "noise_multiplier": 3.0, "steps": 512, "delta": 1e-6}


# --- exact single round -----------------------------------------------------------------------------

SINGLE = [(0.1, 1.0, 1e-5), (0.01, 0.8, 1e-6), (0.5, 2.0, 1e-3), (1.0, 1.0, 1e-5),
          (128 / 6988, 0.4842404738068581, 1 / 69880), (0.25, 1.144, 1e-3)]


@pytest.fixture(scope="module")
def single_round_results():
    return {cfg: epsilon_single_round_certified(*cfg) for cfg in SINGLE}


@pytest.mark.parametrize("cfg", SINGLE, ids=[f"q{q:.3g}-s{s:.3g}-d{d:.0e}" for q, s, d in SINGLE])
def test_single_round_certified_brackets_the_exact_root(cfg, single_round_results):
    q, sigma, delta = cfg
    rec = single_round_results[cfg]
    cert = rec.certified
    assert rec.value == cert.upper and cert.upper - cert.lower <= 1e-9 * cert.upper
    # own 60-digit closed form
    assert mp_delta_single(q, sigma, cert.upper) <= delta
    assert mp_delta_single(q, sigma, cert.lower) > delta
    # mpmath quadrature of the densities (independent of any closed form)
    assert quadrature_delta_single(q, sigma, cert.upper) <= delta
    assert quadrature_delta_single(q, sigma, cert.lower) > delta


@pytest.mark.parametrize("cfg", SINGLE, ids=[f"q{q:.3g}-s{s:.3g}-d{d:.0e}" for q, s, d in SINGLE])
def test_pld_for_one_round_is_just_above_the_exact_epsilon(cfg, single_round_results):
    q, sigma, delta = cfg
    cert = single_round_results[cfg].certified
    pld = epsilon_pld(q, sigma, 1, delta).value
    assert pld >= cert.lower, "PLD (an upper bound) below the exact ε"
    assert pld - cert.lower <= 1e-6


def test_single_round_with_q_one_is_the_gaussian_mechanism():
    single = epsilon_single_round_certified(1.0, 0.7, 1e-6).certified
    gauss = gaussian_epsilon(0.7, 1e-6).certified
    assert single.lower <= gauss.upper and gauss.lower <= single.upper
    assert mp_gauss_delta(single.upper, 1 / mpmath.mpf(0.7)) <= 1e-6


def test_single_round_epsilon_zero_when_delta_exceeds_total_variation():
    # δ(0) = TV(A, B) = q(2Φ(1/(2σ)) − 1) ≈ 4e-4 ≤ 0.5
    rec = epsilon_single_round_certified(0.01, 10.0, 0.5)
    assert rec.value == 0.0 and mp_delta_single(0.01, 10.0, 0) <= 0.5


@pytest.mark.parametrize("q,sigma,delta", [(1.0, 0.035, 1e-10), (0.5, 0.02, 1e-10)])
def test_single_round_certified_for_epsilon_above_512(q, sigma, delta):
    """Valid inputs whose exact ε (589.01 and 1561.07, by bisection on the mpmath closed form) lies well
    inside the search domain (0, 1e4).

    The float search that proposes the starting point doubles ε up to 1024 and evaluates
    math.expm1(1024) there (OverflowError). The certified ε must come back all the same.
    """
    rec = epsilon_single_round_certified(q, sigma, delta)
    cert = rec.certified
    assert math.isfinite(rec.value)
    assert mp_delta_single(q, sigma, cert.upper) <= delta < mp_delta_single(q, sigma, cert.lower)


def test_quadrature_epsilon_q_one_moderate_epsilon():
    """q = 1, T = 1 is the Gaussian mechanism: ε(σ = 0.15, δ = 1e-6) ≈ 53.16, a valid input for
    `epsilon_quadrature`. Its ε search evaluates the B‖A float closed form at ε = 64, where
    log(expm1(−64) + q) = log(0) for q = 1 (ValueError)."""
    rec = epsilon_quadrature(1.0, 0.15, 1, 1e-6)
    cert = gaussian_epsilon(0.15, 1e-6).certified
    assert abs(rec.value - cert.upper) <= 1e-6 * cert.upper


@pytest.mark.parametrize("eps", [10.0, 30.0, 40.0])
def test_composed_delta_quadrature_q_one_large_epsilon(eps):
    """δ_{1,σ,1}(ε) for σ = 0.1 is the Gaussian profile with μ = 10: about 0.97 at ε = 30, 0.81 at ε = 40.
    For q = 1 and ε ≳ 37 the B‖A branch computes log(expm1(−ε) + 1) = log(0)."""
    want = float(mp_gauss_delta(eps, 10))
    assert want == pytest.approx(float(mp_delta_single(1.0, 0.1, eps)), rel=1e-12)
    assert abs(composed_delta_quadrature(1.0, 0.1, 1, eps) - want) <= 1e-9 * want


BALL_CASES = [(0.1, 1.0, 1.0), (0.5, 1.0, 0.3), (0.9, 0.7, 1.0), (128 / 6988, 0.48, 4.0), (1.0, 2.0, 0.5),
              (0.25, 1.144, 0.0), (0.01, 5.0, 1e-3), (0.3, 0.6, 6.0)]


@pytest.mark.parametrize("q,sigma,eps", BALL_CASES)
def test_single_round_closed_form_and_integral_agree_and_contain_mpmath(q, sigma, eps):
    ref = mp_delta_single(q, sigma, eps)
    with ctx.workprec(128):
        ball = single_round_delta_ball(q, sigma, eps)
    integral = single_round_delta_integral(q, sigma, eps)
    assert ball.is_finite() and integral.is_finite()
    assert ball.overlaps(integral), f"closed form {ball} and acb.integral {integral} disagree"
    assert _mp_in_ball(ball, ref), f"closed form {ball} misses mpmath {mpmath.nstr(ref, 30)}"
    assert _mp_in_ball(integral, ref), f"integral {integral} misses mpmath {mpmath.nstr(ref, 30)}"
    assert float(integral.rad()) <= 1e-20 * float(ref)


@pytest.mark.parametrize("q,sigma", [(0.1, 1.0), (0.5, 0.7), (1.0, 1.5), (0.9, 0.6)])
@pytest.mark.parametrize("eps", [-2.0, -0.3, 0.0, 0.05, 0.5, 2.0, 7.0])
def test_float_single_round_both_directions_for_every_real_epsilon(q, sigma, eps):
    """The float closed forms the T ≥ 2 recursion is built on, over negative ε too (H_α = 1 − α for small α)."""
    for direction, ref in (("ab", mp_delta_ab), ("ba", mp_delta_ba)):
        got, want = delta_single_float(q, sigma, eps, direction), float(ref(q, sigma, eps))
        assert abs(got - want) <= 1e-12 * max(abs(want), 1e-300) + 1e-16, (direction, got, want)


@pytest.mark.parametrize("q,sigma,eps", [(0.1, 1.0, 1.0), (0.5, 1.0, 0.3), (0.3, 0.6, 6.0)])
def test_quadrature_recursion_for_one_round_is_the_closed_form(q, sigma, eps):
    want = float(mp_delta_single(q, sigma, eps))
    assert abs(composed_delta_quadrature(q, sigma, 1, eps) - want) <= 1e-12 * want


@pytest.mark.parametrize("q,sigma,delta", [(0.1, 1.0, 1e-5), (0.25, 1.144, 1e-3)])
def test_quadrature_recursion_two_rounds_agrees_with_pld(q, sigma, delta):
    quad = epsilon_quadrature(q, sigma, 2, delta).value
    pld = epsilon_pld(q, sigma, 2, delta).value
    assert pld >= quad - 1e-9, "PLD (an upper bound) below the quadrature ε"
    assert abs(pld - quad) <= 1e-6


# --- monotonicity (hypothesis) -----------------------------------------------------------------------
# PLD at interval 1e-3 carries discretisation jitter. Measured before writing these tests: over 150 random
# configurations (q ∈ [0.01, 0.9], σ ∈ [0.5, 3], T ≤ 8, δ ∈ [1e-8, 1e-2]) with steps of 1e-9, 1e-6, 1e-3,
# ε decreased by up to 1.5e-9 when q increased; no violation at all in σ or in T. Tolerance: 1e-6.
JITTER = 1e-6
COARSE = 1e-3
_deltas = st.sampled_from([1e-8, 1e-6, 1e-5, 1e-3])


@settings(max_examples=10)
@given(q=st.floats(0.01, 0.9), dq=st.floats(1e-6, 0.1), sigma=st.floats(0.5, 3.0), T=st.integers(1, 8),
       delta=_deltas)
def test_property_pld_non_decreasing_in_q(q, dq, sigma, T, delta):
    lo = epsilon_pld(q, sigma, T, delta, interval=COARSE).value
    hi = epsilon_pld(min(q + dq, 1.0), sigma, T, delta, interval=COARSE).value
    assert lo <= hi + JITTER


@settings(max_examples=10)
@given(q=st.floats(0.01, 0.9), sigma=st.floats(0.5, 3.0), T=st.integers(1, 7), dT=st.integers(1, 4),
       delta=_deltas)
def test_property_pld_non_decreasing_in_steps(q, sigma, T, dT, delta):
    lo = epsilon_pld(q, sigma, T, delta, interval=COARSE).value
    hi = epsilon_pld(q, sigma, min(T + dT, 8), delta, interval=COARSE).value
    assert lo <= hi + JITTER


@settings(max_examples=10)
@given(q=st.floats(0.01, 1.0), sigma=st.floats(0.5, 3.0), ds=st.floats(1e-6, 0.5), T=st.integers(1, 8),
       delta=_deltas)
def test_property_pld_non_increasing_in_sigma(q, sigma, ds, T, delta):
    noisy = epsilon_pld(q, sigma + ds, T, delta, interval=COARSE).value
    less_noisy = epsilon_pld(q, sigma, T, delta, interval=COARSE).value
    assert noisy <= less_noisy + JITTER


@pytest.mark.slow
@pytest.mark.parametrize("q,sigma,delta", [(0.25, 1.144, 1e-3)])
def test_quadrature_recursion_three_rounds_agrees_with_pld(q, sigma, delta):
    """T = 3 costs ~(quadrature nodes)² per δ evaluation (~10 s): slow suite only."""
    quad = epsilon_quadrature(q, sigma, 3, delta).value
    pld = epsilon_pld(q, sigma, 3, delta).value
    assert pld >= quad - 1e-9
    assert abs(pld - quad) <= 1e-6


@pytest.mark.slow
@settings(max_examples=15)
@given(q=st.floats(0.01, 1.0), sigma=st.floats(0.5, 3.0), T=st.integers(1, 8), delta=_deltas,
       dq=st.floats(1e-9, 0.1), ds=st.floats(1e-9, 0.5))
def test_property_pld_monotone_fine_interval(q, sigma, T, delta, dq, ds):
    """The three monotonicity properties at the reported interval 1e-4, more examples."""
    base = epsilon_pld(q, sigma, T, delta).value
    assert base <= epsilon_pld(min(q + dq, 1.0), sigma, T, delta).value + JITTER
    assert base <= epsilon_pld(q, sigma, T + 1, delta).value + JITTER
    assert epsilon_pld(q, sigma + ds, T, delta).value <= base + JITTER


def test_epsilon_lower_bound_is_below_the_reported_pld_and_refuses_bad_input():
    """The optimistic PLD (a lower bound of the exact ε, docs/checks.md) sits in [ε_PLD − T·Δ, ε_PLD]; for one round
    it is below the Arb-certified exact ε. Bad input is refused before any work."""
    from privcheck.accounting import GaussianEvent, PoissonGaussianEvent, epsilon, epsilon_lower_bound
    from privcheck.errors import InvalidParameter

    for q, sigma, steps in ((0.02, 0.9, 40), (0.5, 1.3, 3)):
        event = PoissonGaussianEvent(q, sigma, steps)
        upper = epsilon(event, 1e-5).value
        lower = epsilon_lower_bound(event, 1e-5)
        assert upper - steps * 1e-4 <= lower < upper
    one = PoissonGaussianEvent(0.25, 1.144, 1)
    exact = epsilon(one, 1e-3, method="exact_single_round").certified
    assert epsilon_lower_bound(one, 1e-3, interval=1e-2) <= exact.lower
    for bad, name in (((GaussianEvent(1.0), 1e-5), "event"), ((one, 0.0), "delta"), ((one, 1.5), "delta")):
        with pytest.raises(InvalidParameter, match=name):
            epsilon_lower_bound(*bad)
    with pytest.raises(InvalidParameter, match="interval"):
        epsilon_lower_bound(one, 1e-5, interval=-1.0)
