"""The public check of the noiseless guard's assumption for input-space canaries: the pilot trained without noise.

The planner's noiseless guard (`audits.statistics.power`, docs/audits.md "Runs without noise: the noiseless guard")
bounds the probability that a run with its noise removed escapes the pre-registered rule, under one assumption for
input-space canaries: such a run ranks its sampled included canaries above every other canary (for a top-only rule,
its k₊ highest scores are sampled included canaries). Dirac canaries meet it by construction; input-space canaries
meet it only if the model memorises a canary from its few updates. This module measures it on public data: the
pilot (same public prompts, labels, inclusion and trainer seed) retrained with the trainer's noise removed.

The check never changes the pre-registered rule or the test (the audit's validity never depends on the assumption);
it only says whether the plan's promise about a noiseless run is supported, in the plan's `noiseless` block and
message and in the report's `claim.mechanism.params.noiseless_pilot`. It is one public run at pilot scale: evidence,
not a proof, either way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from audits.dpgrpo.input_pilot import PilotRun, train_pilot
from audits.statistics.power import PowerReport

__all__ = ["NOISELESS_PILOT_LOG_NAME", "NoiselessCheck", "check_noiseless_assumption", "noiseless_trainer",
           "with_noiseless_check"]

NOISELESS_PILOT_LOG_NAME = "noiseless_pilot_log.jsonl"


def noiseless_trainer(trainer_cls):
    """`trainer_cls` with its noise removed: line 8 releases the clipped sum over the public divisor (σ still claimed,
    the planted bug the guard is about). Used on public pilot data only."""

    class Noiseless(trainer_cls):
        def privatize(self, S):
            return S / self.divisor

    Noiseless.__name__ = Noiseless.__qualname__ = f"Noiseless{trainer_cls.__name__}"
    return Noiseless


@dataclass(frozen=True)
class NoiselessCheck:
    """How a pilot trained without noise ranks its canaries, and whether that supports the plan's rule (k₊, k₋) for
    m audit canaries. `top_pure`: sampled included canaries scoring strictly above every other canary (ties count
    against the assumption)."""

    pilot_canaries: int
    sampled_included: int
    top_pure: int
    auroc: float | None              # sampled included vs the rest (ties ½); None when either side is empty
    k_plus: int
    k_minus: int
    m: int

    @classmethod
    def from_run(cls, run: PilotRun, *, k_plus: int, k_minus: int, m: int) -> NoiselessCheck:
        sampled = run.present & (run.inclusions > 0)
        s_in, s_rest = run.scores[sampled], run.scores[~sampled]
        if s_in.size and s_rest.size:
            top_pure = int(np.sum(s_in > s_rest.max()))
            pairs = (s_in[:, None] > s_rest[None, :]).sum() + 0.5 * (s_in[:, None] == s_rest[None, :]).sum()
            auroc = float(pairs / (s_in.size * s_rest.size))
        else:                        # no sampled included canary (nothing to rank), or nothing else
            top_pure, auroc = int(s_in.size), None
        return cls(int(run.scores.size), int(s_in.size), top_pure, auroc, k_plus, k_minus, m)

    @property
    def separated(self) -> bool:
        """Every sampled included canary outscores every other canary (the assumption in full)."""
        return self.sampled_included > 0 and self.top_pure == self.sampled_included

    @property
    def top_pure_needed(self) -> int:
        """What the rule needs at pilot scale: full separation when it guesses at the bottom, else the top
        k₊/m fraction of the pilot's canaries."""
        if self.k_minus:
            return self.sampled_included
        return math.ceil(self.k_plus * self.pilot_canaries / self.m)

    @property
    def assumption_met(self) -> bool:
        return self.separated if self.k_minus else self.top_pure >= self.top_pure_needed

    def sentence(self) -> str:
        auroc = "n/a" if self.auroc is None else f"{self.auroc:.3f}"
        head = (f"the public pilot trained without noise ranks {self.top_pure} of its {self.sampled_included} "
                f"sampled included canaries above all its other canaries ({self.pilot_canaries} canaries, AUROC "
                f"{auroc}; the rule needs {self.top_pure_needed})")
        if self.assumption_met:
            return f" NOISELESS PILOT: {head}, which supports the guard's assumption."
        return (f" NOISELESS GUARD ASSUMPTION NOT MET: {head}, so a run with its noise removed need not be "
                f"rejected; the miss bound above is not supported for this mechanism.")

    def to_json(self) -> dict:
        return {"pilot_canaries": self.pilot_canaries, "sampled_included": self.sampled_included,
                "top_pure": self.top_pure, "top_pure_needed": self.top_pure_needed, "separated": self.separated,
                "auroc_sampled_included_vs_rest": self.auroc, "assumption_met": self.assumption_met,
                "data": "public pilot (same prompts, labels, inclusion, trainer seed), trainer noise removed"}


def check_noiseless_assumption(spec, model, tokenizer, config, *, prompts, seed, log_path, trainer_cls,
                               k_plus: int, k_minus: int, m: int) -> NoiselessCheck:
    """Retrain the public pilot without noise (`train_pilot` with `noiseless_trainer(trainer_cls)`) and rank it."""
    run = train_pilot(spec, model, tokenizer, config, prompts=prompts, seed=seed, log_path=log_path,
                      trainer_cls=noiseless_trainer(trainer_cls))
    return NoiselessCheck.from_run(run, k_plus=k_plus, k_minus=k_minus, m=m)


def with_noiseless_check(power: PowerReport, check: NoiselessCheck | None) -> PowerReport:
    """The plan with the check in its `noiseless` block (`assumption`) and its sentence in the message."""
    if power.noiseless is None:
        return power
    if check is None:
        return dataclasses.replace(power, noiseless={**power.noiseless, "assumption": None})
    return dataclasses.replace(power, noiseless={**power.noiseless, "assumption": check.to_json()},
                               message=power.message + check.sentence())
