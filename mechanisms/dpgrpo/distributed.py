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
- *Wire.* NCCL moves only CUDA tensors: the coins, the rollout generator state and every other CPU tensor travel
  through the current CUDA device under NCCL (`wire_device`), and through the CPU under gloo.

With the same seeds the parameters equal the single-process run up to the order of one floating-point sum
(tested to 1e-12 relative). LoRA dropout draws per-record masks from the rollout stream in batch order, which a
sharded pass cannot reproduce: it is refused here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from mechanisms.dpgrpo.trainer import DPTrainer
from privcheck.errors import InvalidParameter

__all__ = ["DistributedDPTrainer", "broadcast_from_rank0", "broadcast_module", "broadcast_object_from_rank0",
           "rank0_decides", "wire_device", "world"]

_GATHERED_LISTS = ("pre_clip_norms", "records")
_GATHERED_COUNTS = ("clipped", "nonfinite")


def world(group=None) -> tuple[int, int]:
    """(rank, world size) of `group` in an initialised process group; InvalidParameter otherwise."""
    if not (dist.is_available() and dist.is_initialized()):
        raise InvalidParameter("torch.distributed", "not initialised",
                               "an initialised process group (torchrun, accelerate launch or init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


def wire_device(group=None) -> torch.device:
    """Where a collective's tensors must live: the current CUDA device under NCCL, the CPU otherwise."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _src(group) -> int:
    return dist.get_global_rank(group, 0) if group is not None else 0


def broadcast_from_rank0(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Rank 0's `tensor` on every rank (same shape, dtype and device as the caller's; bool travels as uint8)."""
    wire = tensor.to(device=wire_device(group), dtype=torch.uint8 if tensor.dtype == torch.bool else tensor.dtype)
    wire = wire.contiguous()
    dist.broadcast(wire, src=_src(group), group=group)
    return wire.to(device=tensor.device, dtype=tensor.dtype)


def broadcast_module(module, group=None) -> None:
    """Copy rank 0's parameters and buffers into `module` on every rank, in place: the distributed trainer needs
    the same weights everywhere, and independent builds agree bit for bit only where the kernels are
    deterministic (not guaranteed across GPUs)."""
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            t.copy_(broadcast_from_rank0(t.detach(), group))


def broadcast_object_from_rank0(obj, group=None):
    """Rank 0's picklable `obj` on every rank (the others pass anything, say None)."""
    box = [obj]
    dist.broadcast_object_list(box, src=_src(group), group=group)
    return box[0]


def rank0_decides(flag: bool, group=None) -> bool:
    """Rank 0's `flag` on every rank (a decision, such as the wall-clock guard's, that all ranks must share)."""
    return bool(broadcast_from_rank0(torch.tensor([bool(flag)]), group).item())


class DistributedDPTrainer(DPTrainer):
    """`DPTrainer` whose step shares the per-record gradients across the ranks of `group` (module docstring).

    Every rank constructs it with the same model weights, config, universe and verifier, and calls the same
    methods in the same order (each collective waits for all ranks)."""

    def __init__(self, *args, group=None, **kwargs):
        self.rank, self.world_size = world(group)
        self.group = group
        self.backend = dist.get_backend(group)
        super().__init__(*args, **kwargs)
        if self.config.lora_dropout != 0:
            raise InvalidParameter("config.lora_dropout", self.config.lora_dropout,
                                   "0 with DistributedDPTrainer (per-record dropout masks follow batch order)")
        # one rollout stream on every rank
        self.randomness.set_rollout_state(broadcast_from_rank0(self.randomness.rollout_state(), group))

    def sample_coins(self) -> torch.Tensor:
        """Line 2 on rank 0, broadcast: every rank samples the same batch."""
        coins = super().sample_coins() if self.rank == 0 else torch.empty(self.n_slots, dtype=torch.bool)
        return broadcast_from_rank0(coins, self.group)

    def clipped_sum(self, items) -> torch.Tensor:
        """Σ_i ḡ_i over all ranks: this rank's share (positions rank, rank + W, ...), then one all-reduce."""
        items = list(items)
        mine = list(range(self.rank, len(items), self.world_size))
        before = {k: len(self.scratch[k]) for k in _GATHERED_LISTS}
        before.update({k: self.scratch[k] for k in (*_GATHERED_COUNTS, "cross_talk")})
        self.scratch["cross_talk"] = None
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        share = [items[k] for k in mine]
        for v in self.contributions(share):          # the round's items carry their slots (SlotItem)
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
        return broadcast_from_rank0(g_hat, self.group)

    def gather_by_slot(self, local: dict) -> dict:
        """Every rank's `{slot: value}` merged, on every rank (a collective: all ranks call it). Each record of a
        batch is computed on one rank; an observer of per-record values (the whole-step `per_record`,
        mechanisms/dpgrpo/whole_step.py) sees them all this way. Tensors travel through the CPU."""
        local = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in local.items()}
        parts = [None] * self.world_size
        dist.all_gather_object(parts, local, group=self.group)
        merged = {}
        for part in parts:
            merged.update(part)
        return merged
