"""The DP-GRPO bug zoo (docs/dpgrpo.md, "The bug zoo"): deliberately broken variants of `DPTrainer`.

Each trainer row of the zoo table is a subclass of `DPTrainer` that overrides ONE method with one defect, written
from the defect's description, not from the check that catches it. Defects inside eq. (7) override
`prompt_loss` of `LossHookTrainer`, a `DPTrainer` whose record gradient goes through its own `prompt_loss`
method (the method `mechanisms.dpgrpo.verify.bindings_for` binds V1 to); with the default loss it computes the
production gradient bit for bit (tested in test_dpgrpo_zoo.py). The accountant row `sigma_rounded_down` is a
wrapper of the calibration function, passed through the bindings.

`DPGRPO_ZOO` lists the fourteen rows with their designated checks (keys of `privcheck.checks.training.CHECKS`), so
that the zoo test and later audits run on the same variants. Test code only: never train with these.

Canary-aware: a variant whose defect lies elsewhere keeps the trainer's public slot count `n_slots` (n + m_c) and
divisor `divisor` (q·(n + m_c)), so the canary audits (audits/dpgrpo/gradient_canary.py, audits/dpgrpo/input_canary.py)
run on every variant unmodified; without canary slots these are n and q·n, as before.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.record_grads import GRPOGradient
from mechanisms.dpgrpo.records import GradientRecord
from mechanisms.dpgrpo.trainer import DPTrainer

# ------------------------------------------------------------------------------------------ helpers

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


class LossHookTrainer(DPTrainer):
    """A `DPTrainer` whose eq. (7) goes through its own `prompt_loss(logp, ref_logp, mask, advantages, beta,
    rollout_slice)` method, and whose loss can see the batch's total completion-token count `batch_tokens`
    (set by `contributions` for the items of one call, else the record's own tokens), as TRL's `compute_loss`
    sees `num_items_in_batch`. Not a defect: with the default `prompt_loss` its gradients equal
    `DPTrainer`'s bit for bit; the loss-defect variants below override `prompt_loss` only."""

    batch_tokens: int | None = None

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta, rollout_slice=None):
        return core.prompt_loss(logp, ref_logp, mask, advantages, beta, rollout_slice)

    def _loss_and_grad(self, record, group, chunk_size):
        """The arm's chunked backward (zero .grad, own advantages, π_ref under no_grad, backward per chunk,
        flatten), with `self.prompt_loss` in place of `core.prompt_loss`."""
        if isinstance(record, GradientRecord) or group is None:
            rg = self.arm(self.ctx, record, group)
            return rg.private.get("loss", 0.0), rg.grad
        ctx = self.ctx
        own_batch = self.batch_tokens is None
        if own_batch:
            self.batch_tokens = int(group.mask.sum())
        try:
            ctx.space.zero_grad()
            adv = self.arm.advantages(group.rewards, ctx.c)
            prompt = ctx.prompt_ids(record)
            ids, mask = group.token_ids.to(ctx.device), group.mask.to(ctx.device)
            total = 0.0
            for S in ctx.chunks(group.G, chunk_size):
                with torch.no_grad(), ctx.reference():
                    ref = ctx.logprobs(ctx.model, prompt, ids[S])
                logp = ctx.logprobs(ctx.model, prompt, ids[S])
                loss = self.prompt_loss(logp, ref, mask[S], adv, ctx.beta, rollout_slice=S)
                loss.backward()
                total += float(loss.detach())
            grad = core.flatten_grads(ctx.space)
            ctx.space.zero_grad()
            return total, grad
        finally:
            if own_batch:
                self.batch_tokens = None

    def record_gradient(self, record, group=None, *, chunk_size=None):
        return self._loss_and_grad(record, group, chunk_size)[1]

    def record_loss_and_grad(self, record, group=None, chunk_size=None):
        return self._loss_and_grad(record, group, chunk_size)

    def contributions(self, items, *, slots=None):
        items = list(items)
        groups = [self.unpack(it)[1] for it in items]
        self.batch_tokens = sum(int(g.mask.sum()) for g in groups if g is not None)
        try:
            return super().contributions(items, slots=slots)
        finally:
            self.batch_tokens = None


def _eq7_pieces(logp, ref_logp, mask, advantages, rollout_slice):
    """(ρ, A_S, K, m) of eq. (7) for the rows of `rollout_slice` (logp has exactly those rows)."""
    S = slice(0, advantages.shape[0]) if rollout_slice is None else rollout_slice
    adv = advantages[S].detach().to(logp.dtype)
    rho = torch.exp(logp - logp.detach())
    return rho, adv, core.k3_kl(logp, ref_logp.detach()), mask.to(logp.dtype)


