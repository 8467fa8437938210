"""Black-box pair audit (audits/blackbox.py) on the selection harnesses (audits/selection_pairs.py).

Expected values come from closed forms evaluated in mpmath (exponential mechanism 0.5000 of docs/audits.md
"Reference values", ε_BoN(n) and PrivITP's κ, κ_acc of docs/selection.md), from scipy's binomial test and from the
Gaussian law of λ̃ (scipy.stats.norm). Statistical assertions use fixed seeds and confidence levels chosen so
that a correct implementation fails with probability below 1e-6 (union bound over the audits of a test);
power margins are stated next to each assertion.
"""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy.stats import binom, binomtest, norm

from audits.blackbox import (
    D_OVER_DPRIME,
    DPRIME_OVER_D,
    Event,
    Fixed,
    Singletons,
    Thresholds,
    TopPrefixes,
    bound_from_counts,
    cp_lower,
    cp_upper,
    pair_audit,
    select_event,
)
from audits.selection_pairs import (
    exponential_mechanism_pair,
    plan_privitp_phase2,
    privbon_worst_pair,
    privitp_phase1_pair,
    privitp_phase2_pair,
)
from audits.statistics.report import audit_document
from privcheck.accounting import PrivITPParams
from privcheck.errors import InvalidParameter

mp.mp.dps = 50
STRICT = 1 - 1e-6          # P[ε_lower > true ε] ≤ 1e-6 for one audit

# PrivITP Phase-2 configuration chosen with the exact law so that {t = 1}, {t = 2} and ⊥ are all frequent
# enough on D′ (P ≈ 0.089, 0.014, 5.8e-4; see plan_privitp_phase2).
ITP = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.05, sigma_z=0.25, headroom=0.5, sensitivity=0.25,
                    delta=1e-5, r_max=1.0)
ITP_LAMBDA = 0.0


# --- independent references -------------------------------------------------------------------------------------

def mp_eps_bon(n, delta_s, sigma, r):
    """PrivBoN worst pair (docs/selection.md, "PrivBoN"): log(1 + (n−1)e^{R/σ}) − log(1 + (n−1)e^{(R−2Δ)/σ})."""
    n, delta_s, sigma, r = (mp.mpf(x) for x in (n, delta_s, sigma, r))
    return mp.log(1 + (n - 1) * mp.e ** (r / sigma)) - mp.log(1 + (n - 1) * mp.e ** ((r - 2 * delta_s) / sigma))


def mp_itp_eps2(params, lt, t):
    """PrivITP Phase 2 (docs/selection.md, "PrivITP"): ε2(t) = (t−1)κ + κ_acc, ε2(⊥) = nκ, with A, B in terms of
    G(u) = uΦ(u) + φ(u)."""
    s, d, r = mp.mpf(params.sigma_z), mp.mpf(params.sensitivity), mp.mpf(params.r_max)
    lt = mp.mpf(lt)
    c = r + s * mp.mpf(params.headroom) - lt
    g = lambda u: u * mp.ncdf(u) + mp.npdf(u)  # noqa: E731
    a = lambda x: g((lt + c - r + x) / s) - g((lt - r + x) / s)  # noqa: E731
    b = lambda x: g((x - lt) / s) - g((x - lt - c) / s)  # noqa: E731
    kappa, kappa_acc = mp.log(a(d)) - mp.log(a(0)), mp.log(b(d)) - mp.log(b(0))
    return params.candidates * kappa if t is None else (t - 1) * kappa + kappa_acc


# --- Clopper–Pearson and the bound --------------------------------------------------------------------------------

def test_clopper_pearson_matches_binomtest_and_closed_forms():
    a = 0.025
    for k, n in [(0, 50), (3, 50), (25, 50), (50, 50), (170, 50_000), (31_165, 50_000)]:
        lo = binomtest(k, n, alternative="greater").proportion_ci(confidence_level=1 - a, method="exact").low
        up = binomtest(k, n, alternative="less").proportion_ci(confidence_level=1 - a, method="exact").high
        assert cp_lower(k, n, a) == pytest.approx(lo, rel=1e-9, abs=1e-15)
        assert cp_upper(k, n, a) == pytest.approx(up, rel=1e-9, abs=1e-15)
    # Edges: CP_up(0, n) = 1 − a^{1/n} (reference value 0.0036821 at n = 1000), CP_lo(n, n) = a^{1/n}.
    assert float(cp_upper(0, 1000, a)) == pytest.approx(0.0036821, abs=1e-7)
    assert float(cp_lower(1000, 1000, a)) == pytest.approx(a ** (1 / 1000), rel=1e-12)
    assert float(cp_lower(0, 10, a)) == 0.0 and float(cp_upper(10, 10, a)) == 1.0


