"""PrivITP mechanism: sampler against the exact laws (given λ̃ and averaged), the same c as the
accountant, per-prompt ex-post records, fallback and halting-time encodings, independent batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kstest, norm

from mechanisms.selection import (
    FRESH_PI0,
    HALT_FALLBACK,
    PrivITP,
    lambda_hat,
    make_rng,
    privitp_law,
    privitp_law_given_lambda,
)
from mechanisms.selection.privitp import run_phase2
from privcheck.accounting import PrivITPEvent, PrivITPParams, epsilon
from privcheck.errors import InvalidParameter
from tests.selection.counts import assert_counts_match, binomial_pvalues, outcome_counts

N_MC = 200_000


def params(n, **kw):
    base = dict(candidates=n, beta=0.1, sigma_x=0.1, sigma_z=0.05, headroom=0.5, sensitivity=0.01, delta=1e-5)
    base.update(kw)
    return PrivITPParams(**base)


def test_phase2_given_lambda_matches_exact_law():
    p = params(3)
    s = np.array([0.2, 0.8, 0.9])                 # the O-4 setting: λ̃ = 0.7, c = 0.325
    lt = np.full(N_MC, 0.7)
    c = np.full(N_MC, p.threshold_width(0.7))
    first, accepted = run_phase2(np.tile(s, (N_MC, 1)), lt, c, p.sigma_z, make_rng(12).generator)
    idx = np.where(accepted, first, -1)
    law = privitp_law_given_lambda(s, 0.7, p)
    assert_counts_match(outcome_counts(idx, 3), np.append(law.probs, law.fallback))


def test_phase2_with_many_rounds_matches_exact_law():
    # rare acceptances spread the halting time over 100 rounds: exercises the growing round blocks
    n = 100
    p = params(n, sigma_z=0.1, headroom=0.0)
    s = 0.45 + 0.1 * (np.arange(n) % 7) / 6
    lt = 0.65
    law = privitp_law_given_lambda(s, lt, p)
    assert 0.1 < law.fallback < 0.9
    first, accepted = run_phase2(np.tile(s, (50_000, 1)), np.full(50_000, lt),
                                 np.full(50_000, p.threshold_width(lt)), p.sigma_z, make_rng(4).generator)
    assert_counts_match(outcome_counts(np.where(accepted, first, -1), n), np.append(law.probs, law.fallback))


def test_mechanism_matches_law_averaged_over_lambda_tilde():
    p = params(4, sigma_x=0.08)
    phase1 = np.array([0.35, 0.9, 0.6, 0.75])
    phase2 = np.array([0.5, 0.7, 0.85, 0.3])
    lam = lambda_hat(phase1, p.beta)
    res = PrivITP(p).select(np.tile(phase1, (N_MC, 1)), np.tile(phase2, (N_MC, 1)), make_rng(31), account=False)
    law = privitp_law(phase2, lam, p)
    counts = outcome_counts(res.indices, 4)
    assert_counts_match(counts, np.append(law.probs, law.fallback))
    # λ̃ ~ N(λ̂, σ_X²): Kolmogorov–Smirnov at level 1e-6
    assert kstest(res.lambda_tilde[:20_000], norm(lam, p.sigma_x).cdf).pvalue >= 1e-6
    # the same counts reject the pitfall of averaging per-round acceptance over λ̃ before the product
    x, w = np.polynomial.hermite_e.hermegauss(96)
    w = w / math.sqrt(2 * math.pi)
    mean_acc = sum(wk * privitp_law_given_lambda(phase2, lam + p.sigma_x * xk, p).acceptance
                   for xk, wk in zip(x, w))
    survive = np.concatenate([[1.0], np.cumprod(1 - mean_acc)])
    wrong = np.append(survive[:-1] * mean_acc, survive[-1])
    assert binomial_pvalues(counts, wrong).min() < 1e-6 / 5


def test_records_thresholds_and_encodings():
    p = params(6)
    rng = make_rng(8)
    phase1 = rng.generator.random((40, 6))
    phase2 = rng.generator.random((40, 6))
    res = PrivITP(p).select(phase1, phase2, rng)
    assert res.records is not None and len(res.records) == 40
    for i in range(40):
        lt, t = float(res.lambda_tilde[i]), int(res.halting_times[i])
        assert res.threshold_width[i] == p.threshold_width(lt)          # THE definition of c
        expected = epsilon(PrivITPEvent(p, lt, t if t != HALT_FALLBACK else None))
        assert res.records[i].value == expected.value
        assert res.records[i].event == expected.event == PrivITP(p).event(lt, expected.event.halting_time)
        assert res.records[i].inputs["halting_time"] == expected.inputs["halting_time"]
        if t == HALT_FALLBACK:
            assert res.indices[i] == FRESH_PI0 and not res.accepted[i]
        else:
            assert t in range(1, 7) and res.indices[i] == t - 1 and res.accepted[i]
    assert np.array_equal(res.epsilons, [r.value for r in res.records])
    assert not hasattr(res, "lambda_hat")                               # λ̂ is private: never returned
    assert res.randomness_mode == "seeded" and res.privacy_release is False


def test_forced_fallback_records_n_kappa():
    # Phase-1 scores at the top put λ̃ near r_max − β; Phase-2 scores at 0 are (essentially) never accepted.
    p = params(5, sigma_x=1e-3, sigma_z=1e-3, sensitivity=1e-3)
    res = PrivITP(p).select(np.ones((20, 5)), np.zeros((20, 5)), make_rng(2))
    assert np.all(res.indices == FRESH_PI0) and np.all(res.halting_times == HALT_FALLBACK)
    for lt, rec in zip(res.lambda_tilde, res.records):
        assert rec.value == epsilon(PrivITPEvent(p, float(lt), None)).value and rec.inputs["halting_time"] == "fallback"
    last = PrivITP(p, fallback="last_candidate").select(np.ones((5, 5)), np.zeros((5, 5)), make_rng(2))
    assert np.all(last.indices == 4) and np.all(last.halting_times == HALT_FALLBACK)
    uni = PrivITP(p, fallback="uniform_candidate").select(np.ones((500, 5)), np.zeros((500, 5)), make_rng(2),
                                                          account=False)
    assert set(uni.indices.tolist()) == {0, 1, 2, 3, 4}


def test_phase2_must_not_reuse_phase1_candidates():
    p = params(4)
    mech = PrivITP(p)
    s = np.random.default_rng(0).random((3, 4))
    for phase2 in (s, s[:, :], s.view(), np.asarray(s)):
        with pytest.raises(InvalidParameter) as err:
            mech.select(s, phase2, make_rng(0))
        assert err.value.name == "phase2_scores"
    big = np.random.default_rng(1).random((6, 4))
    with pytest.raises(InvalidParameter):
        mech.select(big[:3], big[2:5], make_rng(0))        # overlapping rows of one buffer
    lst = s.tolist()
    with pytest.raises(InvalidParameter):
        mech.select(lst, lst, make_rng(0))
    # disjoint halves of one buffer are separate batches, and a copy is fine
    assert mech.select(big[:3], big[3:], make_rng(0), account=False).prompts == 3
    assert mech.select(s, s.copy(), make_rng(0), account=False).prompts == 3


def test_shapes_are_checked_against_the_public_n():
    mech = PrivITP(params(4))
    with pytest.raises(InvalidParameter) as err:
        mech.select(np.zeros((2, 4)), np.zeros((2, 5)), make_rng(0))
    assert err.value.name == "phase2_scores"
    with pytest.raises(InvalidParameter) as err:
        mech.select(np.zeros((2, 3)), np.zeros((2, 4)), make_rng(0))
    assert err.value.name == "phase1_scores"
    with pytest.raises(InvalidParameter):
        mech.select(np.zeros((2, 4)), np.zeros((3, 4)), make_rng(0))
    one = mech.select([0.1, 0.5, 0.9, 0.3], [0.2, 0.4, 0.6, 0.8], make_rng(0))
    assert one.indices.shape == (1,) and len(one.records) == 1


def test_out_of_range_scores_are_clipped_like_in_range_ones():
    p = params(4)
    a = PrivITP(p).select([[1.5, -2.0, 0.5, 0.7]], [[3.0, -1.0, 0.2, 0.9]], make_rng(5), account=False)
    b = PrivITP(p).select([[1.0, 0.0, 0.5, 0.7]], [[1.0, 0.0, 0.2, 0.9]], make_rng(5), account=False)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.lambda_tilde, b.lambda_tilde)
    with pytest.raises(InvalidParameter) as err:
        PrivITP(p, clip=False).select([[1.5, 0.0, 0.5, 0.7]], [[0.3, 0.0, 0.2, 0.9]], make_rng(5))
    assert err.value.name == "phase1_scores" and "[0.0, 1.0]" in str(err.value)
