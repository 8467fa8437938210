"""Input-space canaries, the scorer's view of the trained policy, and the log-odds score.

The score of canary i is Y_i = [log π_θ(ℓ_i⏎) − log π_θ(ℓ̄_i⏎)] − [log π_ref(ℓ_i⏎) − log π_ref(ℓ̄_i⏎)] on its
prompt, where ⏎ is EOS, ℓ_i the secret label, ℓ̄_i the other option, π_θ the trained policy and π_ref the same
model with its LoRA adapter disabled. Private training only moves LoRA tensors, so π_ref is the public base and
the score measures how far training moved the policy towards the label (docs/audits.md, "Input-space binary
canaries"). The scorer receives the model view and the canary, never the membership.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from audits import canary as cn
from audits.dpgrpo.input_prompts import OPTIONS

__all__ = ["InputCanary", "LogOddsDelta", "PolicyView", "input_canaries", "score_model_view"]


@dataclass(frozen=True)
class InputCanary:
    """Canary i: public id and prompt, and its secret reference answer `label` (one of OPTIONS)."""

    id: str
    prompt: str
    label: str = field(repr=False)

    def record(self):
        """The ordinary record the trainer sees: the prompt with the secret label as reference answer."""
        from mechanisms.dpgrpo.records import Record
        return Record(prompt=self.prompt, answer=self.label)


def input_canaries(prompts, labels) -> tuple[InputCanary, ...]:
    """One canary per prompt, with the public id "input:<prompt>" (the ids the commitments bind)."""
    return tuple(InputCanary(f"input:{p}", p, x) for p, x in zip(prompts, labels, strict=True))


@dataclass(frozen=True, eq=False)
class PolicyView:
    """The statistic's input: one trained model, read as π_θ (LoRA on) or π_ref (LoRA off: the public base)."""

    model: object
    tokenizer: object
    max_prompt_len: int

    def option_logprobs(self, prompt: str, policy: str) -> np.ndarray:
        """log π(o⏎ | prompt) for each option o of OPTIONS (the answer then EOS), in float64."""
        import torch

        from mechanisms.dpgrpo.rollouts import (
            encode_prompt,
            encode_target,
            policy_scope,
            token_logprobs,
        )

        device = next(self.model.parameters()).device
        ids = encode_prompt(self.tokenizer, prompt, self.max_prompt_len, device)
        rows = torch.cat([encode_target(self.tokenizer, o, 2, device) for o in OPTIONS])   # one token + EOS each
        with torch.no_grad(), policy_scope(self.model, policy):
            lp = token_logprobs(self.model, ids, rows).sum(dim=1)
        return lp.double().cpu().numpy()


@dataclass(frozen=True)
class LogOddsDelta:
    """The log-odds of the secret label under the trained policy minus the same log-odds under the public base,
    both on the canary's prompt (higher ⇒ training moved the policy towards the label)."""

    def __call__(self, view: PolicyView, canary: InputCanary) -> float:
        k = OPTIONS.index(canary.label)
        trained = view.option_logprobs(canary.prompt, "current")
        base = view.option_logprobs(canary.prompt, "reference")
        return float((trained[k] - trained[1 - k]) - (base[k] - base[1 - k]))


def score_model_view(view: PolicyView, canaries) -> cn.FrozenScores:
    """Frozen scores of `canaries` on `view` (the model in eval mode: no LoRA dropout); S is not an input."""
    view.model.eval()
    return cn.score_canaries(LogOddsDelta(), view, canaries)
