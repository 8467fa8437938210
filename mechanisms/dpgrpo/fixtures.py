"""Public fixture data of the verification suite (docs/dpgrpo.md): the float64 reference fixture (tiny GPT-2, all
dropouts 0, LoRA r = 4, α = 8 moved off the reference by N(0, 0.02²), Replay rollouts of the addition task) and
the V13 preflight fixture (tiny Qwen2 with a float32 or bfloat16 base and float32 LoRA)."""

from __future__ import annotations

import random

import torch

from mechanisms.dpgrpo.records import RolloutGroup
from mechanisms.dpgrpo.rollouts import make_group
from privcheck.errors import InvalidParameter

__all__ = ["PREFLIGHT_BASE_DTYPES", "preflight_fixture", "reference_fixture", "replay_groups"]


def replay_groups(tokenizer, records, G, L_max, seed) -> list[RolloutGroup]:
    """Deterministic completions per record (a mix of correct answers, wrong answers and EOS-less digit
    runs, lengths varied), from `random.Random(seed)` — public fixture data for Replay."""
    rng = random.Random(seed)
    out = []
    for rec in records:
        texts, eos = [], []
        for g in range(G):
            kind = rng.randrange(3)
            if kind == 0:
                text, ends = rec.answer, True
            elif kind == 1:
                text, ends = str(rng.randrange(0, 99)), True
            else:
                text, ends = "".join(rng.choice("0123456789+=") for _ in range(L_max)), False
            texts.append(text)
            eos.append(ends)
        if not any(t == rec.answer for t in texts):
            texts[0], eos[0] = rec.answer, True  # groups have reward variance
        out.append(make_group(tokenizer, texts, L_max, eos=eos))
    return out


def _replay_fixture(model, tok, *, n_records, G, L_max, seed, lora_std):
    from mechanisms.dpgrpo.models import perturb_lora_
    from mechanisms.dpgrpo.rollouts import Replay
    from mechanisms.dpgrpo.tasks import addition_records

    perturb_lora_(model, lora_std, seed + 7)  # π_θ ≠ π_ref, else the KL gradient is exactly zero
    records = addition_records(n_records, seed)
    groups = replay_groups(tok, records, G, L_max, seed + 11)
    return model, tok, records, Replay(list(zip(records, groups)))


def reference_fixture(*, n_records=8, G=4, L_max=6, seed=0, lora_std=0.02):
    """(model, tokenizer, records, Replay backend) in float64, LoRA off the reference."""
    from mechanisms.dpgrpo.models import build_tiny_policy
    from mechanisms.dpgrpo.tasks import CharTokenizer

    if n_records < 1:
        raise InvalidParameter("n_records", n_records, "an integer >= 1")
    tok = CharTokenizer()
    model = build_tiny_policy(seed, torch.float64, r=4, alpha=8, lora_dropout=0.0, tokenizer=tok)
    # GPT2Config carries summary_first_dropout = 0.1 (used only by sequence-summary heads, not by the LM head);
    # The float64 checks need every dropout probability to be 0, and their dropout guard reads the config.
    base_cfg = getattr(model, "config", None)
    if base_cfg is not None and getattr(base_cfg, "summary_first_dropout", 0) != 0:
        base_cfg.summary_first_dropout = 0.0
    return _replay_fixture(model, tok, n_records=n_records, G=G, L_max=L_max, seed=seed, lora_std=lora_std)


# Base dtype of the tiny Qwen2 per preflight precision; LoRA, gradients, clip and noise stay float32 (V13).
PREFLIGHT_BASE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def preflight_fixture(precision: str, *, n_records=8, G=4, L_max=6, seed=0, lora_std=0.02):
    """(model, tokenizer, records, Replay backend) for V13: a tiny Qwen2 (2 layers, hidden 64, 4 heads,
    2 KV heads, every dropout 0) with its base in `precision` ("float32" or "bfloat16") and float32 LoRA
    (r = 4, α = 8, dropout 0) moved off the reference by N(0, lora_std²); Replay rollouts as in the float64
    fixture."""
    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from mechanisms.dpgrpo.tasks import CharTokenizer

    if precision not in PREFLIGHT_BASE_DTYPES:
        raise InvalidParameter("precision", precision, f"one of {tuple(PREFLIGHT_BASE_DTYPES)}")
    if n_records < 1:
        raise InvalidParameter("n_records", n_records, "an integer >= 1")
    tok = CharTokenizer()
    model = build_tiny_qwen2_policy(seed, PREFLIGHT_BASE_DTYPES[precision], r=4, alpha=8, lora_dropout=0.0,
                                    tokenizer=tok)
    return _replay_fixture(model, tok, n_records=n_records, G=G, L_max=L_max, seed=seed, lora_std=lora_std)
