"""`DPGRPOTrainer.train()` as TRL's loop (callbacks, control, logging, checkpoints), the settings refused before
training, the check mode derived from the real trainer and the whole-run bindings (docs/integrations/trl.md,
"Verify the whole run"), on the tiny GPT-2 of tests/integrations/trl_tiny.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import peft  # noqa: F401 - installed by `make test` (the train extra): never a silent skip
import pytest
import trl  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip

from privcheck.errors import InvalidParameter
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "trl.md"


def _lora(**kw):
    from peft import LoraConfig

    return LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True, **kw)


def _args(tmp_path, **overrides):
    from mechanisms.dpgrpo.trl import DPGRPOTrainerConfig

    kw = dict(output_dir=str(tmp_path / "out"), num_generations=4, max_completion_length=4, learning_rate=1e-2,
              bf16=False, report_to=[], gradient_checkpointing=False, dp_clip_norm=1.0, dp_noise_multiplier=1.0,
              dp_sampling_rate=0.5, dp_steps=3, dp_seed=0, dp_num_records=6)
    kw.update(overrides)
    return DPGRPOTrainerConfig(**kw)


def _trainer(tmp_path, callbacks=None, model=None, **overrides):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    return DPGRPOTrainer(tiny_model() if model is None else model, digit_reward, args=_args(tmp_path, **overrides),
                         train_dataset=addition_dataset(), processing_class=tiny_tokenizer(), peft_config=_lora(),
                         callbacks=callbacks)


# ------------------------------------------------------------------ refused before training

def test_refuses_lora_dropout_before_any_work(tmp_path):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=_args(tmp_path), train_dataset=addition_dataset(),
                      peft_config=_lora(lora_dropout=0.05))
    assert err.value.name == "peft_config.lora_dropout" and err.value.value == 0.05


def test_refuses_model_dropout(tmp_path):
    model = tiny_model()
    model.config.resid_pdrop = 0.1
    model.transformer.h[0].mlp.dropout.p = 0.1
    with pytest.raises(InvalidParameter) as err:
        _trainer(tmp_path, model=model)
    assert err.value.name == "model"
    assert "resid_pdrop=0.1" in str(err.value.value) and "mlp.dropout.p=0.1" in str(err.value.value)


def test_refuses_evaluation_without_eval_dataset(tmp_path):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=_args(tmp_path, eval_strategy="steps", eval_steps=1),
                      train_dataset=addition_dataset())
    assert (err.value.name, err.value.value) == ("eval_strategy", "steps")


# ------------------------------------------------------------------ TRL's callbacks, called and honoured

def _recorder():
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self, stop_at=None):
            self.events, self.stop_at = [], stop_at

        def _note(self, name, state):
            self.events.append((name, state.global_step))

        def on_train_begin(self, args, state, control, **kw):
            self._note("train_begin", state)

        def on_step_begin(self, args, state, control, **kw):
            self._note("step_begin", state)

        def on_step_end(self, args, state, control, **kw):
            self._note("step_end", state)
            if state.global_step == self.stop_at:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kw):
            self._note("log", state)

        def on_save(self, args, state, control, **kw):
            self._note("save", state)

        def on_train_end(self, args, state, control, **kw):
            self._note("train_end", state)

    return Recorder


def test_train_calls_the_callbacks_and_honours_control(tmp_path):
    rec = _recorder()()
    trainer = _trainer(tmp_path, callbacks=[rec], logging_steps=2, save_steps=2)
    trainer.train()
    # DefaultFlowCallback: log and save every 2 steps and at the last step (3 = max_steps)
    assert rec.events == [("train_begin", 0), ("step_begin", 0), ("step_end", 1), ("step_begin", 1),
                          ("step_end", 2), ("log", 2), ("save", 2), ("step_begin", 2), ("step_end", 3), ("save", 3),
                          ("train_end", 3)]
    assert [e["step"] for e in trainer.state.log_history] == [2]
    assert trainer.state.log_history[0]["update_norm"] == trainer.public_telemetry[1]["update_norm"]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert (out / "checkpoint-2" / "adapter_model.safetensors").exists()


def test_logs_hold_the_public_telemetry_only(tmp_path):
    """What DPGRPOTrainer logs: the step's public telemetry (and TRL's epoch and step); TRL's reward metrics are
    never filled and what a reward function passes to `log_metric` is discarded."""
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    def metric_reward(prompts, completions, log_metric=None, **kw):
        log_metric("private_mean", 0.123)
        return digit_reward(prompts, completions, **kw)

    trainer = DPGRPOTrainer(tiny_model(), [digit_reward, metric_reward], args=_args(tmp_path, logging_steps=1),
                            train_dataset=addition_dataset(), processing_class=tiny_tokenizer(), peft_config=_lora())
    trainer.train()
    public = {"t", "lr", "update_norm", "param_delta_norm", "skipped_nonfinite_update", "epoch", "step"}
    assert [set(e) for e in trainer.state.log_history] == [public] * 3
    assert [e["update_norm"] for e in trainer.state.log_history] == [e["update_norm"] for e in
                                                                       trainer.public_telemetry]
    assert not trainer._metrics["train"] and not trainer._pending_metrics
    assert all(e["reward_mean"] is not None for e in trainer.private_telemetry if e["batch_size"])


def test_evaluation_by_steps_runs_the_public_evaluation(tmp_path):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    trainer = DPGRPOTrainer(tiny_model(), digit_reward, args=_args(tmp_path, dp_steps=2, eval_strategy="steps",
                                                                   eval_steps=1, save_strategy="no"),
                            train_dataset=addition_dataset(), eval_dataset=addition_dataset(2, seed=9),
                            processing_class=tiny_tokenizer(), peft_config=_lora())
    trainer.train()
    assert [e["t"] for e in trainer.evaluation_curve] == [0, 1, 2]
    evals = [e for e in trainer.state.log_history if "eval_public_accuracy" in e]
    assert [(e["step"], e["eval_public_accuracy"]) for e in evals] == [(c["t"], c["accuracy"])
                                                                       for c in trainer.evaluation_curve[1:]]
    assert not (tmp_path / "out" / "checkpoint-2").exists()       # save_strategy="no" honoured


def test_should_training_stop_ends_training(tmp_path):
    rec = _recorder()(stop_at=1)
    trainer = _trainer(tmp_path, callbacks=[rec])
    assert len(trainer.train()) == 1 and trainer.t == 1
    assert rec.events[-1] == ("train_end", 1)


def test_fresh_copies_start_from_the_callbacks_state_at_construction(tmp_path):
    """A callback's state after the user's training does not carry into the checks' runs; a callback holding
    the trainer holds the copy in the copy."""
    rec = _recorder()()
    trainer = _trainer(tmp_path, callbacks=[rec])
    holder = _recorder()()
    holder.trainer = trainer
    trainer.add_callback(holder)
    trainer.train()
    assert rec.events and holder.events
    copy = trainer.fresh_copy(addition_dataset(3), 1, run_steps=1)
    mine = [cb for cb in copy.callback_handler.callbacks if type(cb).__name__ == "Recorder"]
    assert len(mine) == 2 and all(cb.events == [] for cb in mine)
    assert mine[1].trainer is copy and mine[0] is not rec
    copy.train()
    assert copy.t == 1 and mine[0].events[-1] == ("train_end", 1) and rec.events[-1] == ("train_end", 3)


# ------------------------------------------------------------------ check mode derived from the real trainer

def test_check_mode_is_derived_from_the_real_trainer(tmp_path):
    from privcheck.checks import whole_step
    from privcheck.integrations.trl import check_mode_for

    trainer = _trainer(tmp_path, dp_sampling_rate=0.05, dp_steps=100, dp_seed=None, save_steps=40)
    mode = check_mode_for(trainer)
    assert mode.q == 0.5 and mode.run_steps == 3 and mode.divisor == 3.0          # q·n = 0.5·6
    assert mode.settings == {"dp_sampling_rate": 0.5, "logging_steps": 1, "save_steps": 3}
    assert mode.record["dp_sampling_rate"] == {"real": 0.05, "checked": 0.5}
    assert mode.record["dp_seed"]["real"] == "os_entropy"
    assert mode.record["steps_run"] == {"real": 100, "checked": 3}
    assert mode.record["save_steps"] == {"real": 40, "checked": 3}
    assert mode.record["logging_steps"] == {"real": 10, "checked": 1}
    b = trainer.privcheck_bindings(seeds=2)
    assert b.q == trainer.dp_config.q < 0.05 + 1e-12   # the accountant's q stays the real one (the plan's m/n)
    assert b.whole_run.sampling_rate == b.whole_step.sampling_rate == 0.5
    assert b.whole_run.divisor == b.whole_step.divisor == 3.0
    # runs per pair: the fewest with (1 − 0.5)^(3·runs) ≤ 1e-3
    assert b.whole_run.seeds == 4
    assert str(tmp_path) not in repr(b.whole_run.check_mode)          # no path in what results record
    assert set(b.whole_step.check_mode) == {"dp_sampling_rate", "dp_seed", "train_dataset"}
    r = whole_step.WHOLE_STEP_CHECKS["step_record_isolation"](b, max_seeds=8)
    assert r.status == "pass", r.message[:400]
    assert r.inputs["check_mode"]["dp_sampling_rate"] == {"real": 0.05, "checked": 0.5}


def test_inconclusive_at_the_real_q_names_q(tmp_path):
    """Bound at the real q = 0.05 (check_q overrides the derivation), the step checks are inconclusive and say
    at which q, and what to do."""
    from privcheck.checks import whole_step

    trainer = _trainer(tmp_path, dp_sampling_rate=0.05, dp_steps=100, dp_seed=None)
    b = trainer.privcheck_bindings(seeds=2, check_q=0.05)
    assert "dp_sampling_rate" not in b.whole_step.check_mode
    r = whole_step.WHOLE_STEP_CHECKS["step_record_isolation"](b, max_seeds=2)
    assert r.status == "fail"
    assert "inconclusive, never sampled together with another record in 2 trials at q = 0.05" in r.message
    assert "check-mode q of 0.3 or more" in r.message


@pytest.mark.parametrize("option, value", [("check_q", 0.0), ("check_q", 1.5), ("check_steps", 0),
                                           ("check_steps", 101), ("run_seeds", 0), ("sampling_runs", 1)])
def test_bad_check_mode_options_are_refused(tmp_path, option, value):
    trainer = _trainer(tmp_path, dp_sampling_rate=0.05, dp_steps=100)
    names = {"check_q": "q", "check_steps": "steps"}
    with pytest.raises(InvalidParameter) as err:
        trainer.privcheck_bindings(**{option: value})
    assert err.value.name == names.get(option, option)


# ------------------------------------------------------------------ the docs example

def _whole_run_block() -> str:
    return next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
                if "run_public_outputs" in b)


def test_whole_run_block_is_short_and_counted():
    block = _whole_run_block()
    lines = sum(1 for ln in block.splitlines() if ln.strip())
    assert lines <= 20 and f"## Verify the whole run ({lines} lines)" in DOC.read_text()


@pytest.mark.slow
def test_docs_whole_run_example(tmp_path, monkeypatch):
    """The docs block as it is, with the user's objects: the whole-run checks pass on the real trainer at its real
    q, then the real (OS-entropy) training runs its 100 steps."""
    from transformers import TrainerCallback

    class PrintLogs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            print(logs)

    def format_reward(prompts, completions, **kw):
        return [float(c[:1].isdigit()) for c in completions]

    monkeypatch.chdir(tmp_path)
    ns = {"model": tiny_model(), "tokenizer": tiny_tokenizer(), "dataset": addition_dataset(),
          "reward": digit_reward, "format_reward": format_reward, "PrintLogs": PrintLogs}
    exec(compile(_whole_run_block(), str(DOC), "exec"), ns)  # noqa: S102 - the documented example
    results, trainer = ns["results"], ns["trainer"]
    assert [r.name for r in results] == ["run_sensitivity", "run_public_outputs", "run_noise", "run_poisson_sampling"]
    assert all(r.status == "pass" for r in results), [(r.name, r.message[:300]) for r in results]
    assert all(r.inputs["check_mode"]["dp_sampling_rate"] == {"real": 0.05, "checked": 0.5} for r in results)
    assert trainer.t == 100 and trainer.privacy_release is True
    assert (tmp_path / "run" / "checkpoint-100").is_dir()
