"""LLM selection pipeline: sample candidates from a causal LM, score them, and run BoN, PrivBoN, ITP, PrivITP.

What it does (spec shared/spec/selection.md §16.2; discussion in docs/selection.md):

* samples n candidates per prompt from a transformers causal LM π0 by plain tempered sampling
  (`do_sample=True`, `temperature`, `top_k=0`, `top_p=1.0` set explicitly, fixed-length completions of
  `max_new_tokens` tokens: no EOS stop, no other logits processor);
* scores each (prompt, completion) with either a Python reward function `reward(prompt, completion) ->
  float` (on decoded text) or a sequence-classification reward model whose last-position logit is mapped
  to the public range by the public squash `R_max·sigmoid(logit)`; every score is checked finite and then
  clipped to [0, R_max] (§2);
* runs any subset of the four selectors on the scores. BoN, PrivBoN and ITP use the shared batch; PrivITP
  uses the shared batch as its Phase-2 list and a SECOND, independently sampled batch for Phase 1 (§6:
  the two phases never share candidates or score arrays). A fallback (ITP/PrivITP, t = ⊥) returns a fresh
  π0 sample: one reserve completion per prompt and per fallback-capable selector, drawn with the
  candidates but never looked at by any selector (the spec's y′_{n+1});
* writes `DIR/selection_run.json` (sealed with sha256, atomic): model shapes and sizes, throughput,
  selection time per selector, peak memory, the privacy-loss records of the private selectors (their
  `to_json()`), environment, randomness mode and status (complete | incomplete: a wall-clock guard stops
  between prompt chunks and the selectors then run on the prompts finished so far).

Privacy boundary. The reward model (or reward function) is the private part: it stands for r̂_D, trained
on the private data D, and enters only through clipped scores. π0 (the LM), the prompts and candidate
sampling are public: they never depend on D, so the candidate lists are public randomness and may be
recorded. Δ is a public *assumption* about the reward model (sup over candidates and neighbouring D of the
score change); the library cannot verify it. R_max, Δ, σ, β, σ_X = σ_Z = σ/2, L and δ are public
constants fixed before any score is seen; nothing computed from scores enters a noise scale, a normaliser
or the range (§2, §16.1). Every ε comes from the mechanisms (which call `privcheck.accounting`); this
module computes none. Each selector is a separate query on the same public candidates: releasing the
outputs of several selectors composes (basic composition). Only runs without `seed` (OS-entropy noise)
have `privacy_release: true`; wall-clock timings are measurements outside every guarantee
(`timing.covered_by_guarantee: false`).

Presets: `cpu-tiny` (tiny randomly initialised Qwen2-style models, byte tokenizer, 4 prompts, n = 8,
16-token completions; seconds on a CPU; used by the tests) and `gpu-h200` (Qwen2-0.5B shapes in bf16,
random weights, 64 prompts, n = 1,024, 64-token completions; sized for 8 minutes on one H200). No weights
are downloaded: every model is built from a config and initialised under a fixed public seed.

    privcheck run selection --preset cpu-tiny --out DIR [--seed N] [--selectors bon privitp] [--json]
    run_selection("cpu-tiny", out=DIR, seed=0) -> (artifact dict, path, PipelineResult)

torch and transformers are imported lazily (the CLI starts without them).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import resource
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from privcheck import validation as v
from privcheck.errors import InvalidParameter

SELECTORS = ("bon", "privbon", "itp", "privitp")
PRIVATE_SELECTORS = ("privbon", "privitp")
FALLBACK_SELECTORS = ("itp", "privitp")       # selectors whose fallback returns a fresh π0 sample
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
ARTIFACT_NAME = "selection_run.json"
ARTIFACT_KIND = "selection_run"
SCHEMA_VERSION = 1
PROMPT_SEED = 16_2_2026                        # public: synthetic prompts are the same on every run
REQUIRED_KEYS = ("kind", "schema_version", "preset", "device", "status", "models", "n", "prompts",
                 "generation", "public_constants", "throughput", "selection", "peak_memory", "environment",
                 "randomness", "privacy_release", "timing", "sha256")


# --- configuration ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    """Shape of a Qwen2-style decoder (used for the policy LM and for the reward model's backbone)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                     "max_position_embeddings"):
            v.count(name, getattr(self, name))
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise InvalidParameter("num_heads", self.num_heads,
                                   "a divisor of hidden_size and a multiple of num_kv_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def config(self, *, pad_token_id: int = 0):
        """A `transformers.Qwen2Config` (no EOS, so completions have a fixed length; one reward label)."""
        from transformers import Qwen2Config
        return Qwen2Config(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                           num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
                           num_key_value_heads=self.num_kv_heads, intermediate_size=self.intermediate_size,
                           max_position_embeddings=self.max_position_embeddings,
                           tie_word_embeddings=self.tie_word_embeddings, bos_token_id=None, eos_token_id=None,
                           pad_token_id=pad_token_id, num_labels=1, use_cache=True)

    def to_json(self) -> dict:
        return {"family": "qwen2", **dataclasses.asdict(self), "head_dim": self.head_dim}


@dataclass(frozen=True)
class SelectionConstants:
    """Public constants of the four selectors (spec §2): fixed before any score is seen, recorded in the
    artifact. r_lo = 0; σ_X = σ_Z = σ/2 (the defaults of Bhattad & Ray Chowdhury, §6)."""

    r_max: float = 1.0
    sensitivity: float = 0.05
    sigma: float = 0.2
    beta: float = 0.05
    headroom: float = 0.5
    delta: float = 1e-5

    def __post_init__(self):
        r_max = v.positive("r_max", self.r_max)
        sens = v.positive("sensitivity", self.sensitivity)
        if sens > r_max:
            raise InvalidParameter("sensitivity", self.sensitivity, f"(0, {r_max}] (Δ at most the range R_max)")
        object.__setattr__(self, "r_max", r_max)
        object.__setattr__(self, "sensitivity", sens)
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))
        object.__setattr__(self, "beta", v.positive("beta", self.beta))
        object.__setattr__(self, "headroom", v.nonnegative("headroom", self.headroom))
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))

    @property
    def sigma_x(self) -> float:
        return self.sigma / 2

    @property
    def sigma_z(self) -> float:
        return self.sigma / 2

    def privitp_params(self, n: int):
        from privcheck.accounting.selection import PrivITPParams
        return PrivITPParams(candidates=n, beta=self.beta, sigma_x=self.sigma_x, sigma_z=self.sigma_z,
                             headroom=self.headroom, sensitivity=self.sensitivity, delta=self.delta,
                             r_max=self.r_max, r_lo=0.0)

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "r_lo": 0.0, "sigma_x": self.sigma_x, "sigma_z": self.sigma_z,
                "privbon_mode": "exact", "score_map": "clip(R_max * sigmoid(logit), 0, R_max) for a reward model; "
                "clip(reward(prompt, completion), 0, R_max) for a reward function",
                "sensitivity_is": "a public, user-declared assumption about the reward model (not verified)"}


