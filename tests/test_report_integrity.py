"""`privcheck report`: the seal and every count it shows are recomputed from the checks; a document that does not
check out exits 1 with a first-line warning, unreadable input exits 2 with one error line and writes nothing."""

from __future__ import annotations

import json

import pytest

from privcheck.artifacts import (
    ArtifactInconsistent,
    CheckResult,
    SuiteResult,
    check_artifact,
    count_checks,
    seal,
)
from privcheck.artifacts.integrity import consistency_problems
from privcheck.cli import main
from tests.artifact_fixtures import copy_for_test, report, verify_suites
from tests.artifact_fixtures import reseal as rewrite

EXIT_PROBLEMS = 1          # docs/artifacts.md: the report's exit code for an artifact that does not check out


def _two_suites_a(seed=None):
    res = SuiteResult(name="alpha")
    for name, ok in (("two_plus_two", 2 + 2 == 4), ("three_times_three", 3 * 3 == 9)):
        res.checks.append(CheckResult(name=name, suite="alpha", passed=ok, observed=1, expected=1, tolerance=0,
                                      reference="arithmetic"))
    return res


def _two_suites_b(seed=None):
    res = SuiteResult(name="beta")
    res.checks.append(CheckResult(name="ten_over_four", suite="beta", passed=10 / 4 == 2.5, observed=2.5,
                                  expected=2.5, tolerance=0, reference="arithmetic"))
    return res


def _with_figure(suite, name):
    def run(seed=None):
        res = suite(seed)
        res.figures[name] = {"title": name, "x_label": "x", "y_label": "y", "x": [1, 2], "series": {"s": [1.0, 2.0]}}
        return res
    return run


