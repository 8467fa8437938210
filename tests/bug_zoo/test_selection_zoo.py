"""Selection bug zoo (docs/selection.md, "Bug zoo"): each broken variant overrides one piece of the reference,
and a check of `privcheck.checks.selection` (or the Monte-Carlo agreement check) catches it, while the
reference passes the same check. Variants that the black-box pair audits catch
(tests/bug_zoo/test_selection_audits.py) are also caught here by an exact-law check."""

import dataclasses

import numpy as np

from mechanisms.selection import PrivITP, lambda_hat, privbon_law, privitp_law, privitp_law_given_lambda
from mechanisms.selection.laws import acceptance_rejection
from privcheck.accounting import (
    ExPostFilter,
    PrivBoNEvent,
    PrivITPEvent,
    PrivITPParams,
    PrivITPPhase1Event,
    PrivITPWorstCaseEvent,
    epsilon,
)
from privcheck.checks.selection import (
    check_bound_attained,
    check_bound_respected,
    check_budget_respected,
    check_gaussian_release,
    check_public_constants,
)
from privcheck.checks.statistics import binomial_agreement

R, DELTA_S, SIGMA, N = 1.0, 0.1, 0.2, 16


def bon_extremal(n=N, d=DELTA_S):
    """D: selected candidate (index 0) at Δ, others at R − Δ; D′: 0 and R (the PrivBoN extremal pair)."""
    return np.array([d] + [R - d] * (n - 1)), np.array([0.0] + [R] * (n - 1)), 0


def random_pairs(rng, n, d, count=200, lo=0.0, hi=R):
    for _ in range(count):
        a = rng.uniform(lo, hi, n)
        yield a, np.clip(a + rng.uniform(-d, d, n), lo, hi)


# --- PrivBoN --------------------------------------------------------------------------------------

def reference_bon_law(s):
    return privbon_law(np.clip(s, 0.0, R), SIGMA)


def test_privbon_half_noise_is_caught():
    bound = epsilon(PrivBoNEvent(DELTA_S, SIGMA, candidates=N, r_max=R)).value
    half_noise = lambda s: privbon_law(np.clip(s, 0.0, R), SIGMA / 2)  # noqa: E731  Gumbel scale σ/2
    assert check_bound_attained(reference_bon_law, [bon_extremal()], bound)["passed"]
    caught = check_bound_respected(half_noise, [bon_extremal()[:2]], bound)
    assert not caught["passed"] and caught["observed"] > 0.5     # the true loss is about twice the charge


def test_privbon_unclipped_is_caught():
    bound = epsilon(PrivBoNEvent(DELTA_S, SIGMA, candidates=N, r_max=R)).value
    unclipped = lambda s: privbon_law(s, SIGMA)  # noqa: E731
    # Out-of-range scores (a reward model that overshoots its declared range) on both neighbours.
    d = np.array([DELTA_S] + [R + 2.0 - DELTA_S] * (N - 1))
    dp = np.array([0.0] + [R + 2.0] * (N - 1))
    assert check_bound_respected(reference_bon_law, [(d, dp)], bound)["passed"]
    assert not check_bound_respected(unclipped, [(d, dp)], bound)["passed"]


def test_data_dependent_rmax_is_caught():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 0.8, N)
    neighbours = [a, np.clip(a + DELTA_S, 0, 1)]
    reference = lambda s: {"r_max": R, "sigma": SIGMA}  # noqa: E731
    data_dependent = lambda s: {"r_max": float(np.max(s)), "sigma": SIGMA}  # noqa: E731
    assert check_public_constants(reference, neighbours)["passed"]
    caught = check_public_constants(data_dependent, neighbours)
    assert not caught["passed"] and caught["observed"] == ["r_max"]


# --- PrivITP --------------------------------------------------------------------------------------

PARAMS = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5, sensitivity=0.01,
                       delta=1e-5, r_max=R)
LT = 0.5


def itp_bounds(params):
    outcomes = list(range(1, params.candidates + 1)) + [None]
    return [epsilon(PrivITPEvent(params, LT, t)).details["eps2_post"]["value"] for t in outcomes]


def itp_extremal(params):
    """Per outcome (t, or ⊥ = index n): rejected at R on D′ and R − Δ on D, the accepted one at 0 and Δ."""
    n, d = params.candidates, params.sensitivity
    out = []
    for t in list(range(1, n + 1)) + [None]:
        acc = [] if t is None else [t - 1]
        on_d = np.array([d if i in acc else R - d for i in range(n)])
        on_dp = np.array([0.0 if i in acc else R for i in range(n)])
        out.append((on_d, on_dp, n if t is None else t - 1))
    return out


