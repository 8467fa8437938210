"""The claim-curve one-run f-DP audit (audits.statistics.fdp_claim; docs/audits.md, "f-DP against the claim's own
curve").

Independent references: the Gaussian trade-off curve Φ(Φ⁻¹(1 − α) − μ) and the one-round subsampled Gaussian
curve q·Φ(Φ⁻¹(1 − α) − μ) + (1 − q)(1 − α) evaluated in mpmath at 50 digits (closed forms, Dong, Roth & Su), the
exact-Gaussian recursion of audits.statistics.gdp (its μ_lower = 1.225533 at (1000, 100, 100) is a published reference
row of docs/audits.md), and a Monte Carlo of a mechanism exactly at the claim's curve (fixed seed).
"""

import mpmath as mp
import numpy as np
import pytest
from scipy.special import ndtr, ndtri

from audits.statistics import fdp_claim as fc
from audits.statistics.gdp import fdp_mu_lower, fdp_rejects, fdp_rejects_curve
from privcheck.accounting import CompositionHistory, GaussianEvent, PoissonGaussianEvent, PrivBoNEvent
from privcheck.artifacts import validate
from privcheck.errors import InvalidParameter

GAUSS = PoissonGaussianEvent(1.0, 1.0, 1)          # q = T = 1, σ = 1: the Gaussian mechanism, μ = 1
GAUSS_EXACT = GaussianEvent(1.0)                   # the same mechanism as a GaussianEvent (analytic ε per δ)
ALPHAS = [float(a) for a in np.concatenate([np.logspace(-8, -1, 15), np.linspace(0.1, 0.99, 12)])]


def _gauss_f(alpha, mu):
    with mp.workdps(50):
        return mp.ncdf(mp.sqrt(2) * mp.erfinv(1 - 2 * mp.mpf(alpha)) - mu)     # Φ(Φ⁻¹(1 − α) − μ)


def _subsampled_f(alpha, q, mu):
    with mp.workdps(50):
        return q * _gauss_f(alpha, mu) + (1 - q) * (1 - mp.mpf(alpha))


def _inverse(f, y):
    """The inverse of a decreasing trade-off curve (mpmath bisection on [0, 1])."""
    with mp.workdps(50):
        return mp.findroot(lambda a: f(a) - y, (mp.mpf(0), mp.mpf(1)), solver="anderson")


def test_gaussian_curve_below_closed_form_and_close():
    curve = fc.claim_curve(GAUSS)
    for a in ALPHAS:
        exact = float(_gauss_f(a, 1))
        assert curve.f(a) <= exact + 1e-12                      # pessimistic: never above the true curve
        assert curve.f(a) >= exact - 0.02                       # and close: 4 lines per decade of δ


def test_subsampled_curve_below_both_directions():
    q, sigma = 0.5, 1.0
    curve = fc.claim_curve(PoissonGaussianEvent(q, sigma, 1))
    f = lambda a: _subsampled_f(a, q, 1 / sigma)   # noqa: E731  (remove direction; add direction is its inverse)
    for a in ALPHAS[::3]:
        bound = min(float(f(a)), float(_inverse(f, a)))
        assert curve.f(a) <= bound + 1e-12
        assert curve.f(a) >= bound - 0.05


def test_binv_is_curve_at_one_minus_y():
    curve = fc.claim_curve(GAUSS)
    for y in (1e-6, 1e-3, 0.2, 0.7):
        assert curve.binv(y) == pytest.approx(curve.f(1 - y), abs=1e-12)


def test_recursion_monotone_in_the_curve():
    rng = np.random.default_rng(24)
    for _ in range(300):
        m = int(rng.integers(50, 5000))
        r = int(rng.integers(1, m + 1))
        v = int(rng.integers(0, r + 1))
        mu = float(rng.uniform(0.1, 4))
        c = float(rng.uniform(0.3, 1.0))
        gauss = lambda x, mu=mu: float(ndtr(ndtri(x) - mu))  # noqa: E731
        smaller = lambda x, g=gauss, c=c: c * g(x)  # noqa: E731  pointwise smaller binv: a less private curve
        if fdp_rejects_curve(m, r, v, smaller, 0.05):
            assert fdp_rejects_curve(m, r, v, gauss, 0.05)


