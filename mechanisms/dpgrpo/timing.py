"""Private versus non-private round time, and isolated versus batched generation (docs/dpgrpo.md,
"Private versus non-private time").

`private_over_nonprivate` is the round time of the private trainer divided by that of a
non-private GRPO round on the same rollouts, for the whole round and for the gradient phase:

* rollouts are generated ONCE (the trainer's backend and rollout policy) and replayed for both paths, so the
  generation seconds are measured once and enter both round times unchanged;
* private path: `trainer.score`, `trainer.noisy_update` (per-record gradients with their reference
  log-probs, one clip each, sum, Gaussian noise, public divisor: the gradient phase), `trainer.apply_update`;
* non-private path: `trainer.score`, `nonprivate_grpo_update` (one batched forward of the policy and one of
  the reference over all records' completions, ONE backward of the mean of the per-prompt losses, no clip,
  no noise: the gradient phase), `trainer.apply_update`;
* round time = generation + scoring + gradient phase + update; each figure is a median over `repeats`,
  after one untimed warm-up of each path.

Guarantees: `measure_private_over_nonprivate` reads only the public records it is given (never the
trainer's universe), and leaves the trainer as it found it: LoRA parameters and their `.grad`, optimizer
state, the coins / noise / rollout generators, the framework RNG, the round counter and the telemetry.
Timing figures are outside the privacy guarantee (`covered_by_guarantee: false` in the run artifact).
Device work is synchronised before each clock read on CUDA.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence

import torch

from mechanisms.dpgrpo.core import DEFAULT_C_ADV, flatten_grads, prompt_loss
from mechanisms.dpgrpo.randomness import TorchRandomness
from mechanisms.dpgrpo.records import Record, RolloutGroup
from mechanisms.dpgrpo.rollouts import BatchedHF, IsolatedHF, left_pad, pad_id, policy_scope
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["measure_private_over_nonprivate", "nonprivate_grpo_update", "time_generation_modes"]


# ------------------------------------------------------------------------------------ validation

def _public_records(records) -> list[Record]:
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or not records:
        raise InvalidParameter("records", type(records).__name__, "a non-empty sequence of (public) Records")
    for i, rec in enumerate(records):
        if not isinstance(rec, Record):
            raise InvalidParameter(f"records[{i}]", type(rec).__name__, "a Record")
    return list(records)


def _grpo_arm(trainer):
    arm = trainer.arm
    if getattr(arm, "rollout_policy", None) != "current" or not callable(getattr(arm, "advantages", None)):
        raise InvalidParameter("trainer.arm", getattr(arm, "name", arm),
                               "a GRPO arm (rollout policy 'current' with group advantages)")
    return arm


# ------------------------------------------------------------------------------------ clock

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device, fn, *args):
    """(result, seconds) of fn(*args), device work included."""
    _sync(device)
    t0 = time.perf_counter()
    out = fn(*args)
    _sync(device)
    return out, time.perf_counter() - t0


# ------------------------------------------------------------------------------------ non-private round

def _padded_logprobs(model, ids, attention, positions, completions, L) -> torch.Tensor:
    """log π(y_k | x, y_<k) at the L completion positions of left-padded rows (unscaled logits, fp32/fp64)."""
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=L + 1,
                use_cache=False)
    logits = out.logits[:, -(L + 1):-1, :]
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return torch.log_softmax(logits.to(dtype), dim=-1).gather(-1, completions[..., None]).squeeze(-1)


def nonprivate_grpo_update(trainer, records, groups) -> torch.Tensor:
    """The non-private GRPO gradient on the same rollouts: ∇_θ (1/|B|)·Σ_i ℓ_i(θ_t), flat in
    ParamSpace order, with ℓ_i the eq. (7) loss of record i (the arm's group advantages, β, k3 KL to π_ref).

    One left-padded forward of π_ref (adapter off, no grad) and one of π_θ over every record's G completions,
    then ONE backward of the mean of the per-prompt losses; no clip, no noise, no optimizer step (the round
    applies it with `trainer.apply_update`). `groups` are the records' scored RolloutGroups (line 5). The
    `.grad` buffers are cleared before and after. At q = 1, σ = 0, C = ∞ this equals `trainer.noisy_update`.
    """
    records = _public_records(records)
    arm = _grpo_arm(trainer)
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or len(groups) != len(records):
        raise InvalidParameter("groups", type(groups).__name__, f"a sequence of {len(records)} scored RolloutGroups")
    for i, g in enumerate(groups):
        if not isinstance(g, RolloutGroup) or g.rewards is None:
            raise InvalidParameter(f"groups[{i}]", g, "a scored RolloutGroup (rewards filled by line 5)")
    widths = {int(g.token_ids.shape[1]) for g in groups}
    if len(widths) != 1:
        raise InvalidParameter("groups", sorted(widths), "completions of one common width L_max")
    ctx = trainer.ctx
    device = ctx.device
    c = getattr(trainer.config, "c", DEFAULT_C_ADV)
    L = widths.pop()
    sizes = [g.G for g in groups]
    prompts = [ctx.prompt_ids(rec) for rec, G in zip(records, sizes) for _ in range(G)]
    pid, pmask, _ = left_pad(prompts, pad_id(trainer.tokenizer), device)
    comp = torch.cat([g.token_ids for g in groups]).to(device)
    ids = torch.cat([pid, comp], dim=1)
    attention = torch.cat([pmask, torch.ones_like(comp)], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    model = ctx.model
    with torch.no_grad(), policy_scope(model, "reference"):
        ref = _padded_logprobs(model, ids, attention, positions, comp, L)
    trainer.space.zero_grad()
    logp = _padded_logprobs(model, ids, attention, positions, comp, L)
    losses, start = [], 0
    for g, G in zip(groups, sizes):
        rows = slice(start, start + G)
        adv = arm.advantages(g.rewards, c)
        losses.append(prompt_loss(logp[rows], ref[rows], g.mask.to(device), adv, ctx.beta))
        start += G
    (torch.stack(losses).sum() / len(records)).backward()
    grad = flatten_grads(trainer.space)
    trainer.space.zero_grad()
    return grad


# ------------------------------------------------------------------------------------ trainer state

class _TrainerState:
    """Snapshot of everything a timing round can touch; `restore()` puts it back exactly."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.params = [p.detach().clone() for p in trainer.space.params]
        self.grads = [p.grad for p in trainer.space.params]
        self.optimizer = copy.deepcopy(trainer.optimizer.state_dict())
        self.generators = {k: g.get_state() for k, g in vars(trainer.randomness).items()
                           if isinstance(g, torch.Generator)}
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = (torch.cuda.get_rng_state_all()
                         if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        self.scratch = trainer.scratch
        self.t = trainer.t
        self.telemetry = (len(trainer.public_telemetry), len(trainer.private_telemetry))

    def restore_weights(self) -> None:
        """LoRA parameters and optimizer state only (between timed repeats)."""
        tr = self.trainer
        with torch.no_grad():
            for p, saved in zip(tr.space.params, self.params):
                p.copy_(saved)
        tr.optimizer.load_state_dict(copy.deepcopy(self.optimizer))

    def restore(self) -> None:
        tr = self.trainer
        self.restore_weights()
        for p, g in zip(tr.space.params, self.grads):
            p.grad = g
        for k, state in self.generators.items():
            getattr(tr.randomness, k).set_state(state)
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        tr.scratch = self.scratch
        tr.t = self.t
        del tr.public_telemetry[self.telemetry[0]:]
        del tr.private_telemetry[self.telemetry[1]:]


# ------------------------------------------------------------------------------------ measurements

def _private_round(trainer, records, groups) -> dict:
    device = trainer.device
    scored, score_s = _timed(device, trainer.score, records, groups)
    g_hat, grad_s = _timed(device, trainer.noisy_update, list(zip(records, scored)))
    _, update_s = _timed(device, trainer.apply_update, g_hat)
    return {"score": score_s, "gradient": grad_s, "update": update_s}


def _nonprivate_round(trainer, records, groups) -> dict:
    device = trainer.device
    scored, score_s = _timed(device, trainer.score, records, groups)
    g, grad_s = _timed(device, nonprivate_grpo_update, trainer, records, scored)
    _, update_s = _timed(device, trainer.apply_update, g)
    return {"score": score_s, "gradient": grad_s, "update": update_s}


def measure_private_over_nonprivate(trainer, public_records, *, repeats=3, warmup=True) -> dict:
    """`private_over_nonprivate` on PUBLIC records (the caller passes public evaluation prompts).

    Returns medians over `repeats`: "round" (private_round_s / nonprivate_round_s), "gradient_phase"
    (private_gradient_s / nonprivate_gradient_s), the four seconds, and "generation_s" (measured once,
    included in both round times), "records", "repeats". The trainer is left unchanged (see module doc).
    """
    records = _public_records(public_records)
    repeats = val.count("repeats", repeats)
    if not isinstance(warmup, bool):
        raise InvalidParameter("warmup", warmup, "a bool")
    _grpo_arm(trainer)
    state = _TrainerState(trainer)
    trainer.scratch = trainer.new_scratch()  # public-record diagnostics never reach the trainer's scratch
    try:
        groups, generation_s = _timed(trainer.device, trainer.rollouts, trainer.model, records, "current")
        if warmup:
            _private_round(trainer, records, groups)
            state.restore_weights()
            _nonprivate_round(trainer, records, groups)
            state.restore_weights()
        private, nonprivate = [], []
        for _ in range(repeats):
            private.append(_private_round(trainer, records, groups))
            state.restore_weights()
            nonprivate.append(_nonprivate_round(trainer, records, groups))
            state.restore_weights()
            trainer.scratch = trainer.new_scratch()
    finally:
        state.restore()

    def median(rounds, key=None):
        return statistics.median(sum(r.values()) + generation_s if key is None else r[key] for r in rounds)

    out = {"private_round_s": median(private), "nonprivate_round_s": median(nonprivate),
           "private_gradient_s": median(private, "gradient"), "nonprivate_gradient_s": median(nonprivate, "gradient"),
           "generation_s": generation_s, "records": len(records), "repeats": repeats}
    tokens = sum(int(g.mask.sum()) for g in groups)       # completion tokens of the public rollouts
    out["generated_tokens"] = tokens
    out["tokens_per_s"] = tokens / out["private_round_s"]  # completion tokens per second of a private round
    out["round"] = out["private_round_s"] / out["nonprivate_round_s"]
    out["gradient_phase"] = out["private_gradient_s"] / out["nonprivate_gradient_s"]
    return out


def time_generation_modes(model, tokenizer, records, config, *, repeats=1) -> dict:
    """Seconds to generate the G rollouts of every (public) record with `IsolatedHF` (one call per record)
    and with `BatchedHF` (one left-padded call), policy π_θ, fresh OS-entropy rollout randomness (the caller's
    generators and framework RNG are untouched). Medians over `repeats`, after one untimed warm-up of each.
    Returns {"isolated_s", "batched_s", "batched_speedup", "records", "G"}."""
    records = _public_records(records)
    repeats = val.count("repeats", repeats)
    device = next(model.parameters()).device
    randomness = TorchRandomness.os_entropy(device)
    backends = {"isolated": IsolatedHF.from_config(tokenizer, config),
                "batched": BatchedHF.from_config(tokenizer, config)}
    seconds = {}
    for name, backend in backends.items():
        backend(model, records[:1], "current", randomness)  # warm-up (lazy initialisation, allocator)
        seconds[name] = statistics.median(
            _timed(device, backend, model, records, "current", randomness)[1] for _ in range(repeats))
    return {"isolated_s": seconds["isolated"], "batched_s": seconds["batched"],
            "batched_speedup": seconds["isolated"] / seconds["batched"], "records": len(records), "G": config.G}
