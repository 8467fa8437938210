"""The randomness policy: where a run's random draws come from, and whether its outputs may be released.

A mechanism's privacy guarantee holds for noise the adversary cannot predict. Hence the one rule every
mechanism, trainer and audit in this project follows:

* `RandomnessPolicy.os_entropy()` — every generator is seeded from fresh operating-system entropy
  (`os.urandom`); the seeds are neither kept nor logged. Only outputs produced this way are a privacy release
  (`privacy_release = True`).
* `RandomnessPolicy.seeded(seed)` — every generator is seeded from a seed derived from `seed`, so a run can be
  reproduced bit for bit (tests, replication). Whoever knows the seed can recompute the noise, so such outputs
  are never a privacy release (`privacy_release = False`, `reason = "seeded randomness"`; artifacts say
  "not a privacy release").
* `RandomnessPolicy.caller_generator()` — the caller supplied a generator whose seeding the library cannot
  see; treated like "seeded" (not a release) and no seed can be derived from it.

Seed derivation (`derive_seed`): the 63-bit integer formed by the first 8 bytes, little-endian, of
sha256(f"{namespace}/{label}/{seed}"), with the top bit cleared. Distinct labels give independent-looking
streams from one seed; distinct namespaces keep the streams of different components apart. The formula is
fixed: changing it would change every seeded result in the repository. See docs/artifacts.md.

Backends: `numpy_generator(label)` (numpy PCG64) and `torch_generator(label, device)` (torch imported only
when called). Mechanism packages build their own richer source objects on top of this policy.
"""

from __future__ import annotations

import hashlib
import numbers
import os
from dataclasses import dataclass

from privcheck import validation
from privcheck.errors import InvalidParameter

__all__ = ["CALLER_GENERATOR", "CALLER_GENERATOR_REASON", "DEFAULT_NAMESPACE", "MODES", "OS_ENTROPY", "SEEDED",
           "SEEDED_REASON", "RandomnessPolicy", "derive_seed", "entropy_seed"]

OS_ENTROPY = "os_entropy"
SEEDED = "seeded"
CALLER_GENERATOR = "caller_generator"
MODES = (OS_ENTROPY, SEEDED, CALLER_GENERATOR)
DEFAULT_NAMESPACE = "privcheck"
SEEDED_REASON = "seeded randomness"
CALLER_GENERATOR_REASON = "caller-supplied generator (its seeding is unknown)"
_MASK63 = (1 << 63) - 1


def _seed(name: str, value) -> int:
    """A seed: an integer in [0, SEED_MAX] (`privcheck.validation.seed`, the command line's seed range too)."""
    return validation.seed(name, value)


