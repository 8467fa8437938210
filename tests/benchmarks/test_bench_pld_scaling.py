"""Speed of the certified PLD as T grows, beside dp-accounting's float PLD at the same lattice, in one process.

* T = 10², 10³, 10⁴, 10⁵, 10⁶ rounds at q = 0.01, σ = 1, δ = 1e-5:
  `certified_epsilon(((q, σ, T),), δ, interval=1e-4)` against dp-accounting's
  `from_gaussian_mechanism(σ, sampling_prob=q, value_discretization_interval=1e-4)` (pessimistic,
  connect-the-dots: its defaults) `.self_compose(T).get_epsilon_for_delta(δ)`.
* A 100-phase history (σ from 0.8 to 1.3, q = 0.01, 10³ rounds each, 10⁵ in all) against dp-accounting's phases
  self-composed and composed in order (`privcheck.accounting.dpsgd.float_pld_history`'s recipe, built from scratch).

Only Poisson sampling exists in the certified PLD so far, so there is one sampling scheme to report.
Nothing asserts a time: the ratio (privcheck / dp-accounting) goes to `benchmark.extra_info['ratio_vs_baseline']`.
The results are asserted against dp-accounting (our lower end ≤ its pessimistic figure ≤ our upper end + 1e-2).
T = 10² is in `make test`; the rest is `slow` (`make test-slow`, `make bench`).
`python -m tests.benchmarks.test_bench_pld_scaling` prints the table of docs/accounting.md ("Speed at scale"):
CPU seconds, interleaved, best of three (one run for the history).
"""

from __future__ import annotations

import os
import time

import pytest
from dp_accounting.pld import privacy_loss_distribution as dpa_pld

from privcheck.accounting import pld_certified
from tests.benchmarks.baseline import benchmarking_disabled, run_with_baseline

INTERVAL = 1e-4
Q, SIGMA, DELTA = 0.01, 1.0, 1e-5
STEPS = (10 ** 2, 10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6)
FAST_STEPS = 10 ** 2
HISTORY = tuple((Q, 0.8 + 0.005 * i, 10 ** 3) for i in range(100))
# how far our upper end may lie above dp-accounting's pessimistic figure at this lattice (1.7e-3 at T = 10⁶)
ABOVE_PEER = 1e-2
ROUNDS = 1
REPEATS = 3


def certified(phases):
    return pld_certified.certified_epsilon(phases, DELTA, interval=INTERVAL)


def dp_accounting_epsilon(phases):
    """dp-accounting's float PLD of the phases, built from scratch (no cache)."""
    total = None
    for q, sigma, steps in phases:
        one = dpa_pld.from_gaussian_mechanism(standard_deviation=sigma, sensitivity=1.0, sampling_prob=q,
                                              value_discretization_interval=INTERVAL)
        pld = one.self_compose(steps) if steps > 1 else one
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(DELTA))


def warm_up():
    """Imports and the FFT twiddle tables outside the timings."""
    certified(((0.1, 1.0, 4),))
    dp_accounting_epsilon(((0.1, 1.0, 4),))


@pytest.fixture(scope="module", autouse=True)
def _warm(request):
    if not benchmarking_disabled(request.config):
        warm_up()


def _check(bounds, ref):
    assert bounds.interval == INTERVAL
    assert bounds.lower <= ref <= bounds.upper + ABOVE_PEER


@pytest.mark.parametrize("steps", [pytest.param(t, id=f"T={t}", marks=() if t == FAST_STEPS else pytest.mark.slow)
                                   for t in STEPS])
def test_bench_certified_t_scaling(benchmark, steps):
    phases = ((Q, SIGMA, steps),)
    bounds, ref = run_with_baseline(benchmark, lambda: certified(phases), lambda: dp_accounting_epsilon(phases),
                                    rounds=ROUNDS)
    benchmark.extra_info.update(baseline="dp-accounting float PLD, interval 1e-4", steps=steps,
                                lower=bounds.lower, upper=bounds.upper, dp_accounting=ref)
    _check(bounds, ref)


@pytest.mark.slow
def test_bench_certified_hundred_phases(benchmark):
    bounds, ref = run_with_baseline(benchmark, lambda: certified(HISTORY), lambda: dp_accounting_epsilon(HISTORY),
                                    rounds=ROUNDS)
    benchmark.extra_info.update(baseline="dp-accounting float PLD, interval 1e-4, phases composed in order",
                                phases=len(HISTORY), lower=bounds.lower, upper=bounds.upper, dp_accounting=ref)
    _check(bounds, ref)


# --- `python -m tests.benchmarks.test_bench_pld_scaling`: the ratios as a Markdown table --------------------------

def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def _row(label, phases, repeats=REPEATS):
    """Interleaved: dp-accounting, then privcheck, `repeats` times; the best CPU time of each."""
    own, peer = [], []
    for _ in range(repeats):
        ref, t_ref = _cpu(lambda: dp_accounting_epsilon(phases))
        bounds, t_own = _cpu(lambda: certified(phases))
        own.append(t_own)
        peer.append(t_ref)
    fft = max(d["fft_length"] for d in bounds.details["directions"])
    print(f"| {label} | {min(peer):.2f} | {min(own):.2f} | {min(own) / min(peer):.2f} | 2^{fft.bit_length() - 1} "
          f"| [{bounds.lower:.6f}, {bounds.upper:.6f}] | {ref:.6f} |", flush=True)


def main() -> None:
    load = os.getloadavg()
    warm_up()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)\n")
    print(f"q = {Q}, σ = {SIGMA}, δ = {DELTA:g}, lattice {INTERVAL:g}; process CPU seconds, best of {REPEATS}, "
          "interleaved\n")
    print("| rounds | dp-accounting s | certified s | ratio | FFT length | certified [lower, upper] "
          "| dp-accounting ε |")
    print("|---|---|---|---|---|---|---|")
    for steps in STEPS:
        _row(f"T = 10^{len(str(steps)) - 1}", ((Q, SIGMA, steps),))
    _row("100 phases × 10^3", HISTORY, repeats=1)     # about a minute per call on each side
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
