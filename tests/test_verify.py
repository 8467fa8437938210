"""`privcheck verify`: the accounting suite end to end, failure exit codes, and no partial artifacts."""

import json

import pytest

from privcheck.artifacts import CheckResult, SuiteResult, validate, verify_seal
from privcheck.cli import main


@pytest.fixture(scope="module")
def accounting_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify")
    code = main(["verify", "--out", str(out), "--suite", "accounting"])
    return code, out


def test_accounting_suite_passes_and_artifact_validates(accounting_run):
    code, out = accounting_run
    doc = json.loads((out / "verification.json").read_text())
    assert code == 0 and doc["status"] == "pass"
    validate(doc)
    assert verify_seal(doc)
    names = {c["name"] for c in doc["checks"]}
    # every Table VI row, the JAX-Privacy row and the calibration are checked
    assert sum(n.startswith("table_vi.") and n.endswith(".pld") for n in names) == 7
    assert {"jax_privacy_reference.pld", "calibration.math_eps8"} <= names
    assert doc["environment"]["packages"]["dp-accounting"] == "0.6.0"
    assert doc["privacy_release"] is False and doc["randomness"]["mode"] == "deterministic"


def test_report_written_and_rerenderable(accounting_run):
    code, out = accounting_run
    report = (out / "report.md").read_text()
    assert "PASS" in report and "table_vi.math_eps8_reference.pld" in report
    assert (out / "epsilon_vs_sigma.png").stat().st_size > 1000
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").exists()


def _failing_suite(seed=None):
    return SuiteResult(name="bad", checks=[CheckResult(name="always_wrong", suite="bad", passed=1 + 1 == 3,
                                                       observed=2, expected=3, tolerance=0, reference="arithmetic")])


def _crashing_suite(seed=None):
    raise RuntimeError("suite crashed before finishing")


def test_failed_check_exits_1(tmp_path, monkeypatch):
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"bad": "tests.test_verify:_failing_suite"})
    assert main(["verify", "--out", str(tmp_path), "--suite", "bad"]) == 1
    doc = json.loads((tmp_path / "verification.json").read_text())
    assert doc["status"] == "fail" and doc["summary"]["failed"] == 1


def test_crash_writes_no_partial_artifact(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"boom": "tests.test_verify:_crashing_suite"})
    assert main(["verify", "--out", str(tmp_path / "out"), "--suite", "boom"]) == 3     # internal error, one line
    assert capsys.readouterr().err == ("privcheck: internal error: RuntimeError: suite crashed before finishing "
                                       "(rerun with --debug for the traceback)\n")
    assert not (tmp_path / "out").exists()


def test_unknown_suite_is_an_error(tmp_path, capsys):
    assert main(["verify", "--out", str(tmp_path), "--suite", "nonexistent"]) == 2
    assert "suite" in capsys.readouterr().err
    assert not (tmp_path / "verification.json").exists()
