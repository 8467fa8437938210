"""The torch backend of `privcheck.randomness.RandomnessPolicy` for DP-GRPO: the three randomness sources of
Algorithm 1 (assumption (A3), fresh hidden randomness; docs/dpgrpo.md).

* coins   — a CPU `torch.Generator` (line 2, `core.poisson_coins`);
* noise   — a `torch.Generator` on the update's device (line 8, `core.privatize`);
* rollouts — the framework RNG used by `generate` (line 4). `rollout_scope()` forks the framework RNG and seeds
  it from a dedicated CPU generator for each call, so rollout draws are fresh every call, independent of
  coins and noise, and never disturb (or depend on) the caller's global RNG state.

The policy decides where the seeds come from. OS entropy (the default, release mode): each source is seeded
from `os.urandom`, and the seeds are neither stored nor logged. Seeded: the three seeds are
`privcheck.randomness.derive_seed(seed, label, namespace="privcheck.dpgrpo")` for the labels "coins", "noise"
and "rollouts", and `privacy_release` is False with reason "seeded randomness". `TorchRandomness.release(seed=...)`
refuses a seed.
"""

from __future__ import annotations

import contextlib

import torch

from privcheck.errors import InvalidParameter
from privcheck.randomness import OS_ENTROPY, SEEDED, RandomnessPolicy

__all__ = ["NAMESPACE", "TorchRandomness", "make_randomness"]

NAMESPACE = "privcheck.dpgrpo"     # keeps DP-GRPO's seeded streams apart from other components'
_MASK63 = (1 << 63) - 1


def _device(device) -> torch.device:
    try:
        return torch.device(device if device is not None else "cpu")
    except (RuntimeError, TypeError) as err:
        raise InvalidParameter("device", device, "a torch device") from err


class TorchRandomness:
    """The coins, noise and rollout generators of one trainer, seeded as its `RandomnessPolicy` says.

    Build with `os_entropy()`, `seeded(seed)`, `release()`, `from_mode(mode)` or `TorchRandomness(policy)`."""

    def __init__(self, policy: RandomnessPolicy, device=None):
        if not isinstance(policy, RandomnessPolicy) or policy.mode not in (OS_ENTROPY, SEEDED):
            raise InvalidParameter("policy", policy, "a RandomnessPolicy in 'os_entropy' or 'seeded' mode "
                                   "(the trainer derives its own generators)")
        dev = _device(device)
        self.policy = policy
        self.device = dev
        self.coins = policy.torch_generator("coins", "cpu")
        self.noise = policy.torch_generator("noise", dev)
        self._rollout = policy.torch_generator("rollouts", "cpu")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def os_entropy(cls, device=None) -> "TorchRandomness":
        """Release mode: every source seeded from OS entropy; seeds are not kept."""
        return cls(RandomnessPolicy.os_entropy(namespace=NAMESPACE), device)

    @classmethod
    def release(cls, device=None, *, seed=None) -> "TorchRandomness":
        """Release-mode constructor; giving it a seed is an error (A3)."""
        if seed is not None:
            raise InvalidParameter("seed", seed, "None: a release-mode trainer refuses a seed "
                                   "(use TorchRandomness.seeded for a non-release, reproducible run)")
        return cls.os_entropy(device)

    @classmethod
    def seeded(cls, seed, device=None) -> "TorchRandomness":
        """Reproducible mode: seeds derived from `seed`; the run is not a privacy release."""
        return cls(RandomnessPolicy.seeded(seed, namespace=NAMESPACE), device)

    @classmethod
    def from_mode(cls, mode, device=None) -> "TorchRandomness":
        """`"os_entropy"` → `os_entropy()`; an int → `seeded(int)` (the config's `randomness` field)."""
        if mode == OS_ENTROPY:
            return cls.os_entropy(device)
        if isinstance(mode, int) and not isinstance(mode, bool):
            return cls.seeded(mode, device)
        raise InvalidParameter("randomness", mode, "'os_entropy' or a non-negative int seed")

    # ------------------------------------------------------------------ public flags

    @property
    def mode(self) -> str:
        return self.policy.mode

    @property
    def privacy_release(self) -> bool:
        return self.policy.privacy_release

    @property
    def reason(self) -> str | None:
        return self.policy.reason

    def to_json(self) -> dict:
        """The artifact's `randomness` entry: the mode, and the seed and reason only in seeded mode."""
        return self.policy.to_json()

    # ------------------------------------------------------------------ rollout randomness

    def rollout_state(self) -> torch.Tensor:
        """The rollout generator's state (a distributed trainer broadcasts rank 0's so all ranks share one
        rollout stream); the coins and noise generators have no such accessor."""
        return self._rollout.get_state()

    def set_rollout_state(self, state: torch.Tensor) -> None:
        self._rollout.set_state(state)

    def rollout_draw(self) -> int:
        """One draw of the dedicated rollout generator (the seed a `rollout_scope` gives the framework RNG)."""
        return int(torch.randint(0, _MASK63, (1,), generator=self._rollout, dtype=torch.int64).item())

    @contextlib.contextmanager
    def rollout_scope(self):
        """Fork the framework RNG (CPU and the active CUDA device) and seed it with a fresh draw of the
        dedicated rollout generator; the caller's global RNG state is restored on exit."""
        draw = self.rollout_draw()
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(draw)
            yield


def make_randomness(mode=OS_ENTROPY, device=None, *, seed=None) -> TorchRandomness:
    """Factory for the checks (V11): `make_randomness()` → release mode; `make_randomness("seeded", seed=s)` or
    `make_randomness(s)` → seeded; `make_randomness(seed=s)` (release mode given a seed) raises."""
    if mode == OS_ENTROPY:
        return TorchRandomness.release(device, seed=seed)
    if mode == SEEDED:
        return TorchRandomness.seeded(seed, device)
    if seed is not None:
        raise InvalidParameter("seed", seed, "None when mode is an int seed")
    return TorchRandomness.from_mode(mode, device)
