"""Records of Algorithm 1 (docs/dpgrpo.md, "Threat model and what is released").

`Record` is the privacy unit (a prompt with its reference answer, and for gold DP-SFT its solution);
`SlotUniverse` holds the public slot count n, the private presence bits and the records; `RolloutGroup` holds
one prompt's G completions; `GradientRecord` is a record whose gradient is a fixed vector (checks, canaries), and
`DiracCanary` (from `dirac_canary`) one whose vector C·e_j is built on each read rather than stored.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["DiracCanary", "GradientRecord", "Record", "RolloutGroup", "SlotUniverse", "dirac_canary",
           "random_direction_canary"]


@dataclass(frozen=True, eq=True)
class Record:
    """One private record x_i: `prompt`, reference `answer`, optional `solution`, read-only `meta`."""

    prompt: str
    answer: str
    solution: str | None = None
    meta: Mapping = field(default_factory=dict)

    def __post_init__(self):
        for name in ("prompt", "answer"):
            if not isinstance(getattr(self, name), str):
                raise InvalidParameter(name, getattr(self, name), "a str")
        if self.solution is not None and not isinstance(self.solution, str):
            raise InvalidParameter("solution", self.solution, "None or a str")
        if not isinstance(self.meta, Mapping):
            raise InvalidParameter("meta", self.meta, "a mapping")
        object.__setattr__(self, "meta", types.MappingProxyType(dict(self.meta)))

    __hash__ = None  # meta is a mapping; records are compared, never hashed


@dataclass(frozen=True)
class GradientRecord:
    """A record whose (unclipped) gradient is the fixed 1-D vector `v`; it passes the same clip/sum/noise path."""

    v: torch.Tensor

    def __post_init__(self):
        if not isinstance(self.v, torch.Tensor) or self.v.dim() != 1 or not self.v.is_floating_point():
            raise InvalidParameter("v", getattr(self.v, "shape", self.v), "a 1-D floating-point tensor")
        object.__setattr__(self, "v", self.v.detach().clone())

    @property
    def dim(self) -> int:
        """The length of v."""
        return self.v.numel()

    def gradient(self, device, dtype) -> torch.Tensor:
        """A fresh copy of v on `device` in `dtype`: the record's gradient as the arms return it."""
        return self.v.to(device=device, dtype=dtype, copy=True)


class DiracCanary(GradientRecord):
    """The gradient record C·e_j of R^dim without a stored dense vector: `v` and `gradient` build it on each read
    (a fresh tensor with the same bits as a stored one), so m canaries take O(m) memory, not O(m·dim), and a
    round reads no cold canary vectors. Built by `dirac_canary`, which checks the arguments."""

    def __init__(self, j: int, C: float, dim: int, dtype: torch.dtype):
        object.__setattr__(self, "j", j)
        object.__setattr__(self, "C", C)
        object.__setattr__(self, "_dim", dim)
        object.__setattr__(self, "dtype", dtype)
        # C as the stored vector of `dtype` would hold it (rounded once), exact as a Python float
        object.__setattr__(self, "_value", float(torch.tensor(C, dtype=dtype)))

    @property
    def v(self) -> torch.Tensor:
        return self.gradient("cpu", self.dtype)

    @property
    def dim(self) -> int:
        return self._dim

    def gradient(self, device, dtype) -> torch.Tensor:
        out = torch.zeros(self._dim, dtype=dtype, device=device)
        out[self.j] = self._value   # = v.to(dtype)[j]: the value of `self.dtype`, then cast to `dtype`
        return out

    def _key(self):
        return self.j, self.C, self._dim, self.dtype

    def __eq__(self, other):
        return isinstance(other, DiracCanary) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __reduce__(self):
        return DiracCanary, self._key()

    def __repr__(self):
        return f"DiracCanary(j={self.j}, C={self.C!r}, dim={self._dim}, dtype={self.dtype})"