def _text(name: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidParameter(name, value, "a non-empty string")
    return value


def derive_seed(seed, label: str, namespace: str = DEFAULT_NAMESPACE) -> int:
    """The 63-bit seed of stream `label` under `seed`: sha256(f"{namespace}/{label}/{seed}"), first 8 bytes
    little-endian, top bit cleared. Deterministic across processes, platforms and Python versions."""
    seed = _seed("seed", seed)
    label = _text("label", label)
    namespace = _text("namespace", namespace)
    digest = hashlib.sha256(f"{namespace}/{label}/{seed}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & _MASK63


def entropy_seed() -> int:
    """A fresh 63-bit seed from OS entropy (8 bytes of `os.urandom`, top bit cleared)."""
    return int.from_bytes(os.urandom(8), "little") & _MASK63


@dataclass(frozen=True)
class RandomnessPolicy:
    """How a run draws its randomness. Build with `os_entropy()`, `seeded(seed)`, `caller_generator()` or
    `from_setting(setting)`; the fields are validated on construction.

    `seed` is set exactly in seeded mode; `namespace` prefixes every derived seed (see `derive_seed`).
    """

    mode: str = OS_ENTROPY
    seed: int | None = None
    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self):
        if self.mode not in MODES:
            raise InvalidParameter("mode", self.mode, " or ".join(repr(m) for m in MODES))
        if self.mode == SEEDED:
            object.__setattr__(self, "seed", _seed("seed", self.seed))
        elif self.seed is not None:
            raise InvalidParameter("seed", self.seed, f"None in {self.mode} mode (a seed makes the run seeded)")
        _text("namespace", self.namespace)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def os_entropy(cls, *, namespace: str = DEFAULT_NAMESPACE) -> "RandomnessPolicy":
        """Release mode: every generator seeded from fresh OS entropy; nothing is stored."""
        return cls(OS_ENTROPY, None, namespace)

    @classmethod
    def seeded(cls, seed, *, namespace: str = DEFAULT_NAMESPACE) -> "RandomnessPolicy":
        """Reproducible mode (an integer seed in [0, 2^63 − 1]); never a privacy release."""
        return cls(SEEDED, _seed("seed", seed), namespace)

    @classmethod
    def caller_generator(cls, *, namespace: str = DEFAULT_NAMESPACE) -> "RandomnessPolicy":
        """The caller supplied the generator; its seeding is unknown, so its outputs are not a release."""
        return cls(CALLER_GENERATOR, None, namespace)

    @classmethod
    def from_setting(cls, setting, *, namespace: str = DEFAULT_NAMESPACE) -> "RandomnessPolicy":
        """`"os_entropy"` or None → OS entropy; an integer in [0, 2^63 − 1] → seeded; a policy → itself."""
        if isinstance(setting, RandomnessPolicy):
            return setting
        if setting is None or (isinstance(setting, str) and setting == OS_ENTROPY):
            return cls.os_entropy(namespace=namespace)
        if isinstance(setting, numbers.Integral) and not isinstance(setting, bool):
            return cls.seeded(setting, namespace=namespace)
        raise InvalidParameter("randomness", setting, "'os_entropy', None or an integer seed in [0, 2^63 - 1]")

    # ------------------------------------------------------------------ flags

    @property
    def privacy_release(self) -> bool:
        """True only for OS-entropy randomness."""
        return self.mode == OS_ENTROPY

    @property
    def reason(self) -> str | None:
        """Why the outputs are not a privacy release (None when they are)."""
        if self.mode == SEEDED:
            return SEEDED_REASON
        return CALLER_GENERATOR_REASON if self.mode == CALLER_GENERATOR else None

    @property
    def note(self) -> str | None:
        """The artifact note: "not a privacy release: <reason>" (None for a release)."""
        return None if self.privacy_release else f"not a privacy release: {self.reason}"

    def to_json(self) -> dict:
        """An artifact's `randomness` entry: the mode, plus the seed and the reason when not a release
        (the seed of an OS-entropy run is never recorded)."""
        if self.mode == OS_ENTROPY:
            return {"mode": self.mode}
        out = {"mode": self.mode, "reason": self.reason}
        if self.mode == SEEDED:
            out["seed"] = self.seed
        return out

    # ------------------------------------------------------------------ seeds and generators

    def derive_seed(self, label: str) -> int:
        """The seed of stream `label`: `derive_seed(seed, label, namespace)` when seeded, a fresh
        `entropy_seed()` on every call under OS entropy."""
        label = _text("label", label)
        if self.mode == SEEDED:
            return derive_seed(self.seed, label, self.namespace)
        if self.mode == OS_ENTROPY:
            return entropy_seed()
        raise InvalidParameter("mode", self.mode, f"{OS_ENTROPY!r} or {SEEDED!r} to derive a seed "
                               "(a caller-supplied generator has no seed to derive from)")

    def numpy_generator(self, label: str | None = None):
        """A `numpy.random.Generator` (PCG64) for stream `label`.

        label=None: seeded mode uses the seed itself (`default_rng(seed)`, the stream a plain seeded numpy
        generator gives), OS-entropy mode lets numpy draw from OS entropy (`default_rng()`).
        """
        import numpy as np

        if label is None:
            if self.mode == CALLER_GENERATOR:
                self.derive_seed("numpy")           # raises: no seed to derive from
            return np.random.default_rng(self.seed)
        return np.random.default_rng(self.derive_seed(label))

    def torch_generator(self, label: str, device="cpu"):
        """A `torch.Generator` on `device` seeded with `derive_seed(label)` (torch is imported here only)."""
        import torch

        seed = self.derive_seed(label)
        try:
            generator = torch.Generator(device=device)
        except (RuntimeError, TypeError) as err:
            raise InvalidParameter("device", device, "a torch device") from err
        return generator.manual_seed(seed)
