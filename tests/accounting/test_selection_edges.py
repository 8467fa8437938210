"""Soundness of the certified selection accountants over their whole documented range (docs/selection.md,
"Legal ranges and what is certified at the edges"): PrivBoN's bounded-range ε, PrivITP's κ, κ_acc, ε1 and
the per-query loss, single and batch.

Oracles are mpmath closed forms written here, evaluated at ≥ 60 digits with the working precision doubled until
two evaluations agree to 45 digits (the closed forms cancel badly at extreme arguments, so a fixed precision
would not do). Where κ lies far below the float range the oracle is the elementary bound κ ≤ 2·Φ̄(a0),
a0 = (λ̃ − r_max)/σ_Z ≥ 0 (proof in `_kappa_tail_bound`); every positive float is above it there. ε1 is checked
through the analytic-Gaussian δ(ε) (decreasing in ε): δ(reported ε1) ≤ δ means the report is ≥ the exact ε1.
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

import mpmath
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from privcheck.accounting.selection import (
    MAX_CANDIDATES,
    PrivITPParams,
    privbon_epsilon,
    privitp_check_range,
    privitp_kappa,
    privitp_kappa_batch,
    privitp_loss,
    privitp_loss_batch,
    privitp_phase1_epsilon,
)
from privcheck.errors import InvalidParameter
from tests.accounting.reference_store import ReferenceStore

# the mpmath oracles below are stored, keyed on their exact inputs (tests/accounting/reference_store.py);
# `test_stored_oracles_match_live` recomputes a seeded sample on every run (mpmath is deterministic: exact)
STORE = ReferenceStore("selection_edges", mpmath_dps=60, rel_tol=0.0)

TINY = 2.0 ** -1070          # slack for values below the float range (absolute-radius enclosures)


def _mpf(x) -> mpmath.mpf:
    """A float (or Fraction) as an mpf, exactly at the current working precision (≥ 1100 bits covers floats)."""
    if isinstance(x, mpmath.mpf):
        return x
    f = Fraction(x)
    return mpmath.mpf(f.numerator) / f.denominator


def _stable(f, start_dps=60, max_dps=2560):
    """f() at doubling precision until two successive non-zero values agree to 45 digits (the quantities
    checked here are all > 0, so an exact 0 only means the precision was not enough)."""
    dps, prev = start_dps, None
    while dps <= max_dps:
        with mpmath.workdps(dps):
            val = f()
        if not isinstance(val, mpmath.mpf) or val <= 0:    # cancellation left garbage: more digits
            val = None
        elif prev is not None and abs(val - prev) <= mpmath.mpf(10) ** -45 * abs(val):
            return val
        prev, dps = val, dps * 2
    raise AssertionError(f"oracle did not converge: {prev}")


def _G(u):
    return u * mpmath.ncdf(u) + mpmath.npdf(u)


def _kappa_tail_bound(p: PrivITPParams, lt: float):
    """For λ̃ ≥ r_max: κ = log(∫_a^T Φ(u+d)/∫_a^T Φ(u)) ≤ ∫(Φ(u+d) − Φ(u))/∫Φ(u) ≤ ∫Φ̄(u)/∫Φ(u)
    ≤ Φ̄(a)/Φ(a) ≤ 2Φ̄(a), a = (λ̃ − r_max)/σ_Z ≥ 0, T = a + c/σ_Z (Φ̄ decreasing, Φ increasing)."""
    with mpmath.workdps(60):
        a = (_mpf(lt) - _mpf(p.r_max)) / _mpf(p.sigma_z)
        return 2 * mpmath.ncdf(-a)


def oracle_kappas(p: PrivITPParams, lt: float, c: float | Fraction | None = None):
    """(κ, κ_acc) from the closed form with the mechanism's float c (or the given exact c), high precision."""
    c = p.threshold_width(lt) if c is None else c
    return oracle_kappas_at(json.dumps(p.to_json(), sort_keys=True), lt, c)


