"""Benchmark a library call beside a baseline timed in the same process (these machines are noisy, so only
the ratio means anything). `run_with_baseline` records `library_s`, `baseline_s` and `ratio_vs_baseline`
(best of the rounds) in `benchmark.extra_info`; with `--benchmark-disable` each function runs once."""

from __future__ import annotations

import time

ROUNDS = 3


def run_with_baseline(benchmark, target, baseline, rounds=ROUNDS):
    """Benchmark `target` and time `baseline` (None: no baseline) for the same number of rounds.
    Returns (target's result, baseline's result or None)."""
    rounds = 1 if benchmark.disabled else rounds
    own: list[float] = []

    def timed_target():
        start = time.perf_counter()
        out = target()
        own.append(time.perf_counter() - start)
        return out

    result = benchmark.pedantic(timed_target, rounds=rounds, iterations=1)
    benchmark.extra_info["library_s"] = min(own)
    if baseline is None:
        return result, None
    base_times, base_result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        base_result = baseline()
        base_times.append(time.perf_counter() - start)
    benchmark.extra_info["baseline_s"] = min(base_times)
    benchmark.extra_info["ratio_vs_baseline"] = min(own) / min(base_times)
    return result, base_result


def benchmarking_disabled(config) -> bool:
    """pytest-benchmark's own rule (its session's `disabled`) for fixtures that cannot take `benchmark`:
    `--benchmark-disable` (in addopts) unless `--benchmark-enable` is also given."""
    return bool(config.getoption("benchmark_disable") and not config.getoption("benchmark_enable"))
