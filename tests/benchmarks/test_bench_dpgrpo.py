"""DP-GRPO step-time benchmark: the private gradient phase against a non-private one on the same batch.

Private: the trainer's `noisy_update(items)` (one backward per record, clip each once, sum, Gaussian noise,
divide by the public q·n). Baseline, timed in the same process: `flat_update` — the non-private GRPO step
(one batched backward over the mean of the per-record losses, no clip, no noise, one SGD step) that the
V4 check compares against. The ratio goes to `benchmark.extra_info["ratio_vs_nonprivate"]` (target ≤ 1.15
on GPU; on CPU the per-record loop costs more); nothing is asserted about time.
    .venv/bin/python -m pytest tests/benchmarks/test_bench_dpgrpo.py --benchmark-enable
"""

from __future__ import annotations

import time

import pytest


@pytest.fixture(scope="module")
def setup():
    from mechanisms.dpgrpo.verify import reference_setup
    trainer, bindings = reference_setup(seed=0)
    return trainer, bindings


def test_bench_private_vs_nonprivate_step(benchmark, setup):
    trainer, b = setup
    items = list(b.items)
    consts = dict(sigma=b.sigma, C=b.C, q=b.q, n=b.n)
    rounds = 1 if benchmark.disabled else 7

    def nonprivate():
        return b.flat_update(b.initial_params)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        nonprivate()
        times.append(time.perf_counter() - t0)
    baseline = min(times)
    update = benchmark.pedantic(lambda: b.noisy_update(items, **consts), rounds=rounds, iterations=1)
    assert update.shape == b.initial_params.shape
    benchmark.extra_info.update({"nonprivate_s": baseline, "records": len(items), "G": b.G})
    if benchmark.stats:
        own = benchmark.stats.stats.min
        benchmark.extra_info.update({"ratio_vs_nonprivate": own / baseline,
                                     "per_record_gradient_s": own / len(items)})