@STORE.memo
def oracle_kappas_at(params_json: str, lt: float, c: float | Fraction):
    p = PrivITPParams(**json.loads(params_json))

    def pieces():
        s, lam, cc = _mpf(p.sigma_z), _mpf(lt), _mpf(c)
        R, lo, d = _mpf(p.r_max), _mpf(p.r_lo), _mpf(p.sensitivity)
        rej = lambda r: _G((lam + cc - r) / s) - _G((lam - r) / s)  # noqa: E731
        acc = lambda r: _G((r - lam) / s) - _G((r - lam - cc) / s)  # noqa: E731
        return mpmath.log(rej(R - d)) - mpmath.log(rej(R)), mpmath.log(acc(lo + d)) - mpmath.log(acc(lo))

    if lt >= p.r_max and _kappa_tail_bound(p, lt) < 2.0 ** -1074:
        kappa = _kappa_tail_bound(p, lt)
    else:
        kappa = _stable(lambda: pieces()[0])
    return kappa, _stable(lambda: pieces()[1])


def test_stored_oracles_match_live():
    STORE.recheck(15, seed=1, function="oracle_kappas_at")
    STORE.recheck(15, seed=2, function="oracle_bon")


def oracle_delta(eps, mu):
    """Analytic-Gaussian δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang), at 80 digits."""
    with mpmath.workdps(80):
        e, m = _mpf(eps), _mpf(mu)
        return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)


@STORE.memo
def oracle_bon(n: int, r_lo: float, r_hi: float, d: float, sigma: float):
    """log(1 + m e^{R/σ}) − log(1 + m e^{(R−2Δ)/σ}), R exact; exponentials formed directly while they fit."""
    def f():
        m, s, R, dd = mpmath.mpf(n - 1), _mpf(sigma), _mpf(Fraction(r_hi) - Fraction(r_lo)), _mpf(d)
        x, z = R / s, (R - 2 * dd) / s
        lg = lambda t: mpmath.log1p(m * mpmath.exp(t)) if t < 10 ** 6 else t + mpmath.log(m + mpmath.exp(-t))  # noqa: E731
        return lg(x) - lg(z)
    return mpmath.mpf(0) if n == 1 else _stable(f)


ORACLE_SLACK = mpmath.mpf(10) ** -40   # the oracle is good to ~45 digits; one float ulp is 1.1e-16 relative


def _le(reported: float, exact) -> bool:
    """reported ≥ exact (no under-report), up to the oracle's own 1e-40 relative accuracy, which is far below
    one ulp: an under-report by a single float step still fails."""
    with mpmath.workdps(80):
        return _mpf(reported) >= exact * (1 - ORACLE_SLACK) if reported != math.inf else True


# --- strategies over the documented range -------------------------------------------------------------------

def _signed_pow2(draw, lo, hi):
    return draw(st.sampled_from([-1.0, 1.0])) * 2.0 ** draw(st.floats(lo, hi))


@st.composite
def privitp_points(draw):
    """A legal (params, λ̃): σ_Z over 2^±100 and every other scale anywhere in the legal ratios to σ_Z."""
    sz = 2.0 ** draw(st.floats(-100, 100))
    r_lo = 0.0 if draw(st.booleans()) else sz * _signed_pow2(draw, -20, 126)
    span = sz * 2.0 ** draw(st.floats(-120, 126))
    r_max = r_lo + span
    assume(r_max > r_lo)
    d = min(span, sz * 2.0 ** draw(st.floats(-127, 127)))
    assume(Fraction(d) <= Fraction(r_max) - Fraction(r_lo))
    L = 0.0 if draw(st.booleans()) else 2.0 ** draw(st.floats(-30, 126))
    c_min = None if draw(st.booleans()) else sz * 2.0 ** draw(st.floats(-190, 126))
    p = PrivITPParams(candidates=draw(st.integers(1, 64)), beta=0.05, sigma_x=sz, sigma_z=sz, headroom=L,
                      sensitivity=d, delta=1e-5, r_max=r_max, r_lo=r_lo, c_min=c_min)
    where = draw(st.sampled_from(["anywhere", "near_top", "far_above", "near_low"]))
    top = r_max + sz * L
    if where == "anywhere":
        lt = sz * _signed_pow2(draw, -20, 127.9)
    elif where == "near_top":
        lt = top + sz * draw(st.floats(-60, 60))
    elif where == "far_above":
        lt = top + sz * 2.0 ** draw(st.floats(5, 127))
    else:
        lt = r_lo + sz * draw(st.floats(-60, 60))
    try:
        privitp_check_range(p, lt)
    except InvalidParameter:
        assume(False)
    return p, lt


