"""The one-run p-value and the ε search (Steinke, Nasr & Jagielski 2023). Proofs: docs/audits.md, "Proof notes".

Guarantees:
* `p_value(m, r, v, eps, delta)` is `min{1, β(ε) + 2·m·δ·A(ε)}` with `β(ε) = P[W ≥ v]`,
  `A(ε) = max_{1≤i≤v} P[v−i ≤ W ≤ v−1]/i`, `W ~ Bin(r, expit ε)`; 1 when v = 0. If the mechanism is (ε, δ)-DP
  per canary (add/remove) and the one-run assumptions hold (independent fair coins, guess rule fixed before the
  labels, the scored object covered by the guarantee), `P[V ≥ v] ≤ p_value(...)`.
* `eps_lower(m, r, v, delta, p)` is `inf{ε ≥ 0 : p_value(ε) ≥ p}`, found by a bracketing search (started at
  the δ = 0 closed form, refined by ITP: interpolation, truncation, projection) that keeps
  `p_value(lo) < p ≤ p_value(hi)` at evaluated points until `hi − lo ≤ 1e−9`, and returns `lo` (the safe end).
  The search is capped at ε = 100 (`search_capped`).

Numerics: every tail is a regularised incomplete beta from scipy (Boost; `betainc` is what
`scipy.stats.binom.sf` evaluates, `betaincc` its complement), called as ufuncs, never `1 − cdf`. The
binomial is taken over the number of *wrong* guesses `F = r − W ~ Bin(r, expit(−ε))`, so the small
probability `expit(−ε)` is exact even where `expit(ε)` rounds to 1. Each window is a difference of two tails
on the side where both are small (no cancellation relative to A). The window maximum is exact over all
i ≤ v, found by vectorised branch and bound (`_window_max`), which stays fast at r = 10⁸. Probabilities below
the double range (≈1e−308) underflow to 0; that only matters for significance levels that small, which no
audit uses.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betainc, betaincc, betaincinv, expit, logit

from privcheck import validation as val

__all__ = ["BISECTION_WIDTH", "EPS_CAP", "EpsSearch", "MAX_CANARIES", "ceiling", "eps_lower",
           "eps_lower_closed_form_delta0", "min_correct", "p_value", "p_value_unchecked", "search_eps_lower"]

MAX_CANARIES = 10**8     # m of a one-run audit: the window search is fast and the ceiling property verified up to 1e8

EPS_CAP = 100.0          # the ε search stops here and reports search_capped (docs/audits.md, proof notes)
BISECTION_WIDTH = 1e-9   # the ε search stops once hi − lo ≤ this width
_DENSE = 64              # window scan: offsets evaluated per vectorised call
_GRID = 48               # window scan: initial geometric grid of offsets
_ITP_KAPPA1 = 0.02       # ITP truncation: a step sits ≥ κ₁·width²/width₀ off the interpolant, toward the midpoint
_ITP_SLACK = 2           # ITP n₀: at most this many steps more than bisection of the starting bracket would take
_CLOSE = 1.0 - 2.0**-10  # a probe this many widths inside an end closes the bracket if the estimate is right
_STEP_GROWTH = 64.0      # above a rejected closed-form start, steps of 1e-9, 64e-9, ... up to the cap


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


def p_value_unchecked(m: int, r: int, v: int, eps: float, delta: float, stop_at: float | None = None) -> float:
    """`p_value` for inputs the caller has validated. With `stop_at`, return β as soon as β ≥ stop_at (the p-value
    is at least β, so no window is needed to know that it is ≥ stop_at)."""
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
    evaluated ratio are dropped (this generalises the early stop `P[W ≤ v−1]/i ≤ max` of a linear scan); the rest are
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

    pts = _start_offsets(v)
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


@functools.lru_cache(maxsize=512)
def _start_offsets(v: int) -> np.ndarray:
    """The window scan's first offsets (1…64, a geometric grid and v): they depend on v only, so a search that
    evaluates PVAL many times at one v builds them once (read-only, shared between calls)."""
    pts = np.unique(np.concatenate([np.arange(1, min(v, _DENSE) + 1),
                                    np.round(np.geomspace(1, v, _GRID)), [v]])).astype(np.float64)
    pts.flags.writeable = False
    return pts


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """PVAL(m, r, v, ε, δ), clamped to [0, 1]; a valid p-value for V ≥ v under (ε, δ)-DP."""
    m, r, v = val.ordered_counts(m, r, v, maximum=MAX_CANARIES)
    return p_value_unchecked(m, r, v, val.nonnegative("eps", eps), val.unit_interval("delta", delta))


@dataclass(frozen=True)
class EpsSearch:
    """Result of the ε search: the bound, whether it hit the cap, and the number of PVAL evaluations."""
    eps_lower: float
    search_capped: bool
    evaluations: int


def search_eps_lower(m: int, r: int, v: int, delta: float, p: float) -> EpsSearch:
    """EPS_LB(m, r, v, δ, p) = inf{ε ≥ 0 : PVAL(ε) ≥ p} with its bookkeeping (inputs validated here).

    Returns `lo` of an evaluated bracket with PVAL(lo) < p ≤ PVAL(hi) and hi − lo ≤ BISECTION_WIDTH
    (docs/audits.md, proof notes): the start comes from the δ = 0 closed form, the refinement is ITP.
    """
    m, r, v = val.ordered_counts(m, r, v, maximum=MAX_CANARIES)
    delta = val.unit_interval("delta", delta)
    p = val.open_unit("p", p)
    calls = 0

    def probe(eps: float) -> tuple[bool, float]:   # (PVAL(eps) < p, i.e. ε is rejected; ordinate to interpolate)
        nonlocal calls
        calls += 1
        value = p_value_unchecked(m, r, v, eps, delta, p)
        rejected = value < p                       # the side is decided here, never by the rounded ordinate
        y = _ordinate(value, p)
        return rejected, (min(y, -1e-300) if rejected else max(y, 0.0))

    if v == 0:
        return EpsSearch(0.0, False, calls)
    rejected, y_lo = probe(0.0)
    if not rejected:
        return EpsSearch(0.0, False, calls)
    lo, cap = 0.0, EPS_CAP
    # β(ε_cf) = p at the δ = 0 closed form and PVAL ≥ β, so PVAL(ε_cf) ≥ p: ε_cf is on the hi side of the
    # infimum. Only betaincinv's rounding could put it below; the probe checks, and the steps above recover.
    guess = float(logit(betaincinv(v, r - v + 1, p)))
    hi = cap if not guess < cap else (guess if guess > lo else lo + BISECTION_WIDTH)   # NaN → cap
    step = BISECTION_WIDTH
    while True:
        rejected, y_hi = probe(hi)
        if not rejected:
            break
        if hi >= cap:
            return EpsSearch(cap, True, calls)
        lo, y_lo = hi, y_hi
        hi, step = min(cap, lo + step), step * _STEP_GROWTH
    return EpsSearch(_itp(probe, lo, y_lo, hi, y_hi), False, calls)


def _ordinate(value: float, p: float) -> float:
    """T(value) − T(p) with T(u) = −log(−log u), increasing on (0, 1). At δ = 0 and v = r, −log β ≈ r·e^{−ε}, so
    T(PVAL) is close to linear in ε; near u = p the difference is formed without cancellation (log1p of the
    relative gap). A PVAL of 0 (underflow) or 1 (clamp) is moved to the nearest double inside (0, 1), so the
    ordinate stays finite; it only guides the interpolation, the side comes from `PVAL < p`."""
    value = min(max(value, math.ulp(0.0)), 1.0 - 2.0**-53)
    log_p = math.log(p)
    if abs(value - p) > 0.5 * p:
        return math.log(-log_p) - math.log(-math.log(value))
    d = math.log1p((value - p) / p) / log_p          # log(value)/log(p) − 1
    return math.inf if d <= -1.0 else -math.log1p(d)  # d ≤ −1 only if log(value) rounds to 0 (p near 1)


def _itp(probe, lo: float, y_lo: float, hi: float, y_hi: float) -> float:
    """Shrink an evaluated bracket (PVAL(lo) < p ≤ PVAL(hi); y_lo < 0 ≤ y_hi) to width ≤ BISECTION_WIDTH; return lo.

    ITP (Oliveira & Takahashi 2020): interpolate (inverse quadratic through both ends and the end replaced last,
    else the secant), truncate (push the estimate toward the midpoint; if it sits within half a width of an end,
    probe just under one width inside that end, which closes the bracket when the estimate is right), project onto
    [mid − ρ, mid + ρ] with ρ = W·2^(n_max − j − 1) − width/2. The projection alone bounds the width after step j
    by W·2^(n_max − j − 1), so at most n_max = ⌈log₂(width₀/W)⌉ + n₀ steps are taken, whatever the
    interpolation does. Every step replaces lo or hi by an evaluated point on its own side.
    """
    width0 = hi - lo
    n_max = max(0, math.ceil(math.log2(width0 / BISECTION_WIDTH))) + _ITP_SLACK
    kappa1 = _ITP_KAPPA1 / width0
    prev: tuple[float, float] | None = None        # the end replaced last: the third node of the quadratic
    j = 0
    while hi - lo > BISECTION_WIDTH:              # invariant: PVAL(lo) < p ≤ PVAL(hi), both evaluated
        width = hi - lo
        mid = lo + 0.5 * width
        x_f = _interpolate(lo, y_lo, hi, y_hi, prev, mid)
        gap = mid - x_f
        trunc = kappa1 * width * width
        x_t = x_f + math.copysign(trunc, gap) if trunc <= abs(gap) else mid
        if x_f - lo < 0.5 * BISECTION_WIDTH:
            x_t = lo + _CLOSE * BISECTION_WIDTH
        elif hi - x_f < 0.5 * BISECTION_WIDTH:
            x_t = hi - _CLOSE * BISECTION_WIDTH
        radius = max(0.0, BISECTION_WIDTH * 2.0 ** (n_max - j - 1) - 0.5 * width)
        x = min(max(x_t, mid - radius), mid + radius)
        if not lo < x < hi:                        # rounding at the very end: fall back to bisection
            x = mid
        rejected, y = probe(x)
        if rejected:
            prev, lo, y_lo = (lo, y_lo), x, y
        else:
            prev, hi, y_hi = (hi, y_hi), x, y
        j += 1
    return lo


def _interpolate(lo: float, y_lo: float, hi: float, y_hi: float, prev, mid: float) -> float:
    """Root estimate in [lo, hi]: inverse quadratic through the ends and `prev` when it lands strictly inside,
    else the secant between the ends; the midpoint should an end's ordinate be infinite."""
    if not (math.isfinite(y_lo) and math.isfinite(y_hi)):
        return mid
    if prev is not None:
        x_c, y_c = prev
        if math.isfinite(y_c) and y_c != y_lo and y_c != y_hi:
            x = (lo * y_hi * y_c / ((y_lo - y_hi) * (y_lo - y_c)) + hi * y_lo * y_c / ((y_hi - y_lo) * (y_hi - y_c))
                 + x_c * y_lo * y_hi / ((y_c - y_lo) * (y_c - y_hi)))
            if lo < x < hi:
                return x
    return (y_hi * lo - y_lo * hi) / (y_hi - y_lo)   # y_lo < 0 ≤ y_hi: a point of [lo, hi]


