"""Public, non-private SFT pretraining of the base model before any private record is read (tiny-cpu preset).

Guarantees: only the base (non-LoRA) weights are trained, with the LoRA adapter disabled, on examples drawn
from a public generator under a public seed; afterwards the base is frozen again and every `.grad` is cleared,
so π_ref (adapter off) is the pretrained public base and the LoRA tensors are untouched (PEFT's B = 0 init
still gives π_θ1 = π_ref). The caller runs this before it builds the slot universe, so no private record can
enter it. The torch RNG of the caller is not used (the procedure draws no random numbers besides the data,
which come from `random.Random(seed)`).

Objective: token-level cross-entropy of the reference answer followed by EOS given the prompt, averaged over
the answer tokens of the batch (a public statistic, so batch coupling is irrelevant here), AdamW.
"""

from __future__ import annotations

import random

import torch

from mechanisms.dpgrpo.rollouts import encode_prompt, encode_target, pad_id
from privcheck import validation as val

__all__ = ["addition_examples", "pretrain_public"]


def addition_examples(rng: random.Random, count: int, max_operand: int = 9) -> list:
    """Public single-digit addition examples "a+b=" with answer str(a+b)."""
    from mechanisms.dpgrpo.tasks import addition_record
    return [addition_record(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(count)]


def _batch(tokenizer, records, max_prompt_len: int, L_max: int, device):
    """Right-padded input ids, attention mask and labels (−100 outside answer + EOS)."""
    rows, labels = [], []
    for rec in records:
        prompt = encode_prompt(tokenizer, rec.prompt, max_prompt_len).tolist()
        target = encode_target(tokenizer, rec.answer, L_max)[0].tolist()
        rows.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    width = max(len(r) for r in rows)
    pad = pad_id(tokenizer)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    lab = torch.full((len(rows), width), -100, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, y) in enumerate(zip(rows, labels)):
        ids[i, :len(r)] = torch.tensor(r)
        lab[i, :len(y)] = torch.tensor(y)
        att[i, :len(r)] = 1
    return ids.to(device), att.to(device), lab.to(device)


def pretrain_public(model, tokenizer, *, steps: int, lr: float, batch: int, seed: int, max_prompt_len: int,
                    L_max: int, examples=addition_examples) -> dict:
    """`steps` AdamW steps on the base weights (adapter disabled); returns the public summary for the artifact."""
    steps = val.count("pretrain_steps", steps, minimum=0)
    summary = {"steps": steps}
    if steps == 0:
        return summary
    lr = val.positive("pretrain_lr", lr)
    batch = val.count("pretrain_batch", batch)
    seed = val.count("pretrain_seed", seed, minimum=0)
    base = [p for name, p in model.named_parameters() if "lora_" not in name]
    device = base[0].device
    rng = random.Random(seed)
    was_training = model.training
    for p in base:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(base, lr=lr)
    losses = []
    try:
        model.train()
        with model.disable_adapter():
            for _ in range(steps):
                ids, att, lab = _batch(tokenizer, examples(rng, batch), max_prompt_len, L_max, device)
                logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                         lab[:, 1:].reshape(-1), ignore_index=-100)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
    finally:
        for p in base:
            p.requires_grad_(False)
            p.grad = None
        model.train(was_training)
    summary.update({"lr": lr, "batch": batch, "seed": seed, "optimizer": "adamw (torch defaults besides lr)",
                    "trained": "base weights, LoRA adapter disabled",
                    "examples": getattr(examples, "__name__", "public examples"),
                    "first_loss": losses[0], "final_loss": losses[-1]})
    return summary
