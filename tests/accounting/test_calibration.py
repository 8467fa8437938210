"""Calibration of σ and T against a target ε: never overshoot, and be (near) minimal.

Every ε used to judge a calibration is recomputed here with dp-accounting's own `PLDAccountant`
(add-or-remove, `PoissonSampledDpEvent(q, GaussianDpEvent(σ))` composed T times), not through the library.
"""

from __future__ import annotations

import json

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting import Calibration, CalibrationInfeasible, calibrate_sigma, calibrate_steps
from privcheck.accounting.calibration import SEARCH_INTERVAL
from tests.accounting.reference_store import FFT_REL_TOL, ReferenceStore

# dp-accounting's figures are stored references keyed on their exact inputs (tests/accounting/reference_store.py):
# a σ that privcheck's calibration moves is simply computed live. `test_stored_references_match_live` recomputes
# a seeded sample on every run.
STORE = ReferenceStore("calibration", libraries=("dp-accounting",), rel_tol=FFT_REL_TOL)


@STORE.memo
def dpa_epsilon(q, sigma, T, delta, interval=1e-4):
    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=interval)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)
    return float(acc.get_epsilon(delta))


def test_math_eps8_row_calibration():
    """Table VII: σ = 0.4842404738068581 for q = 128/6988, T = 50, δ = 1/69880, ε = 8 (±2e-5 allowed).

    The returned σ must meet ε ≤ 8 (dp-accounting directly) and σ − 1e-5 must not (σ minimal to 1e-5).
    """
    q, T, delta = 128 / 6988, 50, 1 / 69880
    cal = calibrate_sigma(q, T, delta, 8.0)
    assert isinstance(cal, Calibration) and cal.parameter == "noise_multiplier"
    assert abs(cal.value - 0.48424047) <= 2e-5, f"σ = {cal.value!r} vs Table VII 0.4842404738"
    assert cal.epsilon <= 8.0 and cal.achieved.value <= 8.0
    assert cal.achieved.certified is not None and cal.achieved.value == cal.achieved.certified.upper
    lo, hi = cal.bracket
    # the float search brackets σ to 1e-6; the certified check may then move σ up by a few 1e-6 at most
    assert cal.certified_step <= 1e-5
    assert hi == cal.value and lo < hi and hi - lo <= 1e-6 + cal.certified_step
    assert dpa_epsilon(q, cal.value, T, delta) <= 8.0
    assert dpa_epsilon(q, cal.value - 1e-5, T, delta) > 8.0
    assert calibrate_sigma(q, T, delta, 8.0) is cal        # cached
    out = json.loads(json.dumps(cal.to_json(), allow_nan=False))
    assert out["value"] == cal.value and out["bracket"] == [lo, hi] and out["epsilon"] <= 8.0
    assert out["inputs"]["interval"] == SEARCH_INTERVAL


def test_stored_references_match_live():
    STORE.recheck(2, seed=1, where=lambda a: a[2] <= 5)
    STORE.recheck(1, seed=2, where=lambda a: a[2] == 50)           # the Table VII row


@settings(max_examples=4)
@given(q=st.floats(0.05, 0.5), T=st.integers(1, 5), target=st.floats(0.5, 5.0),
       delta=st.sampled_from([1e-6, 1e-5, 1e-3]))
def test_property_calibrated_sigma_never_overshoots(q, T, target, delta):
    # interval 1e-3 / coarse 1e-2 keeps each calibration near 1 s; the invariant is interval-independent.
    cal = calibrate_sigma(q, T, delta, target, interval=1e-3, coarse=1e-2)
    assert cal.achieved.value <= target and cal.achieved.certified is not None
    assert dpa_epsilon(q, cal.value, T, delta, interval=1e-3) <= target
    lo, hi = cal.bracket
    # the certified upper end may sit up to its tolerance (1e-3 in ε) above the float figure; at ε ≥ 0.5 and an
    # elasticity |d log ε / d log σ| ≥ 1 that moves σ by at most 2e-3 relative
    assert cal.certified_step <= 2e-3 * cal.value
    assert hi == cal.value and hi - lo <= 1e-6 + cal.certified_step
    assert dpa_epsilon(q, lo, T, delta, interval=1e-3) > target, "unsafe end of the bracket meets the target"


@pytest.mark.parametrize("q,sigma,delta,target,interval", [
    (0.1, 2.0, 1e-5, 1.0, 1e-3),
    (0.25, 1.0, 1e-3, 4.0, 1e-3),
    (0.05, 1.0, 1e-5, 2.0, 1e-3),
    (0.1, 2.0, 1e-5, 1.0, 1e-4),
])
def test_calibrate_steps_is_the_largest_feasible_T(q, sigma, delta, target, interval):
    cal = calibrate_steps(q, sigma, delta, target, interval=interval)
    T = cal.value
    assert isinstance(T, int) and T >= 1 and cal.parameter == "steps"
    assert cal.bracket == (T + 1, T)
    assert cal.achieved.value <= target
    assert dpa_epsilon(q, sigma, T, delta, interval) <= target
    assert dpa_epsilon(q, sigma, T + 1, delta, interval) > target


def test_calibrate_steps_infeasible_when_one_step_exceeds_target():
    with pytest.raises(CalibrationInfeasible):
        calibrate_steps(1.0, 0.5, 1e-5, 0.1, interval=1e-3)
    assert dpa_epsilon(1.0, 0.5, 1, 1e-5, 1e-3) > 0.1          # it really is infeasible


def test_calibrate_sigma_infeasible_for_an_unreachable_target():
    # q = 1, T = 1, δ = 1e-10, ε = 1e-6: the Gaussian needs μ ≲ 2.5e-10 (σ ≳ 4e9), beyond the ceiling 1e4.
    with pytest.raises(CalibrationInfeasible):
        calibrate_sigma(1.0, 1, 1e-10, 1e-6, interval=1e-3, coarse=1e-2)
    assert dpa_epsilon(1.0, 1e4, 1, 1e-10, 1e-3) > 1e-6



@pytest.mark.slow
@settings(max_examples=8)
@given(q=st.floats(0.05, 0.5), T=st.integers(1, 20), target=st.floats(0.5, 8.0),
       delta=st.sampled_from([1e-6, 1e-5, 1e-3]))
def test_property_calibrated_sigma_never_overshoots_at_the_reported_interval(q, T, target, delta):
    """Same property with the default calibration (search at 1e-2 then 2e-3, certified check): ~1–5 s each."""
    cal = calibrate_sigma(q, T, delta, target)
    assert cal.achieved.value <= target
    assert dpa_epsilon(q, cal.value, T, delta) <= target
    lo, hi = cal.bracket
    assert hi == cal.value and hi - lo <= 1e-6 + cal.certified_step
    assert dpa_epsilon(q, lo, T, delta, interval=SEARCH_INTERVAL) > target