def test_bound_from_counts_formula():
    eps, p1_lo, p2_up = bound_from_counts(600, 1000, 300, 1000, delta=1e-3, confidence=0.9)
    assert eps == pytest.approx(math.log((p1_lo - 1e-3) / p2_up), rel=1e-12)
    assert p1_lo == pytest.approx(float(cp_lower(600, 1000, 0.05)), rel=1e-12)
    # p1_lo ≤ δ gives 0, and a negative logarithm is clipped to 0.
    assert bound_from_counts(1, 1000, 0, 1000, delta=0.5, confidence=0.95)[0] == 0.0
    assert bound_from_counts(300, 1000, 600, 1000, delta=0.0, confidence=0.95)[0] == 0.0


# --- event selection on A ---------------------------------------------------------------------------------------

def test_select_event_plugin_ratio_by_hand():
    a_d = np.array([0, 0, 0, 0, 1])
    a_dp = np.array([1, 1, 1, 0, 0])
    choice = select_event(a_d, a_dp, Singletons(), rng=np.random.default_rng(0))
    # D over D′ best: {0} with ln(4.5/2.5) = 0.588; D′ over D best: {1} with ln(3.5/1.5) = 0.847.
    assert choice.direction == DPRIME_OVER_D and choice.event.outputs == (1,)
    assert choice.criterion == pytest.approx(math.log(3.5 / 1.5), rel=1e-12)
    assert (choice.k1_select, choice.k2_select) == (3, 1)


def test_select_event_thresholds_and_prefixes():
    a_d = np.array([0.1, 0.2, 0.9, 0.95, 1.0, 1.1])
    a_dp = np.array([0.0, 0.05, 0.1, 0.15, 0.2, 1.05])
    choice = select_event(a_d, a_dp, Thresholds(), rng=np.random.default_rng(0))
    # D′ over D, {x ≤ 0.05}: 2 of 6 on D′, 0 of 6 on D → ln(2.5/0.5). Runners-up: {x ≤ 0.15} on D′ over D
    # and {x ≥ 0.9} on D over D′ (4 vs 1 → ln 3), {x ≥ 1.1} (1 vs 0 → ln 3).
    assert (choice.direction, choice.event.op, choice.event.threshold) == (DPRIME_OVER_D, "<=", 0.05)
    assert choice.criterion == pytest.approx(math.log(5.0), rel=1e-12)
    b_d = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])
    b_dp = np.array([1, 1, 1, 2, 3, 3, 3, 3, 3, 3])
    prefixes = select_event(b_d, b_dp, TopPrefixes(), rng=np.random.default_rng(0))
    # Ranked on D over D′: 0 (3 vs 0), then 1 (2 vs 3)...; {0} has ln(3.5/0.5), {0, 1} ln(5.5/3.5).
    assert prefixes.direction == D_OVER_DPRIME and prefixes.event.outputs == (0,)
    assert prefixes.criterion == pytest.approx(math.log(7.0), rel=1e-12)


def test_event_membership_and_json():
    e = Event("fixed", (1, 3))
    assert e.contains(np.array([0, 1, 2, 3])).tolist() == [False, True, False, True]
    t = Event("thresholds", op="<=", threshold=0.5)
    assert t.count(np.array([0.1, 0.5, 0.7])) == 2
    assert t.to_json() == {"family": "thresholds", "outputs": None, "op": "<=", "threshold": 0.5}


# --- reference values and the worst pairs -----------------------------------------------------------------------

def test_exponential_mechanism_reference_value():
    pair = exponential_mechanism_pair()
    half = mp.mpf(1) / 2
    p_d, p_dp = mp.e ** half / (1 + mp.e ** half), 1 / (1 + mp.e ** half)
    exact = mp.log(p_d / p_dp)
    assert abs(exact - half) < mp.mpf(10) ** -45                          # closed form: exactly 1/2
    assert pair.exact_log_ratio() == pytest.approx(0.5, abs=1e-4)       # reference value 0.5000
    assert pair.exact_log_ratio() == pytest.approx(float(exact), abs=1e-12)
    assert pair.certified_epsilon == pytest.approx(float(mp_eps_bon(2, 1, 2, 1)), abs=1e-12)
    assert pair.certified_epsilon >= float(exact) - 1e-15
    assert pair.probabilities((0,)) == pytest.approx((float(p_d), float(p_dp)), abs=1e-12)


