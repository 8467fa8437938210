"""Public canary prompts, secret canary labels and the public binary-choice pretraining of the input-space audit.

A canary question is a string of random digits followed by "=", its answer one of OPTIONS. The prompts are public
and drawn from a generator apart from the membership; the labels are secret, i.i.d. uniform on OPTIONS, drawn
from their own generator (`draw_labels` takes no membership, so they are independent of S by construction).
`BinaryPretraining` is a second public pretraining phase that teaches the base policy to answer such questions;
without it almost every canary rollout group of the tiny-cpu policy has constant reward, hence zero advantage and
no gradient (docs/audits.md, "Why the binary-choice pretraining").
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

import numpy as np

from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["DEFAULT_PROMPT_DIGITS", "DIGITS", "MAX_PROMPT_DIGITS", "OPTIONS", "PROMPT_SUFFIX", "SEED_NAMESPACE",
           "BinaryPretraining", "binary_choice_prompt", "build_base_policy", "derived_seed", "draw_labels",
           "label_bits", "label_seed", "public_prompts"]

OPTIONS = ("0", "1")             # the two answers of a binary canary question
PROMPT_SUFFIX = "="
DIGITS = "0123456789"
DEFAULT_PROMPT_DIGITS = 6
MAX_PROMPT_DIGITS = 15
SEED_NAMESPACE = "privcheck.audits.dpgrpo_input"


def derived_seed(seed: int, what: str) -> int:
    """The seed of `what` ("labels", "prompts", "pilot") in a seeded (test) audit, apart from the membership and
    trainer seeds."""
    from privcheck.randomness import derive_seed
    return derive_seed(seed, what, namespace=SEED_NAMESPACE)


def label_seed(seed: int) -> int:
    """The secret-label seed of a seeded (test) audit: derived from `seed`, distinct from `membership_seed(seed)`."""
    return derived_seed(seed, "labels")


def draw_labels(m: int, seed: int | None = None) -> tuple[str, ...]:
    """m secret labels uniform on OPTIONS, i.i.d.: OS entropy (`secrets`), or numpy PCG64 under `seed` (tests).
    The draw takes no membership: labels are independent of S by construction."""
    m = val.count("canaries", m)
    if seed is None:
        bits = [secrets.randbits(1) for _ in range(m)]
    else:
        bits = np.random.default_rng(val.count("seed", seed, minimum=0)).integers(0, 2, size=m).tolist()
    return tuple(OPTIONS[b] for b in bits)


def label_bits(labels) -> np.ndarray:
    """The commitment bits of labels: 1 for OPTIONS[1], 0 for OPTIONS[0]."""
    return np.array([OPTIONS.index(x) for x in labels], dtype=np.int64)


def public_prompts(count: int, digits: int, rng: random.Random) -> tuple[str, ...]:
    """`count` distinct prompts "<digits random digits>=", sampled without replacement by `rng`."""
    return tuple(f"{v:0{digits}d}{PROMPT_SUFFIX}" for v in rng.sample(range(10 ** digits), count))


def binary_choice_prompt(rng: random.Random, digits: int) -> str:
    return "".join(rng.choice(DIGITS) for _ in range(digits)) + PROMPT_SUFFIX


@dataclass(frozen=True)
class BinaryPretraining:
    """The public binary-choice phase after the preset's SFT: `steps` AdamW steps on the base weights (adapter off)
    with batches of `batch` examples, a fraction `binary_fraction` of them binary-choice prompts (random digits +
    "=") with PUBLIC labels uniform on OPTIONS drawn by `random.Random(seed)`, the rest the preset's addition
    examples (so the addition task is kept). Measured on tiny-cpu (60 steps): the base then answers "0"/"1" on
    fresh canary prompts with probabilities ≈ 0.42/0.55 and ≈ 11% of G = 4 groups have constant reward, against
    ≈ 98% without this phase (docs/audits.md, "Input-space binary canaries")."""

    steps: int = 60
    lr: float = 3e-3
    batch: int = 64
    seed: int = 2718
    binary_fraction: float = 0.5

    def __post_init__(self):
        val.count("pretraining.steps", self.steps)
        val.positive("pretraining.lr", self.lr)
        val.count("pretraining.batch", self.batch)
        val.count("pretraining.seed", self.seed, minimum=0)
        fraction = val.positive("pretraining.binary_fraction", self.binary_fraction)
        if fraction > 1:
            raise InvalidParameter("pretraining.binary_fraction", fraction, "(0, 1]")

    def examples(self, digits: int):
        """The example generator `pretrain_public` calls as `examples(rng, count)`."""
        from mechanisms.dpgrpo.pretrain import addition_examples
        from mechanisms.dpgrpo.records import Record

        fraction = self.binary_fraction

        def binary_choice_and_addition_examples(rng: random.Random, count: int) -> list:
            out = []
            for _ in range(count):
                if rng.random() < fraction:
                    out.append(Record(prompt=binary_choice_prompt(rng, digits), answer=rng.choice(OPTIONS)))
                else:
                    out.extend(addition_examples(rng, 1))
            return out

        return binary_choice_and_addition_examples

    def apply(self, model, tokenizer, *, digits: int, seed: int, max_prompt_len: int, L_max: int) -> dict:
        """Run the phase on `model` (public data only) and return its public summary for the report."""
        from mechanisms.dpgrpo.pretrain import pretrain_public

        summary = pretrain_public(model, tokenizer, steps=self.steps, lr=self.lr, batch=self.batch,
                                  seed=self.seed + seed, max_prompt_len=max_prompt_len, L_max=L_max,
                                  examples=self.examples(digits))
        return {**summary, "binary_fraction": self.binary_fraction, "prompt": f"{digits} random digits + "
                f"{PROMPT_SUFFIX!r}", "labels": f"public, uniform on {list(OPTIONS)} from random.Random(seed), "
                "independent of the secret canary labels"}


def build_base_policy(spec, pretraining: BinaryPretraining | None, digits: int, seed: int | None):
    """The public base policy of an `AuditPreset`: its SFT, then the binary-choice phase (None skips it); returns
    (model, tokenizer, summary). Public data only: it runs before any record is read."""
    model, tokenizer = spec.build_policy(0 if seed is None else seed)
    tokenizer.encode(binary_choice_prompt(random.Random(0), digits))     # the prompt alphabet must be encodable
    if any(len(tokenizer.encode(o)) != 1 for o in OPTIONS):             # PolicyView scores one token + EOS
        raise InvalidParameter("preset", spec.name, f"a tokenizer with one token for each option {OPTIONS}")
    summary = {"base": f"the {spec.name} preset's public SFT pretraining", "binary_choice": None}
    if pretraining is not None:
        kw = spec.config_kwargs
        summary["binary_choice"] = pretraining.apply(model, tokenizer, digits=digits,
                                                     seed=0 if seed is None else seed,
                                                     max_prompt_len=kw["max_prompt_len"], L_max=kw["L_max"])
    return model, tokenizer, summary
