"""Issue 24 item 3, "the plan travels with the audit": every audit command records its power plan and its verdict
(`audits.statistics.power.assess`) in the report's `power` block, prints them, and says UNDERPOWERED in its first line
when the plan cannot reach UNDERPOWERED_FRACTION of the claim's ε, with the canary count that would.

Expected counts come from the p-value itself (audits.statistics.pvalue.p_value at N and N − 1), not from the search that
produced them; plans are seeded."""

from __future__ import annotations

import json

import pytest

from audits.statistics.power import UNDERPOWERED_FRACTION, assess, plan
from audits.statistics.pvalue import p_value
from privcheck.artifacts.schema import validate
from privcheck.cli import main
from privcheck.errors import InvalidParameter

ONE_RUN = ["audit", "one-run", "--guesses", "10", "--correct", "10", "--delta", "1e-5"]


def _lines(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out.strip().splitlines()


def _json(capsys, argv):
    lines = _lines(capsys, [*argv, "--json"])
    assert len(lines) == 1                                    # one JSON object, warning included
    return json.loads(lines[0])


def _is_ceiling_count(n: int, eps: float) -> bool:
    """n is the least m whose all-correct audit of m canaries rejects ε at δ = 1e-5, p = 0.05."""
    return p_value(n, n, n, eps, 1e-5) < 0.05 <= p_value(n - 1, n - 1, n - 1, eps, 1e-5)


def test_fraction_is_one_half():
    assert UNDERPOWERED_FRACTION == 0.5


def test_one_run_underpowered_first_line_json_and_artifact(capsys, tmp_path):
    """50 canaries cannot certify 0.5 × 8 = 4 even with perfect guessing (ceiling 2.78): UNDERPOWERED first, with
    the ceiling's count for ε = 4."""
    argv = [*ONE_RUN, "--canaries", "50", "--epsilon-nominal", "8"]
    lines = _lines(capsys, argv)
    first = lines[0]
    assert first.startswith("UNDERPOWERED: even perfect guessing certifies at most 2.783 (the ceiling) with m = 50")
    n = int(first.split("at least ")[1].split()[0])
    assert _is_ceiling_count(n, 4.0)
    assert any(line.startswith("plan ") and line.endswith(first) for line in lines[1:])
    out = _json(capsys, [*argv, "--out", str(tmp_path / "a")])
    assert out["underpowered"] is True and out["plan_note"] == first
    assert out["power"]["canaries_needed"] == n and out["power"]["underpowered_fraction"] == 0.5
    validate(out, name="audit.schema.json")
    artifact = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert artifact["power"]["plan_note"] == first
    validate(artifact, name="audit.schema.json")


def test_one_run_ceiling_below_the_claim_is_underpowered(capsys):
    """Ceiling 2.78 with 50 canaries: above 0.5 × 4 but below 4, so no outcome can reject ε = 4."""
    first = _lines(capsys, [*ONE_RUN, "--canaries", "50", "--epsilon-nominal", "4"])[0]
    assert first.startswith("UNDERPOWERED: the ceiling 2.783 (perfect guessing) is below the claim's ε = 4")
    assert _is_ceiling_count(int(first.split("at least ")[1].split()[0]), 4.0)


def test_one_run_without_a_score_model_says_no_plan(capsys):
    lines = _lines(capsys, [*ONE_RUN, "--canaries", "1000", "--epsilon-nominal", "4"])
    assert lines[0].startswith("eps_lower")
    assert any("no plan: no score model, only the ceiling 5.782" in line for line in lines)
    out = _json(capsys, [*ONE_RUN, "--canaries", "1000", "--epsilon-nominal", "4"])
    assert out["underpowered"] is None and out["power"]["plan_note"].startswith("no plan: ")
    validate(out, name="audit.schema.json")


@pytest.mark.parametrize("argv", [
    ["audit", "fdp-one-run", "--canaries", "1000", "--guesses", "100", "--correct", "100", "--delta", "1e-5"],
    ["audit", "clopper-pearson", "--runs-in", "1000", "--runs-out", "1000", "--false-negatives", "0",
     "--false-positives", "0", "--delta", "1e-5"]])
def test_commands_without_a_claim_say_so(capsys, argv):
    lines = _lines(capsys, argv)
    assert not lines[0].startswith("UNDERPOWERED") and "plan  " in "\n".join(lines)
    out = _json(capsys, argv)
    assert out["underpowered"] is None and out["plan_note"] == "no plan verdict: no ε claim to compare with"
    validate(out, name="audit.schema.json")


def test_multi_run_ceiling_below_half_the_claim(capsys):
    """1000 + 1000 runs with no error certify at most about 5.6, below 0.5 × 20."""
    argv = ["audit", "clopper-pearson", "--runs-in", "1000", "--runs-out", "1000", "--false-negatives", "0",
            "--false-positives", "0", "--delta", "1e-5", "--epsilon-nominal", "20"]
    first = _lines(capsys, argv)[0]
    assert first.startswith("UNDERPOWERED: even perfect guessing certifies at most ") and "more runs" in first
    validate(_json(capsys, argv), name="audit.schema.json")


GDP_PLAN = ["audit", "power", "--canaries", "1000", "--delta", "1e-5", "--score-model", "gdp:2", "--sims", "50",
            "--seed", "1"]


def test_power_command_powered_and_underpowered(capsys):
    """gdp(2) with 1000 canaries plans 3.28 (median 3.56, seed 1): powered for a claim of 2, UNDERPOWERED for 8."""
    powered = _lines(capsys, [*GDP_PLAN, "--epsilon-nominal", "2"])
    assert not powered[0].startswith("UNDERPOWERED") and any(line.startswith("plan ") and "powered: " in line
                                                              for line in powered)
    under = _lines(capsys, [*GDP_PLAN, "--epsilon-nominal", "8"])
    assert under[0].startswith("UNDERPOWERED: planned ε_lower 3.277 (Monte Carlo median 3.564) with m = 1000")
    out = _json(capsys, [*GDP_PLAN, "--epsilon-nominal", "8"])
    assert out["underpowered"] is True and out["plan_note"] == under[0] == out["power"]["plan_note"]
    assert out["power"]["planned_eps_lower"] == out["planned_eps_lower"]


def test_assess_searches_the_count_under_the_score_model():
    """gdp(1): 64 canaries plan well below 0.5 × its μ-GDP ε; the search finds a count (a power of two times 64)
    whose own plan reaches the target while half of it does not."""
    from audits.statistics.power import nominal_epsilon

    eps = nominal_epsilon("gdp:1", 1e-5)[0]
    rep = plan(64, delta=1e-5, confidence=0.95, eps_nominal=eps, score_model="gdp:1", sims=20, seed=2)
    verdict = assess(rep, score_model="gdp:1", seed=2)
    assert verdict.underpowered and verdict.canaries_basis == "score_model"
    n = verdict.canaries_needed
    assert n is not None and n % 64 == 0 and f"about {n} canaries would plan" in verdict.line

    def planned(m):
        return plan(m, delta=1e-5, confidence=0.95, eps_nominal=None, score_model="gdp:1", sims=1,
                    seed=2).planned_eps_lower
    assert planned(n) >= 0.5 * eps > planned(n // 2)
    block = verdict.power_block()
    assert block["canaries_needed"] == n and block["underpowered"] is True


def test_assess_validates_the_fraction():
    rep = plan(64, delta=1e-5, confidence=0.95, eps_nominal=1.0, score_model="gdp:1", sims=2, seed=2)
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(InvalidParameter, match="fraction"):
            assess(rep, fraction=bad)
