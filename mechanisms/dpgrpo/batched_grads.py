"""Per-record gradients of many records from one forward and one backward (docs/dpgrpo.md, "Batched per-record
gradients"): Algorithm 1, line 6, for a bucket of records at once.

The isolated path (`record_grads.GRPOGradient`, one forward and one backward per record) is the reference. This
module computes the same per-record gradients in fewer, larger passes:

1. *Buckets of equal shape.* Records whose prompt length P, group size G and completion width L are equal share a
   bucket of at most `max_records`. Nothing is padded, so every row of a bucket's forward is the computation that
   row would get alone: attention, norms and the log-softmax act row by row, and the rows of a matrix product do
   not mix. Records of other shapes go into other buckets; a `GradientRecord` (canary) keeps its fixed vector.
2. *One forward, one backward.* π_ref (adapter off, no grad) and π_θ run over the bucket's rows; the loss is the
   sum of the records' own eq. (7) losses (`core.prompt_loss`, each with its own group advantages), so the
   gradient reaching a row is the gradient of its own record's loss. `torch.autograd.grad` asks only for the
   gradients at the outputs of the LoRA layers; no parameter `.grad` is formed.
3. *Per-record weight gradients.* For each LoRA layer y = W·x (a bias-free `nn.Linear`), the gradient of record
   b is Σ over its rows and tokens of (∂ℓ_b/∂y)ᵀ·x: one matrix product over exactly the rows the isolated
   backward would use, in the same order, so it is the isolated path's product, not a reordered sum.
4. *Chunks.* With `chunk_size` k, the bucket runs once per rollout chunk S (every record's rows S together), and
   each record's chunk gradients are added in chunk order, as `.grad` accumulates in the isolated path.

Consequence (tested: `tests/dpgrpo/test_batched_grads.py`): on CPU in float64 and float32 the per-record
gradients are bit-identical to the isolated path, whatever the bucket's other records, so record isolation (A2)
holds exactly and the clip, the sum and the noise downstream are unchanged. The assumption behind "whatever the
bucket's other records" is that a row of a batched kernel does not depend on the other rows or on the number of
rows. It is what V6 (`record_isolation`, bit identity across batch compositions) and the whole-step
`step_record_isolation` check on the trainer as it runs, on the user's own hardware; GPU BLAS libraries choose
algorithms by shape, so run those checks there before relying on the batched path. With LoRA dropout the bucket's
masks are fresh draws of the private rollout generator, row by row: each record's masks have the same
distribution as alone, but are not the isolated path's draws.
"""

from __future__ import annotations

import contextlib

import torch

from mechanisms.dpgrpo.core import prompt_loss
from mechanisms.dpgrpo.record_grads import GRPOGradient, RecordGrad, StepContext
from mechanisms.dpgrpo.records import GradientRecord, RolloutGroup
from mechanisms.dpgrpo.rollouts import pad_id, row_logprobs
from privcheck.errors import InvalidParameter

__all__ = ["LoraGradSampler", "batched_record_grads", "buckets", "supports"]


def supports(arm) -> bool:
    """The batched path covers the GRPO family (eq. (7) with the arm's own group advantages)."""
    return isinstance(arm, GRPOGradient)


class LoraGradSampler:
    """Hooks on the bias-free `nn.Linear` layers that own the ParamSpace's tensors (the LoRA A and B matrices):
    inside `capture()` each forward keeps every layer's input and output, and `record_grads` turns the gradients
    at the outputs into per-record weight gradients."""

    def __init__(self, model: torch.nn.Module, space):
        owners = {}
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                owners[id(module.weight)] = (name, module)
        self.modules: list[torch.nn.Linear] = []
        for pname, p in zip(space.names, space.params):
            found = owners.get(id(p))
            if found is None or found[1].bias is not None and found[1].bias.requires_grad:
                raise InvalidParameter("gradient_batch", f"> 1 with trainable tensor {pname}",
                                       "1 (the isolated path) unless every trainable tensor is the weight of an "
                                       "nn.Linear without a trainable bias (LoRA with bias='none')")
            self.modules.append(found[1])
        self._seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @contextlib.contextmanager
    def capture(self):
        """Keep (input, output) of every hooked layer for one differentiable forward; a layer called twice in one
        forward (weight sharing) is refused, because its per-record gradient would need both calls."""
        self._seen = {}

        def hook(module, inputs, output):
            key = id(module)
            if key in self._seen:
                raise InvalidParameter("model", "a LoRA layer called twice in one forward",
                                       "gradient_batch = 1 for models that reuse a LoRA layer")
            self._seen[key] = (inputs[0].detach(), output)

        handles = [m.register_forward_hook(hook) for m in self.modules]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def record_grads(self, loss: torch.Tensor, records: int) -> list[torch.Tensor | None]:
        """Per hooked layer, the weight gradients of `records` records whose rows are consecutive, equal blocks of
        the captured forward: entry b of the [records, out, in] tensor is Σ over record b's rows and tokens of
        (∂loss/∂y)ᵀ·x, the product the record's own backward forms (None where the layer took no part)."""
        used = [m for m in self.modules if id(m) in self._seen]
        outputs = [self._seen[id(m)][1] for m in used]
        grads = torch.autograd.grad(loss, outputs, allow_unused=True)
        by_module = {id(m): (go, self._seen[id(m)][0]) for m, go in zip(used, grads)}
        self._seen = {}
        out = []
        for m in self.modules:
            go, x = by_module.get(id(m), (None, None))
            if go is None:
                out.append(None)
                continue
            go3 = go.reshape(records, -1, go.shape[-1])     # record b's rows and tokens, in its own order
            x3 = x.reshape(records, -1, x.shape[-1])
            out.append(torch.bmm(go3.transpose(1, 2), x3))
        return out


