"""The dpgrpo verification suite on the production `DPTrainer` (spec shared/spec/dpgrpo.md §7, §8).

`run_suite()` must pass every check V1–V12 on the float64 reference fixture; broken `DPTrainer` subclasses, each
overriding ONE production method with a bug-zoo defect (§8 table), bound through `bindings_for`, must fail their
designated check. The defects are written here from the bug descriptions, not from the check code.
"""

from __future__ import annotations

import math

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.records import GradientRecord
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import REFERENCE, reference_fixture, reference_setup, run_suite
from privcheck.checks import dpsgd

SEED = 0


# ------------------------------------------------------------------------------------------ bug zoo

def _chunk_gradients(trainer, record, group, chunk_size):
    """Per-chunk gradients of eq. (7) (each chunk's share of ℓ_i, summing to the record gradient)."""
    ctx = trainer.ctx
    adv = trainer.arm.advantages(group.rewards, ctx.c)
    prompt = ctx.prompt_ids(record)
    out = []
    for S in ctx.chunks(group.G, chunk_size):
        ctx.space.zero_grad()
        with torch.no_grad(), ctx.reference():
            ref = ctx.logprobs(ctx.model, prompt, group.token_ids[S])
        logp = ctx.logprobs(ctx.model, prompt, group.token_ids[S])
        core.prompt_loss(logp, ref, group.mask[S], adv, ctx.beta, rollout_slice=S).backward()
        out.append(core.flatten_grads(ctx.space))
    ctx.space.zero_grad()
    return out


class RealisedBatchDivisor(DPTrainer):
    """Divides by the realised batch size instead of the public q·n."""

    def noisy_update(self, items):
        items = list(items)
        S = self.clipped_sum(items)
        cfg = self.config
        z = 0 if cfg.sigma == 0 else torch.randn(S.shape, generator=self.randomness.noise, dtype=S.dtype) * (
            cfg.sigma * cfg.C)
        return (S + z) / max(1, len(items))


class NoiseSigmaOnly(DPTrainer):
    """z ~ N(0, σ²I) instead of N(0, σ²C²I)."""

    def privatize(self, S):
        cfg = self.config
        z = torch.randn(S.shape, generator=self.randomness.noise, dtype=S.dtype) * cfg.sigma
        return (S + z) / (cfg.q * cfg.n)


class _ClipPieces(DPTrainer):
    """Clips pieces of a prompt's gradient (chunks of `piece_size` rollouts) and sums them."""

    piece_size = None   # None: the configured chunk_size

    def contributions(self, items):
        out = []
        for item in items:
            rec, group = self._unpack(item)
            if group is None:
                out.append(self.clip(self.record_gradient(rec)))
            else:
                out.append(sum(self.clip(g) for g in _chunk_gradients(self, rec, group, self.piece_size)))
        return out


class ClipPerChunk(_ClipPieces):
    """Clips each rollout chunk (config.chunk_size) before accumulating."""


class PerCompletionClip(_ClipPieces):
    """Each completion's gradient clipped to C, then summed."""

    piece_size = 1


class SkipConstantGroups(DPTrainer):
    """Drops records whose group rewards are constant."""

    def contributions(self, items):
        keep = [it for it in items if isinstance(it, GradientRecord) or it[1] is None
                or not bool((it[1].rewards == it[1].rewards[0]).all())]
        return super().contributions(keep)


class ShuffledFixedBatches(DPTrainer):
    """Shuffles the slots and takes a fixed batch of round(q·n)."""

    def sample_coins(self):
        n = self.config.n
        perm = torch.randperm(n, generator=self.randomness.coins)
        out = torch.zeros(n, dtype=torch.bool)
        out[perm[:max(1, round(self.config.q * n))]] = True
        return out


class ReusedSeededNoise(DPTrainer):
    """Re-seeds the noise generator with a fixed seed at every draw."""

    def privatize(self, S):
        cfg = self.config
        return core.privatize(S, cfg.sigma, cfg.C, cfg.q, cfg.n, torch.Generator().manual_seed(42),
                              nonprivate=self.nonprivate)


ZOO = [
    (RealisedBatchDivisor, dpsgd.check_public_normalisation, "identical_across_batch_sizes"),
    (NoiseSigmaOnly, dpsgd.check_noise_calibration, "std_ratio"),
    (ClipPerChunk, dpsgd.check_chunk_identity, None),
    (PerCompletionClip, dpsgd.check_sensitivity_add_remove, "max_ratio_minus_one"),
    (SkipConstantGroups, dpsgd.check_constant_reward_groups, "retained"),
    (ShuffledFixedBatches, dpsgd.check_poisson_sampling, "max_freq_error"),
    (ReusedSeededNoise, dpsgd.check_fresh_randomness, "noise_corr_within_run"),
]


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
    names = [c.name for c in suite_result.checks]
    assert names == list(dpsgd.CHECKS)  # V1–V12, in order, none missing
    bad = {c.name: (c.status, c.message[:400]) for c in suite_result.checks if c.status != "pass"}
    assert bad == {}
    for c in suite_result.checks:
        assert c.precision == "float64"
        assert "not run" not in c.message and "not compared" not in c.message, (c.name, c.message)


def test_reference_measurements_are_informative(suite_result):
    by = {c.name: c.observed for c in suite_result.checks}
    v4 = by["nonprivate_equivalence"]
    assert v4["flat_step_size"] > 1e-6 and v4["max_abs_param_diff"] <= 1e-12
    v3 = by["sensitivity_add_remove"]
    assert set(v3["per_C"]) == {"C=0.7", "C_bind", "C_mix"}  # record_gradient bound: all three clip norms run
    v7 = by["constant_reward_groups"]
    assert v7["reference_case_zero"] is True and v7["grad_norm"] > 0
    assert by["record_isolation"]["perturbation_changes_j"] is True


def test_claim_matches_fixture_parameters(suite_result):
    from privcheck.accounting import epsilon_rdp

    (claim,) = suite_result.claims
    R = REFERENCE
    q, delta = R["m"] / R["n"], 1 / (10 * R["n"])
    assert claim.parameters["q"] == q and claim.parameters["sigma"] == R["sigma"]
    assert claim.parameters["T"] == R["T"] and claim.delta == delta
    # RDP (an independent, looser accountant) upper-bounds the PLD ε; both finite and positive.
    rdp = float(epsilon_rdp(q, R["sigma"], R["T"], delta).value)
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


@pytest.mark.parametrize("cls,check,key", ZOO, ids=[z[0].__name__ for z in ZOO])
def test_broken_trainer_fails_designated_check(shared_fixture, cls, check, key):
    _, b = reference_setup(SEED, cls, fixture=shared_fixture)
    assert b.target.endswith(cls.__name__)
    res = check(b, "float64")
    assert res.status == "fail", (res.status, res.message[:600])
    if key is not None:
        assert key in res.observed
