"""Tiny policy builders (no downloads): a GPT-2-style causal LM from a config, with LoRA via peft.

`build_tiny_policy(seed, dtype)` returns a PEFT model whose only trainable tensors are the LoRA matrices on
the attention projections (`attn.c_attn`, `attn.c_proj`); `model.disable_adapter()` gives the reference
policy π_ref (the public base). GPT-2 uses LayerNorm and all dropouts are 0, so float64 checks are exact
(they need zero dropout and a LayerNorm model). PEFT's default init sets B = 0, so a fresh policy equals π_ref;
`perturb_lora_` moves LoRA off the reference for checks.
"""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from mechanisms.dpgrpo.tasks import CharTokenizer
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["LORA_TARGETS", "QWEN2_LORA_TARGETS", "build_tiny_base", "build_tiny_policy", "build_tiny_qwen2_policy",
           "hf_char_tokenizer", "perturb_lora_", "tiny_config", "tiny_qwen2_config"]

LORA_TARGETS = ("attn.c_attn", "attn.c_proj")
QWEN2_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_DTYPES = (torch.float32, torch.float64)
_QWEN2_DTYPES = (torch.float32, torch.bfloat16)


def _dtype(dtype) -> torch.dtype:
    if dtype not in _DTYPES:
        raise InvalidParameter("dtype", dtype, "torch.float32 or torch.float64")
    return dtype


def tiny_config(tokenizer: CharTokenizer | None = None, n_positions: int = 32) -> GPT2Config:
    """GPT-2 config: 2 layers, hidden 64, 4 heads, all dropouts 0, vocabulary of `tokenizer`."""
    tok = tokenizer or CharTokenizer()
    return GPT2Config(vocab_size=tok.vocab_size, n_positions=val.count("n_positions", n_positions),
                      n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      summary_first_dropout=0.0,  # unused by the LM head, but any dropout > 0 is refused
                      bos_token_id=tok.eos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                      attn_implementation="eager")


def build_tiny_base(seed, dtype=torch.float32, tokenizer: CharTokenizer | None = None) -> GPT2LMHeadModel:
    """The base model with weights drawn from `seed` (the global RNG state is left unchanged), in eval mode."""
    seed = val.count("seed", seed, minimum=0)
    dtype = _dtype(dtype)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(tiny_config(tokenizer))
    return model.to(dtype).eval()


def build_tiny_policy(seed, dtype=torch.float32, *, r=4, alpha=8, lora_dropout=0.0,
                      tokenizer: CharTokenizer | None = None):
    """Base model from `seed` wrapped with LoRA (rank r, α, dropout) on `LORA_TARGETS`; base weights frozen."""
    r = val.count("r", r)
    alpha = val.positive("alpha", alpha)
    lora_dropout = val.nonnegative("lora_dropout", lora_dropout)
    if lora_dropout >= 1:
        raise InvalidParameter("lora_dropout", lora_dropout, "[0, 1)")
    base = build_tiny_base(seed, dtype, tokenizer)
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=lora_dropout, target_modules=list(LORA_TARGETS),
                     fan_in_fan_out=True, bias="none", init_lora_weights=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        model = get_peft_model(base, cfg)
    return model.to(dtype).eval()


def hf_char_tokenizer(chars: str = "0123456789+="):
    """`CharTokenizer(chars)` as a transformers fast tokenizer (same ids: 0 = PAD, 1 = EOS, then one per character),
    built locally with the `tokenizers` library, so it can be written with `save_pretrained` and read back with
    `AutoTokenizer.from_pretrained(dir, local_files_only=True)` (CharTokenizer itself has no file format)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    char_tok = CharTokenizer(chars)                      # validates `chars`
    vocab = {token: i for i, token in enumerate(char_tok.vocab)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")    # one token per character
    backend.decoder = decoders.Fuse()                                                  # join without spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=CharTokenizer.PAD,
                                   eos_token=CharTokenizer.EOS)


@torch.no_grad()
def perturb_lora_(model, std, seed) -> None:
    """Add N(0, std²) to every LoRA tensor (from a private generator seeded by `seed`), in place."""
    std = val.positive("std", std)
    gen = torch.Generator().manual_seed(val.count("seed", seed, minimum=0))
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if "lora_" in name:
            p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * std)


def tiny_qwen2_config(tokenizer: CharTokenizer | None = None, max_positions: int = 64) -> Qwen2Config:
    """Qwen2 config of the tiny-cpu preset: 2 layers, hidden 64, intermediate 128, 4 heads, 2 KV heads, tied embeddings,
    attention dropout 0. RMSNorm computes in float32, so this model is for float32/bfloat16 runs, not the
    float64 identity checks (those use the GPT-2 above)."""
    tok = tokenizer or CharTokenizer()
    return Qwen2Config(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=val.count("max_positions", max_positions),
                       tie_word_embeddings=True, attention_dropout=0.0, use_sliding_window=False,
                       bos_token_id=tok.eos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                       attn_implementation="eager")


def build_tiny_qwen2_policy(seed, dtype=torch.float32, *, r=4, alpha=8, lora_dropout=0.0,
                            tokenizer: CharTokenizer | None = None, targets=QWEN2_LORA_TARGETS):
    """Tiny Qwen2 base from `seed` (float32 or bfloat16) with LoRA (rank r, α, dropout) on the seven
    projections; base weights frozen, eval mode. The global RNG state is left unchanged."""
    seed = val.count("seed", seed, minimum=0)
    if dtype not in _QWEN2_DTYPES:
        raise InvalidParameter("dtype", dtype, "torch.float32 or torch.bfloat16")
    r = val.count("r", r)
    alpha = val.positive("alpha", alpha)
    lora_dropout = val.nonnegative("lora_dropout", lora_dropout)
    if lora_dropout >= 1:
        raise InvalidParameter("lora_dropout", lora_dropout, "[0, 1)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        base = Qwen2ForCausalLM(tiny_qwen2_config(tokenizer)).to(dtype).eval()
        cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=lora_dropout, target_modules=list(targets),
                         bias="none", init_lora_weights=True)
        torch.manual_seed(seed + 1)
        model = get_peft_model(base, cfg)
    return model.eval()
