"""Gaussian-DP conversions and GDP-family audits (Dong, Roth & Su; Nasr et al. 2023; Mahloujifar et al. 2024).
Proof notes and the reason for the labels: docs/audits.md, "Proof notes" and "GDP / f-DP".

Guarantees:
* `delta_of_eps(eps, mu) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)`, evaluated in log space
  (`log_ndtr`, `log(e^a − e^b) = a + log1p(−e^{b−a})`), so tiny δ do not cancel or underflow early.
* `eps_of_mu(mu, delta)` solves δ(ε; μ) = δ on [0, 100] (0 if δ(0; μ) ≤ δ; 100 if even ε = 100 is not
  enough); `mu_of_eps(eps, delta)` solves it for μ. Both use scipy's bracketing `brentq` on log δ.
* `from_rates` (method gdp_rates) and `fdp_one_run` (method fdp_one_run) output `mu_lower`,
  a valid lower confidence bound only for "𝓜 is μ-GDP" claims, and `eps_estimate_gdp_family`, an ε that
  is a lower bound **only if** 𝓜's trade-off curve is Gaussian. Their reports never contain `eps_lower`,
  list "gaussian_tradeoff" in `extra_assumptions` and never reject an (ε, δ) claim.
  For subsampled DP-SGD / DP-GRPO the trade-off is far from Gaussian: use `one_run` or `multirun`.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr, ndtri

from audits.statistics import report
from audits.statistics.clopper_pearson import MAX_HYPOTHESES, check_rates, cp_upper
from audits.statistics.pvalue import MAX_CANARIES
from audits.statistics.report import GAUSSIAN_TRADEOFF, AuditReport
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["EPS_CAP", "MU_CAP", "delta_of_eps", "eps_of_mu", "fdp_mu_lower", "fdp_one_run", "fdp_rejects",
           "fdp_rejects_curve", "from_rates", "mu_from_rates", "mu_of_eps"]

EPS_CAP = 100.0
MU_CAP = 100.0
_XTOL = 1e-12
_MU_WIDTH = 1e-9


def _mu(value, name: str = "mu") -> float:
    return val.nonnegative(name, value)


def _gdp_delta(value, name: str = "delta") -> float:
    """δ in (0, 1): the GDP ↔ (ε, δ) conversion is degenerate at δ = 0 (ε = ∞) and δ = 1 (ε = 0)."""
    return val.open_unit(name, value)


def _log_delta(eps: float, mu: float) -> float:
    """log δ(ε; μ) for μ > 0 (−inf when δ underflows to 0)."""
    a = float(log_ndtr(-eps / mu + mu / 2))
    b = eps + float(log_ndtr(-eps / mu - mu / 2))
    if not b < a:                      # δ = 0 up to rounding (b ≤ a holds exactly)
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def delta_of_eps(eps: float, mu: float) -> float:
    """δ(ε; μ) of the μ-GDP trade-off curve (0 for μ = 0)."""
    eps, mu = val.nonnegative("eps", eps), _mu(mu)
    if mu == 0.0:
        return 0.0
    return min(1.0, math.exp(_log_delta(eps, mu)))


def eps_of_mu(mu: float, delta: float) -> float:
    """Smallest ε ≥ 0 with δ(ε; μ) ≤ δ (capped at 100)."""
    mu, delta = _mu(mu), _gdp_delta(delta)
    if mu == 0.0:
        return 0.0
    target = math.log(delta)
    if _log_delta(0.0, mu) <= target:
        return 0.0
    if _log_delta(EPS_CAP, mu) > target:
        return EPS_CAP
    return float(brentq(lambda e: _log_delta(e, mu) - target, 0.0, EPS_CAP, xtol=_XTOL))


def mu_of_eps(eps: float, delta: float) -> float:
    """The μ with δ(ε; μ) = δ (δ(ε; μ) increases in μ from 0 to 1); capped at 100."""
    eps, delta = val.nonnegative("eps", eps), _gdp_delta(delta)
    target = math.log(delta)
    hi = 1.0
    while _log_delta(eps, hi) < target:
        if hi >= MU_CAP:
            return MU_CAP
        hi = min(2 * hi, MU_CAP)
    lo = hi / 2
    while _log_delta(eps, lo) > target:
        lo /= 2
        if lo < 1e-300:
            return 0.0
    return float(brentq(lambda m: _log_delta(eps, m) - target, lo, hi, xtol=_XTOL))


# ---------------------------------------------------------------------------------------------------------------------
# Multi-run rates.


def mu_from_rates(fp: int, n_out: int, fn: int, n_in: int, delta: float, p: float, n_hypotheses: int) -> dict:
    """μ_lower = max(0, Φ⁻¹(1 − FPR_up) − Φ⁻¹(FNR_up)), CP at p/(2K); 0 when a bound is ≥ 1 − δ (dropped)."""
    a = p / (2 * n_hypotheses)
    fpr_up, fnr_up = cp_upper(fp, n_out, a), cp_upper(fn, n_in, a)
    if fpr_up >= 1.0 - delta or fnr_up >= 1.0 - delta:
        mu = 0.0
    else:                                          # Φ⁻¹(1 − x) = −Φ⁻¹(x), without forming 1 − x
        mu = max(0.0, float(-ndtri(fpr_up) - ndtri(fnr_up)))
    return {"fpr_up": fpr_up, "fnr_up": fnr_up, "mu_lower": min(mu, MU_CAP), "search_capped": mu > MU_CAP}


def from_rates(fp: int, n_out: int, fn: int, n_in: int, *, delta: float, confidence: float = 0.95,
               n_hypotheses: int = 1, power=None, claim=None, diagnostics=None) -> AuditReport:
    """GDP-family estimate from multi-run counts (method gdp_rates; assumption gaussian_tradeoff)."""
    fp, n_out, fn, n_in = check_rates(fp, n_out, fn, n_in)
    delta = _gdp_delta(delta)
    confidence = val.open_unit("confidence", confidence)
    n_hypotheses = val.count("n_hypotheses", n_hypotheses, 1, MAX_HYPOTHESES)
    p = val.significance(confidence)
    out = mu_from_rates(fp, n_out, fn, n_in, delta, p, n_hypotheses)
    top = mu_from_rates(0, n_out, 0, n_in, delta, p, n_hypotheses)
    result = {"guesses": None, "correct": None, "precision": None, "mu_lower": out["mu_lower"],
              "eps_estimate_gdp_family": eps_of_mu(out["mu_lower"], delta), "confidence": confidence,
              "significance": p, "p_value_at_nominal": None, "rejects_nominal": None,
              "search_capped": out["search_capped"], "fp": fp, "fn": fn, "n_in": n_in, "n_out": n_out,
              "fpr_up": out["fpr_up"], "fnr_up": out["fnr_up"],
              "direction": "score_ge_t" if out["mu_lower"] > 0 else None}
    return _gdp_report("gdp_rates", result, delta=delta, claim=claim, power=power, diagnostics=diagnostics,
                       eps_ceiling=eps_of_mu(top["mu_lower"], delta), assumptions=report.MULTIRUN_ASSUMPTIONS,
                       canaries=report.canaries_block(m=1, m_test=1, n_in=n_in, n_out=n_out,
                                                      inclusion="fixed_runs", overrides=None),
                       guessing=report.guessing_block(selection="explicit" if n_hypotheses == 1 else "bonferroni",
                                                      n_hypotheses=n_hypotheses),
                       randomness=report.randomness_block("not_applicable", None))


# ---------------------------------------------------------------------------------------------------------------------
# One-run f-DP.


def fdp_rejects_curve(m: int, r: int, v: int, binv, tau: float) -> bool:
    """True ⇒ "𝓜 is f-DP" is rejected at level τ by the one-run counts (m, r, v), for a symmetric trade-off curve f
    given by its inverse blow-up map binv(x) = f(1 − x) (Mahloujifar et al.; the recursion is written out in
    docs/audits.md, "Proof notes"). A pointwise smaller binv (a less private curve) never rejects more."""
    R, H = tau * v / m, tau * (r - v) / m
    for i in range(v - 1, -1, -1):
        H_new = max(H, float(binv(R)))
        if H_new == H:
            break
        R = min(1.0, R + (i / (r - i)) * (H_new - H))
        H = H_new
    return R + H > r / m


def fdp_rejects(m: int, r: int, v: int, mu: float, tau: float) -> bool:
    """True ⇒ "𝓜 is μ-GDP" is rejected at level τ by the one-run counts (m, r, v) (Mahloujifar et al.; the
    recursion is written out in docs/audits.md, "Proof notes")."""
    def binv(x: float) -> float:     # inverse of the Gaussian blow-up map
        return float(ndtr(ndtri(x) - mu))

    return fdp_rejects_curve(m, r, v, binv, tau)


def fdp_mu_lower(m: int, r: int, v: int, tau: float) -> tuple[float, bool]:
    """sup{μ : FDP_REJECTS(μ)} by doubling and bisection, returning the rejected end; (μ, capped)."""
    if v == 0 or not fdp_rejects(m, r, v, 0.0, tau):
        return 0.0, False
    lo, hi = 0.0, 1.0
    while fdp_rejects(m, r, v, hi, tau):
        if hi >= MU_CAP:
            return MU_CAP, True
        lo, hi = hi, min(2 * hi, MU_CAP)
    while hi - lo > _MU_WIDTH:        # invariant: rejects(lo), not rejects(hi)
        mid = 0.5 * (lo + hi)
        if fdp_rejects(m, r, v, mid, tau):
            lo = mid
        else:
            hi = mid
    return lo, False


def fdp_one_run(m: int, guesses: int, correct: int, *, delta: float, confidence: float = 0.95, power=None,
                claim=None, canaries=None, diagnostics=None) -> AuditReport:
    """GDP-family estimate from one-run counts (method fdp_one_run; assumption gaussian_tradeoff)."""
    m, r, v = val.ordered_counts(m, guesses, correct, r_name="guesses", v_name="correct", maximum=MAX_CANARIES)
    delta = _gdp_delta(delta)
    confidence = val.open_unit("confidence", confidence)
    p = val.significance(confidence)
    mu, capped = fdp_mu_lower(m, r, v, p)
    top, _ = fdp_mu_lower(m, m, m, p)
    result = {"guesses": r, "correct": v, "precision": (v / r) if r else None, "mu_lower": mu,
              "eps_estimate_gdp_family": eps_of_mu(mu, delta), "confidence": confidence, "significance": p,
              "p_value_at_nominal": None, "rejects_nominal": None, "search_capped": capped}
    return _gdp_report("fdp_one_run", result, delta=delta, claim=claim, power=power, diagnostics=diagnostics,
                       eps_ceiling=eps_of_mu(top, delta), assumptions=report.ONE_RUN_ASSUMPTIONS,
                       canaries=report.canaries_block(m=m, m_test=m, n_in=None, n_out=None,
                                                      inclusion="iid_bernoulli_0.5", overrides=canaries),
                       guessing=report.guessing_block(selection="explicit"),
                       randomness=report.randomness_block("external", None))


def _gdp_report(method, result, *, delta, claim, power, diagnostics, eps_ceiling, assumptions, canaries, guessing,
                randomness) -> AuditReport:
    # GDP-family methods never test an (ε, δ) claim, so the claim records δ (and context) but no ε.
    if claim is not None and "epsilon" in claim:
        raise InvalidParameter("claim.epsilon", claim["epsilon"],
                               "absent: GDP-family methods never test an (ε, δ) claim")
    result = dict(result)
    result["search_capped"] = bool(result["search_capped"] or result["eps_estimate_gdp_family"] >= EPS_CAP)
    return AuditReport(method=method, claim=report.claim_block(None, delta, claim), canaries=canaries,
                       guessing=guessing, result=result,
                       power=report.power_block(power, eps_ceiling=eps_ceiling, min_correct=None),
                       assumptions=assumptions, extra_assumptions=(GAUSSIAN_TRADEOFF,),
                       diagnostics=report.diagnostics_block(diagnostics), software=report.software(),
                       randomness=randomness)
