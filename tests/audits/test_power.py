"""Power analysis (audits/statistics/power.py, audits/statistics/score_models.py) against independent references.

Expected values come from docs/audits.md (reference ceilings, the DP-GRPO planning figure), closed forms evaluated in
mpmath or scipy (δ = 0 ceiling, canaries needed at δ = 0, Gaussian top-k precision, binomial laws of simulated
counts), scipy quadrature (moments of the per-step LLR of the dpsgd_dirac model) and the certified μ-GDP curve of
privcheck.accounting. Statistical checks use fixed seeds and tolerances of ≥ 6 standard errors (per-check false
failure < 1e-8).
"""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from audits.statistics.power import (
    NOISELESS_MISS,
    POWER_BLOCK_KEYS,
    GuessRule,
    canaries_needed,
    ceiling,
    default_k_grid,
    min_correct,
    noiseless_miss,
    nominal_epsilon,
    plan,
    plot_bound_vs_canaries,
)
from audits.statistics.score_models import GDP, DPSGDDirac, Empirical, Perfect, parse_score_model
from privcheck.accounting import gdp_to_dp
from privcheck.errors import InvalidParameter
from tests.audits.power_memo import memoized_power

P = 0.05
DELTA_GRPO = 1 / 69880
Q_GRPO, SIGMA_GRPO, T_GRPO = 128 / 6988, 0.612058477104, 100


@pytest.fixture(scope="module", autouse=True)
def each_search_once():
    """The plans below share (m, δ) pairs: each ε search and ceiling is computed once (tests/audits/power_memo.py)."""
    with memoized_power():
        yield


# --- ceiling --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("delta, expected", [(0.0, 5.8091), (1e-5, 5.7823), (DELTA_GRPO, 5.7707)])
def test_ceiling_reference_values_m1000(delta, expected):
    c = ceiling(1000, delta, 0.95)
    assert abs(c.eps - expected) <= 1e-4
    assert c.guesses == 1000           # the maximum is reached at r = m


def test_ceiling_delta0_closed_form_mpmath():
    mpmath.mp.dps = 50
    for m in (10, 100, 1000, 10_000):
        exact = -mpmath.log(mpmath.power(mpmath.mpf(1) / 20, -mpmath.mpf(1) / m) - 1)   # −ln(p^{−1/r} − 1), r = m
        assert abs(ceiling(m, 0.0, 0.95).eps - float(exact)) <= 1e-7


def test_ceiling_monotone_in_m():
    for delta in (0.0, 1e-5, DELTA_GRPO):
        values = [ceiling(m, delta, 0.95).eps for m in (10, 100, 1000, 5000)]
        assert all(b > a for a, b in zip(values, values[1:])), values


def test_eps8_not_certifiable_at_grpo_delta():
    """At δ = 1/69880 no one-run audit certifies ε = 8, whatever m."""
    assert canaries_needed(8.0, DELTA_GRPO, 0.95) is None
    r = plan(1000, delta=DELTA_GRPO, confidence=0.95, eps_nominal=8.0, score_model="perfect", sims=5, seed=1)
    assert r.nominal_certifiable is False
    assert r.min_correct_for_nominal is None and r.plan_reaches_nominal is False
    assert r.canaries_needed_for_nominal is None
    assert "CANNOT CERTIFY" in r.message and "No number of canaries" in r.message


def test_canaries_needed_delta0_closed_form():
    """δ = 0: the smallest m with ρ(ε)^m < p, i.e. m > ln p / ln ρ(ε) (mpmath, 50 digits)."""
    mpmath.mp.dps = 50
    for eps in (1.0, 5.0, 8.0):
        bound = mpmath.log(mpmath.mpf(1) / 20) / -mpmath.log1p(mpmath.exp(-eps))
        assert canaries_needed(eps, 0.0, 0.95) == int(mpmath.floor(bound)) + 1


