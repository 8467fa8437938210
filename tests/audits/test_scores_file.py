"""Scores files (audits/scores_file.py; docs/audit_your_model.md): round trips, the one-run figures against an
independent computation, the commitment check, bad input, and `privcheck audit one-run --scores` (exit codes).

Expected figures are computed here from the file's contents alone: the guesses by sorting the scores with numpy,
the counts by comparing with the membership, ε_lower at δ = 0 by the Clopper–Pearson closed form
logit(Beta⁻¹(p; v, r − v + 1)) and at δ > 0 by the 60-digit mpmath bisection of tests/audits/mp_reference.py, and the
commitment by hashing salt ‖ ids ‖ bits by hand. Scores are continuous draws, so there are no ties to break.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from scipy.special import betaincinv, logit

from audits import canary as cn
from audits import scores_file as sf
from privcheck.artifacts.schema import validate
from privcheck.artifacts.writer import verify_seal
from privcheck.cli import main
from privcheck.errors import InvalidParameter
from tests.audits import mp_reference as ref

M = 120
SALT = bytes(range(32))


def _design(seed=3, m=M, shift=3.0):
    rng = np.random.default_rng(seed)
    present = rng.integers(0, 2, size=m).astype(bool)
    scores = rng.normal(size=m) + shift * present
    ids = [f"canary-{i:03d}" for i in range(m)]
    return ids, scores, present


def _write(tmp_path, ext="csv", **kwargs):
    ids, scores, present = _design()
    path = sf.write_scores_file(tmp_path / f"s.{ext}", scores, present, canary_ids=ids, salt=SALT, **kwargs)
    return path, ids, scores, present


def _expected_counts(scores, present, k_plus, k_minus=0):
    order = np.argsort(-scores)                   # continuous scores: no ties
    top, bottom = order[:k_plus], order[len(scores) - k_minus:] if k_minus else order[:0]
    return k_plus + k_minus, int(present[top].sum() + (~present[bottom]).sum())


def _hand_commitment(ids, present, salt):
    payload = salt + json.dumps(ids, separators=(",", ":")).encode() + bytes(ord("1") if b else ord("0")
                                                                           for b in present)
    return "sha256:" + hashlib.sha256(payload).hexdigest()


# --------------------------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("ext", ["csv", "npz"])
def test_round_trip(tmp_path, ext):
    path, ids, scores, present = _write(tmp_path, ext, canary_type="gradient_dirac", score="noisy_sum")
    got = sf.load_scores(path)
    assert got.canary_ids == tuple(ids)
    assert np.array_equal(got.scores, scores)                  # bit for bit (CSV stores repr of each float)
    assert np.array_equal(got.member, present.astype(np.int8))
    assert got.salt == SALT and got.commitment == _hand_commitment(ids, present, SALT)
    assert (got.canary_type, got.score_name) == ("gradient_dirac", "noisy_sum")
    assert got.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("ext", ["csv", "npz"])
def test_integer_ids_round_trip_and_keep_their_commitment(tmp_path, ext):
    _, scores, present = _design()
    ids = list(range(100, 100 + M))
    path = sf.write_scores_file(tmp_path / f"i.{ext}", scores, present, canary_ids=ids, salt=SALT)
    got = sf.load_scores(path)
    assert got.canary_ids == tuple(ids) and got.commitment == _hand_commitment(ids, present, SALT)


def test_sealed_membership_is_revealed_after_the_scores_are_frozen(tmp_path):
    ids, scores, _ = _design()
    membership = cn.draw_membership(M, seed=5)
    commitment = membership.commit(ids, SALT)
    path = sf.write_scores_file(tmp_path / "m.csv", scores, membership, canary_ids=ids, salt=SALT,
                                commitment=commitment)
    assert membership.revealed_at is not None
    got = sf.load_scores(path)
    assert np.array_equal(got.member.astype(bool), membership.presence_for_training())
    assert got.commitment == commitment


def test_writer_refuses_a_commitment_that_does_not_match(tmp_path):
    ids, scores, present = _design()
    wrong = _hand_commitment(ids, ~present, SALT)
    with pytest.raises(InvalidParameter, match="commitment"):
        sf.write_scores_file(tmp_path / "w.csv", scores, present, canary_ids=ids, salt=SALT, commitment=wrong)
    assert not (tmp_path / "w.csv").exists()


# ------------------------------------------------------------------------------------------- the audit's figures

@pytest.mark.parametrize("ext", ["csv", "npz"])
def test_delta0_bound_is_the_clopper_pearson_closed_form(tmp_path, ext):
    path, _, scores, present = _write(tmp_path, ext)
    r, v = _expected_counts(scores, present, 30, 10)
    rep = sf.audit_scores_file(path, delta=0.0, confidence=0.95, k_plus=30, k_minus=10)
    assert (rep.result["guesses"], rep.result["correct"]) == (r, v)
    assert rep.result["eps_lower"] == pytest.approx(max(0.0, float(logit(betaincinv(v, r - v + 1, 0.05)))),
                                                    abs=2e-9)


def test_bound_and_nominal_p_value_match_mpmath(tmp_path):
    path, _, scores, present = _write(tmp_path, "csv")
    r, v = _expected_counts(scores, present, 25)
    rep = sf.audit_scores_file(path, delta=1e-5, confidence=0.9, k_plus=25, eps_nominal=0.5)
    assert (rep.result["guesses"], rep.result["correct"]) == (r, v)
    assert rep.result["eps_lower"] == pytest.approx(float(ref.eps_lower(M, r, v, 1e-5, 0.1)), abs=2e-9)
    assert rep.result["p_value_at_nominal"] == pytest.approx(float(ref.pval(M, r, v, 0.5, 1e-5)), rel=1e-9)
    assert rep.canaries["n_in"] == int(present.sum()) and rep.canaries["n_out"] == M - int(present.sum())
    assert rep.canaries["membership_commitment"] == _hand_commitment(*_design()[::2], SALT)
    assert rep.randomness["membership"] == "external"
    validate(rep.to_json(), name="audit.schema.json")


def test_preregistration_in_the_file_fixes_the_guess_rule(tmp_path):
    ids, scores, present = _design()
    commitment = _hand_commitment(ids, present, SALT)
    prereg = cn.Preregistration(m=M, delta=1e-5, confidence=0.95, selection="explicit", k_plus=20, k_minus=5,
                                commitment=commitment)
    path = sf.write_scores_file(tmp_path / "p.csv", scores, present, canary_ids=ids, salt=SALT,
                                preregistration=prereg)
    rep = sf.audit_scores_file(path, delta=1e-5)
    assert (rep.guessing["k_plus"], rep.guessing["k_minus"]) == (20, 5)
    assert rep.guessing["preregistration"] == prereg.digest
    assert (rep.result["guesses"], rep.result["correct"]) == _expected_counts(scores, present, 20, 5)
    with pytest.raises(InvalidParameter, match="preregistration.delta"):
        sf.audit_scores_file(path, delta=1e-6)
    with pytest.raises(InvalidParameter, match="preregistration.k_plus"):
        sf.audit_scores_file(path, delta=1e-5, k_plus=21)


# -------------------------------------------------------------------------------------------------- tampering

def _flip_first_bit_csv(path):
    lines = path.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("canary-"))
    cid, score, bit = lines[row].split(",")
    lines[row] = f"{cid},{score},{1 - int(bit)}"
    path.write_text("\n".join(lines) + "\n")


def test_tampered_csv_membership_is_rejected(tmp_path):
    path, *_ = _write(tmp_path, "csv")
    _flip_first_bit_csv(path)
    with pytest.raises(InvalidParameter) as err:
        sf.load_scores(path)
    assert err.value.name == "scores.member" and "commit" in err.value.allowed


def test_tampered_npz_membership_and_wrong_salt_are_rejected(tmp_path):
    path, *_ = _write(tmp_path, "npz")
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    flipped = dict(arrays, member=1 - arrays["member"])
    np.savez(tmp_path / "flip.npz", **flipped)
    resalted = dict(arrays, salt=np.array(bytes(32).hex()))
    np.savez(tmp_path / "salt.npz", **resalted)
    for name in ("flip.npz", "salt.npz"):
        with pytest.raises(InvalidParameter) as err:
            sf.load_scores(tmp_path / name)
        assert err.value.name == "scores.member"


# -------------------------------------------------------------------------------------------------- bad input

def _csv(tmp_path, body, header=None):
    ids, scores, present = _design(m=4)
    commitment = _hand_commitment(ids, present, SALT)
    head = header if header is not None else f"# commitment: {commitment}\n# salt: {SALT.hex()}\n"
    path = tmp_path / "bad.csv"
    path.write_text(head + body)
    return path


def _rows(ids=None, scores=None, bits=None):
    d_ids, d_scores, d_present = _design(m=4)
    ids = ids or d_ids
    scores = scores or [repr(float(s)) for s in d_scores]
    bits = bits or [str(int(b)) for b in d_present]
    return "canary_id,score,member\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(ids, scores, bits))


BAD_CSV = [
    ("canary_id,score\na,1.0\n", None, "scores.columns"),
    ("canary_id,score,member,extra\na,1.0,1,x\n", None, "scores.columns"),
    (None, {"scores": ["1.0", "nan", "0.0", "2.0"]}, "scores.score"),
    (None, {"scores": ["1.0", "inf", "0.0", "2.0"]}, "scores.score"),
    (None, {"scores": ["1.0", "high", "0.0", "2.0"]}, "scores.score"),
    (None, {"bits": ["1", "2", "0", "1"]}, "scores.member"),
    (None, {"bits": ["1", "1.0", "0", "1"]}, "scores.member"),
    (None, {"ids": ["a", "a", "b", "c"]}, "scores.canary_id"),
]


@pytest.mark.parametrize("body, rows, name", BAD_CSV)
def test_bad_csv_body_names_the_field(tmp_path, body, rows, name):
    path = _csv(tmp_path, body if body is not None else _rows(**rows))
    with pytest.raises(InvalidParameter) as err:
        sf.load_scores(path)
    assert err.value.name == name


@pytest.mark.parametrize("header, name", [
    ("# salt: " + SALT.hex() + "\n", "scores.commitment"),
    ("# commitment: sha256:abc\n# salt: " + SALT.hex() + "\n", "scores.commitment"),
    ("# commitment: sha256:" + "0" * 64 + "\n# salt: 00ff\n", "scores.salt"),
    ("# commitment: sha256:" + "0" * 64 + "\n# salt: " + SALT.hex() + "\n# comitment: x\n", "scores.header"),
    ("# format: other/2\n# commitment: sha256:" + "0" * 64 + "\n# salt: " + SALT.hex() + "\n", "scores.format"),
    ("# commitment: sha256:" + "0" * 64 + "\n# salt: " + SALT.hex() + "\n# id_type: float\n", "scores.id_type"),
])
def test_bad_csv_header_names_the_field(tmp_path, header, name):
    path = _csv(tmp_path, _rows(), header=header)
    with pytest.raises(InvalidParameter) as err:
        sf.load_scores(path)
    assert err.value.name == name


def test_bad_npz_is_refused(tmp_path):
    path, *_ = _write(tmp_path, "npz")
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    np.savez(tmp_path / "extra.npz", **arrays, notes=np.array("x"))
    np.savez(tmp_path / "missing.npz", **{k: v for k, v in arrays.items() if k != "salt"})
    np.savez(tmp_path / "pickled.npz", **dict(arrays, canary_ids=np.array([{"a": 1}] * M, dtype=object)))
    np.savez(tmp_path / "nonfinite.npz", **dict(arrays, scores=np.where(np.arange(M) == 3, np.nan, 0.0)))
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    for name, field in [("extra", "scores.arrays"), ("missing", "scores.arrays"), ("pickled", "scores.canary_ids"),
                        ("nonfinite", "scores.score"), ("garbage", "scores")]:
        with pytest.raises(InvalidParameter) as err:
            sf.load_scores(tmp_path / f"{name}.npz")
        assert err.value.name == field, name


def test_bad_paths_and_parameters(tmp_path):
    path, *_ = _write(tmp_path, "csv")
    for bad, name in [(tmp_path / "s.txt", "scores"), (tmp_path / "absent.csv", "scores"), ("", "scores")]:
        with pytest.raises(InvalidParameter) as err:
            sf.load_scores(bad)
        assert err.value.name == name
    for kwargs, name in [({"delta": 1.5}, "delta"), ({"delta": float("nan")}, "delta"),
                         ({"delta": 1e-5, "confidence": 1.0}, "confidence"), ({"delta": 1e-5}, "k_plus"),
                         ({"delta": 1e-5, "k_plus": -1}, "k_plus"), ({"delta": 1e-5, "k_plus": M + 1}, "k_plus"),
                         ({"delta": 1e-5, "k_plus": 3, "eps_nominal": -1.0}, "eps_nominal")]:
        with pytest.raises(InvalidParameter) as err:
            sf.audit_scores_file(path, **kwargs)
        assert err.value.name.startswith(name), (kwargs, err.value.name)


def test_one_class_membership_is_refused(tmp_path):
    ids, scores, _ = _design()
    path = sf.write_scores_file(tmp_path / "one.csv", scores, np.ones(M, bool), canary_ids=ids, salt=SALT)
    with pytest.raises(InvalidParameter, match="membership"):
        sf.audit_scores_file(path, delta=1e-5, k_plus=5)


# --------------------------------------------------------------------------------------------------------- CLI

def _cli(capsys, *argv):
    code = main(["audit", "one-run", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("ext", ["csv", "npz"])
def test_cli_scores_json_and_artifact(tmp_path, capsys, ext):
    path, _, scores, present = _write(tmp_path, ext)
    r, v = _expected_counts(scores, present, 30, 10)
    code, out, err = _cli(capsys, "--scores", str(path), "--delta", "0", "--k-plus", "30", "--k-minus", "10",
                          "--json", "--out", str(tmp_path / "a"))
    assert code == 0, err
    printed = json.loads(out)
    doc = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert verify_seal(doc) and printed["artifact"] == str(tmp_path / "a" / "audit.json")
    assert {k: v for k, v in printed.items() if k not in ("eps_lower", "p_value_at_nominal", "rejects_nominal",
                                                          "artifact", "underpowered", "plan_note")} == doc
    assert (doc["result"]["guesses"], doc["result"]["correct"]) == (r, v)
    assert printed["eps_lower"] == pytest.approx(float(logit(betaincinv(v, r - v + 1, 0.05))), abs=2e-9)
    assert doc["diagnostics"]["scores_file_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_table(tmp_path, capsys):
    path, *_ = _write(tmp_path, "csv")
    code, out, _ = _cli(capsys, "--scores", str(path), "--delta", "1e-5", "--k-plus", "30")
    assert code == 0 and "eps_lower" in out and "(verified)" in out


@pytest.mark.parametrize("extra, name", [
    (["--delta", "1e-5", "--k-plus", "30", "--canaries", "10"], "canaries"),
    (["--delta", "2", "--k-plus", "30"], "delta"),
    (["--delta", "1e-5"], "k_plus"),
    (["--delta", "1e-5", "--k-plus", "30", "--confidence", "0"], "confidence"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, extra, name):
    path, *_ = _write(tmp_path, "csv")
    out_dir = tmp_path / "never"
    code, out, err = _cli(capsys, "--scores", str(path), *extra, "--json", "--out", str(out_dir))
    assert code == 2 and f"invalid {name}=" in err and out == "" and "Traceback" not in err
    assert not out_dir.exists()


def test_cli_tampered_file_exits_2_and_writes_nothing(tmp_path, capsys):
    path, *_ = _write(tmp_path, "csv")
    _flip_first_bit_csv(path)
    out_dir = tmp_path / "never"
    code, out, err = _cli(capsys, "--scores", str(path), "--delta", "1e-5", "--k-plus", "30", "--out", str(out_dir))
    assert code == 2 and "invalid scores.member=" in err and out == ""
    assert not out_dir.exists()