# ------------------------------------------------------------------------------------------ trainer variants

class _BatchWhitenedArm(GRPOGradient):
    """The GRPO arm with advantages (r − μ_B)/(s_B + c) from statistics μ_B, s_B of a whole batch."""

    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def advantages(self, rewards, c=core.DEFAULT_C_ADV):
        return (rewards.to(torch.float64) - self.mean) / (self.std + c)


class BatchAdvantageNorm(DPTrainer):
    """Advantages normalised with the mean and std of the rewards of all sampled prompts (whitening across
    prompts) instead of within each prompt's group."""

    def contributions(self, items, *, slots=None):
        pairs = [self.unpack(it) for it in items]
        rewards = [g.rewards.to(torch.float64) for _, g in pairs if g is not None]
        if not rewards:
            return super().contributions(items, slots=slots)
        allr = torch.cat(rewards)
        arm = _BatchWhitenedArm(allr.mean(), allr.std())
        return [self.clip(arm(self.ctx, rec, group).grad) for rec, group in pairs]


class _ClipPieces(DPTrainer):
    """Clips pieces of a prompt's gradient (chunks of `piece_size` rollouts) and sums them."""

    piece_size = None   # None: the configured chunk_size

    def contributions(self, items, *, slots=None):
        out = []
        for item in items:
            rec, group = self.unpack(item)
            if group is None:
                out.append(self.clip(self.record_gradient(rec)))
            else:
                out.append(sum(self.clip(g) for g in _chunk_gradients(self, rec, group, self.piece_size)))
        return out


class PerCompletionClip(_ClipPieces):
    """Each completion's gradient clipped to C, then summed."""

    piece_size = 1


class ClipPerChunk(_ClipPieces):
    """Clips each rollout chunk (config.chunk_size) before accumulating."""


class RealisedBatchDivisor(DPTrainer):
    """Divides by the realised batch size (canary slots included) instead of the public q·(n + m_c)."""

    def noisy_update(self, items):
        items = list(items)
        S = self.clipped_sum(items)
        cfg = self.config
        z = 0 if cfg.sigma == 0 else torch.randn(S.shape, generator=self.randomness.noise, dtype=S.dtype) * (
            cfg.sigma * cfg.C)
        return (S + z) / max(1, len(items))


class ShuffledFixedBatches(DPTrainer):
    """Shuffles the n + m_c slots and takes a fixed batch of round(q·(n + m_c))."""

    def sample_coins(self):
        n = self.n_slots
        perm = torch.randperm(n, generator=self.randomness.coins)
        out = torch.zeros(n, dtype=torch.bool)
        out[perm[:max(1, round(self.config.q * n))]] = True
        return out


class NoiseSigmaOnly(DPTrainer):
    """z ~ N(0, σ²I) instead of N(0, σ²C²I)."""

    def privatize(self, S):
        cfg = self.config
        z = torch.randn(S.shape, generator=self.randomness.noise, dtype=S.dtype) * cfg.sigma
        return (S + z) / self.divisor


class SkipConstantGroups(DPTrainer):
    """Drops records whose group rewards are constant."""

    def contributions(self, items, *, slots=None):
        items = list(items)
        if slots is None and self._round_slots is not None and len(self._round_slots) == len(items):
            slots = self._round_slots        # the round's slot indices, so kept canaries stay canaries
        keep = [k for k, it in enumerate(items) if isinstance(it, GradientRecord) or it[1] is None
                or not bool((it[1].rewards == it[1].rewards[0]).all())]
        return super().contributions([items[k] for k in keep],
                                     slots=None if slots is None else [slots[k] for k in keep])


class ReusedSeededNoise(DPTrainer):
    """Re-seeds the noise generator with a fixed seed at every draw."""

    def privatize(self, S):
        cfg = self.config
        return core.privatize(S, cfg.sigma, cfg.C, cfg.q, self.n_slots, torch.Generator().manual_seed(42),
                              nonprivate=self.nonprivate)


class BatchTokenNorm(LossHookTrainer):
    """Divides the summed token losses by the completion-token count of the whole batch (TRL 1.x
    `loss_type="dapo"`) instead of the per-completion token mean followed by the mean over G."""

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta, rollout_slice=None):
        rho, adv, K, m = _eq7_pieces(logp, ref_logp, mask, advantages, rollout_slice)
        tokens = self.batch_tokens if self.batch_tokens is not None else float(m.sum())
        return -((rho * adv[:, None] - beta * K) * m).sum() / tokens


class PerTensorClip(DPTrainer):
    """Clips each LoRA tensor's gradient separately to C instead of the concatenation of all of them."""

    def clip(self, v):
        parts = torch.split(v, list(self.space.numels))
        return torch.cat([core.clip_flat(p, self.config.C, nonprivate=self.nonprivate) for p in parts])


