"""Larger sweeps of the certified PLD enclosure (`make test-slow`): the fast tier's checks
(tests/accounting/test_pld_certified.py) on other seeds and more points, independent (σ, T, δ) triples each
with its own composition and an mpmath-bisection ε, all Table VI rows, and edge cases. Deterministic (fixed seeds).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcheck.accounting import CompositionHistory, PoissonGaussianEvent, epsilon
from privcheck.accounting.pld_certified import certified_epsilon
from privcheck.errors import CertificationError
from tests.accounting import pld_references as ref
from tests.accounting import test_pld_certified as fast

pytestmark = pytest.mark.slow


def test_q1_profile_sweep_other_seed():
    checked, misses, failures, solved = fast.gdp_sweep(seed=7, pairs=60, deltas_per_pair=100, solve_every=25)
    assert misses == [], misses[:10]
    assert [s for s in solved if not (s[4] <= s[6] <= s[5])] == []
    assert failures == [], failures
    assert checked >= 6000


def test_q1_independent_triples():
    """Each (σ, T, δ) drawn on its own, one composition each, exact ε by mpmath bisection."""
    rng = np.random.default_rng(2026)
    bad, failures = [], []
    for _ in range(120):
        sigma = float(fast.log_uniform(rng, *fast.SIGMA_RANGE))
        steps = fast.draw_steps(rng)
        delta = float(fast.log_uniform(rng, *fast.DELTA_RANGE))
        mu = math.sqrt(steps) / sigma
        h = fast.coarse_interval(mu)
        try:
            b = certified_epsilon(((1.0, sigma, steps),), delta, interval=h)
        except CertificationError as exc:
            failures.append(f"certified_epsilon(((1.0, {sigma!r}, {steps}),), {delta!r}, interval={h!r}): {exc}")
            continue
        exact = ref.gdp_epsilon(mu, delta)
        if not (b.lower <= exact <= b.upper):
            bad.append((sigma, steps, delta, h, b.lower, b.upper, float(exact)))
    assert bad == [], bad
    assert failures == [], failures


def test_q_below_one_larger_sweep():
    checked, problems, failures, skipped = fast.subsampled_sweep(seed=12, points=30, deltas_per_point=3)
    assert problems == [], problems
    assert checked >= 30, (checked, failures, skipped)


@pytest.mark.parametrize("row", fast.TABLE_VI, ids=lambda r: r[0])
def test_table_vi_all_rows(row):
    name, n, m, steps, sigma, paper = row
    fast.check_reported_row(m / n, sigma, steps, 1 / (10 * n), paper, 1e-3)


@pytest.mark.parametrize("sigma, steps, delta", fast.AUTO_CASES)
def test_q1_auto_interval_all_cases(sigma, steps, delta):
    fast.test_q1_auto_interval_meets_tolerance_and_encloses(sigma, steps, delta)


def test_three_phase_history_against_dp_accounting():
    assert fast.relation_problems(fast.RELATION_CASES) == []


@pytest.mark.parametrize("q, sigma, delta", fast.SINGLE_ROUND_CASES)
def test_single_round_all_cases(q, sigma, delta):
    fast.test_single_round_intersects_the_exact_method(q, sigma, delta)


@pytest.mark.parametrize("relation, phases, delta", [
    ("replace_one", ((0.01, 0.9, 1000),), 1e-8),
    ("replace_one", ((1.0, 2.0, 10),), 1e-5),
    ("add_remove", ((0.1, 3.0, 256), (0.2, 2.0, 128)), 1e-6),
])
def test_replace_one_and_histories_more(relation, phases, delta):
    h = 2e-3
    b = certified_epsilon(phases, delta, relation, interval=h)
    dpa = ref.dpa_bracket(phases, (delta,), h / 10, relation)[0]
    assert fast.bracket_problems(f"{phases!r} {relation} {delta!r}", b.lower, b.upper, dpa, None) == []


def test_history_record_through_epsilon():
    history = CompositionHistory((PoissonGaussianEvent(0.05, 1.0, 200), PoissonGaussianEvent(0.1, 1.5, 100)))
    rec = epsilon(history, 1e-6)
    assert rec.certified is not None and rec.value == rec.certified.upper, rec.reason
    opt, pess = ref.dpa_bracket(((0.05, 1.0, 200), (0.1, 1.5, 100)), (1e-6,), 1e-5)[0]
    assert opt <= rec.value and rec.certified.lower <= pess


def test_large_epsilon_at_large_delta():
    # q = 1, σ = 0.3, T = 400: μ = 66.7, ε ≈ 2.4e3 at δ = 1e-3 (δ close to the top of the range, ε large)
    mu = math.sqrt(400) / 0.3
    b = certified_epsilon(((1.0, 0.3, 400),), 9.9e-4, interval=fast.coarse_interval(mu))
    assert fast.gdp_encloses(mu, 9.9e-4, b.lower, b.upper)


def test_smallest_sampling_rate():
    q, sigma, steps, delta = 1e-4, 0.5, 1000, 1e-5
    b = certified_epsilon(((q, sigma, steps),), delta, interval=2e-3)
    dpa = ref.dpa_bracket(((q, sigma, steps),), (delta,), 2e-4)[0]
    assert fast.bracket_problems("q=1e-4", b.lower, b.upper, dpa, ref.prv_bracket(q, sigma, steps, (delta,),
                                                                                   0.02)[0]) == []


def test_million_steps_encloses_the_exact_gdp_epsilon():
    """q = 1, σ = 100, T = 10⁶ (the most rounds the certified PLD accepts): μ-GDP with μ = 10, exact ε from the
    60-digit closed form. At T = 10⁶ only a few hundred of the 2²² frequencies survive the T-th power: the band
    and the blocked FFT levels carry the whole computation."""
    sigma, steps = 100.0, 10 ** 6
    b = certified_epsilon(((1.0, sigma, steps),), 1e-5, interval=1e-4)
    assert fast.gdp_encloses(math.sqrt(steps) / sigma, 1e-5, b.lower, b.upper)


def test_million_steps_brackets_dp_accounting():
    """q = 0.01, σ = 1, T = 10⁶, δ = 1e-5 at the lattice 1e-4 (the T-scaling benchmark's last row): dp-accounting's
    pessimistic figure (an upper estimate) is ≥ our lower end, our upper end is ≥ its optimistic figure, and our
    upper end exceeds its pessimistic one by at most 1e-2 (docs/accounting.md, "Speed at scale": 1.7e-3
    measured; the discretisation error of both grows with T at a fixed lattice)."""
    phases = ((0.01, 1.0, 10 ** 6),)
    b = certified_epsilon(phases, 1e-5, interval=1e-4)
    (opt, pess), = ref.dpa_bracket(phases, (1e-5,), 1e-4)
    assert b.lower <= pess and b.upper >= opt
    assert b.upper - pess <= 1e-2
