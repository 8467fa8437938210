"""Regenerate the stored reference values of tests/accounting (see tests/accounting/reference_store.py).

    .venv/bin/python tests/accounting/reference_data/make_references.py [test files ...]

Runs the fast tier of the named test files (default: every file that uses a store) in one pytest process with
PRIVCHECK_RECORD_REFERENCES=1: every reference call is computed live (nothing is read from the old files) and each
store writes reference_data/<store>.json at exit, with the library versions and the mpmath precision it used.
Only references are stored, never a privcheck figure. Takes several minutes (the references are the slow part).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FILES = (
    "tests/accounting/test_pld_certified.py",
    "tests/accounting/test_dpsgd.py",
    "tests/accounting/test_events.py",
    "tests/accounting/test_calibration.py",
    "tests/accounting/test_plan.py",
    "tests/accounting/test_gaussian_selection.py",
    "tests/accounting/test_selection_edges.py",
    "tests/accounting/test_gaussian_edges.py",
    "tests/accounting/test_selection_accounting.py",
)


def main(argv: list[str]) -> int:
    files = argv or list(FILES)
    env = {**os.environ, "PRIVCHECK_RECORD_REFERENCES": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-m", "not slow",
           *files]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