def _check_pair(p, lt, kappa, kappa_acc, pair=None):
    k, ka = oracle_kappas(p, lt)
    assert _le(kappa, k), (p, lt, kappa, k)
    assert _le(kappa_acc, ka), (p, lt, kappa_acc, ka)
    if pair is not None:   # the enclosure contains the oracle (the tail bound is only an upper bound on κ)
        if not (lt >= p.r_max and _kappa_tail_bound(p, lt) < 2.0 ** -1074):
            assert _mpf(pair.kappa.lower) <= k <= _mpf(pair.kappa.upper)
        assert _mpf(pair.kappa_acc.lower) <= ka <= _mpf(pair.kappa_acc.upper)


@settings(max_examples=100)
@given(privitp_points())
def test_kappa_single_never_under_reports_and_encloses(point):
    p, lt = point
    pair = privitp_kappa(p, lt)
    _check_pair(p, lt, pair.kappa.value, pair.kappa_acc.value, pair)


@settings(max_examples=40)
@given(privitp_points(), st.integers(-40, 0))
def test_kappa_batch_bounds_and_agrees_with_single(point, log2_step):
    p, lt = point
    lts = [lt, math.nextafter(lt, math.inf), lt + p.sigma_z * 0.01]
    assume(all(abs(x) <= min(p.sigma_z * 2.0 ** 128, 2.0 ** 1000) for x in lts))
    k, ka = privitp_kappa_batch(p, lts, log2_step=log2_step)
    for i, x in enumerate(lts):
        pair = privitp_kappa(p, x)
        _check_pair(p, x, float(k[i]), float(ka[i]))
        if k[i] == pair.kappa.value and ka[i] == pair.kappa_acc.value:
            continue               # the per-value fallback: the single certified value itself
        # a cell bound: at most the exact value at the cell's worst end (κ: lower end, κ_acc: upper end), with
        # the unclamped exact c there, times 1 + 1e-8 (the cell's 1e-9 relative tolerance and c's rounding)
        step = Fraction(2) ** log2_step
        cell = math.floor(Fraction(x) / step)
        lo, hi = cell * step, (cell + 1) * step
        top = Fraction(p.r_max) + Fraction(p.sigma_z) * Fraction(p.headroom)
        k_end = oracle_kappas(p, float(lo), top - lo)[0] if lo == float(lo) else None
        ka_end = oracle_kappas(p, float(hi), top - hi)[1]
        assert k_end is not None and _mpf(k[i]) <= k_end * (1 + mpmath.mpf(1e-8)) + TINY
        assert _mpf(ka[i]) <= ka_end * (1 + mpmath.mpf(1e-8)) + TINY


@settings(max_examples=30)
@given(privitp_points(), st.sampled_from([1, 2, None]), st.floats(-10, 5), st.floats(-12, -0.5))
def test_loss_single_and_batch_never_under_report(point, t, log2_mu, log10_delta):
    p, lt = point
    t = None if t is None else min(t, p.candidates)
    mu = 2.0 ** log2_mu
    p = PrivITPParams(**{**p.to_json(), "sigma_x": p.sensitivity / mu, "delta": 10.0 ** log10_delta})
    k, ka = oracle_kappas(p, lt)
    with mpmath.workdps(80):
        eps2 = p.candidates * k if t is None else (t - 1) * k + ka
    single = privitp_loss(p, lt, t).value
    batch = privitp_loss_batch(p, [lt], [t], log2_step=-12)[0].value
    mu_exact = Fraction(p.sensitivity) / Fraction(p.sigma_x)
    for value in (single, batch):
        assert _mpf(value) >= eps2
        with mpmath.workdps(80):
            eps1_room = _mpf(value) - eps2          # what is left for ε1 must cover the exact ε1
        assert eps1_room > 0 and oracle_delta(eps1_room, mu_exact) <= _mpf(p.delta) * (1 + mpmath.mpf(1e-30))