def law_from(params, sigma_noise=None):
    """Exact Phase-2 law given λ̃ = LT with the threshold width from `params` and noise std `sigma_noise`."""
    def law(s):
        if sigma_noise is None:
            L = privitp_law_given_lambda(s, LT, params)
            return np.append(L.probs, L.fallback)
        c = params.threshold_width(LT)
        acc, rej = acceptance_rejection(np.clip(s, 0, R), LT, c, sigma_noise)
        probs = np.cumprod(np.append(1.0, rej[:-1])) * acc
        return np.append(probs, np.prod(rej))
    return law


def test_privitp_reference_is_tight_and_sound():
    bounds = itp_bounds(PARAMS)
    assert check_bound_attained(law_from(PARAMS), itp_extremal(PARAMS), bounds)["passed"]
    assert check_bound_respected(law_from(PARAMS), random_pairs(np.random.default_rng(1), 4, 0.01), bounds)["passed"]


def test_privitp_accountant_c_mismatch_is_caught():
    """The accountant uses c = R − λ̃ (no headroom) while the mechanism uses c = R + σ_Z·L − λ̃."""
    wrong_accountant = dataclasses.replace(PARAMS, headroom=0.0)
    result = check_bound_attained(law_from(PARAMS), itp_extremal(PARAMS), itp_bounds(wrong_accountant))
    assert not result["passed"] and result["observed"] > 1e-3   # the reported ε2 is not the mechanism's loss


def test_privitp_phase2_sigma_mismatch_is_caught():
    """Phase-2 noise σ_Z while M and the accountant use σ_Z/2 (and the reverse)."""
    half = dataclasses.replace(PARAMS, sigma_z=PARAMS.sigma_z / 2)
    assert not check_bound_attained(law_from(half, sigma_noise=PARAMS.sigma_z), itp_extremal(half),
                                    itp_bounds(half))["passed"]
    # Less noise in the mechanism than accounted: the loss is exceeded outright.
    assert not check_bound_respected(law_from(PARAMS, sigma_noise=PARAMS.sigma_z / 2),
                                     [p[:2] for p in itp_extremal(PARAMS)], itp_bounds(PARAMS))["passed"]


def test_mu_charged_as_eps1_is_caught():
    p = dataclasses.replace(PARAMS, sigma_x=0.01)            # μ = Δ/σ_X = 1
    assert check_gaussian_release(epsilon(PrivITPPhase1Event(p)).value, p.delta, p.sensitivity, p.sigma_x)["passed"]
    mu = p.sensitivity / p.sigma_x
    caught = check_gaussian_release(mu, p.delta, p.sensitivity, p.sigma_x)
    assert not caught["passed"] and caught["observed"] > 1e-2  # δ(1; μ=1) ≈ 0.127 ≫ 1e-5


def test_privitp_reused_pool_is_caught():
    """Phase 2 reuses the Phase-1 candidates: the output no longer follows the exact law of the Phase-2 batch."""
    rng = np.random.default_rng(11)
    s1, s2 = np.array([0.9, 0.95, 0.85, 0.9]), np.array([0.2, 0.4, 0.95, 0.3])
    draws = 100_000
    exact = privitp_law(s2, float(lambda_hat(s1, PARAMS.beta)), PARAMS)
    law = np.append(exact.probs, exact.fallback)

    class ReusedPool(PrivITP):
        def select(self, phase1_scores, phase2_scores, rng=None, **kw):
            return super().select(phase1_scores, np.array(phase1_scores, copy=True), rng, **kw)

    def counts(mech):
        res = mech.select(np.tile(s1, (draws, 1)), np.tile(s2, (draws, 1)), rng, account=False)
        return np.bincount(np.where(res.halting_times == 0, 4, res.halting_times - 1), minlength=5)

    assert binomial_agreement(counts(PrivITP(PARAMS)), law)["passed"]
    assert not binomial_agreement(counts(ReusedPool(PARAMS)), law)["passed"]


def test_charge_after_run_filter_is_caught():
    """Adversarial transcript: every query realises the worst loss its admission allowed."""
    rng = np.random.default_rng(5)
    eps1 = epsilon(PrivITPPhase1Event(PARAMS)).value

    def run(mode):
        f = ExPostFilter(budget=5.0, delta_total=1e-3, mode=mode)
        for q in range(200):
            lt = float(rng.uniform(0.0, 1.0))
            worst = eps1 + epsilon(PrivITPWorstCaseEvent(PARAMS, lt, PARAMS.candidates)).details["phase2"]
            if mode == "provable" and not f.admits(worst, PARAMS.delta):
                f.refuse(f"q{q}", worst, PARAMS.delta)
                continue
            if mode == "replication_unsound" and f.spent > 5.0:
                break                                            # "stop once the budget is negative"
            f.charge(f"q{q}", realised=worst, worst_case=worst, delta=PARAMS.delta)
        return f.spent

    assert check_budget_respected(run("provable"), 5.0)["passed"]
    assert not check_budget_respected(run("replication_unsound"), 5.0)["passed"]