def test_canaries_needed_grpo_nominal_is_a_first_crossing():
    from audits.statistics.one_run import p_value
    n = canaries_needed(5.0385, DELTA_GRPO, 0.95)
    assert n is not None
    assert p_value(n, n, n, 5.0385, DELTA_GRPO) < P <= p_value(n - 1, n - 1, n - 1, 5.0385, DELTA_GRPO)


# --- minimum correct for the nominal claim -------------------------------------------------------------------------

@pytest.mark.parametrize("r, eps", [(100, 1.0), (100, 3.0), (1000, 2.0)])
def test_min_correct_delta0_binomial_tail(r, eps):
    """δ = 0: PVAL = P[Bin(r, expit ε) ≥ v] (scipy), so min_correct is the first v with that tail below p."""
    rho = 1 / (1 + math.exp(-eps))
    tails = stats.binom.sf(np.arange(r + 1) - 1, r, rho)
    expected = int(np.argmax(tails < P))
    assert min_correct(1000, r, eps, 0.0, 0.95) == expected


def test_min_correct_with_delta_spec_point():
    """Reference values: PVAL(1000, 100, 90, ε=1, δ=1e−5) = 8.4e−4 < p and EPS_LB(1000, 100, 90) = 1.626 > 1."""
    need = min_correct(1000, 100, 1.0, 1e-5, 0.95)
    assert need is not None and need <= 90
    assert min_correct(1000, 100, 3.5, 1e-5, 0.95) is None     # EPS_LB(1000, 100, 100, 1e-5) = 3.465 < 3.5


# --- score models ---------------------------------------------------------------------------------------------------

def _step_moments(q, sigma, s, included):
    """Mean, variance and 4th central moment of one per-step LLR term (dpsgd_dirac model), by scipy quadrature."""
    def term(y):
        return math.log1p(q * math.expm1((y / sigma - 0.5 / sigma ** 2) / s ** 2))

    def density(y):
        base = stats.norm.pdf(y, 0, s)
        return (1 - q) * base + q * stats.norm.pdf(y, 1 / sigma, s) if included else base

    def moment(f):
        return integrate.quad(lambda y: f(term(y)) * density(y), -40 * s, 40 * s + 1 / sigma, limit=400,
                              epsabs=1e-13, epsrel=1e-11)[0]
    mean = moment(lambda x: x)
    var = moment(lambda x: (x - mean) ** 2)
    m4 = moment(lambda x: (x - mean) ** 4)
    return mean, var, m4


@pytest.mark.parametrize("q, sigma, steps, tau", [(0.2, 0.8, 10, 0.5), (0.05, 0.5, 20, 0.0), (0.8, 1.0, 5, 0.0)])
def test_llr_statistic_moments_match_quadrature(q, sigma, steps, tau):
    model = DPSGDDirac(q, sigma, steps, "llr", tau)
    rng = np.random.default_rng(20240611)
    n = 100_000
    s = math.sqrt(1 + tau ** 2)
    for included in (True, False):
        x = model.draw(np.full(n, included), rng)
        mean, var, m4 = _step_moments(q, sigma, s, included)
        sum_mean, sum_var = steps * mean, steps * var
        sum_m4 = steps * m4 + 3 * steps * (steps - 1) * var ** 2
        assert abs(x.mean() - sum_mean) <= 6 * math.sqrt(sum_var / n)
        assert abs(x.var() - sum_var) <= 6 * math.sqrt((sum_m4 - sum_var ** 2) / n)


def test_llr_tiny_sigma_no_overflow():
    """σ = 0.05: per-step exponents reach ~400, beyond float32; scores stay finite and separate perfectly."""
    model = DPSGDDirac(1.0, 0.05, 3, "llr")
    rng = np.random.default_rng(3)
    inc = model.draw(np.ones(1000, bool), rng)
    out = model.draw(np.zeros(1000, bool), rng)
    assert np.all(np.isfinite(inc)) and np.all(np.isfinite(out))
    # q = 1: LLR = Σ (y/σ − 1/(2σ²)) exactly; included mean T/(2σ²) = 600, excluded −600, sd √T/σ ≈ 35
    assert abs(inc.mean() - 600) < 6 * math.sqrt(3) / 0.05 / math.sqrt(1000)
    assert inc.min() > out.max()


