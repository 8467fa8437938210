"""PrivBoN and PrivITP accounting against the spec's reference values (selection.md §17) and mpmath.

Independent oracles: the printed reference values O-3, O-4, O-5, O-6 of the spec, and acceptance /
rejection probabilities computed here by mpmath quadrature over the uniform threshold draw,
P_rej(r) = ∫_0^1 Φ((λ̃ + c·u − r)/σ_Z) du, P_acc = 1 − P_rej (no G function involved).
"""

import json
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting import (
    BudgetExceeded,
    ExPostFilter,
    PrivITPParams,
    basic_composition,
    privbon_epsilon,
    privbon_sigma,
    privitp_kappa,
    privitp_kappa_batch,
    privitp_loss,
    privitp_phase1_epsilon,
    privitp_worst_phase2,
)
from privcheck.accounting.selection import kappa_midpoint_float
from privcheck.errors import InvalidParameter
from tests.accounting.reference_store import ReferenceStore

# the mpmath quadrature oracle is stored, keyed on its exact inputs (tests/accounting/reference_store.py);
# `test_stored_quadrature_matches_live` recomputes one on every run (mpmath is deterministic: exact)
STORE = ReferenceStore("selection_accounting", mpmath_dps=30, rel_tol=0.0)

O3 = dict(r_max=1.0, sensitivity=0.01, headroom=0.5, sigma_z=0.05)
# λ̃: (c, κ, κ_acc, ε2(t=1), ε2(t=4), ε2(t=16), fallback n=16)
O3_ROWS = {
    0.2: (0.825, 0.188896264520, 0.868196213116, 0.868196213, 1.434885007, 3.701640181, 3.022340232),
    0.5: (0.525, 0.188896264520, 2.01924888179, 2.019248882, 2.585937675, 4.852692850, 3.022340232),
    0.8: (0.225, 0.188886306254, 3.20486696944, 3.204866969, 3.771525888, 6.038161563, 3.022180900),
}


def params(n=16, **kw):
    base = dict(candidates=n, beta=0.05, sigma_x=0.05, delta=1e-5, **O3)
    base.update(kw)
    return PrivITPParams(**base)


@pytest.mark.parametrize("lt", sorted(O3_ROWS))
def test_o3_kappa_and_eps2(lt):
    c, kappa, kappa_acc, e1, e4, e16, fb = O3_ROWS[lt]
    p = params()
    pair = privitp_kappa(p, lt)
    assert abs(pair.c - c) <= 1e-15
    assert abs(pair.kappa.value - kappa) <= 1e-11 and abs(pair.kappa_acc.value - kappa_acc) <= 1e-11
    for t, expected in ((1, e1), (4, e4), (16, e16), (None, fb)):
        eps2 = privitp_loss(p, lt, t).details["eps2_post"]["value"]
        assert abs(eps2 - expected) <= 1e-9, (t, eps2, expected)


def test_o4_kappa_at_lambda_0_7():
    pair = privitp_kappa(params(n=3), 0.7)
    assert abs(pair.c - 0.325) <= 1e-15
    assert abs(pair.kappa.value - 0.188896264102) <= 1e-11
    assert abs(pair.kappa_acc.value - 2.80834601931) <= 1e-11


def test_kappa_limit_for_small_lambda():
    """§8.4: for λ̃ ≪ R_max, κ → log G(L + Δ/σ_Z) − log G(L) (mpmath at 50 digits)."""
    with mpmath.workdps(50):
        G = lambda u: u * mpmath.ncdf(u) + mpmath.npdf(u)  # noqa: E731
        limit = mpmath.log(G(mpmath.mpf(0.5) + mpmath.mpf(0.01) / mpmath.mpf(0.05))) - mpmath.log(G(mpmath.mpf(0.5)))
    assert abs(privitp_kappa(params(), 0.2).kappa.value - float(limit)) <= 1e-11


