"""PrivBoN: accounting wiring (O-5, reference values in docs/selection.md), samplers against the exact softmax
law, Gumbel vs softmax, the extremal pair attaining ε_BoN(n), and the finite-n policy (O-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.selection import (
    PrivBoN,
    best_of_n,
    make_rng,
    privbon_law,
    privbon_policy_finite_n,
    privbon_policy_limit,
)
from privcheck.accounting import PrivBoNEvent
from tests.selection.counts import assert_counts_match, assert_same_distribution

# --- accounting record (O-5) ------------------------------------------------------------------------------

@pytest.mark.parametrize("delta,sigma,expected", [(0.1, 0.2, 0.999228797882), (0.5, 1.0, 0.959690858399)])
def test_o5_record_of_a_query_with_16_candidates(delta, sigma, expected):
    scores = make_rng(0).generator.random((3, 16))
    res = PrivBoN(delta, sigma, r_max=1.0).select(scores, make_rng(1))
    rec = res.record
    assert abs(rec.value - expected) <= 1e-11
    assert rec.inputs["candidates"] == 16 and rec.details["queries"] == 3
    assert rec.event == PrivBoNEvent(delta, sigma, candidates=16, r_max=1.0)      # the ε is that event's
    assert rec.details["composition"] == "basic"
    total = rec.details["total_epsilon"]
    assert 3 * expected - 3e-11 <= total <= 3 * expected + 3e-11 and total >= 3 * rec.value * (1 - 1e-15)
    assert res.epsilon_per_prompt == rec.value and res.epsilon_total == total
    nominal = PrivBoN(delta, sigma, r_max=1.0, mode="nominal").select(scores, make_rng(1)).record
    assert abs(nominal.value - 2 * delta / sigma) <= 1e-11


def test_from_epsilon_nominal_and_tight():
    mech = PrivBoN.from_epsilon(0.1, 1.0, r_max=1.0)
    assert abs(mech.sigma - 0.2) <= 1e-12 and mech.calibration is not None
    tight = PrivBoN.from_epsilon(0.1, 1.0, r_max=1.0, candidates=16, tight=True)
    assert tight.sigma < mech.sigma
    rec = tight.select(np.zeros((2, 16)), make_rng(0)).record
    assert rec.value <= 1.0
    with pytest.raises(ValueError):
        tight.select(np.zeros((2, 17)), make_rng(0))   # ε_BoN grows with n: more candidates than calibrated


# --- exact law and samplers -------------------------------------------------------------------------------

ROW = np.array([0.0, 0.3, 0.31, 0.9, 1.0, 0.55, -0.4, 1.7])   # the last two are clipped to [0, 1]
CLIPPED = np.clip(ROW, 0.0, 1.0)
SIGMA = 0.25
N_MC = 200_000


def test_law_is_the_softmax():
    p = privbon_law(CLIPPED, SIGMA)
    e = np.exp(CLIPPED / SIGMA)
    assert np.allclose(p, e / e.sum(), atol=1e-15, rtol=1e-13)
    batch = privbon_law(np.stack([CLIPPED, CLIPPED[::-1]]), SIGMA)
    assert np.allclose(batch[1], p[::-1], atol=1e-15, rtol=1e-13)


@pytest.mark.parametrize("sampler", ["gumbel", "softmax"])
def test_sampler_matches_softmax_law_on_clipped_scores(sampler):
    scores = np.tile(ROW, (N_MC, 1))
    before = scores.copy()
    res = PrivBoN(0.1, SIGMA, r_max=1.0, sampler=sampler).select(scores, make_rng(99))
    assert np.array_equal(scores, before)   # the caller's array is never modified
    assert_counts_match(np.bincount(res.indices, minlength=ROW.size), privbon_law(CLIPPED, SIGMA))


def test_gumbel_and_softmax_samplers_agree():
    scores = np.tile(ROW, (N_MC, 1))
    a = PrivBoN(0.1, SIGMA, r_max=1.0, sampler="gumbel").select(scores, make_rng(5)).indices
    b = PrivBoN(0.1, SIGMA, r_max=1.0, sampler="softmax").select(scores, make_rng(6)).indices
    assert_same_distribution(np.bincount(a, minlength=ROW.size), np.bincount(b, minlength=ROW.size))


def test_softmax_sampler_never_picks_a_zero_probability_candidate():
    # e^{(0 − 1)/1e-3} underflows to 0: only the two top candidates have positive probability
    row = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    res = PrivBoN(0.001, 1e-3, r_max=1.0, sampler="softmax").select(np.tile(row, (20_000, 1)), make_rng(3))
    assert set(np.unique(res.indices).tolist()) <= {1, 3}
    assert_counts_match(np.bincount(res.indices, minlength=5)[[1, 3]], [0.5, 0.5])


# --- tightness (O-9): the extremal pair attains ε_BoN(n) exactly ------------------------------------------

@pytest.mark.parametrize("delta,sigma,expected", [(0.1, 0.2, 0.999228797882), (0.5, 1.0, 0.959690858399)])
def test_extremal_pair_attains_the_o5_bound(delta, sigma, expected):
    n = 16
    d = np.full(n, 1.0 - delta)
    d[0] = delta                         # on D the selected candidate scores Δ and all others R_max − Δ
    d_prime = np.ones(n)
    d_prime[0] = 0.0                     # on D′ the selected scores 0 and all others R_max
    ratio = math.log(privbon_law(d, sigma)[0]) - math.log(privbon_law(d_prime, sigma)[0])
    assert abs(ratio - expected) <= 1e-11


def test_random_neighbour_pairs_stay_below_the_bound():
    rng = np.random.default_rng(17)
    n, delta, sigma = 16, 0.1, 0.2
    bound = PrivBoN(delta, sigma, r_max=1.0).epsilon_record(n).value
    for _ in range(2000):
        s = rng.random(n)
        s2 = np.clip(s + rng.uniform(-delta, delta, n), 0.0, 1.0)
        lr = np.abs(np.log(privbon_law(s, sigma)) - np.log(privbon_law(s2, sigma)))
        assert lr.max() <= bound + 1e-12


# --- induced policy (O-5) ---------------------------------------------------------------------------------

def test_o5_finite_n_policy_and_limit():
    two = privbon_policy_finite_n([0.5, 0.5], [0.0, 1.0], 2, 1.0)
    assert abs(two[1] - 0.6155292893) <= 1e-9
    assert abs(two[1] - (0.25 + 0.5 * math.e / (1 + math.e))) <= 1e-12
    assert abs(two.sum() - 1.0) <= 1e-12
    limit = privbon_policy_limit([0.5, 0.5], [0.0, 1.0], 1.0)
    assert abs(limit[1] - 0.7310585786) <= 1e-9
    large = privbon_policy_finite_n([0.5, 0.5], [0.0, 1.0], 2000, 1.0)
    assert abs(large[1] - limit[1]) <= 1e-3
    assert two[1] < large[1] < limit[1] + 1e-12


def test_finite_n_policy_against_brute_force_over_ordered_lists():
    import itertools
    pi0 = np.array([0.2, 0.5, 0.3])
    r = np.array([0.1, 0.4, 0.9])
    n, sigma = 4, 0.3
    brute = np.zeros(3)
    for lst in itertools.product(range(3), repeat=n):      # every ordered candidate list
        prob_list = np.prod(pi0[list(lst)])
        soft = privbon_law(r[list(lst)], sigma)
        for pos, y in enumerate(lst):
            brute[y] += prob_list * soft[pos]
    assert np.allclose(privbon_policy_finite_n(pi0, r, n, sigma), brute, atol=1e-13, rtol=0)


# --- BoN ----------------------------------------------------------------------------------------------------

def test_bon_argmax_with_ties_to_the_lowest_index():
    res = best_of_n([[0.1, 0.7, 0.7, 0.2], [0.9, 0.1, 0.9, 0.9]])
    assert res.indices.tolist() == [1, 0]
    assert res.record is None and res.privacy_release is False and res.randomness_mode is None
    # with a public range, scores above r_max are clipped first, creating a tie
    assert best_of_n([0.5, 1.2, 3.0], r_max=1.0).indices.tolist() == [1]
