"""Synthetic verifiable task: small-number addition (the tiny-cpu preset of docs/dpgrpo.md).

Prompts are "a+b=" with 0 ≤ a, b ≤ max_operand, the reference answer is str(a + b). The verifier
`reward(record, completion)` is public, deterministic and depends only on its two arguments. The
`CharTokenizer` needs no files: PAD, EOS, the digits, '+' and '='.
"""

from __future__ import annotations

import random
import re

from mechanisms.dpgrpo.records import Record
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["CharTokenizer", "addition_record", "addition_records", "reward"]

_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")


def addition_record(a, b) -> Record:
    """The record for "a+b=" with answer str(a+b)."""
    a = val.count("a", a, minimum=0)
    b = val.count("b", b, minimum=0)
    return Record(prompt=f"{a}+{b}=", answer=str(a + b), meta={"a": a, "b": b})


def addition_records(count, seed, max_operand=9) -> list[Record]:
    """`count` records with operands uniform on {0..max_operand}, from `random.Random(seed)` (public data)."""
    count = val.count("count", count, minimum=0)
    max_operand = val.count("max_operand", max_operand, minimum=0)
    rng = random.Random(val.count("seed", seed, minimum=0))
    return [addition_record(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(count)]


def reward(record: Record, completion: str) -> int:
    """Verifier r(x, y) ∈ {0, 1}: 1 iff the completion (text before EOS), stripped of surrounding
    whitespace, is a canonical non-negative integer (no sign, no leading zeros) equal to `record.answer`.
    Anything else (other text, non-str input) gives 0; it never raises on a completion."""
    if not isinstance(completion, str):
        return 0
    s = completion.strip()
    return int(_CANONICAL_INT.fullmatch(s) is not None and s == record.answer)


class CharTokenizer:
    """Character-level tokenizer: id 0 = PAD, 1 = EOS, then one id per character of `chars`."""

    PAD = "<pad>"
    EOS = "<eos>"

    def __init__(self, chars: str = "0123456789+="):
        if not isinstance(chars, str) or not chars or len(set(chars)) != len(chars):
            raise InvalidParameter("chars", chars, "a non-empty string of distinct characters")
        self.vocab: tuple[str, ...] = (self.PAD, self.EOS, *chars)
        self._index = {ch: i + 2 for i, ch in enumerate(chars)}
        self.pad_id = 0
        self.eos_id = 1

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, add_eos: bool = False) -> list[int]:
        """Token ids of `text` (one per character), optionally followed by EOS; unknown characters raise."""
        if not isinstance(text, str):
            raise InvalidParameter("text", text, "a str")
        try:
            ids = [self._index[ch] for ch in text]
        except KeyError as err:
            raise InvalidParameter("text", text, f"characters from {''.join(self._index)!r}") from err
        return ids + [self.eos_id] if add_eos else ids

    def decode(self, ids) -> str:
        """Text of `ids` up to (excluding) the first EOS; PAD ids are skipped."""
        out = []
        for t in (int(t) for t in ids):
            if t == self.eos_id:
                break
            if t == self.pad_id:
                continue
            if not 2 <= t < self.vocab_size:
                raise InvalidParameter("ids", t, f"token ids in [0, {self.vocab_size})")
            out.append(self.vocab[t])
        return "".join(out)
