"""The plan of a one-run audit made from its counts or its scores file (`privcheck audit one-run --score-model`,
`audits.scores_file.audit_scores_file(score_model=...)`, `audits.statistics.power.planned_verdict`; docs/audits.md,
"Underpowered audits").

Independent reference: under the score model gdp:μ (scores N(μ, 1) in, N(0, 1) out, half of each) the precision of
the top-k rule on m canaries is Q(t − μ)/(Q(t − μ) + Q(t)) with t solving (m/2)(Q(t − μ) + Q(t)) = k (normal tails,
scipy); the plan's expected correct count must lie within 1.5 of precision·k (its reference sample of 500,000
scores puts the count within about 0.1 of it; the tolerance is 15 of those standard deviations).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from audits import scores_file as sf
from audits.statistics.power import planned_verdict
from privcheck.cli import main
from privcheck.errors import InvalidParameter

M, R, MU, DELTA, EPS = 1000, 100, 2.0, 1e-5, 4.0


def _top_precision(m: int, k: int, mu: float) -> float:
    t = brentq(lambda x: m / 2 * (norm.sf(x - mu) + norm.sf(x)) - k, -10.0, 40.0)
    return norm.sf(t - mu) / (norm.sf(t - mu) + norm.sf(t))


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_counts_plan_speaks_of_the_audits_own_guesses(capsys):
    """From counts the plan weighs the audit's r guesses, top-only or split evenly (the counts do not say which),
    so its `min_correct_for_nominal` is a count out of r; the planned count matches the normal tails."""
    code, out, _ = _run(capsys, ["audit", "one-run", "--canaries", str(M), "--guesses", str(R), "--correct", "90",
                                 "--delta", str(DELTA), "--epsilon-nominal", str(EPS), "--score-model", f"gdp:{MU}",
                                 "--plan-sims", "50", "--seed", "7", "--json"])
    assert code == 0
    power = json.loads(out)["power"]
    # the report's block holds the plan's figures; the plan itself (same seed) holds its rule and counts
    plan = planned_verdict(M, delta=DELTA, confidence=0.95, eps_nominal=EPS, score_model=f"gdp:{MU}",
                           rules=[(R, 0), (R // 2, R // 2)], sims=50, seed=7).report
    assert power["planned_eps_lower"] == plan.planned_eps_lower and power["mc_median"] == plan.mc_median
    assert plan.guesses == R and (plan.k_plus, plan.k_minus) in ((R, 0), (R // 2, R // 2))
    # a balanced rule's two sides each take R/2 from a symmetric model: both have the top-(R/2) precision
    k_side = R if plan.k_minus == 0 else R // 2
    assert abs(plan.planned_correct - _top_precision(M, k_side, MU) * R) <= 1.5
    assert power["min_correct_for_nominal"] is None or power["min_correct_for_nominal"] <= R
    assert power["score_model"] == plan.score_model and power["mc_p10"] <= power["mc_median"] <= power["mc_p90"]
    assert power["underpowered"] is False and power["plan_note"].startswith("powered:")


def test_an_underpowered_plan_is_the_first_line(capsys):
    """A weak score (gdp:0.5) cannot plan half of ε = 4 with 1,000 canaries: the first line says UNDERPOWERED, the
    audit still runs and exits 0, and the sealed JSON says so."""
    argv = ["audit", "one-run", "--canaries", str(M), "--guesses", str(R), "--correct", "60", "--delta", str(DELTA),
            "--epsilon-nominal", str(EPS), "--score-model", "gdp:0.5", "--plan-sims", "20", "--seed", "1"]
    code, out, _ = _run(capsys, argv)
    assert code == 0 and out.splitlines()[0].startswith("UNDERPOWERED: planned ε_lower")
    code, out, _ = _run(capsys, [*argv, "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["power"]["underpowered"] is True and doc["power"]["planned_eps_lower"] < EPS / 2


def _scores_file(tmp_path):
    rng = np.random.default_rng(3)
    present = rng.integers(0, 2, size=M).astype(bool)
    scores = rng.normal(size=M) + MU * present
    ids = [f"canary-{i:04d}" for i in range(M)]
    return sf.write_scores_file(tmp_path / "s.csv", scores, present, canary_ids=ids, salt=bytes(range(32)))


def test_scores_plan_is_of_the_files_rule(tmp_path, capsys):
    """With a scores file the plan weighs exactly the audit's rule (k₊, k₋); the report and its plan agree."""
    path = _scores_file(tmp_path)
    rep = sf.audit_scores_file(path, delta=DELTA, k_plus=30, k_minus=20, eps_nominal=EPS, score_model=f"gdp:{MU}",
                               plan_sims=20, plan_seed=5)
    plan = planned_verdict(M, delta=DELTA, confidence=0.95, eps_nominal=EPS, score_model=f"gdp:{MU}",
                           rules=[(30, 20)], sims=20, seed=5).report
    assert (plan.k_plus, plan.k_minus) == (30, 20) == (rep.guessing["k_plus"], rep.guessing["k_minus"])
    assert rep.power["planned_eps_lower"] == plan.planned_eps_lower and rep.power["mc_p90"] == plan.mc_p90
    # 30 from the top at the top-30 precision, 20 from the bottom at the (symmetric) top-20 precision
    expected = 30 * _top_precision(M, 30, MU) + 20 * _top_precision(M, 20, MU)
    assert abs(plan.planned_correct - expected) <= 1.5
    code, out, _ = _run(capsys, ["audit", "one-run", "--scores", str(path), "--delta", str(DELTA), "--k-plus", "30",
                                 "--k-minus", "20", "--epsilon-nominal", str(EPS), "--score-model", f"gdp:{MU}",
                                 "--plan-sims", "20", "--seed", "5", "--json"])
    assert code == 0 and json.loads(out)["power"]["planned_eps_lower"] == rep.power["planned_eps_lower"]


@pytest.mark.parametrize("flag, value, name", [("--plan-sims", "20", "plan_sims"), ("--seed", "3", "seed")])
def test_plan_flags_need_a_score_model(capsys, flag, value, name):
    code, out, err = _run(capsys, ["audit", "one-run", "--canaries", "100", "--guesses", "10", "--correct", "9",
                                   "--delta", "1e-5", flag, value])
    assert code == 2 and out == "" and name in err and len(err.strip().splitlines()) == 1


def test_a_bad_score_model_is_refused_before_the_file_is_read(tmp_path, monkeypatch):
    path = _scores_file(tmp_path)
    monkeypatch.setattr(sf, "load_scores", lambda *a, **k: pytest.fail("the file was read"))
    with pytest.raises(InvalidParameter) as err:
        sf.audit_scores_file(path, delta=DELTA, k_plus=3, score_model="gdp:-1")
    assert err.value.name == "mu"
    with pytest.raises(InvalidParameter) as err:
        sf.audit_scores_file(path, delta=DELTA, k_plus=3, score_model="gdp:1", power={"eps_ceiling": 1.0})
    assert err.value.name == "score_model"
