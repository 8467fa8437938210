"""Arb closed forms, the precision drivers and exact outward float rounding.

References are independent of the code under test: mpmath's own `ncdf`/`npdf` evaluated at 150 digits
(the Arb balls are evaluated at <= 256 bits, i.e. <= 77 digits, so the reference error of ~1e-148 is far
below any ball radius), and exact rational arithmetic (`fractions.Fraction`) for float rounding.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import mpmath
import pytest
from flint import arb, ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.errors import CertificationError
from privcheck.numerics import ball as B
from privcheck.numerics.certified import Certified, float_down, float_up
from tests.numerics.exact import ball_ends, frac_exact

REF_DPS = 150
MAX_FLOAT = Fraction(sys.float_info.max)


# --- exact helpers (no library code) ---------------------------------------------------------------

_frac_exact, _ends = frac_exact, ball_ends


def _mp_frac(v: mpmath.mpf) -> Fraction:
    """Exact value of an mpf. Note mpmath's `man_exp` drops the sign (it is `_mpf_[1:3]`)."""
    man, exp = v.man_exp
    sign = -1 if v < 0 else 1
    return sign * Fraction(int(man)) * Fraction(2) ** int(exp)


def _assert_contains(ball: arb, ref: mpmath.mpf, what: str):
    lo, hi = _ends(ball)
    r = _mp_frac(ref)
    assert lo <= r <= hi, f"{what}: {ball} does not contain {mpmath.nstr(ref, 40)}"


# --- mpmath references (written here, not taken from the library) ----------------------------------

def ref_cdf(u):
    with mpmath.workdps(REF_DPS):
        return mpmath.ncdf(mpmath.mpf(u))


def ref_sf(u):
    with mpmath.workdps(REF_DPS):
        return mpmath.ncdf(-mpmath.mpf(u))


def ref_pdf(u):
    with mpmath.workdps(REF_DPS):
        return mpmath.npdf(mpmath.mpf(u))


def ref_log_cdf(u):
    with mpmath.workdps(REF_DPS):
        u = mpmath.mpf(u)
        # log1p(−Φ(−u)) for u ≥ 0: log(ncdf(u)) would round Φ(30) = 1 − 5e-198 to 1 at this precision.
        return mpmath.log(mpmath.ncdf(u)) if u < 0 else mpmath.log1p(-mpmath.ncdf(-u))


def ref_G(u):
    with mpmath.workdps(REF_DPS):
        u = mpmath.mpf(u)
        return u * mpmath.ncdf(u) + mpmath.npdf(u)   # cancels ~log10(u²) digits for u < 0: 150 is plenty


def ref_G_quad(u):
    """G(u) = E[(u + Z)+] = ∫_0^∞ t·φ(t − u) dt by quadrature (a second, formula-free reference).

    For u = −v < 0 the integrand is φ(v)·t·e^{−vt − t²/2}, whose mass sits at t ~ 1/v: the breakpoints
    follow that scale (a split at the fixed points −u + 1, −u + 8 misses it by 3e-4 at u = −40).
    """
    with mpmath.workdps(60):
        u = mpmath.mpf(u)
        if u < 0:
            v = -u
            s = 1 / v
            inner = mpmath.quad(lambda t: t * mpmath.exp(-v * t - t * t / 2), [0, s, 5 * s, 40 * s, mpmath.inf])
            return mpmath.npdf(v) * inner
        return mpmath.quad(lambda t: t * mpmath.npdf(t - u), [0, u, u + 1, u + 8, mpmath.inf])


def ref_log_G(u):
    with mpmath.workdps(REF_DPS):
        return mpmath.log(ref_G(u))


CLOSED_FORMS = {
    "normal_cdf": (B.normal_cdf, ref_cdf),
    "normal_sf": (B.normal_sf, ref_sf),
    "normal_pdf": (B.normal_pdf, ref_pdf),
    "log_normal_cdf": (B.log_normal_cdf, ref_log_cdf),
    "gauss_G": (B.gauss_G, ref_G),
    "log_gauss_G": (B.log_gauss_G, ref_log_G),
}

GRID = [-30.0, -20.0, -10.0, -5.0, -2.5, -1.0, -0.5, -1e-8, 0.0, 1e-8, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0]
EXTREME = [-1e3, -40.0]   # log Φ and log G must stay accurate where Φ and G underflow float64


def _cases():
    for name in CLOSED_FORMS:
        for u in GRID + EXTREME:
            yield pytest.param(name, u, id=f"{name}[{u:g}]")


