"""Planted bugs in `DPGRPOTrainer` subclasses that change what `step()` does, caught by the whole-step checks
through the TRL integration's default binding (`trainer.privcheck_bindings()`, docs/integrations/trl.md).

Each variant fails its designated check with status "fail" (not "error", not "skipped"), and the unmodified
`DPGRPOTrainer`, checked with the same options, passes it. The checks run with restricted cases and few seeds:
each is deterministic given its seeds (no false failures), and each planted bug shows in the first trials.
"""

from __future__ import annotations

import importlib

import pytest

from privcheck.checks import whole_step
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# (variant class in trl_variants.py, check, options, a phrase the failure message must contain, or None); the
# variants are named, not imported, so that collection never imports TRL (an import error fails the test)
ZOO = [
    ("NoNoiseOnEmptyBatch", "step_noise", {"seeds": 4}, "std of ĝ is 0"),
    ("RealisedBatchDivisor", "step_sensitivity", {"cases": ("add", "empty", "small"), "seeds": 2}, "> 1 +"),
    ("PreNoiseNormInTelemetry", "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "telemetry.pre_noise_norm"),
    ("RewardDrivenLearningRate", "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "optimizer.param_groups[0].lr"),
    ("UnnoisedFrozenParameter", "step_public_outputs", {"cases": ("add",), "seeds": 2, "max_seeds": 8},
     "parameters.base_model.model.transformer.ln_f.bias"),
    ("PadsToBatchLongest", "step_record_isolation", {"max_seeds": 8}, "differs alone vs in a batch"),
]
REFERENCE = sorted({(c, tuple(sorted(o.items()))) for _, c, o, _ in ZOO})


def _trainer(name, tmp_path):
    from peft import LoraConfig

    from mechanisms.dpgrpo.trl import DPGRPOTrainerConfig

    module = "mechanisms.dpgrpo.trl" if name == "DPGRPOTrainer" else "tests.bug_zoo.trl_variants"
    cls = getattr(importlib.import_module(module), name)

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


@pytest.mark.parametrize("variant, check, options, phrase", ZOO, ids=[f"{v}-{c}" for v, c, _, _ in ZOO])
def test_planted_bug_is_caught(variant, check, options, phrase, tmp_path):
    r = _run(variant, check, options, tmp_path)
    assert r.status == "fail", (r.status, r.message[:400])
    if phrase is not None:
        assert phrase in r.message, r.message[:400]


@pytest.mark.parametrize("check, options", REFERENCE, ids=[f"{c}-{k}" for k, (c, _) in enumerate(REFERENCE)])
def test_reference_trainer_passes(check, options, tmp_path):
    r = _run("DPGRPOTrainer", check, dict(options), tmp_path)
    assert r.status == "pass", (r.status, r.message[:400])
