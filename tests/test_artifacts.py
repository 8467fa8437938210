"""Artifact format: schema validation, sealing, atomic writes, report rendering."""

import copy
import hashlib
import json
import os

import jsonschema
import pytest

from privcheck.artifacts import (
    ArtifactDirectory,
    CheckResult,
    Claim,
    SuiteResult,
    canonical_json,
    render_markdown,
    seal,
    sha256_of,
    validate,
    verify_seal,
    write_atomic,
)
from privcheck.errors import InvalidParameter
from privcheck.verify import run_verification


def _tiny_suite(seed=None):
    res = SuiteResult(name="tiny")
    res.checks.append(CheckResult(name="one_plus_one", suite="tiny", passed=(1 + 1 == 2), observed=2, expected=2,
                                  tolerance=0, reference="arithmetic"))
    res.claims.append(Claim(mechanism="m", epsilon=1.0, delta=1e-5, neighboring="add_remove",
                            assumptions=("a",)))
    return res


@pytest.fixture
def tiny_doc(monkeypatch):
    monkeypatch.setattr("privcheck.verify.BUILTIN_SUITES", {"tiny": "tests.test_artifacts:_tiny_suite"})
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"tiny": "tests.test_artifacts:_tiny_suite"})
    return run_verification(["tiny"])


def test_sha256_is_over_canonical_json_without_the_field(tiny_doc):
    body = {k: v for k, v in tiny_doc.items() if k != "sha256"}
    expected = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False).encode()).hexdigest()
    assert tiny_doc["sha256"] == expected
    assert verify_seal(tiny_doc)


def test_tampering_breaks_the_seal(tiny_doc):
    doc = copy.deepcopy(tiny_doc)
    doc["claims"][0]["epsilon"] = 0.5
    assert not verify_seal(doc)


def test_document_validates_and_schema_rejects_defects(tiny_doc):
    validate(tiny_doc)
    for mutate in (lambda d: d.pop("environment"),
                   lambda d: d.update(status="maybe"),
                   lambda d: d["randomness"].update(mode="seeded", seed=1, privacy_release=True),
                   lambda d: d.update(sha256="abc"),
                   lambda d: d["checks"][0].pop("reference"),
                   lambda d: d.update(unexpected_key=1)):
        doc = copy.deepcopy(tiny_doc)
        mutate(doc)
        with pytest.raises(jsonschema.ValidationError):
            validate(doc)


def test_seeded_mode_is_marked_not_a_privacy_release(monkeypatch):
    def seeded_suite(seed=None):
        r = _tiny_suite(seed)
        r.randomness = "seeded"
        return r
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"s": "x:y"})
    monkeypatch.setattr("privcheck.verify._load", lambda target: seeded_suite)
    doc = run_verification(["s"], seed=7)
    assert doc["randomness"] == {"mode": "seeded", "seed": 7, "privacy_release": False,
                                 "note": "not a privacy release: seeded randomness"}
    assert doc["privacy_release"] is False


def test_canonical_json_rejects_non_finite():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()


def test_write_atomic_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def test_write_atomic_failure_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "a.json"
    write_atomic(target, b"old")

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def test_artifact_directory_writes_several_files(tmp_path):
    with ArtifactDirectory(tmp_path / "out") as staging:
        staging.write_bytes("x.json", b"{}")
        staging.write_text("r.md", "# r")
    assert (tmp_path / "out" / "x.json").read_bytes() == b"{}"
    assert (tmp_path / "out" / "r.md").read_text() == "# r"


def test_check_result_rejects_bad_status():
    with pytest.raises(InvalidParameter, match="status"):
        CheckResult(name="x", suite="s", passed=True, observed=1, expected=1, tolerance=0, reference="r",
                    status="maybe")
    with pytest.raises(InvalidParameter, match="passed"):
        CheckResult(name="x", suite="s", passed=True, observed=1, expected=1, tolerance=0, reference="r",
                    status="fail")


def test_markdown_report_lists_every_check_and_failures(tiny_doc):
    doc = copy.deepcopy(tiny_doc)
    doc["checks"].append({**doc["checks"][0], "name": "broken_check", "passed": False, "status": "fail",
                          "message": "it broke"})
    doc["status"] = "fail"
    doc["summary"].update(checks=2, passed=1, failed=1)
    doc = seal({k: v for k, v in doc.items() if k != "sha256"})
    text = render_markdown(doc)
    assert "one_plus_one" in text and "broken_check" in text and "**FAIL**" in text and "it broke" in text
    assert "(1/2 checks passed" in text and "intact" in text and "WARNING" not in text
    assert sha256_of(doc) == doc["sha256"]
