"""Whole-step bug zoo (docs/whole_step.md, "Bug zoo"): `DPTrainer` subclasses whose defect lies in what `step()`
does, outside the callables the record-level checks V1–V12 bind to (`mechanisms.dpgrpo.verify.bindings_for`).

Each variant is written from the defect's description. `STEP_ZOO` lists them with the whole-step check that must
fail and the public field a leak must name (None where the defect is not a leak). Test code only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.records import Record
from mechanisms.dpgrpo.trainer import DPTrainer

__all__ = ["BatchScaledNoise", "InStep", "InformativeGroupRescale", "NoNoiseOnEmptyBatch", "PreNoiseNormTelemetry",
           "PromptGradientCache", "RewardDrivenLR", "STEP_ZOO", "StepBug", "UnnoisedBaseBias"]


class NoNoiseOnEmptyBatch(DPTrainer):
    """(a) "Nothing to protect": inside `step()`, an empty batch skips privatize and applies ĝ = 0 (no noise).
    `noisy_update` called directly (V9, V10) is unchanged."""

    _in_step = False

    def step(self):
        self._in_step = True
        try:
            return super().step()
        finally:
            self._in_step = False

    def noisy_update(self, items):
        items = list(items)
        if self._in_step and not items:
            return torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        return super().noisy_update(items)


class RewardDrivenLR(DPTrainer):
    """(b) A learning-rate schedule driven by the training rewards: after each step, lr = lr₀·(1 + mean reward of
    the batch) ("speed up while training goes well")."""

    def step(self):
        entry = super().step()
        mean = self.private_telemetry[-1]["reward_mean"]
        if mean is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.lr * (1 + mean)
        return entry


class PreNoiseNormTelemetry(DPTrainer):
    """(c) The pre-noise norm ‖S‖ of the clipped sum written to the public telemetry entry ("pre_noise_norm")."""

    _last_norm = 0.0

    def clipped_sum(self, items):
        S = super().clipped_sum(items)
        self._last_norm = float(torch.linalg.vector_norm(S.detach().double()))
        return S

    def step(self):
        self._last_norm = 0.0
        entry = super().step()
        entry["pre_noise_norm"] = self._last_norm
        return entry


class UnnoisedBaseBias(DPTrainer):
    """(d) A parameter outside the LoRA set trained without noise: the base model's final LayerNorm bias is
    unfrozen during `step()` (so every record's backward accumulates its raw, unclipped gradient) and updated by
    the same optimizer (an extra param group), outside the clip / noise / divisor path."""

    EXTRA = "transformer.ln_f.bias"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._extra = next(p for k, p in self.model.named_parameters() if k.endswith(self.EXTRA))
        self.optimizer.add_param_group({"params": [self._extra], "lr": self.config.lr})

    def step(self):
        p = self._extra
        p.requires_grad_(True)
        p.grad = None
        try:
            return super().step()
        finally:
            p.requires_grad_(False)
            p.grad = None


class InStep(DPTrainer):
    """Marks the calls made from inside `step()`: the defects below live there only, so the callables V1–V12
    call directly are the production ones."""

    _in_step = False

    def step(self):
        self._in_step = True
        self._batch_max = None
        try:
            return super().step()
        finally:
            self._in_step = False


class PromptGradientCache(InStep):
    """(e) Cross-record state inside a step: each prompt's clipped gradient is memoised within the batch ("duplicate
    prompts are common, skip the recompute"), so a later record whose prompt was already seen gets the first
    one's contribution. A differing record placed before a batch-mate with its prompt changes that batch-mate's
    contribution; placed last it only replaces its own (still ≤ C), and the fixture's prompts are distinct."""

    def contributions(self, items, *, slots=None):
        out = super().contributions(items, slots=slots)
        if not self._in_step:
            return out
        first: dict[str, int] = {}
        for k, item in enumerate(items):
            rec = self.unpack(item)[0]
            if isinstance(rec, Record):
                out[k] = out[first.setdefault(rec.prompt, k)]
        return out


class BatchScaledNoise(InStep):
    """(f) Noise whose scale follows the batch: std σ·max_i‖ḡ_i‖ (σ·C on an empty batch) instead of σ·C ("the
    noise only has to cover the largest contribution"). Identical to σ·C while every record is clipped."""

    def contributions(self, items, *, slots=None):
        out = super().contributions(items, slots=slots)
        if self._in_step and out:
            self._batch_max = max(float(torch.linalg.vector_norm(v.detach().double())) for v in out)
        return out

    def privatize(self, S):
        if not self._in_step or self._batch_max is None:
            return super().privatize(S)
        cfg = self.config
        return core.privatize(S, cfg.sigma * self._batch_max / cfg.C, cfg.C, cfg.q, self.n_slots,
                              self.randomness.noise, nonprivate=self.nonprivate)


class InformativeGroupRescale(InStep):
    """(g) A divisor from batch statistics at the extreme of the reward range: groups whose rewards are all equal
    (all correct or all wrong) carry no policy-gradient signal, so the update is rescaled to the informative
    groups, ĝ·|B|/#informative (DAPO-style). The factor is 1 unless a constant-reward group is in the batch."""

    def privatize(self, S):
        g_hat = super().privatize(S)
        if not self._in_step:
            return g_hat
        size = len(self._round_slots or [])
        constant = sum(len(set(rs)) == 1 for rs in self.scratch["rewards"])
        if constant and size > constant:
            g_hat = g_hat * (size / (size - constant))
        return g_hat


@dataclass(frozen=True)
class StepBug:
    name: str
    trainer_cls: type
    check: str               # the whole-step check that must fail (key of WHOLE_STEP_CHECKS)
    leak_field: str | None   # a substring of a leak field step_public_outputs must name
    options: tuple = ()      # options of the check for the fast tier, as (key, value) pairs
    old: tuple | None = None  # options (check options and whole_step_bindings keyword arguments, "bindings")
    #                           of the coverage before issue 22 (differing record last, C below every norm)
    #                           under which the defect is NOT caught; None where the old coverage caught it


# the search restricted to its sweep: every pool kind once, in front of the fixture's records, 1 seed each
SWEEP = (("cases", ("empty",)), ("seeds", 1), ("neighbours", "search"), ("examples", 7))

STEP_ZOO = (
    StepBug("no_noise_on_empty_batch", NoNoiseOnEmptyBatch, "step_sensitivity", None,
            (("cases", ("empty", "small")), ("seeds", 3))),
    StepBug("no_noise_on_empty_batch", NoNoiseOnEmptyBatch, "step_noise", None, (("seeds", 4),)),
    StepBug("reward_driven_lr", RewardDrivenLR, "step_public_outputs", "optimizer.param_groups[0].lr",
            (("cases", ("empty",)), ("seeds", 2))),
    StepBug("pre_noise_norm_telemetry", PreNoiseNormTelemetry, "step_public_outputs", "telemetry.pre_noise_norm",
            (("cases", ("empty",)), ("seeds", 2))),
    StepBug("unnoised_base_bias", UnnoisedBaseBias, "step_public_outputs", "parameters.base_model.model."
            "transformer.ln_f.bias", (("cases", ("empty",)), ("seeds", 2))),
    # the search's sweep puts the same-prompt record first, before record 0; the old coverage had it last
    StepBug("prompt_gradient_cache", PromptGradientCache, "step_sensitivity", None,
            SWEEP, (*SWEEP, ("positions", ("last",)))),
    # the default bindings carry the C = 10 regime; the old ones had C = 0.2 only
    StepBug("batch_scaled_noise", BatchScaledNoise, "step_sensitivity", None,
            (("cases", ("empty", "small")), ("seeds", 3)),
            (("cases", ("empty", "small")), ("seeds", 3), ("bindings", (("unclipped_C", None),)))),
    # the search's pool has all-correct / all-wrong groups; the fixture's groups all have reward variance
    StepBug("informative_group_rescale", InformativeGroupRescale, "step_sensitivity", None,
            SWEEP, (("seeds", 1), ("positions", ("last",)), ("bindings", (("unclipped_C", None),)))),
)
