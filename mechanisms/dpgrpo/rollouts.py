"""Rollout backends (Algorithm 1, line 4) and the log-probability helper (docs/dpgrpo.md, "Rollout modes").

* `IsolatedHF` (default, mode "isolated"): one `generate` call per sampled prompt with
  `num_return_sequences = G`, plain tempered sampling (`top_k = 0`, `top_p = 1.0` set explicitly), at most
  `L_max` new tokens; no other record shares the computation (A2).
* `BatchedHF` (mode "batched"): one left-padded `generate` call for the G completions of every sampled prompt
  (attention mask and position ids account for the padding), same sampling law per prompt. Faster, but an (A2)
  gap: floating-point kernels are not batch-invariant, so a prompt's completions can depend numerically on its
  batch-mates (`BatchedHF.A2_CAVEAT`, copied into the run artifact). `isolated` stays the default.
* `Replay` (mode "replay", checks): fixed `RolloutGroup`s per record, so a record's gradient is a deterministic
  function of the record.
* `left_pad(prompts, pad_id)`: the left-padded batch (ids, attention mask, position ids) both the batched
  backend and the non-private timing baseline use.
* `token_logprobs(model, prompt_ids, completion_ids)`: log π(y_k | x, y_<k) from the unscaled logits
  (temperature 1), `log_softmax` in fp32 (float64 when the model is float64), completion positions only.
* `policy_scope(model, policy)`: π_θ as is, or π_ref with every LoRA layer on its base path (PEFT's own
  `disable_adapter()` whenever the adapters are anything but plain, enabled, unmerged LoRA).

A backend is called as `backend(model, records, policy, randomness)` with policy "current" (π_θt) or
"reference" (LoRA adapter disabled, π_ref) and returns one `RolloutGroup` per record (rewards unset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from mechanisms.dpgrpo.core import completion_mask
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["POLICIES", "BatchedHF", "IsolatedHF", "Replay", "decode_completion", "encode_prompt", "encode_target",
           "eos_id", "left_pad", "make_group", "pad_id", "plain_lora_layers", "policy_scope", "row_logprobs",
           "token_logprobs"]

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
    return row_logprobs(model, prompt_ids[None, :].expand(completion_ids.shape[0], -1), completion_ids)


def row_logprobs(model, prompt_rows, completion_ids) -> torch.Tensor:
    """`token_logprobs` with one prompt per row: `prompt_rows` [R, P] (equal lengths, no padding) before
    `completion_ids` [R, L]. Returns Tensor[R, L] (differentiable)."""
    if not isinstance(prompt_rows, torch.Tensor) or prompt_rows.dim() != 2:
        raise InvalidParameter("prompt_rows", getattr(prompt_rows, "shape", prompt_rows), "a LongTensor[R, P]")
    if not isinstance(completion_ids, torch.Tensor) or completion_ids.dim() != 2 \
            or completion_ids.shape[0] != prompt_rows.shape[0]:
        raise InvalidParameter("completion_ids", getattr(completion_ids, "shape", completion_ids),
                               f"a LongTensor[{prompt_rows.shape[0]}, L] (one row per prompt row)")
    L = completion_ids.shape[1]
    device = prompt_rows.device
    full = torch.cat([prompt_rows, completion_ids.to(device)], dim=1)
    # use_cache=False: a scoring pass needs no KV cache (building it is pure overhead)
    out = model(input_ids=full, attention_mask=torch.ones_like(full), logits_to_keep=L + 1, use_cache=False)
    logits = out.logits[:, -(L + 1):-1, :]
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logp = torch.log_softmax(logits.to(dtype), dim=-1)
    return logp.gather(-1, completion_ids.to(device)[..., None]).squeeze(-1)


def left_pad(prompts: Sequence[torch.Tensor], pad_token: int, device=None):
    """Left-pad 1-D prompt id tensors to a common length P.

    Returns (input_ids [B, P], attention_mask [B, P], position_ids [B, P]): the mask is 0 on padding and the
    position ids count real tokens only (0 for the first real token, 0 on padding), so each row sees the
    positions it would see alone; that is what makes a left-padded row equal its unpadded computation.
    """
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence) or not prompts:
        raise InvalidParameter("prompts", type(prompts).__name__, "a non-empty sequence of LongTensor[P_i]")
    for i, p in enumerate(prompts):
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.numel() < 1 or p.is_floating_point():
            raise InvalidParameter(f"prompts[{i}]", getattr(p, "shape", p), "a non-empty LongTensor[P_i]")
    device = prompts[0].device if device is None else device
    P = max(p.numel() for p in prompts)
    ids = torch.full((len(prompts), P), int(pad_token), dtype=torch.long, device=device)
    attention = torch.zeros((len(prompts), P), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, P - p.numel():] = p.to(device)
        attention[i, P - p.numel():] = 1
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return ids, attention, positions


def plain_lora_layers(model):
    """The model's PEFT tuner layers when disabling them is all `disable_adapter()` would do (LoRA-style
    adapters, none merged or already disabled, no prompt learning, no modules_to_save wrappers, no bias
    adaptation); otherwise None."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:  # pragma: no cover - peft is part of the `train` extra
        return None
    configs = getattr(model, "peft_config", None)
    active = getattr(model, "active_adapter", None)
    config = configs.get(active) if isinstance(configs, dict) and isinstance(active, str) else None
    if config is None or config.is_prompt_learning or config.is_adaption_prompt or \
            getattr(config, "bias", "none") != "none":
        return None
    layers = []
    for module in model.modules():
        if isinstance(module, AuxiliaryTrainingWrapper):
            return None
        if isinstance(module, BaseTunerLayer):
            if module.merged or module.disable_adapters:
                return None
            layers.append(module)
    return layers or None


