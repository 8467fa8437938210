"""Speed of the certified PLD accountant beside its float peers, timed side by side in one process.

* `certified_epsilon(((q, σ, T),), δ, interval=1e-4)` (and with `interval=None`, the automatic grid) against
  dp-accounting's float PLD at the same value_discretization_interval 1e-4 (pessimistic, connect-the-dots, both
  add/remove directions: its defaults), on the seven Table VI rows and the JAX-Privacy reference
  (docs/accounting.md, "Table VI"). The module function is called directly: no result cache is involved.
* `calibrate_sigma(q, T, δ, target)` (its caches cleared first) against Opacus's
  `get_noise_multiplier(accountant="prv")` (its default ε tolerance 0.01) for three targets of the MATH row.

`make bench` times them (one round each: a call takes seconds, and a row's two calls run back to back); the default
run (`--benchmark-disable`) executes each once. Only the MATH ε = 8 row at 1e-4 is in `make test` (~15 s); the rest
is `slow` (`make test-slow`, and `make bench`, which selects no markers). Nothing asserts a time: the ratio
(privcheck / peer) goes to `benchmark.extra_info['ratio_vs_baseline']`. The results are asserted against the
published Table VI values and the peers. `python -m tests.benchmarks.test_bench_pld_certified` prints the ratios
as a Markdown table.
"""

from __future__ import annotations

import os
import time

import pytest
from dp_accounting.pld import privacy_loss_distribution as dpa_pld

from privcheck.accounting import calibrate_sigma, calibration, dpsgd, pld_certified
from tests.benchmarks.baseline import benchmarking_disabled, run_with_baseline

INTERVAL = 1e-4
ROUNDS = 1

# (label, q = m/n, σ (Table VII), T, δ = 1/(10n), published ε, its rounding); docs/accounting.md "Table VI"
ROWS = (
    ("MATH ε=1", 128 / 6988, 1.0023417361080647, 50, 1 / 69880, 1.000, 5e-4),
    ("MATH ε=4.23", 128 / 6988, 0.612058477104, 50, 1 / 69880, 4.235, 5e-4),
    ("MATH ε=8 reference", 128 / 6988, 0.4842404738068581, 50, 1 / 69880, 8.000, 5e-4),
    ("MATH DP-SFT T=100", 128 / 6988, 0.519267738191411, 100, 1 / 69880, 8.000, 5e-4),
    ("MATH coverage G=2", 512 / 6988, 0.7022244453430175, 50, 1 / 69880, 8.000, 5e-4),
    ("MATH canary rank-4", 128 / 6988, 0.612058477104, 100, 1 / 69880, 5.038, 5e-4),
    ("GSM8K and CSQA", 128 / 6961, 0.5196564674377442, 100, 1 / 69610, 8.000, 5e-4),
    ("JAX-Privacy reference", 0.1, 3.0, 512, 1e-6, 3.77, 5e-3),
)
FAST_ROW = "JAX-Privacy reference"   # the cheapest row in make test; the others run in the slow tier
# Table VI says the certified figure may exceed the float one by at most this much
TABLE_TOLERANCE = 1e-3
# MATH row, calibration targets from Table VI
CAL_Q, CAL_T, CAL_DELTA = 128 / 6988, 50, 1 / 69880
CAL_TARGETS = (1.0, 4.23, 8.0)


def _marked(rows):
    return [pytest.param(*r, id=r[0], marks=() if r[0] == FAST_ROW else pytest.mark.slow) for r in rows]


def certified(q, sigma, T, delta, interval):
    return pld_certified.certified_epsilon(((q, sigma, T),), delta, interval=interval)


def dp_accounting_epsilon(q, sigma, T, delta, interval=INTERVAL):
    """dp-accounting's float PLD, built from scratch (not privcheck's cached one-round PLD)."""
    pld = dpa_pld.from_gaussian_mechanism(standard_deviation=sigma, sensitivity=1.0, sampling_prob=q,
                                          value_discretization_interval=interval)
    return float(pld.self_compose(T).get_epsilon_for_delta(delta))


