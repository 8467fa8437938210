"""A DP-GRPO configuration cannot report an ε other than the accountant's ε of its own public parameters.

Reference: `privcheck.accounting.epsilon(PoissonGaussianEvent(q, σ, T), δ)`, built here from the numbers
directly (never from the config or its plan). Tried: a forged calibration mapping, a calibration of other
parameters, a mismatched δ, a stale calibration after `replace(T=...)`, and the trainer's claim for several
configurations (with and without canary slots); the precomputed σ of the gpu-h200 preset against the calibration;
and the "Privacy plan" example of docs/dpgrpo.md, run as written.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.presets import GPU_H200, GPU_SIGMA, GPU_SIGMA_BRACKET, config_for
from mechanisms.dpgrpo.records import SlotUniverse, dirac_canary
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import reference_fixture
from privcheck.accounting import Calibration, PoissonGaussianEvent, epsilon
from privcheck.errors import CalibrationMismatch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "dpgrpo.md"


def true_epsilon(q, sigma, T, delta) -> float:
    return epsilon(PoissonGaussianEvent(q, sigma, T), delta).value


@pytest.fixture(scope="module")
def calibrated():
    """The user's example: calibrated for ε = 2 at n = 6, m = 3 (q = 0.5), T = 2, C = 1, δ = 1/60."""
    return DPGRPOConfig.from_target(n=6, m=3, T=2, target_epsilon=2.0, C=1.0, randomness=0)


@pytest.fixture(scope="module")
def fixture():
    return reference_fixture(n_records=6, G=4, L_max=6, seed=3)


def trainer(fixture, config, canaries=None):
    model, tok, records, replay = fixture
    universe = SlotUniverse(config.n, torch.ones(config.n, dtype=torch.bool), (records * config.n)[:config.n])
    if canaries:
        universe = universe.append_canaries(canaries, torch.ones(len(canaries), dtype=torch.bool),
                                            "sha256:" + "0" * 64)
    return DPTrainer(model, tok, universe, config, reward, rollout_backend=replay)


# ----------------------------------------------------------------------------------- forged and mismatched

def test_forged_calibration_mapping_is_refused():
    """σ = 0.7 at q = 0.5, T = 2 is ε = 3.446 at δ = 1/60; a mapping claiming 0.001 is not accepted."""
    with pytest.raises(CalibrationMismatch):
        DPGRPOConfig(n=6, m=3, T=2, sigma=0.7, C=1.0, calibration={"epsilon": 0.001, "target_epsilon": 0.001})
    honest = DPGRPOConfig(n=6, m=3, T=2, sigma=0.7, C=1.0)
    assert honest.plan.epsilon().value == true_epsilon(0.5, 0.7, 2, 1 / 60)
    assert abs(honest.plan.epsilon().value - 3.446) < 1e-3


def test_calibration_of_other_parameters_is_refused(calibrated):
    cal = calibrated.calibration
    assert isinstance(cal, Calibration)
    with pytest.raises(CalibrationMismatch):                   # the calibration's σ, but another T
        DPGRPOConfig(n=6, m=3, T=3, sigma=calibrated.sigma, C=1.0, calibration=cal)
    with pytest.raises(CalibrationMismatch):                   # another σ than the calibrated one
        DPGRPOConfig(n=6, m=3, T=2, sigma=calibrated.sigma * 1.01, C=1.0, calibration=cal)
    with pytest.raises(CalibrationMismatch):                   # another q
        DPGRPOConfig(n=6, m=2, T=2, sigma=calibrated.sigma, C=1.0, calibration=cal)
    with pytest.raises(CalibrationMismatch):                   # the non-private arm has no plan to match
        DPGRPOConfig(n=6, m=3, T=2, sigma=0.0, C=math.inf, arm="nonprivate_reference", calibration=cal)


def test_mismatched_delta_is_refused(calibrated):
    cal = calibrated.calibration
    assert cal.delta == calibrated.delta == 1 / 60
    with pytest.raises(CalibrationMismatch):
        DPGRPOConfig(n=6, m=3, T=2, sigma=calibrated.sigma, C=1.0, delta=1e-3, calibration=cal)
    with pytest.raises(CalibrationMismatch):
        calibrated.replace(delta=1e-3, calibration=cal)
    same = DPGRPOConfig(n=6, m=3, T=2, sigma=calibrated.sigma, C=1.0, calibration=cal)   # the matching one
    assert same.plan.calibration is cal


# ----------------------------------------------------------------------------------- stale after replace

