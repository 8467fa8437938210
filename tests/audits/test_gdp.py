"""GDP conversions and GDP-family audits (docs/audits.md, "Proof notes" and "The audit report")."""

from __future__ import annotations

import json

import mpmath as mp
import pytest
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import beta as beta_dist
from scipy.stats import norm

from audits.statistics import gdp
from audits.statistics.report import AuditReport
from privcheck.accounting import gaussian_epsilon
from privcheck.errors import InvalidParameter


def _mp_delta(eps, mu):
    with mp.workdps(400):                      # the two terms cancel heavily at small μ
        eps, mu = mp.mpf(eps), mp.mpf(mu)
        return mp.ncdf(-eps / mu + mu / 2) - mp.e ** eps * mp.ncdf(-eps / mu - mu / 2)


def test_reference_conversions():
    assert gdp.delta_of_eps(1.0, 1.0) == pytest.approx(0.126937, abs=1e-6)
    assert gdp.eps_of_mu(1.0, 1e-5) == pytest.approx(4.3772, abs=1e-4)


@pytest.mark.parametrize("eps, mu", [(1.0, 1.0), (0.0, 0.3), (2.5, 0.7), (4.0, 3.0), (10.0, 2.0), (0.5, 6.0)])
def test_delta_of_eps_matches_dp_accounting(eps, mu):
    reference = GaussianPrivacyLoss(standard_deviation=1.0 / mu, sensitivity=1.0).get_delta_for_epsilon(eps)
    assert gdp.delta_of_eps(eps, mu) == pytest.approx(reference, rel=1e-9)


@pytest.mark.parametrize("eps, mu", [(1.0, 1.0), (30.0, 2.0), (40.0, 2.5), (200.0, 6.0), (3.0, 0.15), (0.2, 0.01)])
def test_delta_of_eps_matches_mpmath_including_tiny_tails(eps, mu):
    """Log-space evaluation keeps relative accuracy for δ down to 1e-200 (direct subtraction gives 0 or garbage)."""
    expected = float(_mp_delta(eps, mu))
    assert 1e-250 < expected
    assert gdp.delta_of_eps(eps, mu) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("mu, delta", [(0.25, 1e-5), (1.0, 1e-5), (2.0, 1 / 69880), (0.5, 1e-3), (4.0, 1e-10)])
def test_eps_of_mu_matches_certified_analytic_gaussian(mu, delta):
    assert gdp.eps_of_mu(mu, delta) == pytest.approx(gaussian_epsilon(1.0 / mu, delta).value, abs=1e-8)


@settings(max_examples=60)
@given(st.floats(0.0, 20.0), st.sampled_from([1e-12, 1e-8, 1e-5, 1e-3, 0.1]))
def test_mu_of_eps_inverts_delta_of_eps(eps, delta):
    mu = gdp.mu_of_eps(eps, delta)
    assert 0 < mu < gdp.MU_CAP
    assert gdp.delta_of_eps(eps, mu) == pytest.approx(delta, rel=1e-8)
    assert gdp.eps_of_mu(mu, delta) == pytest.approx(eps, abs=1e-7)


def test_degenerate_conversions():
    assert gdp.delta_of_eps(3.0, 0.0) == 0.0
    assert gdp.eps_of_mu(0.0, 1e-5) == 0.0
    assert gdp.eps_of_mu(0.01, 0.5) == 0.0            # δ(0; μ) ≤ δ already
    for bad in (0.0, 1.0, -1e-3):
        with pytest.raises(InvalidParameter):
            gdp.eps_of_mu(1.0, bad)


# --- multi-run rates --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fp, n0, fn, n1, K", [(0, 1000, 0, 1000, 1), (12, 500, 40, 800, 1), (3, 200, 5, 200, 4)])
def test_from_rates_formula(fp, n0, fn, n1, K):
    rep = gdp.from_rates(fp, n0, fn, n1, delta=1e-5, confidence=0.95, n_hypotheses=K)
    a = 0.05 / (2 * K)
    fpr, fnr = beta_dist.isf(a, fp + 1, n0 - fp), beta_dist.isf(a, fn + 1, n1 - fn)
    mu = max(0.0, norm.isf(fpr) - norm.ppf(fnr))
    assert rep.result["mu_lower"] == pytest.approx(mu, rel=1e-10)
    assert rep.result["eps_estimate_gdp_family"] == pytest.approx(gaussian_epsilon(1 / mu, 1e-5).value, abs=1e-8)


def test_from_rates_negative_mu_is_zero_not_absolute_value():
    rep = gdp.from_rates(900, 1000, 900, 1000, delta=1e-5)       # a test worse than chance
    assert rep.result["mu_lower"] == 0.0 and rep.result["eps_estimate_gdp_family"] == 0.0