def opacus_sigma(q, T, delta, target):
    from opacus.accountants.utils import get_noise_multiplier
    return float(get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=T,
                                      accountant="prv"))


def clear_privcheck_caches():
    """Forget every cached result calibration could reuse (a benchmark times the search, not a cache hit)."""
    calibration.clear_cache()
    if hasattr(dpsgd, "clear_caches"):     # also the one-round PLDs and the certified bounds
        dpsgd.clear_caches()
    else:
        dpsgd.pld_epsilon_value.cache_clear()
        dpsgd.pld_history_epsilon_value.cache_clear()


def warm_up():
    """Imports and one-time tables (FFT twiddles are cached by length) outside the timings, on a coarse grid;
    Opacus's first call (its imports) too."""
    certified(0.1, 1.0, 4, 1e-5, 1e-2)
    dp_accounting_epsilon(0.1, 1.0, 4, 1e-5, 1e-2)
    opacus_sigma(0.1, 4, 1e-5, 4.0)


@pytest.fixture(scope="module", autouse=True)
def _warm(request):
    if not benchmarking_disabled(request.config):    # only timings need it (Opacus's import is ~2 s)
        warm_up()


def _check_enclosure(bounds, ref, published, rounding):
    assert bounds.lower <= bounds.upper
    # dp-accounting's pessimistic PLD estimates an upper bound of the exact ε, which is ≥ the certified lower end
    assert bounds.lower <= ref + 1e-9
    assert bounds.upper - ref <= TABLE_TOLERANCE
    assert abs(bounds.upper - published) <= rounding + TABLE_TOLERANCE


@pytest.mark.parametrize(("label", "q", "sigma", "T", "delta", "published", "rounding"), _marked(ROWS))
def test_bench_certified_fixed_interval(benchmark, label, q, sigma, T, delta, published, rounding):
    bounds, ref = run_with_baseline(benchmark, lambda: certified(q, sigma, T, delta, INTERVAL),
                                    lambda: dp_accounting_epsilon(q, sigma, T, delta), rounds=ROUNDS)
    benchmark.extra_info.update(baseline="dp-accounting float PLD, interval 1e-4", lower=bounds.lower,
                                upper=bounds.upper, dp_accounting=ref)
    assert bounds.interval == INTERVAL
    _check_enclosure(bounds, ref, published, rounding)


@pytest.mark.slow
@pytest.mark.parametrize(("label", "q", "sigma", "T", "delta", "published", "rounding"), ROWS, ids=[r[0] for r in ROWS])
def test_bench_certified_auto_interval(benchmark, label, q, sigma, T, delta, published, rounding):
    bounds, ref = run_with_baseline(benchmark, lambda: certified(q, sigma, T, delta, None),
                                    lambda: dp_accounting_epsilon(q, sigma, T, delta), rounds=ROUNDS)
    benchmark.extra_info.update(baseline="dp-accounting float PLD, interval 1e-4", lower=bounds.lower,
                                upper=bounds.upper, interval=bounds.interval, dp_accounting=ref)
    assert bounds.gap <= pld_certified.DEFAULT_TOLERANCE
    _check_enclosure(bounds, ref, published, rounding)


