"""One-run canary audits (Steinke, Nasr & Jagielski 2023): reports from counts (`from_counts`) or from canary scores
and the sealed inclusion coins (`from_scores`). Proofs and conventions: docs/audits.md, "Proof notes".

The statistics live in `audits.statistics.pvalue` and are re-exported here (`p_value`, `eps_lower`, `search_eps_lower`,
`ceiling`, `min_correct`, ...): `p_value(m, r, v, eps, delta)` is a valid p-value for V ≥ v correct guesses under
per-canary (ε, δ)-DP, and `eps_lower(m, r, v, delta, p) = inf{ε ≥ 0 : p_value(ε) ≥ p}`.
"""

from __future__ import annotations

import numpy as np

from audits import canary as cn
from audits.statistics import report
from audits.statistics import strategies as st
from audits.statistics.pvalue import (
    BISECTION_WIDTH,
    EPS_CAP,
    MAX_CANARIES,
    EpsSearch,
    ceiling,
    eps_lower,
    eps_lower_closed_form_delta0,
    min_correct,
    p_value,
    p_value_unchecked,
    search_eps_lower,
)
from audits.statistics.report import AuditReport
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["BISECTION_WIDTH", "EPS_CAP", "EpsSearch", "MAX_CANARIES", "ceiling", "eps_lower",
           "eps_lower_closed_form_delta0", "from_counts", "from_scores", "min_correct", "p_value", "p_value_unchecked",
           "search_eps_lower"]


# ---------------------------------------------------------------------------------------------------------------------
# Audit reports.


def _nominal(eps_nominal) -> float | None:
    return None if eps_nominal is None else val.nonnegative("eps_nominal", eps_nominal)


def _one_run_report(*, m: int, m_test: int, r: int, v: int, search: EpsSearch, p_nominal: float | None,
                    delta: float, confidence: float, eps_nominal: float | None, n_hypotheses: int,
                    guessing: dict, n_in, n_out, randomness: dict, sealed: bool, power, claim, canaries,
                    diagnostics, auroc=None, commitment=None) -> AuditReport:
    p = val.significance(confidence)
    level = p / n_hypotheses
    top = ceiling(m_test, delta, level)
    needed = None if eps_nominal is None else min_correct(m_test, r, delta, level, eps_nominal)
    result = {"guesses": r, "correct": v, "precision": (v / r) if r else None, "eps_lower": search.eps_lower,
              "confidence": confidence, "significance": p, "p_value_at_nominal": p_nominal,
              "rejects_nominal": None if p_nominal is None else bool(p_nominal < p),
              "search_capped": search.search_capped}
    return AuditReport(
        method="steinke_one_run", claim=report.claim_block(eps_nominal, delta, claim),
        canaries=report.canaries_block(m=m, m_test=m_test, n_in=n_in, n_out=n_out, inclusion="iid_bernoulli_0.5",
                                       overrides=canaries, commitment=commitment, sealed=sealed),
        guessing=guessing, result=result,
        power=report.power_block(power, eps_ceiling=top.eps_lower, min_correct=needed),
        assumptions=report.ONE_RUN_ASSUMPTIONS, extra_assumptions=(),
        diagnostics=report.diagnostics_block(diagnostics, **({"auroc": auroc} if auroc is not None else {})),
        software=report.software(), randomness=randomness)


def from_counts(m: int, guesses: int, correct: int, *, delta: float, confidence: float = 0.95,
                eps_nominal: float | None = None, power=None, claim=None, canaries=None,
                diagnostics=None) -> AuditReport:
    """One-run audit from its counts: m randomised canaries, r guesses, v correct."""
    m, r, v = val.ordered_counts(m, guesses, correct, r_name="guesses", v_name="correct", maximum=MAX_CANARIES)
    delta = val.half_open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    eps_nominal = _nominal(eps_nominal)
    p = val.significance(confidence)
    search = search_eps_lower(m, r, v, delta, p)
    p_nominal = None if eps_nominal is None else p_value_unchecked(m, r, v, eps_nominal, delta)
    return _one_run_report(m=m, m_test=m, r=r, v=v, search=search, p_nominal=p_nominal, delta=delta,
                           confidence=confidence, eps_nominal=eps_nominal, n_hypotheses=1,
                           guessing=report.guessing_block(selection="explicit"), n_in=None, n_out=None,
                           randomness=report.randomness_block("external", None), sealed=False, power=power,
                           claim=claim, canaries=canaries, diagnostics=diagnostics)


