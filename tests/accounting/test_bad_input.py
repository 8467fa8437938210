"""Every public accounting function rejects out-of-range input with `InvalidParameter` (a ValueError) whose
message names the parameter and its allowed range (docs/accounting.md: "Every call validates its public
inputs")."""

from __future__ import annotations

import math

import pytest

from privcheck import accounting as acc
from privcheck.errors import InvalidParameter

NAN, INF = math.nan, math.inf

BAD = {
    "sampling_rate": [0, 0.0, -0.1, 1.5, 1 + 1e-12, NAN, INF, -INF, "0.1", None, True],
    "positive": [0, 0.0, -1.0, -1e-300, NAN, INF, -INF, "1.0", True],
    "steps": [0, -3, 2.5, NAN, INF, "10", True, 1.0000001],
    "delta": [0, 0.0, 1, 1.0, 2, -1e-5, NAN, INF, "1e-5"],
    "target": [0, 0.0, -1.0, NAN, INF, -INF],
    "k": [0, -2, 1.5, NAN, INF, True, "2", 2**53 + 1, 10**30],
    # conversions accept ε = 0 and δ = 0 (pure DP): (0, δ) and (ε, 0) convert by the same formulas
    "conversion_epsilon": [-1.0, -1e-300, NAN, INF, -INF, "1.0", True, None],
    "conversion_delta": [1, 1.0, 2, -1e-5, NAN, INF, "1e-5", None],
}

# function → (positional defaults (valid and cheap), keyword defaults, {index or keyword: (library name, kind)})
FUNCTIONS = {
    "epsilon_pld": (acc.epsilon_pld, (0.1, 1.0, 2, 1e-5), {"interval": 1e-2},
                    {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                     2: ("steps", "steps"), 3: ("delta", "delta"), "interval": ("interval", "positive")}),
    "epsilon_rdp": (acc.epsilon_rdp, (0.1, 1.0, 2, 1e-5), {},
                    {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                     2: ("steps", "steps"), 3: ("delta", "delta")}),
    "epsilon_single_round_certified": (acc.epsilon_single_round_certified, (0.1, 1.0, 1e-5), {},
                                       {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                                        2: ("delta", "delta")}),
    "epsilon_quadrature": (acc.epsilon_quadrature, (0.1, 1.0, 1, 1e-5), {},
                           {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                            2: ("steps", "steps"), 3: ("delta", "delta")}),
    "composed_delta_quadrature": (acc.composed_delta_quadrature, (0.1, 1.0, 1, 1.0), {},
                                  {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                                   2: ("steps", "steps")}),
    "calibrate_sigma": (acc.calibrate_sigma, (0.1, 2, 1e-5, 2.0), {"interval": 1e-2, "coarse": 1e-2},
                        {0: ("sampling_rate", "sampling_rate"), 1: ("steps", "steps"), 2: ("delta", "delta"),
                         3: ("epsilon", "target"), "interval": ("interval", "positive"),
                         "coarse": ("coarse", "positive"), "sigma_tol": ("sigma_tol", "positive")}),
    "calibrate_steps": (acc.calibrate_steps, (0.1, 2.0, 1e-5, 1.0), {"interval": 1e-2},
                        {0: ("sampling_rate", "sampling_rate"), 1: ("noise_multiplier", "positive"),
                         2: ("delta", "delta"), 3: ("epsilon", "target")}),
    "gaussian_epsilon": (acc.gaussian_epsilon, (1.0, 1e-5, 1.0), {},
                         {0: ("sigma", "positive"), 1: ("delta", "delta"), 2: ("sensitivity", "positive")}),
    "gaussian_sigma": (acc.gaussian_sigma, (1.0, 1e-5, 1.0), {},
                       {0: ("epsilon", "target"), 1: ("delta", "delta"), 2: ("sensitivity", "positive")}),
    "gdp_to_dp": (acc.gdp_to_dp, (1.0, 1e-5), {}, {0: ("mu", "positive"), 1: ("delta", "delta")}),
    "dp_to_gdp": (acc.dp_to_gdp, (1.0, 1e-5), {}, {0: ("epsilon", "target"), 1: ("delta", "delta")}),
    "group_privacy": (acc.group_privacy, (1.0, 1e-5, 2), {},
                      {0: ("epsilon", "conversion_epsilon"), 1: ("delta", "conversion_delta"), 2: ("k", "k")}),
    "replace_one": (acc.replace_one, (1.0, 1e-5), {},
                    {0: ("epsilon", "conversion_epsilon"), 1: ("delta", "conversion_delta")}),
}


