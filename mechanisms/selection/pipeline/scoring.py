"""Scoring candidates with the PRIVATE reward: a reward model or a reward function, clipped to the public range.

The reward model (or reward function) is the private part of the pipeline: it stands for r̂_D, trained on
the private data D, and enters only through clipped scores. Its score map is public and fixed in advance
(R_max·sigmoid(logit)); every score is checked finite and then clipped to [0, R_max] (clipping is
1-Lipschitz, so the score sensitivity Δ stays Δ).
"""

from __future__ import annotations

from typing import Callable

from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["RewardFunctionScorer", "RewardModelScorer", "clip_scores"]


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
    """Check finiteness, then clip to the public range [0, R_max] (1-Lipschitz: the sensitivity stays Δ)."""
    import numpy as np
    raw = np.asarray(raw, dtype=np.float64)
    if not np.all(np.isfinite(raw)):
        bad = raw[~np.isfinite(raw)].ravel()[0]
        raise InvalidParameter("reward", float(bad), "finite scores (the reward returned NaN or inf)")
    return np.clip(raw, 0.0, r_max)

