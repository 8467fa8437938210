"""Candidate sampling from the public base policy π0 (public randomness).

Candidates are completions of public prompts drawn from a public model, so they never depend on the
private data: the candidate lists are public randomness and may be recorded.
"""

from __future__ import annotations

import math

from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["CandidateSampler"]


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