def from_scores(scores, membership, *, delta: float, confidence: float = 0.95, k_plus: int | None = None,
                k_minus: int = 0, strategy=None, eps_nominal: float | None = None, tie_break_seed: int | None = None,
                preregistration=None, power=None, claim=None, canaries=None, diagnostics=None) -> AuditReport:
    """One-run audit from canary scores and the inclusion coins (rank, guess, reveal, count, bound).

    `scores`: a 1-D array (frozen now) or `FrozenScores`; `membership`: a sealed `Membership` (revealed
    here, refused if it was revealed before the scores were frozen) or a ±1 / 0-1 / boolean vector.
    `strategy`: `Explicit()` (default; needs k_plus), `Bonferroni(family)` or `Split(frac, seed)`.
    """
    delta = val.half_open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    eps_nominal = _nominal(eps_nominal)
    strategy = st.check_strategy(st.Explicit() if strategy is None else strategy)
    tie_seed = st.TIE_BREAK_SEED if tie_break_seed is None else val.seed("tie_break_seed", tie_break_seed)
    frozen = cn.freeze_scores(scores)
    m = val.count("scores", frozen.m, 1, MAX_CANARIES)
    sealed = isinstance(membership, cn.Membership)
    if sealed:
        if membership.m != m:
            raise InvalidParameter("membership", f"{membership.m} coins", f"one coin per score (m={m})")
        revealed_before = membership.revealed_at
        if revealed_before is not None and frozen.frozen_at > revealed_before:
            raise InvalidParameter("scores", f"frozen at t={frozen.frozen_at}",
                                   f"scores frozen before the membership was revealed (t={revealed_before})")
        for what, when in (("strategy", getattr(strategy, "declared_at", None)),
                           ("preregistration", getattr(preregistration, "registered_at", None))):
            if when is not None and revealed_before is not None and when > revealed_before:
                raise InvalidParameter(what, f"declared at t={when}",
                                       f"declared before the membership was revealed (t={revealed_before})")
    else:
        signs = cn.as_signs(membership)
        if signs.size != m:
            raise InvalidParameter("membership", f"{signs.size} labels", f"one label per score (m={m})")
        _both_classes(signs)
    if preregistration is not None:
        _check_preregistration(preregistration, m=m, delta=delta, confidence=confidence, strategy=strategy,
                               k_plus=k_plus, k_minus=k_minus, tie_seed=tie_seed)
    if sealed:
        signs = membership.reveal(frozen)
        _both_classes(signs)
    key = st.tie_break_key(m, tie_seed)
    outcome = strategy.run(frozen.values, signs, key, k_plus=k_plus, k_minus=k_minus, delta=delta,
                           p=val.significance(confidence), eps_nominal=eps_nominal)
    guessing = report.guessing_block(
        k_plus=outcome.k_plus, k_minus=outcome.k_minus, selection=outcome.selection,
        n_hypotheses=outcome.n_hypotheses, split_frac=outcome.split_frac, tie_break="fixed_random_key",
        preregistration=None if preregistration is None else preregistration.digest)
    if sealed:
        randomness = report.randomness_block(membership.source, membership.audit_release)
    else:
        randomness = report.randomness_block("external", None)
    commitment = None if preregistration is None else preregistration.commitment
    return _one_run_report(
        m=m, m_test=outcome.m_test, r=outcome.guesses, v=outcome.correct, search=outcome.search,
        p_nominal=outcome.p_value_at_nominal, delta=delta, confidence=confidence, eps_nominal=eps_nominal,
        n_hypotheses=outcome.n_hypotheses, guessing=guessing, n_in=int(np.sum(signs == 1)),
        n_out=int(np.sum(signs == -1)), randomness=randomness, sealed=sealed, power=power, claim=claim,
        canaries=canaries, diagnostics=diagnostics, auroc=_auroc(frozen.values, signs), commitment=commitment)


def _both_classes(signs: np.ndarray) -> None:
    if not (np.any(signs == 1) and np.any(signs == -1)):
        raise InvalidParameter("membership", f"one class only ({int(np.sum(signs == 1))} present of {signs.size})",
                               "both included (+1) and excluded (−1) canaries")


def _auroc(scores: np.ndarray, signs: np.ndarray) -> float:
    """Diagnostic only (never used by the test): P[in-score > out-score] + ½·P[tie], via scipy's Mann–Whitney U."""
    from scipy.stats import mannwhitneyu
    inside, outside = scores[signs == 1], scores[signs == -1]
    return float(mannwhitneyu(inside, outside).statistic / (inside.size * outside.size))


def _check_preregistration(prereg, *, m, delta, confidence, strategy, k_plus, k_minus, tie_seed) -> None:
    if not isinstance(prereg, cn.Preregistration):
        raise InvalidParameter("preregistration", type(prereg).__name__, "a Preregistration or None")
    expected = {"m": m, "delta": delta, "confidence": confidence, "selection": strategy.name,
                "tie_break_seed": tie_seed}
    if strategy.name == "explicit":
        expected.update(k_plus=k_plus, k_minus=k_minus)
    if strategy.name == "bonferroni":
        expected["family"] = strategy.family
    for key, value in expected.items():
        if getattr(prereg, key) != value:
            raise InvalidParameter(f"preregistration.{key}", getattr(prereg, key), f"the audit's value {value!r}")
