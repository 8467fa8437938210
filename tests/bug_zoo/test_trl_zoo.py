"""Planted bugs in `DPGRPOTrainer` subclasses that change what `step()` does, caught by the whole-step checks
through the TRL integration's default binding (`trainer.privcheck_bindings()`, docs/integrations/trl.md).

Each variant fails its designated check with status "fail" (not "error", not "skipped"), and the unmodified
`DPGRPOTrainer`, checked with the same options, passes it. The checks run with restricted cases and few seeds:
each is deterministic given its seeds (no false failures), and each planted bug shows in the first trials.
"""

from __future__ import annotations

import pytest
import torch
import trl  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip

from mechanisms.dpgrpo.trl import DPGRPOTrainer, DPGRPOTrainerConfig
from privcheck.checks import whole_step
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


ZOO = [  # (variant, check, options, a phrase the failure message must contain, or None)
    (NoNoiseOnEmptyBatch, "step_noise", {"seeds": 4}, "std of ĝ is 0"),
    (RealisedBatchDivisor, "step_sensitivity", {"cases": ("add", "empty", "small"), "seeds": 2}, "> 1 +"),
    (PreNoiseNormInTelemetry, "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "telemetry.pre_noise_norm"),
    (RewardDrivenLearningRate, "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "optimizer.param_groups[0].lr"),
    (UnnoisedFrozenParameter, "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "parameters.base_model.model.transformer.ln_f.bias"),
    (PadsToBatchLongest, "step_record_isolation", {"max_seeds": 8}, "differs alone vs in a batch"),
]
REFERENCE = sorted({(c, tuple(sorted(o.items()))) for _, c, o, _ in ZOO})


def _trainer(cls, tmp_path):
    from peft import LoraConfig

    args = DPGRPOTrainerConfig(output_dir=str(tmp_path), num_generations=4, max_completion_length=4,
                               learning_rate=1e-2, bf16=False, report_to=[], gradient_checkpointing=False,
                               dp_clip_norm=1.0, dp_noise_multiplier=1.0, dp_sampling_rate=0.5, dp_steps=2, dp_seed=0,
                               dp_num_records=6)
    return cls(tiny_model(), digit_reward, args=args, train_dataset=addition_dataset(),
               processing_class=tiny_tokenizer(),
               peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True))


def _run(cls, check, options, tmp_path):
    bindings = _trainer(cls, tmp_path).privcheck_bindings(seeds=options.get("seeds", 2))
    return whole_step.WHOLE_STEP_CHECKS[check](bindings, **options)


@pytest.mark.parametrize("variant, check, options, phrase", ZOO, ids=[f"{v.__name__}-{c}" for v, c, _, _ in ZOO])
def test_planted_bug_is_caught(variant, check, options, phrase, tmp_path):
    r = _run(variant, check, options, tmp_path)
    assert r.status == "fail", (r.status, r.message[:400])
    if phrase is not None:
        assert phrase in r.message, r.message[:400]


@pytest.mark.parametrize("check, options", REFERENCE, ids=[f"{c}-{k}" for k, (c, _) in enumerate(REFERENCE)])
def test_reference_trainer_passes(check, options, tmp_path):
    r = _run(DPGRPOTrainer, check, dict(options), tmp_path)
    assert r.status == "pass", (r.status, r.message[:400])