@pytest.mark.parametrize("name,u", list(_cases()))
@pytest.mark.parametrize("prec", [64, 256])
def test_closed_form_encloses_mpmath(name, u, prec):
    fn, ref = CLOSED_FORMS[name]
    with ctx.workprec(prec):
        ball = fn(arb(u))
    assert ball.is_finite(), f"{name}({u}) at {prec} bits gave {ball}"
    _assert_contains(ball, ref(u), f"{name}({u}) at {prec} bits")


@pytest.mark.parametrize("name,u", list(_cases()))
def test_evaluate_driver_meets_tolerance_and_encloses(name, u):
    fn, ref = CLOSED_FORMS[name]
    ball, prec = B.evaluate(lambda: fn(arb(u)))
    _assert_contains(ball, ref(u), f"evaluate({name}({u}))")
    assert B.START_PREC <= prec <= B.MAX_PREC
    # The driver's contract: relative radius <= 1e-12 (or an exact zero).
    lo, hi = _ends(ball)
    mid = abs(_frac_exact(ball.mid()))
    assert ball.is_zero() or (hi - lo) / 2 <= Fraction(1e-12) * mid


@pytest.mark.parametrize("u", [-1e3, -40.0, -5.0, 0.0, 3.0])
def test_log_forms_are_finite_where_float64_underflows(u):
    """log Φ(−1e3) ≈ −5e5: Φ itself is 0 in float64, the log must still be a narrow, correct ball."""
    for fn, ref in ((B.log_normal_cdf, ref_log_cdf), (B.log_gauss_G, ref_log_G)):
        ball, _ = B.evaluate(lambda: fn(arb(u)))
        r = ref(u)
        assert abs(float(ball.mid()) - float(r)) <= 1e-12 * max(1.0, abs(float(r)))


@pytest.mark.parametrize("u", [-40.0, -8.0, -1.0, 0.0, 0.7, 6.0])
def test_gauss_G_against_quadrature(u):
    """G(u) = E[(u+Z)+] by mpmath quadrature, independent of the u·Φ(u) + φ(u) formula."""
    with ctx.workprec(128):
        ball = B.gauss_G(arb(u))
    q = ref_G_quad(u)
    rel = abs(_frac_exact(ball.mid()) - _mp_frac(q)) / _mp_frac(q)
    assert rel < Fraction(1, 10**30), f"G({u}): {ball} vs quadrature {mpmath.nstr(q, 35)}"


@settings(max_examples=60)
@given(u=st.floats(-40.0, 40.0, allow_nan=False), prec=st.sampled_from([53, 64, 128, 200]))
def test_property_cdf_sf_pdf_G_enclose_mpmath(u, prec):
    for name in ("normal_cdf", "normal_sf", "normal_pdf", "gauss_G"):
        fn, ref = CLOSED_FORMS[name]
        with ctx.workprec(prec):
            ball = fn(arb(u))
        _assert_contains(ball, ref(u), f"{name}({u!r}) at {prec} bits")


@settings(max_examples=40)
@given(u=st.floats(-1e3, 30.0, allow_nan=False), prec=st.sampled_from([64, 128, 200]))
def test_property_log_forms_enclose_mpmath(u, prec):
    for name in ("log_normal_cdf", "log_gauss_G"):
        fn, ref = CLOSED_FORMS[name]
        with ctx.workprec(prec):
            ball = fn(arb(u))
        _assert_contains(ball, ref(u), f"{name}({u!r}) at {prec} bits")


@settings(max_examples=40)
@given(u=st.floats(-35.0, 35.0, allow_nan=False))
def test_property_symmetries(u):
    """Φ(u) + Φ̄(u) = 1, Φ̄(u) = Φ(−u), φ even, G(u) − G(−u) = u (put-call parity): the balls must overlap."""
    with ctx.workprec(128):
        a = arb(u)
        assert (B.normal_cdf(a) + B.normal_sf(a)).contains(1)
        assert B.normal_sf(a).overlaps(B.normal_cdf(-a))
        assert B.normal_pdf(a).overlaps(B.normal_pdf(-a))
        assert (B.gauss_G(a) - B.gauss_G(-a)).contains(a)


# --- log_diff_exp ----------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b", [(1.0, 0.5), (0.0, -1e3), (100.0, 99.9999999), (-700.0, -800.0), (1e-10, 0.0),
                                 (5.0, -5.0), (-1e3, -1e3 - 1e-6), (800.0, 799.0)])
