"""Public run configurations of the LLM selection pipeline: model shapes, selector constants, presets and
the synthetic prompts.

Everything here is public and fixed before any score is seen: the reward model's score range, the score
sensitivity Δ (a user-declared assumption about the reward model, not verified), the selectors' noise
scales and β, and the prompts (drawn from a fixed public seed). Nothing computed from scores ever enters
these objects (docs/selection.md, "Setting and public constants").

Presets: `cpu-tiny` (tiny randomly initialised Qwen2-style models, byte tokenizer, 4 prompts, n = 8,
16-token completions; seconds on a CPU; used by the tests) and `gpu-h200` (Qwen2-0.5B shapes in bf16,
random weights, 64 prompts, n = 1,024, 64-token completions; sized for 8 minutes on one H200). No weights
are downloaded: every model is built from a config and initialised under a fixed public seed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["DTYPES", "FALLBACK_SELECTORS", "PRESETS", "PRIVATE_SELECTORS", "PROMPT_SEED", "SELECTORS", "ModelShape",
           "Preset", "SelectionConstants", "get_preset", "parse_selectors", "synthetic_prompts"]

SELECTORS = ("bon", "privbon", "itp", "privitp")
PRIVATE_SELECTORS = ("privbon", "privitp")
FALLBACK_SELECTORS = ("itp", "privitp")       # selectors whose fallback returns a fresh π0 sample
DTYPES = ("float32", "bfloat16", "float16")
PROMPT_SEED = 16_2_2026                        # public: synthetic prompts are the same on every run


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
    """Public constants of the four selectors: fixed before any score is seen, recorded in the artifact.
    r_lo = 0; σ_X = σ_Z = σ/2 (the defaults of Bhattad & Ray Chowdhury)."""

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
        """PrivITP's public constants for n candidates per phase (imported lazily: the CLI starts light)."""
        from privcheck.accounting import PrivITPParams
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
    """The preset called `name` (one of PRESETS)."""
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


def synthetic_prompts(count: int, length: int, token_range: tuple[int, int], seed: int = PROMPT_SEED):
    """Public synthetic prompts: token ids uniform on [lo, hi) from numpy's PCG64 at a public seed."""
    import numpy as np
    count, length = v.count("prompts", count), v.count("prompt_tokens", length)
    lo, hi = token_range
    return np.random.default_rng(seed).integers(lo, hi, size=(count, length), dtype=np.int64)
