"""Whole-run bug zoo for TRL (docs/integrations/trl.md, "Verify the whole run"): defects a `DPGRPOTrainer` user
writes BETWEEN steps or OUTSIDE the step — TRL callbacks that act on private metrics, a reward function with state
across prompts, private metrics printed, logged or checkpointed — and correct shapes that must pass. Each is
written from the defect's description, as a TRL user would write it. Test code only; imports TRL.
"""

from __future__ import annotations

import json
import logging
import os

from transformers import TrainerCallback

from mechanisms.dpgrpo.trl import DPGRPOTrainer
from tests.integrations.trl_tiny import digit_reward

__all__ = ["METRICS", "HalveLROnPrivatePlateau", "HalveLROnRewardDrop", "LogsBatchSize", "LogsRewardMean",
           "MetricsDict", "PrintsRewardMean", "PrivateCheckpoint", "PublicLogPrinter", "RunningNormaliser",
           "StopAfterExamples"]

METRICS: dict = {}      # a module-level metrics dict, as a user's dashboard code keeps one

log = logging.getLogger("privcheck.tests.trl_run_variants")


def _reward_mean(trainer) -> float | None:
    """The last step's mean reward over its sampled prompts (private; None for an empty batch)."""
    return trainer.private_telemetry[-1]["reward_mean"] if trainer.private_telemetry else None


class MetricsDict(TrainerCallback):
    """Appends each step's private mean reward to the module-level `METRICS` dict (a dashboard's data)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        METRICS.setdefault("reward", []).append(_reward_mean(self.trainer))


class LogsRewardMean(DPGRPOTrainer):
    """Puts TRL's "reward" curve back: every log entry gets the last step's mean reward (as GRPOTrainer logs it)."""

    def log(self, logs, start_time=None):
        mean = _reward_mean(self)
        if mean is not None:
            logs["reward"] = mean
        super().log(logs, start_time)


class HalveLROnRewardDrop(TrainerCallback):
    """A TRL-style plateau rule: halves the learning rate when the logged "reward" falls (GRPOTrainer logs it;
    DPGRPOTrainer does not, so on its own logs this callback never acts)."""

    def __init__(self):
        self.last = None

    def on_log(self, args, state, control, logs=None, optimizer=None, **kwargs):
        reward = (logs or {}).get("reward")
        if reward is None:
            return
        if self.last is not None and reward < self.last:
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        self.last = reward


class HalveLROnPrivatePlateau(TrainerCallback):
    """Reduce-on-plateau on the private reward: halves the learning rate when the step's mean reward (read from
    the trainer it was given) fell."""

    def __init__(self, trainer):
        self.trainer, self.last = trainer, None

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        mean = _reward_mean(self.trainer)
        if mean is not None and self.last is not None and mean < self.last:
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        self.last = mean if mean is not None else self.last


class StopAfterExamples(TrainerCallback):
    """Stops training once the prompts trained on (a private count, summed over the sampled batches) reach
    `limit` ("one epoch is enough")."""

    def __init__(self, trainer, limit: int = 3):
        self.trainer, self.limit, self.seen = trainer, limit, 0

    def on_step_end(self, args, state, control, **kwargs):
        self.seen += self.trainer.private_telemetry[-1]["batch_size"]
        if self.seen >= self.limit:
            control.should_training_stop = True


class RunningNormaliser:
    """A graded reward divided by the running mean of every reward seen so far in the run (state across prompts
    and steps), scaled by 1/2 to stay in the declared range [0, 1]."""

    __name__ = "running_normaliser"

    def __init__(self):
        self.total, self.count = 0.0, 0

    def __call__(self, prompts, completions, answer, **kwargs):
        out = []
        for r in digit_reward(prompts, completions, answer):
            self.total += r
            self.count += 1
            out.append(0.5 * r / max(self.total / self.count, 1e-3))
        return out


class PrintsRewardMean(TrainerCallback):
    """Prints each step's mean reward ("progress")."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        print(f"step {state.global_step}: reward {_reward_mean(self.trainer)}")


class LogsBatchSize(TrainerCallback):
    """Logs each step's (private) batch size through `logging` (a WARNING of a module logger)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        log.warning("step %d: %d prompts", state.global_step, self.trainer.private_telemetry[-1]["batch_size"])


class PrivateCheckpoint(TrainerCallback):
    """Adds the private telemetry (batch sizes, rewards, losses) to every checkpoint TRL saves."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}", "private_telemetry.json")
        with open(path, "w") as f:
            json.dump(self.trainer.private_telemetry, f)


class PublicLogPrinter(TrainerCallback):
    """Correct: prints every log entry (the step's public telemetry) and appends it to a file in output_dir."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        print("log", json.dumps(logs, sort_keys=True))
        with open(os.path.join(args.output_dir, "public_log.jsonl"), "a") as f:
            f.write(json.dumps(logs, sort_keys=True) + "\n")
