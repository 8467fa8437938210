"""ITP: the exact law against O-2 (docs/selection.md reference values), and the sampler against its exact law
(Monte Carlo)."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.selection import FRESH_PI0, HALT_FALLBACK, ITP, itp_law, itp_weights, lambda_hat, make_rng
from tests.selection.counts import assert_counts_match, outcome_counts

O2_SCORES = [0.2, 0.8, 0.9]


def test_o2a_max_weight_law():
    # weights [0, 1, 2] at λ̂ = 0.7, β = 0.1; M = max w = 2 → P(t) = [0, 1/2, 1/2], no fallback
    w = itp_weights(O2_SCORES, 0.7, 0.1)
    assert np.allclose(w, [0.0, 1.0, 2.0], atol=1e-12, rtol=0)
    law = itp_law(O2_SCORES, 0.1, 0.7, 2.0)
    assert np.allclose(law.probs, [0.0, 0.5, 0.5], atol=1e-12, rtol=0)
    assert abs(law.fallback) <= 1e-12


def test_o2b_range_law():
    # M = (R_max − λ̂)/β = 3 with R_max = 1 → P(t) = [0, 1/3, 4/9], fallback 2/9
    law = itp_law(O2_SCORES, 0.1, 0.7, (1.0 - 0.7) / 0.1)
    assert np.allclose(law.probs, [0.0, 1 / 3, 4 / 9], atol=1e-12, rtol=0)
    assert abs(law.fallback - 2 / 9) <= 1e-12


def test_o2_lambda_hat_is_the_o1b_root():
    assert abs(lambda_hat(O2_SCORES, 0.1) - 0.7) <= 1e-12


def brute_force_law(s, lam, beta, m):
    """Sequential definition written out round by round."""
    probs, survive = [], 1.0
    for x in s:
        a = min(1.0, max((x - lam) / beta, 0.0) / m)
        probs.append(survive * a)
        survive *= 1.0 - a
    return np.array(probs), survive


ROW = np.array([0.2, 0.8, 0.9, 0.5, 0.95, 0.75])
BETA = 0.1
N_MC = 200_000


@pytest.mark.parametrize("rule", ["range", "loose", "max_weight"])
def test_sampler_matches_exact_law(rule):
    lam = lambda_hat(ROW, BETA)
    w = np.maximum((ROW - lam) / BETA, 0.0)
    m = {"range": (1.0 - lam) / BETA, "loose": 1.0 + 1.0 / BETA, "max_weight": w.max()}[rule]
    law = itp_law(ROW, BETA, lam, m)
    ref_probs, ref_fb = brute_force_law(ROW, lam, BETA, m)
    assert np.allclose(law.probs, ref_probs, atol=1e-14, rtol=0) and abs(law.fallback - ref_fb) <= 1e-14
    res = ITP(BETA, r_max=1.0, M=rule).select(np.tile(ROW, (N_MC, 1)), make_rng(2024))
    assert np.allclose(res.lambda_tilde, lam, atol=1e-12, rtol=0)
    assert np.allclose(res.threshold_width, BETA * m, atol=1e-12, rtol=0)
    assert_counts_match(outcome_counts(res.indices, ROW.size), np.append(law.probs, law.fallback))
    if rule == "max_weight":
        assert res.accepted.all()   # the arg-max has acceptance probability 1


def test_phase2_scores_and_fallback_encodings():
    lam = lambda_hat(ROW, BETA)
    phase2 = np.array([0.1, 0.3, 0.85, 0.2])
    m = (1.0 - lam) / BETA
    law = itp_law(phase2, BETA, lam, m)
    res = ITP(BETA, r_max=1.0).select(np.tile(ROW, (N_MC, 1)), make_rng(7), phase2_scores=np.tile(phase2, (N_MC, 1)))
    assert_counts_match(outcome_counts(res.indices, phase2.size), np.append(law.probs, law.fallback))
    fb = ~res.accepted
    assert fb.any() and np.all(res.indices[fb] == FRESH_PI0) and np.all(res.halting_times[fb] == HALT_FALLBACK)
    assert np.all(res.indices[~fb] == res.halting_times[~fb] - 1)
    assert res.records is None and res.privacy_release is False

    last = ITP(BETA, r_max=1.0, fallback="last_candidate").select(ROW, make_rng(1), phase2_scores=[0.0, 0.0])
    assert last.indices[0] == 1 and last.halting_times[0] == HALT_FALLBACK   # weights 0: always the fallback

    uni = ITP(BETA, r_max=1.0, fallback="uniform_candidate").select(
        np.tile(ROW, (N_MC, 1)), make_rng(3), phase2_scores=np.tile(phase2, (N_MC, 1)))
    expected = law.probs + law.fallback / phase2.size     # the fallback returns a uniform position
    assert_counts_match(np.bincount(uni.indices, minlength=phase2.size), expected)