def test_sum_statistic_exact_law():
    q, sigma, steps, tau = 0.1, 0.7, 50, 1.0
    model = DPSGDDirac(q, sigma, steps, "sum", tau)
    rng = np.random.default_rng(11)
    n = 200_000
    s2 = 1 + tau ** 2
    out = model.draw(np.zeros(n, bool), rng)
    assert stats.kstest(out, stats.norm(0, math.sqrt(s2)).cdf).pvalue > 1e-7
    inc = model.draw(np.ones(n, bool), rng)
    mean, var = q * math.sqrt(steps) / sigma, s2 + q * (1 - q) / sigma ** 2
    assert abs(inc.mean() - mean) <= 6 * math.sqrt(var / n)


def test_gdp_and_perfect_draws():
    rng = np.random.default_rng(5)
    assert stats.kstest(GDP(1.5).draw(np.ones(50_000, bool), rng), stats.norm(1.5, 1).cdf).pvalue > 1e-7
    assert stats.kstest(GDP(1.5).draw(np.zeros(50_000, bool), rng), stats.norm(0, 1).cdf).pvalue > 1e-7
    labels = rng.random(10_000) < 0.5
    y = Perfect().draw(labels, rng)
    assert y[labels].min() > y[~labels].max()


def test_parse_score_model_strings():
    assert parse_score_model("perfect") == Perfect()
    assert parse_score_model("gdp:1.5") == GDP(1.5)
    assert parse_score_model("dpsgd_dirac:0.1,0.8,50,sum") == DPSGDDirac(0.1, 0.8, 50, "sum", 0.0)
    assert parse_score_model("dpsgd_dirac:0.1,0.8,50,llr,0.3") == DPSGDDirac(0.1, 0.8, 50, "llr", 0.3)


# --- the plan -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, delta", [(1000, 0.0), (1000, 1e-5), (1000, DELTA_GRPO), (38, 1e-5)])
def test_perfect_plan_equals_ceiling(m, delta):
    # even m: the balanced rule (m/2, m/2) is all correct on a half-in, half-out reference (odd m cannot be)
    r = plan(m, delta=delta, confidence=0.95, eps_nominal=None, score_model="perfect", sims=10, seed=0)
    assert r.planned_eps_lower == ceiling(m, delta, 0.95).eps
    assert r.planned_correct == r.guesses == m


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 3.0])
def test_gdp_plan_never_promises_more_than_the_truth(mu):
    truth = gdp_to_dp(mu, 1e-5).value                     # certified μ-GDP ε (Arb)
    for m in (100, 1000):
        r = plan(m, delta=1e-5, confidence=0.95, eps_nominal=truth, score_model=f"gdp:{mu}", sims=20, seed=7)
        assert 0 <= r.planned_eps_lower < truth
        assert r.plan_reaches_nominal is False


def _gaussian_top_precision(mu, fraction):
    """Precision of the top `fraction` of a half N(μ,1), half N(0,1) population (scipy)."""
    t = optimize.brentq(lambda x: 0.5 * (stats.norm.sf(x - mu) + stats.norm.sf(x)) - fraction, -40, 40, xtol=1e-14)
    hit = stats.norm.sf(t - mu)
    return hit / (hit + stats.norm.sf(t))


def test_gdp_grid_precisions_match_gaussian_closed_form():
    mu, m = 1.0, 1000
    r = plan(m, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=GDP(mu), sims=1, seed=123)
    ratio = r.reference_scores // m
    assert len(r.grid) == len(default_k_grid(m))
    for g in r.grid:
        k = g.k_plus + g.k_minus
        # the bottom-k₋ "out" guesses mirror the top by symmetry of the two Gaussians
        expected = sum(n * _gaussian_top_precision(mu, n / m) for n in (g.k_plus, g.k_minus) if n) / k
        se = math.sqrt(expected * (1 - expected) / (ratio * k))
        assert abs(g.precision - expected) <= 7 * se + 2 / (ratio * k), (g, expected)