def test_log_diff_exp_encloses_mpmath(a, b):
    ball, _ = B.evaluate(lambda: B.log_diff_exp(arb(a), arb(b)))
    with mpmath.workdps(700):   # e^a − e^b loses (a − b)/ln 10 digits: up to 435 here
        ref = mpmath.log(mpmath.exp(mpmath.mpf(a)) - mpmath.exp(mpmath.mpf(b)))
    _assert_contains(ball, ref, f"log_diff_exp({a}, {b})")


@settings(max_examples=40)
@given(a=st.floats(-700, 700, allow_nan=False), gap=st.floats(1e-12, 50.0))
def test_property_log_diff_exp(a, gap):
    b = a - gap
    if not b < a:  # the subtraction rounded back to a
        b = math.nextafter(a, -math.inf)
    with ctx.workprec(128):
        ball = B.log_diff_exp(arb(a), arb(b))
    with mpmath.workdps(REF_DPS):
        ref = mpmath.log(mpmath.exp(mpmath.mpf(a)) - mpmath.exp(mpmath.mpf(b)))
    _assert_contains(ball, ref, f"log_diff_exp({a!r}, {b!r})")


@pytest.mark.parametrize("a,b", [(0.0, 0.0), (0.0, 1.0), (-5.0, 3.0), (arb(1, 0.5), arb(1.2)), (arb(2), arb(2, 1e-30))])
def test_log_diff_exp_is_nan_unless_a_certainly_exceeds_b(a, b):
    out = B.log_diff_exp(arb(a), arb(b))
    assert out.is_nan() and not out.is_finite()


# --- evaluate / decide -------------------------------------------------------------------------------

def test_evaluate_fails_closed_when_the_ball_never_narrows():
    with pytest.raises(CertificationError):
        B.evaluate(lambda: arb(1, 0.5), max_prec=256)


def test_evaluate_accepts_exact_zero_at_start_precision():
    ball, prec = B.evaluate(lambda: arb(0))
    assert ball.is_zero() and prec == B.START_PREC


def test_evaluate_doubles_precision_until_cancellation_is_resolved():
    # (1 + 2^-100) − 1 needs > 100 bits: at 64 bits the ball contains 0 and is relatively wide.
    ball, prec = B.evaluate(lambda: (1 + arb(2) ** -100 + arb(1) / 3) - 1 - arb(1) / 3)
    assert prec >= 128
    lo, hi = _ends(ball)
    assert lo <= Fraction(1, 2**100) <= hi and lo > 0


@settings(max_examples=80)
@given(p=st.integers(-10**9, 10**9), q=st.integers(1, 10**9),
       t=st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False))
def test_property_decide_is_correct_and_never_undecided_for_separated_values(p, q, t):
    verdict, ball, prec = B.decide(lambda: arb(p) / arb(q), t)
    assert verdict is not None, f"{p}/{q} vs {t!r} undecided at {prec} bits"
    assert verdict == (Fraction(p, q) <= Fraction(t))
    lo, hi = _ends(ball)
    assert lo <= Fraction(p, q) <= hi


@pytest.mark.parametrize("p,q,t,expected", [(1, 3, 1 / 3, False),   # 1/3 > float(1/3) = 0.3333…3148
                                           (1, 3, math.nextafter(1 / 3, 1), True),
                                           (1, 2, 0.5, True),        # equal and exact
                                           (-7, 10**9, -7e-9, None)])
def test_decide_near_ties(p, q, t, expected):
    exact = Fraction(p, q) <= Fraction(t)
    verdict, _, _ = B.decide(lambda: arb(p) / arb(q), t)
    assert verdict == exact
    if expected is not None:
        assert verdict is expected


def test_decide_returns_none_when_the_comparison_cannot_be_settled():
    # (√2)² is exactly 2 but never an exact ball: no precision separates it from the threshold 2.
    verdict, ball, prec = B.decide(lambda: arb(2).sqrt() ** 2, 2.0, max_prec=512)
    assert verdict is None and ball.contains(2) and prec == 512
    verdict, _, _ = B.decide(lambda: arb.nan(), 0.0, max_prec=256)
    assert verdict is None


# --- exact outward rounding to float64 -------------------------------------------------------------

