"""One-run canary audits (Steinke, Nasr & Jagielski 2023; spec audits.md §3).

Guarantees:
* `p_value(m, r, v, eps, delta)` is PVAL of spec §3.2: `min{1, β(ε) + 2·m·δ·A(ε)}` with
  `β(ε) = P[W ≥ v]`, `A(ε) = max_{1≤i≤v} P[v−i ≤ W ≤ v−1]/i`, `W ~ Bin(r, expit ε)`; 1 when v = 0.
  If the mechanism is (ε, δ)-DP per canary (add/remove) and the assumptions of §3.5 hold,
  `P[V ≥ v] ≤ p_value(...)`.
* `eps_lower(m, r, v, delta, p)` is `inf{ε ≥ 0 : PVAL(ε) ≥ p}` (§3.3), found by doubling then bisection
  that keeps `PVAL(lo) < p ≤ PVAL(hi)` until `hi − lo ≤ 1e−9`, and returns `lo` (the safe end). The
  search is capped at ε = 100 (`search_capped`).

Numerics: every tail is a regularised incomplete beta from scipy (Boost; `betainc` is what
`scipy.stats.binom.sf` evaluates, `betaincc` its complement), called as ufuncs, never `1 − cdf`. The
binomial is taken over the number of *wrong* guesses `F = r − W ~ Bin(r, expit(−ε))`, so the small
probability `expit(−ε)` is exact even where `expit(ε)` rounds to 1. Each window is a difference of two tails
on the side where both are small (no cancellation relative to A). The window maximum is exact over all
i ≤ v, found by vectorised branch and bound (`_window_max`), which generalises the spec's early stop and
stays fast at r = 10⁸. Probabilities below the double range (≈1e−308) underflow to 0; that only matters
for significance levels that small, which no audit uses.
"""

from __future__ import annotations

import functools
import heapq
import math
import numbers
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
from scipy.special import betainc, betaincc, expit

from audits import report
from audits.report import AuditReport
from privcheck import validation as val
from privcheck.errors import InvalidParameter

EPS_CAP = 100.0          # spec §9: the ε search stops here and reports search_capped
BISECTION_WIDTH = 1e-9   # spec §3.3
_DENSE = 64              # window scan: offsets evaluated per vectorised call
_GRID = 48               # window scan: initial geometric grid of offsets


# ---------------------------------------------------------------------------------------------------------------------
# Validation shared by the audit modules (InvalidParameter before any work).


def check_int(name: str, value, minimum: int = 0) -> int:
    """An integer >= minimum (bools, NaN and non-integral floats rejected)."""
    return val.count(name, value, minimum)


def _real(name: str, value, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)")
    return float(value)


def check_delta(value, name: str = "delta") -> float:
    """δ in [0, 1]."""
    x = _real(name, value, "[0, 1]")
    if not 0.0 <= x <= 1.0:
        raise InvalidParameter(name, value, "[0, 1]")
    return x


def check_open_unit(name: str, value) -> float:
    """A confidence or significance level in (0, 1)."""
    x = _real(name, value, "(0, 1)")
    if not 0.0 < x < 1.0:
        raise InvalidParameter(name, value, "(0, 1)")
    return x


def significance(confidence: float) -> float:
    """p = 1 − confidence, computed in decimal so that 0.95 gives exactly 0.05 (not 0.050000000000000044)."""
    return float(Decimal(1) - Decimal(repr(float(confidence))))


def check_eps(value, name: str = "eps") -> float:
    """ε in [0, inf)."""
    x = _real(name, value, "[0, inf)")
    if x < 0:
        raise InvalidParameter(name, value, "[0, inf)")
    return x


def check_counts(m, r, v, *, m_name: str = "m", r_name: str = "r", v_name: str = "v") -> tuple[int, int, int]:
    """Integers with 0 ≤ v ≤ r ≤ m and m ≥ 1 (spec §9)."""
    m = check_int(m_name, m, 1)
    r = check_int(r_name, r, 0)
    v = check_int(v_name, v, 0)
    if r > m:
        raise InvalidParameter(r_name, r, f"an integer in [0, {m_name}={m}]")
    if v > r:
        raise InvalidParameter(v_name, v, f"an integer in [0, {r_name}={r}]")
    return m, r, v


