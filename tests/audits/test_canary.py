"""Membership coins, the commitment format, the sealed reveal and pre-registration (docs/audits.md)."""

from __future__ import annotations

import copy
import hashlib
import pickle

import numpy as np
import pytest
from scipy.stats import binom

from audits import canary
from audits.canary import (
    Membership,
    Preregistration,
    commit,
    draw_membership,
    freeze_scores,
    new_salt,
    score_canaries,
    verify,
)
from audits.statistics.one_run import from_scores
from privcheck.errors import InvalidParameter

SALT = bytes(range(32))


# --- commitment -------------------------------------------------------------------------------------------------------

def test_commitment_format_by_hand():
    """sha256(salt ‖ ids as compact UTF-8 JSON ‖ one ASCII '1'/'0' per canary), hex, prefixed."""
    ids = ["c-0", "c-1", "ç-2"]
    S = [1, -1, 1]
    payload = SALT + '["c-0","c-1","ç-2"]'.encode("utf-8") + b"101"
    assert commit(S, ids, SALT) == "sha256:" + hashlib.sha256(payload).hexdigest()
    assert commit(np.array([True, False, True]), ids, SALT) == commit(np.array([1, 0, 1]), ids, SALT)
    assert commit(S, [0, 1, 2], SALT) == "sha256:" + hashlib.sha256(SALT + b"[0,1,2]" + b"101").hexdigest()


def test_verify_detects_any_change():
    ids = list(range(10))
    S = np.array([1, -1] * 5)
    c = commit(S, ids, SALT)
    assert verify(c, S, ids, SALT)
    flipped = S.copy()
    flipped[3] *= -1
    assert not verify(c, flipped, ids, SALT)
    assert not verify(c, S, ids[::-1], SALT)
    assert not verify(c, S, ids, new_salt())


@pytest.mark.parametrize("salt", [b"short", "a" * 32, None])
def test_commit_refuses_bad_salt(salt):
    with pytest.raises(InvalidParameter) as err:
        commit([1, -1], ["a", "b"], salt)
    assert err.value.name == "salt"


def test_commit_refuses_mismatched_or_duplicate_ids():
    with pytest.raises(InvalidParameter):
        commit([1, -1, 1], ["a", "b"], SALT)
    with pytest.raises(InvalidParameter):
        commit([1, -1], ["a", "a"], SALT)


def test_membership_commitment_matches_revealed_bits():
    S = draw_membership(64, seed=3)
    ids = [f"canary-{i}" for i in range(64)]
    c = S.commit(ids, SALT)
    bits = S.reveal(freeze_scores(np.zeros(64)))
    assert verify(c, bits, ids, SALT) and commit(S, ids, SALT) == c


# --- drawing ----------------------------------------------------------------------------------------------------------

def test_os_entropy_draw_is_fair():
    """m = 200,000 OS-entropy coins: the count of present canaries lies in the two-sided 1e-7 binomial band."""
    m = 200_000
    S = draw_membership(m)
    assert S.source == "os_entropy" and S.audit_release
    n_in = int(S.presence_for_training().sum())
    lo, hi = binom.ppf(0.5e-7, m, 0.5), binom.isf(0.5e-7, m, 0.5)
    assert lo <= n_in <= hi


def test_os_entropy_draws_differ_and_seeded_draws_repeat():
    a, b = draw_membership(256), draw_membership(256)
    assert not np.array_equal(a.presence_for_training(), b.presence_for_training())   # P = 2^-256
    c, d = draw_membership(256, seed=9), draw_membership(256, seed=9)
    assert np.array_equal(c.presence_for_training(), d.presence_for_training())
    assert c.source == "seeded" and not c.audit_release


# --- sealing ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("leak", [list, lambda s: s[0], np.asarray, pickle.dumps, copy.copy, copy.deepcopy])
def test_membership_bits_are_sealed(leak):
    S = draw_membership(8, seed=0)
    with pytest.raises(TypeError):
        leak(S)
    assert repr(S) == "Membership(m=8, source='seeded', sealed)"


def test_reveal_needs_frozen_scores():
    S = draw_membership(8, seed=0)
    with pytest.raises(InvalidParameter):
        S.reveal(np.zeros(8))
    with pytest.raises(InvalidParameter):
        S.reveal(freeze_scores(np.zeros(7)))