def eps_lower(m: int, r: int, v: int, delta: float, p: float) -> float:
    """EPS_LB(m, r, v, δ, p) = inf{ε ≥ 0 : PVAL(ε) ≥ p}; 100 when the capped search never reaches p."""
    return search_eps_lower(m, r, v, delta, p).eps_lower


def eps_lower_closed_form_delta0(r: int, v: int, p: float) -> float:
    """δ = 0 closed form: max(0, logit(Beta⁻¹(p; v, r − v + 1))), 0 when v = 0 (docs/audits.md, proof notes)."""
    if v == 0:
        return 0.0
    return max(0.0, float(logit(betaincinv(v, r - v + 1, p))))


# ---------------------------------------------------------------------------------------------------------------------
# Planning quantities stored in every report (its power block is always filled).


@functools.lru_cache(maxsize=256)
def ceiling(m: int, delta: float, p: float) -> EpsSearch:
    """ε_max(m) = EPS_LB(m, m, m, δ, p): what perfect guessing with every canary certifies (the ceiling)."""
    return search_eps_lower(m, m, m, delta, p)


def min_correct(m: int, r: int, delta: float, p: float, eps_nominal: float) -> int | None:
    """min{v : EPS_LB(m, r, v, δ, p) ≥ ε_nom}, or None if even v = r falls short.

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