# ---------------------------------------------------------------------------------------------------------------------
# PVAL and its pieces.


def _binom_sf(k, r: int, q: float):
    """P[F > k] for F ~ Bin(r, q): the regularised incomplete beta I_q(k+1, r−k), as `scipy.stats.binom.sf`
    computes it (bit-identical, Boost), called as a ufunc to avoid the distribution machinery's overhead."""
    k = np.asarray(k, dtype=np.float64)
    inside = (k >= 0) & (k < r)
    kk = np.where(inside, k, 0.0)
    return np.where(inside, betainc(kk + 1.0, r - kk, q), np.where(k < 0, 1.0, 0.0))


def _binom_cdf(k, r: int, q: float):
    """P[F ≤ k] = 1 − I_q(k+1, r−k), through the complemented incomplete beta (no 1 − sf cancellation)."""
    k = np.asarray(k, dtype=np.float64)
    inside = (k >= 0) & (k < r)
    kk = np.where(inside, k, 0.0)
    return np.where(inside, betaincc(kk + 1.0, r - kk, q), np.where(k < 0, 0.0, 1.0))


def _tail_and_window(m: int, r: int, v: int, eps: float, delta: float, stop_at: float | None) -> float:
    """PVAL without validation. With `stop_at`, return β as soon as β ≥ stop_at (PVAL ≥ β: no window needed)."""
    if v == 0:
        return 1.0
    q = float(expit(-eps))                     # P[a guess is wrong] under ε-randomised response
    wrong_max = r - v                          # V ≥ v  ⇔  F ≤ r − v
    beta = float(_binom_cdf(wrong_max, r, q))
    if delta == 0.0 or beta >= 1.0 or (stop_at is not None and beta >= stop_at):
        return min(1.0, max(0.0, beta))
    window_max = _window_max(r, v, q, wrong_max, beta)
    return min(1.0, max(0.0, beta + 2.0 * m * delta * window_max))


def _window_max(r: int, v: int, q: float, wrong_max: int, bottom: float) -> float:
    """A(ε) = max_{1≤i≤v} G(i)/i with G(i) = P[v−i ≤ W ≤ v−1] = P[r−v+1 ≤ F ≤ r−v+i], F ~ Bin(r, q).

    Exact maximum over every integer i by branch and bound: G is non-decreasing, so on the offsets strictly
    between two evaluated points a < b, G(i)/i ≤ G(b)/(a+1). Blocks whose bound cannot beat the best
    evaluated ratio are dropped (this generalises the spec's stop rule `P[W ≤ v−1]/i ≤ max`); the rest are
    refined with vectorised evaluations, and blocks of at most `_DENSE` offsets are evaluated in full. The
    mass of W may sit millions of offsets below v (r = 10⁸), so a linear scan would be far too slow.
    `bottom` is β = P[F ≤ r−v]; `top` = P[F ≥ r−v+1] = P[W ≤ v−1] bounds every window.
    """
    top = float(_binom_sf(wrong_max, r, q))
    if top <= 0.0:
        return 0.0

    def ratios(i: np.ndarray) -> np.ndarray:          # G(i) for integer offsets i (float array)
        if top <= 0.5:   # both tails small on the upper side of F: no cancellation relative to G
            g = top - _binom_sf(wrong_max + i, r, q)
        else:            # both small on the lower side
            g = _binom_cdf(wrong_max + i, r, q) - bottom
        return np.clip(g, 0.0, top)

    pts = np.unique(np.concatenate([np.arange(1, min(v, _DENSE) + 1),
                                    np.round(np.geomspace(1, v, _GRID)), [v]])).astype(np.float64)
    g = ratios(pts)
    best = float(np.max(g / pts))
    heap: list[tuple[float, float, float, float]] = []

    def push(a_pts: np.ndarray, g_vals: np.ndarray) -> None:
        for a, b, gb in zip(a_pts[:-1], a_pts[1:], g_vals[1:]):
            bound = gb / (a + 1.0)
            if b - a > 1 and bound > best:
                heapq.heappush(heap, (-bound, float(a), float(b), float(gb)))

    push(pts, g)
    while heap and -heap[0][0] > best:
        _, a, b, gb = heapq.heappop(heap)
        if b - a - 1 <= _DENSE:
            inner = np.arange(a + 1, b, dtype=np.float64)
            best = max(best, float(np.max(ratios(inner) / inner)))
            continue
        inner = np.unique(np.round(np.linspace(a, b, _DENSE + 2)[1:-1]))
        g_inner = ratios(inner)
        best = max(best, float(np.max(g_inner / inner)))
        push(np.concatenate([[a], inner, [b]]), np.concatenate([[0.0], g_inner, [gb]]))
    return best


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """PVAL(m, r, v, ε, δ) of spec §3.2, clamped to [0, 1]; a valid p-value for V ≥ v under (ε, δ)-DP."""
    m, r, v = check_counts(m, r, v)
    return _tail_and_window(m, r, v, check_eps(eps), check_delta(delta), None)


