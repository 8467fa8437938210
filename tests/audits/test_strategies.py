"""Guess rules and threshold strategies (docs/audits.md, "Choosing the threshold without cheating")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from audits import canary
from audits.statistics.one_run import eps_lower, from_scores, p_value
from audits.statistics.strategies import Bonferroni, Explicit, Split, count, guesses, rank, tie_break_key
from privcheck.errors import InvalidParameter


def _separable(m=400, seed=0):
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random(m) < 0.5, 1, -1)
    scores = signs * 1.5 + rng.normal(size=m)
    return scores, signs


# --- ranking ---------------------------------------------------------------------------------------------------------

def test_guesses_top_and_bottom():
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.7])
    gamma = guesses(rank(scores, tie_break_key(5)), 2, 1)
    assert gamma.tolist() == [-1, 1, 0, 0, 1]
    assert count(gamma, np.array([-1, 1, 1, -1, -1])) == (3, 2)


def test_ties_are_broken_by_the_fixed_key_not_by_labels():
    scores = np.zeros(50)
    key = tie_break_key(50, seed=7)
    order = rank(scores, key)
    assert order.tolist() == np.argsort(-key, kind="stable").tolist()
    # same scores, two different label vectors: the guesses do not move
    g = guesses(order, 10, 0)
    a = from_scores(scores, np.tile([1, -1], 25), delta=0, k_plus=10, tie_break_seed=7)
    b = from_scores(scores, np.tile([-1, 1], 25), delta=0, k_plus=10, tie_break_seed=7)
    assert a.result["correct"] + b.result["correct"] == 10 == int((g == 1).sum())


# --- explicit ---------------------------------------------------------------------------------------------------------

def test_explicit_equals_counts_formula():
    scores, signs = _separable()
    rep = from_scores(scores, signs, delta=1e-5, confidence=0.95, k_plus=40, k_minus=30, eps_nominal=1.0)
    order = np.argsort(-scores, kind="stable")
    v = int(np.sum(signs[order[:40]] == 1) + np.sum(signs[order[-30:]] == -1))
    assert (rep.result["guesses"], rep.result["correct"]) == (70, v)
    assert rep.result["eps_lower"] == eps_lower(400, 70, v, 1e-5, 0.05)
    assert rep.result["p_value_at_nominal"] == p_value(400, 70, v, 1.0, 1e-5)
    assert rep.guessing["selection"] == "explicit" and rep.guessing["n_hypotheses"] == 1
    assert rep.canaries["n_in"] == int((signs == 1).sum()) and rep.canaries["n_out"] == int((signs == -1).sum())
    assert 0.5 < rep.diagnostics["auroc"] <= 1.0


def test_explicit_needs_k_plus():
    scores, signs = _separable(20)
    with pytest.raises(InvalidParameter) as err:
        from_scores(scores, signs, delta=0, strategy=Explicit())
    assert err.value.name == "k_plus"


# --- Bonferroni -------------------------------------------------------------------------------------------------------

def test_bonferroni_tests_each_pair_at_p_over_k():
    scores, signs = _separable()
    family = [(10, 0), (40, 0), (80, 40), (200, 0)]
    rep = from_scores(scores, signs, delta=1e-5, confidence=0.95, strategy=Bonferroni(family), eps_nominal=2.0)
    order = np.argsort(-scores, kind="stable")
    per_pair = []
    for kp, km in family:
        v = int(np.sum(signs[order[:kp]] == 1) + (np.sum(signs[order[-km:]] == -1) if km else 0))
        per_pair.append((eps_lower(400, kp + km, v, 1e-5, 0.05 / 4), p_value(400, kp + km, v, 2.0, 1e-5)))
    assert rep.result["eps_lower"] == max(e for e, _ in per_pair)
    assert rep.result["p_value_at_nominal"] == min(1.0, 4 * min(pv for _, pv in per_pair))
    assert rep.guessing["n_hypotheses"] == 4 and rep.guessing["selection"] == "bonferroni"
    # n_hypotheses enters the significance: the same single pair tested alone certifies more
    best = family[int(np.argmax([e for e, _ in per_pair]))]
    alone = from_scores(scores, signs, delta=1e-5, k_plus=best[0], k_minus=best[1])
    assert alone.result["eps_lower"] > rep.result["eps_lower"]


@pytest.mark.parametrize("family", [lambda labels: [(1, 0)], "10,0", 5, [], [(1, 0), (1, 0)], [(0, 0)], [(1,)],
                                    [(-1, 2)]])
def test_bonferroni_refuses_undeclared_or_malformed_families(family):
    with pytest.raises(InvalidParameter):
        Bonferroni(family)


def test_bonferroni_family_passed_as_plain_list_is_not_a_declaration():
    scores, signs = _separable(30)
    with pytest.raises(InvalidParameter) as err:
        from_scores(scores, signs, delta=0, strategy=[(5, 0), (10, 0)])
    assert err.value.name == "strategy"


def test_bonferroni_declared_after_reveal_is_refused():
    scores, _ = _separable(60)
    S = canary.draw_membership(60, seed=1)
    frozen = canary.freeze_scores(scores)
    S.reveal(frozen)                                  # labels seen ...
    late = Bonferroni([(5, 0), (10, 0)])              # ... then a family is "declared"
    with pytest.raises(InvalidParameter) as err:
        from_scores(frozen, S, delta=0, strategy=late)
    assert err.value.name == "strategy"


def test_bonferroni_declared_before_reveal_is_accepted():
    scores, _ = _separable(60)
    S = canary.draw_membership(60, seed=1)
    family = Bonferroni([(5, 0), (10, 0)])
    frozen = canary.freeze_scores(scores)
    rep = from_scores(frozen, S, delta=0, strategy=family)
    assert rep.canaries["membership_sealed"] is True and rep.randomness["membership"] == "seeded"
    assert rep.randomness["audit_release"] is False


def test_bonferroni_with_k_plus_is_refused():
    scores, signs = _separable(30)
    with pytest.raises(InvalidParameter):
        from_scores(scores, signs, delta=0, k_plus=3, strategy=Bonferroni([(5, 0)]))


# --- Split ------------------------------------------------------------------------------------------------------------

def test_split_uses_test_part_canaries_in_delta_term():
    scores, signs = _separable(400, seed=3)
    strategy = Split(frac=0.25, seed=11)
    rep = from_scores(scores, signs, delta=1e-3, confidence=0.95, strategy=strategy)
    sel, test = strategy.parts(400)
    assert sel.size == 100 and test.size == 300 and np.intersect1d(sel, test).size == 0
    assert rep.canaries["m"] == 400 and rep.canaries["m_test"] == 300
    kp, km = rep.guessing["k_plus"], rep.guessing["k_minus"]
    key = tie_break_key(400)
    r, v = count(guesses(rank(scores[test], key[test]), kp, km), signs[test])
    assert (rep.result["guesses"], rep.result["correct"]) == (r, v)
    assert rep.result["eps_lower"] == eps_lower(300, r, v, 1e-3, 0.05)      # m_test, not m
    assert rep.result["eps_lower"] != eps_lower(400, r, v, 1e-3, 0.05)
    assert rep.guessing["split_frac"] == 0.25 and rep.guessing["selection"] == "split"


def test_split_partition_does_not_depend_on_labels_or_scores():
    a, b = Split(0.5, seed=5).parts(101), Split(0.5, seed=5).parts(101)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(InvalidParameter):
        Split(0.001, seed=1).parts(10)
    with pytest.raises(InvalidParameter):
        Split(1.0)


def test_split_finds_signal():
    scores, signs = _separable(1000, seed=4)
    rep = from_scores(scores, signs, delta=1e-5, strategy=Split(0.5, seed=2))
    assert rep.result["eps_lower"] > 0.5


# --- same-data selection is invalid; Split and Bonferroni are not -----------------------------------------------------

def _same_data_positive(scores: np.ndarray, signs: np.ndarray) -> bool:
    """The same-data pitfall: try every k₊ (and every k₋) on the labels, keep the best, test on the same labels.
    ε_lower > 0 iff PVAL(ε = 0) < p, which at δ = 0 is the Bin(k, ½) tail."""
    order = np.argsort(-scores, kind="stable")
    k = np.arange(1, scores.size + 1)
    top = np.cumsum(signs[order] == 1)
    bottom = np.cumsum(signs[order[::-1]] == -1)
    return bool(min(binom.sf(top - 1, k, 0.5).min(), binom.sf(bottom - 1, k, 0.5).min()) < 0.05)


def test_same_data_threshold_selection_gives_false_positives_split_and_bonferroni_do_not():
    """Null data (scores independent of S, true ε = 0), 200 seeded repetitions, m = 100, δ = 0, p = 0.05.

    Valid rules are positive with probability ≤ 0.05: P[Bin(200, 0.05) ≥ 30] = 8.7e-8, so the bound "≤ 29"
    fails falsely with probability < 1e-7 each. The same-data rule is positive with probability ≈ 0.369
    (20,000 repetitions offline): P[Bin(200, 0.369) ≤ 29] < 1e-11.
    """
    m, trials = 100, 200
    family = Bonferroni([(5, 0), (10, 0), (20, 0), (0, 20), (40, 0)])
    naive = split = bonf = 0
    for t in range(trials):
        rng = np.random.default_rng([2024, t])
        signs = np.where(rng.random(m) < 0.5, 1, -1)
        scores = rng.normal(size=m)
        if np.all(signs == signs[0]):
            continue
        naive += _same_data_positive(scores, signs)
        split += from_scores(scores, signs, delta=0.0, strategy=Split(0.5, seed=t)).result["eps_lower"] > 0
        bonf += from_scores(scores, signs, delta=0.0, strategy=family).result["eps_lower"] > 0
    assert binom.sf(29, trials, 0.05) < 1e-7 and binom.cdf(29, trials, 0.369) < 1e-11   # the thresholds' sizes
    assert naive >= 30
    assert split <= 29 and bonf <= 29
