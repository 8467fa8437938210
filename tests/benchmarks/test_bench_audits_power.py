"""Benchmarks of the audit power analysis (audits/statistics/power.py): 200 simulated audits with m = 10,000 canaries.

`make bench` runs them with timing (3 rounds each); the default run (`--benchmark-disable`) executes each plan once as
a smoke test at m = 1,000 with 20 simulated audits and skips the baselines (the m = 10,000 DP-GRPO planning figure is
asserted in `make test` by tests/audits/test_power.py). Nothing asserts a time: the ratio (plan / baseline, best of the
rounds) goes to `benchmark.extra_info['ratio_vs_baseline']`. The results are asserted.

Baselines, timed in the same process:
* `dpsgd_dirac(llr)`: drawing only the float32 standard normals the plan needs ((reference + sims·m)·T of them), the
  floor of any simulation of T noisy steps per canary;
* `perfect`: the naive Monte Carlo loop (per audit: full sort of m scores, then one EPS_LB call), which the plan
  replaces by a vectorised partial sort and one EPS_LB call per distinct correct count.
"""

from __future__ import annotations

import numpy as np

from audits.statistics import power
from audits.statistics.one_run import eps_lower
from audits.statistics.score_models import DPSGDDirac, Perfect
from tests.benchmarks.baseline import run_with_baseline

M, SIMS = 10_000, 200
SMOKE_M, SMOKE_SIMS = 1_000, 20                                   # without --benchmark-enable
GRPO = dict(q=128 / 6988, sigma=0.612058477104, steps=100)       # DP-GRPO paper configuration
DELTA_GRPO, EPS_NOMINAL_GRPO = 1 / 69880, 5.03849813457551       # nominal: PLD ε of that configuration


def _size(benchmark) -> tuple[int, int]:
    return (SMOKE_M, SMOKE_SIMS) if benchmark.disabled else (M, SIMS)


def test_bench_plan_dpsgd_dirac_llr(benchmark):
    model = DPSGDDirac(GRPO["q"], GRPO["sigma"], GRPO["steps"], "llr")
    m, sims = _size(benchmark)

    def target():
        return power.plan(m, delta=DELTA_GRPO, confidence=0.95, eps_nominal=EPS_NOMINAL_GRPO, score_model=model,
                          sims=sims, seed=0)

    def baseline():
        rng = np.random.default_rng(0)
        total = (power.REFERENCE_MIN_SCORES + sims * m) * GRPO["steps"]
        block = 2_000_000
        for start in range(0, total, block):
            rng.standard_normal(min(block, total - start), dtype=np.float32)

    report, _ = run_with_baseline(benchmark, target, None if benchmark.disabled else baseline)
    benchmark.extra_info["baseline"] = "float32 standard normals of the same simulation"
    benchmark.extra_info["planned_eps_lower"] = report.planned_eps_lower
    if m == M:
        assert report.planned_eps_lower >= 1.5                     # the DP-GRPO planning figure (docs/audits.md)
    assert report.planned_eps_lower > 0
    assert 0 < report.mc_p10 <= report.mc_median <= report.mc_p90 < EPS_NOMINAL_GRPO


def test_bench_plan_perfect(benchmark):
    m, sims = _size(benchmark)

    def target():
        return power.plan(m, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=Perfect(), sims=sims, seed=0)

    def baseline():
        rng = np.random.default_rng(0)
        for _ in range(sims):
            included = rng.random(m) < 0.5
            order = np.argsort(-Perfect().draw(included, rng))
            v = included[order[:m // 2]].sum() + (~included[order[m // 2:]]).sum()
            eps_lower(m, m, int(v), 1e-5, 0.05)

    report, _ = run_with_baseline(benchmark, target, None if benchmark.disabled else baseline)
    benchmark.extra_info["baseline"] = "naive loop: per audit a full sort and one EPS_LB call"
    assert report.planned_eps_lower == eps_lower(m, m, m, 1e-5, 1 - 0.95)   # perfect plan = ceiling, at r = m
    assert report.mc_median < report.planned_eps_lower                 # realised imbalance costs guesses
