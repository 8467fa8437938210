"""Detached ed25519 signatures of a verification artifact: `privcheck verify --sign KEY` writes one beside
verification.json, `privcheck report --trust PUBKEY` requires one by that key (docs/artifacts.md, "Signatures").

The signed message is `DOMAIN`, the signed file's name, a NUL byte, and the canonical JSON of the sealed document
(`privcheck.serialization.canonical_json`, sha256 field included), so a signature covers every field of the
document whatever its indentation on disk, cannot be moved to another file name, and cannot be taken for a
signature made for another purpose. The signature document (`SIGNATURE`) records the algorithm, the signed file,
the document's sha256, the signer's raw public key and its fingerprint (the one `ssh-keygen -l` prints), and the
signature. The cryptography is the `cryptography`
package's (install `privcheck[sign]`); keys are read as bounded regular files (`privcheck.inputs`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from privcheck.errors import InvalidParameter
from privcheck.inputs import parse_json, read_input
from privcheck.serialization import canonical_json

__all__ = ["ALGORITHM", "DOMAIN", "SIGNATURE", "SIGNATURE_SCHEMA", "fingerprint", "load_private_key",
           "load_public_key", "read_signature", "sign_document", "signature_problems"]

SIGNATURE = "verification.signature.json"
SIGNATURE_SCHEMA = "privcheck.signature/1"
ALGORITHM = "ed25519"
DOMAIN = b"privcheck.signature/1\x00"
_KEY_FORMS = "an ed25519 key: PEM (PKCS#8 / SubjectPublicKeyInfo) or OpenSSH"


def _crypto(name: str):
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InvalidParameter(name, "(cryptography is not installed)",
                               "a key, with the optional package installed: pip install 'privcheck[sign]'") from None
    return serialization, ed25519


def _load_key(path, name: str, private: bool):
    serialization, ed25519 = _crypto(name)
    data = read_input(path, "key", name)
    side, cls = ("private", ed25519.Ed25519PrivateKey) if private else ("public", ed25519.Ed25519PublicKey)
    loaders = ((lambda d: serialization.load_pem_private_key(d, password=None),
                lambda d: serialization.load_ssh_private_key(d, password=None)) if private else
               (serialization.load_pem_public_key, serialization.load_ssh_public_key))
    for load in loaders:
        try:
            key = load(data)
        except TypeError:               # an encrypted private key: privcheck takes no passphrase
            raise InvalidParameter(name, str(path), "an unencrypted ed25519 private key file "
                                                    "(this one is protected by a passphrase)") from None
        except Exception:   # noqa: BLE001 — ValueError, UnsupportedAlgorithm, ...: every parse failure is "not a key"
            continue
        if isinstance(key, cls):
            return key
        raise InvalidParameter(name, str(path), f"{_KEY_FORMS} {side} key (this is {type(key).__name__})")
    raise InvalidParameter(name, str(path), f"{_KEY_FORMS} {side} key file")


def load_private_key(path, name: str = "sign"):
    """The ed25519 private key of the unencrypted PEM (PKCS#8) or OpenSSH file `path`; InvalidParameter naming
    `name` for anything else (not a regular file, too large, encrypted, another algorithm)."""
    return _load_key(path, name, private=True)


def load_public_key(path, name: str = "trust"):
    """The ed25519 public key of the PEM or OpenSSH (`ssh-ed25519 AAAA…`) file `path`; InvalidParameter naming
    `name` otherwise."""
    return _load_key(path, name, private=False)


def _raw(public_key) -> bytes:
    serialization, _ = _crypto("key")
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key) -> str:
    """OpenSSH's fingerprint of the key, as `ssh-keygen -l` prints it: "SHA256:" and the unpadded base64 of the
    sha256 of the key's OpenSSH wire blob."""
    serialization, _ = _crypto("key")
    line = public_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _message(doc: dict, signed_file: str) -> bytes:
    return DOMAIN + signed_file.encode() + b"\x00" + canonical_json(doc)


def sign_document(doc: dict, private_key, signed_file: str) -> dict:
    """The signature document of the sealed `doc` as file `signed_file` (module docstring)."""
    public = private_key.public_key()
    return {"schema": SIGNATURE_SCHEMA, "algorithm": ALGORITHM, "signed_file": signed_file,
            "document_sha256": doc["sha256"], "public_key": base64.b64encode(_raw(public)).decode(),
            "fingerprint": fingerprint(public),
            "signature": base64.b64encode(private_key.sign(_message(doc, signed_file))).decode()}


def _field(sig: dict, key: str) -> str | None:
    value = sig.get(key)
    return value if isinstance(value, str) else None


def _decoded(text: str | None, size: int) -> bytes | None:
    try:
        raw = base64.b64decode(text or "", validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


def read_signature(path) -> dict:
    """The signature document at `path` (a bounded regular file of JSON, duplicate keys refused)."""
    doc = parse_json(read_input(path, "signature", "signature"), "signature")
    if not isinstance(doc, dict):
        raise InvalidParameter("signature", str(path), "a JSON object (a privcheck signature document)")
    return doc


def signature_problems(doc: dict, sig: dict | None, signed_file: str, trusted=None) -> tuple[list[str], str]:
    """(problems, a one-line account of the signature) for the sealed `doc` read from `signed_file` and its
    signature document `sig` (None: unsigned). With `trusted` (a public key) an unsigned document, or one signed
    by another key, is a problem; without it a signature is checked against the key it names, which shows that
    the document was not changed since that key signed it, not who holds the key."""
    _, ed25519 = _crypto("trust")
    if sig is None:
        if trusted is not None:
            return [f"not signed: {SIGNATURE} is missing, and --trust requires a signature by "
                    f"{fingerprint(trusted)}"], "none"
        return [], "none (the document is not signed)"
    if sig.get("schema") != SIGNATURE_SCHEMA or sig.get("algorithm") != ALGORITHM:
        return [f"{SIGNATURE} is not a {SIGNATURE_SCHEMA} {ALGORITHM} signature document"], "unreadable"
    if sig.get("signed_file") != signed_file:
        return [f"{SIGNATURE} signs {sig.get('signed_file')!r}, not {signed_file!r}"], "for another file"
    raw_key, raw_sig = _decoded(_field(sig, "public_key"), 32), _decoded(_field(sig, "signature"), 64)
    if raw_key is None or raw_sig is None:
        return [f"{SIGNATURE}: public_key or signature is not base64 of an {ALGORITHM} key or signature"], \
            "unreadable"
    try:
        signer = ed25519.Ed25519PublicKey.from_public_bytes(raw_key)
    except ValueError:
        return [f"{SIGNATURE}: public_key is not an {ALGORITHM} public key"], "unreadable"
    who = fingerprint(signer)
    problems = []
    if trusted is not None and _raw(trusted) != raw_key:
        problems.append(f"signed by {who}, not by the trusted key {fingerprint(trusted)}")
    try:
        signer.verify(raw_sig, _message(doc, signed_file))
    except Exception:                   # noqa: BLE001 — cryptography's InvalidSignature
        problems.append(f"the {ALGORITHM} signature by {who} does not verify: the document was changed after "
                        "it was signed, or the signature is not of this document")
    if problems:
        return problems, f"INVALID ({who})"
    if trusted is not None:
        return [], f"valid {ALGORITHM} signature by the trusted key {who}"
    return [], (f"valid {ALGORITHM} signature by {who}, a key that was not checked against one you trust "
                "(pass --trust PUBKEY)")
