"""Micro-batched DP-GRPO trainers (tests/bug_zoo/micro_batch_variants.py; docs/whole_step.md, "Micro-batching").

A correct trainer may call `contributions` several times per step (micro-batches of 1 or 2 items, in any order, with
the items rebuilt) or accumulate the micro-batch sums in its own buffers: it computes Σ_i clip_C(g_i) exactly as
`DPTrainer` does. Such trainers must pass all five whole-step checks and give the Dirac canary audit the same power
as the plain trainer; the same patterns written wrongly must still be caught.

Expected values come from the definition, not from the code under test: with C = 0.2 below every fixture record's
gradient norm every clipped contribution has norm C and the sensitivity ratio is 1 (docs/whole_step.md, "The
reference DPTrainer"); a Dirac canary's pre-clip norm is C (its gradient is C·e_j); and since real records are masked
on the reserved coordinates J, U_t[J] = Σ(included canaries' C·e_j)[J] + z_t[J] does not depend on how the sum is
split, so the audit's scores at one seed are the plain trainer's bit for bit (a tolerance of zero, declared here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.whole_step import WHOLE_STEP_LAYOUT, whole_step_bindings, whole_step_fixture
from privcheck.checks.training import SuiteBindings
from privcheck.checks.whole_step import WHOLE_STEP_CHECKS
from privcheck.errors import CanariesNotObserved
from tests.bug_zoo.micro_batch_variants import (
    CORRECT_VARIANTS,
    AccumulatedGradSum,
    AccumulateInDotGrad,
    CopiedRecords,
    micro_batched,
)
from tests.conftest import steinke_only_audits

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["step_sensitivity", "step_public_outputs", "step_noise", "step_record_isolation", "step_poisson_sampling"]
FAST = {"step_sensitivity": {"seeds": 3}, "step_public_outputs": {"seeds": 3}, "step_poisson_sampling": {"runs": 32}}
C = WHOLE_STEP_LAYOUT["C"]


@pytest.fixture(scope="module")
def fixture():
    return whole_step_fixture(0)


def test_variants_are_distinct_micro_batched_trainers():
    assert len({cls.__name__ for cls in CORRECT_VARIANTS}) == len(CORRECT_VARIANTS) == 5
    for cls in CORRECT_VARIANTS:      # DPTrainer's own step and contributions, called per micro-batch
        assert issubclass(cls, DPTrainer) and cls.step is DPTrainer.step
        assert cls.contributions is DPTrainer.contributions
        assert cls.clipped_sum is not DPTrainer.clipped_sum or cls.noisy_update is not DPTrainer.noisy_update


# one micro-batched shape in make test, the others in the slow tier (≈ 7 s each on 2 cores)
@pytest.mark.parametrize("cls", [c if k == 0 else pytest.param(c, marks=pytest.mark.slow)
                                 for k, c in enumerate(CORRECT_VARIANTS)], ids=lambda c: c.__name__)
def test_correct_micro_batched_trainer_passes_every_whole_step_check(fixture, cls):
    b = SuiteBindings(whole_step=whole_step_bindings(fixture, cls), precision="float64")
    results = {name: WHOLE_STEP_CHECKS[name](b, **FAST.get(name, {})) for name in NAMES}
    for name, r in results.items():
        assert r.status == "pass", (name, r.message[:600])
    sens = results["step_sensitivity"].observed
    assert sens["empty_batch_case"] and sens["full_batch_case"]
    assert abs(sens["worst_ratio"] - 1) < 1e-9                  # every contribution clipped to C: the bound is tight
    iso = results["step_record_isolation"].observed
    assert iso["bit_identical"]
    assert all(set(r["fields"]) == {"clipped", "kl", "loss", "scores"} for r in iso["records"].values())


def _full_batch_seed(ws, n_slots, limit=64):
    """A seed whose step samples every slot of the full universe (found by running it)."""
    full = list(ws.records) + [ws.addition]
    for s in range(limit):
        run = ws.build(full, s)
        run.step()
        if run.sampled() == list(range(n_slots)):
            return s
    raise AssertionError(f"no seed below {limit} samples all {n_slots} slots")  # pragma: no cover


@pytest.mark.parametrize("cls", [micro_batched(1), micro_batched(2), AccumulatedGradSum], ids=lambda c: c.__name__)
def test_per_record_holds_every_slot_of_a_micro_batched_step(fixture, cls):
    """`per_record` after one step with every slot sampled: one entry per slot, each clipped contribution of norm C
    (assembled from several `contributions` calls), and the same entries as the plain trainer's at that seed."""
    plain_ws, ws = whole_step_bindings(fixture), whole_step_bindings(fixture, cls)
    full = list(ws.records) + [ws.addition]
    seed = _full_batch_seed(plain_ws, len(full))
    plain, run = plain_ws.build(full, seed), ws.build(full, seed)
    plain.step()
    run.step()
    got, ref = run.per_record(), plain.per_record()
    assert sorted(got) == sorted(ref) == list(range(len(full)))
    for slot, entry in got.items():
        assert abs(float(torch.linalg.vector_norm(entry["clipped"])) - C) < 1e-12
        assert torch.equal(entry["clipped"], ref[slot]["clipped"]) and torch.equal(entry["scores"], ref[slot]["scores"])
        assert entry["loss"] == ref[slot]["loss"] and entry["kl"] == ref[slot]["kl"]


