"""Clopper–Pearson multi-run audits (docs/audits.md, "Proof notes" and "Reference values")."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from audits.statistics.clopper_pearson import clopper_pearson, cp_lower, cp_upper
from privcheck.errors import InvalidParameter


def test_reference_zero_errors():
    rep = clopper_pearson(0, 1000, 0, 1000, delta=1e-5, confidence=0.95)
    closed = 1 - 0.025 ** (1 / 1000)
    assert rep.result["fpr_up"] == pytest.approx(closed, rel=1e-12)
    assert rep.result["fnr_up"] == pytest.approx(0.0036821, abs=1e-7)
    assert rep.result["eps_lower"] == pytest.approx(5.6006, abs=1e-4)
    assert rep.result["eps_lower"] == pytest.approx(math.log((1 - 1e-5 - closed) / closed), rel=1e-12)
    assert rep.headline() == {"eps_lower": rep.result["eps_lower"]}
    assert rep.power["eps_ceiling"] == rep.result["eps_lower"]     # zero errors is the ceiling


@pytest.mark.parametrize("k, n, a", [(0, 50, 0.025), (3, 50, 0.025), (17, 200, 0.01), (199, 200, 0.005),
                                     (500, 1000, 0.0125)])
def test_cp_bounds_match_scipy_binomtest_exact_interval(k, n, a):
    """scipy's exact (Clopper–Pearson) two-sided interval at level 1 − 2a has one-sided ends at level a."""
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * a, method="exact")
    assert cp_upper(k, n, a) == pytest.approx(ci.high, rel=1e-10)
    assert cp_lower(k, n, a) == pytest.approx(ci.low, rel=1e-10, abs=1e-300)


def test_cp_edge_values():
    assert cp_upper(10, 10, 0.05) == 1.0 and cp_lower(0, 10, 0.05) == 0.0


def test_both_directions_and_one_sided():
    """Few false positives but many false negatives: the complement event (ε₂) carries the evidence."""
    rep = clopper_pearson(200, 1000, 3, 1000, delta=1e-5)
    fpr, fnr = cp_upper(200, 1000, 0.025), cp_upper(3, 1000, 0.025)
    eps2 = math.log((1 - 1e-5 - fpr) / fnr)
    assert rep.result["eps_lower"] == pytest.approx(eps2, rel=1e-12)
    assert rep.result["direction"] == "score_lt_t:Dprime_vs_D"
    one = clopper_pearson(200, 1000, 3, 1000, delta=1e-5, two_sided=False)
    assert one.result["eps_lower"] == pytest.approx(max(0.0, math.log((1 - 1e-5 - fnr) / fpr)), abs=1e-12)
    assert one.result["eps_lower"] < rep.result["eps_lower"]


def test_thresholds_divide_the_error_budget():
    rep = clopper_pearson(2, 500, 4, 500, delta=1e-5, confidence=0.95, n_thresholds=10)
    fpr, fnr = cp_upper(2, 500, 0.05 / 20), cp_upper(4, 500, 0.05 / 20)
    assert rep.result["fpr_up"] == fpr and rep.result["fnr_up"] == fnr
    assert rep.result["eps_lower"] == pytest.approx(math.log((1 - 1e-5 - fnr) / fpr), rel=1e-12)
    assert rep.guessing["n_hypotheses"] == 10 and rep.guessing["selection"] == "bonferroni"


def test_no_evidence_gives_zero_and_no_direction():
    rep = clopper_pearson(500, 1000, 500, 1000, delta=1e-5)
    assert rep.result["eps_lower"] == 0.0 and rep.result["direction"] is None


def test_nominal_rejection():
    assert clopper_pearson(0, 1000, 0, 1000, delta=1e-5, eps_nominal=5.0).result["rejects_nominal"] is True
    assert clopper_pearson(0, 1000, 0, 1000, delta=1e-5, eps_nominal=6.0).result["rejects_nominal"] is False
    assert clopper_pearson(0, 1000, 0, 1000, delta=1e-5).result["rejects_nominal"] is None


@pytest.mark.parametrize("kwargs, name", [(dict(fp=11, n_out=10, fn=0, n_in=10), "fp"),
                                          (dict(fp=0, n_out=10, fn=11, n_in=10), "fn"),
                                          (dict(fp=-1, n_out=10, fn=0, n_in=10), "fp"),
                                          (dict(fp=0, n_out=0, fn=0, n_in=10), "n_out")])
def test_bad_counts(kwargs, name):
    with pytest.raises(InvalidParameter) as err:
        clopper_pearson(**kwargs, delta=1e-5)
    assert err.value.name == name
