"""`privcheck audit ...`: headline keys, reference values (docs/audits.md), tables, artifacts, and errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from privcheck.artifacts.schema import validate
from privcheck.artifacts.writer import verify_seal
from privcheck.cli import main

ONE_RUN = ["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "90", "--delta", "1e-5",
           "--confidence", "0.95"]
CP = ["audit", "clopper-pearson", "--runs-in", "1000", "--runs-out", "1000", "--false-negatives", "0",
      "--false-positives", "0", "--delta", "1e-5", "--confidence", "0.95"]
GDP = ["audit", "gdp", "--runs-in", "1000", "--runs-out", "1000", "--false-negatives", "0", "--false-positives", "0",
       "--delta", "1e-5", "--confidence", "0.95"]
FDP = ["audit", "fdp-one-run", "--canaries", "1000", "--guesses", "100", "--correct", "100", "--delta", "1e-5",
       "--confidence", "0.95"]


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1                                       # ONE JSON object
    return json.loads(lines[0])


def _report_part(out: dict) -> dict:
    return {k: v for k, v in out.items() if k not in ("eps_lower", "p_value_at_nominal", "rejects_nominal",
                                                      "mu_lower", "eps_estimate_gdp_family", "artifact",
                                                      "underpowered", "plan_note")}


def test_one_run_json(capsys):
    out = run_json(capsys, *ONE_RUN, "--epsilon-nominal", "1")
    assert out["eps_lower"] == pytest.approx(1.626143, abs=1e-6)
    assert out["p_value_at_nominal"] == pytest.approx(8.412886e-04, rel=1e-6)
    assert out["rejects_nominal"] is True
    assert out["eps_lower"] == out["result"]["eps_lower"] and out["method"] == "steinke_one_run"
    validate(out, name="audit.schema.json")


def test_one_run_without_nominal_has_null_headlines(capsys):
    out = run_json(capsys, *ONE_RUN)
    assert out["p_value_at_nominal"] is None and out["rejects_nominal"] is None


def test_clopper_pearson_json(capsys):
    out = run_json(capsys, *CP)
    assert out["eps_lower"] == pytest.approx(5.6006, abs=1e-4)
    assert out["result"]["fpr_up"] == pytest.approx(1 - 0.025 ** (1 / 1000), rel=1e-12)
    validate(out, name="audit.schema.json")


@pytest.mark.parametrize("argv, mu", [(GDP, None), (FDP, 1.225533)])
def test_gdp_family_json_never_has_eps_lower(capsys, argv, mu):
    out = run_json(capsys, *argv)
    text = json.dumps(out)
    assert '"eps_lower"' not in text
    assert {"mu_lower", "eps_estimate_gdp_family", "extra_assumptions"} <= set(out)
    assert out["extra_assumptions"] == ["gaussian_tradeoff"]
    if mu is not None:
        assert out["mu_lower"] == pytest.approx(mu, abs=1e-6)
    validate(out, name="audit.schema.json")


def test_tables(capsys):
    assert main(ONE_RUN + ["--epsilon-nominal", "1"]) == 0
    table = capsys.readouterr().out
    assert "eps_lower" in table and "1.626143" in table and "rejects_nominal" in table
    assert main(FDP) == 0
    table = capsys.readouterr().out
    assert "mu_lower" in table and "gaussian_tradeoff" in table and "eps_lower " not in table


def test_out_writes_the_printed_artifact(capsys, tmp_path):
    out = run_json(capsys, *CP, "--out", str(tmp_path / "a"))
    path = tmp_path / "a" / "audit.json"
    doc = json.loads(path.read_text())
    assert verify_seal(doc) and out["artifact"] == str(path)
    assert _report_part(out) == doc


BAD = [
    (["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "101", "--delta", "1e-5"], "correct"),
    (["audit", "one-run", "--canaries", "10", "--guesses", "100", "--correct", "1", "--delta", "1e-5"], "guesses"),
    (["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "-1", "--delta", "1e-5"], "correct"),
    (ONE_RUN[:-2] + ["--confidence", "1.0"], "confidence"),
    (ONE_RUN[:-2] + ["--confidence", "0"], "confidence"),
    (["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "90", "--delta", "1.5"], "delta"),
    (["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "90", "--delta", "1e999"], "delta"),
    (ONE_RUN + ["--epsilon-nominal", "-1"], "eps_nominal"),
    (["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--delta", "1e-5"], "correct"),
    (["audit", "one-run", "--delta", "1e-5"], "canaries"),
    (ONE_RUN + ["--k-plus", "10"], "k_plus"),
    (ONE_RUN + ["--scores", "s.csv"], "canaries"),
    (["audit", "clopper-pearson", "--runs-in", "10", "--runs-out", "10", "--false-negatives", "11",
      "--false-positives", "0", "--delta", "1e-5"], "false_negatives"),
    (["audit", "clopper-pearson", "--runs-in", "10", "--runs-out", "10", "--false-negatives", "0",
      "--false-positives", "-2", "--delta", "1e-5"], "false_positives"),
    (["audit", "gdp", "--runs-in", "10", "--runs-out", "10", "--false-negatives", "0", "--false-positives", "0",
      "--delta", "-0.1"], "delta"),
    (["audit", "fdp-one-run", "--canaries", "100", "--guesses", "10", "--correct", "11", "--delta", "1e-5"],
     "correct"),
]


@pytest.mark.parametrize("argv, name", BAD)
def test_bad_input_exits_2_and_writes_nothing(capsys, tmp_path, argv, name):
    out_dir = tmp_path / "never"
    code = main([*argv, "--json", "--out", str(out_dir)])
    captured = capsys.readouterr()
    assert code == 2
    assert f"invalid {name}=" in captured.err and captured.out == ""
    assert not out_dir.exists()