def test_exponential_mechanism_audit_reaches_but_never_exceeds_half():
    report = exponential_mechanism_pair().audit(100_000, seed=11, confidence=STRICT)
    eps = report.result["eps_lower"]
    # Valid bound: P[ε_lower > 0.5] ≤ 1e-6. Power: the expected bound at 5e4 test draws per side is
    # ≈ 0.454 with standard deviation ≈ 0.007, so 0.4 is 8 standard deviations away.
    assert 0.4 < eps <= 0.5
    assert report.claim["epsilon"] == pytest.approx(0.5, abs=1e-12)
    assert report.result["rejects_nominal"] is False


def test_privbon_worst_pair_is_tight_and_audited():
    pair = privbon_worst_pair(1.0, 2.0, 16, 1.0)
    exact = float(mp_eps_bon(16, 1, 2, 1))
    assert pair.exact_log_ratio() == pytest.approx(exact, abs=1e-12)         # the pair attains ε_BoN(16)
    assert exact - 1e-12 <= pair.certified_epsilon <= exact + 1e-9
    assert pair.probabilities((0,))[1] * 50_000 > 1_000                     # auditable: ~1,900 expected
    report = pair.audit(100_000, seed=3, confidence=STRICT)
    eps = report.result["eps_lower"]
    # Expected ≈ 0.76 (sd ≈ 0.03) against ε_BoN(16) = 0.935: "within a factor 2" has a margin of 9 sd.
    assert exact / 2 < eps <= pair.certified_epsilon
    assert tuple(report.result["event"]["outputs"]) == (0,) and report.result["direction"] == D_OVER_DPRIME


@pytest.mark.parametrize("target", [1, 2, None])
def test_privitp_phase2_worst_pair_is_tight_and_audited(target):
    pair = privitp_phase2_pair(ITP, ITP_LAMBDA, target)
    exact = float(mp_itp_eps2(ITP, ITP_LAMBDA, target))
    assert pair.exact_log_ratio() == pytest.approx(exact, abs=1e-9)          # the pair is tight
    assert exact - 1e-12 <= pair.certified_epsilon <= exact + 1e-9
    report = pair.audit(200_000, seed=5, confidence=STRICT)                  # pre-registered {t = target}
    eps = report.result["eps_lower"]
    # Expected bounds (exact law, 1e5 test draws per side): ≈ 0.92, 1.66, 2.6 against 1.00, 1.78, 3.14.
    assert exact / 2 < eps <= pair.certified_epsilon
    assert report.claim["epsilon"] == pytest.approx(pair.certified_epsilon, abs=1e-12)


def test_privitp_phase2_searched_event_is_compared_with_its_expost_loss():
    pair = privitp_phase2_pair(ITP, ITP_LAMBDA, 1)
    report = pair.audit(100_000, seed=9, confidence=STRICT, event_family=(Singletons(), TopPrefixes()))
    outputs = report.result["event"]["outputs"]
    direction = report.result["direction"]
    expost = [float(mp_itp_eps2(ITP, ITP_LAMBDA, None if o == 0 else o)) for o in outputs]
    assert report.claim["epsilon"] == pytest.approx(max(expost), abs=1e-9)   # largest ex-post loss over E
    assert report.result["eps_lower"] <= pair.exact_log_ratio(outputs, direction) <= report.claim["epsilon"] + 1e-9


def test_plan_privitp_phase2_picks_an_auditable_configuration():
    plan = plan_privitp_phase2(ITP, 1, 100_000, sigma_z_grid=[0.1, 0.25, 0.5])
    assert plan.p_Dprime * 50_000 >= 100
    assert plan.exact_log_ratio == pytest.approx(float(mp_itp_eps2(plan.params, plan.lambda_tilde, 1)), abs=1e-9)
    assert 0 < plan.predicted_eps_lower <= plan.certified + 1e-12
    with pytest.raises(InvalidParameter):
        plan_privitp_phase2(ITP, 1, 10)                      # far too few draws for any grid point


