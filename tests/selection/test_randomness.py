"""Randomness modes: only OS-entropy runs are private releases; seeded runs are reproducible."""

from __future__ import annotations

import numpy as np

from privcheck.accounting.selection import PrivITPParams

from mechanisms.selection import PrivBoN, PrivITP, Randomness, make_rng


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
    assert isinstance(a, Randomness)
    assert not np.array_equal(a.generator.random(8), b.generator.random(8))
