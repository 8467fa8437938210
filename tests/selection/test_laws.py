"""Exact PrivITP laws: O-4 (reference values in docs/selection.md), brute-force quadratures, the Gauss–Hermite
average taken outside the product, and the tightness of the Phase-2 bound on extremal neighbour pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import ndtr

from mechanisms.selection import acceptance_rejection, privitp_law, privitp_law_given_lambda
from privcheck.accounting.selection import PrivITPParams, privitp_kappa


def params(n=3, **kw):
    base = dict(candidates=n, beta=0.1, sigma_x=0.1, sigma_z=0.05, headroom=0.5, sensitivity=0.01, delta=1e-5)
    base.update(kw)
    return PrivITPParams(**base)


# --- O-4 ----------------------------------------------------------------------------------------------------

O4_PACC = [1.14993e-25, 0.308998462832, 0.615077385858]
O4_PT = [1.14993e-25, 0.308998462832, 0.425019419106]
O4_FALLBACK = 0.265982118063


def test_o4_law_given_lambda():
    p = params()
    assert abs(p.threshold_width(0.7) - 0.325) <= 1e-15
    law = privitp_law_given_lambda([0.2, 0.8, 0.9], 0.7, p)
    for got, want in ((law.acceptance, O4_PACC), (law.probs, O4_PT)):
        assert abs(got[0] - want[0]) <= 1e-5 * want[0]            # relative 1e-5 on the tiny entry
        assert np.all(np.abs(got[1:] - want[1:]) <= 1e-11)
    assert abs(law.fallback - O4_FALLBACK) <= 1e-11


# --- P_acc against direct numerical integration over the uniform threshold -------------------------------

def brute_p_acc(r, lt, c, s):
    """P_acc = ∫_0^1 Φ((r − λ̃ − c·u)/σ_Z) du (the randomised threshold), by adaptive quadrature."""
    val, _ = quad(lambda u: ndtr((r - lt - c * u) / s), 0.0, 1.0, epsabs=0.0, epsrel=1e-13, limit=200)
    return val


CASES = [(r, lt, c, s) for r in (0.0, 0.3, 1.0) for lt in (-0.3, 0.4, 0.95)
         for c in (1e-12, 1e-5, 2e-3, 0.3, 1.2) for s in (0.01, 0.05, 0.5)]


@pytest.mark.parametrize("r,lt,c,s", CASES)
def test_acceptance_against_quadrature(r, lt, c, s):
    acc, rej = acceptance_rejection(r, lt, c, s)
    want = brute_p_acc(r, lt, c, s)
    assert abs(float(acc) + float(rej) - 1.0) <= 1e-15
    if want > 1e-300:
        assert abs(float(acc) - want) <= 1e-12 + 1e-9 * want
    else:
        assert float(acc) <= 1e-290
    want_rej = 1.0 - want if want < 0.5 else brute_p_acc(-r, -lt - c, c, s)   # P_rej(r) = P_acc for the mirror
    assert abs(float(rej) - want_rej) <= 1e-12 + 1e-9 * want_rej


# --- averaging over λ̃ ---------------------------------------------------------------------------------------

def quad_average(s, lam, p, cell):
    """∫ φ(x)·law(λ̂ + σ_X·x)[cell] dx by adaptive quadrature, split at the clamp's kink."""
    kink = (p.r_max + p.sigma_z * p.headroom - p.c_min - lam) / p.sigma_x

    def f(x):
        g = privitp_law_given_lambda(s, lam + p.sigma_x * x, p)
        val = g.probs[cell] if cell < len(s) else g.fallback
        return val * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)

    pieces = [(-15.0, 15.0)] if abs(kink) >= 15 else [(-15.0, kink), (kink, 15.0)]
    return sum(quad(f, a, b, epsabs=1e-15, epsrel=1e-13, limit=400)[0] for a, b in pieces)


@pytest.mark.parametrize("lam", [-0.5, 0.62, 0.95, 1.1])
def test_average_over_lambda_matches_adaptive_quadrature(lam):
    # λ̂ = 0.95 and 1.1 put the kink of c = max(r_max + σ_Z·L − λ̃, c_min) inside the Gaussian's bulk
    p = params(n=4, sigma_x=0.08)
    s = np.array([0.3, 0.7, 0.55, 0.95])
    law = privitp_law(s, lam, p)
    for k in range(5):
        got = law.probs[k] if k < 4 else law.fallback
        assert abs(got - quad_average(s, lam, p, k)) <= 1e-10
    assert abs(law.total - 1.0) <= 1e-12


