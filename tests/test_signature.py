"""Signed artifacts (docs/artifacts.md, "Signatures"): `privcheck verify --sign KEY` writes an ed25519 signature of
verification.json beside it, in the same commit; `privcheck report --trust PUBKEY` exits 0 only for a document
signed by that key and unchanged since, and 1 with the warning first otherwise (a re-sealed edit included). Key
files are bounded inputs checked before any work: a bad one exits 2 and nothing is written."""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from privcheck.cli import main
from privcheck.serialization import canonical_json
from tests.artifact_fixtures import copy_for_test, reseal, verify_suites
from tests.artifact_fixtures import report as run_report

SIG = "verification.signature.json"
SUITES = {"alpha": "tests.test_report_content:_alpha", "beta": "tests.test_report_content:_beta"}


def _write_key(directory: Path, name: str, key=None, *, ssh: bool = False, password: bytes | None = None):
    """(private key file, public key file) of a new ed25519 key (or `key`), PEM or OpenSSH."""
    key = key or ed25519.Ed25519PrivateKey.generate()
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    fmt = serialization.PrivateFormat.OpenSSH if ssh else serialization.PrivateFormat.PKCS8
    private = directory / f"{name}.key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, enc))
    public = directory / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                       if ssh else key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {"pem": _write_key(d, "signer"), "ssh": _write_key(d, "signer_ssh", ssh=True),
            "other": _write_key(d, "other")}


@pytest.fixture(scope="module")
def signed(tmp_path_factory, keys):
    return verify_suites(tmp_path_factory.mktemp("signed") / "out", SUITES, "--sign", str(keys["pem"][0]))


@pytest.fixture
def art(signed, tmp_path, capsys):
    return copy_for_test(signed, tmp_path, capsys)


def test_the_signature_is_ed25519_over_the_documented_message(art, keys):
    """Checked with the cryptography package directly, from the format docs/artifacts.md states."""
    doc = json.loads((art / "verification.json").read_text())
    sig = json.loads((art / SIG).read_text())
    assert (sig["schema"], sig["algorithm"], sig["signed_file"]) == ("privcheck.signature/1", "ed25519",
                                                                     "verification.json")
    assert sig["document_sha256"] == doc["sha256"]
    public = serialization.load_pem_public_key(keys["pem"][1].read_bytes())
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert base64.b64decode(sig["public_key"]) == raw
    message = b"privcheck.signature/1\x00verification.json\x00" + canonical_json(doc)
    public.verify(base64.b64decode(sig["signature"]), message)        # raises InvalidSignature otherwise


