"""PrivITP under composition: the provable ex-post filter, its replication mode, and the
basic-composition baselines.

Expected values come from independent sources: brute-force recomputations in exact rational arithmetic
from the certified `privitp_kappa` values and ε1 = `epsilon(PrivITPPhase1Event(...))`, and closed forms (⌊δ_total/δ⌋,
⌊E/ε_max⌋). No number printed by the code under test is used as an expected value.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mechanisms.selection.filtered as filtered
from mechanisms.selection import FRESH_PI0, HALT_FALLBACK, make_rng
from mechanisms.selection.filtered import (
    ANSWERED,
    DROPPED,
    PHASE2_SKIPPED,
    REFUSED,
    BasicCompositionPrivITP,
    FilteredPrivITP,
)
from privcheck.accounting import PrivITPParams, PrivITPPhase1Event, epsilon, privitp_kappa
from privcheck.errors import InvalidParameter

N = 16


def params(n=N, sigma=0.2, **kw):
    base = dict(candidates=n, beta=0.05, sigma_x=sigma / 2, sigma_z=sigma / 2, headroom=0.5, sensitivity=0.01,
                delta=1e-6)
    base.update(kw)
    return PrivITPParams(**base)


def stream(seed, n=N, kind="uniform"):
    """Infinite query stream: uniform scores, or adversarial score patterns."""
    gen = np.random.default_rng(seed)
    while True:
        if kind == "uniform":
            yield gen.random(n), gen.random(n)
        elif kind == "high_low":          # λ̂ = 1 − β (large κ_acc), Phase-2 scores at 0: (almost) always fallback
            yield np.ones(n), np.zeros(n)
        elif kind == "high_high":         # large κ_acc and early acceptance at r_max
            yield np.ones(n), np.ones(n)
        else:                             # mixture of the patterns, chosen at random
            k = gen.integers(3)
            yield (gen.random(n), gen.random(n)) if k == 0 else (np.ones(n), np.full(n, float(k == 2)))


def kappas(p, lt):
    pair = privitp_kappa(p, lt)
    return Fraction(pair.kappa.value), Fraction(pair.kappa_acc.value), pair


def brute_force_rounds(p, spent: Fraction, budget: float, lt: float) -> tuple[int, Fraction]:
    """T of the filter's truncation step in exact arithmetic on the certified κ, κ_acc (upper ends); also the margin
    between the budget and the worst case at T + 1 or T, whichever is closer (for rounding-safe comparisons)."""
    k, ka, _ = kappas(p, lt)
    e = Fraction(budget)
    worst = [spent + (t - 1) * k + max(ka, k) for t in range(1, p.candidates + 1)]
    fits = [w <= e for w in worst]
    rounds = max((t for t, ok in zip(range(1, p.candidates + 1), fits) if ok), default=0)
    margin = min(abs(e - w) for w in worst)
    return rounds, margin


def realised_phase2(p, out) -> tuple[Fraction, Fraction]:
    """(lower, upper) certified enclosure of the Phase-2 ex-post loss of an answered outcome."""
    pair = privitp_kappa(p, out.lambda_tilde)
    k_lo, k_hi = Fraction(pair.kappa.lower), Fraction(pair.kappa.upper)
    ka_lo, ka_hi = Fraction(pair.kappa_acc.lower), Fraction(pair.kappa_acc.upper)
    if out.halting_time == HALT_FALLBACK:
        return out.rounds * k_lo, out.rounds * k_hi
    return (out.halting_time - 1) * k_lo + ka_lo, (out.halting_time - 1) * k_hi + ka_hi


def check_provable_transcript(f: FilteredPrivITP, budget: float) -> None:
    """Every invariant the filter promises, recomputed from the outcomes."""
    p = f.params
    eps1 = Fraction(epsilon(PrivITPPhase1Event(p)).value)
    total = Fraction(0)
    for out in f.outcomes:
        assert out.provable and out.guarantee == "ex_post_filter"
        if out.status == REFUSED:
            assert out.epsilon == 0 and out.index is None and out.halting_time is None
            continue
        assert Fraction(out.phase1_epsilon) == eps1
        total += eps1
        if out.status == PHASE2_SKIPPED:
            assert out.rounds == 0 and out.index == FRESH_PI0 and out.phase2_epsilon == 0.0
            continue
        assert out.status == ANSWERED and 1 <= out.rounds <= p.candidates
        assert out.halting_time == HALT_FALLBACK or 1 <= out.halting_time <= out.rounds
        assert out.index == (FRESH_PI0 if out.halting_time == HALT_FALLBACK else out.halting_time - 1)
        lo, hi = realised_phase2(p, out)
        charged = Fraction(out.phase2_epsilon)
        assert charged >= lo                      # a certified upper bound on the realised loss ...
        assert charged <= hi + Fraction(1, 10**12)  # ... of the right formula ((t−1)κ + κ_acc or T·κ)
        assert Fraction(out.worst_case_phase2) >= charged
        total += charged
    assert total <= Fraction(budget)                    # the certified realised spend never exceeds E
    assert f.spent <= budget and f.filter.spent <= budget
    assert f.phase1_runs <= f.k_max


# --- the provable filter -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["uniform", "high_low", "high_high", "mixed"])
@pytest.mark.parametrize("budget", [0.5, 3.0, 25.0])
def test_filter_never_exceeds_budget(kind, budget):
    p = params()
    f = FilteredPrivITP(p, budget, 1e-3)
    outs = f.run(stream(1, kind=kind), make_rng(7))
    assert outs[-1].status == REFUSED and outs[-1].reason.startswith("budget")
    assert sum(o.status == REFUSED for o in outs) == 1          # the loop stops at the first refusal
    check_provable_transcript(f, budget)
    # the refusal is the rule's: spent + ε1 no longer fits (up to rounding of the certified sum)
    assert Fraction(f.spent) + Fraction(f.eps1) > Fraction(budget) - Fraction(1, 10**12)


@settings(max_examples=40)
@given(budget=st.floats(0.05, 30.0), seed=st.integers(0, 2**31), sigma=st.sampled_from([0.05, 0.2, 0.8]),
       n=st.sampled_from([1, 4, 16]), kind=st.sampled_from(["uniform", "high_low", "high_high", "mixed"]))
def test_filter_invariants_property(budget, seed, sigma, n, kind):
    p = params(n=n, sigma=sigma)
    f = FilteredPrivITP(p, budget, 1e-3)
    f.run(itertools.islice(stream(seed, n=n, kind=kind), 400), make_rng(seed))
    check_provable_transcript(f, budget)


def _worst_phase2(p, lt, rounds):
    """Adversary's choice of the Phase-2 outcome: the one with the largest realised loss under cap T."""
    _, _, pair = kappas(p, lt)
    return rounds if pair.kappa_acc.value >= pair.kappa.value else None


