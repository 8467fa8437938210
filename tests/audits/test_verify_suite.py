"""The `audits` verification suite: passes on the implementation, assembles into a valid verification artifact,
and its checks fail when a component is broken."""

from __future__ import annotations

import numpy as np
import pytest

from audits import verify
from audits.statistics import one_run, pvalue
from privcheck.checks import Recorder


@pytest.fixture(scope="module")
def suite():
    return verify.run_suite()


def test_suite_passes_and_is_seeded(suite):
    failed = [c.name for c in suite.checks if not c.passed]
    assert not failed, failed
    assert suite.name == "audits" and suite.randomness == "seeded"
    names = {c.name for c in suite.checks}
    for required in ("one_run.p_value_1000_100_90", "one_run.ceiling_eps8_not_certifiable",
                     "multirun.clopper_pearson_zero_errors", "gdp.fdp_one_run_mu_lower", "validity.null_scores_split",
                     "validity.null_scores_bonferroni", "validity.randomised_response_simulated",
                     "validity.one_run_exact_randomised_response", "report.schema_round_trip"):
        assert required in names
    assert "audit_ceiling_vs_m" in suite.figures


def test_suite_assembles_into_a_valid_verification_artifact(suite, monkeypatch):
    """Same path as `privcheck verify --suite audits` (the `privcheck.suites` entry point)."""
    import privcheck.verify as pv
    monkeypatch.setattr(pv, "available_suites", lambda: {"audits": "audits.verify:run_suite"})
    monkeypatch.setattr(pv, "_load", lambda target: (lambda seed: suite))
    doc = pv.run_verification(["audits"])                     # validates against verification.schema.json
    assert doc["status"] == "pass" and doc["randomness"]["mode"] == "seeded"
    assert doc["randomness"]["privacy_release"] is False


def test_dropping_the_delta_term_is_caught(monkeypatch):
    """A p-value without its 2·m·δ·A(ε) term reproduces the δ = 0 column, not the δ = 1e-5 one."""
    monkeypatch.setattr(pvalue, "_window_max", lambda *args: 0.0)
    one_run.ceiling.cache_clear()
    rec = Recorder("audits")
    try:
        verify.check_reference_values(rec)
    finally:
        one_run.ceiling.cache_clear()
    failed = {c.name for c in rec.checks if not c.passed}
    assert {"one_run.perfect_r100_delta1e-05", "one_run.p_value_1000_100_90", "one_run.eps_lb_1000_100_90",
            "one_run.ceiling_m1000_delta1e-05"} <= failed
    assert "one_run.perfect_r100_delta0" not in failed


def test_wrong_m_in_the_delta_term_is_caught(monkeypatch):
    """Using the dataset size (here 6,988) in place of the canary count changes the figures."""
    real = pvalue.p_value_unchecked
    monkeypatch.setattr(pvalue, "p_value_unchecked", lambda m, *rest: real(6988, *rest))
    rec = Recorder("audits")
    verify.check_reference_values(rec)
    assert "one_run.p_value_1000_100_90" in {c.name for c in rec.checks if not c.passed}


def test_an_anti_conservative_bound_fails_the_validity_checks(monkeypatch):
    """If ε_lower were inflated by 0.3, the randomised-response check would see far more than 5% exceedances."""
    real = one_run.eps_lower
    monkeypatch.setattr(one_run, "eps_lower", lambda *a: real(*a) + 0.3)
    rec = Recorder("audits")
    verify.check_randomised_response(rec, np.random.SeedSequence(1))
    verify.check_exact_validity(rec)
    validity = [c for c in rec.checks if c.name.startswith("validity.") and "gdp" not in c.name]
    assert len(validity) == 2 and not any(c.passed for c in validity)