def test_gaussian_claim_agrees_with_gaussian_family():
    """At (1000, 100, 100) the exact Gaussian recursion gives μ_lower = 1.225533 (docs reference row): the claim
    curve of μ = 1.20 (below) is rejected, that of μ = 1.2256 (above) is not, and wherever the claim curve rejects,
    the exact Gaussian curve rejects too."""
    assert fdp_mu_lower(1000, 100, 100, 0.05)[0] == pytest.approx(1.225533, abs=1e-6)
    for mu, expected in ((1.20, True), (1.2256, False)):
        got = fdp_rejects_curve(1000, 100, 100, fc.claim_curve(PoissonGaussianEvent(1.0, 1 / mu, 1)).binv, 0.05)
        assert got is expected
        assert not got or fdp_rejects(1000, 100, 100, mu, 0.05)


def test_null_counts_rejected_at_most_tau():
    """Counts of an optimal-threshold attack on a μ = 1 Gaussian mechanism (top 50 guessed in, bottom 50 out),
    seed 2024, 400 audits. At the claim's own curve (μ = 1) the rejection rate is ≤ τ + 3 standard errors
    (pre-declared); against the more private claim μ = 0.6 the same counts reject in more than half the audits
    (measured 0.615), so the test has power and the first check is not vacuous."""
    rng = np.random.default_rng(2024)
    counts = []
    m, k, sims = 1000, 50, 400
    for _ in range(sims):
        s = rng.integers(0, 2, m)
        order = np.argsort(rng.normal(s * 1.0, 1.0))
        counts.append(int(s[order[-k:]].sum() + (1 - s[order[:k]]).sum()))
    own, stricter = fc.claim_curve(GAUSS), fc.claim_curve(PoissonGaussianEvent(1.0, 1 / 0.6, 1))
    assert sum(fdp_rejects_curve(m, 2 * k, v, own.binv, 0.05) for v in counts) / sims \
        <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)
    assert sum(fdp_rejects_curve(m, 2 * k, v, stricter.binv, 0.05) for v in counts) / sims > 0.5


def test_member_scales_every_noise():
    h = CompositionHistory((PoissonGaussianEvent(0.1, 1.0, 5), PoissonGaussianEvent(0.2, 2.0, 3)))
    assert [p.noise_multiplier for p in fc.member(h, 0.5).phases] == [0.5, 1.0]
    assert fc.member(GaussianEvent(2.0), 1.5).sigma == 3.0
    assert fc.claim_family_label(GAUSS).startswith("claim_family:")


@pytest.mark.parametrize("kwargs, name", [
    ({"event": PrivBoNEvent(1.0, 1.0, candidates=2, r_max=1.0)}, "event"),
    ({"correct": 101}, "correct"),
    ({"delta": 0.0}, "delta"),
    ({"confidence": 1.0}, "confidence"),
    ({"claim": {"epsilon": 1.0}}, "claim.epsilon"),
])
def test_bad_inputs_name_the_parameter(kwargs, name):
    args = {"m": 1000, "guesses": 100, "correct": 100, "event": GAUSS, "delta": 1e-5, **kwargs}
    with pytest.raises(InvalidParameter) as err:
        fc.fdp_claim_curve(args.pop("m"), args.pop("guesses"), args.pop("correct"), **args)
    assert err.value.name == name


@pytest.mark.slow
def test_gaussian_report_eps_lower_and_schema():
    """ε_lower of the μ = 1 Gaussian family at (1000, 100, 100), δ = 1e-5: the member found has μ within 0.01
    below the exact recursion's 1.225533, so ε_lower lies just under ε(μ = 1.225533, 1e-5) = 5.5490 (gdp
    conversion) and above ε(μ = 1.2155)."""
    from audits.statistics.gdp import eps_of_mu
    rep = fc.fdp_claim_curve(1000, 100, 100, event=GAUSS, delta=1e-5)
    res = rep.result
    mu = 1 / res["noise_scale"]
    assert mu <= 1.225533 and mu >= 1.2155        # below the exact Gaussian recursion, within 0.01 of it
    assert eps_of_mu(1.2155, 1e-5) <= res["eps_lower"] <= eps_of_mu(1.225533, 1e-5)
    assert res["eps_lower_steinke"] == pytest.approx(3.465376, abs=1e-6)
    assert res["rejects_nominal"] is True
    validate(rep.to_json(), name="audit.schema.json")