def test_gauss_hermite_and_split_rules_agree_when_the_kink_is_far():
    p = params(n=4, sigma_x=0.03, sigma_z=0.05)
    s = np.array([[0.3, 0.7, 0.55, 0.95], [0.1, 0.2, 0.3, 0.4]])
    lam = np.array([0.5, 0.35])              # kinks 17.5 and 22.5 standard deviations away
    gh = privitp_law(s, lam, p, nodes=96, method="gauss_hermite")
    split = privitp_law(s, lam, p, method="split")
    assert np.allclose(gh.probs, split.probs, atol=1e-12, rtol=0)
    assert np.allclose(gh.fallback, split.fallback, atol=1e-12, rtol=0)


def test_average_outside_the_product_differs_from_the_pitfall():
    # Pitfall: averaging per-round acceptance over λ̃ before forming the product ignores the shared λ̃.
    p = params(n=4, sigma_x=0.2)
    s, lam = np.array([0.6, 0.7, 0.8, 0.9]), 0.6
    right = privitp_law(s, lam, p)
    x, w = np.polynomial.hermite_e.hermegauss(96)
    w = w / math.sqrt(2 * math.pi)
    mean_acc = sum(wk * privitp_law_given_lambda(s, lam + p.sigma_x * xk, p).acceptance for xk, wk in zip(x, w))
    wrong_fb = np.prod(1 - mean_acc)
    assert abs(right.fallback - wrong_fb) > 0.02


def test_per_prompt_lambda_and_batch_shapes():
    p = params(n=3)
    s = np.array([[0.2, 0.8, 0.9], [0.9, 0.8, 0.2]])
    law = privitp_law_given_lambda(s, np.array([0.7, 0.5]), p)
    assert law.probs.shape == (2, 3) and law.fallback.shape == (2,)
    assert np.allclose(law.probs[0], privitp_law_given_lambda(s[0], 0.7, p).probs, rtol=0, atol=1e-16)
    assert np.allclose(law.total, 1.0, atol=1e-14, rtol=0)


# --- O-9: tightness of the Phase-2 bound --------------------------------------------------------------------

# O-3 configuration at λ̃ = 0.5 (c = 0.525): κ = 0.188896264520, κ_acc = 2.01924888179 (docs/selection.md)
O3_KAPPA, O3_KAPPA_ACC = 0.188896264520, 2.01924888179


def o3_params(n=4):
    return params(n=n, sigma_z=0.05, headroom=0.5, sensitivity=0.01, r_max=1.0)


def log_ratio(d, d_prime, lt, p):
    a, b = privitp_law_given_lambda(d, lt, p), privitp_law_given_lambda(d_prime, lt, p)
    with np.errstate(divide="ignore"):
        return np.log(np.append(a.probs, a.fallback)) - np.log(np.append(b.probs, b.fallback))


def test_o9_extremal_pairs_attain_the_bound():
    p, lt, delta = o3_params(), 0.5, 0.01
    pair = privitp_kappa(p, lt)
    # accept at t = 1: on D′ the accepted candidate scores 0, on D it scores Δ
    lr1 = log_ratio([delta, 0.5, 0.5, 0.5], [0.0, 0.5, 0.5, 0.5], lt, p)[0]
    # accept at t = 4: rejected candidates at R_max on D′ and R_max − Δ on D
    lr4 = log_ratio([1 - delta] * 3 + [delta], [1.0] * 3 + [0.0], lt, p)[3]
    # fallback: every candidate at R_max on D′ and R_max − Δ on D
    lrf = log_ratio([1 - delta] * 4, [1.0] * 4, lt, p)[4]
    assert abs(lr1 - O3_KAPPA_ACC) <= 1e-11
    assert abs(lr4 - (3 * O3_KAPPA + O3_KAPPA_ACC)) <= 1e-10
    assert abs(lrf - 4 * O3_KAPPA) <= 1e-11
    # and to 1e-12 against the accountant's certified enclosures
    assert abs(lr1 - pair.kappa_acc.value) <= 1e-12
    assert abs(lr4 - (3 * pair.kappa.value + pair.kappa_acc.value)) <= 1e-12
    assert abs(lrf - 4 * pair.kappa.value) <= 1e-12


def test_o9_random_pairs_never_exceed_the_bound():
    rng = np.random.default_rng(41)
    p, delta, n = o3_params(), 0.01, 4
    for _ in range(300):
        lt = float(rng.uniform(-0.2, 1.2))
        pair = privitp_kappa(p, lt)
        bound = np.append((np.arange(n)) * pair.kappa.value + pair.kappa_acc.value, n * pair.kappa.value)
        s = rng.random(n)
        s2 = np.clip(s + rng.uniform(-delta, delta, n), 0.0, 1.0)
        lr = log_ratio(s, s2, lt, p)
        assert np.all(np.abs(lr) <= bound + 1e-9)
