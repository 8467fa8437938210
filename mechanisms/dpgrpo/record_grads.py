"""Record-gradient plug-ins: Algorithm 1, lines 4–6 for one record (the arms of docs/dpgrpo.md).

A `RecordGradient` maps `(ctx, record, group)` to a `RecordGrad`: the flat, *unclipped* gradient over the
ParamSpace and a private dict (loss, KL, lengths, …) destined for private telemetry. It sees exactly one record:
`StepContext` carries the model at θ_t, the ParamSpace and public constants, and no other record (A2).
By Corollary 2 every arm keeps the guarantee at the same (q, σ, T).

| arm | class |
|---|---|
| dp_grpo | `GRPOGradient` — eq. (7) with the group's own advantages, chunked backward, KL to π_ref |
| zero_advantage | `ZeroAdvantage` — rewards computed, then A ≡ 0; KL kept |
| dp_sft_gold | `GoldSFT` — token-mean NLL of the reference solution (+EOS) given the prompt; no KL |
| dp_sft_filtered | `FilteredSFT` — G samples from π_ref, mean token-mean NLL of the accepted ones; zero if none |

`GradientRecord` items return their fixed vector for every arm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import torch

from mechanisms.dpgrpo.core import DEFAULT_C_ADV, ParamSpace, flatten_grads, group_advantages, prompt_loss
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup
from mechanisms.dpgrpo.rollouts import encode_prompt, encode_target, policy_scope, token_logprobs
from privcheck.errors import InvalidParameter

__all__ = ["REGISTRY", "FilteredSFT", "GRPOGradient", "GoldSFT", "RecordGrad", "RecordGradient", "StepContext",
           "ZeroAdvantage", "from_name"]


@dataclass(frozen=True)
class StepContext:
    """What a record gradient may use: the model at θ_t, its ParamSpace and public constants."""

    model: torch.nn.Module
    space: ParamSpace
    tokenizer: object
    chunk_size: int | None = None
    beta: float = 0.04
    c: float = DEFAULT_C_ADV
    max_prompt_len: int = 32
    L_max: int = 64
    logprobs: Callable = token_logprobs

    @property
    def device(self) -> torch.device:
        return self.space.params[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.space.params[0].dtype

    def prompt_ids(self, record: Record) -> torch.Tensor:
        return encode_prompt(self.tokenizer, record.prompt, self.max_prompt_len, self.device)

    def chunks(self, G: int, chunk_size: int | None = None) -> list[slice]:
        k = chunk_size if chunk_size is not None else self.chunk_size
        if k is None or k >= G:
            return [slice(0, G)]
        return [slice(s, min(s + k, G)) for s in range(0, G, k)]

    def reference(self):
        return policy_scope(self.model, "reference")


@dataclass
class RecordGrad:
    """Flat unclipped gradient (ParamSpace order) and private diagnostics (never released)."""

    grad: torch.Tensor
    private: dict = field(default_factory=dict)


@runtime_checkable
class RecordGradient(Protocol):
    name: str
    rollout_policy: Literal["current", "reference", "none"]

    def __call__(self, ctx: StepContext, record, group: RolloutGroup | None) -> RecordGrad: ...


def _fixed(ctx: StepContext, record: GradientRecord) -> RecordGrad:
    if record.dim != ctx.space.dim:
        raise InvalidParameter("GradientRecord.v", record.dim, f"{ctx.space.dim} entries (the ParamSpace dimension)")
    return RecordGrad(record.gradient(ctx.device, ctx.dtype), {"kind": "gradient_record"})


def _start_scored_record(ctx, group, chunk_size) -> None:
    """Validate the chunking and the scored group, then zero the `.grad` buffers before this prompt."""
    _check_chunk(chunk_size)
    if group is None or group.rewards is None:
        raise InvalidParameter("group", group, "a scored RolloutGroup (rewards filled by line 5)")
    ctx.space.zero_grad()


def _check_chunk(chunk_size):
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise InvalidParameter("chunk_size", chunk_size, "None or an integer >= 1")


class GRPOGradient:
    """eq. (7): zero .grad; A from the group's own rewards; π_ref log-probs under no_grad with the adapter off;
    backward of `core.prompt_loss` per rollout chunk (accumulating .grad); flatten over the ParamSpace."""

    name = "grpo"
    rollout_policy = "current"

    def advantages(self, rewards, c=DEFAULT_C_ADV) -> torch.Tensor:
        return group_advantages(rewards, c)

    def __call__(self, ctx: StepContext, record, group: RolloutGroup | None, *, chunk_size=None) -> RecordGrad:
        if isinstance(record, GradientRecord):
            return _fixed(ctx, record)
        _start_scored_record(ctx, group, chunk_size)
        adv = self.advantages(group.rewards, ctx.c)
        prompt = ctx.prompt_ids(record)
        ids = group.token_ids.to(ctx.device)
        mask = group.mask.to(ctx.device)
        G = group.G
        loss_total = torch.zeros((), dtype=torch.float64)
        kl_total = torch.zeros((), dtype=torch.float64)
        for S in ctx.chunks(G, chunk_size):
            with torch.no_grad(), ctx.reference():
                ref = ctx.logprobs(ctx.model, prompt, ids[S])
            logp = ctx.logprobs(ctx.model, prompt, ids[S])
            loss = prompt_loss(logp, ref, mask[S], adv, ctx.beta, rollout_slice=S)
            loss.backward()
            loss_total += loss.detach().double().cpu()
            with torch.no_grad():
                m = mask[S].to(logp.dtype)
                d = ref - logp.detach()
                kl = ((torch.exp(d) - d - 1) * m).sum(1) / m.sum(1)
                kl_total += kl.sum().double().cpu() / G
        grad = flatten_grads(ctx.space)
        ctx.space.zero_grad()
        private = {"loss": float(loss_total), "kl": float(kl_total), "lengths": mask.sum(1).tolist(),
                   "reward_mean": float(group.rewards.double().mean()),
                   "constant_group": bool((group.rewards == group.rewards[0]).all())}
        return RecordGrad(grad, private)


class ZeroAdvantage(GRPOGradient):
    """Control arm: rewards computed, then A ≡ 0 before the loss; the KL term is kept."""

    name = "zero_advantage"

    def advantages(self, rewards, c=DEFAULT_C_ADV) -> torch.Tensor:
        group_advantages(rewards, c)  # same validation of the group as the GRPO arm
        return torch.zeros(rewards.shape[0], dtype=torch.float64, device=rewards.device)


def _token_mean_nll(ctx: StepContext, prompt, ids, mask, divisor: int, chunk_size) -> torch.Tensor:
    """Σ over rows of (−(1/L_g)·Σ_k m·u) / divisor, backward per chunk; returns the detached float64 loss."""
    total = torch.zeros((), dtype=torch.float64)
    for S in ctx.chunks(ids.shape[0], chunk_size):
        logp = ctx.logprobs(ctx.model, prompt, ids[S])
        m = mask[S].to(logp.dtype)
        loss = -((logp * m).sum(1) / m.sum(1)).sum() / divisor
        loss.backward()
        total += loss.detach().double().cpu()
    return total


class GoldSFT:
    """Gold DP-SFT: gradient of the token-mean NLL of `record.solution` + EOS given the prompt; no KL.
    A record without a solution gets the zero vector (fixed rule, flagged privately)."""

    name = "sft_gold"
    rollout_policy = "none"

    def __call__(self, ctx: StepContext, record, group=None, *, chunk_size=None) -> RecordGrad:
        if isinstance(record, GradientRecord):
            return _fixed(ctx, record)
        ctx.space.zero_grad()
        if record.solution is None:
            return RecordGrad(flatten_grads(ctx.space), {"loss": 0.0, "missing_solution": True})
        prompt = ctx.prompt_ids(record)
        target = encode_target(ctx.tokenizer, record.solution, ctx.L_max, ctx.device)
        mask = torch.ones_like(target)
        loss = _token_mean_nll(ctx, prompt, target, mask, 1, None)
        grad = flatten_grads(ctx.space)
        ctx.space.zero_grad()
        return RecordGrad(grad, {"loss": float(loss), "lengths": [int(target.shape[1])]})


class FilteredSFT:
    """Filtered DP-SFT: G samples from π_ref (rollout policy "reference"), keep verifier-accepted ones
    (reward 1), gradient of their mean token-mean NLL; zero vector if none accepted (record retained)."""

    name = "sft_filtered"
    rollout_policy = "reference"

    def __call__(self, ctx: StepContext, record, group: RolloutGroup | None, *, chunk_size=None) -> RecordGrad:
        if isinstance(record, GradientRecord):
            return _fixed(ctx, record)
        _start_scored_record(ctx, group, chunk_size)
        keep = (group.rewards.to(torch.float64) == 1).nonzero().flatten().tolist()
        loss = torch.zeros((), dtype=torch.float64)
        if keep:
            idx = torch.tensor(keep, dtype=torch.long)
            ids = group.token_ids[idx].to(ctx.device)
            mask = group.mask[idx].to(ctx.device)
            loss = _token_mean_nll(ctx, ctx.prompt_ids(record), ids, mask, len(keep), chunk_size)
        grad = flatten_grads(ctx.space)
        ctx.space.zero_grad()
        return RecordGrad(grad, {"loss": float(loss), "accepted": len(keep)})


REGISTRY = {"grpo": GRPOGradient, "zero_advantage": ZeroAdvantage, "sft_gold": GoldSFT,
            "sft_filtered": FilteredSFT}


def from_name(name: str) -> RecordGradient:
    if name not in REGISTRY:
        raise InvalidParameter("record_gradient", name, f"one of {tuple(REGISTRY)}")
    return REGISTRY[name]()

