"""One-run p-value and ε_lower (docs/audits.md, "Proof notes"): reference values, mpmath and closed-form cross-checks,
monotonicity and ceiling properties, the bisection invariant and the report built from counts."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import betaincinv, logit

from audits.statistics import one_run, pvalue
from audits.statistics.one_run import eps_lower, from_counts, p_value, search_eps_lower
from privcheck import validation
from tests.audits import mp_reference as ref

DELTA_GRPO = 1 / 69880


# --- reference values (docs/audits.md) ----------------------------------------------------------------------------

@pytest.mark.parametrize("r, delta, expected", [(100, 0.0, 3.4930), (100, 1e-5, 3.4654), (1000, 0.0, 5.8091),
                                                (1000, 1e-5, 5.7823)])
def test_perfect_guessing_table(r, delta, expected):
    assert eps_lower(1000, r, r, delta, 0.05) == pytest.approx(expected, abs=1e-4)


def test_reference_p_value():
    assert p_value(1000, 100, 90, 1.0, 1e-5) == pytest.approx(8.412886e-04, rel=1e-6)


@pytest.mark.parametrize("m, r, v, expected, tol", [(1000, 100, 100, 3.465376, 1e-6), (1000, 100, 90, 1.626143, 1e-6),
                                                    (1000, 1000, 500, 0.0, 0.0)])
def test_reference_eps_lower(m, r, v, expected, tol):
    assert abs(eps_lower(m, r, v, 1e-5, 0.05) - expected) <= tol


@pytest.mark.parametrize("delta, expected", [(0.0, 5.8091), (1e-5, 5.7823), (DELTA_GRPO, 5.7707)])
def test_reference_ceiling(delta, expected):
    assert one_run.ceiling(1000, delta, 0.05).eps_lower == pytest.approx(expected, abs=1e-4)


def test_delta0_perfect_guessing_closed_form():
    for r in (1, 7, 100, 1000, 123_456):
        expected = max(0.0, -math.log(0.05 ** (-1 / r) - 1))      # r = 1 cannot certify anything
        assert eps_lower(10**6, r, r, 0.0, 0.05) == pytest.approx(expected, abs=2e-9)


# --- independent cross-checks -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, r, v, eps, delta", [(1000, 100, 90, 1.0, 1e-5), (50, 40, 33, 0.3, 0.01),
                                                 (10**6, 200, 180, 2.5, 1e-7), (20, 20, 20, 4.0, 0.02),
                                                 (1000, 150, 60, 0.0, 1e-3), (300, 120, 119, 6.0, 1e-4),
                                                 (10, 3, 1, 0.1, 0.5)])
def test_p_value_matches_mpmath(m, r, v, eps, delta):
    expected = float(ref.pval(m, r, v, eps, delta))
    assert p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_tiny_p_value_matches_mpmath():
    """Far tail (β = 2^-200 ≈ 6e-61, δ term ≈ 1e-59): tails keep relative accuracy where 1 − cdf would give 0."""
    for delta in (0.0, 1e-60):
        expected = float(ref.pval(1000, 200, 200, 0.0, delta))
        assert 0 < expected < 1e-50
        assert p_value(1000, 200, 200, 0.0, delta) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("m, r, v, delta", [(1000, 100, 90, 1e-5), (200, 60, 55, 1e-3), (5000, 120, 120, DELTA_GRPO)])
def test_eps_lower_matches_mpmath_bisection(m, r, v, delta):
    assert eps_lower(m, r, v, delta, 0.05) == pytest.approx(float(ref.eps_lower(m, r, v, delta, 0.05)), abs=2e-9)


@pytest.mark.parametrize("r, v", [(100, 100), (100, 90), (1000, 700), (50, 31), (10_000, 5_300), (3, 1)])
def test_delta0_equals_clopper_pearson_logit(r, v):
    expected = max(0.0, float(logit(betaincinv(v, r - v + 1, 0.05))))
    assert eps_lower(10**5, r, v, 0.0, 0.05) == pytest.approx(expected, abs=2e-9)
    assert one_run.eps_lower_closed_form_delta0(r, v, 0.05) == pytest.approx(expected, abs=1e-15)


def test_delta0_p_value_is_binomial_tail_mpmath():
    with mp.workdps(50):
        rho = mp.e / (1 + mp.e)
        tail = mp.fsum(mp.binomial(40, k) * rho ** k * (1 - rho) ** (40 - k) for k in range(35, 41))
    assert p_value(999, 40, 35, 1.0, 0.0) == pytest.approx(float(tail), rel=1e-12)


# --- properties -------------------------------------------------------------------------------------------------------

@st.composite
def _design(draw):
    m = draw(st.integers(1, 10**6))
    r = draw(st.integers(0, min(m, 5000)))
    v = draw(st.integers(0, r))
    delta = draw(st.sampled_from([0.0, 1e-8, 1e-5, DELTA_GRPO, 1e-3, 0.05, 1.0]))
    return m, r, v, delta


def _le(a: float, b: float) -> bool:
    return a <= b + 1e-12 * max(1.0, abs(b))


@settings(max_examples=150)
@given(_design(), st.floats(0, 15), st.floats(0, 15))
def test_p_value_non_decreasing_in_eps(design, e1, e2):
    m, r, v, delta = design
    lo, hi = sorted((e1, e2))
    a, b = p_value(m, r, v, lo, delta), p_value(m, r, v, hi, delta)
    assert 0.0 <= a <= 1.0 and 0.0 <= b <= 1.0
    assert _le(a, b)


@settings(max_examples=100)
@given(_design(), st.floats(0, 12))
def test_p_value_non_increasing_in_v(design, eps):
    m, r, v, delta = design
    if v == r:
        v = max(0, r - 1)
    assert _le(p_value(m, r, v + 1 if v < r else v, eps, delta), p_value(m, r, v, eps, delta))


@settings(max_examples=60)
@given(_design(), st.sampled_from([0.01, 0.05, 0.2]))
def test_bisection_invariant(design, p):
    """ε_lower is rejected (PVAL < p) and ε_lower + 1e-9 is not (PVAL ≥ p), unless ε_lower = 0."""
    m, r, v, delta = design
    found = search_eps_lower(m, r, v, delta, p)
    assert not found.search_capped
    if found.eps_lower == 0.0:
        assert v == 0 or p_value(m, r, v, 0.0, delta) >= p
    else:
        assert p_value(m, r, v, found.eps_lower, delta) < p <= p_value(m, r, v, found.eps_lower + 1e-9, delta)


def test_ceiling_property_grid_to_1e8():
    """PVAL(r, r, r, ε = 8, δ = 1/69880) ≥ 0.05 for every r: ε = 8 is never certifiable at this δ (the ceiling)."""
    grid = sorted({int(x) for x in np.round(np.geomspace(1, 1e8, 60))} | {10**8})
    values = [p_value(r, r, r, 8.0, DELTA_GRPO) for r in grid]
    assert min(values) >= 0.05


@settings(max_examples=40)
@given(st.integers(1, 10**8))
def test_ceiling_property_random_r(r):
    assert p_value(r, r, r, 8.0, DELTA_GRPO) >= 0.05


def test_ceiling_rises_then_falls_with_delta():
    """With δ > 0 the ceiling peaks and declines; with δ = 0 it keeps growing."""
    ms = (1000, 100_000, 1_000_000)
    with_delta = [one_run.ceiling(m, 1e-5, 0.05).eps_lower for m in ms]
    without = [one_run.ceiling(m, 0.0, 0.05).eps_lower for m in ms]
    assert with_delta[0] < with_delta[1] and with_delta[2] < with_delta[1]
    assert without[0] < without[1] < without[2]


def test_search_cap_is_flagged(monkeypatch):
    monkeypatch.setattr(pvalue, "EPS_CAP", 2.0)
    one_run.ceiling.cache_clear()                  # the cached ceilings were computed under the real cap
    try:
        found = search_eps_lower(1000, 100, 100, 1e-5, 0.05)
        assert found.search_capped and found.eps_lower == 2.0
        rep = from_counts(1000, 100, 100, delta=1e-5)
        assert rep.result["search_capped"] is True and rep.power["eps_ceiling"] == 2.0
    finally:
        one_run.ceiling.cache_clear()


def test_zero_correct_and_zero_guesses_give_zero():
    assert p_value(10, 5, 0, 3.0, 0.1) == 1.0
    assert eps_lower(10, 0, 0, 0.1, 0.05) == 0.0
    assert eps_lower(10, 5, 0, 0.1, 0.05) == 0.0


def test_large_r_is_fast_enough_and_finite():
    found = search_eps_lower(10**8, 10**8, 10**8, DELTA_GRPO, 0.05)
    assert 0 < found.eps_lower < 8 and not found.search_capped


# --- report from counts -----------------------------------------------------------------------------------------------

def test_from_counts_report_fields():
    rep = from_counts(1000, 100, 90, delta=1e-5, confidence=0.95, eps_nominal=1.0)
    res = rep.result
    assert rep.method == "steinke_one_run"
    assert res["eps_lower"] == pytest.approx(1.626143, abs=1e-6)
    assert res["p_value_at_nominal"] == pytest.approx(8.412886e-04, rel=1e-6)
    assert res["rejects_nominal"] is True and res["significance"] == 0.05
    assert res["guesses"] == 100 and res["correct"] == 90 and res["precision"] == 0.9
    assert rep.power["eps_ceiling"] == pytest.approx(5.7823, abs=1e-4)
    assert rep.power["planned_eps_lower"] == rep.power["eps_ceiling"]
    assert rep.claim["epsilon"] == 1.0 and rep.claim["delta"] == 1e-5
    assert rep.canaries["m"] == rep.canaries["m_test"] == 1000
    assert rep.headline() == {"eps_lower": res["eps_lower"], "p_value_at_nominal": res["p_value_at_nominal"],
                              "rejects_nominal": True}


def test_nominal_not_rejected_when_bound_is_below():
    rep = from_counts(1000, 100, 90, delta=1e-5, eps_nominal=2.0)
    assert rep.result["rejects_nominal"] is False and rep.result["p_value_at_nominal"] >= 0.05


@pytest.mark.parametrize("r, eps_nom", [(100, 1.0), (100, 3.0), (1000, 2.0), (100, 4.0)])
def test_min_correct_for_nominal_by_brute_force(r, eps_nom):
    rep = from_counts(1000, r, 0, delta=1e-5, eps_nominal=eps_nom)
    needed = rep.power["min_correct_for_nominal"]
    ok = [v for v in range(r + 1) if eps_lower(1000, r, v, 1e-5, 0.05) >= eps_nom] if r <= 100 else None
    if ok is not None:
        assert needed == (ok[0] if ok else None)
    else:
        assert eps_lower(1000, r, needed, 1e-5, 0.05) >= eps_nom > eps_lower(1000, r, needed - 1, 1e-5, 0.05)


def test_significance_is_exact_decimal():
    assert validation.significance(0.95) == 0.05
    assert validation.significance(0.9) == 0.1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_maximum_matches_dense_scan(seed):
    """The branch-and-bound window maximum equals a dense scan over every i (pmf cumulative sums)."""
    from scipy.stats import binom
    rng = np.random.default_rng(seed)
    for _ in range(40):
        r = int(rng.integers(1, 4000))
        v = int(rng.integers(1, r + 1))
        eps = float(rng.uniform(0, 8))
        m = max(r, 1000)
        pmf = binom.pmf(np.arange(r + 1), r, math.exp(eps) / (1 + math.exp(eps)))
        dense = np.max(np.cumsum(pmf[:v][::-1]) / np.arange(1, v + 1))   # max_i P[v−i ≤ W ≤ v−1]/i
        expected = min(1.0, pmf[v:].sum() + 2 * m * 1e-3 * dense)
        assert p_value(m, r, v, eps, 1e-3) == pytest.approx(expected, rel=1e-9, abs=1e-300)
