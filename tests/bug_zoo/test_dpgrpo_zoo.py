"""The DP-GRPO bug zoo (docs/dpgrpo.md, "The bug zoo") against the dpgrpo checks, bound by `bindings_for`.

Every row of `DPGRPO_ZOO` fails each of its designated checks with status "fail" (not "error", not "skipped"),
and the production `DPTrainer`, checked with the same options, passes every one of them (the full V1–V12 run of
the reference is in tests/dpgrpo/test_suite.py). Where the defect has a closed-form signature (the zoo table),
the measurement is compared with it. The float64 fixture is built once per module; each variant runs only its
designated checks, V3 on fewer records at the clip norm where the defects show (C_bind), and V12 on the
calibration row with Table VII's σ standing in for the calibration (the real calibration: `slow` tier).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import REFERENCE, plan_calibration, reference_fixture, reference_setup
from privcheck.checks import training
from tests.bug_zoo.dpgrpo_variants import DPGRPO_ZOO, LossHookTrainer

SEED = 0
# Table VII's σ for the MATH ε = 8 row (0.4842404738) raised by 1e-6: Table VII's own σ has certified ε
# 8.000011 > 8 (its float PLD is 7.99999996), and the check allows |σ − σ_VII| ≤ 1e-5.
CALIBRATED_SIGMA_EPS8 = 0.4842404738068581 + 1e-6
SPEC_TABLE = ["batch_advantage_norm", "per_completion_clip", "realised_batch_divisor", "shuffled_fixed_batches",
              "noise_sigma_only", "clip_per_chunk", "skip_constant_groups", "reused_seeded_noise",
              "batch_token_norm", "per_tensor_clip", "bias_corrected_kl", "nonfinite_passthrough",
              "sigma_rounded_down", "group_sum_loss"]
CHECK_OPTIONS = {
    "sensitivity_add_remove": {"n_base": 3, "n_gradient_records": 3, "clip_norms": ("C_bind",)},
    "accountant_reference": {"rows": [], "jax_privacy": False},
}
N_ADDITIONS = 2  # real V3 additions kept in the fast tier
CHECKS_ALL = {**training.CHECKS, **training.SELF_CHECKS}   # the user-facing catalogue and V12, privcheck's self-check
# the record-level checks and V12; the whole-step and whole-run rows are in test_whole_step_zoo.py and
# test_whole_run_zoo.py, the accountant row below
RECORD_LEVEL = [c for c in CHECKS_ALL if c != "accountant_agreement" and c not in training.WHOLE_STEP_CHECKS
                and c not in training.WHOLE_RUN_CHECKS]
DESIGNATED = sorted({c for e in DPGRPO_ZOO for c in e.checks}, key=list(CHECKS_ALL).index)
CASES = [(e, c) for e in DPGRPO_ZOO for c in e.checks]


def table_vii_calibration(q, T, delta, target):
    """Fast stand-in for `calibrate_sigma`: Table VII's σ for the MATH ε = 8 row, the only row V12 calibrates."""
    assert (round(q * 6988), T, target) == (128, 50, 8.0)
    return CALIBRATED_SIGMA_EPS8


