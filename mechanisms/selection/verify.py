"""The `selection` verification suite (registered with `privcheck verify` through an entry point).

Checks, each against an independent reference: the reference values O-1…O-8 of docs/selection.md
("Reference values"), properties that follow from the theorems (λ̂ equivariance, monotonicity and
sensitivity; P_acc + P_rej = 1; κ, κ_acc ≥ 0; ε2 affine in t; ε_BoN(n) ≤ 2Δ/σ and increasing in n),
tightness (the extremal neighbour pair attains each bound, random pairs stay below, by exact output laws),
Monte-Carlo agreement of every sampler with its exact law (seeded; exact binomial tests, false failure
≤ 1e-6 per check), and the ex-post filter on an adversarial transcript. Seeded randomness: not a privacy
release. Every ε, κ and κ_acc is read from `privcheck.accounting.epsilon` of the mechanism's event.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.selection import (
    ITP,
    PrivBoN,
    PrivITP,
    itp_law,
    lambda_hat,
    privbon_law,
    privbon_policy_finite_n,
    privitp_law,
    privitp_law_given_lambda,
)
from mechanisms.selection.laws import acceptance_rejection
from privcheck import accounting as acc
from privcheck.accounting import (
    GaussianAboveThresholdEvent,
    NeighboringRelation,
    PrivBoNEvent,
    PrivITPEvent,
    PrivITPPhase1Event,
    PrivITPWorstCaseEvent,
    epsilon,
)
from privcheck.artifacts.records import Claim, SuiteResult
from privcheck.checks import Recorder, all_of, at_most, greater, within
from privcheck.checks.statistics import binomial_agreement

__all__ = ["DEFAULT_SEED", "REFERENCE", "run_suite"]

REFERENCE = "docs/selection.md reference values"
DEFAULT_SEED = 20261129


def _o3_params(n=16):
    return acc.PrivITPParams(candidates=n, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5,
                             sensitivity=0.01, delta=1e-5, r_max=1.0)


def _privitp(params, lambda_tilde, halting_time):
    """The ex-post record of one PrivITP query (κ and κ_acc are in its details)."""
    return epsilon(PrivITPEvent(params, lambda_tilde, halting_time))


def _eps2(params, lambda_tilde, halting_time) -> float:
    return _privitp(params, lambda_tilde, halting_time).details["eps2_post"]["value"]


def _kappas(params, lambda_tilde) -> tuple[dict, dict]:
    """(κ, κ_acc) as certified JSON entries ({"value", "lower", "upper", ...}) at λ̃."""
    d = _privitp(params, lambda_tilde, 1).details
    return d["kappa"], d["kappa_acc"]


def _bon(sensitivity, sigma, candidates) -> float:
    return epsilon(PrivBoNEvent(sensitivity, sigma, candidates=candidates, r_max=1.0)).value


def run_suite(seed: int | None = None) -> SuiteResult:
    seed = DEFAULT_SEED if seed is None else seed
    rec = Recorder("selection")
    result = SuiteResult(name="selection", randomness="seeded")
    rng = np.random.default_rng(seed)

    # O-1: λ̂ solver.
    for name, scores, beta, expected in (("a", [0.1, 0.4, 0.45, 0.9], 0.1, 0.5), ("b", [0.2, 0.8, 0.9], 0.1, 0.7),
                                         ("c", [0, 1], 1.0, -0.5), ("d", [0, 0.25, 0.5, 0.75, 1], 0.05, 0.75),
                                         ("e", [0.3] * 5, 0.2, 0.1)):
        rec.run(f"O-1{name}.lambda_hat", lambda: within(float(lambda_hat(np.array(scores, float), beta)),
                                                          expected, 1e-12),
                reference=REFERENCE + " O-1", inputs={"scores": scores, "beta": beta})

    # O-2: ITP law with M = max weight and M = (R_max − λ̂)/β.
    s = np.array([0.2, 0.8, 0.9])
    for name, M, probs, fb in (("a", 2.0, [0, 0.5, 0.5], 0.0), ("b", 3.0, [0, 1 / 3, 4 / 9], 2 / 9)):
        law = itp_law(s, 0.1, 0.7, M)
        rec.run(f"O-2{name}.itp_law", lambda: all_of(
            *(within(float(g), w, 1e-12) for g, w in zip(law.probs, probs)), within(float(law.fallback), fb, 1e-12)),
            reference=REFERENCE + " O-2", inputs={"scores": s.tolist(), "beta": 0.1, "lambda_hat": 0.7, "M": M})

    # O-3: certified κ, κ_acc and ε2.
    o3 = {0.2: (0.188896264520, 0.868196213116, 0.868196213, 1.434885007, 3.701640181, 3.022340232),
          0.5: (0.188896264520, 2.01924888179, 2.019248882, 2.585937675, 4.852692850, 3.022340232),
          0.8: (0.188886306254, 3.20486696944, 3.204866969, 3.771525888, 6.038161563, 3.022180900)}
    p16 = _o3_params()
    for lt, (k, ka, e1, e4, e16, fb) in o3.items():
        kappa, kappa_acc = _kappas(p16, lt)
        eps2 = {t: _eps2(p16, lt, t) for t in (1, 4, 16, None)}
        result.records.append(_privitp(p16, lt, 4))
        rec.run(f"O-3.lambda{lt}", lambda: all_of(
            within(kappa["value"], k, 1e-11), within(kappa_acc["value"], ka, 1e-11),
            within(eps2[1], e1, 1e-9), within(eps2[4], e4, 1e-9), within(eps2[16], e16, 1e-9),
            within(eps2[None], fb, 1e-9)), reference=REFERENCE + " O-3 (certified)", inputs={"lambda_tilde": lt})

    # O-4: exact law given λ̃ = 0.7 and κ there.
    p3 = _o3_params(3)
    law = privitp_law_given_lambda([0.2, 0.8, 0.9], 0.7, p3)
    kappa, kappa_acc = _kappas(p3, 0.7)
    rec.run("O-4.privitp_law", lambda: all_of(
        within(float(law.acceptance[0]) / 1.14993e-25, 1.0, 1e-5, "tiny entry, relative"),
        within(float(law.acceptance[1]), 0.308998462832, 1e-11),
        within(float(law.acceptance[2]), 0.615077385858, 1e-11),
        within(float(law.probs[2]), 0.425019419106, 1e-11), within(float(law.fallback), 0.265982118063, 1e-11),
        within(kappa["value"], 0.188896264102, 1e-11), within(kappa_acc["value"], 2.80834601931, 1e-11)),
        reference=REFERENCE + " O-4", inputs={"lambda_tilde": 0.7, "scores": [0.2, 0.8, 0.9]})

    # O-5: PrivBoN bounded range and the finite-n policy.
    for d, sig, expected in ((0.1, 0.2, 0.999228797882), (0.5, 1.0, 0.959690858399)):
        r = epsilon(PrivBoNEvent(d, sig, candidates=16, r_max=1.0))
        result.records.append(r)
        rec.run(f"O-5.eps_bon_d{d}_s{sig}", lambda: all_of(within(r.value, expected, 1e-11),
                                                          at_most(r.value, 2 * d / sig)),
                reference=REFERENCE + " O-5", inputs={"sensitivity": d, "sigma": sig, "candidates": 16})
    pol = privbon_policy_finite_n([0.5, 0.5], [0.0, 1.0], 2, 1.0)
    rec.run("O-5.policy_n2", lambda: within(float(pol[1]), 0.25 + 0.5 * math.e / (1 + math.e), 1e-9),
            reference=REFERENCE + " O-5 (0.25 + 0.5·e/(1+e))", inputs={"n": 2, "sigma": 1.0})

    # O-6: Phase-1 analytic Gaussian.
    for mu, expected in ((0.25, 0.926342), (0.5, 1.993091), (1.0, 4.377178), (2.0, 9.997256)):
        e1 = epsilon(PrivITPPhase1Event(acc.PrivITPParams(candidates=4, beta=0.1, sigma_x=0.01 / mu, sigma_z=0.05,
                                                          headroom=0.5, sensitivity=0.01, delta=1e-5)))
        rec.run(f"O-6.eps1_mu{mu}", lambda: within(e1.value, expected, 1e-6), reference=REFERENCE + " O-6",
                inputs={"mu": mu, "delta": 1e-5})

    # O-8: Gaussian AboveThreshold (Lebensold, Precup & Balle).
    at = epsilon(GaussianAboveThresholdEvent(halting_time=3, threshold=0.75, sigma_threshold=0.3,
                                             sigma_query=math.sqrt(3) * 0.3, sensitivity=1e-3))
    result.records.append(at)
    rec.run("O-8.gaussian_above_threshold", lambda: within(at.value, 0.00796829839499, 1e-13),
            reference=REFERENCE + " O-8 (certified; Lebensold et al. print 0.008)", inputs=dict(at.inputs))

    _properties(rec, rng)
    _tightness(rec, rng)
    _monte_carlo(rec, rng)
    _filter(rec, rng)

    result.claims.append(Claim(mechanism="privbon", epsilon=_bon(0.1, 0.2, 16),
                               delta=0.0, neighboring=NeighboringRelation.SCORE_SENSITIVITY.value,
                               assumptions=("scores clipped to the public range [0, R_max]",
                                            "score sensitivity Δ is a public assumption about the reward model",
                                            "candidates drawn from a public base policy"),
                               parameters={"sensitivity": 0.1, "sigma": 0.2, "candidates": 16, "r_max": 1.0},
                               accountant="bounded_range_exact"))
    result.checks = rec.checks
    return result


def _properties(rec: Recorder, rng: np.random.Generator) -> None:
    s = rng.uniform(0, 1, (200, 12))
    shift = rng.uniform(-0.5, 0.5, (200, 1))
    bump = rng.uniform(0, 0.05, (200, 12))
    lam, lam_shift, lam_bump = (lambda_hat(x, 0.05) for x in (s, s + shift, s + bump))
    rec.run("property.lambda_hat_equivariant_monotone_sensitive", lambda: all_of(
        at_most(float(np.max(np.abs(lam_shift - lam - shift[:, 0]))), 0.0, 1e-12, "translation equivariance"),
        at_most(float(np.max(lam - lam_bump)), 0.0, 1e-12, "monotone"),
        at_most(float(np.max(lam_bump - lam - bump.max(axis=1))), 0.0, 1e-12, "|Δλ̂| ≤ ‖Δs‖∞")),
        reference="docs/selection.md proof notes (λ̂)", inputs={"prompts": 200, "n": 12, "beta": 0.05})
    p = _o3_params()
    lts = rng.uniform(-0.2, 1.2, 20)
    r = rng.uniform(0, 1, 20)
    pa, pr = acceptance_rejection(r, lts, np.array([p.threshold_width(x) for x in lts]), p.sigma_z)
    pairs = [_kappas(p, float(x)) for x in lts]
    slope = [np.diff([_eps2(p, float(lts[0]), t) for t in (1, 2, 3)])]
    rec.run("property.privitp_probabilities_and_losses", lambda: all_of(
        at_most(float(np.max(np.abs(pa + pr - 1))), 0.0, 1e-12, "P_acc + P_rej = 1"),
        at_most(-min(min(k["lower"], ka["lower"]) for k, ka in pairs), 0.0, 0.0, "κ, κ_acc ≥ 0"),
        at_most(float(np.max(np.abs(slope[0] - pairs[0][0]["value"]))), 0.0, 1e-12, "ε2 affine in t, slope κ")),
        reference="docs/selection.md (PrivITP; proof notes)", inputs={"draws": 20})
    eps = [_bon(0.1, 0.2, n) for n in (1, 2, 8, 64, 4096)]
    rec.run("property.eps_bon_increasing_and_below_nominal", lambda: all_of(
        at_most(float(-np.min(np.diff(eps))), 0.0, 0.0, "increasing in n"),
        at_most(max(eps), 1.0, 1e-15, "≤ 2Δ/σ")), reference="docs/selection.md (PrivBoN, theorem)",
        inputs={"n": [1, 2, 8, 64, 4096]})


def _tightness(rec: Recorder, rng: np.random.Generator) -> None:
    p = _o3_params(4)
    lt, R, d = 0.5, p.r_max, p.sensitivity
    observed, bounds = [], []
    for t in (1, 4, None):
        accepted = [] if t is None else [t - 1]
        on_d = np.array([d if i in accepted else R - d for i in range(4)])
        on_dp = np.array([0.0 if i in accepted else R for i in range(4)])
        law_d, law_dp = privitp_law_given_lambda(on_d, lt, p), privitp_law_given_lambda(on_dp, lt, p)
        pick = (lambda L: L.fallback) if t is None else (lambda L, t=t: L.probs[t - 1])
        observed.append(float(np.log(pick(law_d)) - np.log(pick(law_dp))))
        bounds.append(_eps2(p, lt, t))
    worst_random = 0.0
    for _ in range(200):
        a = rng.uniform(0, 1, 4)
        b = np.clip(a + rng.uniform(-d, d, 4), 0, 1)
        la, lb = privitp_law_given_lambda(a, lt, p), privitp_law_given_lambda(b, lt, p)
        ratios = np.abs(np.log(np.append(la.probs, la.fallback)) - np.log(np.append(lb.probs, lb.fallback)))
        worst_random = max(worst_random, float(np.max(ratios - np.append([bounds[0] + k * (bounds[1] - bounds[0]) / 3
                                                                           for k in range(4)], bounds[2]))))
    rec.run("tightness.privitp_extremal_pair", lambda: all_of(
        *(within(o, b, 1e-10) for o, b in zip(observed, bounds)),
        at_most(worst_random, 0.0, 1e-10, "random pairs stay below")),
        reference="docs/selection.md PrivITP worst case (exact output laws)", inputs={"n": 4, "lambda_tilde": lt})
    n, sig, dd = 16, 0.2, 0.1
    on_d = np.array([dd] + [1 - dd] * (n - 1))
    on_dp = np.array([0.0] + [1.0] * (n - 1))
    ratio = float(np.log(privbon_law(on_d, sig)[0]) - np.log(privbon_law(on_dp, sig)[0]))
    bound = _bon(dd, sig, n)
    worst = 0.0
    for _ in range(200):
        a = rng.uniform(0, 1, n)
        b = np.clip(a + rng.uniform(-dd, dd, n), 0, 1)
        worst = max(worst, float(np.max(np.abs(np.log(privbon_law(a, sig)) - np.log(privbon_law(b, sig))))))
    rec.run("tightness.privbon_extremal_pair", lambda: all_of(within(ratio, bound, 1e-10),
                                                              at_most(worst, bound, 1e-12, "random pairs below")),
            reference="docs/selection.md PrivBoN extremal pair", inputs={"n": n, "sigma": sig, "sensitivity": dd})


def _monte_carlo(rec: Recorder, rng: np.random.Generator) -> None:
    N = 200_000
    scores = np.array([0.1, 0.5, 0.55, 0.9, 1.0])
    law = privbon_law(scores, 0.2)
    for sampler in ("gumbel", "softmax"):
        mech = PrivBoN(0.1, 0.2, r_max=1.0, sampler=sampler)
        idx = mech.select(np.broadcast_to(scores, (N, 5)).copy(), rng).indices
        counts = np.bincount(idx, minlength=5)
        rec.run(f"monte_carlo.privbon_{sampler}", lambda: binomial_agreement(counts, law),
                reference="exact softmax law (Gumbel-max = softmax)", inputs={"draws": N, "scores": scores.tolist()})
    p = _o3_params(4)
    s1 = np.array([0.3, 0.6, 0.7, 0.9])
    s2 = np.array([0.5, 0.9, 0.2, 0.8])
    lam = float(lambda_hat(s1, p.beta))
    exact = privitp_law(s2, lam, p)
    res = PrivITP(p).select(np.broadcast_to(s1, (N, 4)).copy(), np.broadcast_to(s2, (N, 4)).copy(), rng,
                            account=False)
    counts = np.bincount(np.where(res.halting_times == 0, 4, res.halting_times - 1), minlength=5)
    rec.run("monte_carlo.privitp", lambda: binomial_agreement(counts, np.append(exact.probs, exact.fallback)),
            reference="exact law, λ̃ averaged outside the product", inputs={"draws": N})
    itp = ITP(0.1, r_max=1.0)
    s = np.array([0.2, 0.8, 0.9])
    res = itp.select(np.broadcast_to(s, (N, 3)).copy(), rng)
    law_itp = itp_law(s, 0.1, float(lambda_hat(s, 0.1)), (1.0 - float(lambda_hat(s, 0.1))) / 0.1)
    counts = np.bincount(np.where(res.indices < 0, 3, res.indices), minlength=4)
    rec.run("monte_carlo.itp", lambda: binomial_agreement(counts, np.append(law_itp.probs, law_itp.fallback)),
            reference="exact ITP law (O-2b)", inputs={"draws": N})


def _filter(rec: Recorder, rng: np.random.Generator) -> None:
    """Worst-case transcript: every query's realised loss is as large as its admission allowed."""
    p = _o3_params()
    f = acc.ExPostFilter(budget=10.0, delta_total=1e-3)
    answered = 0
    for q in range(100):
        lt = float(rng.uniform(0.0, 1.0))
        worst = epsilon(PrivITPWorstCaseEvent(p, lt, p.candidates)).value     # ε1 + worst Phase-2 loss
        if f.admits(worst, p.delta):
            f.charge(f"q{q}", realised=worst, worst_case=worst, delta=p.delta)   # adversary realises the worst
            answered += 1
        else:
            f.refuse(f"q{q}", worst, p.delta)
    rec.run("filter.adversarial_transcript_within_budget", lambda: all_of(
        at_most(f.spent, 10.0, 0.0, "certified spend ≤ E"),
        greater(answered, 0, "at least one query answered")),
        reference="docs/selection.md (filter theorem)", inputs={"budget": 10.0, "queries": 100})