class SlotUniverse:
    """Public slot count `n`, private presence bits `present` (BoolTensor[n]) and `records` (length n).

    An absent slot's entry is never read and may be anything (None, a Record, a GradientRecord). A present
    slot must hold a Record or GradientRecord. Only `batch` (Algorithm 1, line 3) reads `present`.
    `append_canaries` returns a new universe with m_c canary slots after the real ones; then
    `n` = n_real + n_canary is the slot count of line 2, and `n_real` is the config's public n.
    """

    def __init__(self, n, present, records: Sequence):
        self._n = val.count("n", n)
        if not isinstance(present, torch.Tensor) or present.dtype != torch.bool or tuple(present.shape) != (self._n,):
            raise InvalidParameter("present", getattr(present, "shape", present), f"a BoolTensor of shape ({self._n},)")
        if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or len(records) != self._n:
            raise InvalidParameter("records", type(records).__name__, f"a sequence of length n = {self._n}")
        present = present.detach().cpu().clone()
        for i, (b, rec) in enumerate(zip(present.tolist(), records)):
            if b and not isinstance(rec, (Record, GradientRecord)):
                raise InvalidParameter(f"records[{i}]", type(rec).__name__, "a Record or GradientRecord (slot present)")
        self._present = present
        self._records = tuple(records)
        self._n_real = self._n
        self._n_canary = 0
        self._commitment: str | None = None

    @property
    def n(self) -> int:
        """Total slot count (n_real + n_canary): the length of `present`, and of the coins of line 2."""
        return self._n

    @property
    def n_real(self) -> int:
        """The public count of real slots (the config's n); real slots are 0..n_real−1."""
        return self._n_real

    @property
    def n_canary(self) -> int:
        """The public count m_c of canary slots, appended after the real ones (n_real..n−1); 0 without canaries."""
        return self._n_canary

    @property
    def canary_commitment(self) -> str | None:
        """The auditor's `sha256:<hex>` commitment to the canary presence bits, verbatim (None without canaries)."""
        return self._commitment

    def is_canary(self, i: int) -> bool:
        """Whether slot i (0-based) is a canary slot (a public fact: slot index >= n_real)."""
        return i >= self._n_real

    def append_canaries(self, canaries: Sequence, presence, commitment: str) -> "SlotUniverse":
        """A NEW universe with m_c = len(canaries) canary slots appended after the n real ones.

        `canaries`: Records (input-space canaries) or GradientRecords (gradient canaries). `presence`: the
        auditor's BoolTensor[m_c] (drawn by the auditor, never by the trainer), read like any presence bit.
        `commitment`: the auditor's `"sha256:<64 hex>"` string, stored verbatim. Real slots, their records
        and their order are unchanged; this universe is not modified. A universe gets canaries once.
        """
        if self._n_canary:
            raise InvalidParameter("canaries", self._n_canary, "a universe without canaries (append once)")
        if isinstance(canaries, (str, bytes)) or not isinstance(canaries, Sequence) or len(canaries) < 1:
            raise InvalidParameter("canaries", type(canaries).__name__, "a non-empty sequence of canary records")
        m_c = len(canaries)
        for k, rec in enumerate(canaries):
            if not isinstance(rec, (Record, GradientRecord)):
                raise InvalidParameter(f"canaries[{k}]", type(rec).__name__, "a Record or GradientRecord")
        if not isinstance(presence, torch.Tensor) or presence.dtype != torch.bool or tuple(presence.shape) != (m_c,):
            raise InvalidParameter("presence", getattr(presence, "shape", presence),
                                   f"a BoolTensor of shape ({m_c},) (one bit per canary)")
        if not isinstance(commitment, str) or _COMMITMENT.fullmatch(commitment) is None:
            raise InvalidParameter("commitment", commitment, "a string 'sha256:<64 lowercase hex digits>'")
        out = SlotUniverse(self._n + m_c, torch.cat([self._present, presence.detach().cpu()]),
                           list(self._records) + list(canaries))
        out._n_real = self._n
        out._n_canary = m_c
        out._commitment = commitment
        return out

    def batch(self, coins) -> list[int]:
        """Algorithm 1, line 3: B_t = {i : c_{t,i} = 1 and b_i = 1}, as sorted 0-based slot indices."""
        if not isinstance(coins, torch.Tensor) or coins.dtype != torch.bool or tuple(coins.shape) != (self._n,):
            raise InvalidParameter("coins", getattr(coins, "shape", coins), f"a BoolTensor of shape ({self._n},)")
        return torch.nonzero(coins.cpu() & self._present).flatten().tolist()

    def record(self, i: int):
        """The record in slot i (0-based); call only for i in a batch."""
        return self._records[i]


