"""Named, frozen, fully public configurations of end-to-end DP-GRPO runs (docs/dpgrpo.md, "Presets").

Guarantees: every field of a `Preset` is a public constant fixed before any private record is read (A1); a
preset is frozen and validated at construction; `preset.reduced()` keeps the code path (model family,
precision policy, rollout mode, chunking, task, verifier, artifact format) and shrinks only shapes and counts.
σ is either calibrated through `DPGRPOConfig.from_target` (the privacy plan's calibration, cached per
configuration, so the accountant runs once per process) or precomputed. A precomputed σ is stored with its
calibration bracket and never with an ε: the ε of every run is its plan's, recomputed from the event
(`PoissonGaussianEvent(q, σ, T)`), and `tests/dpgrpo/test_plan_binding.py` checks that the accountant's
calibration still returns the stored σ. `Preset.replace` drops a precomputed σ whenever (q, T, δ, target ε)
change, so σ is then calibrated again for the new parameters.

* `tiny-cpu`: tiny Qwen2 (2 layers, hidden 64, fp32, character tokenizer), public SFT pretraining,
  single-digit addition with the strict verifier, n = 100, q = 0.25, G = 4, τ = 0.7, L_max = 6, β = 0.04, C = 1,
  δ = 1e-3, ε = 8, T = 30 (σ = 0.9095974), AdamW lr 5e-3, pretraining lr 3e-3 with batch 64. T, lr and the
  pretraining knobs were chosen after measuring (docs/dpgrpo.md explains the choice) on a separate synthetic
  record set (seed TUNING_RECORDS_SEED) and the public evaluation prompts, never on the preset's own records.
* `gpu-h200`: randomly initialised Qwen2 at 0.5B shapes, bf16 base (LoRA, gradients, clip, noise and
  AdamW in fp32), 64-token prompts of public random token ids, the shape-only parity verifier, n = 512, m = 32,
  G = 8, L_max = 128, T = 8, chunk 4, δ = 1/5120, σ precomputed, batched rollouts when available, wall-clock guard.

Assumptions: the model builders need `torch`, `transformers` and `peft` (imported lazily); no weights are
downloaded (`--model PATH` loads local weights only).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field

from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.serialization import canonical_json

__all__ = ["BASE_DTYPES", "GPU_H200", "GPU_SIGMA", "GPU_SIGMA_BRACKET", "GPU_SIGMA_SOURCE", "MAX_RECORDS",
           "MAX_ROUNDS", "PARITY_PUBLIC_EXAMPLES_TEXT", "PRESETS", "QWEN2_LORA_TARGETS", "TASKS", "TINY_CPU",
           "TUNING_RECORDS_SEED", "IdTokenizer", "ModelSpec", "Preset", "config_for", "first_token_even", "get_preset",
           "parity_public_examples", "random_id_prompts"]

QWEN2_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BASE_DTYPES = ("float32", "bfloat16")
TASKS = ("addition", "parity")
TUNING_RECORDS_SEED = 4242     # the synthetic records the tiny-cpu knobs were tuned on (not the preset's)
# Public sizes a run can use: T rounds, whose σ the PLD calibration finds in about 30 s at 1e5 rounds (minutes and
# gigabytes beyond), and n record slots, each drawn a Poisson coin every round.
MAX_ROUNDS = 10**5
MAX_RECORDS = 10**6


# ------------------------------------------------------------------------------------------- public tasks

class IdTokenizer:
    """Token-id "tokenizer" for prompts of raw ids: text is whitespace-separated decimal ids. One id is EOS and
    PAD (so decoding stops at the first EOS and never skips an id before it). Needs no files."""

    def __init__(self, vocab_size: int):
        self.vocab_size = val.count("vocab_size", vocab_size, minimum=4)
        self.eos_id = self.vocab_size - 1
        self.pad_id = self.eos_id
        self.eos_token_id = self.pad_token_id = self.eos_id

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise InvalidParameter("text", text, "a str of whitespace-separated token ids")
        try:
            ids = [int(t) for t in text.split()]
        except ValueError as err:
            raise InvalidParameter("text", text, "whitespace-separated decimal token ids") from err
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise InvalidParameter("text", text, f"token ids in [0, {self.vocab_size})")
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        out = []
        for t in (int(t) for t in ids):
            if t == self.eos_id:
                break
            out.append(str(t))
        return " ".join(out)

    def describe(self) -> dict:
        return {"kind": "token_ids", "vocab_size": self.vocab_size, "eos_id": self.eos_id, "pad_id": self.pad_id}


def first_token_even(record, completion) -> int:
    """Shape-only public verifier of `gpu-h200`: 1 iff the first completion token id is even (0 for an empty
    completion or anything that is not an id string); never raises."""
    if not isinstance(completion, str):
        return 0
    parts = completion.split()
    return int(bool(parts) and parts[0].isdigit() and int(parts[0]) % 2 == 0)


PARITY_PUBLIC_EXAMPLES_TEXT = (("1 2 3", "4 5"), ("1 2 3", "7"), ("8", ""), ("0 0", "x"))


def parity_public_examples():
    from mechanisms.dpgrpo.records import Record
    return tuple((Record(prompt=p, answer=""), c) for p, c in PARITY_PUBLIC_EXAMPLES_TEXT)


def random_id_prompts(count: int, length: int, vocab_size: int, seed: int):
    """`count` public prompts of `length` token ids uniform on [0, vocab_size − 1) (EOS excluded)."""
    from mechanisms.dpgrpo.records import Record
    rng = random.Random(seed)
    return [Record(prompt=" ".join(str(rng.randrange(vocab_size - 1)) for _ in range(length)), answer="")
            for _ in range(count)]


# ------------------------------------------------------------------------------------------- presets

@dataclass(frozen=True)
class ModelSpec:
    """A Qwen2-style decoder built from a config (no downloads); LoRA r, α on the seven projections."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_positions: int
    base_dtype: str = "float32"
    lora_r: int = 4
    lora_alpha: float = 8.0
    attn_implementation: str = "eager"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                     "max_positions", "lora_r"):
            val.count(name, getattr(self, name))
        val.positive("lora_alpha", self.lora_alpha)
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise InvalidParameter("num_heads", self.num_heads, "a divisor of hidden_size, multiple of num_kv_heads")
        if self.base_dtype not in BASE_DTYPES:
            raise InvalidParameter("base_dtype", self.base_dtype, f"one of {BASE_DTYPES}")

    def to_json(self) -> dict:
        return {"family": "qwen2", **dataclasses.asdict(self), "lora_targets": list(QWEN2_LORA_TARGETS),
                "tie_word_embeddings": True}

    def build(self, tokenizer, *, seed: int, device: str = "cpu", lora_dropout: float = 0.0):
        """Base `Qwen2ForCausalLM` from the config, weights drawn under torch seed `seed` on `device` in
        `base_dtype`, wrapped with LoRA (PEFT default init: A random under seed + 1, B = 0; adapters kept in
        fp32 by PEFT's autocast of adapter dtypes); base frozen, eval mode. The global RNG state is unchanged."""
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import Qwen2Config, Qwen2ForCausalLM

        seed = val.count("seed", seed, minimum=0)
        cfg = Qwen2Config(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                          intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
                          num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
                          max_position_embeddings=self.max_positions, tie_word_embeddings=True,
                          attention_dropout=0.0, use_sliding_window=False, bos_token_id=tokenizer.eos_id,
                          eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                          attn_implementation=self.attn_implementation)
        dtype = getattr(torch, self.base_dtype)
        devices = [torch.cuda.current_device()] if str(device).startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.device(device):
            torch.manual_seed(seed)
            base = Qwen2ForCausalLM(cfg).to(dtype).eval()
            lora = LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=lora_dropout,
                              target_modules=list(QWEN2_LORA_TARGETS), bias="none", init_lora_weights=True)
            torch.manual_seed(seed + 1)
            model = get_peft_model(base, lora)
        return model.eval()