@dataclass(frozen=True)
class EpsSearch:
    """Result of the ε search: the bound, whether it hit the cap, and the number of PVAL evaluations."""
    eps_lower: float
    search_capped: bool
    evaluations: int


def search_eps_lower(m: int, r: int, v: int, delta: float, p: float) -> EpsSearch:
    """EPS_LB of spec §3.3 with its bookkeeping (validated inputs)."""
    m, r, v = check_counts(m, r, v)
    delta = check_delta(delta)
    p = check_open_unit("p", p)
    calls = 0

    def below(eps: float) -> bool:     # PVAL(eps) < p, i.e. ε is rejected
        nonlocal calls
        calls += 1
        return _tail_and_window(m, r, v, eps, delta, p) < p

    if v == 0 or not below(0.0):
        return EpsSearch(0.0, False, calls)
    lo, hi = 0.0, 1.0
    while below(hi):
        if hi >= EPS_CAP:
            return EpsSearch(EPS_CAP, True, calls)
        lo, hi = hi, min(2.0 * hi, EPS_CAP)
    while hi - lo > BISECTION_WIDTH:   # invariant: PVAL(lo) < p ≤ PVAL(hi)
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
    return EpsSearch(lo, False, calls)


def eps_lower(m: int, r: int, v: int, delta: float, p: float) -> float:
    """EPS_LB(m, r, v, δ, p) = inf{ε ≥ 0 : PVAL(ε) ≥ p}; 100 when the capped search never reaches p."""
    return search_eps_lower(m, r, v, delta, p).eps_lower


def eps_lower_closed_form_delta0(r: int, v: int, p: float) -> float:
    """δ = 0 closed form (spec §3.4): max(0, logit(Beta⁻¹(p; v, r − v + 1))), 0 when v = 0."""
    from scipy.special import betaincinv, logit
    if v == 0:
        return 0.0
    return max(0.0, float(logit(betaincinv(v, r - v + 1, p))))


# ---------------------------------------------------------------------------------------------------------------------
# Planning quantities stored in every report (spec §6.1, §10 "power block always filled").


@functools.lru_cache(maxsize=256)
def ceiling(m: int, delta: float, p: float) -> EpsSearch:
    """ε_max(m) = EPS_LB(m, m, m, δ, p): what perfect guessing with every canary certifies (spec §3.7, §12)."""
    return search_eps_lower(m, m, m, delta, p)