@pytest.mark.parametrize("budget", [1.0, 7.5, 40.0])
def test_adversarial_transcript_worst_case_outcomes(monkeypatch, budget):
    """An adversary controlling every released λ̃ (including the clamp region c = c_min, where κ_acc is
    huge, and very low λ̃) and every Phase-2 outcome (the worst one allowed by the cap T) cannot push the
    certified spend past E."""
    p = params(sigma=0.2)
    clamp_point = p.r_max + p.sigma_z * p.headroom
    lts = itertools.cycle([0.2, 0.95, clamp_point + 0.3, -0.4, 0.7, clamp_point - 1e-3, 1.0])
    monkeypatch.setattr(filtered, "_release_lambda_tilde", lambda s1, prm, gen: next(lts))
    monkeypatch.setattr(filtered, "_phase2", lambda s2, lt, rounds, prm, gen: _worst_phase2(prm, lt, rounds))
    f = FilteredPrivITP(p, budget, 1e-3)
    outs = f.run(stream(3), make_rng(0))
    check_provable_transcript(f, budget)
    answered = [o for o in outs if o.status == ANSWERED]
    assert answered, "the adversarial run must answer some queries"
    # the adversary really obtained the worst case of every admitted Phase 2: realised = worst case
    for o in answered:
        assert math.isclose(o.phase2_epsilon, o.worst_case_phase2, rel_tol=1e-12)
    assert any(o.rounds < p.candidates for o in answered) or any(o.status == PHASE2_SKIPPED for o in outs)


