"""One-run audit benchmarks (pytest-benchmark), each beside a baseline timed in the same process.

`make bench` runs them with timing (3 rounds); the default run (`--benchmark-disable`) executes each body once
as a smoke test. Nothing here asserts a time: the ratio (library / baseline, best of the rounds) goes to
`benchmark.extra_info['ratio_vs_baseline']`. Target (measured, not asserted): ε_lower for
m = 10⁵, r = 10⁴ in < 50 ms. The results are asserted against independent references.
    .venv/bin/python -m pytest tests/benchmarks/test_bench_audits_onerun.py --benchmark-enable
"""

from __future__ import annotations

import math

from scipy.special import betaincinv, logit
from scipy.stats import binom

from audits.statistics.one_run import eps_lower, p_value, search_eps_lower
from tests.benchmarks.baseline import run_with_baseline

M, R = 100_000, 10_000


def test_bench_eps_lower_m1e5_r1e4(benchmark):
    """δ = 1e-5 (the window term is live) against the δ = 0 closed form on the same counts."""
    v = 9_000

    def target():
        return search_eps_lower(M, R, v, 1e-5, 0.05)

    def baseline():                       # closed form: logit of the Clopper–Pearson lower bound (δ = 0 closed form)
        return max(0.0, float(logit(betaincinv(v, R - v + 1, 0.05))))

    found, closed = run_with_baseline(benchmark, target, baseline)
    benchmark.extra_info.update(baseline="δ = 0 closed form logit(Beta⁻¹(p; v, r−v+1))",
                                pval_evaluations=found.evaluations)
    assert not found.search_capped
    assert 0 < found.eps_lower <= closed                       # δ > 0 can only lower the bound
    assert p_value(M, R, v, found.eps_lower, 1e-5) < 0.05 <= p_value(M, R, v, found.eps_lower + 1e-9, 1e-5)


def test_bench_eps_lower_perfect_guessing(benchmark):
    """Perfect guessing, against one scipy binomial tail call."""
    def target():
        return eps_lower(M, R, R, 1e-5, 0.05)

    def baseline():
        return float(binom.sf(R - 1, R, 0.99))

    eps, _ = run_with_baseline(benchmark, target, baseline)
    benchmark.extra_info["baseline"] = "one scipy.stats.binom.sf call"
    assert eps <= -math.log(0.05 ** (-1 / R) - 1)              # the δ = 0 value bounds it from above
    assert p_value(M, R, R, eps, 1e-5) < 0.05 <= p_value(M, R, R, eps + 1e-9, 1e-5)
