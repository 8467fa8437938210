"""The seal of an artifact: sha256 over the canonical JSON of the document without its own `sha256` field.

A checksum anyone can recompute, not a signature: docs/artifacts.md says what it proves and how to sign a file.
"""

from __future__ import annotations

import hashlib

from privcheck.serialization import canonical_json

__all__ = ["seal", "sha256_of", "verify_seal"]


def sha256_of(document: dict) -> str:
    """sha256 over the canonical JSON of the document without its own `sha256` field."""
    body = {k: val for k, val in document.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(document: dict) -> dict:
    """Return a copy with `sha256` set (sealing a sealed document gives the same seal)."""
    sealed = dict(document)
    sealed["sha256"] = sha256_of(document)
    return sealed


def verify_seal(document: dict) -> bool:
    """Whether the stored `sha256` is the recomputed one (False for a document without a seal)."""
    return isinstance(document, dict) and document.get("sha256") == sha256_of(document)
