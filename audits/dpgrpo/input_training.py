"""Training with appended input-space canary records (the audit and its pilot), and the hooks' per-canary facts.

The canary records are appended after the n real slots (`SlotUniverse.append_canaries`; real records are never
replaced), so the trainer draws coins for all n + m slots and divides by the public q·(n + m). The hooks write only
diagnostics for this audit: their one reserved coordinate is required by `AuditHooks` and nothing is masked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audits.dpgrpo.gradient_canary import (
    AuditPreset,
    checked_privacy_claim,
    reserved_coordinates,
    split_log,
)

__all__ = ["CanaryTelemetry", "train_with_canaries"]


def train_with_canaries(spec: AuditPreset, config, model, tokenizer, real, canaries, presence: np.ndarray,
                        commitment: str, log_path: Path, trainer_cls):
    """Append the canary records after the real slots and train config.T rounds with diagnostics-only hooks;
    returns (trainer, privacy claim). The trainer must report the canary slots, the commitment and the plan
    `config.plan` with these canary slots (`checked_privacy_claim`)."""
    import torch

    from mechanisms.dpgrpo.audit_hooks import AuditHooks
    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.records import SlotUniverse

    n = config.n
    universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), real)
    universe = universe.append_canaries([c.record() for c in canaries], torch.from_numpy(presence.copy()),
                                        commitment)
    reserved = reserved_coordinates(ParamSpace(model).dim, 1, "last")
    hooks = AuditHooks(torch.tensor(reserved, dtype=torch.int64), log_path, mask_reserved_for_real_records=False)
    trainer = trainer_cls(model, tokenizer, universe, config, spec.verifier, audit_hooks=hooks)
    claim = checked_privacy_claim(trainer, config.plan.replace(canaries=len(canaries)), commitment=commitment)
    trainer.train()
    return trainer, claim


@dataclass(frozen=True)
class CanaryTelemetry:
    """Per-canary facts from the hooks' diagnostics lines (the trainer's view; never read by the statistic)."""

    inclusions: np.ndarray           # rounds in which each canary slot was in the batch
    groups: int                      # canary rollout groups scored over all rounds
    constant_groups: float           # of which had constant reward (a float: the log stores per-round fractions)
    pre_clip_norms: tuple[float, ...]
    rounds: int

    @classmethod
    def from_log(cls, log_path, m: int) -> CanaryTelemetry:
        from mechanisms.dpgrpo.audit_hooks import read_log

        _, lines = split_log(read_log(log_path))
        counts = np.zeros(m, dtype=np.int64)
        groups, constant, norms = 0, 0.0, []
        for line in lines:
            d = line["diagnostics"]
            included = np.asarray(d["canary_included"], dtype=np.int64)
            counts += included
            k = int(included.sum())            # every sampled canary slot is a Record with a scored group
            if k and d.get("canary_constant_group_fraction") is not None:
                groups += k
                constant += float(d["canary_constant_group_fraction"]) * k
            norms.extend(float(v) for v in d["canary_pre_clip_norms"].values())
        counts.setflags(write=False)
        return cls(counts, groups, constant, tuple(norms), len(lines))

    @property
    def constant_fraction(self) -> float | None:
        return None if self.groups == 0 else min(1.0, max(0.0, self.constant_groups / self.groups))
