"""Randomness sources for the selection mechanisms, and the mode every result reports.

Guarantee: none by itself. A mechanism's privacy guarantee is stated for noise that the adversary cannot
predict. `make_rng()` with no seed draws its state from OS entropy (`np.random.default_rng()` with no
seed), and only results produced that way carry `privacy_release = True`. A seeded generator makes runs
reproducible (tests, replication) and every result produced with it reports `privacy_release = False`:
whoever knows the seed can recompute the noise, so such an output must not be released as private.

Assumptions: numpy's PCG64 bit generator and its samplers (Gumbel, Gaussian, uniform) are treated as
ideal real-valued samplers; the floating-point gap (Mironov 2012) is documented in
shared/spec/selection.md §13.6 and docs/selection.md, and the certified ε values refer to the idealised
mechanism.

    make_rng()        -> Randomness(generator=default_rng(),     mode="os_entropy")  # release allowed
    make_rng(seed=7)  -> Randomness(generator=default_rng(7),    mode="seeded")      # reproducible only
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from privcheck.errors import InvalidParameter

OS_ENTROPY = "os_entropy"
SEEDED = "seeded"
CALLER_GENERATOR = "caller_generator"
MODES = (OS_ENTROPY, SEEDED, CALLER_GENERATOR)


@dataclass(frozen=True)
class Randomness:
    """A `numpy.random.Generator` together with how it was seeded.

    `mode` is "os_entropy" (fresh OS entropy: the only mode whose outputs may be released as private),
    "seeded" (an explicit seed: reproducible, never a private release) or "caller_generator" (a Generator
    built by the caller, whose seeding the library cannot see: treated like "seeded").
    """

    generator: np.random.Generator
    mode: str
    seed: int | None = None

    def __post_init__(self):
        if not isinstance(self.generator, np.random.Generator):
            raise InvalidParameter("generator", type(self.generator).__name__, "a numpy.random.Generator")
        if self.mode not in MODES:
            raise InvalidParameter("mode", self.mode, " or ".join(repr(m) for m in MODES))

    @property
    def privacy_release(self) -> bool:
        """True only for OS-entropy randomness (spec: seeded runs are for tests and replication)."""
        return self.mode == OS_ENTROPY


def make_rng(seed: int | None = None) -> Randomness:
    """OS-entropy randomness by default; `seed` (an integer ≥ 0) gives a reproducible, non-release source."""
    if seed is None:
        return Randomness(np.random.default_rng(), OS_ENTROPY)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise InvalidParameter("seed", seed, "None (OS entropy) or an integer >= 0")
    return Randomness(np.random.default_rng(int(seed)), SEEDED, int(seed))


def as_randomness(rng) -> Randomness:
    """Normalise the `rng` argument of the mechanisms.

    None → fresh OS entropy; a `Randomness` → itself; an integer → `make_rng(seed)`; a bare
    `numpy.random.Generator` → mode "caller_generator" (not a private release: its seeding is unknown).
    """
    if rng is None:
        return make_rng()
    if isinstance(rng, Randomness):
        return rng
    if isinstance(rng, np.random.Generator):
        return Randomness(rng, CALLER_GENERATOR)
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        return make_rng(int(rng))
    raise InvalidParameter("rng", type(rng).__name__,
                           "None, a Randomness from make_rng(), a seed (int >= 0) or a numpy.random.Generator")
