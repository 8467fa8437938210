"""`DPSGDPlan` cannot report an ε that differs from `epsilon(plan.event, plan.delta)` of its own parameters: a forged,
foreign or stale calibration is refused or dropped, never carried along."""

from __future__ import annotations

import dataclasses

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant

from privcheck.accounting import (
    DPGRPOPlan,
    DPSGDPlan,
    NeighboringRelation,
    PoissonGaussianEvent,
    calibrate_sigma,
    epsilon,
)
from privcheck.errors import CalibrationMismatch, InvalidParameter
from tests.accounting.reference_store import FFT_REL_TOL, ReferenceStore

# dp-accounting's figures are stored references keyed on their exact inputs (tests/accounting/reference_store.py);
# `test_stored_references_match_live` recomputes one on every run
STORE = ReferenceStore("plan", libraries=("dp-accounting",), rel_tol=FFT_REL_TOL)

# The user's example of the issue: n = 6, m = 3 (q = 0.5), T = 2, δ = 1/60, calibrated for ε = 2.
BASE = dict(records=6, sampling_rate=0.5, clip_norm=1.0, steps=2, delta=1 / 60)


@pytest.fixture(scope="module")
def calibrated():
    return DPSGDPlan.from_target(target_epsilon=2.0, **BASE)


def test_plan_epsilon_is_the_event_epsilon(calibrated):
    assert DPGRPOPlan is DPSGDPlan
    assert calibrated.event == PoissonGaussianEvent(0.5, calibrated.noise_multiplier, 2)
    assert calibrated.epsilon().value == epsilon(calibrated.event, 1 / 60).value <= 2.0
    claim = calibrated.claim()
    assert claim["epsilon"] == calibrated.epsilon().value and claim["target_epsilon"] == 2.0
    assert claim["event"] == calibrated.event.to_json() and claim["neighboring"] == "add_remove"


@STORE.memo
def dp_accounting_epsilon(q, sigma, steps, delta):
    """The independent oracle: dp-accounting's own PLDAccountant on its own event objects."""
    accountant = PLDAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return float(accountant.get_epsilon(delta))


def test_stored_references_match_live():
    STORE.recheck(1, seed=1, where=lambda a: a[2] == 2)


def test_uncalibrated_plan_reports_the_true_epsilon_of_its_parameters():
    plan = DPSGDPlan(noise_multiplier=0.7, **BASE)
    assert plan.calibration is None
    # the reported (certified) figure encloses the exact ε; dp-accounting's float figure lies within its gap
    record, reference = plan.epsilon(), dp_accounting_epsilon(0.5, 0.7, 2, 1 / 60)
    assert record.certified.lower <= reference + 1e-9 and record.value - reference <= max(record.certified.width, 1e-6)
    assert plan.epsilon(method="pld_float").value == pytest.approx(reference, rel=1e-9)
    assert plan.epsilon().value > 3.4                                      # far above the forged 0.001


def test_forged_calibration_mapping_is_refused():
    with pytest.raises(CalibrationMismatch):
        DPSGDPlan(noise_multiplier=0.7, calibration={"epsilon": 0.001}, **BASE)


def test_foreign_calibration_is_refused(calibrated):
    cal = calibrated.calibration
    with pytest.raises(CalibrationMismatch):                # other steps
        DPSGDPlan(**{**BASE, "steps": 40}, noise_multiplier=calibrated.noise_multiplier, calibration=cal)
    with pytest.raises(CalibrationMismatch):                # other σ
        DPSGDPlan(**BASE, noise_multiplier=calibrated.noise_multiplier * 1.01, calibration=cal)
    with pytest.raises(CalibrationMismatch):                # other δ
        DPSGDPlan(**{**BASE, "delta": 1e-3}, noise_multiplier=calibrated.noise_multiplier, calibration=cal)
    with pytest.raises(CalibrationMismatch):                # other relation
        DPSGDPlan(**BASE, noise_multiplier=calibrated.noise_multiplier, calibration=cal,
                  relation=NeighboringRelation.REPLACE_ONE)


def test_replace_never_keeps_a_stale_calibration(calibrated):
    longer = calibrated.replace(steps=40)
    assert longer.calibration is None and longer.target_epsilon is None
    reference = dp_accounting_epsilon(0.5, calibrated.noise_multiplier, 40, 1 / 60)
    assert longer.epsilon(method="pld_float").value == pytest.approx(reference, rel=1e-9)
    record = longer.epsilon()
    assert record.certified.lower <= reference + 1e-9 and record.value - reference <= max(record.certified.width, 1e-6)
    assert longer.epsilon().value > 14                                     # far above the stale 2.0
    same_event = calibrated.replace(clip_norm=4.0, records=12)             # ε depends on neither
    assert same_event.calibration is calibrated.calibration
    assert same_event.divisor == 0.5 * 12


def test_replace_with_a_target_recalibrates():
    plan = DPSGDPlan(noise_multiplier=0.7, **BASE).replace(target_epsilon=2.0)
    assert plan.calibration is calibrate_sigma(0.5, 2, 1 / 60, 2.0)       # cached: the same calibration
    assert plan.epsilon().value <= 2.0


def test_frozen_and_validated():
    plan = DPSGDPlan(noise_multiplier=0.7, **BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.noise_multiplier = 0.1
    with pytest.raises(InvalidParameter, match="sampling_rate"):
        DPSGDPlan(**{**BASE, "sampling_rate": 0.0}, noise_multiplier=0.7)
    with pytest.raises(InvalidParameter, match="canaries"):
        DPSGDPlan(**BASE, noise_multiplier=0.7, canaries=-1)
    with pytest.raises(InvalidParameter, match="learning_rate"):
        plan.replace(learning_rate=1e-3)                                   # training settings are not in a plan


def test_json_round_trip_recalibrates_and_checks(calibrated):
    doc = calibrated.to_json()
    back = DPSGDPlan.from_json(doc)
    assert back == calibrated and back.calibration is calibrated.calibration
    with pytest.raises(CalibrationMismatch):
        DPSGDPlan.from_json({**doc, "noise_multiplier": doc["noise_multiplier"] * 1.001})


def test_canaries_enter_only_the_divisor(calibrated):
    with_canaries = calibrated.replace(canaries=10)
    assert with_canaries.divisor == 0.5 * 16
    assert with_canaries.calibration is calibrated.calibration            # same event, same δ
    assert with_canaries.epsilon().value == calibrated.epsilon().value
