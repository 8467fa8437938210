"""Whole-step bug zoo (docs/whole_step.md, "Bug zoo"): `DPTrainer` subclasses whose defect lies in what `step()`
does, outside the callables the record-level checks V1–V12 bind to (`mechanisms.dpgrpo.verify.bindings_for`).

Each variant is written from the defect's description. `STEP_ZOO` lists them with the whole-step check that must
fail and the public field a leak must name (None where the defect is not a leak). Test code only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mechanisms.dpgrpo.trainer import DPTrainer

__all__ = ["NoNoiseOnEmptyBatch", "PreNoiseNormTelemetry", "RewardDrivenLR", "STEP_ZOO", "StepBug",
           "UnnoisedBaseBias"]


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


@dataclass(frozen=True)
class StepBug:
    name: str
    trainer_cls: type
    check: str               # the whole-step check that must fail (key of WHOLE_STEP_CHECKS)
    leak_field: str | None   # a substring of a leak field step_public_outputs must name
    options: tuple = ()      # options of the check for the fast tier, as (key, value) pairs


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
)