class BiasCorrectedKL(LossHookTrainer):
    """Multiplies the k3 KL term by the importance ratio ρ (TRL 1.x `use_bias_correction_kl=True`)."""

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta, rollout_slice=None):
        rho, adv, K, m = _eq7_pieces(logp, ref_logp, mask, advantages, rollout_slice)
        per_completion = ((rho * adv[:, None] - beta * rho * K) * m).sum(dim=1) / m.sum(dim=1)
        return -per_completion.sum() / advantages.shape[0]


class NonfinitePassthrough(DPTrainer):
    """Lets a record gradient with a NaN/±inf entry (or an infinite norm) through the clip unchanged."""

    def clip(self, v):
        if not bool(torch.isfinite(v).all()) or not math.isfinite(float(torch.linalg.vector_norm(v.double()))):
            return v.clone()
        return super().clip(v)


class GroupSumLoss(LossHookTrainer):
    """Sums the G completion losses instead of averaging them."""

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta, rollout_slice=None):
        return super().prompt_loss(logp, ref_logp, mask, advantages, beta, rollout_slice) * advantages.shape[0]


# ------------------------------------------------------------------------------------------ accountant variant

def sigma_rounded_down(calibrate: Callable) -> Callable:
    """Wraps a calibration `calibrate(q, T, delta, target_eps)` so that it stores σ rounded down to 3 decimals."""
    def wrapped(q, T, delta, target):
        c = calibrate(q, T, delta, target)
        return math.floor(float(getattr(c, "value", c)) * 1000) / 1000
    return wrapped


# ------------------------------------------------------------------------------------------ the zoo

@dataclass(frozen=True)
class ZooEntry:
    """One row of the bug-zoo table: a `DPTrainer` subclass (`trainer_cls`) or, for accountant rows, a
    wrapper of `calibrate_sigma` (`wrap_calibration`, with `trainer_cls = DPTrainer`), and the checks that
    must fail on it (names of `privcheck.checks.training.CHECKS`)."""

    name: str
    defect: str
    checks: tuple[str, ...]
    trainer_cls: type = DPTrainer
    wrap_calibration: Callable | None = None

    def bindings(self, bindings):
        """`bindings` of a `trainer_cls` trainer with the accountant wrapper applied (if any)."""
        if self.wrap_calibration is None:
            return bindings
        return dataclasses.replace(bindings, calibrate_sigma=self.wrap_calibration(bindings.calibrate_sigma))


DPGRPO_ZOO: list[ZooEntry] = [
    ZooEntry("batch_advantage_norm", "advantages normalised with mean/std over all sampled prompts",
             ("record_isolation",), BatchAdvantageNorm),
    ZooEntry("per_completion_clip", "each completion's gradient clipped to C, then summed",
             ("sensitivity_add_remove",), PerCompletionClip),
    ZooEntry("realised_batch_divisor", "divides by the realised batch size instead of q·(n + m_c)",
             ("public_normalisation",), RealisedBatchDivisor),
    ZooEntry("shuffled_fixed_batches", "shuffle and take fixed-size batches", ("poisson_sampling",),
             ShuffledFixedBatches),
    ZooEntry("noise_sigma_only", "z ~ N(0, σ²I) instead of N(0, σ²C²I)", ("noise_calibration",), NoiseSigmaOnly),
    ZooEntry("clip_per_chunk", "clips each rollout chunk before accumulating", ("chunk_identity",), ClipPerChunk),
    ZooEntry("skip_constant_groups", "drops records whose rewards are constant", ("constant_reward_groups",),
             SkipConstantGroups),
    ZooEntry("reused_seeded_noise", "re-seeds the noise generator with a fixed seed", ("fresh_randomness",),
             ReusedSeededNoise),
    ZooEntry("batch_token_norm", "divides the loss by the token count of the whole batch (TRL's dapo)",
             ("record_isolation", "loss_reference"), BatchTokenNorm),
    ZooEntry("per_tensor_clip", "clips each LoRA tensor separately to C", ("sensitivity_add_remove",),
             PerTensorClip),
    ZooEntry("bias_corrected_kl", "KL multiplied by the importance ratio", ("loss_reference",), BiasCorrectedKL),
    ZooEntry("nonfinite_passthrough", "a NaN record gradient enters the sum", ("clip_contract",),
             NonfinitePassthrough),
    ZooEntry("sigma_rounded_down", "stores σ rounded to 3 decimals", ("accountant_reference",),
             wrap_calibration=sigma_rounded_down),
    ZooEntry("group_sum_loss", "sums the completion losses instead of averaging over G",
             ("nonprivate_equivalence", "loss_reference"), GroupSumLoss),
]