def test_rounds_cap_matches_brute_force():
    """T = largest integer in [1, n] with spent + (T−1)κ + max(κ_acc, κ) ≤ E, else 0 (the truncation step),
    recomputed in exact arithmetic from the certified κ's, over many spends and released λ̃."""
    p = params(sigma=0.1)
    budget = 10.0
    compared = 0
    for spent in np.linspace(0.0, budget, 41):
        f = FilteredPrivITP(p, budget, 1e-3)
        if spent > 0:
            f.filter.charge("external mechanism", float(spent), float(spent))   # another mechanism's spend
        for lt in np.linspace(-0.2, 1.2, 29):
            rounds = f.rounds_cap(float(lt))
            expected, margin = brute_force_rounds(p, Fraction(f.filter.spent), budget, float(lt))
            if margin > Fraction(1, 10**9):       # away from a rounding tie between ball and rational sums
                assert rounds == expected, (spent, lt)
                compared += 1
            else:
                assert abs(rounds - expected) <= 1
    assert compared > 1000


def test_answered_rounds_equal_brute_force_T_along_a_run():
    p = params(sigma=0.1)
    budget = 60.0
    f = FilteredPrivITP(p, budget, 1e-3)
    prev = Fraction(0)
    checked = 0
    for o in f.run(stream(11, kind="mixed"), make_rng(5)):
        if o.status in (ANSWERED, PHASE2_SKIPPED):
            after_phase1 = prev + Fraction(f.eps1)
            expected, margin = brute_force_rounds(p, after_phase1, budget, o.lambda_tilde)
            if margin > Fraction(1, 10**9):
                assert o.rounds == expected
                checked += 1
        prev = Fraction(o.spent_after)
    assert checked >= 10


def test_phase2_loop_is_capped_at_T(monkeypatch):
    """The Phase-2 sampler only ever sees the first T candidates of the query's Phase-2 list."""
    p = params(sigma=0.2)
    seen = []
    real = filtered.run_phase2

    def spy(phase2, lambda_tilde, c, sigma_z, gen):
        seen.append((phase2.copy(), float(c[0]), float(lambda_tilde[0])))
        return real(phase2, lambda_tilde, c, sigma_z, gen)

    monkeypatch.setattr(filtered, "run_phase2", spy)
    truncated = 0
    for seed in range(20):
        seen.clear()
        queries = list(itertools.islice(stream(seed), 200))
        f = FilteredPrivITP(p, 10.0, 1e-3)
        outs = f.run(iter(queries), make_rng(seed))
        answered = [o for o in outs if o.status == ANSWERED]
        assert len(seen) == len(answered) >= 2
        for (cols, c, lt), o in zip(seen, answered):
            assert cols.shape == (1, o.rounds)
            assert np.array_equal(cols[0], queries[o.query][1][:o.rounds])
            assert lt == o.lambda_tilde and c == p.threshold_width(o.lambda_tilde)   # THE definition of c
        truncated += sum(o.rounds < p.candidates for o in answered)
    assert truncated >= 5                                   # truncation did happen


def test_T_zero_returns_fresh_pi0_without_phase2():
    p = params(sigma=0.1)
    budget = 10.0
    eps1 = epsilon(PrivITPPhase1Event(p)).value
    f = FilteredPrivITP(p, budget, 1e-3)
    # leave room for Phase 1 but for no Phase-2 round: max(κ_acc, κ) ≥ κ > 1e-3 for every λ̃ here
    external = budget - eps1 - 1e-3
    f.filter.charge("external mechanism", external, external)
    rand = make_rng(4)
    out = f.query(np.full(N, 0.5), np.full(N, 0.5), rand)
    assert out.status == PHASE2_SKIPPED and out.index == FRESH_PI0 and out.rounds == 0
    assert out.halting_time is None and out.phase2_epsilon == 0.0
    assert Fraction(out.spent_after) <= Fraction(budget)
    assert f.phase1_runs == 1
    nxt = f.query(np.full(N, 0.5), np.full(N, 0.5), rand)
    assert nxt.status == REFUSED and f.phase1_runs == 1


