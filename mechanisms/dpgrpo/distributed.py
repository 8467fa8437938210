"""DP-GRPO on several processes (`torch.distributed`): the same Algorithm 1, with the per-record work shared.

What runs where (docs/scaling.md):

- *Coins.* Rank 0 draws the Poisson coins of all slots with its coins generator and broadcasts them, so every
  rank samples the same batch (in release mode only one generator may decide it).
- *Rollouts and rewards.* Every rank, for every sampled record, from one rollout stream whose generator state
  rank 0 broadcasts at construction (rollout randomness is per-record sampling, not privacy noise).
- *Gradients.* Rank r computes the clipped per-record gradients of the batch positions r, r + W, ...; one
  all-reduce (sum) adds the clipped contributions.
- *Noise, once.* Rank 0 adds z ~ N(0, σ²C²I) from its private noise generator and divides by the public
  q·(n + m_c); ĝ is broadcast, and every rank applies the same ĝ with the same optimizer. No rank but 0 draws
  noise: W independent draws of N(0, σ²C²I) would add W times the variance the accountant assumes, and
  σ/√W per rank is exactly the calibrated variance only if every rank's draw is independent and summed once
  — the single draw needs no such argument.
- *Private telemetry.* The per-record norms and dicts (and the canary diagnostics) are gathered to every rank
  in batch order, so telemetry and audit logs read as in a single process.

With the same seeds the parameters equal the single-process run up to the order of one floating-point sum
(tested to 1e-12 relative). LoRA dropout draws per-record masks from the rollout stream in batch order, which a
sharded pass cannot reproduce: it is refused here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from mechanisms.dpgrpo.trainer import DPTrainer
from privcheck.errors import InvalidParameter

__all__ = ["DistributedDPTrainer", "world"]

_GATHERED_LISTS = ("pre_clip_norms", "records")
_GATHERED_COUNTS = ("clipped", "nonfinite")


def world(group=None) -> tuple[int, int]:
    """(rank, world size) of `group` in an initialised process group; InvalidParameter otherwise."""
    if not (dist.is_available() and dist.is_initialized()):
        raise InvalidParameter("torch.distributed", "not initialised",
                               "an initialised process group (torchrun, accelerate launch or init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


class DistributedDPTrainer(DPTrainer):
    """`DPTrainer` whose step shares the per-record gradients across the ranks of `group` (module docstring).

    Every rank constructs it with the same model weights, config, universe and verifier, and calls the same
    methods in the same order (each collective waits for all ranks)."""

    def __init__(self, *args, group=None, **kwargs):
        self.rank, self.world_size = world(group)
        self.group = group
        self._src = dist.get_global_rank(group, 0) if group is not None else 0
        super().__init__(*args, **kwargs)
        if self.config.lora_dropout != 0:
            raise InvalidParameter("config.lora_dropout", self.config.lora_dropout,
                                   "0 with DistributedDPTrainer (per-record dropout masks follow batch order)")
        state = self.randomness.rollout_state()
        dist.broadcast(state, src=self._src, group=group)      # one rollout stream on every rank
        self.randomness.set_rollout_state(state)
        self.backend = dist.get_backend(group)

    def sample_coins(self) -> torch.Tensor:
        """Line 2 on rank 0, broadcast: every rank samples the same batch."""
        coins = super().sample_coins() if self.rank == 0 else torch.empty(self.n_slots, dtype=torch.bool)
        wire = coins.to(torch.uint8)
        dist.broadcast(wire, src=self._src, group=self.group)
        return wire.to(torch.bool)

    def clipped_sum(self, items) -> torch.Tensor:
        """Σ_i ḡ_i over all ranks: this rank's share (positions rank, rank + W, ...), then one all-reduce."""
        items = list(items)
        mine = list(range(self.rank, len(items), self.world_size))
        slots = self._round_slots if self._round_slots is not None and len(self._round_slots) == len(items) else None
        before = {k: len(self.scratch[k]) for k in _GATHERED_LISTS}
        before.update({k: self.scratch[k] for k in (*_GATHERED_COUNTS, "cross_talk")})
        self.scratch["cross_talk"] = None
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        share = [items[k] for k in mine]
        for v in self.contributions(share, slots=None if slots is None else [slots[k] for k in mine]):
            S = S + v
        dist.all_reduce(S, op=dist.ReduceOp.SUM, group=self.group)
        self._gather_scratch(mine, len(items), before)
        return S

    def _gather_scratch(self, mine, total, before) -> None:
        """Put every rank's new per-record entries into this rank's scratch, in batch order."""
        sc = self.scratch
        local = {"positions": mine, "counts": {k: sc[k] - before[k] for k in _GATHERED_COUNTS},
                 "lists": {k: sc[k][before[k]:] for k in _GATHERED_LISTS},
                 "canary": dict(sc["canary_pre_clip_norms"]), "cross_talk": sc["cross_talk"]}
        parts = [None] * self.world_size
        dist.all_gather_object(parts, local, group=self.group)
        for k in _GATHERED_LISTS:
            ordered = [None] * total
            for part in parts:
                for pos, value in zip(part["positions"], part["lists"][k], strict=True):   # one entry per record
                    ordered[pos] = value
            sc[k] = sc[k][:before[k]] + ordered
        for k in _GATHERED_COUNTS:
            sc[k] = before[k] + sum(part["counts"][k] for part in parts)
        for part in parts:
            sc["canary_pre_clip_norms"].update(part["canary"])
        talks = [t for t in [before["cross_talk"]] + [part["cross_talk"] for part in parts] if t is not None]
        sc["cross_talk"] = [sum(col) for col in zip(*talks)] if talks else None

    def _audit_log(self, t, g_hat, batch, groups) -> None:
        """The auditor's private log has one writer: rank 0 (every rank holds the same ĝ and gathered scratch)."""
        if self.rank == 0:
            super()._audit_log(t, g_hat, batch, groups)

    def privatize(self, S) -> torch.Tensor:
        """Line 8 on rank 0 only (its private noise generator draws once), ĝ broadcast to every rank."""
        g_hat = super().privatize(S) if self.rank == 0 else torch.empty_like(S)
        dist.broadcast(g_hat, src=self._src, group=self.group)
        return g_hat
