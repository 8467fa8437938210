"""Hostile scalars for every public parameter of the accounting API: each call returns the answer of the plain value
it stands for, or raises InvalidParameter naming the parameter, before any work.

Refused everywhere: NaN, ±inf (1e309 parses to inf), strings, None, bools, complex numbers, Decimals and numpy
arrays (even 0-d) where a scalar is expected; for counts also non-integral reals, 0, and integers above the
parameter's stated maximum (10**30, 10**400). Accepted and equal to the plain value: numpy scalars, Fractions,
and integral floats for counts. Expected values are the same call with the plain Python number, so the test
checks the conversion, not a figure.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from privcheck import accounting as acc
from privcheck.accounting.conversions import MAX_GROUP_SIZE
from privcheck.accounting.gaussian_selection import COUNT_MAX
from privcheck.accounting.pld_certified import MAX_STEPS
from privcheck.accounting.selection import MAX_CANDIDATES
from privcheck.errors import InvalidParameter

E = acc.epsilon
_ITP = dict(beta=1.0, sigma_x=1.0, sigma_z=0.5, headroom=1.0, sensitivity=0.125, delta=1e-5)

REFUSED_REALS = [math.nan, math.inf, -math.inf, float("1e309"), "0.5", None, True, complex(0.5, 0), Decimal("0.5"),
                 np.array(0.5), np.array([0.5])]
REFUSED_COUNTS = [0, -1, 2.5, math.nan, math.inf, True, "3", None, np.array([3]), Decimal(3), 10**30, 10**400]

# (id, call(value), parameter name, plain value, zero refused)
REALS = [
    ("group.epsilon", lambda x: acc.group_privacy(x, 1e-5, 2), "epsilon", 1.0, False),
    ("group.delta", lambda x: acc.group_privacy(1.0, x, 2), "delta", 1e-5, False),
    ("replace_one.epsilon", lambda x: acc.replace_one(x, 1e-5), "epsilon", 1.0, False),
    ("replace_one.delta", lambda x: acc.replace_one(1.0, x), "delta", 1e-5, False),
    ("gaussian.sigma", lambda x: E(acc.GaussianEvent(x, 1.0), 1e-5), "sigma", 0.5, True),
    ("gaussian.sensitivity", lambda x: acc.gaussian_epsilon(1.0, 1e-5, x), "sensitivity", 0.5, True),
    ("gaussian.delta", lambda x: acc.gaussian_epsilon(1.0, x), "delta", 1e-5, True),
    ("gaussian_sigma.epsilon", lambda x: acc.gaussian_sigma(x, 1e-5), "epsilon", 1.0, True),
    ("gdp_to_dp.mu", lambda x: acc.gdp_to_dp(x, 1e-5), "mu", 1.0, True),
    ("dp_to_gdp.epsilon", lambda x: acc.dp_to_gdp(x, 1e-5), "epsilon", 1.0, True),
    ("poisson.sampling_rate", lambda x: E(acc.PoissonGaussianEvent(x, 1.0, 3), 1e-5), "sampling_rate", 0.25, True),
    ("poisson.noise", lambda x: E(acc.PoissonGaussianEvent(0.25, x, 3), 1e-5), "noise_multiplier", 1.0, True),
    ("poisson.delta", lambda x: E(acc.PoissonGaussianEvent(0.25, 1.0, 3), x), "delta", 1e-5, True),
    ("privbon.sigma", lambda x: E(acc.PrivBoNEvent(0.25, x, candidates=3, r_max=1.0)), "sigma", 1.0, True),
    ("privbon.sensitivity", lambda x: E(acc.PrivBoNEvent(x, 1.0, candidates=3, r_max=1.0)), "sensitivity", 0.25,
     True),
    ("privbon_sigma.epsilon", lambda x: acc.privbon_sigma(0.25, x), "epsilon", 1.0, True),
    ("privitp.lambda_tilde", lambda x: E(acc.PrivITPEvent(acc.PrivITPParams(candidates=8, **_ITP), x, 3)),
     "lambda_tilde", 0.5, False),
    ("rnm.sigma", lambda x: E(acc.GaussianReportNoisyMaxEvent(3, x, 0.25)), "sigma", 1.0, True),
    ("above_threshold.threshold", lambda x: E(acc.GaussianAboveThresholdEvent(3, x, 1.0, 1.0, 0.25)), "threshold",
     0.5, False),
    ("calibrate_sigma.epsilon", lambda x: acc.calibrate_sigma(0.25, 2, 1e-5, x, interval=1e-2, coarse=1e-2),
     "epsilon", 2.0, True),
    ("calibrate_steps.epsilon", lambda x: acc.calibrate_steps(0.25, 2.0, 1e-5, x, interval=1e-2), "epsilon", 2.0,
     True),
]

# (id, call(value), parameter name, plain value, the stated maximum); None is legal for PrivBoN's candidates (the
# nominal ε) and PrivITP's halting time (the fallback), so it is not in their refused list
_NONE_LEGAL = {"privbon.candidates", "privitp.halting_time"}
COUNTS = [
    ("group.k", lambda n: acc.group_privacy(1e-3, 0.0, n), "k", 3, MAX_GROUP_SIZE),
    ("poisson.steps", lambda n: E(acc.PoissonGaussianEvent(0.25, 1.0, n), 1e-5), "steps", 3, MAX_STEPS),
    ("history.steps", lambda n: E(acc.CompositionHistory(((1.0, 0.25, n),)), 1e-5), "steps", 3, MAX_STEPS),
    ("privbon.candidates", lambda n: E(acc.PrivBoNEvent(0.25, 1.0, candidates=n, r_max=1.0)), "candidates", 3,
     MAX_CANDIDATES),
    ("privitp.candidates", lambda n: E(acc.PrivITPEvent(acc.PrivITPParams(candidates=n, **_ITP), 0.5, 1)),
     "candidates", 3, MAX_CANDIDATES),
    ("privitp.halting_time", lambda n: E(acc.PrivITPEvent(acc.PrivITPParams(candidates=8, **_ITP), 0.5, n)),
     "halting_time", 3, 8),
    ("privitp_worst.rounds", lambda n: E(acc.PrivITPWorstCaseEvent(acc.PrivITPParams(candidates=8, **_ITP), 0.5, n)),
     "rounds", 3, 8),
    ("rnm.queries", lambda n: E(acc.GaussianReportNoisyMaxEvent(n, 1.0, 0.25)), "queries", 3, COUNT_MAX),
    ("above_threshold.halting_time", lambda n: E(acc.GaussianAboveThresholdEvent(n, 0.5, 1.0, 1.0, 0.25)),
     "halting_time", 3, COUNT_MAX),
]


def _value(out):
    return out.value if hasattr(out, "value") else out


def _refused(call, value, name):
    with pytest.raises(InvalidParameter) as info:
        call(value)
    assert info.value.name == name, f"{value!r} refused as {info.value.name!r}: {info.value}"


def _real_cases():
    for cid, call, name, plain, zero_refused in REALS:
        for value in REFUSED_REALS + ([-0.0, 0] if zero_refused else []):
            yield pytest.param(call, name, value, id=f"{cid}={value!r}")


@pytest.mark.parametrize("call,name,value", list(_real_cases()))
def test_hostile_reals_are_refused_naming_the_parameter(call, name, value):
    _refused(call, value, name)


def test_an_integer_beyond_the_float_range_is_refused_for_every_real_parameter():
    for _, call, name, _, _ in REALS:
        _refused(call, 10**400, name)


@pytest.mark.parametrize("call,name,value", [
    pytest.param(call, name, value, id=f"{cid}={value!r}")
    for cid, call, name, _, top in COUNTS for value in REFUSED_COUNTS + [top + 1]
    if not (value is None and cid in _NONE_LEGAL)])
def test_hostile_counts_are_refused_naming_the_parameter(call, name, value):
    _refused(call, value, name)


def _equivalents(plain):
    out = [np.float64(plain), Fraction(plain)]
    if float(np.float32(plain)) == plain:
        out.append(np.float32(plain))
    return out


@pytest.mark.parametrize("call,plain", [pytest.param(call, plain, id=cid) for cid, call, _, plain, _ in REALS])
def test_numpy_scalars_and_fractions_give_the_plain_answer(call, plain):
    expected = _value(call(plain))
    for variant in _equivalents(plain):
        assert _value(call(variant)) == expected, f"{type(variant).__name__} {variant!r}"


@pytest.mark.parametrize("call,plain", [pytest.param(call, plain, id=cid) for cid, call, _, plain, _ in COUNTS])
def test_integral_counts_of_any_type_give_the_plain_answer(call, plain):
    expected = _value(call(plain))
    for variant in (np.uint8(plain), float(plain), Fraction(plain)):
        assert _value(call(variant)) == expected, f"{type(variant).__name__} {variant!r}"


@pytest.mark.slow
@pytest.mark.parametrize("call,top", [pytest.param(call, top, id=cid) for cid, call, _, _, top in COUNTS])
def test_the_stated_maximum_itself_is_answered(call, top):
    """Each maximum is what the method handles in seconds (10⁶ rounds of the certified PLD: ≈ 10 s)."""
    assert math.isfinite(_value(call(top)))


@pytest.mark.parametrize("method,args,name", [
    ("admits", ("0.5",), "worst_case"), ("admits", (math.nan,), "worst_case"), ("admits", (-1.0,), "worst_case"),
    ("admits", (0.5, -1e-5), "delta"), ("admits", (0.5, math.nan), "delta"), ("admits", (0.5, 1.0), "delta"),
    ("charge", ("q", 0.1, "0.5"), "worst_case"), ("charge", ("q", 0.1, 0.5, -1.0), "delta"),
    ("refuse", ("q", np.array([0.5])), "worst_case"),
])
def test_ex_post_filter_inputs(method, args, name):
    """A negative δ used to lower the δ spent, and a string worst case raised TypeError inside math.isfinite."""
    flt = acc.ExPostFilter(budget=1.0, delta_total=1e-3)
    _refused(lambda _: getattr(flt, method)(*args), None, name)
    assert flt.spent == 0.0 and flt.entries == []
    assert flt.admits(math.inf) is False and flt.admits(0.5, 1e-4) is True


@pytest.mark.parametrize("orders", [[2.0**60], [1e300], [1.0], [True], ["2"], [1.5] * 1001, [], 3.0])
def test_rdp_orders_outside_what_dp_accounting_answers_in_seconds(orders):
    """An order of 2^60 ran for minutes, 1e300 raised TypeError inside dp-accounting, 10⁴ orders took 12 s."""
    _refused(lambda o: E(acc.PoissonGaussianEvent(0.25, 1.0, 3), 1e-5, method="rdp", orders=o), orders, "orders")