@settings(max_examples=25)
@given(st.floats(-10, 6), st.floats(-12, -0.3))
def test_phase1_epsilon_encloses_analytic_gaussian(log2_mu, log10_delta):
    p = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.01 / 2.0 ** log2_mu, sigma_z=0.05, headroom=0.5,
                      sensitivity=0.01, delta=10.0 ** log10_delta)
    cert = privitp_phase1_epsilon(p).certified
    mu = Fraction(p.sensitivity) / Fraction(p.sigma_x)
    assert oracle_delta(cert.value, mu) <= _mpf(p.delta)          # reported ε1 ≥ exact ε1
    # and the exact ε1 is inside [lower, upper] (ε1 = 0 exactly when δ(0) ≤ δ already)
    assert oracle_delta(cert.lower, mu) >= _mpf(p.delta) or (cert.lower == 0 and oracle_delta(0, mu) <= _mpf(p.delta))


@st.composite
def bon_points(draw):
    sigma = 2.0 ** draw(st.floats(-1000, 1000))
    r_lo = 0.0 if draw(st.booleans()) else _signed_pow2(draw, -1000, 1000)
    span = 2.0 ** draw(st.floats(-1000, 1000))
    r_hi = r_lo + span
    assume(math.isfinite(r_hi) and r_hi > r_lo)
    d = float(Fraction(r_hi) - Fraction(r_lo)) * draw(st.floats(2.0 ** -60, 1.0))
    assume(d > 0 and Fraction(d) <= Fraction(r_hi) - Fraction(r_lo))
    n = draw(st.one_of(st.integers(1, 64), st.integers(1, MAX_CANDIDATES)))
    assume(2 * Fraction(d) <= Fraction(sys.float_info.max) * Fraction(sigma))   # 2Δ/σ a float (else refused)
    return n, r_lo, r_hi, d, sigma


@settings(max_examples=200)
@given(bon_points())
def test_privbon_bounded_range_never_under_reports_and_encloses(point):
    n, r_lo, r_hi, d, sigma = point
    rec = privbon_epsilon(d, sigma, candidates=n, r_max=r_hi, r_lo=r_lo)
    exact = oracle_bon(n, r_lo, r_hi, d, sigma)
    cert = rec.details["bounded_range_certified"]
    assert _le(rec.value, exact)
    assert (_mpf(cert["lower"]) <= exact if math.isfinite(cert["lower"]) else True)
    assert (exact <= _mpf(cert["upper"]) if math.isfinite(cert["upper"]) else True)
    assert _le(rec.details["nominal"], exact)                     # ε_BoN ≤ 2Δ/σ


# --- explicit regressions -------------------------------------------------------------------------------------

def _wide(r_max, sz):
    return PrivITPParams(candidates=16, beta=0.05, sigma_x=sz, sigma_z=sz, headroom=0.5, sensitivity=sz / 100,
                         delta=1e-5, r_max=r_max)


@pytest.mark.parametrize("lt, log2_step, r_max, sz", [
    (8.4e6, -40, 1e7, 1e5),          # |λ̃|·2^40 ≥ 2^63: the int64 cell index wrapped (κ_acc −99.99%)
    (2.26e15, -12, 1e16, 1e14),      # the same at the default step
    (8.4e6, -40, 1.0, 0.05),         # clamped, far above the threshold top
])
def test_regression_cell_index_overflow(lt, log2_step, r_max, sz):
    p = _wide(r_max, sz)
    k, ka = privitp_kappa_batch(p, [lt, -lt], log2_step=log2_step)
    for i, x in enumerate((lt, -lt)):
        _check_pair(p, x, float(k[i]), float(ka[i]))
    for t in (1, 16, None):
        kk, kka = oracle_kappas(p, lt)
        eps2 = 16 * kk if t is None else (t - 1) * kk + kka
        rec = privitp_loss_batch(p, [lt], [t], log2_step=log2_step)[0]
        assert _mpf(rec.details["eps2_post"]) >= eps2
        assert rec.value >= privitp_loss(p, lt, t).details["eps2_post"]["value"]


@pytest.mark.parametrize("above", [107.0, 108.0, 1e3, 2.0 ** 100])
def test_regression_far_above_threshold_returns_certified_value(above):
    """κ ≈ Φ̄(above) is far below the float range: accepted on absolute radius, reported as a tiny positive float."""
    p = PrivITPParams(candidates=16, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5, sensitivity=0.01,
                      delta=1e-5)
    lt = 1.0 + 0.05 * 0.5 + 0.05 * above
    pair = privitp_kappa(p, lt)
    assert pair.kappa.value > 0 and pair.kappa.upper - pair.kappa.lower <= 2.0 ** -1073
    _check_pair(p, lt, pair.kappa.value, pair.kappa_acc.value, pair)
    k, ka = privitp_kappa_batch(p, [lt], log2_step=-12)
    assert k[0] >= pair.kappa.lower and ka[0] == pair.kappa_acc.value


