"""Library versions and platform facts recorded in every record and artifact."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path

__all__ = ["NUMERIC_PACKAGES", "OPTIONAL_PACKAGES", "environment", "git_commit", "library_versions",
           "package_version"]

NUMERIC_PACKAGES = ("privcheck", "dp-accounting", "python-flint", "mpmath", "numpy", "scipy", "jsonschema")
OPTIONAL_PACKAGES = ("torch", "transformers", "peft", "matplotlib", "hypothesis", "opacus", "trl", "accelerate",
                     "datasets", "prv-accountant", "cryptography")


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def library_versions() -> dict[str, str]:
    """Versions of the packages that change reported numbers (always present)."""
    return {name: package_version(name) or "absent" for name in NUMERIC_PACKAGES}


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict:
    """Everything an artifact records about where it was produced."""
    packages = dict(library_versions())
    packages.update({name: package_version(name) or "absent" for name in OPTIONAL_PACKAGES})
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": packages,
        "device": "cpu",
        "precision": "float64 for speed paths; Arb balls (python-flint) for certified figures",
        "git_commit": git_commit(),
    }