def test_refusals_are_public_decisions():
    """Once refused, a query is refused whatever its scores: the decision is taken before the scores are
    read (NaN scores are not even validated) and before any randomness is drawn."""
    p = params(sigma=0.2)
    f = FilteredPrivITP(p, 2.0, 1e-3)
    rand = make_rng(9)
    f.run(stream(4), rand)
    assert f.outcomes[-1].status == REFUSED
    state = json.dumps(rand.generator.bit_generator.state, sort_keys=True)
    spent = f.spent
    for s1, s2 in [(np.full(N, np.nan), np.full(N, np.nan)), (np.zeros(N), np.ones(N)), (np.ones(N), np.zeros(N))]:
        out = f.query(s1, s2, rand)
        assert out.status == REFUSED and out.reason.startswith("budget")
        assert out.index is None and out.epsilon == 0.0
    assert json.dumps(rand.generator.bit_generator.state, sort_keys=True) == state   # no randomness drawn
    assert f.spent == spent
    tr = f.filter.to_json()
    assert tr["refused"] >= 4 and tr["provable"] is True


def test_k_max_respected():
    p = params(sigma=0.8)
    delta_total = 3.5e-6                                       # ⌊3.5e-6 / 1e-6⌋ = 3
    f = FilteredPrivITP(p, 1000.0, delta_total)
    assert f.k_max == 3
    outs = f.run(itertools.islice(stream(5), 10), make_rng(2), stop_at_refusal=False)
    assert [o.status for o in outs[:3]] == [ANSWERED] * 3
    assert all(o.status == REFUSED and "K_max" in o.reason for o in outs[3:])
    assert f.phase1_runs == 3
    assert f.filter.to_json()["delta_spent"] <= delta_total
    check_provable_transcript(f, 1000.0)


@pytest.mark.parametrize("delta_total, expected", [(1e-6, 1), (2.5e-6, 2), (1e-5, 10), (9.99e-4, 999)])
def test_k_max_is_floor_of_ratio(delta_total, expected):
    assert FilteredPrivITP(params(), 10.0, delta_total).k_max == expected
    assert BasicCompositionPrivITP(params(), 10.0, delta_total).k_max == expected


def test_privacy_release_only_with_os_entropy():
    p = params(sigma=0.4)
    seeded = FilteredPrivITP(p, 50.0, 1e-3).query(np.full(N, 0.5), np.full(N, 0.6), make_rng(1))
    fresh = FilteredPrivITP(p, 50.0, 1e-3).query(np.full(N, 0.5), np.full(N, 0.6))
    assert seeded.privacy_release is False and fresh.privacy_release is True


# --- replication mode --------------------------------------------------------------------------------

def test_replication_mode_is_labelled_and_overshoots():
    p = params(sigma=0.2)
    budget = 5.0
    f = FilteredPrivITP(p, budget, 1e-3, mode="replication_unsound")
    outs = f.run(stream(8, kind="mixed"), make_rng(3))
    assert all(o.provable is False and o.guarantee == "not_dp_replication" and o.privacy_release is False
               for o in outs)
    tr = f.transcript()
    assert tr["provable"] is False and tr["filter"]["provable"] is False and "NOT" in tr["guarantee_statement"]
    assert tr["filter"]["note"].startswith("not DP")
    dropped = [o for o in outs if o.status == DROPPED]
    assert len(dropped) == 1 and outs[-1] is dropped[0] and dropped[0].index is None
    # The published rule reports a spend within E, but the mechanisms that actually ran spent more:
    counted = sum(Fraction(o.epsilon) for o in outs if o.status == ANSWERED)
    executed = counted + Fraction(dropped[0].epsilon)
    assert counted <= Fraction(budget) < executed
    assert f.counted_spent <= budget < f.spent
    # later queries are refused without running
    assert f.query(np.full(N, 0.5), np.full(N, 0.5), make_rng(0)).status == REFUSED


