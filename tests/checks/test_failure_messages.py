"""A failed check says which quantity failed, its value and its bound; a check that cannot observe something fails
as "cannot observe X: reason"; a raising user callable is an error that names the binding and the function that
raised (privcheck.checks.common, docs/integrations/opacus.md, "Messages")."""

from __future__ import annotations

import dataclasses
import re

import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest
import torch

from privcheck.accounting import PoissonGaussianEvent, epsilon
from privcheck.checks import training
from privcheck.checks.catalogue import run_suite
from privcheck.integrations.opacus import bindings_for
from tests.checks import reference_bindings as rb
from tests.integrations.opacus_fixture import tiny_run

# (variant, check, options, quantity named in the message, a regex of its value, the bound's text)
RECORD_LEVEL = [
    (rb.NonfinitePassthrough, "clip_contract", {}, "nonfinite_cases_zeroed", r"[0-3] of 4", "4 of 4"),
    (rb.RealisedBatchDivisor, "public_normalisation", {}, "max_ulp_vs_public_divisor", r"[0-9.e+]+", "≤ 2"),
    (rb.NoiseSigmaOnly, "noise_calibration", {}, "std_ratio", r"[0-9.]+", "1 ± 0.01"),
    (rb.ShuffledFixedBatches, "poisson_sampling", {}, "max_freq_error", r"0\.0[0-9]+", "< 0.012"),
    (rb.BatchAdvantageNorm, "record_isolation", {}, "trainer_level_identical", r"False", "True"),
    (rb.ReusedSeededNoise, "fresh_randomness", {}, "", r"\S+", ""),
    (rb.PerCompletionClip, "sensitivity_add_remove",
     {"n_base": 3, "n_gradient_records": 3, "clip_norms": ("C_bind",)}, "max_ratio_minus_one", r"[0-9.e+-]+",
     "≤ 1e-10"),
    (rb.SkipConstantGroups, "constant_reward_groups", {}, "", r"\S+", ""),
    (rb.GroupSumLoss, "loss_reference", {}, "max_rel_diff", r"[0-9.e+-]+", "≤ "),
    (rb.GroupSumLoss, "nonprivate_equivalence", {}, "max_abs_param_diff", r"[0-9.e+-]+", "≤ "),
    (rb.ClipPerChunk, "chunk_identity", {}, "", r"\S+", ""),
]


def _named(message: str, quantity: str, value: str, bound: str) -> bool:
    """`message` holds "quantity…: value (bound: …bound…)" for the given parts."""
    pattern = re.escape(quantity) + r"[^:;]*: " + value + r"[^;]*?\(bound: [^)]*" + re.escape(bound)
    return re.search(pattern, message) is not None


@pytest.mark.parametrize("variant, check, options, quantity, value, bound", RECORD_LEVEL,
                         ids=[f"{v.__name__}-{c}" for v, c, *_ in RECORD_LEVEL])
def test_record_level_failures_name_quantity_value_and_bound(variant, check, options, quantity, value, bound):
    b = variant().bindings(with_accountant=False)
    if check == "sensitivity_add_remove":
        b = dataclasses.replace(b, additions=list(b.additions)[:4])
    r = training.CHECKS[check](b, **options)
    assert r.status == "fail", (r.status, r.message)
    assert "{" not in r.message, r.message                    # no raw dict
    assert _named(r.message, quantity, value, bound), r.message


def test_opacus_clip_contract_message():
    engine, model, opt, loader, step = tiny_run()
    r = run_suite(bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3), checks=["clip_contract"])[0]
    assert r.status == "fail"
    assert r.message == "nonfinite_cases_zeroed: 1 of 4 (bound: 4 of 4)"


def test_accountant_under_report_message():
    event = PoissonGaussianEvent(0.5, 1.0, 20)
    low = 0.9 * epsilon(event, 1e-5).value
    b = training.SuiteBindings(accountant_event=event, delta=1e-5, user_epsilon=low)
    r = training.check_accountant_agreement(b)
    assert r.status == "fail"
    assert _named(r.message, "user_epsilon", re.escape(repr(low)), "≥ ")


@pytest.mark.parametrize("bug, check, quantity", [
    ({"realised": True}, "step_sensitivity", "‖Δĝ‖·divisor/C"),
    ({"realised": True}, "step_noise", "std of ĝ is"),
    ({"plain_loader": True}, "step_poisson_sampling", "inclusion of record"),
])
def test_whole_step_failures_name_quantity_value_and_bound(bug, check, quantity):
    engine, model, opt, loader, step = tiny_run(**bug)
    r = run_suite(bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=3), checks=[check])[0]
    assert r.status == "fail", r.message
    assert quantity in r.message and "bound: " in r.message, r.message


def test_leaking_telemetry_names_the_field_and_the_bound():
    engine, model, opt, loader, step = tiny_run()

    def leaky(batch):
        step(batch)
        return {"batch_size": len(batch[0])}      # the realised batch size: private

    r = run_suite(bindings_for(engine, model, opt, loader, leaky, delta=1e-5, steps=3),
                  checks=["step_public_outputs"])[0]
    assert r.status == "fail"
    assert re.search(r"telemetry\.batch_size: \d+ vs \d+ in \d+/\d+ trials", r.message), r.message
    assert "(bound: identical on neighbours once ĝ is fixed)" in r.message


# ------------------------------------------------------------------------------------ cannot observe, errors

def test_a_step_that_never_updates_cannot_be_observed():
    """train_step forgets optimizer.step(): the checks that read ĝ fail as "cannot observe", they do not error."""
    engine, model, opt, loader, _ = tiny_run()

    def no_step(batch):
        x, y = batch
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()

    b = bindings_for(engine, model, opt, loader, no_step, delta=1e-5, steps=3)
    for r in run_suite(b, checks=["public_normalisation", "noise_calibration", "record_isolation"]):
        assert r.status == "fail", (r.name, r.status, r.message)
        assert r.message.startswith("cannot observe the noisy update ĝ: train_step(batch) returned without"), \
            r.message
        assert r.observed["cannot_observe"] == "the noisy update ĝ"


def test_a_raising_train_step_is_an_error_naming_it():
    engine, model, opt, loader, step = tiny_run()

    def train_step(batch):
        if len(batch[0]) > 1:
            raise TypeError("user bug on batches of more than one record")
        step(batch)

    r = run_suite(bindings_for(engine, model, opt, loader, train_step, delta=1e-5, steps=3),
                  checks=["record_isolation"])[0]
    assert r.status == "error"
    assert r.message.startswith("binding contributions raised TypeError: user bug on batches of more than one "
                                "record (in train_step at "), r.message
    assert __file__ in r.message and "Traceback" not in r.message
    assert "Traceback" in r.observed["traceback"]


def test_binding_with_the_wrong_shape_cannot_be_observed():
    b = training.SuiteBindings(sample=lambda n, q: torch.zeros(n + 1, dtype=torch.bool))
    r = training.check_poisson_sampling(b, calls=10)
    assert r.status == "fail"
    assert r.message == f"cannot observe the coins of sample(n, q): it returned shape ({6 + 1},), not (6,)"