def _breaks(dps):
    # The integrands can be sharply peaked at u = 0 (acceptance) or u = 1 (rejection): without geometric
    # breakpoints near both ends mpmath.quad silently loses ~7 digits (observed: κ_acc off by 3e-7).
    with mpmath.workdps(dps):
        near = [mpmath.mpf(2) ** -k for k in range(40, 0, -1)]
        return [mpmath.mpf(0)] + near + [1 - x for x in reversed(near[:-1])] + [mpmath.mpf(1)]


def _mp_rej(r, lt, c, s, dps=30):
    with mpmath.workdps(dps):
        r, lt, c, s = (mpmath.mpf(x) for x in (r, lt, c, s))
        return mpmath.quad(lambda u: mpmath.ncdf((lt + c * u - r) / s), _breaks(dps))


def _mp_acc(r, lt, c, s, dps=30):
    """P_acc directly (not 1 − P_rej, which cancels when acceptance is rare)."""
    with mpmath.workdps(dps):
        r, lt, c, s = (mpmath.mpf(x) for x in (r, lt, c, s))
        return mpmath.quad(lambda u: mpmath.ncdf((r - lt - c * u) / s), _breaks(dps))


def _mp_G(u):
    return u * mpmath.ncdf(u) + mpmath.npdf(u)


def _mp_rej_closed(r, lt, c, s, dps=50):
    with mpmath.workdps(dps):
        r, lt, c, s = (mpmath.mpf(x) for x in (r, lt, c, s))
        return (s / c) * (_mp_G((lt + c - r) / s) - _mp_G((lt - r) / s))


def _mp_acc_closed(r, lt, c, s, dps=50):
    with mpmath.workdps(dps):
        r, lt, c, s = (mpmath.mpf(x) for x in (r, lt, c, s))
        return (s / c) * (_mp_G((r - lt) / s) - _mp_G((r - lt - c) / s))


def _mp_kappas_closed_form(p, lt, dps=50):
    """κ, κ_acc from the G closed form (§7) written here in mpmath at 50 digits."""
    c = p.threshold_width(lt)
    with mpmath.workdps(dps):
        s, lt_, c_ = mpmath.mpf(p.sigma_z), mpmath.mpf(lt), mpmath.mpf(c)
        G = lambda u: u * mpmath.ncdf(u) + mpmath.npdf(u)  # noqa: E731
        rej = lambda r: G((lt_ + c_ - r) / s) - G((lt_ - r) / s)  # noqa: E731
        acc = lambda r: G((r - lt_) / s) - G((r - lt_ - c_) / s)  # noqa: E731
        R, lo, d = mpmath.mpf(p.r_max), mpmath.mpf(p.r_lo), mpmath.mpf(p.sensitivity)
        return mpmath.log(rej(R - d) / rej(R)), mpmath.log(acc(lo + d) / acc(lo))


def _mp_kappas(p, lt):
    return mp_kappas_quadrature(json.dumps(p.to_json(), sort_keys=True), lt)


@STORE.memo
def mp_kappas_quadrature(params_json: str, lt: float):
    p = PrivITPParams(**json.loads(params_json))
    c = p.threshold_width(lt)
    with mpmath.workdps(30):
        rej = lambda r: _mp_rej(r, lt, c, p.sigma_z)  # noqa: E731
        acc = lambda r: _mp_acc(r, lt, c, p.sigma_z)  # noqa: E731
        kappa = mpmath.log(rej(p.r_max - p.sensitivity)) - mpmath.log(rej(p.r_max))
        kappa_acc = mpmath.log(acc(p.r_lo + p.sensitivity)) - mpmath.log(acc(p.r_lo))
    return kappa, kappa_acc