def test_replication_drop_decision_depends_on_the_private_outcome(monkeypatch):
    """Same public history, same λ̃; only the private Phase-2 outcome differs (acceptance at t = 1 vs the
    fallback): the unsound rule answers one and drops the other, so the drop itself leaks the outcome."""
    p = params(sigma=0.2)
    lt = 0.5
    k, ka, _ = kappas(p, lt)
    eps1 = Fraction(epsilon(PrivITPPhase1Event(p)).value)
    assert ka < p.candidates * k                               # acceptance at t = 1 is the cheaper outcome
    budget = float(eps1 + (ka + p.candidates * k) / 2)         # fits ε1 + κ_acc but not ε1 + n·κ
    monkeypatch.setattr(filtered, "_release_lambda_tilde", lambda s1, prm, gen: lt)
    statuses = {}
    for outcome in (1, None):
        monkeypatch.setattr(filtered, "_phase2", lambda s2, lt, rounds, prm, gen, o=outcome: o)
        f = FilteredPrivITP(p, budget, 1e-3, mode="replication_unsound")
        statuses[outcome] = f.query(np.full(N, 0.5), np.full(N, 0.5), make_rng(0)).status
    assert statuses == {1: ANSWERED, None: DROPPED}
    # the provable filter truncates instead: T < n makes both outcomes fit
    monkeypatch.setattr(filtered, "_phase2", lambda s2, lt, rounds, prm, gen: None)
    f = FilteredPrivITP(p, budget, 1e-3)
    out = f.query(np.full(N, 0.5), np.full(N, 0.5), make_rng(0))
    assert out.status == ANSWERED and out.rounds < p.candidates and f.spent <= budget


# --- basic-composition baselines -------------------------------------------------------------------

def test_heuristic_charge_is_eps1_plus_worst_full_query():
    p = params(sigma=0.2)
    budget = 30.0
    b = BasicCompositionPrivITP(p, budget, 1e-3, variant="heuristic")
    outs = b.run(stream(6, kind="mixed"), make_rng(4))
    eps1 = Fraction(epsilon(PrivITPPhase1Event(p)).value)
    n = p.candidates
    total = Fraction(0)
    answered = [o for o in outs if o.status == ANSWERED]
    assert answered and outs[-1].status == REFUSED
    for o in outs:
        assert o.provable is False and o.guarantee == "heuristic" and o.privacy_release is False
    for o in answered:
        k, ka, pair = kappas(p, o.lambda_tilde)
        expected = eps1 + max((n - 1) * k + ka, n * k)          # ε1 + max((n−1)κ + κ_acc, nκ), upper ends
        lower = (Fraction(epsilon(PrivITPPhase1Event(p)).certified.lower)
                 + max((n - 1) * Fraction(pair.kappa.lower) + Fraction(pair.kappa_acc.lower),
                       n * Fraction(pair.kappa.lower)))
        assert lower <= Fraction(o.epsilon)
        assert abs(Fraction(o.epsilon) - expected) <= Fraction(1, 10**12) * expected
        assert o.rounds == n
        total += Fraction(o.epsilon)
    assert total <= Fraction(budget)
    last = outs[-1]                                         # stopped: its ε_max(λ̃) did not fit
    k, ka, _ = kappas(p, last.lambda_tilde)
    assert total + eps1 + max((n - 1) * k + ka, n * k) > Fraction(budget) - Fraction(1, 10**12)


def test_heuristic_with_constant_cost_answers_floor_E_over_eps_max(monkeypatch):
    p = params(sigma=0.4)
    lt = 0.6
    monkeypatch.setattr(filtered, "_release_lambda_tilde", lambda s1, prm, gen: lt)
    k, ka, _ = kappas(p, lt)
    eps_max = Fraction(epsilon(PrivITPPhase1Event(p)).value) + max((p.candidates - 1) * k + ka, p.candidates * k)
    budget = 20.0
    b = BasicCompositionPrivITP(p, budget, 1e-3)
    outs = b.run(stream(0), make_rng(0))
    expected = math.floor(Fraction(budget) / eps_max)
    assert sum(o.status == ANSWERED for o in outs) == expected


