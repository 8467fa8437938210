"""Whole-run bug zoo (docs/whole_run.md, "Bug zoo"): `DPTrainer` subclasses whose defect lies BETWEEN rounds or
OUTSIDE the step — decisions taken per round from private data, training on private data before the private
phase, sampling across rounds, private figures printed, logged or checkpointed — and correct variants in other
shapes that must pass. Each variant is written from the defect's description. Test code only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.trainer import DPTrainer

__all__ = ["CORRECT_RUNS", "RUN_ZOO", "RunBug"]

log = logging.getLogger("privcheck.tests.run_variants")


def _private_signal(trainer) -> float:
    """The last round's mean pre-clip gradient norm (0 for an empty batch): a private training statistic, like
    a loss or a reward mean (the fixture's replayed rollouts give every round the same reward mean)."""
    norms = trainer.private_telemetry[-1]["pre_clip_norms"] if trainer.private_telemetry else []
    return sum(norms) / len(norms) if norms else 0.0


class EarlyStopOnPlateau(DPTrainer):
    """Stops training once a round's private statistic (mean gradient norm) drops below 0.6 ("converged")."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            if _private_signal(self) < 0.6:
                break
        return self.public_telemetry


class PlateauScheduledLR(DPTrainer):
    """Between rounds, the learning rate is halved when the round's private statistic fell (reduce-on-plateau
    on a private loss)."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        last = None
        for _ in range(T):
            self.step()
            m = _private_signal(self)
            if last is not None and m < last:
                for g in self.optimizer.param_groups:
                    g["lr"] *= 0.5
            last = m
        return self.public_telemetry


class PrivateWarmStart(DPTrainer):
    """Before the private phase, one plain SGD step on the raw (unclipped, un-noised) gradient of every present
    record ("warm start on the training data")."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        warm = torch.optim.SGD(self.space.params, lr=0.05)
        everyone = torch.ones(self.universe.n, dtype=torch.bool)
        for slot in self.universe.batch(everyone):          # every present record
            rec = self.universe.record(slot)
            group = self.rollouts(self.model, [rec], "current")[0]
            group = self.score([rec], [group])[0]
            g = self.record_gradient(rec, group)
            core.unflatten_into(g, self.space)
            warm.step()
            self.space.zero_grad()
        self.scratch = self.new_scratch()


class NoRepeatSampling(DPTrainer):
    """A record sampled in one round is left out of the next ("spread the data over the rounds")."""

    _last = None

    def sample_coins(self):
        coins = super().sample_coins()
        if self._last is not None:
            coins = coins & ~self._last
        self._last = coins.clone()
        return coins


class PrintsPrivateStatistic(DPTrainer):
    """Prints each round's private statistic (mean gradient norm) to standard output ("progress")."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            print(f"round {self.t}: grad norm {_private_signal(self):.3f}")
        return self.public_telemetry


class LogsBatchSize(DPTrainer):
    """Logs each round's (private) batch size through `logging` (a WARNING of a module logger)."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            log.warning("round %d: %d prompts", self.t, self.private_telemetry[-1]["batch_size"])
        return self.public_telemetry


class CheckpointsPrivateTelemetry(DPTrainer):
    """Writes a checkpoint per round holding the model AND the private telemetry (rewards, batch size)."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            torch.save({"model": self.model.state_dict(), "private": self.private_telemetry[-1]["batch_size"]},
                       os.path.join(os.getcwd(), f"ckpt-{self.t}.pt"))
        return self.public_telemetry


class BatchScaledNoise(DPTrainer):
    """Noise std σ·max_i‖ḡ_i‖ instead of σ·C ("no more noise than the batch needs"): the scale follows the
    batch. With C below every record's norm (the fixture) it equals σ·C on a non-empty batch, and 0 on an empty
    one."""

    def privatize(self, S):
        cfg = self.config
        clipped = [min(norm, cfg.C) for norm in self.scratch["pre_clip_norms"]]
        scale = max(clipped, default=0.0)
        z = torch.randn(S.shape, generator=self.randomness.noise, dtype=S.dtype, device=S.device) * (cfg.sigma * scale)
        return (S + z) / self.divisor


# ---------------------------------------------------------------------------------------------- correct shapes

class PublicCosineLR(DPTrainer):
    """Correct: a cosine learning-rate schedule over the accounted T, set between rounds from the round counter."""

    def train(self, T=None):
        import math

        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            for g in self.optimizer.param_groups:
                g["lr"] = self.config.lr * 0.5 * (1 + math.cos(math.pi * self.t / self.config.T))
        return self.public_telemetry


class LRFromNoisyUpdate(DPTrainer):
    """Correct: the next round's learning rate from the norm of the released noisy update (post-processing)."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            self.step()
            norm = self.public_telemetry[-1].get("update_norm") or self.public_telemetry[-1].get("g_hat_norm")
            if norm is not None:
                for g in self.optimizer.param_groups:
                    g["lr"] = self.config.lr / (1 + float(norm))
        return self.public_telemetry


class CheckpointsModel(DPTrainer):
    """Correct: writes the model's state and the public telemetry every round, and prints the round counter."""

    def train(self, T=None):
        T = self.config.T if T is None else T
        for _ in range(T):
            entry = self.step()
            print(f"round {self.t} done")
            torch.save({"model": self.model.state_dict(), "telemetry": entry},
                       os.path.join(os.getcwd(), f"ckpt-{self.t}.pt"))
        return self.public_telemetry


class MicroBatchedSum(DPTrainer):
    """Correct: the clipped sum built from micro-batches of one record each (contributions called per record)."""

    def clipped_sum(self, items):
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        slots = self._round_slots
        for k, item in enumerate(list(items)):
            part = self.contributions([item], slots=None if slots is None else [slots[k]])
            S = S + part[0]
        return S


@dataclass(frozen=True)
class RunBug:
    name: str
    trainer_cls: type
    check: str            # the whole-run check that must fail
    field: str | None     # a substring of the leak field (run_public_outputs) or of the message


RUN_ZOO = (
    RunBug("early_stop_on_plateau", EarlyStopOnPlateau, "run_public_outputs", "steps_taken"),
    RunBug("plateau_scheduled_lr", PlateauScheduledLR, "run_public_outputs", "optimizer.param_groups[0].lr"),
    RunBug("private_warm_start", PrivateWarmStart, "run_public_outputs", "step[0].parameters."),
    RunBug("no_repeat_sampling", NoRepeatSampling, "run_poisson_sampling", "two consecutive rounds"),
    RunBug("prints_private_statistic", PrintsPrivateStatistic, "run_public_outputs", "stdout["),
    RunBug("logs_batch_size", LogsBatchSize, "run_public_outputs", "log["),
    RunBug("checkpoints_private_telemetry", CheckpointsPrivateTelemetry, "run_public_outputs", "files.ckpt-"),
    RunBug("batch_scaled_noise", BatchScaledNoise, "run_noise", "std of ĝ = 0·σC/divisor"),
)
CORRECT_RUNS = (PublicCosineLR, LRFromNoisyUpdate, CheckpointsModel, MicroBatchedSum)