@settings(max_examples=40, deadline=None)
@given(lt=st.floats(-0.3, 1.0), sz=st.floats(0.03, 0.5), L=st.floats(0.0, 2.0), d=st.floats(1e-3, 0.2))
def test_enclosure_contains_mpmath_closed_form(lt, sz, L, d):
    p = params(sigma_z=sz, headroom=L, sensitivity=d)
    pair = privitp_kappa(p, lt)
    k, ka = _mp_kappas_closed_form(p, lt)
    assert pair.kappa.lower - 1e-13 <= k <= pair.kappa.upper + 1e-13
    assert pair.kappa_acc.lower - 1e-13 <= ka <= pair.kappa_acc.upper + 1e-13
    assert pair.kappa.value >= 0 and pair.kappa_acc.value >= 0


def test_stored_quadrature_matches_live():
    STORE.recheck(1, seed=1)


@pytest.mark.parametrize("lt, sz, L, d", [(0.5, 0.03125, 0.0, 0.125), (0.2, 0.05, 0.5, 0.01), (-0.2, 0.3, 1.5, 0.1)])
def test_enclosure_contains_mpmath_quadrature(lt, sz, L, d):
    """Quadrature over the uniform threshold draw: no G identity involved. mpmath.quad is a cross-check,
    not a certificate: with geometric breakpoints it agrees to ~1e-11 here, so the tolerance is 1e-9."""
    p = params(sigma_z=sz, headroom=L, sensitivity=d)
    pair = privitp_kappa(p, lt)
    k, ka = _mp_kappas(p, lt)
    assert pair.kappa.lower - 1e-9 <= k <= pair.kappa.upper + 1e-9
    assert pair.kappa_acc.lower - 1e-9 <= ka <= pair.kappa_acc.upper + 1e-9


def test_extremal_pair_attains_bound_and_random_pairs_stay_below():
    """O-9 tightness: n = 4, λ̃ = 0.5; exact output laws of both neighbours by mpmath quadrature."""
    p = params(n=4)
    lt, c, s, d = 0.5, p.threshold_width(0.5), p.sigma_z, p.sensitivity

    def laws(scores):
        """log P(t) for t = 1..4 and log P(⊥), from per-candidate closed forms (mpmath, 50 digits)."""
        rej = [_mp_rej_closed(x, lt, c, s) for x in scores]
        acc = [_mp_acc_closed(x, lt, c, s) for x in scores]
        out = {t: mpmath.log(mpmath.fprod(rej[: t - 1]) * acc[t - 1]) for t in range(1, 5)}
        out[None] = mpmath.log(mpmath.fprod(rej))
        return out

    for t in (1, 4, None):
        accepted = [] if t is None else [t - 1]
        on_d = [d if i in accepted else p.r_max - d for i in range(4)]       # D: rejected at R−Δ, accepted at Δ
        on_dp = [0.0 if i in accepted else p.r_max for i in range(4)]        # D′: rejected at R, accepted at 0
        ratio = float(laws(on_d)[t] - laws(on_dp)[t])
        bound = privitp_loss(p, lt, t).details["eps2_post"]["value"]
        assert abs(ratio - bound) <= 1e-12, (t, ratio, bound)
    rng = np.random.default_rng(12345)
    for _ in range(12):
        base = rng.uniform(0, 1, 4)
        other = np.clip(base + rng.uniform(-d, d, 4), 0, 1)
        la, lb = laws(base), laws(other)
        for t in (1, 2, 3, 4, None):
            ratio = abs(float(la[t] - lb[t]))
            assert ratio <= privitp_loss(p, lt, t).details["eps2_post"]["upper"] + 1e-12


def test_eps2_affine_in_t_and_total_adds_eps1():
    p = params()
    e = [privitp_loss(p, 0.4, t) for t in range(1, 17)]
    k = privitp_kappa(p, 0.4).kappa.value
    slopes = np.diff([r.details["eps2_post"]["value"] for r in e])
    assert np.allclose(slopes, k, atol=1e-12)
    eps1 = privitp_phase1_epsilon(p).value
    assert all(r.value >= r.details["eps2_post"]["value"] + eps1 - 1e-15 for r in e)