@dataclass(frozen=True)
class Preset:
    """Every public input of a run. `sigma=None` → calibrated for (q, T, δ, ε); else precomputed, with
    `sigma_bracket` (the calibration's (unsafe, safe) bracket of σ) and `sigma_source` saying how it was
    obtained. `pretrain_steps = 0` → no public pretraining."""

    name: str
    task: str
    model: ModelSpec
    n: int
    m: int
    T: int
    G: int
    tau: float
    L_max: int
    beta: float
    lr: float
    C: float
    delta: float
    target_epsilon: float
    max_prompt_len: int
    pretrain_steps: int
    pretrain_lr: float
    pretrain_batch: int
    eval_prompts: int              # addition: the first k of the 100 single-digit pairs; parity: random prompts
    eval_samples: int              # completions per evaluation prompt
    eval_every: int                # rounds between evaluations (the accuracy-per-step curve)
    lora_dropout: float = 0.0
    chunk_size: int | None = None
    rollout_mode: str = "isolated"
    sigma: float | None = None
    sigma_bracket: tuple | None = None
    sigma_source: str | None = None
    prompt_tokens: int = 4
    init_seed: int = 0             # public model-init seed (a seeded run adds its seed)
    pretrain_seed: int = 1000      # public pretraining-data seed (a seeded run adds its seed)
    records_seed: int = 20260917   # the synthetic "private" records (content is generated, slots are private)
    eval_seed_offset: int = 7_000  # seeded runs evaluate with seed + offset; release runs draw OS entropy
    time_limit_s: float | None = None
    device: str = "cpu"
    cpu_threads: int | None = 1    # torch CPU threads for the run (tiny models gain nothing from more)
    is_reduced: bool = False
    tuning_on_private_data: object = False   # True / False / "unknown": tuning on the private records is outside
                                             # the budget, so the artifact declares it
    tuning_note: str = "no tuning"
    reduced_overrides: dict | None = field(default=None, compare=False, hash=False)

    def __post_init__(self):
        if self.task not in TASKS:
            raise InvalidParameter("task", self.task, f"one of {TASKS}")
        for name in ("G", "L_max", "max_prompt_len", "pretrain_batch", "eval_prompts", "eval_samples", "eval_every",
                     "prompt_tokens"):
            val.count(name, getattr(self, name), minimum=2 if name in ("G", "eval_samples") else 1)
        val.count("n", self.n, 1, MAX_RECORDS)
        val.count("T", self.T, 1, MAX_ROUNDS)
        val.count("pretrain_steps", self.pretrain_steps, minimum=0)
        if not 0 < self.m <= self.n:
            raise InvalidParameter("m", self.m, f"(0, n] with n = {self.n}")
        val.sampling_rate("q", self.m / self.n)
        for name in ("tau", "lr", "C", "target_epsilon", "pretrain_lr"):
            val.positive(name, getattr(self, name))
        val.nonnegative("beta", self.beta)
        val.open_unit("delta", self.delta)
        if self.sigma is not None:
            val.positive("sigma", self.sigma)
        if self.sigma is None and (self.sigma_bracket is not None or self.sigma_source is not None):
            raise InvalidParameter("sigma_bracket", self.sigma_bracket, "None when sigma is calibrated (sigma=None)")
        if self.sigma_bracket is not None:
            bracket = tuple(val.positive("sigma_bracket", b) for b in self.sigma_bracket)
            if len(bracket) != 2 or not bracket[0] < bracket[1] == self.sigma:
                raise InvalidParameter("sigma_bracket", self.sigma_bracket, "(unsafe σ, safe σ = sigma)")
            object.__setattr__(self, "sigma_bracket", bracket)
        if self.task == "addition" and self.eval_prompts > 100:
            raise InvalidParameter("eval_prompts", self.eval_prompts, "at most 100 (single-digit pairs)")
        if self.time_limit_s is not None:
            val.positive("time_limit_s", self.time_limit_s)
        if self.tuning_on_private_data not in (True, False, "unknown"):
            raise InvalidParameter("tuning_on_private_data", self.tuning_on_private_data, "true, false or 'unknown'")
        val.nonnegative("lora_dropout", self.lora_dropout)
        if self.lora_dropout >= 1:
            raise InvalidParameter("lora_dropout", self.lora_dropout, "[0, 1)")

    @property
    def q(self) -> float:
        return self.m / self.n

    def _privacy_key(self) -> tuple:
        return (self.q, self.T, self.delta, self.target_epsilon)

    def replace(self, **changes) -> "Preset":
        """A new preset with `changes`; a precomputed σ belongs to the old (q, T, δ, ε) and is dropped (σ is
        then calibrated) when they change, unless the change sets `sigma` itself."""
        out = dataclasses.replace(self, **changes)
        if out.sigma is not None and "sigma" not in changes and out._privacy_key() != self._privacy_key():
            out = dataclasses.replace(out, sigma=None, sigma_bracket=None, sigma_source=None)
        return out

    def reduced(self) -> "Preset":
        """The same code path at small shapes (CPU tests); σ stays valid only if (q, T, δ) are unchanged, so a
        reduced preset that changes them gets σ recalibrated (sigma=None)."""
        if self.is_reduced:
            return self
        changes = dict(self.reduced_overrides or {})
        model_changes = changes.pop("model", {})
        out = dataclasses.replace(self, model=dataclasses.replace(self.model, **model_changes), is_reduced=True,
                                  reduced_overrides=None, **changes)
        if out._privacy_key() != self._privacy_key():
            out = dataclasses.replace(out, sigma=None, sigma_bracket=None, sigma_source=None)
        return out

    def config_kwargs(self) -> dict:
        """Keyword arguments of `DPGRPOConfig` (σ added by `config_for`)."""
        return dict(n=self.n, m=self.m, T=self.T, C=self.C, delta=self.delta, target_epsilon=self.target_epsilon,
                    G=self.G, tau=self.tau, L_max=self.L_max, max_prompt_len=self.max_prompt_len, beta=self.beta,
                    lora_r=self.model.lora_r, lora_alpha=self.model.lora_alpha, lora_dropout=self.lora_dropout,
                    lora_targets=QWEN2_LORA_TARGETS, lr=self.lr, chunk_size=self.chunk_size,
                    rollout_mode=self.rollout_mode, precision="float32")

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("model", "reduced_overrides")}
        d["model"] = self.model.to_json()
        return json.loads(json.dumps(d))

    def sha256(self) -> str:
        """sha256 of the canonical JSON of `to_json()`."""
        return hashlib.sha256(canonical_json(self.to_json())).hexdigest()


