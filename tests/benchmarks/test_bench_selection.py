"""Selection benchmarks (pytest-benchmark), each beside a baseline timed in the same process.

`make bench` runs them with timing (rounds below); the default test run executes each body once as a
smoke test (on 100 prompts instead of 1,000). Nothing here asserts a time: ratios and rates go to
`benchmark.extra_info`, e.g.
    .venv/bin/python -m pytest tests/benchmarks/test_bench_selection.py --benchmark-enable \
        --benchmark-json=bench.json
Performance targets (measured, not asserted): PrivBoN within 1.5× of a bare numpy
argmax(scores + gumbel); PrivITP ≥ 2×10⁷ candidates/s; a certified κ/κ_acc no slower than a 512-point
float midpoint rule; 10⁴ values of λ̃ certified by the batch API in < 50 ms.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np
import pytest

from mechanisms.selection import ITP, PrivBoN, PrivITP, best_of_n
from privcheck.accounting import PrivITPParams, privitp_kappa, privitp_kappa_batch
from privcheck.accounting.selection import kappa_midpoint_float
from tests.benchmarks.baseline import benchmarking_disabled

PROMPTS, N = 1000, 4096
SMOKE_PROMPTS = 100          # without --benchmark-enable (the bodies run once, as smoke tests)
ROUNDS = 5


@pytest.fixture(scope="module")
def arrays(request):
    gen = np.random.default_rng(0)
    prompts = SMOKE_PROMPTS if benchmarking_disabled(request.config) else PROMPTS
    return gen.random((prompts, N)), gen.random((prompts, N))


def _best_of(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _bench(benchmark, fn):
    rounds = 1 if benchmark.disabled else ROUNDS
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=0 if benchmark.disabled else 1)


def _record(benchmark, label, baseline_s, candidates):
    stats = benchmark.stats.stats if benchmark.stats else None
    own = stats.min if stats else None
    if own:
        benchmark.extra_info.update({"candidates_per_s": candidates / own, f"ratio_vs_{label}": own / baseline_s,
                                     f"{label}_s": baseline_s})


@pytest.mark.parametrize("selector", ["bon", "privbon_gumbel", "privbon_softmax", "itp", "privitp"])
def test_bench_selector_throughput(benchmark, arrays, selector):
    scores, phase2 = arrays
    gen = np.random.default_rng(1)
    sigma = 0.2
    bare = lambda: np.argmax(scores + gen.gumbel(scale=sigma, size=scores.shape), axis=1)  # noqa: E731
    params = PrivITPParams(candidates=N, beta=0.05, sigma_x=sigma / 2, sigma_z=sigma / 2, headroom=0.5,
                           sensitivity=0.01, delta=1e-5)
    run = {
        "bon": lambda: best_of_n(scores),
        "privbon_gumbel": lambda: PrivBoN(0.01, sigma, r_max=1.0).select(scores, gen),
        "privbon_softmax": lambda: PrivBoN(0.01, sigma, r_max=1.0, sampler="softmax").select(scores, gen),
        "itp": lambda: ITP(0.05, r_max=1.0).select(scores, gen),
        "privitp": lambda: PrivITP(params).select(scores, phase2, gen, account=False),
    }[selector]
    baseline = _best_of(bare, 1 if benchmark.disabled else ROUNDS)
    out = _bench(benchmark, run)
    assert len(out.indices) == scores.shape[0]
    _record(benchmark, "bare_numpy_gumbel_argmax", baseline, scores.size)


def test_bench_certified_kappa_vs_midpoint(benchmark):
    params = PrivITPParams(candidates=16, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5,
                           sensitivity=0.01, delta=1e-5)
    lts = iter(np.linspace(0.3, 0.7, 100_000))

    def certified():  # a fresh λ̃ each call, so the cache never answers
        return privitp_kappa(params, float(next(lts)))
    midpoint_s = _best_of(lambda: kappa_midpoint_float(params, 0.5), 1 if benchmark.disabled else 50)
    pair = _bench(benchmark, certified)
    k_mid, ka_mid = kappa_midpoint_float(params, pair.lambda_tilde)
    benchmark.extra_info.update({"midpoint_512_s": midpoint_s, "kappa_certified": pair.kappa.value,
                                 "kappa_midpoint": k_mid, "kappa_difference": k_mid - pair.kappa.value,
                                 "kappa_acc_certified": pair.kappa_acc.value, "kappa_acc_midpoint": ka_mid,
                                 "kappa_acc_difference": ka_mid - pair.kappa_acc.value})
    if benchmark.stats:
        benchmark.extra_info["ratio_vs_midpoint"] = benchmark.stats.stats.min / midpoint_s
    assert pair.kappa.lower <= pair.kappa.upper


def test_bench_batch_certification_1e4(benchmark):
    params = PrivITPParams(candidates=16, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5,
                           sensitivity=0.01, delta=1e-5)
    lts = 0.5 + 0.05 * np.random.default_rng(2).standard_normal(10_000)

    deltas = (1e-5 * (1 + 1e-6 * k) for k in itertools.count())

    def cold():  # fresh parameters each call (δ does not enter κ), so no cached cell answers
        return privitp_kappa_batch(dataclasses.replace(params, delta=next(deltas)), lts, log2_step=-10)
    per_value_s = _best_of(lambda: [privitp_kappa(params, float(x)) for x in lts[:200]], 1) / 200
    k, ka = _bench(benchmark, cold)
    benchmark.extra_info.update({"per_value_certified_s": per_value_s, "values": lts.size, "log2_step": -10})
    assert k.shape == ka.shape == lts.shape