def test_plan_monotone_in_m():
    # (perfect plans equal the ceiling, whose monotonicity is tested above)
    planned = [plan(m, delta=1e-5, confidence=0.95, eps_nominal=None, score_model="gdp:1", sims=2,
                    seed=3).planned_eps_lower for m in (30, 300, 3000)]
    assert all(b > a for a, b in zip(planned, planned[1:])), planned


def test_monte_carlo_rejection_rate_matches_binomial_law():
    """Perfect model, k* = m balanced: v = m − |N_in − m/2| with N_in ~ Bin(m, 1/2), so P[reject ε_nom] is exact."""
    m, eps_nom = 1000, 4.0
    r = plan(m, delta=1e-5, confidence=0.95, eps_nominal=eps_nom, score_model="perfect", sims=2000, seed=99)
    assert (r.k_plus, r.k_minus) == (500, 500)
    need = r.min_correct_for_nominal
    slack = m - need                                   # reject iff |N_in − 500| ≤ slack
    exact = stats.binom.cdf(500 + slack, m, 0.5) - stats.binom.cdf(500 - slack - 1, m, 0.5)
    assert abs(r.mc_prob_reject_nominal - exact) <= 6 * math.sqrt(exact * (1 - exact) / 2000)
    assert r.mc_p10 <= r.mc_median <= r.mc_p90 <= r.eps_ceiling


def test_empirical_model_with_separated_pilot_is_perfect():
    r = plan(200, delta=0.0, confidence=0.95, eps_nominal=None, score_model=Empirical([2.0, 3.0, 5.0], [-1.0, 0.5]),
             sims=20, seed=4)
    assert r.planned_eps_lower == ceiling(200, 0.0, 0.95).eps


@pytest.mark.parametrize("model", [Empirical([0.0], [0.0]), GDP(0.0)])
def test_no_signal_model_rejects_at_most_at_level_p(model):
    """Scores carry no information (all tied, or identical Gaussians): v ~ Bin(m, 1/2) exactly, so the simulated
    rate of rejecting ε = 0 is the binomial tail at min_correct (scipy), itself ≤ p. Tied scores must never be
    guessed both "in" and "out" (that would pin v to 50)."""
    m, sims = 100, 4000
    r = plan(m, delta=0.0, confidence=0.95, eps_nominal=0.0, score_model=model, k_grid=[(50, 50)], sims=sims,
             seed=17)
    need = int(np.argmax(stats.binom.sf(np.arange(m + 1) - 1, m, 0.5) < P))
    assert r.min_correct_for_nominal == need
    exact = stats.binom.sf(need - 1, m, 0.5)
    assert exact <= P
    assert abs(r.mc_prob_reject_nominal - exact) <= 6 * math.sqrt(exact * (1 - exact) / sims)


def test_interference_and_final_model_scoring_lose_power():
    base = dict(delta=DELTA_GRPO, confidence=0.95, eps_nominal=None, sims=2, seed=8)
    llr = plan(1000, score_model=DPSGDDirac(0.2, 0.8, 8, "llr"), **base).planned_eps_lower
    noisy = plan(1000, score_model=DPSGDDirac(0.2, 0.8, 8, "llr", 2.0), **base).planned_eps_lower
    final = plan(1000, score_model=DPSGDDirac(0.2, 0.8, 8, "sum"), **base).planned_eps_lower
    assert noisy < llr and final < llr