@contextlib.contextmanager
def _adapters_disabled(model, layers):
    """The forward of PEFT's `model.disable_adapter()` (every tuner layer takes its base path), restored on
    exit. PEFT's context also recomputes the whole model's adapter status and toggles `requires_grad` on
    every adapter tensor at each entry; with one reference pass per record that bookkeeping cost about a fifth
    of the private gradient phase on the tiny Qwen2 (16 prompts, G = 4, L = 16: 25.7 → 19.8 ms per prompt,
    interleaved A/B, one thread). The flag set here is the one the LoRA forward reads (`disable_adapters`);
    tests/dpgrpo/test_rollouts.py checks that this scope and PEFT's give bit-identical log-probabilities and
    leave the model as it was."""
    was = getattr(model, "_adapters_disabled", None)
    try:
        for layer in layers:
            layer._disable_adapters = True
        if was is not None:
            model._adapters_disabled = True
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False  # `plain_lora_layers` only returns enabled layers
        if was is not None:
            model._adapters_disabled = was


@contextlib.contextmanager
def policy_scope(model, policy: str):
    """`current`: the model as is; `reference`: LoRA adapter disabled (π_ref, the public base)."""
    if policy == "current":
        yield model
    elif policy == "reference":
        if not hasattr(model, "disable_adapter"):
            raise InvalidParameter("model", type(model).__name__, "a PEFT model (disable_adapter) for π_ref")
        layers = plain_lora_layers(model)
        with (model.disable_adapter() if layers is None else _adapters_disabled(model, layers)):
            yield model
    else:
        raise InvalidParameter("policy", policy, f"one of {POLICIES}")


# ---------------------------------------------------------------------------------------- backends

class IsolatedHF:
    """One `generate` per sampled prompt (A2 isolation), G samples at temperature τ, top_k = 0, top_p = 1."""

    mode = "isolated"
    A2_ASSUMPTION = "isolated rollouts"  # value of the run artifact's privacy.assumptions.A2
    A2_CAVEAT = None

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
        return self.group_from(out[:, ids.shape[1]:])

    def completions(self, rows: torch.Tensor) -> torch.Tensor:
        """Generated rows right-padded (all rows may stop early) and truncated to exactly L_max columns."""
        if rows.shape[1] < self.L_max:
            pad = torch.full((rows.shape[0], self.L_max - rows.shape[1]), self.pad_id, dtype=rows.dtype,
                             device=rows.device)
            rows = torch.cat([rows, pad], dim=1)
        return rows[:, :self.L_max].contiguous()

    def group_from(self, rows: torch.Tensor) -> RolloutGroup:
        """One prompt's RolloutGroup (rewards unset) from its G generated rows."""
        comp = self.completions(rows)
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