def test_scores_frozen_after_reveal_are_refused():
    """If S was revealed before the scores were fixed, S may have reached the scorer: the audit refuses."""
    S = draw_membership(40, seed=2)
    early = freeze_scores(np.linspace(0, 1, 40))
    S.reveal(early)
    late = freeze_scores(np.linspace(0, 1, 40))
    with pytest.raises(InvalidParameter) as err:
        from_scores(late, S, delta=0, k_plus=5)
    assert err.value.name == "scores"
    with pytest.raises(InvalidParameter):
        from_scores(np.linspace(0, 1, 40), S, delta=0, k_plus=5)     # a plain array is frozen now: too late
    assert from_scores(early, S, delta=0, k_plus=5).result["guesses"] == 5


def test_score_canaries_never_hands_membership_to_the_scorer():
    S = draw_membership(5, seed=1)
    seen = []

    def score_fn(output, c):
        seen.append((output, c))
        return float(c)

    frozen = score_canaries(score_fn, "model", [0, 1, 2, 3, 4])
    assert frozen.values.tolist() == [0, 1, 2, 3, 4] and all(o == "model" for o, _ in seen)
    with pytest.raises(InvalidParameter):
        score_canaries(score_fn, S, [0, 1])
    with pytest.raises(InvalidParameter):
        score_canaries(score_fn, "model", [S])
    assert not frozen.values.flags.writeable


def test_sealed_audit_end_to_end():
    m = 300
    S = draw_membership(m, seed=5)
    ids = list(range(m))
    commitment = S.commit(ids, SALT)
    prereg = Preregistration(m=m, delta=1e-5, confidence=0.95, selection="explicit", k_plus=30, k_minus=0,
                             commitment=commitment, score="toy", canary_type="input_space", tie_break_seed=0)
    present = S.presence_for_training()
    model = {i for i in ids if present[i]}                           # "training": memorises present canaries
    frozen = score_canaries(lambda out, c: 1.0 if c in out else 0.0, model, ids)
    rep = from_scores(frozen, S, delta=1e-5, confidence=0.95, k_plus=30, preregistration=prereg, tie_break_seed=0)
    assert rep.result["correct"] == 30 and rep.result["eps_lower"] > 0
    assert rep.canaries["membership_commitment"] == commitment
    assert rep.guessing["preregistration"] == prereg.digest and rep.canaries["membership_sealed"]
    assert verify(commitment, S.reveal(frozen), ids, SALT)


def test_preregistration_must_match_and_precede_reveal():
    S = draw_membership(50, seed=4)
    prereg = Preregistration(m=50, delta=1e-5, confidence=0.95, selection="explicit", k_plus=5, k_minus=0)
    frozen = freeze_scores(np.arange(50.0))
    with pytest.raises(InvalidParameter) as err:
        from_scores(frozen, S, delta=1e-5, k_plus=6, preregistration=prereg)
    assert err.value.name == "preregistration.k_plus"
    S.reveal(frozen)
    late = Preregistration(m=50, delta=1e-5, confidence=0.95, selection="explicit", k_plus=5, k_minus=0)
    with pytest.raises(InvalidParameter) as err:
        from_scores(frozen, S, delta=1e-5, k_plus=5, preregistration=late)
    assert err.value.name == "preregistration"
    assert from_scores(frozen, S, delta=1e-5, k_plus=5, preregistration=prereg).guessing["preregistration"]


def test_preregistration_digest_is_stable_and_sensitive():
    a = Preregistration(m=10, delta=0.0, confidence=0.9, selection="explicit", k_plus=2)
    b = Preregistration(m=10, delta=0.0, confidence=0.9, selection="explicit", k_plus=2)
    c = Preregistration(m=10, delta=0.0, confidence=0.9, selection="explicit", k_plus=3)
    assert a.digest == b.digest != c.digest and a.digest.startswith("sha256:")


def test_as_signs_encodings():
    assert canary.as_signs([1, 0, 1]).tolist() == [1, -1, 1]
    assert canary.as_signs([True, False]).tolist() == [1, -1]
    assert canary.as_signs([-1, 1]).tolist() == [-1, 1]
    for bad in ([2, 1], [-1, 0, 1], [], [[1, -1]], ["a", "b"]):
        with pytest.raises(InvalidParameter):
            canary.as_signs(bad)
    assert isinstance(draw_membership(3, seed=1), Membership)