def test_privitp_phase1_pair_gaussian_release():
    params = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.01, sigma_z=0.05, headroom=0.5, sensitivity=0.01,
                           delta=1e-5, r_max=1.0)             # μ = Δ/σ_X = 1
    pair = privitp_phase1_pair(params)
    assert pair.certified_epsilon == pytest.approx(4.377178, abs=1e-6)      # ε(μ = 1, δ = 1e-5) of the μ-GDP curve
    report = pair.audit(100_000, seed=2, confidence=STRICT, criterion="predicted_bound")
    event = report.result["event"]
    # Exact law: λ̃ ~ N(λ̂ + Δ, σ_X²) on D and N(λ̂, σ_X²) on D′, with λ̂ = 0.495 − 0.05 = 0.445 for four
    # scores at 0.495 (λ̂ = s − β for constant scores); scipy.stats.norm evaluates it.
    lam = 0.495 - 0.05
    sf = norm.sf if event["op"] == ">=" else norm.cdf
    p_d, p_dp = sf(event["threshold"], lam + 0.01, 0.01), sf(event["threshold"], lam, 0.01)
    assert pair.probabilities(Event("thresholds", op=event["op"], threshold=event["threshold"])) == \
        pytest.approx((p_d, p_dp), rel=1e-9)
    num, den = (p_d, p_dp) if report.result["direction"] == D_OVER_DPRIME else (p_dp, p_d)
    eps = report.result["eps_lower"]
    assert eps <= math.log((num - params.delta) / den) <= pair.certified_epsilon
    assert eps > 1.5                                                          # expected ≈ 2.05 (sd ≈ 0.05)


def test_correct_mechanisms_never_exceed_their_certified_epsilon():
    """Six pairs × five seeds at confidence 1 − 3e-8: a false failure has probability ≤ 9e-7."""
    conf = 1 - 3e-8
    phase1 = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.01, sigma_z=0.05, headroom=0.5, sensitivity=0.01,
                           delta=1e-5, r_max=1.0)
    cases = [(exponential_mechanism_pair(), None, "plugin_ratio"),
             (privbon_worst_pair(1.0, 2.0, 16, 1.0), (Singletons(), TopPrefixes()), "plugin_ratio"),
             (privitp_phase2_pair(ITP, ITP_LAMBDA, 1), (Singletons(), TopPrefixes()), "plugin_ratio"),
             (privitp_phase2_pair(ITP, ITP_LAMBDA, 2), None, "plugin_ratio"),
             (privitp_phase2_pair(ITP, ITP_LAMBDA, None), (Singletons(), TopPrefixes()), "predicted_bound"),
             (privitp_phase1_pair(phase1), None, "predicted_bound")]
    positive = 0
    for pair, family, criterion in cases:
        for seed in range(5):
            report = pair.audit(20_000, seed=seed, confidence=conf, event_family=family, criterion=criterion)
            assert report.result["eps_lower"] <= report.claim["epsilon"], (pair.pair_id, seed)
            assert report.result["rejects_nominal"] is False
            positive += report.result["eps_lower"] > 0
    assert positive >= 25          # and the audits have power (every pair's expected bound is > 0.2)


# --- selecting the event on the tested data is invalid --------------------------------------------------------

def test_split_is_needed_null_mechanism():
    """Identical laws on D and D′ (true ε = 0), 400 outputs, 3,000 draws per side, 200 repetitions.

    Same-data selection: a pilot over other seeds gave a positive bound in ~70% of repetitions; asserting at
    least 25% (5× the nominal 5%) fails only if the rate were far lower (P[Bin(200, 0.5) < 50] < 1e-12).
    Split form: under the null each repetition is positive with probability ≤ 0.05 (audit guarantee), so the
    count exceeds the threshold below with probability < 1e-7.
    """
    outputs, draws, reps, conf = 400, 3_000, 200, 0.95
    family = (Singletons(), TopPrefixes())
    null = lambda size, gen: gen.integers(0, outputs, size)  # noqa: E731
    split_limit = int(binom.isf(1e-7, reps, 1 - conf))        # P[Bin(200, 0.05) > split_limit] ≤ 1e-7
    same_data_positive = split_positive = 0
    for rep in range(reps):
        gen = np.random.default_rng([2024, rep])
        x_d, x_dp = null(draws, gen), null(draws, gen)
        choice = select_event(x_d, x_dp, family, rng=gen)
        num, den = (x_d, x_dp) if choice.direction == D_OVER_DPRIME else (x_dp, x_d)
        eps, _, _ = bound_from_counts(choice.event.count(num), draws, choice.event.count(den), draws, delta=0.0,
                                      confidence=conf)
        same_data_positive += eps > 0
        report = pair_audit(null, null, n=draws, event_family=family, delta=0.0, confidence=conf, seed=rep)
        split_positive += report.result["eps_lower"] > 0
    assert same_data_positive >= 0.25 * reps, same_data_positive
    assert split_positive <= split_limit, (split_positive, split_limit)