@pytest.mark.parametrize("r_lo, r_hi, d, sigma, n", [
    (-3.089694972941423e-05, 1.7212471057891776, 0.8139624161747758, 0.6017214645792477, 4),
    (-9.926364562607591e-12, 1.7635150640468025, 0.6689493453609596, 2.823936453192319, 3),
    (-5.1965825970249e-09, 1.452060798602694, 0.9973409634892013, 0.214898618899743, 2),
])
def test_regression_score_span_is_not_rounded_in_floats(r_lo, r_hi, d, sigma, n):
    """fl(r_hi − r_lo) < r_hi − r_lo here, and ε_BoN increases with the span: computing from the float span
    reported one ulp below the exact ε (found by a random sweep against the oracle)."""
    assert Fraction(r_hi - r_lo) < Fraction(r_hi) - Fraction(r_lo)
    rec = privbon_epsilon(d, sigma, candidates=n, r_max=r_hi, r_lo=r_lo)
    exact = oracle_bon(n, r_lo, r_hi, d, sigma)
    assert _le(rec.value, exact)
    assert _mpf(rec.certified.lower) <= exact <= _mpf(rec.certified.upper)


def test_regression_sensitivity_compared_exactly():
    """Δ = fl(r_hi − r_lo) may exceed the exact span when the subtraction rounds up: refused, exactly."""
    r_lo, r_hi = -2.0 ** -80, 1.0                  # fl(1 + 2^-80) = 1 < exact span
    privbon_epsilon(1.0, 1.0, candidates=2, r_max=r_hi, r_lo=r_lo)   # Δ = 1 < 1 + 2^-80: legal
    r_lo, r_hi = 2.0 ** -80, 1.0                   # exact span 1 − 2^-80 < fl(span) = 1 = Δ
    with pytest.raises(InvalidParameter, match="sensitivity"):
        privbon_epsilon(1.0, 1.0, candidates=2, r_max=r_hi, r_lo=r_lo)


@pytest.mark.parametrize("kw, lt, name", [
    (dict(sigma_z=1.0, r_max=2.0 ** 129), 0.5, "r_max"),
    (dict(sigma_z=1.0, headroom=2.0 ** 129), 0.5, "headroom"),
    (dict(sigma_z=1.0, sensitivity=2.0 ** -130), 0.5, "sensitivity"),
    (dict(sigma_z=1.0, c_min=2.0 ** -200), 0.5, "c_min"),
    (dict(sigma_z=1.0), 2.0 ** 129, "lambda_tilde"),
    (dict(sigma_z=2.0 ** 900, r_max=2.0 ** 1001, sensitivity=2.0 ** 900), 0.5, "r_max"),
])
def test_out_of_range_is_a_typed_error_before_any_work(kw, lt, name):
    base = dict(candidates=4, beta=0.05, sigma_x=1.0, sigma_z=1.0, headroom=0.5, sensitivity=0.01, delta=1e-5)
    p = PrivITPParams(**{**base, **kw})
    for call in (lambda: privitp_kappa(p, lt), lambda: privitp_loss(p, lt, 1), lambda: privitp_kappa_batch(p, [lt]),
                 lambda: privitp_loss_batch(p, [lt], [1], log2_step=-12)):
        with pytest.raises(InvalidParameter, match=name):
            call()


@pytest.mark.parametrize("n,sigma,name", [(2**53 + 1, 1.0, "candidates"), (10**30, 1.0, "candidates"),
                                          (8, 5e-324, "sigma"), (8, 1.1e-309, "sigma")])
def test_privbon_refuses_counts_and_scales_outside_its_range(n, sigma, name):
    """n ≤ 2^53 (MAX_CANDIDATES) and 2Δ/σ a float: 0.1/5e-324 is 2e322, beyond the largest float."""
    with pytest.raises(InvalidParameter) as info:
        privbon_epsilon(0.1, sigma, candidates=n, r_max=1.0)
    assert info.value.name == name