def test_phase1_is_analytic_gaussian_not_mu():
    """O-6 with μ = Δ/σ_X = 1: ε1 = 4.377178 (charging μ itself would give 1)."""
    p = params(sigma_x=0.01, sensitivity=0.01)
    assert abs(privitp_phase1_epsilon(p).value - 4.377178) <= 1e-6


def test_worst_phase2_is_max_of_last_acceptance_and_fallback():
    p = params()
    pair = privitp_kappa(p, 0.5)
    for T in (1, 5, 16):
        expected = (T - 1) * pair.kappa.value + max(pair.kappa_acc.value, pair.kappa.value)
        assert expected - 1e-12 <= privitp_worst_phase2(p, 0.5, T) <= expected + 1e-12


def test_clamped_threshold_width():
    p = params(n=3)
    pair = privitp_kappa(p, 1.2)          # r_max + σ_Z·L − λ̃ < 0: c clamps to c_min = 1e-12
    assert pair.c == 1e-12
    k, ka = _mp_kappas(p, 1.2)
    assert pair.kappa.lower - 1e-10 <= k <= pair.kappa.upper + 1e-10
    assert pair.kappa_acc.lower - 1e-10 <= ka <= pair.kappa_acc.upper + 1e-10


def test_batch_bounds_every_value_from_above():
    p = params()
    lts = 0.5 + 0.05 * np.random.default_rng(7).standard_normal(400)
    k, ka = privitp_kappa_batch(p, lts, log2_step=-12)
    for i in range(0, 400, 20):
        pair = privitp_kappa(p, float(lts[i]))
        assert pair.kappa.lower <= k[i] <= pair.kappa.upper + 1e-3
        assert pair.kappa_acc.lower <= ka[i] <= pair.kappa_acc.upper + 4 * 2.0 ** -12 * 0.01 / 0.05 ** 2


def test_midpoint_rule_is_close_but_not_the_reported_figure():
    p = params()
    pair = privitp_kappa(p, 0.5)
    k, ka = kappa_midpoint_float(p, 0.5)
    assert abs(k - pair.kappa.value) < 1e-4 and abs(ka - pair.kappa_acc.value) < 1e-3


# --- PrivBoN -------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, sigma, expected", [(0.1, 0.2, 0.999228797882), (0.5, 1.0, 0.959690858399)])
def test_o5_bounded_range(d, sigma, expected):
    rec = privbon_epsilon(d, sigma, candidates=16, r_max=1.0)
    assert abs(rec.value - expected) <= 1e-11
    assert rec.details["nominal"] == 2 * d / sigma


def test_bounded_range_properties_against_mpmath():
    def mp_bon(n, R, d, s):
        with mpmath.workdps(50):
            return mpmath.log(1 + (n - 1) * mpmath.exp(R / s)) - mpmath.log(1 + (n - 1) * mpmath.exp((R - 2 * d) / s))
    prev = -1.0
    for n in (1, 2, 4, 16, 256, 4096):
        rec = privbon_epsilon(0.1, 0.2, candidates=n, r_max=1.0)
        assert rec.certified.lower <= mp_bon(n, 1, mpmath.mpf(0.1), mpmath.mpf(0.2)) <= rec.certified.upper
        assert prev <= rec.value <= 1.0 + 1e-15
        prev = rec.value
    assert privbon_epsilon(0.1, 0.2, candidates=1, r_max=1.0).value == 0.0


def test_extremal_pair_attains_bon_bound():
    """§4.3: on D the selected candidate scores Δ and the others R − Δ; on D′, 0 and R."""
    n, R, d, s = 16, 1.0, 0.1, 0.2
    with mpmath.workdps(50):
        p_d = mpmath.exp(d / s) / (mpmath.exp(d / s) + (n - 1) * mpmath.exp((R - d) / s))
        p_dp = 1 / (1 + (n - 1) * mpmath.exp(R / s))
        ratio = mpmath.log(p_d / p_dp)
    rec = privbon_epsilon(d, s, candidates=n, r_max=R)
    assert rec.certified.lower <= ratio <= rec.certified.upper