# --- the report ---------------------------------------------------------------------------------------------------

def test_report_carries_the_blackbox_extras():
    pair = exponential_mechanism_pair()
    report = pair.audit(2_000, seed=1, confidence=0.95, split_frac=0.3)
    doc = report.to_json()
    assert doc["method"] == "blackbox_pair" and doc["schema"] == "privcheck.audit/1"
    res = doc["result"]
    for key in ("n_per_side", "split_frac", "event", "k1", "k2", "p1_lo", "p2_up", "direction", "pair_id"):
        assert key in res
    assert res["n_per_side"] == 2_000 and res["split_frac"] == 0.3 and res["pair_id"] == pair.pair_id
    assert res["n1_test"] == res["n2_test"] == 1_400                    # 600 draws per side select the event
    lo = binomtest(res["k1"], 1_400, alternative="greater").proportion_ci(0.975, method="exact").low
    up = binomtest(res["k2"], 1_400, alternative="less").proportion_ci(0.975, method="exact").high
    assert res["eps_lower"] == pytest.approx(max(0.0, math.log(lo / up)), rel=1e-9, abs=1e-12)
    assert doc["claim"]["epsilon"] == pytest.approx(0.5, abs=1e-12) and doc["claim"]["delta"] == 0.0
    assert doc["guessing"]["selection"] == "split" and doc["guessing"]["n_hypotheses"] == 1
    assert doc["power"]["eps_ceiling"] >= doc["power"]["planned_eps_lower"] >= 0
    assert report.headline() == {"eps_lower": res["eps_lower"]}
    sealed = audit_document(report)                                     # valid against audit.schema.json
    assert sealed["result"] == res and len(sealed["sha256"]) == 64


def test_same_seed_same_report():
    pair = privbon_worst_pair(1.0, 2.0, 4, 1.0)
    a = pair.audit(5_000, seed=4).to_json()
    b = pair.audit(5_000, seed=4).to_json()
    assert a == b


# --- bad input ----------------------------------------------------------------------------------------------------

def _never(size, gen):
    raise AssertionError("sampled before validation")


GOOD = dict(n=100, split_frac=0.5, event_family=Singletons(), delta=0.0, confidence=0.95, seed=0)


@pytest.mark.parametrize("field,value", [
    ("n", 1), ("n", 0), ("n", 2.5), ("n", True), ("n", "100"),
    ("split_frac", 0.0), ("split_frac", 1.0), ("split_frac", -0.2), ("split_frac", float("nan")),
    ("confidence", 0.0), ("confidence", 1.0), ("confidence", 1.5), ("confidence", None),
    ("delta", -1e-9), ("delta", 1.0), ("delta", float("nan")), ("delta", float("inf")),
    ("event_family", ()), ("event_family", []), ("event_family", Fixed(())), ("event_family", "bogus"),
    ("event_family", TopPrefixes(max_j=0)), ("seed", -1), ("seed", 1.5),
    ("criterion", "max_ratio"), ("eps_nominal", -0.1), ("eps_nominal", float("inf")),
])
def test_bad_input_is_rejected_before_sampling(field, value):
    with pytest.raises(InvalidParameter) as info:
        pair_audit(_never, _never, **{**GOOD, field: value})
    assert info.value.name.split(".")[0] == field


def test_bad_samplers_are_rejected():
    with pytest.raises(InvalidParameter):
        pair_audit(None, _never, **GOOD)
    with pytest.raises(InvalidParameter):                 # wrong number of draws
        pair_audit(lambda size, gen: np.zeros(size - 1), lambda size, gen: np.zeros(size), **GOOD)
    with pytest.raises(InvalidParameter):                 # not one output per draw
        pair_audit(lambda size, gen: np.zeros((size, 2)), lambda size, gen: np.zeros(size), **GOOD)
    with pytest.raises(InvalidParameter):                 # NaN outputs
        pair_audit(lambda size, gen: np.full(size, np.nan), lambda size, gen: np.zeros(size), **GOOD)
