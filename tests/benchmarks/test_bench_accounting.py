"""Benchmarks of the accounting hot paths, each beside a baseline timed in the same process.

`make bench` runs them with `--benchmark-enable` (3 rounds each); in the default run (`--benchmark-disable`
in pyproject) the benchmarked function runs once, so they double as smoke tests. The ratio (library /
baseline, best of the rounds) is stored in `benchmark.extra_info['ratio_vs_baseline']`. No timing is
asserted; the results are (the library must agree with dp-accounting).

The calibration baseline (`dp_accounting.calibrate_dp_mechanism`, ~21 PLD evaluations, ~8 s on 2 cores)
runs only when benchmarking is enabled; in the disabled (smoke) run the calibrated σ is instead checked
with two direct dp-accounting evaluations (ε(σ) ≤ target < ε(σ − 1e-5)).
"""

from __future__ import annotations

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant

from privcheck.accounting import calibrate_sigma, calibration, dpsgd, epsilon_pld
from tests.benchmarks.baseline import run_with_baseline

# Table VI, MATH ε = 8 reference row
MATH_Q, MATH_SIGMA, MATH_T, MATH_DELTA = 128 / 6988, 0.4842404738068581, 50, 1 / 69880
# a cheaper calibration (CPU preset-like)
CAL_Q, CAL_T, CAL_DELTA, CAL_EPS = 0.25, 20, 1e-3, 4.0


def _accountant():
    return pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                value_discretization_interval=1e-4)


def _event(q, sigma, T):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)


def _dpa_epsilon(q, sigma, T, delta):
    acc = _accountant()
    acc.compose(_event(q, sigma, T))
    return float(acc.get_epsilon(delta))


def test_bench_pld_math_eps8_row(benchmark):
    def target():
        if not benchmark.disabled:                  # otherwise every round after the first is a cache hit
            dpsgd.pld_epsilon_value.cache_clear()   # (in `make test` the caches stay: later tests reuse them)
        return epsilon_pld(MATH_Q, MATH_SIGMA, MATH_T, MATH_DELTA).value

    def baseline():
        return _dpa_epsilon(MATH_Q, MATH_SIGMA, MATH_T, MATH_DELTA)

    eps, ref = run_with_baseline(benchmark, target, baseline)
    benchmark.extra_info["baseline"] = "dp-accounting PLDAccountant, same row"
    assert abs(eps - ref) <= 1e-8
    assert abs(eps - 8.0) <= 1e-4                # Table VI "PLD repro"


def test_bench_calibrate_sigma(benchmark):
    def target():
        if not benchmark.disabled:
            calibration.clear_cache()
            dpsgd.pld_epsilon_value.cache_clear()
        return calibrate_sigma(CAL_Q, CAL_T, CAL_DELTA, CAL_EPS)

    def baseline():
        return dp_accounting.calibrate_dp_mechanism(
            _accountant, lambda s: _event(CAL_Q, s, CAL_T), CAL_EPS, CAL_DELTA,
            bracket_interval=dp_accounting.LowerEndpointAndGuess(0.3, 1.0), tol=1e-6)

    cal, ref_sigma = run_with_baseline(benchmark, target, None if benchmark.disabled else baseline)
    benchmark.extra_info["baseline"] = "dp_accounting.calibrate_dp_mechanism(tol=1e-6), same target"
    benchmark.extra_info["evaluations"] = cal.evaluations
    assert cal.achieved.value <= CAL_EPS
    if ref_sigma is not None:
        # both are the smallest σ meeting the target to ~1e-6 (dp-accounting's bracket tolerance)
        assert abs(cal.value - ref_sigma) <= 1e-5
    assert _dpa_epsilon(CAL_Q, cal.value, CAL_T, CAL_DELTA) <= CAL_EPS
    assert _dpa_epsilon(CAL_Q, cal.value - 1e-5, CAL_T, CAL_DELTA) > CAL_EPS
