"""audits.statistics.both_bounds: the claim-curve f-DP bound of a Steinke one-run report's own counts.

On the Gaussian mechanism (`GaussianEvent`, whose certified profile is fast) the expected values are independent of
the code under test: ε(μ, δ) of a μ-GDP mechanism by scipy's brentq on the closed form
δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong, Roth & Su, Cor. 2.13), and the exact Gaussian recursion's
μ_lower = 1.225533 at (1000, 100, 100), p = 0.05 (mpmath, docs/audits.md "f-DP against the claim's own curve").
The end-to-end audits are tested in tests/audits/test_dpgrpo_canary.py and tests/audits/test_gradient_log.py.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from audits.statistics import both_bounds, fdp_claim, one_run
from audits.statistics.report import FDP_BLOCK, FDP_BLOCK_KEYS, audit_document
from audits.statistics.strategies import Bonferroni
from privcheck.accounting import GaussianEvent
from privcheck.artifacts.integrity import check_artifact, schema_problems
from privcheck.artifacts.seal import seal
from privcheck.errors import InvalidParameter
from privcheck.serialization import thaw
from tests.audits.fdp_block import assert_block_recomputes, block_event

DELTA = 1e-5
MU_LOWER_EXACT = 1.225533        # the exact Gaussian recursion at (1000, 100, 100), p = 0.05 (module docstring)


def gaussian_eps(mu: float, delta: float) -> float:
    """ε at δ of μ-GDP, from the closed-form privacy profile (independent of privcheck's accountant)."""
    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
    return brentq(excess, 0.0, 60.0, xtol=1e-12)


@pytest.fixture(scope="module")
def both():
    """(Steinke report, the same with the f-DP block) at (m, r, v) = (1000, 100, 100) against σ = 1."""
    steinke = one_run.from_counts(1000, 100, 100, delta=DELTA, eps_nominal=gaussian_eps(1.0, DELTA))
    return steinke, both_bounds.with_claim_curve(steinke, GaussianEvent(1.0))


def test_the_block_is_the_claim_curve_test_of_the_same_counts(both):
    steinke, rep = both
    block = rep.result[FDP_BLOCK]
    assert set(block) == set(FDP_BLOCK_KEYS) and block["method"] == "fdp_claim_curve"
    assert block["assumption"] == "claim_family:" + GaussianEvent(1.0).canonical()
    # the Steinke report is unchanged: headline, counts, claim, extra assumptions
    assert {k: v for k, v in thaw(rep.result).items() if k != FDP_BLOCK} == thaw(steinke.result)
    assert rep.extra_assumptions == () and rep.bound == steinke.bound
    assert block_event(rep.to_json()) == GaussianEvent(1.0)
    assert_block_recomputes(rep.to_json())


def test_the_gaussian_figure_against_closed_forms(both):
    """The reported ε is ε(μ = 1/s_hi, δ) (within the certified enclosure's width), the member μ = 1/s_hi is at most
    the exact recursion's μ_lower (f_L lies below the Gaussian curve, so it rejects less), and 100/100 correct guesses
    reject the σ = 1 claim itself; the f-DP bound is above the Steinke bound of the same counts."""
    steinke, rep = both
    block = rep.result[FDP_BLOCK]
    mu = 1.0 / block["noise_scale"]
    assert mu <= MU_LOWER_EXACT and mu > 0.99 * MU_LOWER_EXACT
    assert block["eps_lower"] == pytest.approx(gaussian_eps(mu, DELTA), abs=1e-3)
    assert block["eps_lower"] <= gaussian_eps(MU_LOWER_EXACT, DELTA)
    assert block["rejects_nominal"] is True and block["search_capped"] is False
    assert block["eps_lower"] > steinke.result["eps_lower"] > 3.0


def test_the_level_is_the_steinke_tests_level():
    """Under Bonferroni over 2 rules the Steinke test runs at p/2: so does the f-DP bound of the chosen rule."""
    rng = np.random.default_rng(7)
    signs = np.where(rng.random(1000) < 0.5, 1, -1)
    scores = rng.normal(size=1000) + 1.5 * (signs == 1)
    rep = one_run.from_scores(scores, signs, delta=DELTA, strategy=Bonferroni([(50, 0), (100, 0)]))
    assert rep.guessing["n_hypotheses"] == 2
    block = both_bounds.claim_curve_block(rep, GaussianEvent(1.0))
    r, v = rep.result["guesses"], rep.result["correct"]
    at_half = fdp_claim.claim_eps_lower(1000, r, v, GaussianEvent(1.0), DELTA, 0.025)
    assert block["eps_lower"] == at_half["eps_lower"] > 0
    assert at_half["eps_lower"] < fdp_claim.claim_eps_lower(1000, r, v, GaussianEvent(1.0), DELTA, 0.05)["eps_lower"]


def test_bad_input_is_refused_before_any_work(both, monkeypatch):
    steinke, rep = both
    monkeypatch.setattr(both_bounds, "claim_eps_lower", lambda *a, **k: pytest.fail("work before validation"))
    fdp = fdp_claim.fdp_claim_curve(1000, 0, 0, event=GaussianEvent(1.0), delta=DELTA, power={})
    for report in (fdp, steinke.to_json(), None):
        with pytest.raises(InvalidParameter) as err:
            both_bounds.with_claim_curve(report, GaussianEvent(1.0))
        assert err.value.name == "report"
    for event in (None, 1.0, {"kind": "gaussian", "sigma": 1.0}):
        with pytest.raises(InvalidParameter) as err:
            both_bounds.with_claim_curve(steinke, event)
        assert err.value.name == "event"


def test_the_report_refuses_a_malformed_block(both):
    _, rep = both
    block = thaw(rep.result[FDP_BLOCK])
    for bad in ({k: v for k, v in block.items() if k != "assumption"}, {**block, "extra": 1},
                {**block, "assumption": "gaussian_tradeoff"}, {**block, "method": "steinke_one_run"}, 3.0):
        with pytest.raises(ValueError):
            dataclasses.replace(rep, result={**thaw(rep.result), FDP_BLOCK: bad})


def test_schema_and_seal(both):
    """The sealed document validates with the block; the schema refuses a block with another key or on another
    method; an edited block breaks the seal, which `privcheck report` checks (check_artifact). Audit artifacts have
    no re-derived verdicts (privcheck.artifacts.integrity), so a re-sealed edit is not caught: the seal is a
    checksum."""
    _, rep = both
    doc = audit_document(rep)
    assert check_artifact(doc) == []
    edited = json.loads(json.dumps(doc))
    edited["result"][FDP_BLOCK]["eps_lower"] += 1.0
    assert any("sha256 seal mismatch" in p for p in check_artifact(edited))
    unsealed = {k: v for k, v in json.loads(json.dumps(doc)).items() if k != "sha256"}
    unsealed["result"][FDP_BLOCK]["extra"] = 1
    assert schema_problems(seal(unsealed), "audit")
    other = {k: v for k, v in json.loads(json.dumps(doc)).items() if k != "sha256"}
    other["method"] = "clopper_pearson"
    without = json.loads(json.dumps(other))
    del without["result"][FDP_BLOCK]
    assert set(schema_problems(seal(other), "audit")) - set(schema_problems(seal(without), "audit"))
