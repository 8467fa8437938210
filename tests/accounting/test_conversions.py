"""Group privacy and replace-one conversions against the formulas written here in mpmath.

- group of k records (DP-GRPO Prop. 1):   (ε, δ) → (k·ε, k·e^{(k−1)ε}·δ)
- replace-one (DP-GRPO Cor. 1):            (ε, δ) → (2ε, (1 + e^ε)·δ)

Replace-one is group privacy with k = 2 in ε (2ε both), and tighter in δ: for ε > 0,
(1 + e^ε)·δ < 2·e^ε·δ because 1 < e^ε; the gap is (e^ε − 1)·δ. Outputs are float upper ends of balls,
so each must be ≥ the exact value and within a couple of ulps of it.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting import group_privacy, replace_one

MAX_FLOAT = sys.float_info.max


def _frac(v) -> Fraction:
    if isinstance(v, (int, float, Fraction)):
        return Fraction(v)
    man, exp = v.man_exp                   # mpmath's man_exp is unsigned; all values here are ≥ 0
    assert v >= 0
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def mp_group(eps, delta, k):
    with mpmath.workdps(60):
        e, d = mpmath.mpf(eps), mpmath.mpf(delta)
        return k * e, k * mpmath.exp((k - 1) * e) * d


def mp_replace(eps, delta):
    with mpmath.workdps(60):
        e, d = mpmath.mpf(eps), mpmath.mpf(delta)
        return 2 * e, (1 + mpmath.exp(e)) * d


def assert_rounded_up(value: float, exact, what: str):
    """value is a float ≥ exact, and no more than 2 ulps above it (inf iff exact exceeds the float range)."""
    x = _frac(exact)
    if x > Fraction(MAX_FLOAT):
        assert value == math.inf, f"{what}: exact {float(x)} overflows, got {value!r}"
        return
    assert isinstance(value, float) and math.isfinite(value), f"{what}: {value!r}"
    assert Fraction(value) >= x, f"{what}: {value!r} below the exact value {mpmath.nstr(exact, 25)}"
    assert Fraction(value) - x <= 2 * Fraction(math.ulp(value)), f"{what}: {value!r} not rounded tightly"


@pytest.mark.parametrize("eps,delta,k", [(1.0, 1e-5, 2), (0.5, 1e-6, 4), (8.0, 1e-4, 3), (0.1, 1e-9, 10),
                                         (2.0, 1e-10, 100), (1e-3, 0.5, 7)])
def test_group_privacy_matches_formula(eps, delta, k):
    rec = group_privacy(eps, delta, k)
    e_ref, d_ref = mp_group(eps, delta, k)
    assert_rounded_up(rec.value, Fraction(k) * Fraction(eps), "group ε")   # k·ε exactly, as a rational
    assert_rounded_up(rec.value, e_ref, "group ε (mpmath)")
    assert_rounded_up(rec.details["delta"], d_ref, "group δ")
    assert rec.quantity == "epsilon" and rec.neighboring == f"add_remove_group_of_{k}"
    assert rec.details["delta_certified"]["upper"] == rec.details["delta"]


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.5, 1e-6), (8.0, 1e-4), (1e-3, 0.3), (20.0, 1e-12)])
def test_replace_one_matches_formula(eps, delta):
    rec = replace_one(eps, delta)
    e_ref, d_ref = mp_replace(eps, delta)
    assert rec.value == 2 * eps                        # doubling is exact in binary
    assert_rounded_up(rec.value, e_ref, "replace-one ε")
    assert_rounded_up(rec.details["delta"], d_ref, "replace-one δ")
    assert rec.neighboring == "replace_one"


def test_group_delta_overflow_is_reported_as_inf_not_a_finite_guess():
    rec = group_privacy(10.0, 1e-5, 1000)              # 1000·e^{9990}·1e-5 overflows float64
    assert rec.details["delta"] == math.inf
    assert rec.value == 1e4


_eps = st.floats(1e-6, 20.0)
_delta = st.floats(1e-12, 0.5)


@settings(max_examples=60)
@given(eps=_eps, delta=_delta)
def test_property_k1_is_the_identity(eps, delta):
    rec = group_privacy(eps, delta, 1)
    assert rec.value == eps and rec.details["delta"] == delta


@settings(max_examples=60)
@given(eps=_eps, delta=_delta, k1=st.integers(1, 40), dk=st.integers(1, 40))
def test_property_group_monotone_in_k(eps, delta, k1, dk):
    a, b = group_privacy(eps, delta, k1), group_privacy(eps, delta, k1 + dk)
    assert a.value <= b.value
    assert a.details["delta"] <= b.details["delta"]
    e_ref, d_ref = mp_group(eps, delta, k1 + dk)
    assert_rounded_up(b.value, e_ref, "group ε")
    assert_rounded_up(b.details["delta"], d_ref, "group δ")


@settings(max_examples=60)
@given(eps=_eps, delta=_delta)
def test_property_replace_one_is_group_of_two_with_smaller_delta(eps, delta):
    rep, grp = replace_one(eps, delta), group_privacy(eps, delta, 2)
    assert rep.value == grp.value
    assert rep.details["delta"] <= grp.details["delta"]
    e_ref, d_ref = mp_replace(eps, delta)
    assert_rounded_up(rep.value, e_ref, "replace-one ε")
    assert_rounded_up(rep.details["delta"], d_ref, "replace-one δ")