_COMMITMENT = re.compile(r"sha256:[0-9a-f]{64}")


def dirac_canary(j, C, dim, dtype=torch.float64) -> GradientRecord:
    """The Dirac gradient canary C·e_j: C on reserved coordinate j of a `dim`-vector of `dtype`, 0 elsewhere (a
    `DiracCanary`, built on each read)."""
    dim = val.count("dim", dim)
    j = val.count("j", j, minimum=0)
    if j >= dim:
        raise InvalidParameter("j", j, f"a coordinate in [0, {dim})")
    C = val.positive("C", C)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidParameter("dtype", dtype, "a floating-point torch.dtype")
    return DiracCanary(j, C, dim, dtype)


def random_direction_canary(C, dim, generator: torch.Generator, dtype=torch.float64) -> GradientRecord:
    """The gradient canary C·u for u uniform on the unit sphere of R^dim (normalised Gaussian drawn with the
    auditor's `generator`, never a trainer generator)."""
    dim = val.count("dim", dim)
    C = val.positive("C", C)
    if not isinstance(generator, torch.Generator):
        raise InvalidParameter("generator", generator, "a torch.Generator (the auditor's)")
    g = torch.randn(dim, dtype=torch.float64, generator=generator)
    norm = float(torch.linalg.vector_norm(g))
    if not math.isfinite(norm) or norm == 0:  # probability zero; fixed fallback keeps the map total
        g = torch.zeros(dim, dtype=torch.float64)
        g[0] = 1.0
        norm = 1.0
    return GradientRecord((g / norm * C).to(dtype))


@dataclass(frozen=True)
class RolloutGroup:
    """One prompt's G completions: `token_ids` LongTensor[G, L_max], `mask` [G, L_max] (see
    `core.completion_mask`), `rewards` Tensor[G] of 0/1 once scored (None before line 5), optional `texts`."""

    token_ids: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor | None = None
    texts: tuple[str, ...] | None = None

    def __post_init__(self):
        ids = self.token_ids
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.shape[0] < 2:
            raise InvalidParameter("token_ids", getattr(ids, "shape", ids), "an integer tensor [G, L_max], G >= 2")
        if not isinstance(self.mask, torch.Tensor) or self.mask.shape != ids.shape:
            raise InvalidParameter("mask", getattr(self.mask, "shape", self.mask),
                                   f"a tensor of shape {tuple(ids.shape)}")
        if self.rewards is not None and (not isinstance(self.rewards, torch.Tensor)
                                         or tuple(self.rewards.shape) != (ids.shape[0],)):
            raise InvalidParameter("rewards", getattr(self.rewards, "shape", self.rewards),
                                   f"None or Tensor[{ids.shape[0]}]")
        if self.texts is not None:
            object.__setattr__(self, "texts", tuple(self.texts))
            if len(self.texts) != ids.shape[0]:
                raise InvalidParameter("texts", len(self.texts), f"None or {ids.shape[0]} strings")

    @property
    def G(self) -> int:
        return int(self.token_ids.shape[0])

    def with_rewards(self, rewards) -> "RolloutGroup":
        """A copy with `rewards` filled (Algorithm 1, line 5)."""
        return RolloutGroup(self.token_ids, self.mask, torch.as_tensor(rewards), self.texts)
