"""Planted bugs in `DPGRPOTrainer` subclasses (tests/bug_zoo/test_trl_zoo.py), kept in their own module so that
collecting the tests does not import TRL: the test module loads this one inside its tests."""

from __future__ import annotations

import torch

from mechanisms.dpgrpo.trl import DPGRPOTrainer

__all__ = ["NoNoiseOnEmptyBatch", "PadsToBatchLongest", "PreNoiseNormInTelemetry", "RealisedBatchDivisor",
           "RewardDrivenLearningRate", "UnnoisedFrozenParameter"]


class NoNoiseOnEmptyBatch(DPGRPOTrainer):
    """Skips the noise when no prompt was sampled (the empty batch looks 'free')."""

    def sample_coins(self, n=None, q=None):
        coins = super().sample_coins(n, q)
        self._empty_batch = not bool(coins.any())
        return coins

    def privatize(self, S, **kw):
        if getattr(self, "_empty_batch", False):
            return S / self.divisor
        return super().privatize(S, **kw)


class RealisedBatchDivisor(DPGRPOTrainer):
    """Divides by the realised batch size instead of the public q·n."""

    def privatize(self, S, **kw):
        k = max(1, len(getattr(self, "_batch_now", [])))
        return super().privatize(S, **kw) * self.divisor / k

    def sample_coins(self, n=None, q=None):
        coins = super().sample_coins(n, q)
        self._batch_now = [i for i in range(len(coins)) if bool(coins[i])]
        return coins


class PreNoiseNormInTelemetry(DPGRPOTrainer):
    """Writes the pre-noise norm ‖S‖ (private) into the step's public telemetry."""

    def privatize(self, S, **kw):
        self._pre_noise = float(torch.linalg.vector_norm(S.double()))
        return super().privatize(S, **kw)

    def step(self):
        entry = super().step()
        entry["pre_noise_norm"] = self._pre_noise
        return entry


class RewardDrivenLearningRate(DPGRPOTrainer):
    """Scales the learning rate by the sampled prompts' mean reward (a schedule driven by private rewards)."""

    def step(self):
        entry = super().step()
        mean = self.private_telemetry[-1]["reward_mean"]
        for group in self.optimizer.param_groups:
            group["lr"] = group["lr"] * (1.0 + (mean or 0.0))
        return entry


class UnnoisedFrozenParameter(DPGRPOTrainer):
    """Moves a parameter outside the private (LoRA) set by the sampled prompts' mean reward, without noise."""

    def step(self):
        entry = super().step()
        mean = self.private_telemetry[-1]["reward_mean"]
        with torch.no_grad():
            dict(self.model.named_parameters())["base_model.model.transformer.ln_f.bias"].add_(1e-3 * (mean or 0.0))
        return entry


class PadsToBatchLongest(DPGRPOTrainer):
    """Left-pads every prompt to the longest prompt of the sampled batch (the layout of TRL's batched path)."""

    def sample_coins(self, n=None, q=None):
        coins = super().sample_coins(n, q)
        prompts = [self.train_dataset[i]["prompt"] for i in range(len(coins)) if bool(coins[i])]
        self._longest = max((len(super(PadsToBatchLongest, self)._tokenize_prompts([p])[0][0]) for p in prompts),
                            default=0)
        return coins

    def _tokenize_prompts(self, prompts):
        ids, images, fields = super()._tokenize_prompts(prompts)
        width = getattr(self, "_longest", 0)
        return [[self._tokenizer.pad_token_id] * (width - len(x)) + list(x) for x in ids], images, fields