def test_privbon_sigma_nominal_and_tight():
    nominal = privbon_sigma(0.1, 1.0)
    assert nominal.value >= 0.2 and 2 * 0.1 / nominal.value <= 1.0
    tight = privbon_sigma(0.1, 1.0, candidates=16, r_max=1.0, tight=True)
    assert tight.value <= nominal.value
    assert privbon_epsilon(0.1, tight.value, candidates=16, r_max=1.0).value <= 1.0
    assert privbon_epsilon(0.1, tight.value * (1 - 1e-8), candidates=16, r_max=1.0).value > 1.0


# --- composition and filter ----------------------------------------------------------------------

def test_basic_composition_rounds_up():
    eps, delta = basic_composition([0.1] * 10, [1e-6] * 3)
    assert eps >= 1.0 and eps - 1.0 < 1e-14 and delta >= 3e-6


def test_filter_precheck_refuses_and_later_cheaper_queries_run():
    f = ExPostFilter(budget=1.0)
    assert f.admits(0.6)
    f.charge("q1", realised=0.5, worst_case=0.6)
    assert not f.admits(0.6)
    f.refuse("q2", 0.6)
    assert f.admits(0.5)
    f.charge("q3", realised=0.2, worst_case=0.5)
    assert f.spent <= 0.7 + 1e-15
    out = f.to_json()
    assert out["answered"] == 2 and out["refused"] == 1 and out["provable"] is True


def test_filter_rejects_charge_after_run_in_provable_mode():
    f = ExPostFilter(budget=1.0)
    f.charge("q1", realised=0.9, worst_case=0.9)
    with pytest.raises(BudgetExceeded):
        f.charge("q2", realised=0.05, worst_case=0.5)     # not admissible: 0.9 + 0.5 > 1
    with pytest.raises(BudgetExceeded):
        ExPostFilter(budget=1.0).charge("q", realised=0.7, worst_case=0.5)
    unsound = ExPostFilter(budget=1.0, mode="replication_unsound")
    unsound.charge("q1", realised=0.9, worst_case=0.9)
    unsound.charge("q2", realised=0.5, worst_case=5.0)
    assert unsound.to_json()["provable"] is False and unsound.spent > 1.0


@pytest.mark.parametrize("kw, name", [
    (dict(sigma_z=0.0), "sigma_z"), (dict(sigma_x=-1.0), "sigma_x"), (dict(headroom=-0.1), "headroom"),
    (dict(sensitivity=0.0), "sensitivity"), (dict(sensitivity=1.5), "sensitivity"), (dict(beta=0.0), "beta"),
    (dict(candidates=0), "candidates"), (dict(delta=1.0), "delta"), (dict(r_max=-1.0), "r_max"),
    (dict(sigma_z=float("nan")), "sigma_z"),
])
def test_privitp_params_bad_input(kw, name):
    with pytest.raises(InvalidParameter, match=name):
        params(**kw)


def test_bad_lambda_and_halting_time():
    p = params()
    with pytest.raises(InvalidParameter, match="lambda_tilde"):
        privitp_loss(p, math.nan, 1)
    with pytest.raises(InvalidParameter, match="halting_time"):
        privitp_loss(p, 0.5, 17)
    with pytest.raises(InvalidParameter, match="sensitivity"):
        privbon_epsilon(2.0, 1.0, candidates=4, r_max=1.0)
    with pytest.raises(InvalidParameter, match="sigma"):
        privbon_epsilon(0.1, 0.0)
    with pytest.raises(InvalidParameter, match="budget"):
        ExPostFilter(budget=0.0)