def test_gdp_family_estimate_exceeds_clopper_pearson_on_same_counts():
    """The Gaussian extrapolation reports far more than the assumption-free bound on the same data."""
    from audits.statistics.clopper_pearson import clopper_pearson
    cp = clopper_pearson(0, 1000, 0, 1000, delta=1e-5).result["eps_lower"]
    g = gdp.from_rates(0, 1000, 0, 1000, delta=1e-5).result["eps_estimate_gdp_family"]
    assert g > 3 * cp


# --- one-run f-DP -----------------------------------------------------------------------------------------------------

def test_fdp_reference_mu_lower():
    rep = gdp.fdp_one_run(1000, 100, 100, delta=1e-5, confidence=0.95)
    assert rep.result["mu_lower"] == pytest.approx(1.225533, abs=1e-6)
    assert rep.result["eps_estimate_gdp_family"] == pytest.approx(gdp.eps_of_mu(rep.result["mu_lower"], 1e-5))


@pytest.mark.parametrize("m, r, v", [(1000, 100, 100), (1000, 100, 90), (500, 200, 150), (100, 100, 70)])
def test_fdp_rejects_is_a_down_set_in_mu(m, r, v):
    mus = [i * 0.05 for i in range(80)]
    flags = [gdp.fdp_rejects(m, r, v, mu, 0.05) for mu in mus]
    first_false = flags.index(False) if False in flags else len(flags)
    assert not any(flags[first_false:])
    mu = gdp.fdp_one_run(m, r, v, delta=1e-5).result["mu_lower"]
    assert gdp.fdp_rejects(m, r, v, mu, 0.05) and not gdp.fdp_rejects(m, r, v, mu + 1e-8, 0.05)


def test_fdp_mu_lower_non_decreasing_in_correct():
    values = [gdp.fdp_mu_lower(1000, 100, v, 0.05)[0] for v in range(50, 101, 5)]
    assert all(a <= b for a, b in zip(values, values[1:])) and values[0] == 0.0 < values[-1]


def test_gdp_overstates_randomised_response_while_one_run_does_not():
    """The randomised-response counterexample, exactly: V ~ Bin(1000, expit 1) (ε = 1 randomised response, every
    canary guessed)."""
    from scipy.special import expit
    from scipy.stats import binom

    from audits.statistics.one_run import eps_lower
    m, rho = 1000, float(expit(1.0))

    def first(pred):                     # smallest v with pred(v); pred is monotone in v
        lo, hi = 0, m
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if pred(mid) else (mid, hi)
        return hi

    v_gdp = first(lambda v: gdp.fdp_one_run(m, m, v, delta=1e-5).result["eps_estimate_gdp_family"] > 1.0)
    v_one = first(lambda v: eps_lower(m, m, v, 1e-5, 0.05) > 1.0)
    assert binom.sf(v_gdp - 1, m, rho) > 0.99
    assert binom.sf(v_one - 1, m, rho) <= 0.05


# --- report layout ---------------------------------------------------------------------------------------------------

def _keys(obj):
    if isinstance(obj, dict):
        for k, val in obj.items():
            yield k
            yield from _keys(val)
    elif isinstance(obj, list):
        for val in obj:
            yield from _keys(val)


@pytest.mark.parametrize("make", [lambda: gdp.from_rates(3, 1000, 5, 1000, delta=1e-5),
                                  lambda: gdp.fdp_one_run(1000, 100, 97, delta=1e-5)])
def test_gdp_reports_never_carry_eps_lower(make):
    rep = make()
    doc = rep.to_json()
    assert "eps_lower" not in set(_keys(doc))
    assert "gaussian_tradeoff" in doc["extra_assumptions"]
    assert doc["result"]["rejects_nominal"] is None and doc["result"]["p_value_at_nominal"] is None
    assert doc["claim"]["epsilon"] is None
    assert set(rep.headline()) == {"mu_lower", "eps_estimate_gdp_family", "extra_assumptions"}
    assert "eps_lower" not in json.dumps(rep.headline())


def test_gdp_report_with_eps_lower_cannot_be_built():
    doc = gdp.fdp_one_run(1000, 100, 97, delta=1e-5).to_json()
    fields = {k: doc[k] for k in ("method", "claim", "canaries", "guessing", "power", "assumptions", "diagnostics",
                                  "software", "randomness")}
    bad = dict(doc["result"], eps_lower=1.0)
    with pytest.raises(ValueError):
        AuditReport(result=bad, extra_assumptions=("gaussian_tradeoff",), **fields)
    with pytest.raises(ValueError):
        AuditReport(result=doc["result"], extra_assumptions=(), **fields)
    with pytest.raises(ValueError):
        AuditReport(result=dict(doc["result"], rejects_nominal=True), extra_assumptions=("gaussian_tradeoff",),
                    **fields)


def test_gdp_refuses_an_epsilon_claim():
    with pytest.raises(InvalidParameter) as err:
        gdp.fdp_one_run(1000, 100, 97, delta=1e-5, claim={"epsilon": 2.0})
    assert err.value.name == "claim.epsilon"