def test_dpgrpo_planning_figure():
    """At the DP-GRPO configuration the planned bound with 10,000 added gradient canaries is ≥ 1.5."""
    eps_nominal = 5.03849813457551            # PLD ε of (q, σ, T, δ) (paper: ≈ 5.04); recomputed in the CLI test
    # one simulated audit: nothing asserted here reads the Monte Carlo (the reference sample is drawn first, from the
    # same seed, whatever `sims`)
    r = plan(10_000, delta=DELTA_GRPO, confidence=0.95, eps_nominal=eps_nominal,
             score_model=DPSGDDirac(Q_GRPO, SIGMA_GRPO, T_GRPO, "llr"), sims=1, seed=2024, noiseless_guard=False)
    assert r.planned_eps_lower >= 1.5
    assert r.k_minus == 0                      # never-sampled included canaries look excluded: guess the top only
    assert r.nominal_certifiable is True and r.plan_reaches_nominal is False
    assert "UNDERPOWERED" in r.message and r.noiseless is None
    # The default plan also rejects a run without noise: 102 correct guesses cannot reject 5.04 (EPS_LB < 5.04), so
    # k* grows until every correct guess rejects it, at the cost of planned bound on an honest run.
    g = plan(10_000, delta=DELTA_GRPO, confidence=0.95, eps_nominal=eps_nominal,
             score_model=DPSGDDirac(Q_GRPO, SIGMA_GRPO, T_GRPO, "llr"), sims=1, seed=2024)
    assert g.noiseless["guarded"] is True and g.noiseless["miss_bound"] <= NOISELESS_MISS
    assert g.k_minus == 0 and g.guesses > r.guesses and 1.0 < g.planned_eps_lower < r.planned_eps_lower
    assert min_correct(10_000, g.guesses, eps_nominal, DELTA_GRPO) is not None
    assert min_correct(10_000, r.guesses, eps_nominal, DELTA_GRPO) is None


# --- the noiseless-run guard ----------------------------------------------------------------------------------------

def _noiseless_audits(m, q, T, rule, sims, rng):
    """Correct guesses of `rule` in `sims` audits of a mechanism with its noise removed, simulated directly: S_i ~
    Bern(½), the score of canary i is its inclusion count K_i ~ Bin(T, q)·S_i (without noise the per-step LLR is
    increasing in K), ties broken by a uniform random key independent of S."""
    included = rng.random((sims, m)) < 0.5
    scores = rng.binomial(T, q, size=(sims, m)) * included + rng.random((sims, m))    # key in [0, 1): K ranks first
    order = np.argsort(scores, axis=1)
    top, bottom = order[:, m - rule.k_plus:], order[:, :rule.k_minus]
    return (np.take_along_axis(included, top, axis=1).sum(axis=1)
            + (~np.take_along_axis(included, bottom, axis=1)).sum(axis=1))


@pytest.mark.parametrize("rule, need", [(GuessRule(300, 200), 492),    # the bottom term: Bin(200, b) > 8
                                        (GuessRule(470, 0), 470)])     # the sampling term: N₁ < 470
def test_noiseless_miss_matches_direct_simulation(rule, need):
    """The guard's miss bound against simulated noiseless audits at q = 1/32, T = 96, m = 1000 (both terms are
    ≈ 0.3–0.5 here and the union bound's slack is below 1e-9). 4,000 audits: standard error ≤ 0.008, tolerance
    0.05 (> 6 standard errors)."""
    m, q, T = 1000, 1 / 32, 96
    u0 = (1 - q) ** T
    bound = noiseless_miss(m, rule, need, u0)
    v = _noiseless_audits(m, q, T, rule, 4000, np.random.default_rng(7))
    assert 0.2 < bound < 0.8
    assert abs(np.mean(v < need) - bound) < 0.05
    assert noiseless_miss(m, rule, None, u0) == 1.0
    # without never-sampled canaries a noiseless run is the perfect model: a two-sided rule never misses
    assert noiseless_miss(m, GuessRule(300, 300), 600, 0.0) < 1e-30


