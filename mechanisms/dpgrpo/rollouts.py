"""Rollout backends (Algorithm 1, line 4) and the log-probability helper (§2.3).

* `IsolatedHF` (default, mode "isolated"): one `generate` call per sampled prompt with
  `num_return_sequences = G`, plain tempered sampling (`top_k = 0`, `top_p = 1.0` set explicitly), at most
  `L_max` new tokens; no other record shares the computation (A2).
* `Replay` (mode "replay", checks): fixed `RolloutGroup`s per record, so a record's gradient is a deterministic
  function of the record.
* `token_logprobs(model, prompt_ids, completion_ids)`: log π(y_k | x, y_<k) from the unscaled logits
  (temperature 1), `log_softmax` in fp32 (float64 when the model is float64), completion positions only.

A backend is called as `backend(model, records, policy, randomness)` with policy "current" (π_θt) or
"reference" (LoRA adapter disabled, π_ref) and returns one `RolloutGroup` per record (rewards unset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from privcheck import validation as val
from privcheck.errors import InvalidParameter

from mechanisms.dpgrpo.core import completion_mask
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup

POLICIES = ("current", "reference")


# ------------------------------------------------------------------------------------ tokenizer access

def pad_id(tokenizer) -> int:
    for attr in ("pad_id", "pad_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    raise InvalidParameter("tokenizer", type(tokenizer).__name__, "a tokenizer with pad_id / pad_token_id")


def eos_id(tokenizer) -> int:
    for attr in ("eos_id", "eos_token_id"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v)
    raise InvalidParameter("tokenizer", type(tokenizer).__name__, "a tokenizer with eos_id / eos_token_id")


def encode_prompt(tokenizer, text: str, max_prompt_len: int, device=None) -> torch.Tensor:
    """Prompt token ids (LongTensor[P]); the public per-record truncation keeps the last `max_prompt_len`."""
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        ids = tokenizer.encode(text)
    ids = list(ids)[-max_prompt_len:]
    if not ids:
        raise InvalidParameter("prompt", text, "a prompt with at least one token")
    return torch.tensor(ids, dtype=torch.long, device=device)


def encode_target(tokenizer, text: str, L_max: int, device=None) -> torch.Tensor:
    """Target ids of `text` followed by EOS, truncated to L_max (LongTensor[1, L])."""
    try:
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:
        ids = list(tokenizer.encode(text))
    ids = (ids + [eos_id(tokenizer)])[:L_max]
    return torch.tensor([ids], dtype=torch.long, device=device)


def decode_completion(tokenizer, row) -> str:
    """Text of one completion row up to (excluding) the first EOS; PAD skipped."""
    eos, pad = eos_id(tokenizer), pad_id(tokenizer)
    ids = []
    for t in (int(t) for t in row):
        if t == eos:
            break
        if t != pad:
            ids.append(t)
    try:
        return tokenizer.decode(ids, skip_special_tokens=True)
    except TypeError:
        return tokenizer.decode(ids)


# ---------------------------------------------------------------------------------------- log-probs

def token_logprobs(model, prompt_ids, completion_ids) -> torch.Tensor:
    """u_{g,k} = log π(y_k | x, y_<k) for completion rows `completion_ids` [R, L] after `prompt_ids` [P].

    Unscaled logits (temperature 1); the model is asked for the L + 1 trailing logits and the last is dropped;
    `log_softmax` in float32, or float64 when the logits are float64. Returns Tensor[R, L] (differentiable).
    """
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 1:
        raise InvalidParameter("prompt_ids", getattr(prompt_ids, "shape", prompt_ids), "a LongTensor[P]")
    if not isinstance(completion_ids, torch.Tensor) or completion_ids.dim() != 2:
        raise InvalidParameter("completion_ids", getattr(completion_ids, "shape", completion_ids),
                               "a LongTensor[R, L]")
    R, L = completion_ids.shape
    device = prompt_ids.device
    full = torch.cat([prompt_ids[None, :].expand(R, -1), completion_ids.to(device)], dim=1)
    out = model(input_ids=full, attention_mask=torch.ones_like(full), logits_to_keep=L + 1)
    logits = out.logits[:, -(L + 1):-1, :]
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(dtype), dim=-1)
    return logp.gather(-1, completion_ids.to(device)[..., None]).squeeze(-1)


@contextlib.contextmanager
def policy_scope(model, policy: str):
    """`current`: the model as is; `reference`: LoRA adapter disabled (π_ref, the public base)."""
    if policy == "current":
        yield model
    elif policy == "reference":
        if not hasattr(model, "disable_adapter"):
            raise InvalidParameter("model", type(model).__name__, "a PEFT model (disable_adapter) for π_ref")
        with model.disable_adapter():
            yield model
    else:
        raise InvalidParameter("policy", policy, f"one of {POLICIES}")


# ---------------------------------------------------------------------------------------- backends

class IsolatedHF:
    """One `generate` per sampled prompt (A2 isolation), G samples at temperature τ, top_k = 0, top_p = 1."""

    mode = "isolated"

    def __init__(self, tokenizer, *, G, tau, L_max, max_prompt_len, top_k=0, top_p=1.0):
        self.tokenizer = tokenizer
        self.G = val.count("G", G, minimum=2)
        self.tau = val.positive("tau", tau)
        self.L_max = val.count("L_max", L_max)
        self.max_prompt_len = val.count("max_prompt_len", max_prompt_len)
        self.top_k = val.count("top_k", top_k, minimum=0)
        self.top_p = val.positive("top_p", top_p)
        self.pad_id, self.eos_id = pad_id(tokenizer), eos_id(tokenizer)

    @classmethod
    def from_config(cls, tokenizer, config) -> "IsolatedHF":
        return cls(tokenizer, G=config.G, tau=config.tau, L_max=config.L_max, max_prompt_len=config.max_prompt_len,
                   top_k=config.top_k, top_p=config.top_p)

    def generation_config(self):
        from transformers import GenerationConfig

        return GenerationConfig(do_sample=True, temperature=self.tau, top_k=self.top_k, top_p=self.top_p,
                                max_new_tokens=self.L_max, num_return_sequences=self.G, pad_token_id=self.pad_id,
                                eos_token_id=self.eos_id, num_beams=1, repetition_penalty=1.0)

    @torch.no_grad()
    def generate_one(self, model, record: Record) -> RolloutGroup:
        device = next(model.parameters()).device
        ids = encode_prompt(self.tokenizer, record.prompt, self.max_prompt_len, device)[None, :]
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=self.generation_config())
        comp = out[:, ids.shape[1]:]
        if comp.shape[1] < self.L_max:  # every row stopped early: right-pad to L_max
            pad = torch.full((comp.shape[0], self.L_max - comp.shape[1]), self.pad_id, dtype=comp.dtype,
                             device=comp.device)
            comp = torch.cat([comp, pad], dim=1)
        comp = comp[:, :self.L_max].contiguous()
        mask = completion_mask(comp, self.eos_id)
        texts = tuple(decode_completion(self.tokenizer, row) for row in comp.tolist())
        return RolloutGroup(comp, mask, None, texts)

    def __call__(self, model, records: Sequence, policy: str = "current", randomness=None) -> list:
        groups = []
        for rec in records:
            if isinstance(rec, GradientRecord):
                groups.append(None)
                continue
            scope = randomness.rollout_scope() if randomness is not None else contextlib.nullcontext()
            with scope, policy_scope(model, policy):
                groups.append(self.generate_one(model, rec))
        return groups


class Replay:
    """Fixed rollouts for checks: `Replay(pairs)` with (record, RolloutGroup) pairs; a record is looked up by
    identity, then by equality. The stored group is returned without rewards (line 5 scores it)."""

    mode = "replay"

    def __init__(self, pairs):
        self._pairs = []
        for rec, group in pairs:
            if not isinstance(group, RolloutGroup):
                raise InvalidParameter("group", type(group).__name__, "a RolloutGroup")
            self._pairs.append((rec, group))

    def group_for(self, record) -> RolloutGroup:
        for rec, g in self._pairs:
            if rec is record:
                return g
        for rec, g in self._pairs:
            if rec == record:
                return g
        raise InvalidParameter("record", getattr(record, "prompt", record), "a record registered with Replay")

    def __call__(self, model, records: Sequence, policy: str = "current", randomness=None) -> list:
        if policy not in POLICIES:
            raise InvalidParameter("policy", policy, f"one of {POLICIES}")
        out = []
        for rec in records:
            if isinstance(rec, GradientRecord):
                out.append(None)
                continue
            g = self.group_for(rec)
            out.append(RolloutGroup(g.token_ids, g.mask, None, g.texts))
        return out


def make_group(tokenizer, completions: Sequence[str], L_max: int, *, eos: Sequence[bool] | None = None) -> RolloutGroup:
    """A RolloutGroup from completion texts (EOS appended where `eos[g]`, default True), right-padded to L_max."""
    rows = []
    eos_flags = [True] * len(completions) if eos is None else list(eos)
    for text, add_eos in zip(completions, eos_flags):
        ids = list(tokenizer.encode(text)) + ([eos_id(tokenizer)] if add_eos else [])
        ids = ids[:L_max]
        rows.append(ids + [pad_id(tokenizer)] * (L_max - len(ids)))
    token_ids = torch.tensor(rows, dtype=torch.long)
    return RolloutGroup(token_ids, completion_mask(token_ids, eos_id(tokenizer)), None,
                        tuple(decode_completion(tokenizer, r) for r in rows))