@pytest.fixture(scope="module")
def fixture():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    R = REFERENCE
    yield reference_fixture(n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"], L_max=R["L_max"], seed=SEED)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def fast_bindings(fixture, trainer_cls=DPTrainer, calibrate=table_vii_calibration):
    _, b = reference_setup(SEED, trainer_cls, fixture=fixture)
    return dataclasses.replace(b, additions=list(b.additions)[:N_ADDITIONS], calibrate_sigma=calibrate)


def run(check, b):
    r = CHECKS_ALL[check](b, "float64", **CHECK_OPTIONS.get(check, {}))
    assert r.name == check and r.precision == "float64"
    return r


@pytest.fixture(scope="module")
def reference(fixture):
    return fast_bindings(fixture)


# ------------------------------------------------------------------------------------------ the table

def test_zoo_is_the_spec_table():
    assert [e.name for e in DPGRPO_ZOO] == SPEC_TABLE
    assert set(DESIGNATED) >= set(RECORD_LEVEL)   # together the variants exercise every check V1–V12
    for e in DPGRPO_ZOO:
        assert e.checks and set(e.checks) <= set(CHECKS_ALL), e.name
        if e.wrap_calibration is None:
            assert issubclass(e.trainer_cls, DPTrainer) and e.trainer_cls not in (DPTrainer, LossHookTrainer)
        else:
            assert e.trainer_cls is DPTrainer and e.checks == ("accountant_reference",)


@pytest.mark.parametrize("check", DESIGNATED)
def test_reference_trainer_passes(reference, check):
    r = run(check, reference)
    assert r.status == "pass", r.message[:600]


# ------------------------------------------------------------------------------------------ the variants

def _closed_form_signature(name, check, r, b):
    """The measurement a defect must produce, where the zoo table or a closed form gives it."""
    o = r.observed
    if name == "shuffled_fixed_batches":                       # batch of round(0.2·6) = 1 of n = 6
        assert o["max_freq_error"] == pytest.approx(0.2 - 1 / 6, abs=0.012)
        assert o["max_offdiag_corr"] == pytest.approx(1 / (6 - 1), abs=0.035)   # corr = −1/(n − 1)
    elif name == "noise_sigma_only":                           # std σ/(q·n) instead of σ·C/(q·n), C = 0.25
        assert o["std_ratio"] == pytest.approx(4.0, rel=0.01)
    elif name == "per_tensor_clip":                            # the 1e12 record: each of k slices clipped to C
        k = sum(1 for p in b.model.parameters() if p.requires_grad)
        assert o["max_ratio_minus_one"] == pytest.approx(math.sqrt(k) - 1, rel=1e-9)
    elif name == "per_completion_clip":                        # G clipped pieces: ratio in (1, G]
        assert 0 < o["max_ratio_minus_one"] <= b.G - 1 + 1e-9
    elif name == "group_sum_loss" and check == "nonprivate_equivalence":   # step G times the flat step
        assert o["max_abs_param_diff"] == pytest.approx((b.G - 1) * o["flat_step_size"], rel=1e-9)
    elif name == "bias_corrected_kl":                          # ρ = 1 in value: the loss agrees, its gradient not
        assert o["max_abs_diff_value"] <= 1e-12 and o["max_abs_diff_grad"] > 1e-6
    elif name in ("batch_advantage_norm", "batch_token_norm") and check == "record_isolation":
        assert o["function_level_identical"] is True and o["trainer_level_identical"] is False
    elif name == "sigma_rounded_down":
        cal = o["calibration"]["math_eps8_reference"]
        assert cal["sigma"] == 0.484 and cal["eps_at_sigma"] > 8.0
    elif name == "reused_seeded_noise":
        assert o["noise_corr_within_run"] == pytest.approx(1.0, abs=1e-12)
    elif name == "skip_constant_groups":
        assert o["retained"] is False and o["adv_max_abs"] == 0.0
    elif name == "realised_batch_divisor":
        assert o["identical_across_batch_sizes"] is False
    elif name == "nonfinite_passthrough":
        assert o["nonfinite_cases_zeroed"] == 0


@pytest.mark.parametrize("entry,check", CASES, ids=[f"{e.name}-{c}" for e, c in CASES])
def test_variant_fails_designated_check(fixture, entry, check):
    b = entry.bindings(fast_bindings(fixture, entry.trainer_cls))
    assert b.target.endswith("." + entry.trainer_cls.__qualname__)
    r = run(check, b)
    assert r.status == "fail", (r.status, r.message[:600])
    _closed_form_signature(entry.name, check, r, b)


@pytest.mark.slow
def test_sigma_rounded_down_with_real_calibration(fixture):
    (entry,) = [e for e in DPGRPO_ZOO if e.name == "sigma_rounded_down"]
    good = fast_bindings(fixture, calibrate=plan_calibration)
    assert run("accountant_reference", good).status == "pass"
    r = run("accountant_reference", entry.bindings(good))
    assert r.status == "fail" and r.observed["calibration"]["math_eps8_reference"]["sigma"] == 0.484


# ------------------------------------------------------------------------------------------ the loss hook

def test_loss_hook_trainer_is_the_production_gradient(fixture):
    """The base of the eq. (7) variants differs from DPTrainer only by where its loss is looked up."""
    prod = fast_bindings(fixture)
    hook = fast_bindings(fixture, LossHookTrainer)
    for item in list(prod.items) + [prod.chunk_item]:
        assert torch.equal(hook.record_gradient(item), prod.record_gradient(item))
    for s in (None, 1, 3):
        lp, gp = prod.record_loss_and_grad(prod.chunk_item, s)
        lh, gh = hook.record_loss_and_grad(prod.chunk_item, s)
        assert torch.equal(gh, gp) and lh == pytest.approx(lp, rel=1e-14, abs=1e-15)
    assert all(torch.equal(a, c) for a, c in zip(hook.contributions(prod.items), prod.contributions(prod.items)))


@pytest.mark.parametrize("check", ["loss_reference", "nonprivate_equivalence", "record_isolation"])
def test_loss_hook_trainer_passes_the_checks_its_variants_fail(fixture, check):
    r = run(check, fast_bindings(fixture, LossHookTrainer))
    assert r.status == "pass", r.message[:600]


# ------------------------------------------------------------------------------------------ the user's accountant

class UnderReportingTrainer(DPTrainer):
    """Reports the ε of half its steps (epochs mistaken for steps): the claim is below the run's ε."""

    @property
    def privacy_claim(self):
        claim = super().privacy_claim
        half = self.plan.replace(steps=self.plan.steps // 2)
        return {**claim, "epsilon": half.epsilon().value}


def test_reference_and_under_reporting_accountant(fixture, reference):
    assert run("accountant_agreement", reference).status == "pass"
    r = run("accountant_agreement", fast_bindings(fixture, UnderReportingTrainer))
    assert r.status == "fail" and r.observed["gap"] < -r.tolerance["below_privcheck"], r.message
