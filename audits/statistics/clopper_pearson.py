"""Clopper–Pearson multi-run audits (Jagielski et al. 2020; Nasr et al. 2021; proof: docs/audits.md, "Proof notes").

Guarantee: with N₁ runs on D (canary present) and N₀ runs on D′ (absent), a test fixed in advance
("present ⇔ score ≥ t"), FN false negatives and FP false positives, the two one-sided Clopper–Pearson
bounds `FPR_up = CP_up(FP, N₀, a)`, `FNR_up = CP_up(FN, N₁, a)` with `a = p/(2K)` hold together with
probability ≥ 1 − p/K; for an (ε, δ)-DP mechanism each of

    ε₁ = ln((1 − δ − FNR_up)/FPR_up)     (event {score ≥ t}, D against D′)
    ε₂ = ln((1 − δ − FPR_up)/FNR_up)     (complement event, D′ against D; two-sided only)

then lies below ε, so `ε_lower = max(0, ε₁, ε₂)` exceeds ε with probability ≤ p/K per threshold and
≤ p over K pre-declared thresholds (union bound). Terms with a non-positive numerator are dropped.
Assumptions: i.i.d. runs; canary and threshold fixed independently of these runs; D, D′ neighbours
under the claim's relation (replace-one canaries audit the replace relation: compare with the
add/remove claim converted to (2ε, (1 + e^ε)δ), which is the caller's `eps_nominal`).
"""

from __future__ import annotations

import math

from scipy.stats import beta as beta_dist

from audits.statistics import report
from audits.statistics.report import AuditReport
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["EPS_CAP", "MAX_HYPOTHESES", "MAX_RUNS", "check_rates", "clopper_pearson", "cp_bound", "cp_lower",
           "cp_upper"]

EPS_CAP = 100.0
MAX_RUNS = 10**6          # N₀, N₁: each run of a multi-run audit is a training, and the driver keeps every score
MAX_HYPOTHESES = 10**6    # K thresholds (hypotheses) declared in advance: Bonferroni level p/(2K)


def cp_upper(k: int, n: int, a: float) -> float:
    """One-sided Clopper–Pearson upper bound `Beta⁻¹(1 − a; k+1, n−k)` (1 when k = n), via the inverse sf."""
    if k >= n:
        return 1.0
    return float(beta_dist.isf(a, k + 1, n - k))


def cp_lower(k: int, n: int, a: float) -> float:
    """One-sided Clopper–Pearson lower bound `Beta⁻¹(a; k, n−k+1)` (0 when k = 0)."""
    if k <= 0:
        return 0.0
    return float(beta_dist.ppf(a, k, n - k + 1))


def check_rates(fp, n_out, fn, n_in) -> tuple[int, int, int, int]:
    """Run counts: 1 ≤ N₀, N₁ ≤ MAX_RUNS, 0 ≤ FP ≤ N₀, 0 ≤ FN ≤ N₁."""
    n_out = val.count("n_out", n_out, 1, MAX_RUNS)
    n_in = val.count("n_in", n_in, 1, MAX_RUNS)
    fp = val.count("fp", fp, 0)
    fn = val.count("fn", fn, 0)
    if fp > n_out:
        raise InvalidParameter("fp", fp, f"an integer in [0, n_out={n_out}]")
    if fn > n_in:
        raise InvalidParameter("fn", fn, f"an integer in [0, n_in={n_in}]")
    return fp, n_out, fn, n_in


def _log_ratio(numerator: float, denominator: float) -> float | None:
    return math.log(numerator / denominator) if numerator > 0 and denominator > 0 else None


def cp_bound(fp: int, n_out: int, fn: int, n_in: int, delta: float, p: float, two_sided: bool,
             n_thresholds: int) -> dict:
    """The Clopper–Pearson bound (validated inputs): rates, both directions and ε_lower."""
    a = p / (2 * n_thresholds)
    fpr_up, fnr_up = cp_upper(fp, n_out, a), cp_upper(fn, n_in, a)
    eps1 = _log_ratio(1.0 - delta - fnr_up, fpr_up)
    eps2 = _log_ratio(1.0 - delta - fpr_up, fnr_up) if two_sided else None
    candidates = [(0.0, None), (eps1 or -math.inf, "score_ge_t:D_vs_Dprime"),
                  (eps2 or -math.inf, "score_lt_t:Dprime_vs_D")]
    eps, direction = max(candidates, key=lambda c: c[0])
    return {"fpr_up": fpr_up, "fnr_up": fnr_up, "eps_1": eps1, "eps_2": eps2,
            "eps_lower": min(eps, EPS_CAP), "direction": direction if eps > 0 else None,
            "search_capped": eps > EPS_CAP}


def clopper_pearson(fp: int, n_out: int, fn: int, n_in: int, *, delta: float, confidence: float = 0.95,
                    two_sided: bool = True, n_thresholds: int = 1, eps_nominal: float | None = None, power=None,
                    claim=None, diagnostics=None) -> AuditReport:
    """Multi-run audit report (method clopper_pearson); `rejects_nominal` iff ε_lower > ε_nom."""
    fp, n_out, fn, n_in = check_rates(fp, n_out, fn, n_in)
    delta = val.half_open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    if not isinstance(two_sided, bool):
        raise InvalidParameter("two_sided", two_sided, "True or False")
    n_thresholds = val.count("n_thresholds", n_thresholds, 1, MAX_HYPOTHESES)
    eps_nominal = None if eps_nominal is None else val.nonnegative("eps_nominal", eps_nominal)
    p = val.significance(confidence)
    out = cp_bound(fp, n_out, fn, n_in, delta, p, two_sided, n_thresholds)
    top = cp_bound(0, n_out, 0, n_in, delta, p, two_sided, n_thresholds)
    result = {"guesses": None, "correct": None, "precision": None, "eps_lower": out["eps_lower"],
              "confidence": confidence, "significance": p, "p_value_at_nominal": None,
              "rejects_nominal": None if eps_nominal is None else bool(out["eps_lower"] > eps_nominal),
              "search_capped": out["search_capped"], "fp": fp, "fn": fn, "n_in": n_in, "n_out": n_out,
              "fpr_up": out["fpr_up"], "fnr_up": out["fnr_up"], "direction": out["direction"],
              "two_sided": two_sided}
    return AuditReport(
        method="clopper_pearson", claim=report.claim_block(eps_nominal, delta, claim),
        canaries=report.canaries_block(m=1, m_test=1, n_in=n_in, n_out=n_out, inclusion="fixed_runs",
                                       overrides=None),
        guessing=report.guessing_block(selection="explicit" if n_thresholds == 1 else "bonferroni",
                                       n_hypotheses=n_thresholds),
        result=result, power=report.power_block(power, eps_ceiling=top["eps_lower"], min_correct=None),
        assumptions=report.MULTIRUN_ASSUMPTIONS, extra_assumptions=(),
        diagnostics=report.diagnostics_block(diagnostics), software=report.software(),
        randomness=report.randomness_block("not_applicable", None))