@dataclass(frozen=True)
class Preset:
    """A named, fully public run configuration."""

    name: str
    policy: ModelShape
    reward: ModelShape
    dtype: str
    prompts: int
    prompt_tokens: int
    prompt_token_range: tuple[int, int]     # synthetic prompt token ids are drawn uniformly from [lo, hi)
    n: int
    max_new_tokens: int
    temperature: float
    generation_batch: int                   # sequences per `generate` call (at most)
    scoring_batch: int                      # sequences per reward-model forward (at most)
    prompts_per_chunk: int                  # granularity of the wall-clock guard
    time_limit_s: float                     # guard on generation + scoring
    tokenizer: str | None                   # "byt5" (no files needed) or None (token ids only)
    constants: SelectionConstants = SelectionConstants()
    policy_seed: int = 0                    # public init seeds: the same random models on every run
    reward_seed: int = 1

    def __post_init__(self):
        for name in ("prompts", "prompt_tokens", "n", "max_new_tokens", "generation_batch", "scoring_batch",
                     "prompts_per_chunk"):
            v.count(name, getattr(self, name))
        v.positive("temperature", self.temperature)
        v.positive("time_limit_s", self.time_limit_s)
        if self.dtype not in DTYPES:
            raise InvalidParameter("dtype", self.dtype, " or ".join(DTYPES))
        lo, hi = self.prompt_token_range
        if not 0 <= lo < hi <= self.policy.vocab_size:
            raise InvalidParameter("prompt_token_range", self.prompt_token_range,
                                   f"0 <= lo < hi <= vocab_size = {self.policy.vocab_size}")
        if self.reward.vocab_size != self.policy.vocab_size:
            raise InvalidParameter("reward", self.reward.vocab_size, "the policy's vocabulary size")
        if self.prompt_tokens + self.max_new_tokens > self.policy.max_position_embeddings:
            raise InvalidParameter("max_new_tokens", self.max_new_tokens,
                                   f"<= {self.policy.max_position_embeddings - self.prompt_tokens} (context length)")

    def candidates_per_prompt(self, selectors) -> int:
        """Sequences sampled per prompt: the shared batch, PrivITP's Phase-1 batch, one reserve per fallback."""
        return (self.n + (self.n if "privitp" in selectors else 0)
                + sum(s in selectors for s in FALLBACK_SELECTORS))

    def plan(self, selectors=SELECTORS) -> dict:
        """Work of a complete run (pure arithmetic, no allocation)."""
        per_prompt = self.candidates_per_prompt(selectors)
        sequences = self.prompts * per_prompt
        scored = self.prompts * self.n * (2 if "privitp" in selectors else 1)
        return {"sequences": sequences, "new_tokens": sequences * self.max_new_tokens, "scored_candidates": scored,
                "scored_tokens": scored * (self.prompt_tokens + self.max_new_tokens),
                "chunks": math.ceil(self.prompts / self.prompts_per_chunk), "candidates_per_prompt": per_prompt}


_TINY = ModelShape(vocab_size=384, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                   max_position_embeddings=128)
# Qwen2(.5)-0.5B shapes: 494,032,768 parameters with tied embeddings.
_QWEN2_05B = ModelShape(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                        intermediate_size=4864, max_position_embeddings=32768)

