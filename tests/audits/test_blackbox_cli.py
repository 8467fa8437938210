"""`privcheck audit selection` (audits/cli/selection.py), on a parser built here the way privcheck.cli builds
its verbs. Reference values: the exponential-mechanism pair's 0.5000 (docs/audits.md reference values) and ε_BoN(16)
from the closed form of docs/selection.md (mpmath)."""

from __future__ import annotations

import json

import mpmath as mp
import pytest

from privcheck.artifacts.writer import verify_seal
from privcheck.cli import build_parser
from privcheck.errors import InvalidParameter


def _parser():
    """The installed `privcheck` command line (the audit commands come from the entry point)."""
    return build_parser()


def _run(argv, capsys):
    args = _parser().parse_args(["audit", "selection", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_privbon_example_json_and_artifact(tmp_path, capsys):
    out = _run(["--mechanism", "privbon", "--pair", "example", "--samples", "20000", "--seed", "3",
                "--out", str(tmp_path), "--json"], capsys)
    doc = json.loads(out)                                  # exactly one JSON object
    assert doc["method"] == "blackbox_pair"
    assert doc["epsilon_certified"] == pytest.approx(0.5, abs=1e-4)          # reference value 0.5000
    assert doc["exact_log_ratio"] == pytest.approx(0.5, abs=1e-12)
    assert 0 < doc["eps_lower"] <= 0.5 and doc["eps_lower"] == doc["result"]["eps_lower"]
    written = json.loads((tmp_path / "audit.json").read_text())
    assert verify_seal(written) and written["sha256"] == doc["sha256"] and doc["artifact"].endswith("audit.json")
    assert written["result"] == doc["result"]


def test_privbon_worst_pair_table(tmp_path, capsys):
    out = _run(["--mechanism", "privbon", "--sigma", "2", "--candidates", "16", "--samples", "20000", "--seed", "1",
                "--out", str(tmp_path)], capsys)
    assert "eps_lower" in out and "epsilon certified (claim)" in out
    doc = json.loads((tmp_path / "audit.json").read_text())
    mp.mp.dps = 50
    exact = mp.log(1 + 15 * mp.e ** mp.mpf(0.5)) - mp.log(1 + 15 * mp.e ** mp.mpf(-0.5))   # ε_BoN(16), Δ = R = 1
    assert doc["claim"]["epsilon"] == pytest.approx(float(exact), abs=1e-9)
    assert doc["result"]["eps_lower"] <= doc["claim"]["epsilon"]
    assert doc["claim"]["mechanism"]["name"] == "privbon"


def test_privitp_auto_lambda_and_fallback_target(tmp_path, capsys):
    out = _run(["--mechanism", "privitp", "--target", "fallback", "--samples", "40000", "--seed", "2",
                "--out", str(tmp_path), "--json"], capsys)
    doc = json.loads(out)
    params = doc["claim"]["mechanism"]["params"]
    assert params["target"] == "fallback" and doc["claim"]["accountant"] == "ex_post"
    assert doc["exact_log_ratio"] <= doc["epsilon_certified"] + 1e-9    # the claim covers the exact loss
    assert 0 < doc["eps_lower"] <= doc["epsilon_certified"]


def test_privitp_phase1_thresholds(tmp_path, capsys):
    out = _run(["--mechanism", "privitp", "--pair", "phase1", "--sigma", "0.25", "--samples", "20000", "--seed", "4",
                "--out", str(tmp_path), "--json"], capsys)
    doc = json.loads(out)
    assert doc["result"]["event"]["op"] in (">=", "<=") and doc["claim"]["delta"] == 1e-5
    assert doc["claim"]["epsilon"] == pytest.approx(4.377178, abs=1e-6)    # ε(μ = 1, δ = 1e-5) of the μ-GDP curve
    assert doc["eps_lower"] <= doc["claim"]["epsilon"]


@pytest.mark.parametrize("argv,name", [
    (["--mechanism", "privbon", "--samples", "1"], "samples"),
    (["--mechanism", "privbon", "--samples", "100", "--confidence", "1.5"], "confidence"),
    (["--mechanism", "privbon", "--samples", "100", "--delta", "1"], "delta"),
    (["--mechanism", "privbon", "--samples", "100", "--split-frac", "0"], "split_frac"),
    (["--mechanism", "privbon", "--samples", "100", "--sigma", "-1"], "sigma"),
    (["--mechanism", "privbon", "--samples", "100", "--pair", "phase1"], "pair"),
    (["--mechanism", "privitp", "--samples", "100", "--target", "9"], "target"),
    (["--mechanism", "privitp", "--samples", "100", "--lambda-tilde", "x"], "lambda_tilde"),
    (["--mechanism", "privitp", "--samples", "100", "--pair", "phase1", "--delta", "0"], "delta"),
])
def test_bad_input_writes_nothing(tmp_path, argv, name):
    out = tmp_path / "out"
    args = _parser().parse_args(["audit", "selection", *argv, "--out", str(out)])
    with pytest.raises(InvalidParameter) as info:
        args.func(args)
    assert info.value.name == name
    assert not out.exists()
