"""The numpy randomness backend of the selection mechanisms, on top of `privcheck.randomness.RandomnessPolicy`.

Guarantee: none by itself. A mechanism's privacy guarantee is stated for noise that the adversary cannot
predict. The policy says where the noise comes from and whether the outputs may be released; this module
pairs it with the `numpy.random.Generator` the mechanisms draw from. `make_rng()` with no seed draws its
state from OS entropy (`np.random.default_rng()` with no seed), and only results produced that way carry
`privacy_release = True`. A seeded generator makes runs reproducible (tests, replication) and every result
produced with it reports `privacy_release = False`: whoever knows the seed can recompute the noise, so such
an output must not be released as private.

Assumptions: numpy's PCG64 bit generator and its samplers (Gumbel, Gaussian, uniform) are treated as ideal
real-valued samplers; the floating-point gap (Mironov 2012) is discussed in docs/selection.md ("Gaps"), and
the certified ε values refer to the idealised mechanism.

    make_rng()        -> NumpyRandomness(default_rng(),  RandomnessPolicy.os_entropy())   # release allowed
    make_rng(seed=7)  -> NumpyRandomness(default_rng(7), RandomnessPolicy.seeded(7))      # reproducible only

A seeded generator is `default_rng(seed)` itself (not a derived stream), so seeded results are the same
numbers as a plain seeded numpy generator gives.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from privcheck.errors import InvalidParameter
from privcheck.randomness import CALLER_GENERATOR, MODES, OS_ENTROPY, SEEDED, RandomnessPolicy
from privcheck.validation import SEED_MAX

__all__ = ["CALLER_GENERATOR", "MODES", "OS_ENTROPY", "SEEDED", "NumpyRandomness", "as_randomness", "make_rng"]


@dataclass(frozen=True)
class NumpyRandomness:
    """A `numpy.random.Generator` together with the `RandomnessPolicy` it was built under.

    `mode` is the policy's: "os_entropy" (fresh OS entropy: the only mode whose outputs may be released as
    private), "seeded" (an explicit seed: reproducible, never a private release) or "caller_generator" (a
    Generator built by the caller, whose seeding the library cannot see: treated like "seeded").
    """

    generator: np.random.Generator
    policy: RandomnessPolicy

    def __post_init__(self):
        if not isinstance(self.generator, np.random.Generator):
            raise InvalidParameter("generator", type(self.generator).__name__, "a numpy.random.Generator")
        if not isinstance(self.policy, RandomnessPolicy):
            raise InvalidParameter("policy", type(self.policy).__name__, "a privcheck.randomness.RandomnessPolicy")

    @classmethod
    def from_policy(cls, policy: RandomnessPolicy, label: str | None = None) -> "NumpyRandomness":
        """The generator `policy.numpy_generator(label)` (label None: `default_rng(seed)` itself)."""
        if not isinstance(policy, RandomnessPolicy):
            raise InvalidParameter("policy", type(policy).__name__, "a privcheck.randomness.RandomnessPolicy")
        return cls(policy.numpy_generator(label), policy)

    @property
    def mode(self) -> str:
        return self.policy.mode

    @property
    def seed(self) -> int | None:
        return self.policy.seed

    @property
    def privacy_release(self) -> bool:
        """True only for OS-entropy randomness (seeded runs are for tests and replication)."""
        return self.policy.privacy_release

    @property
    def reason(self) -> str | None:
        """Why outputs drawn from this source are not a privacy release (None when they are)."""
        return self.policy.reason


def make_rng(seed: int | None = None) -> NumpyRandomness:
    """OS-entropy randomness by default; `seed` (an integer in [0, 2^63 − 1], the command line's seed range) gives a
    reproducible, non-release source."""
    if seed is None:
        return NumpyRandomness.from_policy(RandomnessPolicy.os_entropy())
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) <= SEED_MAX:
        raise InvalidParameter("seed", seed, f"None (OS entropy) or an integer in [0, {SEED_MAX}]")
    return NumpyRandomness.from_policy(RandomnessPolicy.seeded(int(seed)))


def as_randomness(rng) -> NumpyRandomness:
    """Normalise the `rng` argument of the mechanisms.

    None → fresh OS entropy; a `NumpyRandomness` → itself; a `RandomnessPolicy` → its generator; an integer →
    `make_rng(seed)`; a bare `numpy.random.Generator` → mode "caller_generator" (not a private release: its
    seeding is unknown).
    """
    if rng is None:
        return make_rng()
    if isinstance(rng, NumpyRandomness):
        return rng
    if isinstance(rng, RandomnessPolicy):
        return NumpyRandomness.from_policy(rng)
    if isinstance(rng, np.random.Generator):
        return NumpyRandomness(rng, RandomnessPolicy.caller_generator())
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        return make_rng(int(rng))
    raise InvalidParameter("rng", type(rng).__name__, "None, a NumpyRandomness from make_rng(), a RandomnessPolicy, "
                           "a seed (int in [0, 2^63 - 1]) or a numpy.random.Generator")
