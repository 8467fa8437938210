"""The public inputs of a run: tokenizer, model (built from a preset or loaded from local weights), public
evaluation prompts, and the records behind the slot universe; with the hashes the run artifact records.

Nothing here reads a private record except `private_records`, which the arm runner calls only after public
pretraining and the initial evaluation. Hashes cover public inputs only (weights, tokenizer, verifier source).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from dataclasses import dataclass
from pathlib import Path

from mechanisms.dpgrpo.pipeline.setup import RunSetup
from mechanisms.dpgrpo.presets import QWEN2_LORA_TARGETS, IdTokenizer, Preset, random_id_prompts
from privcheck.errors import InvalidParameter

__all__ = ["PUBLIC_EVAL_SEED", "Built", "build_model", "eval_prompts", "file_sha256", "private_records",
           "sha256_bytes", "task_tokenizer", "tensor_sha256", "tokenizer_sha256", "verifier_sha256"]

PUBLIC_EVAL_SEED = 31_337      # public seed of the random-id evaluation prompts (parity task)


@dataclass
class Built:
    model: object
    tokenizer: object
    base_model: dict
    tokenizer_sha256: str


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensor_sha256(named) -> str:
    """sha256 over (name, dtype, shape, bytes) of tensors in sorted-name order."""
    import torch
    h = hashlib.sha256()
    for name, t in sorted(named, key=lambda kv: kv[0]):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenizer_sha256(tok) -> str:
    if hasattr(tok, "describe"):
        return sha256_bytes(json.dumps(tok.describe(), sort_keys=True).encode())
    if hasattr(tok, "vocab") and isinstance(tok.vocab, tuple):
        return sha256_bytes(json.dumps(list(tok.vocab)).encode())
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        return sha256_bytes(backend.to_str().encode())
    return sha256_bytes(json.dumps(sorted(tok.get_vocab().items())).encode())


def verifier_sha256(verifier) -> str:
    """sha256 of the verifier's source (its qualified name when the source is not available)."""
    try:
        src = inspect.getsource(verifier)
    except (OSError, TypeError):
        src = getattr(verifier, "__qualname__", repr(verifier))
    return sha256_bytes(src.encode())


def _local_source(path: Path) -> tuple[Path, dict]:
    """(directory, from_pretrained kwargs) of a weights directory or a GGUF file."""
    return (path.parent, {"gguf_file": path.name}) if path.is_file() else (path, {})


def task_tokenizer(setup: RunSetup):
    """The tokenizer of the run (loaded once): the local model's (PAD := EOS when unset), else the task's."""
    if setup.tokenizer is None:
        setup.tokenizer = _load_tokenizer(setup)
    return setup.tokenizer


def _load_tokenizer(setup: RunSetup):
    p = setup.preset
    if setup.model_path is not None:
        from transformers import AutoTokenizer
        directory, kwargs = _local_source(setup.model_path)
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True, **kwargs)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok
    if p.task == "addition":
        from mechanisms.dpgrpo.tasks import CharTokenizer
        return CharTokenizer()
    return IdTokenizer(p.model.vocab_size)


def _load_local(setup: RunSetup, tok, seed: int) -> Built:
    """Local weights (directory, or GGUF file dequantised to fp32) with LoRA on the seven projections."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path, p = setup.model_path, setup.preset
    directory, kwargs = _local_source(path)
    with torch.random.fork_rng(devices=[]):
        base = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32, **kwargs)
        base = base.to(setup.device).eval().requires_grad_(False)
        torch.manual_seed(p.init_seed + seed + 1)
        lora = LoraConfig(r=p.model.lora_r, lora_alpha=p.model.lora_alpha, lora_dropout=p.lora_dropout,
                          target_modules=list(QWEN2_LORA_TARGETS), bias="none", init_lora_weights=True)
        model = get_peft_model(base, lora).eval()
    if path.is_file():
        info = {"kind": "gguf", "sha256": file_sha256(path), "file": path.name,
                "class": type(base).__name__}
    else:
        weights = sorted(f for f in path.iterdir() if f.suffix in (".safetensors", ".bin"))
        h = hashlib.sha256()
        for f in weights:
            h.update(f.name.encode() + b"|" + file_sha256(f).encode())
        info = {"kind": "local", "sha256": h.hexdigest(), "files": [f.name for f in weights],
                "class": type(base).__name__}
    info["parameters"] = sum(t.numel() for t in base.parameters())
    return Built(model, tok, info, tokenizer_sha256(tok))


def build_model(setup: RunSetup, seed: int) -> Built:
    """The public model (init seed = preset.init_seed + replicate seed) and tokenizer of the preset's task."""
    p = setup.preset
    tok = task_tokenizer(setup)
    if setup.model_path is not None:
        return _load_local(setup, tok, seed)
    if tok.vocab_size != p.model.vocab_size:
        raise InvalidParameter("model.vocab_size", p.model.vocab_size, f"{tok.vocab_size} (the tokenizer's)")
    model = p.model.build(tok, seed=p.init_seed + seed, device=setup.device, lora_dropout=p.lora_dropout)
    base = [(k, t) for k, t in model.named_parameters() if "lora_" not in k]
    info = {"kind": "config", "class": "Qwen2ForCausalLM", "init_seed": p.init_seed + seed,
            "spec": p.model.to_json(), "parameters": sum(t.numel() for _, t in base)}
    return Built(model, tok, info, tokenizer_sha256(tok))


def eval_prompts(p: Preset):
    """The public evaluation prompts of the preset's task."""
    if p.task == "addition":
        from mechanisms.dpgrpo.tasks import addition_record
        pairs = [(a, b) for a in range(10) for b in range(10)]
        if p.eval_prompts < len(pairs):
            pairs = sorted(random.Random(PUBLIC_EVAL_SEED).sample(pairs, p.eval_prompts))
        return [addition_record(a, b) for a, b in pairs]
    return random_id_prompts(p.eval_prompts, p.prompt_tokens, p.model.vocab_size, PUBLIC_EVAL_SEED)


def private_records(p: Preset):
    """The records behind the n slots (synthetic here; treated as private: never hashed or logged)."""
    if p.task == "addition":
        from mechanisms.dpgrpo.records import Record
        from mechanisms.dpgrpo.tasks import addition_records
        return [Record(prompt=r.prompt, answer=r.answer, solution=r.answer, meta=dict(r.meta))
                for r in addition_records(p.n, p.records_seed)]
    return random_id_prompts(p.n, p.prompt_tokens, p.model.vocab_size, p.records_seed)