def config_for(preset: Preset, *, arm: str, randomness, rollout_mode: str | None = None):
    """The frozen `DPGRPOConfig` of one arm of `preset`: σ calibrated by `DPGRPOConfig.from_target` (cached per
    configuration by the accountant), or the precomputed σ, whose ε the config's plan computes from its event."""
    from mechanisms.dpgrpo.config import DPGRPOConfig
    kwargs = preset.config_kwargs()
    if rollout_mode is not None:
        kwargs["rollout_mode"] = rollout_mode
    if preset.sigma is None:
        return DPGRPOConfig.from_target(arm=arm, randomness=randomness, **kwargs)
    return DPGRPOConfig(sigma=preset.sigma, arm=arm, randomness=randomness, **kwargs)


_TINY_MODEL = ModelSpec(vocab_size=14, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                        intermediate_size=128, max_positions=64)

TINY_CPU = Preset(
    name="tiny-cpu", task="addition", model=_TINY_MODEL, n=100, m=25, T=30, G=4, tau=0.7, L_max=6, beta=0.04,
    lr=5e-3, C=1.0, delta=1e-3, target_epsilon=8.0, max_prompt_len=32, pretrain_steps=100, pretrain_lr=3e-3,
    pretrain_batch=64, eval_prompts=100, eval_samples=16, eval_every=5, lora_dropout=0.05,
    tuning_note=f"T, lr and the pretraining knobs were chosen on a separate synthetic record set "
                f"(seed {TUNING_RECORDS_SEED}) and the public evaluation prompts, never on this preset's records",
    # reduced: (q, T, δ) unchanged, so the one cached calibration serves both forms.
    reduced_overrides={"n": 16, "m": 4, "eval_prompts": 20, "eval_samples": 4, "eval_every": 10,
                       "pretrain_steps": 20})

