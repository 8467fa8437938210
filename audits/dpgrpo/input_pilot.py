"""The power pilot of the input-space audit: the same mechanism trained on public data only.

The pilot trains a copy of the public base policy with stand-in real records from a public seed apart from the
audited ones, and public canary prompts with public labels and an exactly balanced random inclusion drawn by its
own generator (independent of S). Its in/out scores form the `Empirical` score model from which
`audits.statistics.power.plan` fixes the guess rule before the audited training starts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audits import canary as cn
from audits.dpgrpo.gradient_canary import AuditPreset
from audits.dpgrpo.input_prompts import OPTIONS, derived_seed
from audits.dpgrpo.input_scoring import PolicyView, input_canaries, score_model_view
from audits.dpgrpo.input_training import CanaryTelemetry, train_with_canaries
from audits.statistics.score_models import Empirical

__all__ = ["PILOT_LOG_NAME", "PILOT_RECORDS_SEED", "Pilot", "PilotRun", "run_pilot", "train_pilot"]

PILOT_LOG_NAME = "pilot_log.jsonl"
PILOT_RECORDS_SEED = 1_000_003  # public seed (added to the preset's) of the pilot's stand-in real records


@dataclass(frozen=True, eq=False)
class Pilot:
    """Scores of a public pilot run: its in/out scores define the plan's `Empirical` score model."""

    prompts: tuple[str, ...] = field(repr=False)
    in_scores: np.ndarray = field(repr=False)
    out_scores: np.ndarray = field(repr=False)
    constant_reward_frac: float | None
    seeded: bool

    @property
    def m(self) -> int:
        return len(self.prompts)

    @property
    def score_model(self) -> Empirical:
        return Empirical(self.in_scores, self.out_scores)

    @property
    def auroc(self) -> float:
        from scipy.stats import mannwhitneyu
        return float(mannwhitneyu(self.in_scores, self.out_scores).statistic
                     / (self.in_scores.size * self.out_scores.size))

    def to_json(self) -> dict:
        return {"canaries": self.m, "n_in": int(self.in_scores.size), "n_out": int(self.out_scores.size),
                "inclusion": "exactly balanced, random (pilot generator, independent of S)",
                "data": "public only: stand-in real records (public seed), public prompts with public labels",
                "in_mean": float(self.in_scores.mean()), "out_mean": float(self.out_scores.mean()),
                "in_std": float(self.in_scores.std()), "out_std": float(self.out_scores.std()),
                "auroc": self.auroc, "constant_reward_canary_groups_frac": self.constant_reward_frac,
                "seeded": self.seeded}


@dataclass(frozen=True, eq=False)
class PilotRun:
    """One trained pilot: every public canary's score, its public inclusion and its realised inclusion count."""

    scores: np.ndarray = field(repr=False)
    present: np.ndarray = field(repr=False)
    inclusions: np.ndarray = field(repr=False)
    constant_reward_frac: float | None


def train_pilot(spec: AuditPreset, base_model, tokenizer, config, *, prompts, seed: int | None, log_path: Path,
                trainer_cls) -> PilotRun:
    """Train a copy of the public base with public canaries on public stand-in records and score them. The public
    labels, inclusion and trainer seed come from the pilot's own generator, so two calls with one seed differ only
    by `trainer_cls` (the noiseless check relies on it)."""
    m = len(prompts)
    rng = np.random.default_rng(None if seed is None else derived_seed(seed, "pilot"))
    labels = tuple(OPTIONS[b] for b in rng.integers(0, 2, size=m))
    present = np.zeros(m, dtype=bool)
    present[rng.permutation(m)[: m // 2]] = True            # both classes, independent of S
    canaries = input_canaries(prompts, labels)
    commitment = cn.commit(present, [c.id for c in canaries], cn.new_salt())
    trainer_seed = int(rng.integers(0, 2 ** 62)) if seed is not None else "os_entropy"
    pilot_config = config.replace(randomness=trainer_seed)
    model = copy.deepcopy(base_model)
    real = spec.records(config.n, PILOT_RECORDS_SEED)
    train_with_canaries(spec, pilot_config, model, tokenizer, real, canaries, present, commitment, log_path,
                        trainer_cls)
    scores = score_model_view(PolicyView(model, tokenizer, config.max_prompt_len), canaries).values
    telemetry = CanaryTelemetry.from_log(log_path, m)
    return PilotRun(scores, present, telemetry.inclusions, telemetry.constant_fraction)


def run_pilot(spec: AuditPreset, base_model, tokenizer, config, *, prompts, seed: int | None, log_path: Path,
              trainer_cls) -> Pilot:
    """The power pilot (`train_pilot`): its in/out scores."""
    run = train_pilot(spec, base_model, tokenizer, config, prompts=prompts, seed=seed, log_path=log_path,
                      trainer_cls=trainer_cls)
    return Pilot(tuple(prompts), run.scores[run.present].copy(), run.scores[~run.present].copy(),
                 run.constant_reward_frac, seed is not None)