def test_clamped_variant_is_ex_ante_and_bounds_every_lambda():
    p = params(sigma=0.2)
    budget = 20.0
    b = BasicCompositionPrivITP(p, budget, 1e-3, variant="clamped")
    lo, hi = b.lambda_range
    assert (lo, hi) == (p.r_lo - p.beta, p.r_max - p.beta)
    n = p.candidates
    eps1 = Fraction(epsilon(PrivITPPhase1Event(p)).value)
    worst_seen = Fraction(0)
    for lt in np.linspace(lo, hi, 201):                       # brute force over the clamp interval
        k, ka, _ = kappas(p, float(lt))
        worst_seen = max(worst_seen, eps1 + max((n - 1) * k + ka, n * k))
    assert Fraction(b.epsilon_max) >= worst_seen
    assert Fraction(b.epsilon_max) <= worst_seen * Fraction(101, 100)   # and not uselessly loose
    outs = b.run(stream(1, kind="mixed"), make_rng(1))
    answered = [o for o in outs if o.status == ANSWERED]
    assert len(answered) == min(math.floor(Fraction(budget) / Fraction(b.epsilon_max)), b.k_max)
    assert all(lo <= o.lambda_tilde <= hi and o.provable and o.guarantee == "ex_ante_basic_composition"
               for o in answered)
    assert outs[-1].status == REFUSED and outs[-1].lambda_tilde is None      # refused before Phase 1
    assert b.spent <= budget


def test_clamped_range_must_avoid_the_clamp_of_c():
    p = params(sigma=0.2)
    with pytest.raises(InvalidParameter) as err:
        BasicCompositionPrivITP(p, 10.0, 1e-3, variant="clamped", lambda_range=(0.0, 1.2))
    assert err.value.name == "lambda_range"


# --- bad input -----------------------------------------------------------------------------------------

def _raises(name, fn, *args, **kw):
    with pytest.raises(InvalidParameter) as err:
        fn(*args, **kw)
    assert err.value.name == name, err.value


def test_bad_input():
    p = params()
    _raises("mode", FilteredPrivITP, p, 10.0, 1e-3, mode="charge_after_run")
    _raises("params", FilteredPrivITP, "p", 10.0, 1e-3)
    _raises("budget", FilteredPrivITP, p, 0.0, 1e-3)
    _raises("budget", FilteredPrivITP, p, math.inf, 1e-3)
    _raises("delta_total", FilteredPrivITP, p, 10.0, 1.0)
    _raises("delta_total", FilteredPrivITP, p, 10.0, 1e-7)     # below one Phase-1 δ
    _raises("variant", BasicCompositionPrivITP, p, 10.0, 1e-3, variant="tight")
    _raises("lambda_range", BasicCompositionPrivITP, p, 10.0, 1e-3, lambda_range=(0.0, 0.5))   # heuristic
    _raises("lambda_range", BasicCompositionPrivITP, p, 10.0, 1e-3, variant="clamped", lambda_range=(0.5, 0.2))
    f = FilteredPrivITP(p, 10.0, 1e-3)
    s = np.full(N, 0.5)
    _raises("phase2_scores", f.query, s, s, make_rng(0))                       # the same array twice
    _raises("phase1_scores", f.query, np.full(N + 1, 0.5), s, make_rng(0))
    _raises("phase2_scores", f.query, s, np.full((2, N), 0.5), make_rng(0))
    _raises("phase1_scores", f.query, np.full(N, np.nan), s, make_rng(0))
    _raises("rng", f.query, s, s.copy(), "seed")
    assert f.outcomes == [] and f.phase1_runs == 0 and f.spent == 0.0          # nothing ran or was charged


def test_transcripts_are_json():
    p = params(sigma=0.4)
    for rule in (FilteredPrivITP(p, 3.0, 1e-3), FilteredPrivITP(p, 3.0, 1e-3, mode="replication_unsound"),
                 BasicCompositionPrivITP(p, 3.0, 1e-3), BasicCompositionPrivITP(p, 3.0, 1e-3, variant="clamped")):
        rule.run(stream(0), make_rng(0))
        doc = json.loads(json.dumps(rule.transcript(), allow_nan=False))
        assert doc["outcomes"] and doc["provable"] is rule.provable
