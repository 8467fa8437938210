"""Canary membership for one-run audits: secret coins, the hash commitment, pre-registration, sealed reveal.

Guarantees (protocol and assumptions: docs/audits.md, "Pre-registration and the sealed membership"):
* `draw_membership(m)` draws S_i ∈ {−1, +1} i.i.d. uniform from OS entropy (`secrets`); with a `seed` it
  uses numpy's generator instead and every report built from it says "seeded: not an audit release".
* `commit(S, canary_ids, salt)` is `"sha256:" + hex(SHA-256(salt ‖ ids ‖ bits))`: salt is 32 bytes, ids is
  the UTF-8 JSON array of the ids without spaces, bits one ASCII byte per canary (`1` present, `0`
  absent) in the order of ids. `verify` recomputes it in constant time.
* A `Membership` keeps S sealed: it cannot be iterated, indexed, converted to an array, copied or
  pickled. The trainer gets the presence bits through `presence_for_training()` (it must, to build
  D); the audit gets S only through `reveal(frozen_scores)`, which needs scores that were frozen
  (`freeze_scores` / `score_canaries`) *before* the reveal. An audit given scores frozen after S was
  revealed refuses to run: S may have reached the scoring function.
* `Preregistration` records the guess rule, δ, p, canary count and the commitment before training; its
  digest goes into the report, and an audit refuses a pre-registration made after S was revealed or one
  that disagrees with the audit's parameters.

Ordering uses a process-wide logical clock (a counter); this guards against mistakes in one audit
process, not against a scorer that deliberately reads private attributes.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import numbers
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.randomness import RandomnessPolicy

__all__ = ["FrozenScores", "Membership", "Preregistration", "SALT_BYTES", "TIE_BREAK_SEED", "as_signs",
           "check_scores", "commit", "draw_membership", "freeze_scores", "new_salt", "score_canaries", "tick",
           "verify"]

SALT_BYTES = 32
TIE_BREAK_SEED = 0x5EED_7135   # public default: the tie-break key only has to be independent of S
_CLOCK = itertools.count(1)


def tick() -> int:
    """The next value of the process-wide logical clock that orders draws, freezes, declarations and reveals."""
    return next(_CLOCK)


def new_salt() -> bytes:
    """32 bytes from OS entropy, for `commit`."""
    return secrets.token_bytes(SALT_BYTES)


# ---------------------------------------------------------------------------------------------------------------------
# Membership bits.


def as_signs(S, name: str = "membership") -> np.ndarray:
    """A 1-D int8 array of ±1 from ±1, {0, 1} or boolean input (1/True = present)."""
    if isinstance(S, Membership):
        raise InvalidParameter(name, repr(S), "revealed bits (call Membership.reveal with frozen scores)")
    arr = np.asarray(S)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameter(name, f"shape {arr.shape}", "a non-empty 1-D vector of ±1, 0/1 or booleans")
    if arr.dtype == bool:
        return np.where(arr, 1, -1).astype(np.int8)
    if not np.issubdtype(arr.dtype, np.number):
        raise InvalidParameter(name, f"dtype {arr.dtype}", "±1, 0/1 or booleans")
    values = set(np.unique(arr).tolist())
    if values <= {-1, 1}:
        return arr.astype(np.int8)
    if values <= {0, 1}:
        return np.where(arr == 1, 1, -1).astype(np.int8)
    raise InvalidParameter(name, sorted(values)[:4], "±1 (present/absent), 0/1 or booleans, one encoding")


class Membership:
    """Sealed inclusion coins S ∈ {−1, +1}^m (see the module docstring for what is and is not readable)."""

    __slots__ = ("_bits", "_source", "_drawn_at", "_revealed_at")

    def __init__(self, bits, source: str):
        if source not in ("os_entropy", "seeded"):
            raise InvalidParameter("source", source, "'os_entropy' or 'seeded'")
        bits = as_signs(bits).copy()
        bits.setflags(write=False)
        self._bits = bits
        self._source = source
        self._drawn_at = tick()
        self._revealed_at: int | None = None

    @property
    def m(self) -> int:
        return int(self._bits.size)

    def __len__(self) -> int:
        return self.m

    @property
    def source(self) -> str:
        return self._source

    @property
    def audit_release(self) -> bool:
        """True only for OS-entropy coins (a seeded draw is a test)."""
        return self._source == "os_entropy"

    @property
    def revealed_at(self) -> int | None:
        return self._revealed_at

    def commit(self, canary_ids: Sequence, salt: bytes) -> str:
        """The commitment to these coins (the bits themselves stay sealed)."""
        return commit(self._bits, canary_ids, salt)

    def presence_for_training(self) -> np.ndarray:
        """Boolean presence vector for the trainer that builds D (never pass it to a scoring function)."""
        return self._bits == 1

    def reveal(self, scores: "FrozenScores") -> np.ndarray:
        """S as a read-only ±1 array, given scores frozen before this (or any earlier) reveal."""
        if not isinstance(scores, FrozenScores):
            raise InvalidParameter("scores", type(scores).__name__, "FrozenScores (freeze_scores / score_canaries)")
        if scores.m != self.m:
            raise InvalidParameter("scores", f"{scores.m} scores", f"one score per canary (m={self.m})")
        if self._revealed_at is not None and scores.frozen_at > self._revealed_at:
            raise InvalidParameter("scores", f"frozen at t={scores.frozen_at}",
                                   f"scores frozen before the membership was revealed (t={self._revealed_at}); "
                                   "S may have reached the scoring function")
        if self._revealed_at is None:
            self._revealed_at = tick()
        return self._bits

    def __repr__(self) -> str:
        state = "sealed" if self._revealed_at is None else f"revealed at t={self._revealed_at}"
        return f"Membership(m={self.m}, source={self._source!r}, {state})"

    def _sealed(self, *args, **kwargs):
        raise TypeError("membership bits are sealed: the audit reads them with reveal(frozen_scores)")

    __iter__ = __getitem__ = __array__ = __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _sealed
    __getstate__ = _sealed


def draw_membership(m: int, seed: int | None = None) -> Membership:
    """m i.i.d. fair coins: OS entropy (an audit release) or, with `seed`, the seeded numpy generator of
    `privcheck.randomness.RandomnessPolicy` (tests only; never an audit release)."""
    m = val.count("m", m, 1)
    if seed is not None:
        seed = val.seed("seed", seed)
    policy = RandomnessPolicy.from_setting(seed)
    if policy.privacy_release:
        raw = np.frombuffer(secrets.token_bytes(math.ceil(m / 8)), dtype=np.uint8)
        present = np.unpackbits(raw)[:m].astype(bool)
    else:
        present = policy.numpy_generator().integers(0, 2, size=m).astype(bool)
    return Membership(present, policy.mode)


# ---------------------------------------------------------------------------------------------------------------------
# Commitment.


def _ids_bytes(canary_ids: Sequence) -> bytes:
    if isinstance(canary_ids, (str, bytes)) or not isinstance(canary_ids, Sequence) or len(canary_ids) == 0:
        raise InvalidParameter("canary_ids", canary_ids, "a non-empty sequence of str or int ids")
    ids = []
    for cid in canary_ids:
        if isinstance(cid, bool) or not isinstance(cid, (str, numbers.Integral)):
            raise InvalidParameter("canary_ids", cid, "str or int ids")
        ids.append(cid if isinstance(cid, str) else int(cid))
    if len(set(ids)) != len(ids):
        raise InvalidParameter("canary_ids", "duplicates", "distinct ids")
    return json.dumps(ids, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _digest(S, canary_ids: Sequence, salt: bytes) -> str:
    if not isinstance(salt, (bytes, bytearray)) or len(salt) != SALT_BYTES:
        raise InvalidParameter("salt", type(salt).__name__ if not isinstance(salt, (bytes, bytearray)) else
                               f"{len(salt)} bytes", f"{SALT_BYTES} bytes (new_salt())")
    ids = _ids_bytes(canary_ids)
    bits = as_signs(S, "S")
    if bits.size != len(canary_ids):
        raise InvalidParameter("S", f"{bits.size} bits", f"one bit per canary id ({len(canary_ids)})")
    payload = bytes(salt) + ids + np.where(bits == 1, ord("1"), ord("0")).astype(np.uint8).tobytes()
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def commit(S, canary_ids: Sequence, salt: bytes) -> str:
    """`"sha256:" + hex(SHA-256(salt ‖ ids ‖ bits))` (the commitment format of the module docstring)."""
    if isinstance(S, Membership):
        return S.commit(canary_ids, salt)
    return _digest(S, canary_ids, salt)


def verify(commitment: str, S, canary_ids: Sequence, salt: bytes) -> bool:
    """True iff `commitment` is the commitment of (S, canary_ids, salt); constant-time comparison."""
    if not isinstance(commitment, str):
        raise InvalidParameter("commitment", commitment, "a string 'sha256:<hex>'")
    return hmac.compare_digest(commitment.encode(), commit(S, canary_ids, salt).encode())


# ---------------------------------------------------------------------------------------------------------------------
# Frozen scores.


@dataclass(frozen=True, eq=False)
class FrozenScores:
    """Canary scores fixed at logical time `frozen_at` (a read-only float64 copy)."""

    values: np.ndarray
    frozen_at: int = field(default_factory=tick)

    @property
    def m(self) -> int:
        return int(self.values.size)


def check_scores(scores, name: str = "scores") -> np.ndarray:
    """A non-empty 1-D array of finite floats (NaN and infinities rejected)."""
    if isinstance(scores, FrozenScores):
        return scores.values
    try:
        arr = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameter(name, type(scores).__name__, "a non-empty 1-D array of finite numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameter(name, f"shape {arr.shape}", "a non-empty 1-D array of finite numbers")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InvalidParameter(name, f"{arr[bad]!r} at index {bad}", "finite numbers (no NaN or infinity)")
    return arr


def freeze_scores(scores) -> FrozenScores:
    """Copy and timestamp the scores; from now on the membership may be revealed."""
    if isinstance(scores, FrozenScores):
        return scores
    arr = check_scores(scores).copy()
    arr.setflags(write=False)
    return FrozenScores(arr)


def score_canaries(score_fn: Callable[[Any, Any], float], output, canaries: Sequence) -> FrozenScores:
    """Y_i = score_fn(output, c_i) for every canary, frozen. The scorer never receives the membership."""
    if not callable(score_fn):
        raise InvalidParameter("score_fn", type(score_fn).__name__, "a callable score_fn(output, canary)")
    if isinstance(output, Membership) or any(isinstance(c, Membership) for c in canaries):
        raise InvalidParameter("output", "a Membership", "the trained output and canaries only (S stays sealed)")
    return freeze_scores([float(score_fn(output, c)) for c in canaries])


# ---------------------------------------------------------------------------------------------------------------------
# Pre-registration.


@dataclass(frozen=True)
class Preregistration:
    """What must be fixed before training (guess rule, levels, canaries, commitment); `digest` identifies it in
    the report."""

    m: int
    delta: float
    confidence: float
    selection: str                       # "explicit" | "bonferroni" | "split"
    k_plus: int | None = None
    k_minus: int | None = None
    family: tuple = ()
    canary_type: str | None = None
    score: str | None = None
    tie_break_seed: int = TIE_BREAK_SEED
    commitment: str | None = None
    registered_at: int = field(default_factory=tick, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "m", val.count("m", self.m, 1))
        object.__setattr__(self, "delta", val.half_open_unit("delta", self.delta))
        object.__setattr__(self, "confidence", val.open_unit("confidence", self.confidence))
        object.__setattr__(self, "tie_break_seed", val.seed("tie_break_seed", self.tie_break_seed))
        if self.selection not in ("explicit", "bonferroni", "split"):
            raise InvalidParameter("selection", self.selection, "'explicit', 'bonferroni' or 'split'")
        object.__setattr__(self, "family", tuple(tuple(int(k) for k in pair) for pair in self.family))
        if self.commitment is not None and not (isinstance(self.commitment, str)
                                                and self.commitment.startswith("sha256:")):
            raise InvalidParameter("commitment", self.commitment, "'sha256:<hex>' or None")

    def to_json(self) -> dict:
        return {"m": self.m, "delta": self.delta, "confidence": self.confidence, "selection": self.selection,
                "k_plus": self.k_plus, "k_minus": self.k_minus, "family": [list(p) for p in self.family],
                "canary_type": self.canary_type, "score": self.score, "tie_break_seed": self.tie_break_seed,
                "commitment": self.commitment}

    @property
    def digest(self) -> str:
        body = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        return "sha256:" + hashlib.sha256(body).hexdigest()