@pytest.mark.parametrize("threshold", [-700, -3, 0, 1, 5, 450])
@pytest.mark.parametrize("k0", [-50, 0, 7, 300])
def test_search_finds_the_least_rejected_grid_index(threshold, k0):
    seen = []
    pred = lambda k: seen.append(k) or k >= threshold  # noqa: E731
    assert fc.grid_search(pred, k0, -1000, 1000) == (threshold, threshold - 1)
    assert len(seen) <= 2 * abs(threshold - k0).bit_length() + 3     # galloping: logarithmic in the distance


def test_search_ends_capped_none_and_always_on_a_rejected_point():
    assert fc.grid_search(lambda k: True, 5, -10, 10) == (-10, None)
    assert fc.grid_search(lambda k: False, 5, -10, 10) == (None, 10)
    rng = np.random.default_rng(7)
    for _ in range(200):                     # any predicate, monotone or not: k_hi was evaluated and rejected
        table = rng.random(41) < 0.5
        table[-1] = True
        hi, lo = fc.grid_search(lambda k: bool(table[k + 20]), int(rng.integers(-20, 21)), -20, 20)
        assert table[hi + 20] and (lo is None or (not table[lo + 20] and hi - lo == 1))


def test_grid_and_search_are_certified_and_below_the_exact_gaussian():
    """The certified search ends on a grid pair: s_hi rejected and s_hi/1.002 not, both by the certified curve.
    Since f_L lies below the exact Gaussian curve, μ = 1/s_hi is at most the exact recursion's μ_lower
    (audits.statistics.gdp, closed-form curve) and, the envelope being close, within 0.01 of it."""
    m, r, v = 1000, 100, 100
    out = fc.claim_eps_lower(m, r, v, GAUSS, 1e-5, 0.05)
    s_hi = out["s"]
    k = round(np.log(s_hi) / np.log1p(2e-3))
    assert s_hi == fc.grid_scale(k)
    assert fdp_rejects_curve(m, r, v, fc.claim_curve(fc.member(GAUSS, s_hi)).binv, 0.05)
    assert not fdp_rejects_curve(m, r, v, fc.claim_curve(fc.member(GAUSS, fc.grid_scale(k - 1))).binv, 0.05)
    mu_exact = fdp_mu_lower(m, r, v, 0.05)[0]
    assert mu_exact - 0.01 <= 1 / s_hi <= mu_exact


def test_proxy_curve_close_to_closed_form():
    """The proxy only steers the search, but it should be near the true curve (mpmath closed form, μ = 1)."""
    curve = fc.proxy_curve(GAUSS)
    for a in ALPHAS[::2]:
        assert abs(curve.f(a) - float(_gauss_f(a, 1))) < 0.02


@pytest.mark.slow
def test_planned_gaussian_m1e5_figure_and_soundness():
    """The documented planning figure (docs/audits.md, claim-curve section; seed 0): Gaussian q = T = σ = 1,
    m = 10⁵, δ = 1e-5. Independent soundness check at the planned counts: the certified claim curve lies below the
    exact Gaussian curve, so its μ = 1/s is at most the closed-form recursion's μ_lower, and its ε_lower at most
    the GDP conversion of that μ_lower (audits.statistics.gdp.eps_of_mu), itself below the claimed ε = 4.3772."""
    from audits.statistics.gdp import eps_of_mu
    out = fc.planned_eps_lower(10**5, event=GAUSS, delta=1e-5, score_model="gdp:1")
    assert (out["k_plus"], out["k_minus"], out["correct"]) == (498, 498, 955)
    assert out["eps_lower"] == pytest.approx(3.331, abs=5e-3)
    assert out["eps_claimed"] == pytest.approx(4.3772, abs=1e-4)
    mu_exact = fdp_mu_lower(10**5, 996, 955, 0.05)[0]
    assert mu_exact >= 1 / out["noise_scale"]
    assert out["eps_lower"] <= eps_of_mu(mu_exact, 1e-5) < out["eps_claimed"]


