"""The `audits` verification suite (`run_suite(seed)`, registered with `privcheck verify` through the
`privcheck.suites` entry point).

Checks, each against an independent reference:
* the reference values of docs/audits.md, "Reference values" (one-run p-value, ε_lower, ceilings,
  Clopper–Pearson, GDP conversions, the f-DP μ_lower) at the tolerances stated there;
* the δ = 0 closed form `logit(Beta⁻¹(p; v, r − v + 1))`, the analytic Gaussian accountant of
  `privcheck.accounting` for δ(ε; μ) and ε(μ, δ), and the ceiling property (no one-run audit certifies
  ε = 8 at δ = 1/69880, r up to 10⁸);
* validity by simulation (seeded): with identical in/out score distributions the one-run audit
  (explicit, Bonferroni and split guess rules) reports a positive bound no more often than p, and on
  ε-randomised response the bound exceeds the true ε no more often than p; each frequency is judged by
  an exact one-sided binomial test at 1e-6, so a correct implementation fails with probability < 1e-6;
* the same validity statement computed exactly (binomial law of V under randomised response), together
  with the randomised-response counterexample: the GDP-family estimate exceeds the true ε almost surely;
* black-box pair audits of the correct selection mechanisms (exponential-mechanism example, PrivBoN worst pair,
  PrivITP Phase-2 events {t = 1}, {t = 2}) never exceed their certified ε (confidence 1 − 1e-7 each, so a
  correct implementation fails with probability < 1e-6), and have power (ε_lower > 0);
* a report round trip through the JSON schema.
Seeded randomness: not an audit release.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import betaincinv, expit, logit
from scipy.stats import binom

from audits import canary
from audits.statistics import clopper_pearson as multirun
from audits.statistics import gdp, one_run, strategies
from audits.statistics.report import audit_document
from privcheck.artifacts.records import SuiteResult
from privcheck.checks import Recorder, all_of, at_most, greater, judged, within

__all__ = ["DEFAULT_SEED", "DELTA_GRPO", "FALSE_FAILURE", "check_blackbox_selection", "check_exact_validity",
           "check_independent_references", "check_null_scores", "check_randomised_response", "check_reference_values",
           "check_schema_round_trip", "run_suite"]

REFERENCE = "docs/audits.md reference values"
DEFAULT_SEED = 20261205
FALSE_FAILURE = 1e-6
DELTA_GRPO = 1 / 69880


def run_suite(seed: int | None = None) -> SuiteResult:
    """Run every check of the suite (module docstring) with `seed` (default `DEFAULT_SEED`). Each `check_*`
    function records one group of checks into a `Recorder`."""
    seed = DEFAULT_SEED if seed is None else seed
    rec = Recorder("audits")
    result = SuiteResult(name="audits", randomness="seeded")
    check_reference_values(rec)
    check_independent_references(rec)
    check_exact_validity(rec)
    root = np.random.SeedSequence(seed)
    null_seq, rr_seq = root.spawn(2)
    check_null_scores(rec, null_seq)
    check_randomised_response(rec, rr_seq)
    check_blackbox_selection(rec, seed)
    check_schema_round_trip(rec)
    result.checks = rec.checks
    result.figures = _figures()
    return result


def check_reference_values(rec: Recorder) -> None:
    for r, delta, expected in ((100, 0.0, 3.4930), (100, 1e-5, 3.4654), (1000, 0.0, 5.8091), (1000, 1e-5, 5.7823)):
        rec.run(f"one_run.perfect_r{r}_delta{delta:g}",
                lambda: within(one_run.eps_lower(1000, r, r, delta, 0.05), expected, 1e-4),
                reference=REFERENCE + " (one-run, perfect guessing)",
                inputs={"m": 1000, "r": r, "v": r, "delta": delta})
    rec.run("one_run.p_value_1000_100_90", lambda: within(one_run.p_value(1000, 100, 90, 1.0, 1e-5) / 8.412886e-04,
                                                          1.0, 1e-6, "relative"),
            reference=REFERENCE + " PVAL(1000, 100, 90, ε=1, δ=1e-5)", inputs={"m": 1000, "r": 100, "v": 90})
    for r, v, expected, tol in ((100, 100, 3.465376, 1e-6), (100, 90, 1.626143, 1e-6), (1000, 500, 0.0, 0.0)):
        rec.run(f"one_run.eps_lb_1000_{r}_{v}",
                lambda: within(one_run.eps_lower(1000, r, v, 1e-5, 0.05), expected, tol),
                reference=REFERENCE + " EPS_LB", inputs={"m": 1000, "r": r, "v": v, "delta": 1e-5})
    for delta, expected in ((0.0, 5.8091), (1e-5, 5.7823), (DELTA_GRPO, 5.7707)):
        rec.run(f"one_run.ceiling_m1000_delta{delta:.4g}",
                lambda: within(one_run.ceiling(1000, delta, 0.05).eps_lower, expected, 1e-4),
                reference=REFERENCE + " ceiling", inputs={"m": 1000, "delta": delta})
    cp = multirun.clopper_pearson(0, 1000, 0, 1000, delta=1e-5, confidence=0.95)
    rec.run("multirun.clopper_pearson_zero_errors", lambda: all_of(
        within(cp.result["fpr_up"], 1 - 0.025 ** (1 / 1000), 1e-12, "FPR_up = 1 − 0.025^{1/1000}"),
        within(cp.result["fnr_up"], 0.0036821, 1e-7), within(cp.result["eps_lower"], 5.6006, 1e-4)),
        reference=REFERENCE + " Clopper–Pearson", inputs={"n_in": 1000, "n_out": 1000, "fp": 0, "fn": 0, "delta": 1e-5})
    rec.run("gdp.conversions", lambda: all_of(within(gdp.delta_of_eps(1.0, 1.0), 0.126937, 1e-6),
                                              within(gdp.eps_of_mu(1.0, 1e-5), 4.3772, 1e-4)),
            reference=REFERENCE + " GDP conversions", inputs={"eps": 1.0, "mu": 1.0, "delta": 1e-5})
    fdp = gdp.fdp_one_run(1000, 100, 100, delta=1e-5, confidence=0.95)
    rec.run("gdp.fdp_one_run_mu_lower", lambda: all_of(
        within(fdp.result["mu_lower"], 1.225533, 1e-6),
        {"passed": "eps_lower" not in fdp.result and "gaussian_tradeoff" in fdp.extra_assumptions
         and fdp.result["rejects_nominal"] is None, "observed": sorted(fdp.result), "expected": "no eps_lower",
         "tolerance": None, "message": "GDP-family report layout (no eps_lower, gaussian_tradeoff)"}),
        reference=REFERENCE + " f-DP one-run", inputs={"m": 1000, "r": 100, "v": 100})


def check_independent_references(rec: Recorder) -> None:
    cases = ((100, 100), (100, 90), (1000, 700), (50, 31), (10_000, 5_300))
    observed = [one_run.eps_lower(10_000, r, v, 0.0, 0.05) for r, v in cases]
    closed = [max(0.0, float(logit(betaincinv(v, r - v + 1, 0.05)))) for r, v in cases]
    rec.run("one_run.delta0_closed_form", lambda: all_of(*(within(o, c, 2e-9) for o, c in zip(observed, closed))),
            reference="δ = 0 closed form: logit of the Clopper–Pearson lower bound (scipy betaincinv)",
            inputs={"cases": [list(c) for c in cases]})

    from privcheck.accounting import GaussianEvent, epsilon
    mus = (0.5, 1.0, 2.0)
    ours = [gdp.eps_of_mu(mu, 1e-5) for mu in mus]
    analytic = [epsilon(GaussianEvent(sigma=1.0 / mu), 1e-5).value for mu in mus]
    rec.run("gdp.eps_of_mu_vs_analytic_gaussian", lambda: all_of(*(within(o, a, 1e-8) for o, a in zip(ours, analytic))),
            reference="privcheck.accounting.epsilon(GaussianEvent) (Balle–Wang, Arb): μ-GDP = Gaussian with σ = 1/μ",
            inputs={"mu": list(mus), "delta": 1e-5})

    grid = sorted({int(x) for x in np.round(np.geomspace(1, 1e8, 33))})
    worst = min(one_run.p_value(r, r, r, 8.0, DELTA_GRPO) for r in grid)
    rec.run("one_run.ceiling_eps8_not_certifiable", lambda: at_most(0.05 - worst, 0.0, 0.0,
                                                                     f"min PVAL over the grid = {worst!r} ≥ 0.05"),
            reference="ceiling property (docs/audits.md reference values)",
            inputs={"r_grid": [grid[0], grid[-1], len(grid)], "eps": 8.0, "delta": DELTA_GRPO})


def _critical(m: int, r: int, bound) -> int | None:
    """Smallest v in [0, r] with bound(v) > 0 (bound non-decreasing in v); None if none."""
    if bound(r) <= 0:
        return None
    lo, hi = -1, r
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bound(mid) > 0:
            hi = mid
        else:
            lo = mid
    return hi


def check_exact_validity(rec: Recorder) -> None:
    """Randomised response on the coins (pure ε-DP per canary), all m canaries guessed: V ~ Bin(m, expit ε)."""
    m, eps_true, delta, p = 1000, 1.0, 1e-5, 0.05
    rho = float(expit(eps_true))
    v_onerun = _critical(m, m, lambda v: one_run.eps_lower(m, m, v, delta, p) - eps_true)
    v_fdp = _critical(m, m, lambda v: gdp.fdp_one_run(m, m, v, delta=delta, confidence=1 - p)
                      .result["eps_estimate_gdp_family"] - eps_true)
    p_onerun = float(binom.sf(v_onerun - 1, m, rho))
    p_fdp = float(binom.sf(v_fdp - 1, m, rho))
    rec.run("validity.one_run_exact_randomised_response", lambda: at_most(p_onerun, p, 0.0,
                                                                          f"P[ε_lower > ε] = {p_onerun:.4g}"),
            reference="audit guarantee P[ε_lower > ε] ≤ p, exact binomial law of V (scipy)",
            inputs={"m": m, "eps_true": eps_true, "delta": delta, "v_critical": v_onerun})
    rec.run("validity.gdp_family_overstates_randomised_response",
            lambda: at_most(1.0 - p_fdp, 0.01, 0.0, f"P[ε_GDP > ε] = {p_fdp:.6g} (randomised-response counterexample)"),
            reference="randomised-response counterexample, exact binomial law of V (scipy)",
            inputs={"m": m, "eps_true": eps_true, "delta": delta, "v_critical": v_fdp})


def _binomial_frequency(count: int, trials: int, p: float) -> dict:
    """Pass unless `count` positives in `trials` is implausible (P[Bin(trials, p) ≥ count] < 1e-6)."""
    tail = float(binom.sf(count - 1, trials, p))
    return judged({"kind": "binomial_upper_tail", "trials": trials, "p": p, "alpha": FALSE_FAILURE}, count / trials,
                  f"<= {p}", f"one-sided exact binomial test at {FALSE_FAILURE}",
                  f"{count}/{trials} positive; P[Bin({trials}, {p}) >= {count}] = {tail:.3g}")


def check_null_scores(rec: Recorder, seq: np.random.SeedSequence) -> None:
    m, trials, delta, confidence = 200, 150, 1e-5, 0.95
    rules = {"explicit": dict(k_plus=20, k_minus=20),
             "bonferroni": dict(strategy=strategies.Bonferroni([(5, 0), (20, 0), (50, 50), (100, 0)])),
             "split": None}
    counts = dict.fromkeys(rules, 0)
    for t, child in enumerate(seq.spawn(trials)):
        rng = np.random.default_rng(child)
        S = canary.draw_membership(m, seed=int(rng.integers(2**32)))
        scores = canary.freeze_scores(rng.normal(size=m))        # same law in and out: true ε = 0
        for name, kwargs in rules.items():
            kw = kwargs if kwargs is not None else dict(strategy=strategies.Split(0.5, seed=t))
            rep = one_run.from_scores(scores, S, delta=delta, confidence=confidence, **kw)
            counts[name] += rep.result["eps_lower"] > 0
    for name, count in counts.items():
        rec.run(f"validity.null_scores_{name}", lambda: _binomial_frequency(count, trials, 0.05),
                reference="audit guarantee: P[ε_lower > 0] ≤ p when in/out scores have the same law",
                inputs={"m": m, "trials": trials, "delta": delta, "rule": name})


def check_randomised_response(rec: Recorder, seq: np.random.SeedSequence) -> None:
    m, trials, eps_true, delta, p = 1000, 200, 2.0, 1e-5, 0.05
    rng = np.random.default_rng(seq)
    bound = functools.lru_cache(maxsize=None)(lambda v: one_run.eps_lower(m, m, v, delta, p))
    exceed = 0
    for _ in range(trials):
        S = rng.integers(0, 2, m) * 2 - 1
        flip = rng.random(m) >= expit(eps_true)              # ε-randomised response on each coin
        guesses = np.where(flip, -S, S)
        v = int(np.sum(guesses == S))
        exceed += bound(v) > eps_true
    rec.run("validity.randomised_response_simulated", lambda: _binomial_frequency(exceed, trials, p),
            reference="audit guarantee on an exactly ε-DP mechanism", inputs={"m": m, "trials": trials,
                                                                               "eps_true": eps_true, "delta": delta})


def check_schema_round_trip(rec: Recorder) -> None:
    reports = [one_run.from_counts(1000, 100, 90, delta=1e-5, eps_nominal=1.0),
               multirun.clopper_pearson(3, 500, 7, 500, delta=1e-5), gdp.from_rates(3, 500, 7, 500, delta=1e-5),
               gdp.fdp_one_run(1000, 100, 95, delta=1e-5)]

    def check():
        for rep in reports:
            audit_document(rep)
        return {"passed": True, "observed": [r.method for r in reports], "expected": "valid privcheck.audit/1",
                "tolerance": None, "message": "each report validates against audit.schema.json"}

    rec.run("report.schema_round_trip", check, reference="privcheck/schemas/audit.schema.json (jsonschema)",
            inputs={"methods": 4})


def _figures() -> dict:
    ms = [10, 100, 1000, 10_000, 100_000, 1_000_000]
    series = {}
    for label, delta in (("δ = 0", 0.0), ("δ = 1e-5", 1e-5), ("δ = 1/69880", DELTA_GRPO)):
        series[label] = [one_run.ceiling(m, delta, 0.05).eps_lower for m in ms]
    return {"audit_ceiling_vs_m": {"title": "One-run ceiling ε_max(m) at 95% confidence", "x_label": "canaries m",
                                   "y_label": "ε_max", "x": ms, "log_x": True, "series": series}}


def check_blackbox_selection(rec: Recorder, seed: int) -> None:
    from audits.selection_pairs import exponential_mechanism_pair, privbon_worst_pair, privitp_phase2_pair
    from privcheck.accounting import PrivITPParams

    # PrivITP Phase 2 at a configuration where {t = 1} and {t = 2} are frequent on D′ (the exact law's plan).
    itp = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.05, sigma_z=0.25, headroom=0.5, sensitivity=0.25,
                        delta=1e-5, r_max=1.0)
    pairs = (exponential_mechanism_pair(), privbon_worst_pair(1.0, 2.0, 16, 1.0),
             privitp_phase2_pair(itp, 0.0, 1), privitp_phase2_pair(itp, 0.0, 2))
    for k, pair in enumerate(pairs):
        report = pair.audit(20_000, seed=seed + k, confidence=1 - 1e-7)
        lower, claim = report.result["eps_lower"], report.claim["epsilon"]
        rec.run(f"blackbox.{pair.pair_id}", lambda: all_of(
            at_most(lower, claim, 0.0, "ε_lower ≤ certified ε (a correct mechanism is never rejected)"),
            greater(lower, 0.0, "the audit has power on the worst-case pair")),
            reference="black-box pair audit on a worst-case pair; certified ε from privcheck.accounting",
            inputs={"pair": pair.pair_id, "samples_per_side": 20_000, "confidence": 1 - 1e-7, "seed": seed + k})
