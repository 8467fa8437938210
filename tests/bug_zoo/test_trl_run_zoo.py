"""The TRL whole-run bug zoo (tests/bug_zoo/trl_run_variants.py) against the whole-run checks, through the default
bindings of the user's REAL trainer (`trainer.privcheck_bindings()`, docs/integrations/trl.md, "Verify the whole
run"): q = 0.05, dp_steps = 100, OS-entropy randomness, TRL's default logging and saving intervals; the bindings
derive the check mode (q 0.5, seeded, 3 steps, 3 rows plus one added) themselves.

Every `ZOO` row fails its check with status "fail", naming the field (run_public_outputs) or the defect
(run_sensitivity); the correct shapes pass every whole-run check. Each check is deterministic given its seeds.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from privcheck.checks import whole_run
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REAL = dict(num_generations=4, max_completion_length=4, learning_rate=1e-2, bf16=False, report_to=[],
            gradient_checkpointing=False, dp_clip_norm=0.05, dp_noise_multiplier=1.0, dp_sampling_rate=0.05,
            dp_steps=100, dp_num_records=6)
ONE_PAIR = {"cases": ("add",), "seeds": 1}
TWO_RUNS = {"cases": ("add",), "seeds": 2}


def _v(name):
    return getattr(importlib.import_module("tests.bug_zoo.trl_run_variants"), name)


def user_trainer(tmp_path, cls=None, reward=None, callbacks=(), **overrides):
    """The user's real trainer (a release: no dp_seed); `callbacks`: names of trl_run_variants callbacks, added
    with `add_callback` (those taking the trainer get it)."""
    from peft import LoraConfig

    from mechanisms.dpgrpo.trl import DPGRPOTrainer, DPGRPOTrainerConfig

    cls = DPGRPOTrainer if cls is None else _v(cls)
    args = DPGRPOTrainerConfig(output_dir=str(tmp_path / "run"), **{**REAL, **overrides})
    trainer = cls(tiny_model(), reward_funcs=digit_reward if reward is None else _v(reward)(), args=args,
                  train_dataset=addition_dataset(), processing_class=tiny_tokenizer(),
                  peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True))
    for name in callbacks:
        cb = _v(name)
        trainer.add_callback(cb(trainer) if "trainer" in inspect.signature(cb).parameters else cb())
    assert trainer.privacy_release is True
    return trainer


# (id, trainer class, reward class, callbacks, check, options, the leak field's substring or the message's phrase)
ZOO = [
    ("prints_private_metric", None, None, ("PrintsRewardMean",), "run_public_outputs", ONE_PAIR, "stdout["),
    ("logs_private_reward_mean", "LogsRewardMean", None, (), "run_public_outputs", ONE_PAIR, ".reward"),
    ("lr_halved_on_logged_reward", "LogsRewardMean", None, ("HalveLROnRewardDrop",), "run_public_outputs",
     ONE_PAIR, "optimizer.param_groups[0].lr"),
    ("lr_halved_on_private_plateau", None, None, ("HalveLROnPrivatePlateau",), "run_public_outputs", ONE_PAIR,
     "optimizer.param_groups[0].lr"),
    ("stop_on_private_count", None, None, ("StopAfterExamples",), "run_public_outputs", ONE_PAIR, "steps_taken"),
    ("logs_private_metric", None, None, ("LogsBatchSize",), "run_public_outputs", ONE_PAIR, "log["),
    ("checkpoint_private_data", None, None, ("PrivateCheckpoint",), "run_public_outputs", ONE_PAIR,
     "files.output/checkpoint-3/private_telemetry.json"),
    ("reward_state_across_prompts", None, "RunningNormaliser", (), "run_sensitivity", TWO_RUNS,
     "although the differing record was not sampled"),
]
FAST = {"prints_private_metric"}


def _param(row):
    marks = () if row[0] in FAST else (pytest.mark.slow,)
    return pytest.param(*row[1:], id=row[0], marks=marks)


@pytest.mark.parametrize("cls, reward, callbacks, check, options, field", [_param(r) for r in ZOO])
def test_defect_is_caught_through_the_default_bindings(tmp_path, cls, reward, callbacks, check, options, field):
    b = user_trainer(tmp_path, cls, reward, callbacks).privcheck_bindings()
    r = whole_run.WHOLE_RUN_CHECKS[check](b, **options)
    assert r.status == "fail", (r.status, r.message[:600])
    assert r.inputs["check_mode"]["dp_sampling_rate"] == {"real": 0.05, "checked": 0.5}
    if check == "run_public_outputs":
        assert any(field in f for f in r.observed["leak_fields"]), r.observed["leak_fields"][:20]
        assert r.message.startswith("leak: ")
    else:
        assert field in r.message, r.message[:600]


@pytest.mark.slow
@pytest.mark.parametrize("callbacks, overrides", [
    (("PublicLogPrinter",), {"lr_scheduler_type": "cosine", "save_steps": 1}),
    (("HalveLROnRewardDrop",), {}),       # TRL-style, on logs["reward"]: DPGRPOTrainer never logs a reward
], ids=["cosine_checkpoints_public_log_printer", "reward_callback_without_reward_logs"])
def test_correct_runs_pass_every_whole_run_check(tmp_path, callbacks, overrides):
    b = user_trainer(tmp_path, callbacks=callbacks, **overrides).privcheck_bindings()
    for name, check in whole_run.WHOLE_RUN_CHECKS.items():
        r = check(b)
        assert r.status == "pass", (name, r.message[:600])
        if name == "run_public_outputs":
            # only TRL's progress bar (standard error, with wall-clock rates) differs between identical runs
            assert all("stderr[" in f for f in r.observed["unobservable"]), r.observed["unobservable"]
            assert r.observed["fields_compared"] > 1000
            assert r.observed["g_hat_replayed_through"] == ["update hook"]
    assert r.observed["rounds"] == 40 * 3          # run_poisson_sampling: 40 runs of the 3 check-mode steps


@pytest.mark.slow
def test_declared_metrics_dict_is_compared(tmp_path):
    """A metrics dict outside the trainer is public once declared in one argument, `public=`; undeclared, the
    whole run does not see it (docs/integrations/trl.md, "What the whole run observes")."""
    metrics = _v("METRICS")
    trainer = user_trainer(tmp_path, callbacks=("MetricsDict",))
    r = whole_run.check_run_public_outputs(trainer.privcheck_bindings(public={"metrics": metrics}), **ONE_PAIR)
    assert r.status == "fail" and any(".public.metrics.reward[" in f or f.startswith("public.metrics.reward[")
                                      for f in r.observed["leak_fields"]), r.observed["leak_fields"][:20]
    assert metrics == {}            # every run started from the dict's state, and it was put back
    r = whole_run.check_run_public_outputs(trainer.privcheck_bindings(), **ONE_PAIR)
    assert r.status == "pass", r.message[:400]


@pytest.mark.slow
def test_reward_state_is_invisible_to_one_fresh_step(tmp_path):
    """The running normaliser carries state across steps and puts the record first in both of step_record_
    isolation's runs: the whole-step check passes it, so the whole run is what catches it."""
    from privcheck.checks import whole_step

    b = user_trainer(tmp_path, reward="RunningNormaliser").privcheck_bindings(seeds=2)
    r = whole_step.WHOLE_STEP_CHECKS["step_record_isolation"](b, max_seeds=8)
    assert r.status == "pass", r.message[:600]
