"""Small verification artifacts for the report tests: `privcheck verify` run in-process on a few tiny suites given
as "module:function" targets, a copy for one test to edit, and a re-sealed edit as a forger would make it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from privcheck.artifacts import seal
from privcheck.cli import main

__all__ = ["copy_for_test", "report", "reseal", "verify_suites"]


def verify_suites(out: Path, suites: dict[str, str], *extra: str) -> Path:
    """`privcheck verify --out OUT --suite ...` with the registry replaced by `suites`; asserts exit 0."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("privcheck.verify.available_suites", lambda: suites)
        assert main(["verify", "--out", str(out), "--suite", *suites, *extra]) == 0
    return out


def copy_for_test(pristine: Path, tmp_path: Path, capsys) -> Path:
    """A copy of an artifact directory for one test to edit (the output of making it is discarded)."""
    capsys.readouterr()
    return Path(shutil.copytree(pristine, tmp_path / "out"))


def reseal(out: Path, mutate, *, recount: bool = False, reseal: bool = True) -> None:
    """Apply `mutate` to OUT/verification.json; `recount` makes the stored summary and status agree with the
    checks, and `reseal` recomputes the seal, as a careful forger would."""
    path = out / "verification.json"
    doc = json.loads(path.read_text())
    mutate(doc)
    if recount:
        passed = sum(c["passed"] for c in doc["checks"])
        doc["summary"].update(checks=len(doc["checks"]), passed=passed, failed=len(doc["checks"]) - passed)
        doc["status"] = "pass" if passed == len(doc["checks"]) else "fail"
    if reseal:
        doc = seal({k: v for k, v in doc.items() if k != "sha256"})
    path.write_text(json.dumps(doc))


def report(out: Path, capsys, *extra: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `privcheck report OUT EXTRA...`."""
    code = main(["report", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