_plotted_a = _with_figure(_two_suites_a, "alpha_curve")
_plotted_b = _with_figure(_two_suites_b, "beta_curve")
SUITES = {"alpha": "tests.test_report_integrity:_two_suites_a", "beta": "tests.test_report_integrity:_two_suites_b"}
PLOTTED = {"alpha": "tests.test_report_integrity:_plotted_a", "beta": "tests.test_report_integrity:_plotted_b"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A verification artifact of 3 passing checks (alpha: 2, beta: 1), written once by `privcheck verify`."""
    return verify_suites(tmp_path_factory.mktemp("pristine") / "out", SUITES)


@pytest.fixture
def sealed_dir(pristine, tmp_path, capsys):
    """A copy of the pristine artifact directory for one test to edit."""
    return copy_for_test(pristine, tmp_path, capsys)


def _rewrite(out, mutate, *, reseal: bool):
    rewrite(out, mutate, reseal=reseal)


_report = report


def test_intact_artifact_reports_counts_recomputed_from_the_checks(sealed_dir, capsys):
    code, out, err = _report(sealed_dir, capsys, "--json")
    payload = json.loads(out)
    assert code == 0 and err == ""
    assert payload["intact"] is True and payload["warning"] is None and payload["problems"] == []
    assert (payload["status"], payload["checks"], payload["passed"], payload["failed"]) == ("pass", 3, 3, 0)
    assert payload["suites"] == {"alpha": {"checks": 2, "passed": 2, "failed": 0},
                                 "beta": {"checks": 1, "passed": 1, "failed": 0}}
    report = (sealed_dir / "report.md").read_text()
    assert report.startswith("# privcheck verification report") and "WARNING" not in report
    assert "**PASS** (3/3 checks passed" in report and "intact" in report
    assert "| alpha | 2 | 2 | 0 |" in report and "| beta | 1 | 1 | 0 |" in report


def _flip(doc):
    doc["checks"][0]["passed"] = False
    doc["checks"][0]["status"] = "fail"


TAMPERING = {
    # name: (mutation, re-sealed after the edit, a phrase the problems must contain)
    "tampered seal": (lambda d: d.update(sha256="0" * 64), False, "sha256 seal mismatch"),
    "edited number": (lambda d: d["checks"][2].update(observed=99.0), False, "sha256 seal mismatch"),
    "flipped check": (_flip, True, "status 'pass' contradicts the checks"),
    "flipped check, seal not updated": (_flip, False, "sha256 seal mismatch"),
    "inconsistent summary": (lambda d: d["summary"].update(passed=2, failed=1), True, "summary.passed = 2"),
    "passed contradicts status": (lambda d: d["checks"][1].update(status="error"), True, "contradicts status='error'"),
    "release flag": (lambda d: d.update(privacy_release=True), True, "privacy_release"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_a_document_that_does_not_check_out_exits_3_with_the_warning_first(sealed_dir, capsys, case):
    mutate, reseal, phrase = TAMPERING[case]
    _rewrite(sealed_dir, mutate, reseal=reseal)
    code, out, err = _report(sealed_dir, capsys)
    assert code == EXIT_PROBLEMS and err == ""
    first = out.splitlines()[0]
    assert first.startswith("WARNING:") and "verification.json does not check out" in first
    assert phrase in out
    report = (sealed_dir / "report.md").read_text()
    assert report.splitlines()[0].startswith("> **WARNING:") and phrase in report.split("# privcheck")[0]

    code, out, _ = _report(sealed_dir, capsys, "--json")
    payload = json.loads(out)
    assert code == EXIT_PROBLEMS and payload["intact"] is False and payload["warning"].startswith("WARNING:")
    assert any(phrase in p for p in payload["problems"])


def test_a_flipped_check_is_counted_as_failed_not_as_the_stored_summary_says(sealed_dir, capsys):
    _rewrite(sealed_dir, _flip, reseal=True)              # status and summary still say 3/3 passed
    code, out, _ = _report(sealed_dir, capsys, "--json")
    payload = json.loads(out)
    assert (payload["status"], payload["passed"], payload["failed"]) == ("fail", 2, 1)
    assert payload["suites"]["alpha"] == {"checks": 2, "passed": 1, "failed": 1}
    report = (sealed_dir / "report.md").read_text()
    assert "**FAIL** (2/3 checks passed" in report and "3/3" not in report


def test_an_edited_number_is_never_shown_as_intact(sealed_dir, capsys):
    _rewrite(sealed_dir, TAMPERING["edited number"][0], reseal=False)
    _report(sealed_dir, capsys)
    report = (sealed_dir / "report.md").read_text()
    seal_line = next(line for line in report.splitlines() if line.startswith("- sha256:"))
    assert "MISMATCH" in seal_line and "intact" not in seal_line
    assert "NOT verified" in next(line for line in report.splitlines() if line.startswith("- status:"))


def test_a_schema_invalid_document_is_reported_but_not_rendered(sealed_dir, capsys):
    _rewrite(sealed_dir, lambda d: d.update(status="maybe"), reseal=True)
    code, out, _ = _report(sealed_dir, capsys)
    assert code == EXIT_PROBLEMS and out.startswith("WARNING:") and "schema privcheck.verification/1" in out
    report = (sealed_dir / "report.md").read_text()
    assert report.startswith("> **WARNING:") and "## Checks" not in report


UNREADABLE = {
    "corrupt JSON": lambda text: "{\"schema\": ",
    "a JSON array": lambda text: "[1, 2, 3]",
    "truncated": lambda text: text[: len(text) // 2],
    "no sha256": lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "sha256"}),
    "empty": lambda text: "",
    "duplicate key": lambda text: text.replace('"status":', '"status": "pass", "status":', 1),
    "NaN": lambda text: text.replace('"observed": 2.5', '"observed": NaN', 1),
}


def _snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_unreadable_input_exits_2_with_one_line_and_writes_nothing(sealed_dir, capsys, case):
    path = sealed_dir / "verification.json"
    broken = UNREADABLE[case](path.read_text())
    assert broken != path.read_text()
    path.write_text(broken)
    before = _snapshot(sealed_dir)
    code, out, err = _report(sealed_dir, capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("privcheck: error: cannot read artifact ")
    assert str(path) in err
    assert _snapshot(sealed_dir) == before


def test_missing_artifact_or_directory_exits_2(tmp_path, capsys):
    for target in (tmp_path / "absent", tmp_path):
        code, out, err = _report(target, capsys)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and "verification.json" in err
    assert list(tmp_path.iterdir()) == []


def test_verify_writes_only_a_document_that_checks_out(tmp_path, monkeypatch):
    from privcheck.verify import run_verification, write_verification

    monkeypatch.setattr("privcheck.verify.available_suites", lambda: SUITES)
    doc = run_verification(["alpha"])
    assert check_artifact(doc) == []
    bad = seal({**{k: v for k, v in doc.items() if k != "sha256"}, "summary": {**doc["summary"], "failed": 1}})
    with pytest.raises(ArtifactInconsistent, match="summary.failed"):
        write_verification(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_rerun_removes_the_plots_of_the_earlier_run_that_it_does_not_make(tmp_path, monkeypatch):
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: PLOTTED)
    sealed_dir = tmp_path / "out"
    assert main(["verify", "--out", str(sealed_dir), "--suite", "alpha", "beta"]) == 0
    assert {p.name for p in sealed_dir.glob("*.png")} == {"alpha_curve.png", "beta_curve.png"}
    (sealed_dir / "notes.txt").write_text("the user's own file")
    assert main(["report", str(sealed_dir)]) == 0                 # a re-render keeps the set as it is
    assert main(["verify", "--out", str(sealed_dir), "--suite", "alpha"]) == 0
    assert {p.name for p in sealed_dir.glob("*.png")} == {"alpha_curve.png"}
    assert (sealed_dir / "notes.txt").exists() and "beta_curve" not in (sealed_dir / "report.md").read_text()


def test_count_checks_by_hand():
    checks = [{"suite": "a", "passed": True, "status": "pass"}, {"suite": "a", "passed": False, "status": "error"},
              {"suite": "b", "passed": False, "status": "skipped"}, {"suite": "b", "passed": True}]
    counts = count_checks(checks)
    assert (counts["checks"], counts["passed"], counts["failed"], counts["status"]) == (4, 2, 2, "fail")
    assert counts["by_status"] == {"error": 1, "pass": 2, "skipped": 1}
    assert counts["suites"] == {"a": {"checks": 2, "passed": 1, "failed": 1}, "b": {"checks": 2, "passed": 1,
                                                                                  "failed": 1}}


def test_rules_of_the_other_kinds():
    compare = {"status": "complete", "runs": [{"status": "complete"}, {"status": "incomplete"}]}
    assert len(consistency_problems(compare, "dpgrpo_compare")) == 1
    assert consistency_problems({**compare, "status": "incomplete"}, "dpgrpo_compare") == []
    run = {"privacy_release": True, "status": "incomplete", "verification": {"status": "pass"}}
    assert len(consistency_problems(run, "dpgrpo_run")) == 1
    released = {"privacy_release": True, "randomness": {"privacy_release": False}}
    assert len(consistency_problems(released, "simulation")) == 1
    assert check_artifact([1]) == ["not a JSON object (a list)"]
    assert any("unknown schema" in p for p in check_artifact({"schema": "nope/1", "sha256": "x"}))