def test_guarded_plan_at_the_opacus_small_q_setting():
    """q = 1/32, σ = 0.875, T = 96, m = 1000, δ = 1e-5 (ε ≈ 2.99): the honest-only plan splits evenly (74, 74),
    which a noiseless run misses (about 3.4 of its 74 bottom guesses fall on never-sampled present canaries, while
    rejection needs 146 of 148 right); the default plan guesses the top only and its rule has miss bound ≤ 1e-6."""
    from privcheck.accounting import PoissonGaussianEvent, epsilon

    model = DPSGDDirac(1 / 32, 0.875, 96, "llr")
    eps = epsilon(PoissonGaussianEvent(1 / 32, 0.875, 96), 1e-5).value
    base = dict(delta=1e-5, confidence=0.95, eps_nominal=eps, score_model=model, sims=2, seed=3)
    off = plan(1000, noiseless_guard=False, **base)
    on = plan(1000, **base)
    assert (off.k_plus, off.k_minus) == (74, 74) and off.noiseless is None
    assert on.k_minus == 0 and on.noiseless["guarded"] is True and on.noiseless["miss_bound"] <= NOISELESS_MISS
    assert on.noiseless["never_sampled"] == pytest.approx((31 / 32) ** 96, rel=1e-12)
    on_off = noiseless_miss(1000, GuessRule(74, 74), min_correct(1000, 148, eps, 1e-5), (31 / 32) ** 96)
    assert on_off > 0.5
    eligible = [g for g in on.grid if g.noiseless_miss <= NOISELESS_MISS]
    assert on.planned_eps_lower == max(g.eps_lower for g in eligible) <= off.planned_eps_lower
    assert "NOISELESS GUARD" in on.message
    # a claim above the ceiling: nothing can be rejected, and the plan says so
    high = plan(1000, **{**base, "eps_nominal": 6.0})
    assert high.noiseless["guarded"] is False and "NO NOISELESS GUARD" in high.message


def test_report_json_and_seeding():
    kw = dict(delta=1e-5, confidence=0.9, eps_nominal=2.0, score_model="gdp:1", sims=30, k_grid=[5, 20, (10, 10)])
    a = plan(500, seed=42, **kw)
    b = plan(500, seed=42, **kw)
    assert a == b
    doc = a.to_json()
    json.dumps(doc, allow_nan=False)
    assert set(POWER_BLOCK_KEYS) <= set(doc)
    assert set(a.power_block()) == set(POWER_BLOCK_KEYS)
    assert doc["guesses"] == a.k_plus + a.k_minus and doc["grid"] and doc["randomness"]["seeded"] is True
    assert doc["planned_eps_lower"] == max(g["eps_lower"] for g in doc["grid"])
    assert plan(500, seed=None, **kw).to_json()["randomness"]["seeded"] is False
    assert plan(500, seed=43, **kw).to_json()["randomness"]["seed"] == 43


def test_explicit_k_grid():
    r = plan(1000, delta=1e-5, confidence=0.95, eps_nominal=None, score_model="perfect", k_grid=[10, (50, 50)],
             sims=5, seed=0)
    assert [(g.k_plus, g.k_minus) for g in r.grid] == [(10, 0), (50, 50)]
    assert (r.k_plus, r.k_minus) == (50, 50)


def test_nominal_epsilon_sources():
    eps, source = nominal_epsilon(f"dpsgd_dirac:{Q_GRPO},{SIGMA_GRPO},{T_GRPO},llr", DELTA_GRPO)
    assert abs(eps - 5.04) < 0.005 and source.startswith("pld")          # paper: nominal ε ≈ 5.04
    eps, _ = nominal_epsilon("gdp:1", 1e-5)
    assert abs(eps - 4.3772) <= 1e-4                                      # reference value ε(μ = 1, δ = 1e−5)
    assert nominal_epsilon("perfect", 1e-5) is None