PRESETS = {
    # ByT5 ids: 0 pad, 1 eos, 2 unk, byte b -> b + 3 (printable ASCII 32..126 -> 35..129), 259.. extra ids.
    "cpu-tiny": Preset(name="cpu-tiny", policy=_TINY, reward=_TINY, dtype="float32", prompts=4, prompt_tokens=8,
                       prompt_token_range=(35, 130), n=8, max_new_tokens=16, temperature=1.0, generation_batch=256,
                       scoring_batch=256, prompts_per_chunk=4, time_limit_s=120.0, tokenizer="byt5"),
    # 64 prompts × (1,024 shared + 1,024 Phase-1 + 2 reserves) = 131,200 sequences of 64 new tokens
    # (8.4M tokens), 131,072 scored; 16 chunks of 4 prompts (8,200 sequences, 3 balanced `generate` calls
    # of 2,734 rows). The guard (420 s) leaves room for start-up and model init within 8 minutes.
    "gpu-h200": Preset(name="gpu-h200", policy=_QWEN2_05B, reward=_QWEN2_05B, dtype="bfloat16", prompts=64,
                       prompt_tokens=32, prompt_token_range=(0, 151643), n=1024, max_new_tokens=64, temperature=1.0,
                       generation_batch=4096, scoring_batch=2048, prompts_per_chunk=4, time_limit_s=420.0,
                       tokenizer=None),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise InvalidParameter("preset", name, " or ".join(repr(p) for p in PRESETS))
    return PRESETS[name]


def parse_selectors(selectors) -> tuple[str, ...]:
    """A non-empty subset of SELECTORS, in canonical order (a string may list names separated by commas)."""
    if selectors is None:
        return SELECTORS
    items = [selectors] if isinstance(selectors, str) else list(selectors)
    names = [s.strip() for item in items for s in str(item).split(",") if s.strip()]
    bad = [s for s in names if s not in SELECTORS]
    if bad or not names:
        raise InvalidParameter("selectors", selectors, "a non-empty subset of " + ", ".join(SELECTORS))
    return tuple(s for s in SELECTORS if s in names)


# --- models (no downloads) ----------------------------------------------------------------------------

def _torch_dtype(dtype: str):
    import torch
    if dtype not in DTYPES:
        raise InvalidParameter("dtype", dtype, " or ".join(DTYPES))
    return getattr(torch, dtype)


def check_device(device: str) -> str:
    """'cpu' or 'cuda' (the latter only when torch sees a GPU)."""
    if device not in DEVICES:
        raise InvalidParameter("device", device, "'cpu' or 'cuda'")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InvalidParameter("device", device, "'cpu' (torch.cuda.is_available() is False here)")
    return device


def _fork_devices(device: str) -> list:
    import torch
    return [torch.cuda.current_device()] if device == "cuda" else []


def build_tokenizer(kind: str = "byt5"):
    """A tokenizer that needs no files: transformers' byte-level `ByT5Tokenizer()` (vocabulary 384)."""
    if kind != "byt5":
        raise InvalidParameter("tokenizer", kind, "'byt5'")
    from transformers import ByT5Tokenizer
    return ByT5Tokenizer()


def build_policy(shape: ModelShape, *, seed: int = 0, device: str = "cpu", dtype: str = "float32"):
    """Randomly initialised `Qwen2ForCausalLM` (eval mode, no gradients); deterministic under `seed`."""
    import torch
    from transformers import Qwen2ForCausalLM
    with torch.random.fork_rng(devices=_fork_devices(device)), torch.device(device):
        torch.manual_seed(v.count("seed", seed, minimum=0))
        model = Qwen2ForCausalLM._from_config(shape.config(), dtype=_torch_dtype(dtype))
    return model.eval().requires_grad_(False)


def build_reward_model(shape: ModelShape, *, seed: int = 1, device: str = "cpu", dtype: str = "float32"):
    """Randomly initialised `Qwen2ForSequenceClassification` with one label; deterministic under `seed`.

    The score head is re-drawn as N(0, 1/hidden) (public choice): the final RMSNorm output has unit RMS,
    so logits are about N(0, 1) and R_max·sigmoid(logit) spreads over the range instead of sitting at R_max/2.
    """
    import torch
    from transformers import Qwen2ForSequenceClassification
    with torch.random.fork_rng(devices=_fork_devices(device)), torch.device(device):
        torch.manual_seed(v.count("seed", seed, minimum=0))
        model = Qwen2ForSequenceClassification._from_config(shape.config(), dtype=_torch_dtype(dtype))
        with torch.no_grad():
            model.score.weight.normal_(0.0, shape.hidden_size ** -0.5)
    return model.eval().requires_grad_(False)


def parameter_count(shape: ModelShape, kind: str = "policy") -> int:
    """Parameters of the policy LM or the reward model, built on the meta device (nothing allocated)."""
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification
    cls = {"policy": Qwen2ForCausalLM, "reward": Qwen2ForSequenceClassification}.get(kind)
    if cls is None:
        raise InvalidParameter("kind", kind, "'policy' or 'reward'")
    with torch.device("meta"):
        model = cls(shape.config())
    return _count(model)


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())   # tied weights are yielded once


def synthetic_prompts(count: int, length: int, token_range: tuple[int, int], seed: int = PROMPT_SEED):
    """Public synthetic prompts: token ids uniform on [lo, hi) from numpy's PCG64 at a public seed."""
    import numpy as np
    count, length = v.count("prompts", count), v.count("prompt_tokens", length)
    lo, hi = token_range
    return np.random.default_rng(seed).integers(lo, hi, size=(count, length), dtype=np.int64)


# --- sampling and scoring -----------------------------------------------------------------------------

def _sync(device) -> None:
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


class CandidateSampler:
    """Draw fixed-length completions from π0 by plain tempered sampling (public randomness).

    The generation config sets do_sample, temperature, top_k=0 and top_p=1.0 explicitly (transformers'
    global default top_k is 50, which would truncate π0), no EOS and no other processor, so every token is
    drawn from softmax(logits/temperature) over the whole vocabulary. Rows of one `generate` call are
    sampled independently; calls are balanced to at most `batch_size` rows.
    """

    def __init__(self, model, *, max_new_tokens: int, temperature: float = 1.0, batch_size: int = 256):
        from transformers import GenerationConfig
        self.model = model
        self.max_new_tokens = v.count("max_new_tokens", max_new_tokens)
        self.temperature = v.positive("temperature", temperature)
        self.batch_size = v.count("generation_batch", batch_size)
        if getattr(model.generation_config, "eos_token_id", None) is not None:
            raise InvalidParameter("model", f"generation_config.eos_token_id={model.generation_config.eos_token_id}",
                                   "a policy without EOS (fixed-length completions; use build_policy)")
        pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.generation_config = GenerationConfig(
            do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0, typical_p=1.0, min_p=None,
            repetition_penalty=1.0, no_repeat_ngram_size=0, num_beams=1, num_return_sequences=1,
            max_new_tokens=self.max_new_tokens, min_new_tokens=0, pad_token_id=pad, use_cache=True)

    def describe(self) -> dict:
        return {"sampling": "plain tempered sampling, fixed-length completions (no EOS)", "do_sample": True,
                "temperature": self.temperature, "top_k": 0, "top_p": 1.0, "max_new_tokens": self.max_new_tokens,
                "eos_token_id": None, "batch_size": self.batch_size}

    def sample(self, prompt_ids, per_prompt: int):
        """prompt_ids [P, L] (torch, on the model's device) -> completions [P, per_prompt, max_new_tokens]."""
        import torch
        per_prompt = v.count("per_prompt", per_prompt)
        prompts, length = prompt_ids.shape
        rows = prompt_ids.repeat_interleave(per_prompt, dim=0)
        parts = math.ceil(rows.shape[0] / self.batch_size)
        outs = []
        with torch.inference_mode():
            for batch in torch.tensor_split(rows, parts):
                out = self.model.generate(input_ids=batch, attention_mask=torch.ones_like(batch),
                                          generation_config=self.generation_config)
                outs.append(out[:, length:])
        completions = torch.cat(outs)
        if completions.shape[1] != self.max_new_tokens:
            raise RuntimeError(f"generate returned {completions.shape[1]} new tokens, expected {self.max_new_tokens}")
        return completions.view(prompts, per_prompt, self.max_new_tokens)


