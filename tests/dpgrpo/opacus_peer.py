"""The peer for per-record gradients: Opacus's per-sample gradients (`GradSampleModule` hooks), one sample = one
rollout row, summed over each record's G rows. Used as an independent cross-check of
`mechanisms.dpgrpo.batched_grads` (tests/dpgrpo/test_batched_grads.py) and as the peer in the benchmark
(tests/benchmarks/test_bench_dpgrpo.py). Records must share one prompt length (no padding)."""

from __future__ import annotations

import torch

from mechanisms.dpgrpo import core


def opacus_record_grads(ctx, arm, pairs):
    """Per-record gradients from another library: Opacus's per-sample gradients (GradSampleModule hooks, one
    sample = one rollout row) of one forward over every record's rows, summed over each record's G rows."""
    from opacus import GradSampleModule

    from mechanisms.dpgrpo.rollouts import policy_scope, row_logprobs

    gsm = GradSampleModule(ctx.model, batch_first=True, loss_reduction="sum")
    try:
        G = pairs[0][1].G
        prompts = torch.cat([ctx.prompt_ids(r)[None].expand(G, -1) for r, _ in pairs])
        comp = torch.cat([g.token_ids for _, g in pairs])
        with torch.no_grad(), policy_scope(ctx.model, "reference"):
            ref = row_logprobs(ctx.model, prompts, comp)
        ctx.model.train()           # Opacus records activations in train mode only; every dropout here is 0
        try:
            logp = row_logprobs(ctx.model, prompts, comp)
        finally:
            ctx.model.eval()
        losses = [core.prompt_loss(logp[b * G:(b + 1) * G], ref[b * G:(b + 1) * G], g.mask,
                                   arm.advantages(g.rewards, ctx.c), ctx.beta) for b, (_, g) in enumerate(pairs)]
        torch.stack(losses).sum().backward()
        out = torch.cat([p.grad_sample.reshape(len(pairs), G, -1).sum(1) for p in ctx.space.params], dim=1)
        for p in ctx.space.params:
            p.grad_sample = None
        ctx.space.zero_grad()
        return out
    finally:
        gsm._close()