# σ for (q = 1/16, T = 8, δ = 1/5120, ε = 8), precomputed by the accountant's calibration
# (`DPGRPOConfig.from_target`, dp-accounting 0.6.0, float search at 1e-3 to σ tolerance 1e-6, then the
# certified check and the certified descent to within 1e-5 of the target), so that the GPU host needs no
# calibration. The bracket's lower end is the largest σ probed whose certified ε exceeds 8. No ε is stored: the
# plan of every run recomputes it from (q, σ, T, δ), and a test checks that the calibration still returns σ.
GPU_SIGMA = 0.457973746757728
GPU_SIGMA_BRACKET = (0.45797304395192456, GPU_SIGMA)
GPU_SIGMA_SOURCE = "precomputed by DPGRPOConfig.from_target (calibration for target epsilon 8); epsilon " \
                   "recomputed from the plan's event"

_QWEN2_05B = ModelSpec(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                       intermediate_size=4864, max_positions=32768, base_dtype="bfloat16",
                       attn_implementation="sdpa")

GPU_H200 = Preset(
    name="gpu-h200", task="parity", model=_QWEN2_05B, n=512, m=32, T=8, G=8, tau=0.7, L_max=128, beta=0.04,
    lr=1e-2, C=1.0, delta=1 / 5120, target_epsilon=8.0, max_prompt_len=64, pretrain_steps=0, pretrain_lr=1e-3,
    pretrain_batch=1, eval_prompts=64, eval_samples=8, eval_every=4, chunk_size=4, rollout_mode="batched",
    sigma=GPU_SIGMA, sigma_bracket=GPU_SIGMA_BRACKET, sigma_source=GPU_SIGMA_SOURCE, prompt_tokens=64,
    time_limit_s=420.0, device="cuda", cpu_threads=None,
    # reduced: (q, T, δ) unchanged, so σ and its record stay valid; shapes and counts shrink.
    reduced_overrides={"model": {"vocab_size": 512, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
                                 "num_kv_heads": 2, "intermediate_size": 128, "max_positions": 256},
                       "n": 32, "m": 2, "L_max": 8, "prompt_tokens": 8, "eval_prompts": 8, "eval_samples": 2,
                       "eval_every": 4, "time_limit_s": 300.0, "device": "cpu", "cpu_threads": 1})

PRESETS = {p.name: p for p in (TINY_CPU, GPU_H200)}


def get_preset(name, *, reduced: bool = False) -> Preset:
    if not isinstance(name, str) or name not in PRESETS:
        raise InvalidParameter("preset", name, " or ".join(repr(p) for p in PRESETS))
    if not isinstance(reduced, bool):
        raise InvalidParameter("reduced", reduced, "a bool")
    p = PRESETS[name]
    return p.reduced() if reduced else p
