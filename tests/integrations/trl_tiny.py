"""Tiny, file-free TRL fixtures: a character tokenizer (a `PreTrainedTokenizerFast` built in memory), a tiny GPT-2
from a config (all dropouts 0), an addition-prompt `datasets.Dataset` and a graded reward function."""

from __future__ import annotations

CHARS = "0123456789+="


def tiny_tokenizer():
    """PAD = 0, EOS = 1, one id per character of CHARS; no files, no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def tiny_model(seed: int = 0):
    """A 2-layer GPT-2 (hidden 32) from a config, float32, every dropout 0; the global RNG is left unchanged."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=len(CHARS) + 2, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0, bos_token_id=1, eos_token_id=1,
                     pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(cfg).eval()


def addition_dataset(n: int = 6, seed: int = 0, max_operand: int = 99):
    """`n` prompts "a+b=" with their answers (public synthetic data; prompts of 4 to 6 characters)."""
    import random

    from datasets import Dataset

    rng = random.Random(seed)
    pairs = [(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(n)]
    return Dataset.from_dict({"prompt": [f"{a}+{b}=" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]})


def digit_reward(prompts, completions, answer, **kwargs):
    """Graded reward in [0, 1]: half for the fraction of digits in the completion, half for the fraction of the
    answer's characters matched at its start (graded, so a random model's rewards already vary)."""
    out = []
    for c, a in zip(completions, answer):
        digits = sum(ch.isdigit() for ch in c) / max(1, len(c))
        hits = sum(1 for x, y in zip(c, a) if x == y) / len(a)
        out.append(0.5 * digits + 0.5 * hits)
    return out


def answer_logprob(model, tokenizer, row) -> float:
    """Canary score: log-probability of the row's answer (then EOS) after its prompt, under `model`."""
    import torch

    prompt = tokenizer(row["prompt"])["input_ids"]
    answer = tokenizer(row["answer"])["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].double()
    return float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(answer)[:, None]).sum())