class RewardModelScorer:
    """Score = R_max·sigmoid(logit) of a sequence-classification reward model at the last position of
    prompt + completion (fixed-length sequences, no padding). The map is public and fixed in advance."""

    def __init__(self, model, r_max: float, batch_size: int = 256):
        self.model = model
        self.r_max = v.positive("r_max", r_max)
        self.batch_size = v.count("scoring_batch", batch_size)

    def describe(self) -> dict:
        return {"kind": "reward_model", "squash": "R_max * sigmoid(logit at the last position)",
                "batch_size": self.batch_size}

    def score(self, prompt_ids, completions, tokenizer=None):
        """prompt_ids [P, L], completions [P, k, T] (torch, model device) -> numpy float64 [P, k]."""
        import torch
        prompts, k, _ = completions.shape
        full = torch.cat([prompt_ids[:, None, :].expand(prompts, k, -1), completions], dim=2).reshape(prompts * k, -1)
        logits = []
        with torch.inference_mode():
            for batch in torch.split(full, self.batch_size):
                hidden = self.model.base_model(input_ids=batch, use_cache=False).last_hidden_state[:, -1]
                logits.append(self.model.score(hidden).float().squeeze(-1))
            scores = self.r_max * torch.sigmoid(torch.cat(logits))
        return scores.double().cpu().numpy().reshape(prompts, k)


class RewardFunctionScorer:
    """Score = reward(prompt_text, completion_text) for a Python callable (needs a tokenizer to decode)."""

    def __init__(self, reward: Callable[[str, str], float]):
        if not callable(reward):
            raise InvalidParameter("reward", type(reward).__name__, "a callable reward(prompt, completion) -> float")
        self.reward = reward

    def describe(self) -> dict:
        return {"kind": "reward_function", "name": getattr(self.reward, "__qualname__", repr(self.reward))}

    def score(self, prompt_ids, completions, tokenizer=None):
        import numpy as np
        if tokenizer is None:
            raise InvalidParameter("tokenizer", None, "a tokenizer (a reward function scores decoded text)")
        prompts, k, _ = completions.shape
        ids = completions.cpu().tolist()
        out = np.empty((prompts, k), dtype=np.float64)
        for p, prompt in enumerate(prompt_ids.cpu().tolist()):
            text = tokenizer.decode(prompt, skip_special_tokens=True)
            for j in range(k):
                value = self.reward(text, tokenizer.decode(ids[p][j], skip_special_tokens=True))
                try:
                    out[p, j] = v.finite("reward", value)
                except InvalidParameter:
                    raise InvalidParameter("reward", value, "a finite real number for every (prompt, completion)"
                                           f" (prompt {p}, candidate {j})") from None
        return out


