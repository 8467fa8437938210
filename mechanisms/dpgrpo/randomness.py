"""The three randomness sources of Algorithm 1 (spec shared/spec/dpgrpo.md §3.4, assumption A3).

* coins   — a CPU `torch.Generator` (line 2, `core.poisson_coins`);
* noise   — a `torch.Generator` on the update's device (line 8, `core.privatize`);
* rollouts — the framework RNG used by `generate` (line 4). `rollout_scope()` forks the framework RNG and seeds
  it from a dedicated CPU generator for each call, so rollout draws are fresh every call, independent of
  coins and noise, and never disturb (or depend on) the caller's global RNG state.

`os_entropy` (default, release mode): each source is seeded from `os.urandom(8)`; the seeds are not stored
or logged by this module. `seeded(seed)`: the three seeds are derived from `seed` by SHA-256 with distinct
labels, and `privacy_release` is False with reason "seeded randomness". `Randomness.release(seed=...)` refuses
a seed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os

import torch

from privcheck import validation as val
from privcheck.errors import InvalidParameter

_MASK63 = (1 << 63) - 1
SEEDED_REASON = "seeded randomness"


def _entropy_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & _MASK63


def _derived_seed(seed: int, label: str) -> int:
    digest = hashlib.sha256(f"privcheck.dpgrpo/{label}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & _MASK63


def _device(device) -> torch.device:
    try:
        return torch.device(device if device is not None else "cpu")
    except (RuntimeError, TypeError) as err:
        raise InvalidParameter("device", device, "a torch device") from err


class Randomness:
    """Holds the coins, noise and rollout generators. Build with `os_entropy()`, `seeded(seed)`,
    `release()` or `from_mode(mode)`; the constructor itself is private."""

    def __init__(self, *, coins_seed: int, noise_seed: int, rollout_seed: int, device, mode: str,
                 seed: int | None, _token=None):
        if _token is not _PRIVATE:
            raise InvalidParameter("Randomness", "direct construction",
                                   "Randomness.os_entropy(), .seeded(seed), .release() or .from_mode(mode)")
        dev = _device(device)
        self.device = dev
        self.coins = torch.Generator(device="cpu").manual_seed(coins_seed)
        self.noise = torch.Generator(device=dev).manual_seed(noise_seed)
        self._rollout = torch.Generator(device="cpu").manual_seed(rollout_seed)
        self.mode = mode
        self._seed = seed  # None in os_entropy mode (never stored there)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def os_entropy(cls, device=None) -> "Randomness":
        """Release mode: every source seeded from `os.urandom(8)`; seeds are not kept."""
        return cls(coins_seed=_entropy_seed(), noise_seed=_entropy_seed(), rollout_seed=_entropy_seed(),
                   device=device, mode="os_entropy", seed=None, _token=_PRIVATE)

    @classmethod
    def release(cls, device=None, *, seed=None) -> "Randomness":
        """Release-mode constructor; giving it a seed is an error (A3)."""
        if seed is not None:
            raise InvalidParameter("seed", seed, "None: a release-mode trainer refuses a seed "
                                   "(use Randomness.seeded for a non-release, reproducible run)")
        return cls.os_entropy(device)

    @classmethod
    def seeded(cls, seed, device=None) -> "Randomness":
        """Reproducible mode: seeds derived from `seed`; the run is not a privacy release."""
        seed = val.count("seed", seed, minimum=0)
        return cls(coins_seed=_derived_seed(seed, "coins"), noise_seed=_derived_seed(seed, "noise"),
                   rollout_seed=_derived_seed(seed, "rollouts"), device=device, mode="seeded", seed=seed,
                   _token=_PRIVATE)

    @classmethod
    def from_mode(cls, mode, device=None) -> "Randomness":
        """`"os_entropy"` → `os_entropy()`; an int → `seeded(int)` (the config's `randomness` field)."""
        if mode == "os_entropy":
            return cls.os_entropy(device)
        if isinstance(mode, int) and not isinstance(mode, bool):
            return cls.seeded(mode, device)
        raise InvalidParameter("randomness", mode, "'os_entropy' or a non-negative int seed")

    # ------------------------------------------------------------------ public flags

    @property
    def privacy_release(self) -> bool:
        return self.mode == "os_entropy"

    @property
    def reason(self) -> str | None:
        return None if self.privacy_release else SEEDED_REASON

    def to_json(self) -> dict:
        """The artifact's `randomness` entry: the mode, and the seed only in seeded mode."""
        return {"mode": self.mode} if self.privacy_release else {"mode": self.mode, "seed": self._seed,
                                                                   "reason": SEEDED_REASON}

    # ------------------------------------------------------------------ rollout randomness

    @contextlib.contextmanager
    def rollout_scope(self):
        """Fork the framework RNG (CPU and the active CUDA device) and seed it with a fresh draw of the
        dedicated rollout generator; the caller's global RNG state is restored on exit."""
        draw = int(torch.randint(0, _MASK63, (1,), generator=self._rollout, dtype=torch.int64).item())
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(draw)
            yield


_PRIVATE = object()


def make_randomness(mode="os_entropy", device=None, *, seed=None) -> Randomness:
    """Factory for the checks (V11): `make_randomness()` → release mode; `make_randomness("seeded", seed=s)` or
    `make_randomness(s)` → seeded; `make_randomness(seed=s)` (release mode given a seed) raises."""
    if mode == "os_entropy":
        return Randomness.release(device, seed=seed)
    if mode == "seeded":
        return Randomness.seeded(seed, device)
    if seed is not None:
        raise InvalidParameter("seed", seed, "None when mode is an int seed")
    return Randomness.from_mode(mode, device)
