"""The ε search (`search_eps_lower`, docs/audits.md, proof notes "ε_lower by bisection"): on a grid of designs the
returned ε is the lo end of an evaluated bracket PVAL(lo) < p ≤ PVAL(hi) with hi − lo ≤ BISECTION_WIDTH, it agrees
with a plain doubling-and-bisection reference (written here, on the public `p_value_unchecked`) to 1e-9, and its
evaluation count is counted by a wrapper and bounded (the ITP worst case) and, in total, at most half the
reference's. No timing is asserted (tests/benchmarks/test_bench_pvalue.py times it).
"""

from __future__ import annotations

import math

import pytest

from audits.statistics import pvalue
from audits.statistics.pvalue import BISECTION_WIDTH, EPS_CAP, eps_lower_closed_form_delta0, p_value, search_eps_lower
from tests.audits.bisection_reference import plain_search

# Worst case of the search (proof notes): PVAL(0), the closed-form start, at most 7 steps 1e-9·64^k above a rejected
# start before the cap, and ITP's ⌈log₂(100 / 1e-9)⌉ + n₀ (n₀ = 2) steps.
WORST_CASE_EVALUATIONS = 1 + 1 + 7 + math.ceil(math.log2(EPS_CAP / BISECTION_WIDTH)) + 2

SMALL = [(1, 1, 1), (10, 1, 1), (10, 7, 7), (10, 10, 9), (1000, 2, 1), (1000, 7, 6), (1000, 100, 60), (1000, 100, 90),
         (1000, 100, 100), (1000, 328, 249), (1000, 1000, 600), (1000, 1000, 999), (5000, 462, 462),
         (100_000, 1000, 900), (100_000, 10_000, 9000)]
LARGE = [(100_000, 100_000, 50_000), (100_000, 100_000, 100_000), (10**8, 10**6, 999_999), (10**8, 10**8, 60_000_000),
         (10**8, 10**8, 10**8)]
DELTAS = (0.0, 1e-12, 1e-5, 1 / 69880, 1e-2)
LEVELS = (1e-9, 0.05, 0.5)
GRID = ([(*design, delta, p) for design in SMALL for delta in DELTAS for p in LEVELS]
        + [(*design, delta, p) for design in LARGE for delta in (0.0, 1 / 69880) for p in (0.05,)])


@pytest.fixture
def recorded(monkeypatch):
    """Every PVAL evaluation the search makes, as (ε, value, stop_at)."""
    calls: list[tuple[float, float, float | None]] = []
    original = pvalue.p_value_unchecked

    def wrapper(m, r, v, eps, delta, stop_at=None):
        value = original(m, r, v, eps, delta, stop_at)
        calls.append((eps, value, stop_at))
        return value

    monkeypatch.setattr(pvalue, "p_value_unchecked", wrapper)
    return calls


def test_search_keeps_the_bracket_invariant_on_a_grid(recorded):
    total_new = total_reference = 0
    for m, r, v, delta, p in GRID:
        recorded.clear()
        found = search_eps_lower(m, r, v, delta, p)
        probes = list(recorded)
        assert found.evaluations == len(probes) <= WORST_CASE_EVALUATIONS
        assert not found.search_capped
        ref_eps, ref_capped, ref_calls = plain_search(m, r, v, delta, p)
        assert not ref_capped and abs(found.eps_lower - ref_eps) <= BISECTION_WIDTH, (m, r, v, delta, p)
        if found.eps_lower == 0.0:
            assert p_value(m, r, v, 0.0, delta) >= p
            continue
        lo = found.eps_lower
        assert any(eps == lo and value < p for eps, value, _ in probes)        # lo was evaluated, rejected
        hi = min(eps for eps, value, _ in probes if value >= p)               # nearest evaluated accepted ε
        assert 0.0 < hi - lo <= BISECTION_WIDTH
        # the full p-value (not the β the search may stop at) on both ends, recomputed here
        assert p_value(m, r, v, lo, delta) < p <= p_value(m, r, v, hi, delta)
        assert p <= p_value(m, r, v, lo + BISECTION_WIDTH, delta)
        total_new += found.evaluations
        total_reference += ref_calls
    assert 2 * total_new <= total_reference, (total_new, total_reference)


@pytest.mark.parametrize("r, v", [(100, 80), (1000, 1000), (10**6, 999_000), (10**8, 10**8)])
def test_pure_dp_search_closes_around_the_closed_form(r, v):
    """δ = 0: the start is the closed form itself, so the bracket closes in a few evaluations, within 1e-9 of it."""
    found = search_eps_lower(r, r, v, 0.0, 0.05)
    closed = eps_lower_closed_form_delta0(r, v, 0.05)
    assert abs(found.eps_lower - closed) <= BISECTION_WIDTH
    assert found.evaluations <= 4
    assert p_value(r, r, v, found.eps_lower, 0.0) < 0.05 <= p_value(r, r, v, found.eps_lower + BISECTION_WIDTH, 0.0)


@pytest.mark.parametrize("cap", [2.0, 5.0])
def test_capped_search_matches_theplain_search(monkeypatch, cap):
    """The cap: search_capped exactly when PVAL(cap) < p, with ε_lower = cap, as in the plain search."""
    monkeypatch.setattr(pvalue, "EPS_CAP", cap)
    for m, r, v, delta in [(1000, 100, 100, 1e-5), (10, 10, 10, 0.0), (1000, 1000, 900, 1e-5), (5, 5, 5, 0.0)]:
        found = search_eps_lower(m, r, v, delta, 0.05)
        assert found.search_capped == (p_value(m, r, v, cap, delta) < 0.05)
        ref_eps, ref_capped, _ = plain_search(m, r, v, delta, 0.05)
        assert found.search_capped == ref_capped
        if found.search_capped:
            assert found.eps_lower == cap
        else:
            assert abs(found.eps_lower - ref_eps) <= BISECTION_WIDTH


def test_trivial_searches_evaluate_at_most_once(recorded):
    assert search_eps_lower(10, 5, 0, 0.1, 0.05).evaluations == 0 and not recorded          # v = 0: no evaluation
    found = search_eps_lower(10, 10, 1, 1e-5, 0.05)                                          # PVAL(0) ≥ p
    assert found.eps_lower == 0.0 and found.evaluations == 1 and p_value(10, 10, 1, 0.0, 1e-5) >= 0.05