class BatchedHF(IsolatedHF):
    """All sampled prompts in ONE left-padded `generate` call (mode "batched").

    Same constructor, `from_config` and sampling settings as `IsolatedHF` (temperature τ, explicit top_k = 0,
    top_p = 1.0, at most L_max new tokens, the rollout generator via `randomness.rollout_scope()`). Each prompt
    is repeated G times before the call (rows `b·G … b·G + G − 1` belong to prompt b; this is what
    `num_return_sequences = G` does internally, done here so that the row layout is explicit), and padding is
    on the left with an attention mask and position ids that count real tokens only, so in exact arithmetic
    each row's next-token law equals its isolated one. Only completions are returned: the loss recomputes each
    record's log-probabilities from the unscaled logits separately (`token_logprobs`), so gradients stay per
    record.

    (A2) gap, recorded in the run artifact from `A2_ASSUMPTION` / `A2_CAVEAT`: batched floating-point kernels
    are not batch-invariant (reduction order and padded shape change with the batch), so one record's
    completions can depend numerically on which other records were sampled with it. `isolated` is the default.
    """

    mode = "batched"
    A2_ASSUMPTION = "batch-invariance not guaranteed"
    A2_CAVEAT = ("batched generation: one left-padded generate call for all sampled prompts; floating-point "
                 "kernels are not batch-invariant, so a prompt's rollouts can depend numerically on its "
                 "batch-mates (record isolation (A2) not guaranteed); rollout_mode 'isolated' avoids this")

    def generation_config(self):
        gc = super().generation_config()
        gc.num_return_sequences = 1  # the G copies of each prompt are explicit rows (see `encode_batch`)
        return gc

    def encode_batch(self, records: Sequence[Record], device=None):
        """(input_ids, attention_mask, position_ids) [B·G, P]: each record's prompt G times, left-padded."""
        prompts = [encode_prompt(self.tokenizer, rec.prompt, self.max_prompt_len, device) for rec in records]
        return left_pad([p for p in prompts for _ in range(self.G)], self.pad_id, device)

    @torch.no_grad()
    def generate_batch(self, model, records: Sequence[Record], **generate_kwargs):
        """The raw `generate` output for `records` (plain Records) in one call, and the prompt width P
        (completions start at column P). `generate_kwargs` go to `generate` unchanged (the checks ask for
        `output_scores=True, return_dict_in_generate=True`)."""
        device = next(model.parameters()).device
        ids, attention, positions = self.encode_batch(records, device)
        out = model.generate(input_ids=ids, attention_mask=attention, position_ids=positions,
                             generation_config=self.generation_config(), **generate_kwargs)
        return out, ids.shape[1]

    def __call__(self, model, records: Sequence, policy: str = "current", randomness=None) -> list:
        if policy not in POLICIES:
            raise InvalidParameter("policy", policy, f"one of {POLICIES}")
        prompts = [rec for rec in records if not isinstance(rec, GradientRecord)]
        groups = iter(())
        if prompts:
            scope = randomness.rollout_scope() if randomness is not None else contextlib.nullcontext()
            with scope, policy_scope(model, policy):
                out, width = self.generate_batch(model, prompts)
            rows = out[:, width:]
            groups = iter([self.group_from(rows[b * self.G:(b + 1) * self.G]) for b in range(len(prompts))])
        return [None if isinstance(rec, GradientRecord) else next(groups) for rec in records]


class Replay:
    """Fixed rollouts for checks: `Replay(pairs)` with (record, RolloutGroup) pairs; a record is looked up by
    identity, then by equality. The stored group is returned without rewards (line 5 scores it)."""

    mode = "replay"
    A2_ASSUMPTION = "replayed rollouts (checks)"
    A2_CAVEAT = None

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