@pytest.mark.parametrize("extra, name", [
    (["--sampling-rate", "1", "--noise-multiplier", "0.05", "--steps", "1"], "noise_multiplier"),
    (["--sampling-rate", "1", "--noise-multiplier", "1"], "steps"),
    (["--history", "1.0:0.5:2", "--steps", "1"], "steps"),
    (["--sampling-rate", "1.5", "--noise-multiplier", "1", "--steps", "1"], "sampling_rate"),
    (["--history", "0.05:0.5:2"], "history"),
])
def test_cli_refuses_bad_claims_in_one_line(extra, name, capsys, monkeypatch):
    """Exit 2 and one line naming the flag, before any work (the method itself is never called)."""
    from privcheck.cli import main

    monkeypatch.setattr(fc, "fdp_claim_curve", lambda *a, **k: pytest.fail("work started"))
    code = main(["audit", "fdp-claim-curve", "--canaries", "1000", "--guesses", "100", "--correct", "90",
                 "--delta", "1e-5", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and name in err[0]


def test_cli_passes_counts_and_history_event_to_the_method(capsys, monkeypatch):
    """--history gives the method the composed event, the counts and δ as given (the method is stubbed: reaching it
    is what is checked; its figures are the library's, tested above; the full command: tests/test_docs.py)."""
    from privcheck.cli import main

    seen = {}

    def stub(m, r, v, **kw):
        seen.update(m=m, r=r, v=v, **kw)
        raise RuntimeError("stub reached")

    monkeypatch.setattr(fc, "fdp_claim_curve", stub)
    code = main(["audit", "fdp-claim-curve", "--canaries", "1000", "--guesses", "100", "--correct", "90",
                 "--delta", "1e-5", "--history", "1.0:0.5:2", "--json"])
    assert code == 3 and "stub reached" in capsys.readouterr().err
    assert (seen["m"], seen["r"], seen["v"], seen["delta"]) == (1000, 100, 90, 1e-5)
    assert seen["event"] == CompositionHistory((PoissonGaussianEvent(0.5, 1.0, 2),))


def test_eps_lower_is_non_decreasing_in_the_correct_count():
    """The planner maps Monte Carlo quantiles of the correct count v to quantiles of ε_lower, which needs ε_lower
    non-decreasing in v at fixed (m, r). Checked on the Gaussian claim (closed-form ε, so fast) at m = 1000,
    r = 100, v = 60 … 100; the values must also rise strictly from the first rejected count on (a test that could
    not fail would be flat)."""
    eps = [fc.claim_eps_lower(1000, 100, v, GAUSS_EXACT, 1e-5, 0.05)["eps_lower"] for v in range(60, 101, 5)]
    assert all(a <= b for a, b in zip(eps, eps[1:])), eps
    assert eps[-1] > eps[-2] > 0.0


def test_planned_monte_carlo_quantiles_are_counts_of_simulated_audits():
    """The Monte Carlo figures of the planner: three simulated counts in order, each figure the search's ε_lower at
    that count (recomputed here), ordered like the counts; seeded, so the same twice."""
    kwargs = dict(event=GAUSS_EXACT, delta=1e-5, score_model="gdp:2", points=8, refine=0, sims=40, seed=3)
    out = fc.planned_eps_lower(1000, **kwargs)
    r = out["k_plus"] + out["k_minus"]
    lo, mid, hi = out["mc_correct"]
    assert 0 <= lo <= mid <= hi <= r
    for c, key in zip(out["mc_correct"], ("mc_p10", "mc_median", "mc_p90")):
        assert out[key] == fc.claim_eps_lower(1000, r, c, GAUSS_EXACT, 1e-5, 0.05)["eps_lower"]
    assert out["mc_p10"] <= out["mc_median"] <= out["mc_p90"]
    assert fc.planned_eps_lower(1000, **kwargs) == out


def test_a_score_model_plans_the_audits_own_guesses():
    """`fdp_claim_curve(..., score_model=)`: the power block is this method's plan of the audit's r guesses (the
    planner with exactly the two shapes r allows, same seed), its ceiling this method's (all m guesses correct),
    and the report's verdict weighs those figures."""
    rep = fc.fdp_claim_curve(1000, 100, 90, event=GAUSS_EXACT, delta=1e-5, score_model="gdp:1", plan_sims=30,
                             plan_seed=4)
    plan = fc.planned_eps_lower(1000, event=GAUSS_EXACT, delta=1e-5, score_model="gdp:1", sims=30, seed=4,
                                rules=[(100, 0), (50, 50)])
    assert rep.power["planned_eps_lower"] == plan["eps_lower"] and rep.power["mc_median"] == plan["mc_median"]
    assert plan["k_plus"] + plan["k_minus"] == 100
    assert rep.power["eps_ceiling"] == fc.claim_eps_lower(1000, 1000, 1000, GAUSS_EXACT, 1e-5, 0.05)["eps_lower"]
    assert rep.power["score_model"] == "gdp(mu=1.0)" and 0.0 <= rep.power["prob_zero"] <= 1.0
    half = 0.5 * rep.claim["epsilon"]
    assert rep.power["underpowered"] is (min(plan["eps_lower"], plan["mc_median"]) < half)
    with pytest.raises(InvalidParameter) as err:
        fc.fdp_claim_curve(1000, 100, 90, event=GAUSS_EXACT, delta=1e-5, score_model="gdp:-1")
    assert err.value.name == "mu"


def test_prob_zero_counts_the_audits_that_reject_nothing():
    """`prob_zero` is the share of simulated audits whose count rejects no member; with a score model that carries
    no signal at all (gdp:0: in and out scores alike) nearly every audit rejects nothing, and with a strong one
    (gdp:4) none does."""
    weak = fc.planned_eps_lower(1000, event=GAUSS_EXACT, delta=1e-5, score_model="gdp:0.01", sims=40, seed=2,
                                rules=[(100, 0)])
    strong = fc.planned_eps_lower(1000, event=GAUSS_EXACT, delta=1e-5, score_model="gdp:4", sims=40, seed=2,
                                  rules=[(100, 0)])
    assert weak["prob_zero"] >= 0.9 and strong["prob_zero"] == 0.0


def _gaussian_eps(mu, delta):
    """ε(δ) of μ-GDP in mpmath (50 digits): the root of Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) = δ."""
    with mp.workdps(50):
        mu, delta = mp.mpf(mu), mp.mpf(delta)
        if mp.ncdf(mu / 2) - mp.ncdf(-mu / 2) <= delta:     # already (0, δ)-DP
            return mp.mpf(0)
        lo, hi = mp.mpf(0), mp.mpf(60)          # δ(ε) decreases in ε: bisection to 2^-200 of the bracket
        for _ in range(200):
            mid = (lo + hi) / 2
            if mp.ncdf(-mid / mu + mu / 2) - mp.exp(mid) * mp.ncdf(-mid / mu - mu / 2) > delta:
                lo = mid
            else:
                hi = mid
        return hi


def test_full_batch_claims_use_the_exact_gaussian_curve():
    """q = 1 under add/remove: T rounds at σ are exactly the Gaussian mechanism with μ = √T/σ, so the claim curve's
    lines are the analytic Gaussian's: each ε_i at or above the exact μ-GDP ε(δ_i) (mpmath), and within 1e-6 of it;
    the float σ/√T rounds to the safe side of each use (exact rational check)."""
    from fractions import Fraction

    event = PoissonGaussianEvent(1.0, 2.0, 4)                  # μ = √4/2 = 1
    curve = fc.claim_curve(event)
    for e, d in zip(curve.eps[::6], curve.delta[::6]):
        exact = _gaussian_eps(1, float(d))
        assert exact <= e <= exact + 1e-6, (d, e, exact)
    odd = PoissonGaussianEvent(1.0, 1.3, 7)                     # σ/√T not a float
    low = fc.gaussian_equivalent(odd, less_private=True).sigma
    high = fc.gaussian_equivalent(odd, less_private=False).sigma
    assert Fraction(low) ** 2 * 7 < Fraction(1.3) ** 2 < Fraction(high) ** 2 * 7
    assert fc.gaussian_equivalent(PoissonGaussianEvent(0.5, 1.0, 4), less_private=True) \
        == PoissonGaussianEvent(0.5, 1.0, 4)                     # subsampled: the PLD, unchanged
    assert fc.gaussian_equivalent(PoissonGaussianEvent(1.0, 1.0, 4, "replace_one"), less_private=True).relation \
        .value == "replace_one"


def test_a_weak_audit_of_a_high_noise_claim_finds_nothing_without_error():
    """A claim with σ = 9.66 (q = 0.1, T = 50) and counts that reject nothing: the search climbs to the most
    private member it may probe, whose noise stays inside the certified PLD's range (1e8), and reports 0 instead
    of failing on a member the accountant refuses."""
    event = PoissonGaussianEvent(0.1, 9.66, 50)
    out = fc.claim_eps_lower(1000, 100, 40, event, 1e-6, 0.05)
    assert out["eps_lower"] == 0.0 and out["s"] is None and out["rejects_nominal"] is False