def _check_up(x: arb):
    f = float_up(x)
    _, hi = _ends(x)
    if f == math.inf:
        assert hi > MAX_FLOAT, f"float_up({x}) = inf although {float(hi)} is representable"
        return
    assert Fraction(f) >= hi, f"float_up({x}) = {f!r} below the upper end"
    below = math.nextafter(f, -math.inf)
    assert below == -math.inf or Fraction(below) < hi, f"float_up({x}) = {f!r} not the smallest such float"


def _check_down(x: arb):
    f = float_down(x)
    lo, _ = _ends(x)
    if f == -math.inf:
        assert lo < -MAX_FLOAT, f"float_down({x}) = -inf although {float(lo)} is representable"
        return
    assert Fraction(f) <= lo, f"float_down({x}) = {f!r} above the lower end"
    above = math.nextafter(f, math.inf)
    assert above == math.inf or Fraction(above) > lo, f"float_down({x}) = {f!r} not the largest such float"


@settings(max_examples=150)
@given(p=st.integers(-10**40, 10**40), q=st.integers(1, 10**15), e=st.integers(-1150, 1100),
       prec=st.sampled_from([10, 30, 53, 54, 64, 128, 300]))
def test_property_float_rounding_is_outward_and_tight(p, q, e, prec):
    with ctx.workprec(prec):
        x = arb(p) / arb(q) * arb(2) ** e
    _check_up(x)
    _check_down(x)


@pytest.mark.parametrize("make", [
    lambda: arb(0.1),                                   # exact float: both ends equal the float
    lambda: arb(0),
    lambda: arb(1) / 3,
    lambda: -arb(1) / 3,
    lambda: arb(2) ** -1074,                            # smallest subnormal, exact
    lambda: arb(2) ** -1080 / 3,                        # below the subnormal range
    lambda: -(arb(2) ** -1080) / 3,
    lambda: arb(2) ** 1024,                             # just above the largest float
    lambda: -(arb(2) ** 1024),
    lambda: arb(sys.float_info.max) + arb(2) ** 969,    # max float + a quarter ulp: float_up must give inf
    lambda: arb(sys.float_info.max, 1e-300),
    lambda: arb(1, 1e-300),
    lambda: arb("1e400"),
    lambda: -arb("1e400"),
])
def test_float_rounding_edge_cases(make):
    with ctx.workprec(200):
        x = make()
    _check_up(x)
    _check_down(x)


def test_float_rounding_known_values():
    assert float_up(arb(0.1)) == 0.1 == float_down(arb(0.1))
    with ctx.workprec(200):
        third = arb(1) / 3
    assert float_down(third) == 1 / 3                    # float(1/3) is below 1/3
    assert float_up(third) == math.nextafter(1 / 3, 1)
    assert float_up(arb.nan()) == math.inf and float_down(arb.nan()) == -math.inf
    assert float_up(arb(1) / 0) == math.inf
    assert float_up(-arb("1e400")) == -sys.float_info.max
    assert float_down(arb("1e400")) == sys.float_info.max


def test_certified_from_ball_contains_the_exact_value():
    with ctx.workprec(200):
        ball = arb(2).sqrt()
    up = Certified.from_ball(ball, "test", 200)
    low = Certified.from_ball(ball, "test", 200, side="lower")
    with mpmath.workdps(80):
        root2 = mpmath.sqrt(2)
    assert up.contains(root2) and low.contains(root2)
    assert up.value == up.upper and low.value == low.lower
    assert Fraction(up.upper) > _mp_frac(root2) > Fraction(up.lower)
    assert up.upper == math.nextafter(up.lower, math.inf)   # the two floats around √2
    with pytest.raises(ValueError):
        Certified(1.0, 2.0, 1.0, "bad", 64)


@pytest.mark.parametrize("x", [-1.5, -454.3212439563432, 2.5])
def test_certified_contains_negative_mpmath_values(x):
    """`Certified.contains` accepts mpmath mpf "converted exactly"; the sign must survive the conversion.

    mpmath's `mpf.man_exp` is `_mpf_[1:3]`, i.e. the *unsigned* mantissa, so a conversion through it alone
    maps −1.5 to +1.5.
    """
    inside = Certified(x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf), "test", 64)
    mirrored = Certified(-x, math.nextafter(-x, -math.inf), math.nextafter(-x, math.inf), "test", 64)
    with mpmath.workdps(50):
        v = mpmath.mpf(x)
    assert inside.contains(v), f"[{inside.lower!r}, {inside.upper!r}] must contain mpf({x!r})"
    assert not mirrored.contains(v), f"[{mirrored.lower!r}, {mirrored.upper!r}] must not contain mpf({x!r})"
    assert inside.contains(x) and not mirrored.contains(x)   # the float path, for comparison