def test_accumulating_in_dot_grad_is_caught(fixture):
    """The near miss: micro-batch sums accumulated in `.grad`, which the next micro-batch's per-record gradient pass
    zeroes and refills, so the released sum is not Σ clip_C(g_i) and exceeds the sensitivity bound."""
    b = SuiteBindings(whole_step=whole_step_bindings(fixture, AccumulateInDotGrad), precision="float64")
    r = WHOLE_STEP_CHECKS["step_sensitivity"](b, cases=("add",), seeds=3)
    assert r.status == "fail", r.message[:600]
    assert r.observed["worst_ratio"] > 1.1


# ------------------------------------------------------------------------------------------ the canary audit

SEED = 20260917
AUDIT = dict(canaries=500, rounds=4, q=1.0, C=4.0, target_epsilon=2.0, n_real=4)   # tests/bug_zoo/test_dpgrpo_audits


def _audit(trainer_cls):
    from audits.dpgrpo.gradient_canary import run_gradient_canary_audit
    return run_gradient_canary_audit(preset="tiny-cpu", seed=SEED, trainer_cls=trainer_cls, plan_sims=50, **AUDIT)


@pytest.fixture(scope="module")
def plain_audit():
    with steinke_only_audits():         # the audit's power is compared here; its second bound is tested elsewhere
        return _audit(DPTrainer)


@pytest.mark.parametrize("cls", [micro_batched(1), pytest.param(AccumulatedGradSum, marks=pytest.mark.slow)],
                         ids=lambda c: c.__name__)
def test_canary_audit_of_a_micro_batched_trainer_has_the_plain_power(plain_audit, cls, steinke_only):
    """Same seed, same coins and noise: the frozen scores (and so ε_lower) equal the plain trainer's bit for bit
    (declared tolerance 0, module docstring). The plain bound is positive at this seed, so the micro-batched one is
    too; before the slot fix the micro-batched canaries were masked as real records (ε_lower 0.00, AUROC 0.49)."""
    res = _audit(cls)
    assert plain_audit.eps_lower > 0
    np.testing.assert_array_equal(res.scores, plain_audit.scores)
    assert res.eps_lower == plain_audit.eps_lower
    assert res.report.diagnostics["auroc"] == plain_audit.report.diagnostics["auroc"] > 0.6
    d = res.report.diagnostics
    assert d["canary_pre_clip_norm_min"] == d["canary_pre_clip_norm_max"] == AUDIT["C"]   # ‖C·e_j‖ = C
    assert d["cross_talk_max_abs_over_sigma_C"] == 0.0                                 # real records masked on J


def test_canary_audit_refuses_a_trainer_that_loses_the_canary_slots():
    """Copied records match no slot: the canaries are taken for real records and masked on J, so the audit cannot
    see them. It says so (CanariesNotObserved naming the included canaries without a pre-clip norm) instead of
    reporting ε_lower = 0."""
    with pytest.raises(CanariesNotObserved) as err:
        _audit(CopiedRecords)
    assert "pre-clip norm of included canaries" in err.value.what and "round 1" in err.value.what
    assert "contributions" in err.value.why
