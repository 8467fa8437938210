"""Randomness modes: only OS-entropy runs are private releases; seeded runs are reproducible."""

from __future__ import annotations

import numpy as np

from mechanisms.selection import NumpyRandomness, PrivBoN, PrivITP, as_randomness, make_rng
from privcheck.accounting import PrivITPParams
from privcheck.randomness import RandomnessPolicy


def test_modes():
    os_rng = make_rng()
    assert os_rng.mode == "os_entropy" and os_rng.privacy_release and os_rng.seed is None
    seeded = make_rng(123)
    assert seeded.mode == "seeded" and not seeded.privacy_release and seeded.seed == 123
    assert isinstance(seeded.generator, np.random.Generator)


def test_seeded_runs_are_reproducible_and_not_releases():
    s = np.random.default_rng(0).random((50, 8))
    mech = PrivBoN(0.1, 0.3, r_max=1.0)
    a, b = mech.select(s, make_rng(7)), mech.select(s, make_rng(7))
    assert np.array_equal(a.indices, b.indices)
    assert a.randomness_mode == "seeded" and a.privacy_release is False
    assert mech.select(s, 7).privacy_release is False                          # an int seed
    gen = mech.select(s, np.random.default_rng(7))                             # a caller's Generator
    assert gen.randomness_mode == "caller_generator" and gen.privacy_release is False


def test_os_entropy_runs_are_releases():
    s = np.random.default_rng(0).random((5, 8))
    res = PrivBoN(0.1, 0.3, r_max=1.0).select(s)
    assert res.randomness_mode == "os_entropy" and res.privacy_release is True
    p = PrivITPParams(candidates=8, beta=0.1, sigma_x=0.1, sigma_z=0.1, headroom=0.5, sensitivity=0.01, delta=1e-5)
    itp = PrivITP(p).select(s, s.copy(), make_rng())
    assert itp.randomness_mode == "os_entropy" and itp.privacy_release is True
    # without accounting records a result is not releasable, whatever the randomness
    assert PrivITP(p).select(s, s.copy(), make_rng(), account=False).privacy_release is False
    assert PrivITP(p).select(s, s.copy(), make_rng(3)).privacy_release is False


def test_os_entropy_generators_differ():
    a, b = make_rng(), make_rng()
    assert isinstance(a, NumpyRandomness)
    assert not np.array_equal(a.generator.random(8), b.generator.random(8))


def test_numpy_backend_follows_the_policy():
    """NumpyRandomness is the numpy backend of privcheck.randomness.RandomnessPolicy: the mode, seed and release
    flag are the policy's, and a seeded source is `default_rng(seed)` itself (seeded figures stay the same)."""
    seeded = make_rng(123)
    assert seeded.policy == RandomnessPolicy.seeded(123) and seeded.reason == "seeded randomness"
    assert np.array_equal(seeded.generator.random(16), np.random.default_rng(123).random(16))
    assert make_rng().policy == RandomnessPolicy.os_entropy() and make_rng().reason is None
    from_policy = as_randomness(RandomnessPolicy.seeded(5))
    assert from_policy.mode == "seeded" and np.array_equal(from_policy.generator.random(4),
                                                            np.random.default_rng(5).random(4))
    caller = as_randomness(np.random.default_rng(1))
    assert caller.policy == RandomnessPolicy.caller_generator() and not caller.privacy_release