# --- Φ and Φ̄ of wide or tail balls: sound, inside [0, 1], and positive where a ball can say so ----------------

def _mp_point(x: arb) -> mpmath.mpf:
    """The exact value of an exact arb as an mpf (any exponent: a Fraction of 2^-(7·10^15) would not fit)."""
    man, exp = x.man_exp()
    return mpmath.mpf((int(man), int(exp)))


def _mp_contains(ball: arb, ref: mpmath.mpf) -> bool:
    """ref ∈ [mid − rad, mid + rad], decided at a precision that makes |ref − mid| exact enough."""
    mid, rad = _mp_point(ball.mid()), _mp_point(ball.rad())
    with mpmath.workprec(20000):
        return abs(ref - mid) <= rad


# (midpoint, radius): wide balls (Arb's erfc gave [−0.5, 1.5]-like enclosures), tail balls whose exact range is
# positive, exact points, and a rounding-narrow ball at −1.2e8 (Arb's erfc held 0 there at every precision).
_WIDE_AND_TAIL = [(0.0, 10.0), (5.0, 10.0), (-40.0, 1.0), (40.0, 1.0), (-1e8, 1.0), (30.0, 1e-3), (-38.0, 1e-10),
                  (0.5, 0.0), (40.0, 0.0), (-40.0, 0.0), (-1.2e8, 2.0 ** -900)]


@pytest.mark.parametrize("prec", [64, 1024])
@pytest.mark.parametrize("mid,rad", _WIDE_AND_TAIL)
def test_normal_cdf_and_sf_of_any_ball_are_sound_and_inside_unit_interval(mid, rad, prec):
    with ctx.workprec(prec):
        u = arb(mid, rad)
        cdf, sf = B.normal_cdf(u), B.normal_sf(u)
    with mpmath.workprec(20000):
        points = [mpmath.mpf(mid) + k * mpmath.mpf(rad) for k in (-1, -0.5, 0, 0.5, 1)]   # inside u
    for x in points:
        with mpmath.workprec(prec + 200):     # more digits than the ball carries (≥ 50 digits)
            assert _mp_contains(cdf, mpmath.ncdf(x)), f"Φ({mpmath.nstr(x, 20)}) outside {cdf}"
            assert _mp_contains(sf, mpmath.ncdf(-x)), f"Φ̄({mpmath.nstr(x, 20)}) outside {sf}"
    for p in (cdf, sf):
        assert p.lower() >= 0, f"{p} reaches below 0"
        assert p.upper() <= 1 + arb(2) ** -25, f"{p} reaches above 1 by more than a radius rounding"


# (midpoint, radius, precision, relative slack of the width): at 64 bits the rounding of u/√2 alone moves
# log Φ(−1e8) by 1e8·2^-64·1e8 ≈ 5e-4
@pytest.mark.parametrize("mid,rad,prec,slack", [(-38.0, 1e-10, 64, 2.0 ** -40), (-40.0, 1e-6, 64, 2.0 ** -40),
                                                (-1.2e8, 2.0 ** -900, 1024, 2.0 ** -20), (-1e8, 0.0, 64, 1e-2)])
def test_tail_probabilities_exclude_zero_where_a_ball_can(mid, rad, prec, slack):
    """The exact range [Φ(lo), Φ(hi)] is within a factor 1 + 10⁻³ here, so a ball can (and must) exclude 0: log Φ is
    then finite and certified, which the precision loops rely on."""
    with ctx.workprec(prec):
        u = arb(mid, rad)
        cdf = B.normal_cdf(u)
        log_cdf = B.log_normal_cdf(u)
    assert cdf > 0 and log_cdf.is_finite()
    with mpmath.workprec(prec + 200):
        lo, hi = mpmath.ncdf(mpmath.mpf(mid) - rad), mpmath.ncdf(mpmath.mpf(mid) + rad)
        assert hi / lo < 1.001
        assert _mp_contains(log_cdf, mpmath.log(lo)) and _mp_contains(log_cdf, mpmath.log(hi))
        # tight: no wider than the exact range (plus Arb's radius propagation, 1e-4 of it) plus the slack (Arb's own
        # erfc of the −10⁸ arguments gave a ball around 0)
        assert _mp_point(cdf.rad()) * 2 <= (hi - lo) * (1 + mpmath.mpf(10) ** -4) + hi * slack
