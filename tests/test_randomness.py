"""privcheck.randomness: the one randomness policy and seed derivation."""

import dataclasses
import hashlib

import numpy as np
import pytest

from privcheck.errors import InvalidParameter
from privcheck.randomness import (
    CALLER_GENERATOR,
    DEFAULT_NAMESPACE,
    OS_ENTROPY,
    SEEDED,
    SEEDED_REASON,
    RandomnessPolicy,
    derive_seed,
    entropy_seed,
)


def _reference(namespace, label, seed):
    digest = hashlib.sha256(f"{namespace}/{label}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@pytest.mark.parametrize("namespace, label", [("privcheck.dpgrpo", "coins"), ("privcheck.dpgrpo", "rollouts"),
                                              ("privcheck.audits.dpgrpo_input", "labels"),
                                              ("privcheck.audits.dpgrpo", "membership")])
def test_derive_seed_is_the_documented_formula(namespace, label):
    for seed in (0, 7, 2 ** 62):
        assert derive_seed(seed, label, namespace) == _reference(namespace, label, seed)
    assert derive_seed(7, "x") == _reference(DEFAULT_NAMESPACE, "x", 7)
    assert derive_seed(np.int64(7), "x") == derive_seed(7, "x") == derive_seed(7.0, "x")


def test_derive_seed_known_value_and_range():
    # pinned: changing the formula would silently change every seeded result in the repository
    assert derive_seed(0, "coins", "privcheck.dpgrpo") == 7283936493104419587
    assert derive_seed(2024, "labels", "privcheck.audits.dpgrpo_input") == 7613847474518115645
    seeds = {derive_seed(s, label) for s in range(20) for label in ("a", "b", "c")}
    assert len(seeds) == 60 and all(0 <= s < 2 ** 63 for s in seeds)
    assert derive_seed(1, "a") != derive_seed(1, "a", "other")


@pytest.mark.parametrize("seed", [-1, True, 1.5, "3", None, float("nan")])
def test_derive_seed_rejects_bad_seeds(seed):
    with pytest.raises(InvalidParameter, match="seed"):
        derive_seed(seed, "x")


def test_derive_seed_rejects_bad_labels_and_namespaces():
    with pytest.raises(InvalidParameter, match="label"):
        derive_seed(1, "")
    with pytest.raises(InvalidParameter, match="label"):
        derive_seed(1, 3)
    with pytest.raises(InvalidParameter, match="namespace"):
        derive_seed(1, "x", "")


def test_seeded_policy_is_reproducible_and_never_a_release():
    p = RandomnessPolicy.seeded(11, namespace="privcheck.dpgrpo")
    assert p.mode == SEEDED and p.seed == 11 and not p.privacy_release
    assert p.reason == SEEDED_REASON and p.note == "not a privacy release: seeded randomness"
    assert p.to_json() == {"mode": "seeded", "seed": 11, "reason": "seeded randomness"}
    assert p.derive_seed("noise") == derive_seed(11, "noise", "privcheck.dpgrpo")
    assert p.derive_seed("noise") != p.derive_seed("coins")
    a = p.numpy_generator("draws").standard_normal(5)
    b = RandomnessPolicy.seeded(11, namespace="privcheck.dpgrpo").numpy_generator("draws").standard_normal(5)
    assert np.array_equal(a, b)
    assert np.array_equal(p.numpy_generator().integers(0, 100, 5), np.random.default_rng(11).integers(0, 100, 5))
    assert p == RandomnessPolicy.seeded(11, namespace="privcheck.dpgrpo") and hash(p) == hash(RandomnessPolicy(
        SEEDED, 11, "privcheck.dpgrpo"))


def test_os_entropy_policy_is_a_release_with_fresh_seeds():
    p = RandomnessPolicy.os_entropy()
    assert p.mode == OS_ENTROPY and p.seed is None and p.privacy_release
    assert p.reason is None and p.note is None and p.to_json() == {"mode": "os_entropy"}
    assert len({p.derive_seed("noise") for _ in range(8)}) == 8           # fresh on every call
    assert len({entropy_seed() for _ in range(8)}) == 8 and 0 <= entropy_seed() < 2 ** 63
    g1, g2 = p.numpy_generator("x"), p.numpy_generator("x")
    assert not np.array_equal(g1.integers(0, 2 ** 62, 4), g2.integers(0, 2 ** 62, 4))


def test_caller_generator_policy_is_not_a_release_and_has_no_seed():
    p = RandomnessPolicy.caller_generator()
    assert p.mode == CALLER_GENERATOR and not p.privacy_release and p.seed is None
    assert "not a privacy release" in p.note and p.to_json()["mode"] == CALLER_GENERATOR
    with pytest.raises(InvalidParameter, match="mode"):
        p.derive_seed("x")
    with pytest.raises(InvalidParameter, match="mode"):
        p.numpy_generator()


def test_from_setting():
    assert RandomnessPolicy.from_setting("os_entropy") == RandomnessPolicy.os_entropy()
    assert RandomnessPolicy.from_setting(None) == RandomnessPolicy.os_entropy()
    assert RandomnessPolicy.from_setting(5, namespace="n") == RandomnessPolicy.seeded(5, namespace="n")
    p = RandomnessPolicy.seeded(1)
    assert RandomnessPolicy.from_setting(p) is p
    for bad in ("seeded", True, 1.5, -1, [1]):
        with pytest.raises(InvalidParameter):
            RandomnessPolicy.from_setting(bad)


def test_construction_is_validated():
    with pytest.raises(InvalidParameter, match="mode"):
        RandomnessPolicy("fixed")
    with pytest.raises(InvalidParameter, match="seed"):
        RandomnessPolicy(SEEDED, None)
    with pytest.raises(InvalidParameter, match="seed"):
        RandomnessPolicy(OS_ENTROPY, 3)
    with pytest.raises(InvalidParameter, match="namespace"):
        RandomnessPolicy.seeded(1, namespace="")
    with pytest.raises(dataclasses.FrozenInstanceError):
        RandomnessPolicy.seeded(1).seed = 2


def test_torch_generator_matches_a_manually_seeded_one():
    import torch
    p = RandomnessPolicy.seeded(3, namespace="privcheck.dpgrpo")
    g = p.torch_generator("coins")
    ref = torch.Generator(device="cpu").manual_seed(derive_seed(3, "coins", "privcheck.dpgrpo"))
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=ref))
    with pytest.raises(InvalidParameter, match="device"):
        p.torch_generator("coins", device="no-such-device")
