"""Group privacy and replace-one conversions against the formulas written here in mpmath.

- group of k records (DP-GRPO Prop. 1):   (ε, δ) → (k·ε, k·e^{(k−1)ε}·δ)
- replace-one (DP-GRPO Cor. 1):            (ε, δ) → (2ε, (1 + e^ε)·δ)

Replace-one is group privacy with k = 2 in ε (2ε both), and tighter in δ: for ε > 0,
(1 + e^ε)·δ < 2·e^ε·δ because 1 < e^ε; the gap is (e^ε − 1)·δ. Outputs are float upper ends of balls,
so each must be ≥ the exact value and within a couple of ulps of it. A converted δ' ≥ 1 (no guarantee at all) is
refused with the reachable range: the largest k, or the bound 1/(1 + e^ε) on δ, checked here in mpmath.
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
from privcheck.errors import InvalidParameter

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


@pytest.mark.parametrize("eps,delta,k", [(1.0, 1e-5, 2), (0.5, 1e-6, 4), (8.0, 1e-9, 3), (0.1, 1e-9, 10),
                                         (2.0, 1e-10, 10), (1e-3, 0.1, 7), (1e-3, 1e-8, 5000)])
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


def mp_largest_group(eps, delta) -> int:
    """The largest k with k·e^{(k−1)ε}·δ < 1, by a linear scan in mpmath (k·e^{(k−1)ε} increases in k)."""
    k = 1
    while mp_group(eps, delta, k + 1)[1] < 1:
        k += 1
    return k


@pytest.mark.parametrize("eps,delta,k", [(1.0, 1e-5, 30), (10.0, 1e-5, 1000), (1.0, 1e-5, 11), (0.0, 0.5, 2),
                                         (1e-3, 0.1, 50)])
def test_group_delta_of_one_or_more_is_refused_with_the_largest_k(eps, delta, k):
    """`convert group --epsilon 1 --delta 1e-5 --k 30` printed δ ≈ 1.2e9; δ' ≥ 1 states nothing, so it is refused and
    the error names k and the largest group that converts."""
    assert mp_group(eps, delta, k)[1] >= 1
    with pytest.raises(InvalidParameter) as info:
        group_privacy(eps, delta, k)
    top = mp_largest_group(eps, delta)
    assert info.value.name == "k" and f"[1, {top}]" in str(info.value)
    rec = group_privacy(eps, delta, top)           # the named k converts, with δ' < 1
    assert_rounded_up(rec.details["delta"], mp_group(eps, delta, top)[1], "group δ at the largest k")
    assert rec.details["delta"] < 1


@pytest.mark.parametrize("eps,delta", [(1.0, 0.3), (0.0, 0.5), (40.0, 1e-17), (1e300, 1e-300)])
def test_replace_one_delta_of_one_or_more_is_refused_with_the_bound(eps, delta):
    with pytest.raises(InvalidParameter) as info:
        replace_one(eps, delta)
    assert info.value.name == "delta"
    with mpmath.workdps(60):
        bound = 1 / (1 + mpmath.exp(eps))
    assert delta >= bound
    text = str(info.value)
    if bound > 2.0 ** -1074:
        named = float(text.split("[0, ")[1].split(")")[0])   # the printed bound is at most the exact one
        assert _frac(named) <= _frac(bound) and float(bound) - named <= 2 * math.ulp(named)
    else:
        assert "0 only" in text


@pytest.mark.parametrize("eps,k", [(1.0, 10**30), (2.0, 2**53 + 1), (1e300, 2**53)])
def test_pure_dp_group_needs_a_float_epsilon_and_at_most_2_53_records(eps, k):
    with pytest.raises(InvalidParameter) as info:
        group_privacy(eps, 0.0, k)
    assert info.value.name == "k"
    top = min(2**53, int(Fraction(MAX_FLOAT) / Fraction(eps)))
    assert f"[1, {top}]" in str(info.value)
    rec = group_privacy(eps, 0.0, top)
    assert rec.details["delta"] == 0.0 and rec.value >= float(Fraction(top) * Fraction(eps))


@pytest.mark.parametrize("eps,delta,k", [(1.0, 0.0, 5), (0.0, 1e-3, 7), (0.0, 0.0, 3)])
def test_pure_dp_and_zero_epsilon_follow_the_formula(eps, delta, k):
    rec, rep = group_privacy(eps, delta, k), replace_one(eps, delta)
    assert rec.value == k * eps and rep.value == 2 * eps        # exact: a small integer times a float
    assert_rounded_up(rec.details["delta"], mp_group(eps, delta, k)[1], "group δ")
    assert_rounded_up(rep.details["delta"], mp_replace(eps, delta)[1], "replace-one δ")
    if delta == 0:
        assert rec.details["delta"] == rep.details["delta"] == 0.0


@pytest.mark.parametrize("fn,args,name", [
    (group_privacy, (1.0, 1.0, 1), "delta"), (replace_one, (1.0, 1.0), "delta"),
    (replace_one, (MAX_FLOAT, 0.0), "epsilon"), (group_privacy, (-0.5, 0.0, 1), "epsilon"),
])
def test_conversion_inputs_outside_their_range(fn, args, name):
    with pytest.raises(InvalidParameter) as info:
        fn(*args)
    assert info.value.name == name


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
    if mp_group(eps, delta, k1 + dk)[1] >= 1:     # no guarantee: refused (the largest k is checked above)
        with pytest.raises(InvalidParameter):
            group_privacy(eps, delta, k1 + dk)
        return
    a, b = group_privacy(eps, delta, k1), group_privacy(eps, delta, k1 + dk)
    assert a.value <= b.value
    assert a.details["delta"] <= b.details["delta"]
    e_ref, d_ref = mp_group(eps, delta, k1 + dk)
    assert_rounded_up(b.value, e_ref, "group ε")
    assert_rounded_up(b.details["delta"], d_ref, "group δ")


@settings(max_examples=60)
@given(eps=_eps, delta=_delta)
def test_property_replace_one_is_group_of_two_with_smaller_delta(eps, delta):
    if mp_group(eps, delta, 2)[1] >= 1:
        with pytest.raises(InvalidParameter):
            group_privacy(eps, delta, 2)
        if mp_replace(eps, delta)[1] >= 1:
            with pytest.raises(InvalidParameter):
                replace_one(eps, delta)
        return
    rep, grp = replace_one(eps, delta), group_privacy(eps, delta, 2)
    assert rep.value == grp.value
    assert rep.details["delta"] <= grp.details["delta"]
    e_ref, d_ref = mp_replace(eps, delta)
    assert_rounded_up(rep.value, e_ref, "replace-one ε")
    assert_rounded_up(rep.details["delta"], d_ref, "replace-one δ")