def _call(fn, args, kwargs, where, value):
    args, kwargs = list(args), dict(kwargs)
    if isinstance(where, int):
        args[where] = value
    else:
        kwargs[where] = value
    return fn(*args, **kwargs)


def _cases():
    for fname, (fn, args, kwargs, params) in FUNCTIONS.items():
        for where, (pname, kind) in params.items():
            for value in BAD[kind]:
                yield pytest.param(fname, where, pname, value, id=f"{fname}-{pname}={value!r}")


@pytest.mark.parametrize("fname,where,pname,value", list(_cases()))
def test_invalid_parameter_names_the_parameter(fname, where, pname, value):
    fn, args, kwargs, _ = FUNCTIONS[fname]
    with pytest.raises(InvalidParameter) as info:
        _call(fn, args, kwargs, where, value)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.name == pname
    assert pname in str(err) and "allowed range" in str(err)


@pytest.mark.parametrize("fname", list(FUNCTIONS))
def test_valid_defaults_are_accepted(fname):
    """The defaults used above are themselves valid, so each rejection is due to the one bad value."""
    fn, args, kwargs, _ = FUNCTIONS[fname]
    out = fn(*args, **kwargs)
    value = out if isinstance(out, float) else out.value
    assert math.isfinite(value)


@pytest.mark.parametrize("T", [4, 10])
def test_quadrature_refuses_more_than_three_rounds(T):
    with pytest.raises(InvalidParameter, match="steps"):
        acc.composed_delta_quadrature(0.1, 1.0, T, 1.0)
    with pytest.raises(InvalidParameter, match="steps"):
        acc.epsilon_quadrature(0.1, 1.0, T, 1e-5)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_composed_delta_quadrature_rejects_non_finite_epsilon(value):
    """`composed_delta_quadrature(q, σ, T, ε)` validates q, σ, T but not ε: ε = NaN returns δ = 1.0 silently."""
    with pytest.raises(InvalidParameter, match="epsilon"):
        acc.composed_delta_quadrature(0.1, 1.0, 1, value)


@pytest.mark.parametrize("value", [0.0, -1e-4, NAN, INF])
def test_calibrate_steps_validates_interval(value):
    """`calibrate_sigma` and `epsilon_pld` validate `interval`; `calibrate_steps` passes it to dp-accounting raw."""
    with pytest.raises(InvalidParameter, match="interval"):
        acc.calibrate_steps(0.1, 2.0, 1e-5, 1.0, interval=value)


def test_epsilon_rdp_rejects_an_empty_order_grid():
    with pytest.raises(InvalidParameter, match="orders"):
        acc.epsilon_rdp(0.1, 1.0, 10, 1e-5, orders=())


# The two arb-level single-round evaluators are exported from privcheck.accounting but validate nothing:
# q = 1.5 gives a finite "δ" for a mixture with a negative weight.
_BALL_BAD = [(0, 1.5, "sampling_rate"), (0, NAN, "sampling_rate"), (1, -1.0, "noise_multiplier"),
             (1, NAN, "noise_multiplier"), (2, NAN, "epsilon")]


@pytest.mark.parametrize("fn", [acc.single_round_delta_ball, acc.single_round_delta_integral],
                         ids=["single_round_delta_ball", "single_round_delta_integral"])
@pytest.mark.parametrize("where,value,pname", _BALL_BAD, ids=[f"{p}={v!r}" for _, v, p in _BALL_BAD])
def test_single_round_evaluators_validate_input(fn, where, value, pname):
    args = [0.1, 1.0, 1.0]
    args[where] = value
    with pytest.raises(InvalidParameter) as info:
        fn(*args)
    assert info.value.name == pname