def clip_scores(raw, r_max: float):
    """Check finiteness, then clip to the public range [0, R_max] (§2; 1-Lipschitz, sensitivity stays Δ)."""
    import numpy as np
    raw = np.asarray(raw, dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        bad = raw[~np.isfinite(raw)].ravel()[0]
        raise InvalidParameter("reward", float(bad), "finite scores (the reward returned NaN or inf)")
    return np.clip(raw, 0.0, r_max)


# --- the pipeline -------------------------------------------------------------------------------------

@dataclass
class PipelineResult:
    """Everything one run produced. Scores are PRIVATE (functions of r̂_D): they are never written out."""

    selectors: tuple[str, ...]
    prompts_requested: int
    prompt_ids: object                 # numpy int64 [P_done, L]
    candidates: object                 # numpy int32 [P_done, n, T]: shared batch (PrivITP Phase 2)
    phase1_candidates: object | None   # numpy int32 [P_done, n, T]: PrivITP Phase 1 (independent batch)
    reserve: object                    # numpy int32 [P_done, #fallback selectors, T]: fresh π0 samples
    scores: object                     # numpy float64 [P_done, n], clipped (private)
    phase1_scores: object | None       # numpy float64 [P_done, n], clipped (private, separate array)
    results: dict                      # selector -> SelectionResult / RejectionResult
    selected: dict                     # selector -> numpy int32 [P_done, T] (fresh π0 sample on fallback)
    fallback: dict                     # selector -> numpy bool [P_done]
    selection_s: dict                  # selector -> seconds (selection + accounting)
    counters: dict
    timing: dict
    status: str
    stop_reason: str | None
    randomness: object                 # mechanisms.selection.Randomness
    sampling_seed: int
    generation: dict
    scoring: dict
    peak_memory: dict

    @property
    def prompts_completed(self) -> int:
        return int(self.scores.shape[0])

    @property
    def records(self) -> dict:
        """selector -> tuple of the mechanism's AccountingRecords (empty for the non-private baselines)."""
        out = {}
        for name, res in self.results.items():
            if name == "privbon":
                out[name] = (res.record,)
            elif name == "privitp":
                out[name] = tuple(res.records)
            else:
                out[name] = ()
        return out

    def selected_text(self, selector: str, tokenizer) -> list[str]:
        return [tokenizer.decode(row.tolist(), skip_special_tokens=True) for row in self.selected[selector]]


def _peak_memory(device: str) -> dict:
    import torch
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux
    out = {"device": device, "rss_peak_bytes": int(rss_kib) * 1024,
           "rss_note": "peak resident set size of the whole process (getrusage ru_maxrss)"}
    if device == "cuda":
        out["cuda_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        out["cuda_max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        out["cuda_total_memory_bytes"] = int(torch.cuda.get_device_properties(0).total_memory)
    return out


def run_selectors(scores, phase1_scores, selectors, constants: SelectionConstants, rng) -> tuple[dict, dict]:
    """Run the selectors on clipped scores [P, n]; PrivITP gets (phase1_scores, scores) as its two phases.

    Returns (results, seconds): every timing includes the mechanism's own accounting."""
    from mechanisms.selection import ITP, PrivBoN, PrivITP, best_of_n
    r_max = constants.r_max
    runs = {
        "bon": lambda: best_of_n(scores, r_lo=0.0, r_max=r_max),
        "privbon": lambda: PrivBoN(constants.sensitivity, constants.sigma, r_max).select(scores, rng),
        "itp": lambda: ITP(constants.beta, r_max).select(scores, rng),
        "privitp": lambda: PrivITP(constants.privitp_params(scores.shape[1])).select(phase1_scores, scores, rng),
    }
    results, seconds = {}, {}
    for name in selectors:
        t0 = time.perf_counter()
        results[name] = runs[name]()
        seconds[name] = time.perf_counter() - t0
    return results, seconds


def run_pipeline(policy, scorer, prompt_ids, *, n: int, constants: SelectionConstants, selectors=SELECTORS,
                 max_new_tokens: int = 16, temperature: float = 1.0, generation_batch: int = 256,
                 prompts_per_chunk: int | None = None, time_limit_s: float = math.inf, seed: int | None = None,
                 tokenizer=None, warmup: bool = True) -> PipelineResult:
    """Sample, score and select for a batch of prompts (see the module docstring).

    `policy`: a causal LM without EOS (e.g. `build_policy`); `scorer`: `RewardModelScorer` or
    `RewardFunctionScorer` (the latter needs `tokenizer`); `prompt_ids`: int array [P, L] of public
    prompts. `seed` None: OS-entropy mechanism noise (privacy_release possible) and a random candidate-
    sampling seed (public, recorded); an integer seeds both (privacy_release False).
    The wall-clock guard runs before each chunk of `prompts_per_chunk` prompts: it stops when the time
    spent plus the slowest chunk so far would pass `time_limit_s` (status "incomplete").
    `warmup` runs one untimed generate (and reward-model forward) first, on its own forked RNG, so that
    one-off start-up costs (CUDA context, kernel selection) stay out of the throughput figures.
    """
    import numpy as np
    import torch
    from mechanisms.selection import FRESH_PI0, make_rng

    n = v.count("n", n)
    selectors = parse_selectors(selectors)
    if not isinstance(constants, SelectionConstants):
        raise InvalidParameter("constants", type(constants).__name__, "a SelectionConstants")
    if isinstance(scorer, RewardModelScorer) and scorer.r_max != constants.r_max:
        raise InvalidParameter("r_max", scorer.r_max, f"the constants' r_max = {constants.r_max} (one public range "
                               "for the squash, the clipping and the mechanisms)")
    if not (isinstance(time_limit_s, (int, float)) and not isinstance(time_limit_s, bool) and time_limit_s > 0):
        raise InvalidParameter("time_limit_s", time_limit_s, "(0, inf]")
    prompt_np = np.asarray(prompt_ids)
    if prompt_np.ndim != 2 or prompt_np.shape[0] < 1 or prompt_np.shape[1] < 1 or prompt_np.dtype.kind not in "iu":
        raise InvalidParameter("prompt_ids", f"array of shape {prompt_np.shape}", "integer token ids [prompts, length]")
    total_prompts = prompt_np.shape[0]
    chunk = v.count("prompts_per_chunk", prompts_per_chunk if prompts_per_chunk is not None else total_prompts)
    rand = make_rng(seed)                                   # validates seed
    sampling_seed = rand.seed if rand.seed is not None else secrets.randbits(63)
    sampler = CandidateSampler(policy, max_new_tokens=max_new_tokens, temperature=temperature,
                               batch_size=generation_batch)
    device = str(policy.device)
    reserve_names = [s for s in FALLBACK_SELECTORS if s in selectors]
    two_batches = "privitp" in selectors
    per_prompt = n * (2 if two_batches else 1) + len(reserve_names)
    T, L = sampler.max_new_tokens, prompt_np.shape[1]

    cand = np.zeros((total_prompts, n, T), dtype=np.int32)
    cand1 = np.zeros((total_prompts, n, T), dtype=np.int32) if two_batches else None
    reserve = np.zeros((total_prompts, len(reserve_names), T), dtype=np.int32)
    scores = np.zeros((total_prompts, n), dtype=np.float64)
    scores1 = np.zeros((total_prompts, n), dtype=np.float64) if two_batches else None

    fork = _fork_devices("cuda" if device.startswith("cuda") else "cpu")
    warmup_s = 0.0
    if warmup:
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=fork):
            w_ids = torch.as_tensor(prompt_np[:1], dtype=torch.long, device=policy.device)
            w_comp = sampler.sample(w_ids, 1)
            if isinstance(scorer, RewardModelScorer):    # never call a user's reward function off the record
                scorer.score(w_ids, w_comp)
        _sync(device)
        warmup_s = time.perf_counter() - t0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t_start = time.perf_counter()
    gen_s = score_s = 0.0
    chunk_times: list[float] = []
    done, stop_reason = 0, None
    with torch.random.fork_rng(devices=fork):
        torch.manual_seed(sampling_seed)                     # public randomness of candidate sampling
        for lo in range(0, total_prompts, chunk):
            elapsed = time.perf_counter() - t_start
            if chunk_times and elapsed + max(chunk_times) > time_limit_s:
                stop_reason = (f"wall-clock guard: {elapsed:.1f} s spent + {max(chunk_times):.1f} s for the next chunk "
                               f"> time_limit_s = {time_limit_s:g}; {done}/{total_prompts} prompts done")
                break
            t_chunk = time.perf_counter()
            hi = min(total_prompts, lo + chunk)
            p_ids = torch.as_tensor(prompt_np[lo:hi], dtype=torch.long, device=policy.device)
            t0 = time.perf_counter()
            comp = sampler.sample(p_ids, per_prompt)                     # [c, per_prompt, T]
            _sync(device)
            gen_s += time.perf_counter() - t0
            scored = comp[:, :2 * n] if two_batches else comp[:, :n]    # reserves are never scored
            t0 = time.perf_counter()
            raw = scorer.score(p_ids, scored, tokenizer)
            _sync(device)
            score_s += time.perf_counter() - t0
            clipped = clip_scores(raw, constants.r_max)
            comp_np = comp.to("cpu", torch.int32).numpy()
            cand[lo:hi] = comp_np[:, :n]
            scores[lo:hi] = clipped[:, :n]
            if two_batches:
                cand1[lo:hi] = comp_np[:, n:2 * n]
                scores1[lo:hi] = clipped[:, n:2 * n]
            reserve[lo:hi] = comp_np[:, per_prompt - len(reserve_names):]
            done = hi
            chunk_times.append(time.perf_counter() - t_chunk)
    loop_s = time.perf_counter() - t_start

    cand, reserve, scores = cand[:done], reserve[:done], scores[:done].copy()
    if two_batches:
        cand1, scores1 = cand1[:done], scores1[:done].copy()
    results, seconds = run_selectors(scores, scores1, selectors, constants, rand)
    selected, fallback = {}, {}
    rows = np.arange(done)
    for name, res in results.items():
        idx = np.asarray(res.indices)
        fb = idx == FRESH_PI0
        out = cand[rows, np.where(fb, 0, idx)].copy()
        if fb.any():
            out[fb] = reserve[rows[fb], reserve_names.index(name)]
        selected[name], fallback[name] = out, fb
    seqs = done * per_prompt
    scored_rows = done * n * (2 if two_batches else 1)
    return PipelineResult(
        selectors=selectors, prompts_requested=total_prompts, prompt_ids=prompt_np[:done].copy(), candidates=cand,
        phase1_candidates=cand1, reserve=reserve, scores=scores, phase1_scores=scores1, results=results,
        selected=selected, fallback=fallback, selection_s=seconds,
        counters={"sequences": seqs, "new_tokens": seqs * T, "prompt_tokens_in": seqs * L,
                  "scored_candidates": scored_rows, "scored_tokens": scored_rows * (L + T),
                  "candidates_per_prompt": per_prompt, "chunks": len(chunk_times)},
        timing={"warmup_s": warmup_s, "generation_s": gen_s, "scoring_s": score_s, "generation_and_scoring_s": loop_s,
                "selection_s": sum(seconds.values()), "max_chunk_s": max(chunk_times) if chunk_times else 0.0,
                "time_limit_s": time_limit_s if math.isfinite(time_limit_s) else "inf"},
        status="complete" if done == total_prompts else "incomplete", stop_reason=stop_reason,
        randomness=rand, sampling_seed=int(sampling_seed), generation=sampler.describe(),
        scoring=scorer.describe(), peak_memory=_peak_memory("cuda" if device.startswith("cuda") else "cpu"))


# --- artifact -----------------------------------------------------------------------------------------

def _rate(count: float, seconds: float):
    return count / seconds if seconds > 0 else None


def _selector_entry(name: str, res, seconds: float, fallbacks: int) -> dict:
    from privcheck.accounting.composition import basic_composition
    entry = {"private": name in PRIVATE_SELECTORS, "seconds": seconds, "randomness_mode": res.randomness_mode,
             "privacy_release": bool(res.privacy_release), "fallbacks": fallbacks}
    if name == "privbon":
        entry["records"] = [res.record.to_json()]
        entry["epsilon"] = {"per_prompt": res.record.value, "prompts": res.prompts,
                            "total_basic_composition": res.record.details["total_epsilon"]}
    elif name == "privitp":
        eps = [r.value for r in res.records]
        entry["records"] = [r.to_json() for r in res.records]
        accepted = [int(t) for t in res.halting_times.tolist() if t > 0]
        entry["epsilon"] = {"per_prompt_min": min(eps), "per_prompt_max": max(eps), "prompts": len(eps),
                            "total_basic_composition": basic_composition(eps)[0],
                            "delta_per_prompt": res.records[0].details["delta"]}
        entry["halting"] = {"accepted": len(accepted), "mean_round": (sum(accepted) / len(accepted)) if accepted
                            else None, "max_round": max(accepted) if accepted else None}
    else:
        entry["records"] = []
        entry["note"] = "non-private baseline: no privacy record, never a private release"
    return entry


def _environment(device: str) -> dict:
    import torch
    import transformers
    from privcheck.environment import environment
    env = environment()
    if device == "cuda":
        env["device"] = "cuda"
        env["device_name"] = torch.cuda.get_device_name(0)
    else:
        env["device"] = "cpu"
        env["device_name"] = platform.processor() or platform.machine()
    env["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads()}
    env["transformers"] = transformers.__version__
    env["precision"] = "models in the preset dtype; scores float64; mechanisms float64; ε certified (Arb)"
    return env


def build_artifact(result: PipelineResult, *, preset: Preset, device: str, models: dict, constants: SelectionConstants,
                   n: int, prompt_info: dict, build_s: float, total_s: float) -> dict:
    """The unsealed artifact document (see REQUIRED_KEYS)."""
    t, c = result.timing, result.counters
    selection = {name: _selector_entry(name, result.results[name], result.selection_s[name],
                                       int(result.fallback[name].sum())) for name in result.selectors}
    return {
        "kind": ARTIFACT_KIND, "schema_version": SCHEMA_VERSION,
        "spec": "shared/spec/selection.md §16.2 (§2 public constants, §4 PrivBoN, §6 PrivITP)",
        "docs": "docs/selection.md",
        "preset": preset.name, "device": device, "status": result.status, "incomplete_reason": result.stop_reason,
        "models": models, "n": n,
        "prompts": {**prompt_info, "requested": result.prompts_requested, "completed": result.prompts_completed},
        "generation": {**result.generation, "candidates_per_prompt": c["candidates_per_prompt"],
                       "batches": "shared batch (n; BoN, PrivBoN, ITP, PrivITP Phase 2) + independent PrivITP "
                                  "Phase-1 batch (n) + one reserve fresh π0 sample per fallback-capable selector"},
        "scoring": result.scoring,
        "public_constants": constants.to_json(),
        "throughput": {
            "generation": {"sequences": c["sequences"], "new_tokens": c["new_tokens"],
                           "prompt_tokens_in": c["prompt_tokens_in"], "seconds": t["generation_s"],
                           "tokens_per_s": _rate(c["new_tokens"], t["generation_s"]),
                           "candidates_per_s": _rate(c["sequences"], t["generation_s"])},
            "scoring": {"candidates": c["scored_candidates"], "tokens": c["scored_tokens"], "seconds": t["scoring_s"],
                        "tokens_per_s": _rate(c["scored_tokens"], t["scoring_s"]),
                        "candidates_per_s": _rate(c["scored_candidates"], t["scoring_s"])}},
        "selection": selection,
        "composition_note": "each selector is a separate query on the same public candidates; releasing the "
                            "outputs of several private selectors composes (basic composition of their ε)",
        "peak_memory": result.peak_memory,
        "environment": _environment(device),
        "randomness": {"mode": result.randomness.mode, "seed": result.randomness.seed,
                       "privacy_release": result.randomness.privacy_release,
                       "mechanism_noise": "numpy PCG64 via mechanisms.selection.make_rng",
                       "candidate_sampling": {"public": True, "seed": result.sampling_seed,
                                              "source": "torch global RNG (forked), seeded once per run"},
                       "model_init_seeds": {"policy": preset.policy_seed, "reward": preset.reward_seed},
                       "prompt_seed": prompt_info.get("seed")},
        "privacy_release": result.randomness.privacy_release,
        "timing": {**t, "model_build_s": build_s, "total_s": total_s, "chunks": c["chunks"],
                   "covered_by_guarantee": False,
                   "note": "wall-clock measurements; timing side channels are outside every privacy guarantee"},
    }


def validate_artifact(doc: dict) -> None:
    """Raise InvalidParameter('artifact', ...) unless `doc` has every required key, a valid seal and the
    invariants (status, timing not covered, privacy_release False for seeded runs)."""
    from privcheck.artifacts.writer import verify_seal
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise InvalidParameter("artifact", f"missing keys {missing}", "a selection_run document with " +
                               ", ".join(REQUIRED_KEYS))
    problems = []
    if not verify_seal(doc):
        problems.append("sha256 does not match the content")
    if doc["kind"] != ARTIFACT_KIND:
        problems.append(f"kind {doc['kind']!r}")
    if doc["status"] not in ("complete", "incomplete"):
        problems.append(f"status {doc['status']!r}")
    if doc["timing"].get("covered_by_guarantee") is not False:
        problems.append("timing.covered_by_guarantee must be false")
    if doc["privacy_release"] and doc["randomness"]["mode"] != "os_entropy":
        problems.append("privacy_release true for a non-OS-entropy run")
    if problems:
        raise InvalidParameter("artifact", "; ".join(problems), "a sealed, consistent selection_run document")


def write_artifact(doc: dict, out) -> Path:
    from privcheck.artifacts.writer import dump_json, seal, write_atomic
    sealed = seal(doc)
    validate_artifact(sealed)
    return write_atomic(Path(out) / ARTIFACT_NAME, dump_json(sealed))


def _model_entry(model, shape: ModelShape, *, role: str, dtype: str, seed: int, device: str) -> dict:
    return {"role": role, "class": type(model).__name__, "shape": shape.to_json(), "dtype": dtype,
            "parameters": _count(model), "device": device, "init": f"random (transformers init, torch seed {seed})"}


def run_selection(preset: str = "cpu-tiny", *, out, device: str = "cpu", seed: int | None = None, selectors=None,
                  n: int | None = None, prompts: int | None = None, time_limit_s: float | None = None,
                  r_max: float | None = None, sensitivity: float | None = None, sigma: float | None = None,
                  beta: float | None = None, reward: Callable[[str, str], float] | None = None):
    """Run a preset end to end and write DIR/selection_run.json. Returns (sealed document, path, result).

    Overrides (all public, validated before anything is built): n, prompts, time_limit_s and the selection
    constants r_max, sensitivity (Δ ≤ r_max), sigma, beta. `reward` replaces the reward model by a Python
    function of (prompt text, completion text) (presets with a tokenizer only).
    """
    from privcheck.artifacts.writer import seal
    t_total = time.perf_counter()
    p = get_preset(preset)
    selectors = parse_selectors(selectors)
    base = p.constants
    constants = SelectionConstants(
        r_max=base.r_max if r_max is None else r_max,
        sensitivity=base.sensitivity if sensitivity is None else sensitivity,
        sigma=base.sigma if sigma is None else sigma, beta=base.beta if beta is None else beta,
        headroom=base.headroom, delta=base.delta)
    p = dataclasses.replace(p, n=p.n if n is None else n, prompts=p.prompts if prompts is None else prompts,
                            time_limit_s=p.time_limit_s if time_limit_s is None else time_limit_s,
                            constants=constants)
    if seed is not None:
        v.count("seed", seed, minimum=0)
    if reward is not None and p.tokenizer is None:
        raise InvalidParameter("reward", getattr(reward, "__name__", "callable"),
                               "None for a preset without a tokenizer (use its reward model)")
    if out is None:
        raise InvalidParameter("out", out, "an output directory")
    t_import = time.perf_counter()
    import torch  # noqa: F401  (imports timed apart from the model build)
    from transformers import GenerationConfig, Qwen2ForCausalLM, Qwen2ForSequenceClassification  # noqa: F401
    import_s = time.perf_counter() - t_import
    device = check_device(device)

    t_build = time.perf_counter()
    tokenizer = build_tokenizer(p.tokenizer) if p.tokenizer else None
    policy = build_policy(p.policy, seed=p.policy_seed, device=device, dtype=p.dtype)
    models = {"policy": _model_entry(policy, p.policy, role="public base policy π0 (candidate sampling)",
                                     dtype=p.dtype, seed=p.policy_seed, device=device),
              "tokenizer": "ByT5Tokenizer() (byte level, no files)" if tokenizer is not None else None}
    if reward is None:
        rm = build_reward_model(p.reward, seed=p.reward_seed, device=device, dtype=p.dtype)
        scorer = RewardModelScorer(rm, constants.r_max, batch_size=p.scoring_batch)
        models["reward"] = {**_model_entry(rm, p.reward, role="PRIVATE reward model r̂_D (stand-in: random weights)",
                                           dtype=p.dtype, seed=p.reward_seed, device=device),
                            "head": "score head re-drawn N(0, 1/hidden)", "squash": "R_max * sigmoid(logit)"}
    else:
        scorer = RewardFunctionScorer(reward)
        models["reward"] = {"role": "PRIVATE reward function r̂_D", **scorer.describe()}
    build_s = time.perf_counter() - t_build

    prompt_ids = synthetic_prompts(p.prompts, p.prompt_tokens, p.prompt_token_range)
    result = run_pipeline(policy, scorer, prompt_ids, n=p.n, constants=constants, selectors=selectors,
                          max_new_tokens=p.max_new_tokens, temperature=p.temperature,
                          generation_batch=p.generation_batch, prompts_per_chunk=p.prompts_per_chunk,
                          time_limit_s=p.time_limit_s, seed=seed, tokenizer=tokenizer)
    prompt_info = {"prompt_tokens": p.prompt_tokens, "token_range": list(p.prompt_token_range),
                   "seed": PROMPT_SEED, "source": "synthetic public token ids, uniform on token_range "
                                                 "(numpy default_rng(seed))"}
    doc = build_artifact(result, preset=p, device=device, models=models, constants=constants, n=p.n,
                         prompt_info=prompt_info, build_s=build_s, total_s=0.0)
    doc["plan"] = p.plan(selectors)
    doc["timing"]["import_s"] = import_s
    doc["timing"]["total_s"] = time.perf_counter() - t_total
    path = write_artifact(doc, out)
    return seal(doc), path, result


# --- command line -------------------------------------------------------------------------------------

def add_run_parser(verbs: dict, common) -> None:
    """`privcheck run selection` (called by mechanisms.selection.cli.register)."""
    r = verbs["run"].add_parser("selection", parents=[common],
                                help="LLM selection pipeline: sample, score, BoN/PrivBoN/ITP/PrivITP (§16.2)")
    r.add_argument("--preset", default="cpu-tiny", metavar="{" + ",".join(PRESETS) + "}",
                   help="run configuration (default cpu-tiny)")
    r.add_argument("--device", default="cpu", metavar="{cpu,cuda}", help="torch device (default cpu)")
    r.add_argument("--out", required=True, help="output directory (selection_run.json)")
    r.add_argument("--seed", type=int, default=None,
                   help="seed for mechanism noise and candidate sampling (seeded: privacy_release false)")
    r.add_argument("--selectors", nargs="+", default=None, metavar="NAME",
                   help="subset of bon privbon itp privitp (default: all; commas also accepted)")
    r.add_argument("--n", type=int, default=None, help="candidates per prompt and phase (preset default)")
    r.add_argument("--prompts", type=int, default=None, help="number of prompts (preset default)")
    r.add_argument("--time-limit-s", type=float, default=None, help="wall-clock guard for generation + scoring")
    r.add_argument("--r-max", type=float, default=None, help="public score range [0, R_max]")
    r.add_argument("--sensitivity", type=float, default=None, help="public score sensitivity Δ (<= R_max)")
    r.add_argument("--sigma", type=float, default=None, help="PrivBoN Gumbel scale σ (PrivITP σ_X = σ_Z = σ/2)")
    r.add_argument("--beta", type=float, default=None, help="ITP/PrivITP χ² strength β")
    r.set_defaults(func=cmd_run_selection)


def cmd_run_selection(args) -> int:
    """Handler: run, write the artifact, print a summary; exit 0 when complete, 1 when the guard stopped it."""
    from privcheck.cli import emit
    doc, path, _ = run_selection(args.preset, out=args.out, device=args.device, seed=args.seed,
                                 selectors=args.selectors, n=args.n, prompts=args.prompts,
                                 time_limit_s=args.time_limit_s, r_max=args.r_max, sensitivity=args.sensitivity,
                                 sigma=args.sigma, beta=args.beta)
    thr = doc["throughput"]
    sel = {name: {"seconds": e["seconds"], "fallbacks": e["fallbacks"], "epsilon": e.get("epsilon")}
           for name, e in doc["selection"].items()}
    payload = {"status": doc["status"], "artifact": str(path), "sha256": doc["sha256"], "preset": doc["preset"],
               "device": doc["device"], "n": doc["n"], "prompts_completed": doc["prompts"]["completed"],
               "generation_tokens_per_s": thr["generation"]["tokens_per_s"],
               "generation_candidates_per_s": thr["generation"]["candidates_per_s"],
               "scoring_candidates_per_s": thr["scoring"]["candidates_per_s"], "selection": sel,
               "privacy_release": doc["privacy_release"], "total_s": doc["timing"]["total_s"]}
    rows = [("status", doc["status"]), ("preset", doc["preset"]), ("device", doc["device"]), ("n", doc["n"]),
            ("prompts", f"{doc['prompts']['completed']}/{doc['prompts']['requested']}"),
            ("generation tokens/s", thr["generation"]["tokens_per_s"]),
            ("scoring candidates/s", thr["scoring"]["candidates_per_s"])]
    for name, e in doc["selection"].items():
        eps = e.get("epsilon")
        shown = "no privacy record" if eps is None else (
            f"eps/prompt {eps['per_prompt']:.6g}" if "per_prompt" in eps
            else f"eps/prompt {eps['per_prompt_min']:.6g}..{eps['per_prompt_max']:.6g}")
        rows.append((f"{name}", f"{e['seconds'] * 1e3:.2f} ms, {e['fallbacks']} fallbacks, {shown}"))
    rows += [("privacy_release", doc["privacy_release"]), ("total_s", doc["timing"]["total_s"]),
             ("artifact", str(path)), ("sha256", doc["sha256"])]
    if doc["status"] != "complete":
        rows.append(("incomplete", doc["incomplete_reason"]))
    emit(args, payload, rows)
    return 0 if doc["status"] == "complete" else 1


def build_parser() -> argparse.ArgumentParser:
    """A stand-alone parser with only `selection` (works without the `privcheck.commands` entry point)."""
    parser = argparse.ArgumentParser(prog="python -m mechanisms.selection.pipeline")
    sub = parser.add_subparsers(dest="what", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON object")
    add_run_parser({"run": sub}, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m mechanisms.selection.pipeline selection --preset ... --out DIR` (same as `privcheck run`)."""
    from privcheck.errors import PrivcheckError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PrivcheckError as exc:
        print(f"privcheck: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