def test_stale_calibration_is_never_reported_after_replace(calibrated, fixture):
    assert calibrated.plan.epsilon().value <= 2.0
    longer = calibrated.replace(T=40)
    assert longer.calibration is None and longer.sigma == calibrated.sigma
    eps40 = true_epsilon(0.5, calibrated.sigma, 40, 1 / 60)
    assert longer.plan.epsilon().value == eps40 and abs(eps40 - 14.1) < 0.05
    claim = trainer(fixture, longer).privacy_claim
    assert claim["epsilon"] == eps40 and claim["T"] == 40 and claim["calibration"] is None
    for change in ({"n": 12}, {"m": 2}, {"sigma": 2.0}, {"delta": 1e-3}, {"target_epsilon": 3.0}):
        assert calibrated.replace(**change).calibration is None, change


def test_replace_keeps_a_calibration_that_still_matches_or_recalibrates(calibrated):
    # n = 12, m = 6 keeps q = 0.5 (and δ, stored): the same event, so the calibration still belongs to it.
    for change in ({"lr": 0.1}, {"C": 2.0}, {"G": 8}, {"randomness": "os_entropy"}, {"arm": "zero_advantage"},
                   {"n": 12, "m": 6}):
        kept = calibrated.replace(**change)
        assert kept.calibration is calibrated.calibration, change
    again = calibrated.replace(T=40, recalibrate=True)
    assert again.calibration is not None and again.calibration.event == again.plan.event
    assert again.plan.epsilon().value == true_epsilon(0.5, again.sigma, 40, 1 / 60) <= 2.0


# ----------------------------------------------------------------------------------- the trainer's claim

@pytest.mark.parametrize("kw", [dict(n=6, m=3, T=2, sigma=0.7), dict(n=6, m=1.5, T=5, sigma=1.3),
                                dict(n=12, m=6, T=1, sigma=0.9, delta=1e-3), dict(n=6, m=6, T=3, sigma=2.0)])
def test_privacy_claim_is_the_accountant_epsilon_of_the_parameters(fixture, kw):
    config = DPGRPOConfig(C=0.3, G=4, L_max=6, optimizer="sgd", randomness=1, **kw)
    claim = trainer(fixture, config).privacy_claim
    q = kw["m"] / kw["n"]
    delta = kw.get("delta", 1 / (10 * kw["n"]))
    assert (claim["q"], claim["sigma"], claim["T"], claim["delta"]) == (q, kw["sigma"], kw["T"], delta)
    assert claim["epsilon"] == true_epsilon(q, kw["sigma"], kw["T"], delta)
    assert claim["event"] == PoissonGaussianEvent(q, kw["sigma"], kw["T"]).to_json()


def test_canaries_change_the_divisor_not_the_epsilon(fixture, calibrated):
    config = calibrated.replace(C=0.3, G=4, L_max=6, optimizer="sgd")
    dim = trainer(fixture, config).space.dim
    tr = trainer(fixture, config, [dirac_canary(0, 0.3, dim)] * 2)
    assert tr.plan.canaries == 2 and tr.plan.divisor == 0.5 * 8 == tr.divisor
    assert tr.plan.calibration is calibrated.calibration
    assert tr.privacy_claim["epsilon"] == true_epsilon(0.5, calibrated.sigma, 2, 1 / 60)


def test_nonprivate_arm_has_no_plan():
    c = DPGRPOConfig(n=6, m=3, T=2, sigma=0.0, C=math.inf, arm="nonprivate_reference")
    assert c.plan is None


# ----------------------------------------------------------------------------------- precomputed σ

def test_gpu_preset_sigma_is_checked_against_its_event():
    """No ε is stored with the precomputed σ: the plan computes it, and the bracket's unsafe end exceeds 8."""
    config = config_for(GPU_H200, arm="dp_grpo", randomness=0)
    assert config.sigma == GPU_SIGMA and config.calibration is None
    assert config.plan.epsilon().value == true_epsilon(1 / 16, GPU_SIGMA, 8, 1 / 5120) <= 8.0
    assert true_epsilon(1 / 16, GPU_SIGMA_BRACKET[0], 8, 1 / 5120) > 8.0


@pytest.mark.slow
def test_gpu_preset_sigma_is_the_calibration():
    """The accountant's calibration for ε = 8 still returns the stored σ (to the calibration's arithmetic)."""
    cal = DPGRPOConfig.from_target(n=512, m=32, T=8, target_epsilon=8.0, C=1.0, delta=1 / 5120).calibration
    assert abs(cal.value - GPU_SIGMA) <= 1e-12 and cal.epsilon <= 8.0


# ----------------------------------------------------------------------------------- the docs example

def test_docs_privacy_plan_example_runs(calibrated, capsys):
    text = DOCS.read_text("utf-8")
    section = text.split("## Privacy plan", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "docs/dpgrpo.md has no python example under 'Privacy plan'"
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(DOCS), "exec"), namespace)      # noqa: S102 — the documented example
    out = capsys.readouterr().out
    assert "14.11" in out
    assert namespace["longer"].calibration is None
