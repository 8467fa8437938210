"""Canonical JSON, sha256 and atomic writes (temp file in the same directory, fsync, rename)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def canonical_json(obj) -> bytes:
    """Sorted keys, no whitespace, UTF-8, NaN/inf forbidden (records encode them as strings)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_of(document: dict) -> str:
    """sha256 over the canonical JSON of the document without its own `sha256` field."""
    body = {k: val for k, val in document.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(document: dict) -> dict:
    """Return a copy with `sha256` set."""
    sealed = dict(document)
    sealed["sha256"] = sha256_of(document)
    return sealed


def verify_seal(document: dict) -> bool:
    return document.get("sha256") == sha256_of(document)


def write_atomic(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> Path:
    """Write `data` to `path` so that readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_files_atomic(directory: str | os.PathLike, files: dict[str, bytes]) -> list[Path]:
    """Write several files; every file is fully rendered before the first one is replaced."""
    directory = Path(directory)
    return [write_atomic(directory / name, data) for name, data in files.items()]


def dump_json(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()
