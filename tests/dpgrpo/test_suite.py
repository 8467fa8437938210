"""The dpgrpo verification suite on the production `DPTrainer` (checks V1–V13 and the bug zoo of docs/dpgrpo.md).

`run_suite()` must pass every check V1–V12 on the float64 reference fixture, followed by V13 (the precision
preflight: V3, V6, V7, V8, V9 on the tiny Qwen2 in float32 and with a bfloat16 base), whose results carry their
precision and are never merged with the float64 ones. The broken `DPTrainer` subclasses of the bug zoo and the
checks they fail are in tests/bug_zoo/ (test_dpgrpo_zoo.py).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mechanisms.dpgrpo.verify import (
    PREFLIGHT,
    REFERENCE,
    preflight_fixture,
    preflight_setup,
    reference_fixture,
    reference_setup,
    run_suite,
)
from privcheck.checks import training
from privcheck.errors import InvalidParameter
from tests.bug_zoo.dpgrpo_variants import ClipPerChunk

SEED = 0


# ------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def suite_result():
    threads = torch.get_num_threads()
    result = run_suite(SEED)
    assert torch.get_num_threads() == threads  # the suite restores the thread setting
    return result


@pytest.fixture(scope="module")
def shared_fixture():
    R = REFERENCE
    return reference_fixture(n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"], L_max=R["L_max"], seed=SEED)


# ------------------------------------------------------------------------------------------ tests

def test_reference_trainer_passes_every_check(suite_result):
    assert suite_result.name == "dpgrpo" and suite_result.randomness == "seeded"
    float64 = [c for c in suite_result.checks if c.precision == "float64"]
    # the catalogue in order, none missing, then privcheck's self-check V12
    assert [c.name for c in float64] == list(training.CHECKS) + list(training.SELF_CHECKS)
    assert suite_result.checks[:len(float64)] == float64
    bad = {(c.name, c.precision): (c.status, c.message[:400]) for c in suite_result.checks if c.status != "pass"}
    assert bad == {}
    for c in float64:
        assert "not run" not in c.message and "not compared" not in c.message, (c.name, c.message)


def test_preflight_records_are_separate_per_precision(suite_result):
    """V13: five reruns per lower precision, named apart from the float64 checks, precision set."""
    rest = suite_result.checks[len(training.CHECKS) + len(training.SELF_CHECKS):]
    expect = [(f"precision_preflight.{p}.{name}", p)
              for p in ("float32", "bfloat16") for name in training.PREFLIGHT_CHECKS]
    assert [(c.name, c.precision) for c in rest] == expect
    assert not {c.name for c in rest} & (set(training.CHECKS) | set(training.SELF_CHECKS))
    for c in rest:
        assert c.to_json()["precision"] == c.precision and c.inputs["preflight_precision"] == c.precision
        assert "not run" not in c.message, (c.name, c.message)


def test_preflight_measurements_within_spec_tolerances(suite_result):
    by = {(c.name.split(".")[-1], c.precision): c for c in suite_result.checks if c.name.startswith("precision_")}
    for precision, v8_tol in (("float32", 1e-5), ("bfloat16", 5e-2)):
        v3 = by["sensitivity_add_remove", precision]
        assert v3.tolerance == {"max_ratio_minus_one": 1e-6} and v3.observed["max_ratio_minus_one"] <= 1e-6
        assert set(v3.observed["per_C"]) == {"C=0.7", "C_bind", "C_mix"}
        v8 = by["chunk_identity", precision]
        assert v8.tolerance["grad_and_clipped_relative_l2"] == v8_tol
        assert v8.observed["max_grad_rel_diff"] <= v8_tol
        assert isinstance(v8.observed["clip_decision_flips"], int) and v8.observed["clip_decision_flips"] >= 0
        assert by["record_isolation", precision].observed["trainer_level_identical"] is True
        assert by["constant_reward_groups", precision].observed["adv_max_abs"] == 0.0
        v9 = by["public_normalisation", precision]
        assert v9.inputs["ulp_dtype"] == "float32" and v9.observed["max_ulp_vs_public_divisor"] <= 2


def test_reference_measurements_are_informative(suite_result):
    by = {c.name: c.observed for c in suite_result.checks}
    agreement = by["accountant_agreement"]          # the trainer reports privcheck's own PLD through its plan
    assert agreement["gap"] == 0.0 and agreement["steps"] == REFERENCE["T"]
    v4 = by["nonprivate_equivalence"]
    assert v4["flat_step_size"] > 1e-6 and v4["max_abs_param_diff"] <= 1e-12
    v3 = by["sensitivity_add_remove"]
    assert set(v3["per_C"]) == {"C=0.7", "C_bind", "C_mix"}  # record_gradient bound: all three clip norms run
    v7 = by["constant_reward_groups"]
    assert v7["reference_case_zero"] is True and v7["grad_norm"] > 0
    assert by["record_isolation"]["perturbation_changes_j"] is True


def test_claim_matches_fixture_parameters(suite_result):
    from privcheck.accounting import PoissonGaussianEvent, epsilon

    (claim,) = suite_result.claims
    R = REFERENCE
    q, delta = R["m"] / R["n"], 1 / (10 * R["n"])
    assert claim.parameters["q"] == q and claim.parameters["sigma"] == R["sigma"]
    assert claim.parameters["T"] == R["T"] and claim.delta == delta
    # RDP (an independent, looser accountant) upper-bounds the PLD ε; both finite and positive.
    event = PoissonGaussianEvent(q, R["sigma"], R["T"])
    assert claim.epsilon == epsilon(event, delta).value            # the plan's ε, from the fixture's event
    rdp = float(epsilon(event, delta, method="rdp").value)
    assert 0 < claim.epsilon <= rdp + 1e-6 and math.isfinite(rdp)


def test_bindings_use_production_entry_points(shared_fixture):
    trainer, b = reference_setup(SEED, fixture=shared_fixture)
    assert b.contributions == trainer.contributions
    assert b.model is trainer.model and b.target == "mechanisms.dpgrpo.trainer.DPTrainer"
    # a replica with another C clips through the production clip: closed form v·C/‖v‖ when ‖v‖ > C
    v = torch.full((b.dim,), 1.0, dtype=torch.float64)
    torch.testing.assert_close(b.clip(v, 0.5), v * (0.5 / math.sqrt(b.dim)), rtol=1e-15, atol=0)
    # clipped_sum at C equals Σ of the closed-form clips of the record gradients
    items = list(b.items)[:3]
    expect = sum(g * min(1.0, 0.01 / float(torch.linalg.vector_norm(g)))
                 for g in (b.record_gradient(it) for it in items))
    torch.testing.assert_close(b.clipped_sum(items, 0.01), expect, rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------------------------------ V13

@pytest.fixture(scope="module")
def float32_fixture():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)   # as run_suite does: the checks' bit-identity tests assume deterministic kernels
    torch.use_deterministic_algorithms(True)
    R = PREFLIGHT
    yield preflight_fixture("float32", n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"], L_max=R["L_max"],
                            seed=SEED)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def test_preflight_fixture_precisions():
    """float32 base and LoRA; bfloat16 base with float32 LoRA; every dropout 0; no other precision."""
    for precision, base in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model = preflight_fixture(precision, n_records=1)[0]
        assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
        assert {p.dtype for p in model.parameters() if not p.requires_grad} == {base}
        training.assert_no_dropout(model)
    with pytest.raises(InvalidParameter, match="precision"):
        preflight_fixture("float16")


def test_preflight_rejects_bad_input_before_running(float32_fixture):
    _, b = preflight_setup("float32", SEED, fixture=float32_fixture)
    calls = []
    spy = dataclasses.replace(b, clipped_sum=lambda *a, **k: calls.append(a))
    with pytest.raises(InvalidParameter, match="precision"):
        training.precision_preflight(spy, "float16")
    with pytest.raises(InvalidParameter, match="precision"):   # float32 bindings declared as bfloat16
        training.precision_preflight(spy, "bfloat16")
    with pytest.raises(InvalidParameter, match="v3_options"):
        training.precision_preflight(spy, "float32", v3_options={"tol": 1.0})
    assert calls == []


def test_preflight_catches_clipping_per_chunk_in_float32(float32_fixture):
    """V13 can fail: the clip-per-chunk variant (tests/bug_zoo) fails the float32 V8 and nothing else."""
    _, b = preflight_setup("float32", SEED, ClipPerChunk, fixture=float32_fixture)
    results = training.precision_preflight(b, "float32",
                                           v3_options={"n_gradient_records": 2, "clip_norms": ("C_bind",)})
    status = {r.name: r.status for r in results}
    assert status.pop("precision_preflight.float32.chunk_identity") == "fail"
    assert set(status.values()) == {"pass"}, status
