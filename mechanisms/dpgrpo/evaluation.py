"""Sampled accuracy of a released checkpoint on public evaluation prompts (docs/dpgrpo.md, "End-to-end runs").

Guarantees: the metric is the mean verifier reward over `samples` completions per public prompt, drawn by
plain tempered sampling at τ (top_k = 0, top_p = 1, at most L_max new tokens: the sampling law of the
rollouts, from `IsolatedHF.generation_config`). It reads only the model and public prompts, so it is
post-processing of the released trajectory. Its randomness is a dedicated evaluation seed: each call forks
the framework RNG (CPU and the active CUDA device) and seeds it with that seed, so the trainer's private
generators are never touched and every evaluation of a run (before, during, after, and across arms sharing
an `Evaluator`) uses the same draws (common random numbers: differences between checkpoints are less noisy).
In release mode the evaluation seed comes from OS entropy and is not recorded.

Prompts of equal token length are generated together (no padding, so no batch-composition effects);
verifier failures on evaluation outputs count as reward 0.
"""

from __future__ import annotations

import torch

from mechanisms.dpgrpo.rollouts import IsolatedHF, decode_completion, encode_prompt
from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.interrupts import reraise_if_interrupted
from privcheck.randomness import entropy_seed

__all__ = ["Evaluator"]


class Evaluator:
    """`Evaluator(tokenizer, verifier, prompts, samples=, tau=, L_max=, max_prompt_len=, seed=)`; call it on a
    model to get the sampled accuracy (a float in [0, 1])."""

    def __init__(self, tokenizer, verifier, prompts, *, samples: int, tau: float, L_max: int, max_prompt_len: int,
                 seed: int | None = None, max_rows: int = 2048):
        self.prompts = list(prompts)
        if not self.prompts:
            raise InvalidParameter("eval_prompts", 0, "at least one public evaluation prompt")
        if not callable(verifier):
            raise InvalidParameter("verifier", verifier, "a callable (record, completion) -> {0, 1}")
        self.tokenizer = tokenizer
        self.verifier = verifier
        self.samples = val.count("eval_samples", samples, minimum=2)
        self.max_rows = val.count("max_rows", max_rows)
        self._sampler = IsolatedHF(tokenizer, G=self.samples, tau=tau, L_max=L_max, max_prompt_len=max_prompt_len)
        self.seeded = seed is not None
        self._seed = val.count("eval_seed", seed, minimum=0) if seed is not None else entropy_seed()

    def describe(self) -> dict:
        """Public description (the seed only when it was given, i.e. in seeded runs)."""
        out = {"set": "public", "metric": "sampled_accuracy", "prompts": len(self.prompts),
               "samples_per_prompt": self.samples, "tau": self._sampler.tau, "top_k": 0, "top_p": 1.0,
               "L_max": self._sampler.L_max, "randomness": "dedicated evaluation seed, common to every evaluation"}
        if self.seeded:
            out["seed"] = self._seed
        return out

    def _groups(self, device):
        by_len: dict[int, list] = {}
        for rec in self.prompts:
            ids = encode_prompt(self.tokenizer, rec.prompt, self._sampler.max_prompt_len)
            by_len.setdefault(ids.numel(), []).append((rec, ids))
        per_call = max(1, self.max_rows // self.samples)
        for _, items in sorted(by_len.items()):
            for lo in range(0, len(items), per_call):
                chunk = items[lo:lo + per_call]
                yield [r for r, _ in chunk], torch.stack([i for _, i in chunk]).to(device)

    def _reward(self, record, text) -> int:
        try:
            r = self.verifier(record, text)
        except Exception as exc:  # noqa: BLE001 — a failing verifier scores 0 on evaluation outputs
            reraise_if_interrupted(exc)
            return 0
        return int(r) if r in (0, 1) else 0

    @torch.no_grad()
    def __call__(self, model) -> float:
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        devices = [device.index if device.index is not None else torch.cuda.current_device()] \
            if device.type == "cuda" else []
        total = count = 0
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(self._seed)
                config = self._sampler.generation_config()
                for records, ids in self._groups(device):
                    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
                    comp = out[:, ids.shape[1]:].tolist()
                    for row, completion in enumerate(comp):
                        total += self._reward(records[row // self.samples],
                                              decode_completion(self.tokenizer, completion))
                        count += 1
        finally:
            model.train(was_training)
        return total / count
