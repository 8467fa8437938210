"""Every selection entry point rejects bad input with `InvalidParameter` naming the parameter and its allowed range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.selection import (
    ITP,
    PrivBoN,
    PrivITP,
    best_of_n,
    itp_law,
    lambda_hat,
    make_rng,
    prepare_scores,
    privbon_law,
    privbon_policy_finite_n,
    privitp_law,
)
from mechanisms.selection.filtered import BasicCompositionPrivITP
from mechanisms.selection.simulate.config import DataConfig, SimulationConfig
from privcheck.accounting.selection import PrivITPParams
from privcheck.errors import InvalidParameter

NAN, INF = math.nan, math.inf


def raises(name, fn, *args, **kw):
    with pytest.raises(InvalidParameter) as err:
        fn(*args, **kw)
    assert err.value.name == name, f"expected {name!r}, got {err.value.name!r}: {err.value}"
    assert isinstance(err.value, ValueError)
    return err.value


@pytest.mark.parametrize("bad", [[0.1, NAN], [INF, 0.2], [[0.1, -INF]], [[NAN]]])
def test_non_finite_scores(bad):
    raises("scores", prepare_scores, bad, 0.0, 1.0)
    raises("scores", PrivBoN(0.1, 1.0, r_max=1.0).select, bad, make_rng(0))
    raises("scores", best_of_n, bad)
    raises("scores", lambda_hat, bad, 0.1)
    raises("scores", ITP(0.1, r_max=1.0).select, bad, make_rng(0))


@pytest.mark.parametrize("bad", [[], [[]], np.zeros((0, 3)), np.zeros((2, 0)), np.zeros((2, 2, 2)), 0.5,
                                 ["a", "b"], None])
def test_empty_or_malformed_scores(bad):
    raises("scores", prepare_scores, bad, 0.0, 1.0)
    raises("scores", PrivBoN(0.1, 1.0, r_max=1.0).select, bad, make_rng(0))


def test_out_of_range_without_clipping_names_the_range():
    err = raises("scores", prepare_scores, [0.2, 1.3], 0.0, 1.0, clip=False)
    assert "[0.0, 1.0]" in str(err)
    raises("scores", prepare_scores, [[-0.01, 0.5]], 0.0, 1.0, clip=False)
    raises("scores", PrivBoN(0.1, 1.0, r_max=1.0, clip=False).select, [0.2, 1.3], make_rng(0))
    raises("scores", ITP(0.1, r_max=1.0, clip=False).select, [0.2, 1.3], make_rng(0))
    # clipping on: the same input is accepted, clipped, and the caller's array is untouched
    x = np.array([[0.2, 1.3, -4.0]])
    out = prepare_scores(x, 0.0, 1.0)
    assert out.tolist() == [[0.2, 1.0, 0.0]] and x.tolist() == [[0.2, 1.3, -4.0]]
    assert not out.flags.writeable


@pytest.mark.parametrize("sigma", [0, 0.0, -1.0, NAN, INF, "1", None, True])
def test_privbon_sigma(sigma):
    raises("sigma", PrivBoN, 0.1, sigma, 1.0)
    if sigma is not None:
        raises("sigma", privbon_law, [0.1, 0.2], sigma)


@pytest.mark.parametrize("delta", [0, 0.0, -0.1, 1.0000001, 2.0, NAN, INF])
def test_privbon_sensitivity(delta):
    raises("sensitivity", PrivBoN, delta, 1.0, 1.0)


def test_privbon_other_parameters():
    raises("sensitivity", PrivBoN, 0.6, 1.0, 1.0, r_lo=0.5)       # Δ > r_max − r_lo
    raises("r_max", PrivBoN, 0.1, 1.0, 0.0)                          # r_max ≤ r_lo
    raises("r_max", PrivBoN, 0.1, 1.0, INF)
    raises("r_lo", PrivBoN, 0.1, 1.0, 1.0, r_lo=NAN)
    raises("mode", PrivBoN, 0.1, 1.0, 1.0, mode="loose")
    raises("sampler", PrivBoN, 0.1, 1.0, 1.0, sampler="gibbs")
    raises("epsilon", PrivBoN.from_epsilon, 0.1, 0.0, 1.0)
    raises("rng", PrivBoN(0.1, 1.0, 1.0).select, [0.1, 0.2], "seed")
    raises("seed", make_rng, -1)
    raises("seed", make_rng, 1.5)


@pytest.mark.parametrize("beta", [0, -0.1, NAN, INF])
def test_beta(beta):
    raises("beta", lambda_hat, [0.1, 0.2], beta)
    raises("beta", ITP, beta, 1.0)
    raises("beta", itp_law, [0.1, 0.2], beta, 0.0, 1.0)
    raises("beta", PrivITPParams, candidates=4, beta=beta, sigma_x=0.1, sigma_z=0.1, headroom=0.5,
           sensitivity=0.01, delta=1e-5)


def test_itp_options():
    raises("M", ITP, 0.1, 1.0, M="huge")
    raises("fallback", ITP, 0.1, 1.0, fallback="none")
    raises("M", itp_law, [0.1, 0.2], 0.1, 0.0, 0.0)
    raises("lambda_hat", itp_law, [0.1, 0.2], 0.1, NAN, 1.0)


GOOD = dict(candidates=4, beta=0.1, sigma_x=0.1, sigma_z=0.1, headroom=0.5, sensitivity=0.01, delta=1e-5)


@pytest.mark.parametrize("name,bad", [
    ("sigma_x", 0.0), ("sigma_x", -1.0), ("sigma_z", 0.0), ("sigma_z", NAN), ("headroom", -0.1),
    ("headroom", -1e-300), ("sensitivity", 0.0), ("sensitivity", -0.01), ("sensitivity", 1.5),
    ("candidates", 0), ("candidates", 2.5), ("delta", 0.0), ("delta", 1.0)])
def test_privitp_public_constants(name, bad):
    raises(name, PrivITPParams, **{**GOOD, name: bad})


def test_privitp_options_and_inputs():
    p = PrivITPParams(**GOOD)
    raises("params", PrivITP, dict(GOOD))
    raises("fallback", PrivITP, p, fallback="best")
    raises("phase1_scores", PrivITP(p).select, [[0.1, NAN, 0.2, 0.3]], [[0.1, 0.2, 0.3, 0.4]], make_rng(0))
    raises("phase2_scores", PrivITP(p).select, [[0.1, 0.2, 0.2, 0.3]], [[0.1, 0.2, INF, 0.4]], make_rng(0))
    raises("nodes", privitp_law, [0.1, 0.2, 0.3, 0.4], 0.5, p, nodes=1)
    raises("method", privitp_law, [0.1, 0.2, 0.3, 0.4], 0.5, p, method="simpson")


def test_policy_inputs():
    raises("pi0_probs", privbon_policy_finite_n, [0.5, 0.6], [0.0, 1.0], 2, 1.0)
    raises("values", privbon_policy_finite_n, [0.5, 0.5], [0.0, NAN], 2, 1.0)
    raises("n", privbon_policy_finite_n, [0.5, 0.5], [0.0, 1.0], 0, 1.0)
    raises("sigma", privbon_policy_finite_n, [0.5, 0.5], [0.0, 1.0], 2, 0.0)


# Arrays of non-real dtypes: numpy's float64 conversion would keep the real part of a complex score, parse "0.5",
# read a mask's True as 1.0, use the entries under a mask, or fail on a ragged list with its own ValueError.
NON_REAL = [np.array([0.1, 0.5 + 1j, 0.3, 0.2]), np.array([True, False, True, True]), np.array(["0.1", "0.2", "0.3",
            "0.4"]), np.array([0.1, 0.2, 0.3, 0.4], dtype=object), [0.1, [0.2], 0.3, 0.4], [[0.1, 0.2], [0.3]],
            np.ma.masked_array([0.1, 0.2, 0.3, 0.4], mask=[0, 1, 0, 0])]


@pytest.mark.parametrize("bad", NON_REAL, ids=["complex", "bool", "str", "object", "nested", "ragged", "masked"])
def test_non_real_score_arrays_are_refused_naming_scores(bad):
    p = PrivITPParams(**GOOD)
    ok = np.array([0.1, 0.2, 0.3, 0.4])
    raises("scores", prepare_scores, bad, 0.0, 1.0)
    raises("scores", PrivBoN(0.1, 1.0, r_max=1.0).select, bad, make_rng(0))
    raises("scores", best_of_n, bad)
    raises("scores", lambda_hat, bad, 0.1)
    raises("scores", privbon_law, bad, 1.0)
    raises("scores", ITP(0.1, r_max=1.0).select, bad, make_rng(0))
    raises("phase1_scores", PrivITP(p).select, bad, ok, make_rng(0))
    raises("phase2_scores", PrivITP(p).select, ok, bad, make_rng(0))
    raises("phase2_scores", privitp_law, bad, 0.5, p)
    raises("lambda_tilde", PrivITP(p).account, bad, [1, 2, 3, 4])


def test_real_dtypes_of_any_width_are_scores():
    """int, float16/32 and longdouble arrays hold real numbers: accepted, as the float64 array of the same values."""
    ref = PrivBoN(0.1, 1.0, r_max=4.0).select(np.array([1.0, 2.0, 3.0, 4.0]), make_rng(3)).indices
    for dtype in (np.int64, np.uint8, np.float16, np.float32, np.longdouble):
        arr = np.array([1, 2, 3, 4], dtype=dtype)
        assert PrivBoN(0.1, 1.0, r_max=4.0).select(arr, make_rng(3)).indices.tolist() == ref.tolist()


@pytest.mark.parametrize("name,call", [
    ("prompts", lambda: PrivBoN(0.1, 1.0, 1.0).epsilon_record(4, 2**53 + 1)),
    ("candidates", lambda: PrivBoN(0.1, 1.0, 1.0).epsilon_record(10**30)),
    ("sigma", lambda: PrivBoN(0.1, 5e-324, 1.0)),                  # 2Δ/σ beyond the float range
    ("halting_times", lambda: PrivITP(PrivITPParams(**GOOD)).account([0.5], [2.5])),
    ("halting_times", lambda: PrivITP(PrivITPParams(**GOOD)).account([0.5, 0.4], [1])),
])
def test_mechanism_counts_and_scales_outside_their_range(name, call):
    raises(name, call)


def test_privbon_law_of_a_subnormal_temperature_is_the_arg_max():
    """σ = 5e-324: s/σ overflows, but softmax((s − max s)/σ) is exactly the arg-max's point mass (no NaN)."""
    assert privbon_law([0.1, 0.3, 0.2], 5e-324).tolist() == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("name,call", [
    ("prompts", lambda: DataConfig(prompts=10**30).validate()),
    ("pool_size", lambda: DataConfig(prompts=2**10, pool_size=2**20).validate()),     # 2^30 pool entries
    ("replicates", lambda: SimulationConfig(replicates=10**30).validate()),
    ("bootstrap", lambda: SimulationConfig(bootstrap=2.5).validate()),
    ("filter_max_queries", lambda: SimulationConfig(filter_max_queries=10**8).validate()),
    ("lambda_range", lambda: BasicCompositionPrivITP(PrivITPParams(**GOOD), 10.0, 1e-3, "clamped",
                                                     lambda_range=(-1e6, 0.5), log2_step=-10)),
])
def test_simulation_sizes_and_filter_cells_are_bounded(name, call):
    """Sizes beyond the stated limits (simulate.config.LIMITS, filtered.MAX_CELLS) are refused before any work
    instead of exhausting memory or running for hours (10⁹ cells at 0.1 ms each)."""
    raises(name, call)