@pytest.mark.slow
@pytest.mark.parametrize("target", CAL_TARGETS)
def test_bench_calibrate_sigma_vs_opacus_prv(benchmark, target):
    def own():
        clear_privcheck_caches()
        return calibrate_sigma(CAL_Q, CAL_T, CAL_DELTA, target)

    cal, sigma_prv = run_with_baseline(benchmark, own, lambda: opacus_sigma(CAL_Q, CAL_T, CAL_DELTA, target),
                                       rounds=ROUNDS)
    benchmark.extra_info.update(baseline="opacus get_noise_multiplier(accountant='prv'), same target",
                                sigma=cal.value, sigma_opacus_prv=sigma_prv, evaluations=cal.evaluations)
    assert cal.achieved.value <= target
    assert cal.achieved.certified is not None and cal.achieved.certified.upper <= target
    # Opacus stops once its ε is within 0.01 below the target: σ differs by well under 2% on this row
    assert abs(cal.value / sigma_prv - 1) <= 0.02
    # the certified σ cannot be far below the float-PLD crossing (σ 1e-3 lower already exceeds the target there)
    assert dp_accounting_epsilon(CAL_Q, cal.value - 1e-3, CAL_T, CAL_DELTA) > target


# --- `python -m tests.benchmarks.test_bench_pld_certified`: the ratios as a Markdown table ----------------------

def _timed(fn):
    """(result or the exception, wall s, process CPU s); CPU time is less sensitive to other processes' load."""
    start, cpu = time.perf_counter(), time.process_time()
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - a row that fails is reported in the table, not hidden
        out = exc
    return out, time.perf_counter() - start, time.process_time() - cpu


def _fmt_bounds(b):
    return f"failed: {type(b).__name__}: {b}" if isinstance(b, Exception) else f"[{b.lower:.6f}, {b.upper:.6f}]"


def main() -> None:
    load = os.getloadavg()
    warm_up()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)\n")
    print("Wall seconds; the ratio is certified / dp-accounting, with the ratio of process CPU seconds in "
          "parentheses.\n")
    print("| row | dp-accounting s | certified s (1e-4) | ratio | certified s (auto) | ratio | auto interval "
          "| certified [lower, upper] (1e-4) | certified [lower, upper] (auto) | dp-accounting ε |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, q, sigma, T, delta, _, _ in ROWS:
        ref, t_ref, c_ref = _timed(lambda: dp_accounting_epsilon(q, sigma, T, delta))
        fixed, t_fixed, c_fixed = _timed(lambda: certified(q, sigma, T, delta, INTERVAL))
        auto, t_auto, c_auto = _timed(lambda: certified(q, sigma, T, delta, None))
        interval = "-" if isinstance(auto, Exception) else f"{auto.interval:g}"
        print(f"| {label} | {t_ref:.2f} | {t_fixed:.2f} | {t_fixed / t_ref:.2f} ({c_fixed / c_ref:.2f}) | "
              f"{t_auto:.2f} | {t_auto / t_ref:.2f} ({c_auto / c_ref:.2f}) | {interval} | {_fmt_bounds(fixed)} | "
              f"{_fmt_bounds(auto)} | {ref:.6f} |", flush=True)
    print(f"\nσ calibration, MATH row (q = 128/6988, T = {CAL_T}, δ = 1/69880); Opacus PRV at its default ε "
          "tolerance 0.01, privcheck at σ tolerance 1e-6 with the certified check\n")
    print("| target ε | Opacus PRV s | privcheck s | ratio | σ Opacus PRV | σ privcheck | privcheck evaluations "
          "| certified ε at σ |")
    print("|---|---|---|---|---|---|---|---|")
    for target in CAL_TARGETS:
        s_prv, t_prv, c_prv = _timed(lambda: opacus_sigma(CAL_Q, CAL_T, CAL_DELTA, target))
        clear_privcheck_caches()
        cal, t_own, c_own = _timed(lambda: calibrate_sigma(CAL_Q, CAL_T, CAL_DELTA, target))
        own = (f"{cal.value:.7f} | {cal.evaluations} | {cal.achieved.value:.6f}" if not isinstance(cal, Exception)
               else f"failed: {cal} | - | -")
        sig = f"{s_prv:.7f}" if not isinstance(s_prv, Exception) else f"failed: {s_prv}"
        print(f"| {target:g} | {t_prv:.2f} | {t_own:.2f} | {t_own / t_prv:.2f} ({c_own / c_prv:.2f}) | {sig} | {own} |",
              flush=True)
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