def _shape(ctx: StepContext, record, group) -> tuple[int, int, int]:
    return (int(ctx.prompt_ids(record).numel()), int(group.token_ids.shape[0]), int(group.token_ids.shape[1]))


def buckets(ctx: StepContext, pairs, max_records: int) -> list[list[int]]:
    """Positions of the scored records, grouped by (P, G, L) in order of first appearance, at most `max_records`
    per bucket; GradientRecords are left out (they keep their fixed vector)."""
    by_shape: dict[tuple, list[int]] = {}
    for pos, (record, group) in enumerate(pairs):
        if isinstance(record, GradientRecord):
            continue
        if group is None or group.rewards is None:
            raise InvalidParameter("group", group, "a scored RolloutGroup (rewards filled by line 5)")
        by_shape.setdefault(_shape(ctx, record, group), []).append(pos)
    return [idx[s:s + max_records] for idx in by_shape.values() for s in range(0, len(idx), max_records)]


def _filler_id(tokenizer) -> int:
    """The token of the filler rows: the tokenizer's PAD id, else 0 (any public constant would do)."""
    try:
        return pad_id(tokenizer)
    except InvalidParameter:
        return 0


def _bucket(ctx: StepContext, arm, sampler: LoraGradSampler, records, groups: list[RolloutGroup],
            chunk_size, width: int) -> list[RecordGrad]:
    """GRPOGradient.__call__ for every record of one equal-shape bucket, from one forward/backward per chunk, with
    the bucket filled up to `width` records by filler rows (public tokens, no loss), so that every kernel sees
    shapes that are functions of public constants only."""
    G = groups[0].G
    prompts = [ctx.prompt_ids(r) for r in records]
    ids = [g.token_ids.to(ctx.device) for g in groups]
    masks = [g.mask.to(ctx.device) for g in groups]
    advs = [arm.advantages(g.rewards, ctx.c) for g in groups]
    B = len(records)
    filler = _filler_id(ctx.tokenizer)
    P, L = prompts[0].numel(), ids[0].shape[1]
    acc: list[torch.Tensor | None] = [None] * len(sampler.modules)
    loss_total = torch.zeros(B, dtype=torch.float64)
    kl_total = torch.zeros(B, dtype=torch.float64)
    for S in ctx.chunks(G, chunk_size):
        k = S.stop - S.start
        fill = (width - B) * k
        prompt_rows = torch.cat([p[None, :].expand(k, -1) for p in prompts]
                                + [torch.full((fill, P), filler, dtype=torch.long, device=ctx.device)])
        comp = torch.cat([i[S] for i in ids] + [torch.full((fill, L), filler, dtype=torch.long, device=ctx.device)])
        with torch.no_grad(), ctx.reference():
            ref = row_logprobs(ctx.model, prompt_rows, comp)
        with sampler.capture():
            logp = row_logprobs(ctx.model, prompt_rows, comp)
        rows = [slice(b * k, (b + 1) * k) for b in range(B)]
        losses = [prompt_loss(logp[R], ref[R], masks[b][S], advs[b], ctx.beta, rollout_slice=S)
                  for b, R in enumerate(rows)]
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        per_layer = [None if g is None else g[:B] for g in sampler.record_grads(total, width)]
        # chunk gradients added in chunk order, as .grad accumulates in the isolated path
        acc = [g if a is None else (a if g is None else a + g) for a, g in zip(acc, per_layer)]
        with torch.no_grad():
            m = torch.stack([mask[S] for mask in masks]).to(logp.dtype).reshape(B * k, -1)
            d = ref[:B * k] - logp[:B * k].detach()
            kl = ((torch.exp(d) - d - 1) * m).sum(1) / m.sum(1)
            loss_total += torch.stack(losses).detach().double().cpu()
            kl_total += kl.reshape(B, k).sum(1).double().cpu() / G
    flat = torch.cat([torch.zeros(B, m.weight.numel(), dtype=ctx.dtype, device=ctx.device) if g is None
                      else g.reshape(B, -1).to(ctx.dtype) for m, g in zip(sampler.modules, acc)], dim=1)
    out = []
    for b, (group, loss, kl) in enumerate(zip(groups, loss_total.tolist(), kl_total.tolist())):
        private = {"loss": loss, "kl": kl, "lengths": masks[b].sum(1).tolist(),
                   "reward_mean": float(group.rewards.double().mean()),
                   "constant_group": bool((group.rewards == group.rewards[0]).all())}
        out.append(RecordGrad(flat[b], private))
    return out


def batched_record_grads(ctx: StepContext, arm, sampler: LoraGradSampler, pairs, *, max_records: int,
                         chunk_size=None) -> list[RecordGrad]:
    """The arm's RecordGrad for every (record, group) pair, in input order: GradientRecords through the arm (their
    fixed vector), scored records by equal-shape buckets of at most `max_records` (module docstring)."""
    if not supports(arm):
        raise InvalidParameter("gradient_batch", "> 1 with arm " + repr(getattr(arm, "name", arm)),
                               "1 (the isolated path) for arms outside the GRPO family")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise InvalidParameter("chunk_size", chunk_size, "None or an integer >= 1")
    pairs = list(pairs)
    out: list[RecordGrad | None] = [None] * len(pairs)
    for pos, (record, group) in enumerate(pairs):
        if isinstance(record, GradientRecord):
            out[pos] = arm(ctx, record, group)
    for idx in buckets(ctx, pairs, max_records):
        grads = _bucket(ctx, arm, sampler, [pairs[i][0] for i in idx], [pairs[i][1] for i in idx],
                        chunk_size if chunk_size is not None else ctx.chunk_size, max_records)
        for i, rg in zip(idx, grads):
            out[i] = rg
    return out
