"""Micro-batched `DPTrainer` subclasses (docs/whole_step.md, "Micro-batching"), written from the usual patterns of a
training loop, not from the checks. Test code only.

`CORRECT_VARIANTS` build the clipped sum another way and compute exactly Σ_i clip_C(g_i) over the round's batch, so
every whole-step check and the canary audit must pass them as they pass `DPTrainer`:

* `MicroBatchedSum(micro_batch)`: `clipped_sum` calls `contributions` once per micro-batch of `micro_batch` items
  (the last one shorter) and sums the results;
* `AccumulatedGradSum`: gradient accumulation: each micro-batch's clipped sum is added into per-tensor buffers,
  whose flattened sum is noised;
* `ReversedMicroBatches`: micro-batches of one item, in reverse batch order (the order of the calls is free);
* `RebuiltItems`: micro-batches of two items rebuilt as plain (record, group) pairs (the slot is found from the
  record's identity in the round's batch).

Near misses, the same patterns written wrongly (tests/bug_zoo/test_correct_variants.py shows each caught):

* `AccumulateInDotGrad`: accumulates the micro-batch sums in the LoRA `.grad`, which every per-record gradient
  pass zeroes and refills, so earlier micro-batches are lost and the last record's raw gradient leaks in;
* `CopiedRecords`: micro-batches whose records are copied (as a move to the device does) before `contributions`:
  the copies match no slot of the round, so a canary counts as a real record and is masked on the reserved
  coordinates — the Dirac audit cannot see it and must say so.
"""

from __future__ import annotations

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.records import GradientRecord
from mechanisms.dpgrpo.trainer import DPTrainer

__all__ = ["CORRECT_VARIANTS", "AccumulateInDotGrad", "AccumulatedGradSum", "CopiedRecords", "MicroBatchedSum",
           "RebuiltItems", "ReversedMicroBatches", "micro_batched"]


def _chunks(items, size):
    return [items[k:k + size] for k in range(0, len(items), size)]


class MicroBatchedSum(DPTrainer):
    """Σ over micro-batches of Σ over their items of clip_C(g_i): one `contributions` call per micro-batch."""

    micro_batch = 1

    def clipped_sum(self, items):
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for chunk in _chunks(list(items), self.micro_batch):
            for v in self.contributions(chunk):
                S = S + v
        return S


def micro_batched(size: int) -> type:
    """`MicroBatchedSum` with micro-batches of `size` items."""
    return type(f"MicroBatchedSum{size}", (MicroBatchedSum,), {"micro_batch": size})


class AccumulatedGradSum(DPTrainer):
    """Gradient accumulation: each micro-batch of two items adds its clipped sum into a per-tensor accumulation
    buffer (shaped like the LoRA tensors, as a `main_grad`); after the last one the flattened buffer is the sum that
    is noised and divided by the public divisor as usual. (Not `.grad` itself: every per-record gradient pass
    zeroes and refills `.grad`, so a sum kept there loses the earlier micro-batches.)"""

    micro_batch = 2

    def noisy_update(self, items):
        buffers = [torch.zeros_like(p) for p in self.space.params]
        for chunk in _chunks(list(items), self.micro_batch):
            part = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
            for v in self.contributions(chunk):
                part = part + v
            offset = 0
            for buf, k in zip(buffers, self.space.numels):
                buf += part[offset:offset + k].reshape(buf.shape).to(buf.dtype)
                offset += k
        return self.privatize(torch.cat([buf.reshape(-1) for buf in buffers]))


class ReversedMicroBatches(DPTrainer):
    """Micro-batches of one item, last item first."""

    def clipped_sum(self, items):
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for item in reversed(list(items)):
            (v,) = self.contributions([item])
            S = S + v
        return S


class RebuiltItems(DPTrainer):
    """Micro-batches of two items, each item rebuilt as a plain (record, group) pair before `contributions`."""

    def clipped_sum(self, items):
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for chunk in _chunks(list(items), 2):
            for v in self.contributions([(rec, group) for rec, group in chunk]):
                S = S + v
        return S


CORRECT_VARIANTS = (micro_batched(1), micro_batched(2), AccumulatedGradSum, ReversedMicroBatches, RebuiltItems)


# ------------------------------------------------------------------------------------------ near misses

class AccumulateInDotGrad(DPTrainer):
    """Gradient accumulation kept in `.grad`: each micro-batch's clipped sum is added into the LoRA `.grad`, which
    the next micro-batch's per-record gradient passes zero and overwrite; the flat `.grad` is then noised."""

    def noisy_update(self, items):
        self.space.zero_grad()
        for chunk in _chunks(list(items), 2):
            part = sum(self.contributions(chunk), torch.zeros(self.space.dim, dtype=self.space.params[0].dtype,
                                                              device=self.device))
            offset = 0
            for p, k in zip(self.space.params, self.space.numels):
                piece = part[offset:offset + k].reshape(p.shape).to(p.dtype)
                p.grad = piece.clone() if p.grad is None else p.grad + piece
                offset += k
        S = core.flatten_grads(self.space)
        self.space.zero_grad()
        return self.privatize(S)


class CopiedRecords(MicroBatchedSum):
    """Micro-batches of one item whose gradient records are copied before `contributions` (a new GradientRecord,
    as `.to(device)` makes), so they match no slot of the round."""

    def clipped_sum(self, items):
        copied = [GradientRecord(rec.v.clone()) if isinstance(rec, GradientRecord) else (rec, group)
                  for rec, group in items]
        return super().clipped_sum(copied)