def test_the_fingerprint_is_the_one_ssh_keygen_prints(art, keys, tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.fail("ssh-keygen is needed for this reference (OpenSSH client tools)")
    sig = json.loads((art / SIG).read_text())
    ssh_pub = tmp_path / "k.pub"
    key = serialization.load_pem_public_key(keys["pem"][1].read_bytes())
    ssh_pub.write_bytes(key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    printed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(ssh_pub)], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert sig["fingerprint"] == printed


def test_report_trusting_the_signer_is_intact(art, keys, capsys):
    code, out, err = run_report(art, capsys, "--trust", str(keys["pem"][1]), "--json")
    payload = json.loads(out)
    assert code == 0 and err == "" and payload["problems"] == []
    assert payload["signature"].startswith("valid ed25519 signature by the trusted key SHA256:")
    assert "- signature: valid ed25519 signature by the trusted key" in (art / "report.md").read_text()
    # the report's own files join the head's output; the signature stays
    assert (art / SIG).is_file()


def test_report_without_trust_checks_the_signature_but_says_whose_key_it_is_not(art, capsys):
    code, out, _ = run_report(art, capsys, "--json")
    payload = json.loads(out)
    assert code == 0 and "not checked against one you trust" in payload["signature"]


def _reseal(art, mutate):
    reseal(art, mutate)


def _edit_sig(art, **fields):
    sig = json.loads((art / SIG).read_text())
    sig.update(fields)
    (art / SIG).write_text(json.dumps(sig))


def _forged(keys):
    def run(art):
        """A forger re-signs the edited document with a key of their own."""
        from privcheck.artifacts.signature import load_private_key, sign_document

        _reseal(art, lambda d: d["claims"][0].update(epsilon=0.1))
        doc = json.loads((art / "verification.json").read_text())
        (art / SIG).write_text(json.dumps(sign_document(doc, load_private_key(keys["other"][0]), "verification.json")))
    return run


FAILURES = {
    # name: (what is done to the signed directory, a phrase the problems must contain)
    "re-sealed claim edit": (lambda art, keys: _reseal(art, lambda d: d["claims"][0].update(epsilon=0.1)),
                             "does not verify"),
    "re-sealed harmless-looking edit": (lambda art, keys: _reseal(art, lambda d: d.update(run_id="f" * 32)),
                                        "does not verify"),
    "signature removed": (lambda art, keys: (art / SIG).unlink(), "not signed"),
    "re-signed by another key": (lambda art, keys: _forged(keys)(art), "not by the trusted key"),
    "signature bytes edited": (lambda art, keys: _edit_sig(art, signature=base64.b64encode(b"\0" * 64).decode()),
                               "does not verify"),
    "signature not base64": (lambda art, keys: _edit_sig(art, signature="!!"), "not base64"),
    "another file named": (lambda art, keys: _edit_sig(art, signed_file="other.json"), "signs 'other.json'"),
    "signature not JSON": (lambda art, keys: (art / SIG).write_text("{"), "cannot be read"),
    "duplicate keys": (lambda art, keys: (art / SIG).write_text('{"a": 1, "a": 2}'), "cannot be read"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_report_trusting_a_key_exits_1_unless_that_key_signed_this_document(art, keys, capsys, case):
    act, phrase = FAILURES[case]
    act(art, keys)
    code, out, err = run_report(art, capsys, "--trust", str(keys["pem"][1]))
    assert code == 1 and err == ""
    assert out.splitlines()[0].startswith("WARNING:") and phrase in out
    assert (art / "report.md").read_text().startswith("> **WARNING:")


def test_an_openssh_key_pair_signs_and_is_trusted(tmp_path, keys, capsys):
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("privcheck.verify.available_suites", lambda: SUITES)
        assert main(["verify", "--out", str(out), "--suite", "alpha", "--sign", str(keys["ssh"][0])]) == 0
    capsys.readouterr()
    assert run_report(out, capsys, "--trust", str(keys["ssh"][1]))[0] == 0
    assert run_report(out, capsys, "--trust", str(keys["pem"][1]))[0] == 1


def test_a_later_unsigned_run_removes_the_earlier_signature(art, capsys):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("privcheck.verify.available_suites", lambda: SUITES)
        assert main(["verify", "--out", str(art), "--suite", "alpha"]) == 0
    assert not (art / SIG).exists()          # a signature of the earlier document would no longer be one of this


def _bad_keys(tmp_path, keys):
    encrypted, _ = _write_key(tmp_path, "enc", password=b"secret")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa.key").write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    (tmp_path / "huge.key").write_bytes(b"x")
    os.truncate(tmp_path / "huge.key", 1 << 30)
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo)
    return {"missing": (tmp_path / "absent.key", "sign"), "public key given": (keys["pem"][1], "sign"),
            "encrypted": (encrypted, "passphrase"), "rsa": (tmp_path / "rsa.key", "RSAPrivateKey"),
            "over the size limit": (tmp_path / "huge.key", "at most"), "a FIFO": (fifo, "a FIFO"),
            "a directory": (tmp_path, "a directory")}


def test_a_bad_signing_key_exits_2_before_any_work(tmp_path, keys, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("work started before the key was checked")
    monkeypatch.setattr("privcheck.verify.run_verification", no_work)
    (tmp_path / "k").mkdir()
    for case, (path, phrase) in _bad_keys(tmp_path / "k", keys).items():
        out = tmp_path / f"out_{case.replace(' ', '_')}"
        code = main(["verify", "--out", str(out), "--sign", str(path)])
        captured = capsys.readouterr()
        assert code == 2, case
        assert captured.out == "" and len(captured.err.splitlines()) == 1, case
        assert captured.err.startswith("privcheck: error: invalid sign="), (case, captured.err)
        assert phrase in captured.err, (case, captured.err)
        assert not out.exists(), case


def test_a_bad_trusted_key_exits_2_and_writes_nothing(art, tmp_path, keys, capsys):
    before = {p.name: p.read_bytes() for p in art.iterdir()}
    for path in (keys["pem"][0].with_name("absent.pub"), art / "verification.json", keys["pem"][0]):
        code, out, err = run_report(art, capsys, "--trust", str(path))
        assert code == 2 and out == "" and len(err.splitlines()) == 1
        assert err.startswith("privcheck: error: invalid trust=")
    assert {p.name: p.read_bytes() for p in art.iterdir()} == before


def test_a_planted_signature_link_is_refused(art, tmp_path, keys, capsys):
    victim = tmp_path / "victim"
    victim.write_text("secret")
    (art / SIG).unlink()
    (art / SIG).symlink_to(victim)
    code, out, err = run_report(art, capsys, "--trust", str(keys["pem"][1]))
    assert code == 2 and out == "" and "verification.signature.json" in err
    assert victim.read_text() == "secret"


def test_the_docs_openssh_recipe_works_with_keys_ssh_keygen_made(tmp_path, capsys, monkeypatch):
    """docs/artifacts.md, "Signatures": a key pair made by OpenSSH's ssh-keygen signs and is trusted (the suites
    are patched to the two small ones of this module; the commands are the page's)."""
    from tests.doc_blocks import blocks

    (block,) = [b for b in blocks("docs/artifacts.md") if b.lang == "bash" and "--sign producer" in b.text]
    lines = [line.split("#")[0].strip() for line in block.text.splitlines() if line.strip()]
    keygen, verify, report = lines
    if shutil.which("ssh-keygen") is None:
        pytest.fail("ssh-keygen is needed for this test (OpenSSH client tools)")
    monkeypatch.chdir(tmp_path)
    subprocess.run(shlex.split(keygen), check=True, capture_output=True)
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: SUITES)
    assert main(verify.split()[1:]) == 0
    capsys.readouterr()
    assert main(report.split()[1:]) == 0
    assert "valid ed25519 signature by the trusted key" in capsys.readouterr().out