def min_correct(m: int, r: int, delta: float, p: float, eps_nominal: float) -> int | None:
    """min{v : EPS_LB(m, r, v, δ, p) ≥ ε_nom}, or None if even v = r falls short (spec §6.1).

    Bisection over v relies on EPS_LB being non-decreasing in v (PVAL non-increasing in v; property-tested).
    """
    if r == 0 or search_eps_lower(m, r, r, delta, p).eps_lower < eps_nominal:
        return None
    lo, hi = -1, r                      # EPS_LB(lo) < ε_nom ≤ EPS_LB(hi), with EPS_LB(−1) := 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if search_eps_lower(m, r, mid, delta, p).eps_lower >= eps_nominal:
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------------------------------------------------------
# Audit reports.


def _nominal(eps_nominal) -> float | None:
    return None if eps_nominal is None else check_eps(eps_nominal, "eps_nominal")


def _one_run_report(*, m: int, m_test: int, r: int, v: int, search: EpsSearch, p_nominal: float | None,
                    delta: float, confidence: float, eps_nominal: float | None, n_hypotheses: int,
                    guessing: dict, n_in, n_out, randomness: dict, sealed: bool, power, claim, canaries,
                    diagnostics, auroc=None, commitment=None) -> AuditReport:
    p = significance(confidence)
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
    """One-run audit from its counts: m randomised canaries, r guesses, v correct (spec §3.1 step 8)."""
    m, r, v = check_counts(m, guesses, correct, r_name="guesses", v_name="correct")
    delta = check_delta(delta)
    confidence = check_open_unit("confidence", confidence)
    eps_nominal = _nominal(eps_nominal)
    p = significance(confidence)
    search = search_eps_lower(m, r, v, delta, p)
    p_nominal = None if eps_nominal is None else _tail_and_window(m, r, v, eps_nominal, delta, None)
    return _one_run_report(m=m, m_test=m, r=r, v=v, search=search, p_nominal=p_nominal, delta=delta,
                           confidence=confidence, eps_nominal=eps_nominal, n_hypotheses=1,
                           guessing=report.guessing_block(selection="explicit"), n_in=None, n_out=None,
                           randomness=report.randomness_block("external", None), sealed=False, power=power,
                           claim=claim, canaries=canaries, diagnostics=diagnostics)


def from_scores(scores, membership, *, delta: float, confidence: float = 0.95, k_plus: int | None = None,
                k_minus: int = 0, strategy=None, eps_nominal: float | None = None, tie_break_seed: int | None = None,
                preregistration=None, power=None, claim=None, canaries=None, diagnostics=None) -> AuditReport:
    """One-run audit from canary scores and the inclusion coins (spec §3.1 steps 5–8, §3.6).

    `scores`: a 1-D array (frozen now) or `FrozenScores`; `membership`: a sealed `Membership` (revealed
    here, refused if it was revealed before the scores were frozen) or a ±1 / 0-1 / boolean vector.
    `strategy`: `Explicit()` (default; needs k_plus), `Bonferroni(family)` or `Split(frac, seed)`.
    """
    from audits import canary as cn
    from audits import strategies as st

    delta = check_delta(delta)
    confidence = check_open_unit("confidence", confidence)
    eps_nominal = _nominal(eps_nominal)
    strategy = st.check_strategy(st.Explicit() if strategy is None else strategy)
    tie_seed = st.TIE_BREAK_SEED if tie_break_seed is None else check_int("tie_break_seed", tie_break_seed, 0)
    frozen = cn.freeze_scores(scores)
    m = frozen.m
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
                           p=significance(confidence), eps_nominal=eps_nominal)
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
    """Diagnostic only (spec §7.6): P[in-score > out-score] + ½·P[tie], via scipy's Mann–Whitney U."""
    from scipy.stats import mannwhitneyu
    inside, outside = scores[signs == 1], scores[signs == -1]
    return float(mannwhitneyu(inside, outside).statistic / (inside.size * outside.size))


def _check_preregistration(prereg, *, m, delta, confidence, strategy, k_plus, k_minus, tie_seed) -> None:
    from audits.canary import Preregistration
    if not isinstance(prereg, Preregistration):
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