def test_plot_bound_vs_canaries(tmp_path):
    out = tmp_path / "bound.png"
    curve = plot_bound_vs_canaries("gdp:1", [100, 1000], delta=1e-5, eps_nominal=4.3772, sims=5, seed=0, path=out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and curve.png == out.read_bytes()
    assert curve.canaries == (100, 1000) and curve.planned_eps_lower[0] < curve.planned_eps_lower[1]
    assert all(p <= c for p, c in zip(curve.planned_eps_lower, curve.eps_ceiling))


# --- bad input ------------------------------------------------------------------------------------------------------

GOOD = dict(m=100, delta=1e-5, confidence=0.95, eps_nominal=1.0, score_model="perfect", sims=5, seed=0)


@pytest.mark.parametrize("change, name", [
    ({"m": 0}, "m"), ({"m": 2.5}, "m"), ({"m": True}, "m"),
    ({"confidence": 0.0}, "confidence"), ({"confidence": 1.0}, "confidence"), ({"confidence": 1.5}, "confidence"),
    ({"confidence": float("nan")}, "confidence"),
    ({"delta": -0.1}, "delta"), ({"delta": 1.5}, "delta"), ({"delta": float("nan")}, "delta"),
    ({"eps_nominal": -1.0}, "eps_nominal"), ({"eps_nominal": float("inf")}, "eps_nominal"),
    ({"score_model": "foo"}, "score_model"), ({"score_model": "gdp"}, "score_model"),
    ({"score_model": "gdp:x"}, "mu"), ({"score_model": 3}, "score_model"),
    ({"score_model": "dpsgd_dirac:0,0.5,10,llr"}, "q"), ({"score_model": "dpsgd_dirac:1.5,0.5,10,llr"}, "q"),
    ({"score_model": "dpsgd_dirac:0.1,0,10,llr"}, "sigma"), ({"score_model": "dpsgd_dirac:0.1,-1,10,llr"}, "sigma"),
    ({"score_model": "dpsgd_dirac:0.1,0.5,0,llr"}, "T"), ({"score_model": "dpsgd_dirac:0.1,0.5,2.5,llr"}, "T"),
    ({"score_model": "dpsgd_dirac:0.1,0.5,10,max"}, "stat"),
    ({"score_model": "dpsgd_dirac:0.1,0.5,10,llr,-1"}, "interference"),
    ({"sims": 0}, "sims"), ({"seed": -1}, "seed"),
    ({"k_grid": [0]}, "k_grid"), ({"k_grid": [101]}, "k_grid"), ({"k_grid": [(60, 50)]}, "k_grid"),
    ({"k_grid": []}, "k_grid"), ({"k_grid": "10"}, "k_grid"), ({"k_grid": [2.5]}, "k_grid"),
])
def test_bad_input_names_the_parameter(change, name):
    kwargs = {**GOOD, **change}
    m = kwargs.pop("m")
    with pytest.raises(InvalidParameter) as info:
        plan(m, **kwargs)
    assert info.value.name == name


@pytest.mark.parametrize("in_scores, out_scores, name", [
    ([], [0.0], "in_scores"), ([1.0], [], "out_scores"), ([1.0, float("nan")], [0.0], "in_scores"),
    ([1.0], [0.0, float("inf")], "out_scores"), ([[1.0]], [0.0], "in_scores"), (["a"], [0.0], "in_scores"),
])
def test_bad_empirical_scores(in_scores, out_scores, name):
    with pytest.raises(InvalidParameter) as info:
        Empirical(in_scores, out_scores)
    assert info.value.name == name


def test_bad_model_objects():
    for make, name in ((lambda: DPSGDDirac(0.0, 1.0, 5), "q"), (lambda: DPSGDDirac(0.1, 0.0, 5), "sigma"),
                       (lambda: DPSGDDirac(0.1, 1.0, 0), "T"), (lambda: GDP(float("nan")), "mu")):
        with pytest.raises(InvalidParameter) as info:
            make()
        assert info.value.name == name
    with pytest.raises(InvalidParameter) as info:
        min_correct(10, 11, 1.0, 0.0)
    assert info.value.name == "r"
