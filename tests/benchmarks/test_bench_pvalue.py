"""Benchmark of the ε search (`search_eps_lower`) beside the plain doubling-and-bisection search, timed in the same
process on the same designs (the one-run workload of the power plans: m canaries, r guesses, v correct, δ of the
claim, p = 0.05). Nothing asserts a time; `benchmark.extra_info` records the PVAL evaluations and the seconds per
search of both, and `ratio_vs_baseline` (library / bisection, best of the rounds). The results are asserted: each
search is within 1e-9 of the bisection's and keeps PVAL(lo) < p ≤ PVAL(lo + 1e-9).
    .venv/bin/python -m pytest tests/benchmarks/test_bench_pvalue.py --benchmark-enable
"""

from __future__ import annotations

from audits.statistics.pvalue import BISECTION_WIDTH, p_value, search_eps_lower
from tests.audits.bisection_reference import plain_search
from tests.benchmarks.baseline import run_with_baseline

P = 0.05
DESIGNS = [(m, r, v, delta) for m, r, v in [(1000, 100, 90), (1000, 328, 249), (1000, 1000, 999), (5000, 462, 462),
                                             (10_000, 2000, 1700), (100_000, 10_000, 9000), (100_000, 10_000, 10_000)]
           for delta in (0.0, 1e-5, 1 / 69880)]


def test_bench_eps_search_vs_bisection(benchmark):
    def target():
        return [search_eps_lower(m, r, v, delta, P) for m, r, v, delta in DESIGNS]

    def baseline():
        return [plain_search(m, r, v, delta, P)[::2] for m, r, v, delta in DESIGNS]   # (ε, evaluations)

    found, plain = run_with_baseline(benchmark, target, baseline)
    plain = plain if plain is not None else baseline()
    n = len(DESIGNS)
    evaluations = sum(f.evaluations for f in found)
    plain_evaluations = sum(calls for _, calls in plain)
    benchmark.extra_info.update(
        baseline="plain doubling + bisection to 1e-9 on the same PVAL", searches=n,
        evaluations_per_search=evaluations / n, baseline_evaluations_per_search=plain_evaluations / n,
        library_s_per_search=benchmark.extra_info["library_s"] / n)
    if "baseline_s" in benchmark.extra_info:
        benchmark.extra_info["baseline_s_per_search"] = benchmark.extra_info["baseline_s"] / n
    for (m, r, v, delta), f, (eps_plain, _) in zip(DESIGNS, found, plain):
        assert not f.search_capped and abs(f.eps_lower - eps_plain) <= BISECTION_WIDTH
        assert p_value(m, r, v, f.eps_lower, delta) < P <= p_value(m, r, v, f.eps_lower + BISECTION_WIDTH, delta)
    assert 2 * evaluations <= plain_evaluations
