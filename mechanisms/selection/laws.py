"""Exact output laws of the selection mechanisms (derivations in docs/selection.md, "Exact output laws").

Guarantee: these are the mechanisms' exact output distributions (up to float64 rounding; no Monte Carlo
over the noise), used by the utility studies and by the tests that check each sampler against its law.
They are NOT accountants: they make no privacy claim and their float values are never certified bounds.
Proofs of the formulas: docs/selection.md.

    privbon_law(s, σ)                     P(i) = softmax(s/σ)_i                   (Gumbel-max = softmax)
    privbon_policy_finite_n(π0, r, n, σ)  P(y) = n·π0(y)·E[e^{r(y)/σ}/(e^{r(y)/σ} + Σ_{j≥2} e^{r(Y_j)/σ})]
                                          by enumerating the multinomial counts of Y_2..Y_n
    privbon_policy_limit(π0, r, σ)        π0(y)·e^{r(y)/σ}/E_{π0}[e^{r/σ}]                       (n → ∞)
    itp_law(s, β, λ̂, M)                   a_i = min(1, relu((s_i − λ̂)/β)/M);
                                          P(t = i) = Π_{j<i}(1 − a_j)·a_i,  P(⊥) = Π_j (1 − a_j)
    privitp_law_given_lambda(s′, λ̃, θ)    the same products with a_i = P_acc(s′_i; λ̃), c = θ.threshold_width(λ̃)
    privitp_law(s′, λ̂, θ, nodes=96)       E_{λ̃ ~ N(λ̂, σ_X²)}[law given λ̃], the average taken OUTSIDE the
                                          product (averaging per-round probabilities first would ignore
                                          the correlation through the shared λ̃): Gauss–Hermite, or
                                          composite Gauss–Legendre split at the kink of c = max(·, c_min)

P_acc(r) = (σ_Z/c)·[G((r − λ̃)/σ_Z) − G((r − λ̃ − c)/σ_Z)], G(u) = uΦ(u) + φ(u). It is evaluated
stably: G(−v) = φ(v)·(1 − v·m(v)) with the Mills ratio m(v) = √(π/2)·erfcx(v/√2) for v ≥ 0 and
G(v) = v + G(−v); the smaller of P_acc and P_rej is computed directly and the other as its complement;
for c/σ_Z < 1e−3 the exact mean of Φ over the threshold interval is replaced by its midpoint expansion
Φ(m) − (h²/24)·m·φ(m) (remainder ≤ h⁴/1920·max|Φ⁗| < 1e−15).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import erfcx, gammaln, logsumexp, ndtr, xlogy

from mechanisms.selection.scores import as_score_matrix, is_one_prompt, per_prompt_values, prepare_scores
from privcheck import validation as v
from privcheck.accounting.selection import PrivITPParams
from privcheck.errors import InvalidParameter

__all__ = ["OutputLaw", "acceptance_rejection", "itp_law", "privbon_law", "privbon_policy_finite_n",
           "privbon_policy_limit", "privitp_law", "privitp_law_given_lambda"]

_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SMALL_WIDTH = 1e-3
_MAX_ENUMERATION = 2_000_000


@dataclass(frozen=True)
class OutputLaw:
    """Law of a rejection sampler: `probs[..., i]` = P(t = i + 1) and `fallback` = P(t = ⊥).
    `acceptance` holds the per-round acceptance probabilities when they are well defined (given λ̃)."""

    probs: np.ndarray
    fallback: np.ndarray | float
    acceptance: np.ndarray | None = None

    @property
    def total(self):
        return self.probs.sum(axis=-1) + self.fallback


# --- PrivBoN -------------------------------------------------------------------------------------------

def privbon_law(scores, sigma) -> np.ndarray:
    """softmax(s/σ) along the candidates (the exact law of PrivBoN given already clipped scores)."""
    sigma = v.positive("sigma", sigma)
    one_prompt = is_one_prompt(scores)
    s = as_score_matrix(scores)
    with np.errstate(over="ignore"):      # s − max may overflow to −inf (a zero probability); σ may be subnormal
        z = (s - s.max(axis=1, keepdims=True)) / sigma
    p = np.exp(z - logsumexp(z, axis=1, keepdims=True))
    return p[0] if one_prompt else p


def _pi0(pi0_probs, values) -> tuple[np.ndarray, np.ndarray]:
    pi0 = v.real_array("pi0_probs", pi0_probs)
    r = v.real_array("values", values)
    if pi0.ndim != 1 or pi0.size < 1 or not np.all(np.isfinite(pi0)) or np.any(pi0 < 0) \
            or abs(pi0.sum() - 1.0) > 1e-12 * pi0.size:
        raise InvalidParameter("pi0_probs", pi0_probs, "a 1-D probability vector (non-negative, sums to 1)")
    if r.shape != pi0.shape or not np.all(np.isfinite(r)):
        raise InvalidParameter("values", values, f"{pi0.size} finite scores (one per response of π0)")
    return pi0, r


def privbon_policy_finite_n(pi0_probs, values, n, sigma) -> np.ndarray:
    """Exact PrivBoN policy over the K responses of a small discrete π0 with n candidates.

    `values` are the responses' (clipped) scores. Enumerates the C(n+K−2, K−1) count vectors of the other
    n − 1 candidates (refused above 2·10⁶). Duplicates of the output response are handled exactly.
    """
    pi0, r = _pi0(pi0_probs, values)
    n = v.count("n", n)
    sigma = v.positive("sigma", sigma)
    k, m = pi0.size, n - 1
    if math.comb(m + k - 1, k - 1) > _MAX_ENUMERATION:
        raise InvalidParameter("n", n, f"small enough that C(n+K-2, K-1) <= {_MAX_ENUMERATION} (K = {k})")
    a = np.exp((r - r.max()) / sigma)                       # e^{r/σ} up to a common factor
    # Stars and bars: every multiset of size m over K categories, as a count matrix [C, K].
    bars = np.array(list(itertools.combinations(range(m + k - 1), k - 1)), dtype=np.int64).reshape(-1, k - 1)
    edges = np.concatenate([np.full((bars.shape[0], 1), -1), bars, np.full((bars.shape[0], 1), m + k - 1)], axis=1)
    counts = np.diff(edges, axis=1) - 1
    log_mult = gammaln(m + 1) - gammaln(counts + 1).sum(axis=1) + xlogy(counts, pi0).sum(axis=1)
    weight = np.exp(log_mult)                               # multinomial probabilities of the counts
    others = counts @ a                                     # Σ_{j≥2} e^{r(Y_j)/σ}
    frac = a[None, :] / (a[None, :] + others[:, None])      # [C, K]
    return n * pi0 * (weight @ frac)


def privbon_policy_limit(pi0_probs, values, sigma) -> np.ndarray:
    """n → ∞ limit π_σ(y) = π0(y)·e^{r(y)/σ}/E_{π0}[e^{r/σ}] (the maximiser of E_π[r] − σ·KL(π‖π0))."""
    pi0, r = _pi0(pi0_probs, values)
    sigma = v.positive("sigma", sigma)
    logw = xlogy(1.0, pi0) + r / sigma
    return np.exp(logw - logsumexp(logw))


# --- ITP -----------------------------------------------------------------------------------------------

def _sequential(acc: np.ndarray, log_rej: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(t = i) = Π_{j<i} rej_j · acc_i and P(⊥) = Π_j rej_j, along the last axis (log-space products)."""
    csum = np.cumsum(log_rej, axis=-1)
    before = np.concatenate([np.zeros(csum.shape[:-1] + (1,)), csum[..., :-1]], axis=-1)
    return np.exp(before) * acc, np.exp(csum[..., -1])


def itp_law(scores, beta, lambda_hat, M) -> OutputLaw:
    """Exact law of ITP's rejection loop given λ̂ and M (scalars or one per prompt)."""
    beta = v.positive("beta", beta)
    one_prompt = is_one_prompt(scores)
    s = as_score_matrix(scores)
    lam = per_prompt_values("lambda_hat", lambda_hat, s.shape[0])
    m = per_prompt_values("M", M, s.shape[0])
    if np.any(m <= 0):
        raise InvalidParameter("M", M, "(0, inf)")
    acc = np.minimum(np.maximum((s - lam[:, None]) / beta, 0.0) / m[:, None], 1.0)
    with np.errstate(divide="ignore"):
        probs, fb = _sequential(acc, np.log1p(-acc))
    return _squeeze(OutputLaw(probs, fb, acc), one_prompt)


def _squeeze(law: OutputLaw, one_prompt: bool) -> OutputLaw:
    if not one_prompt:
        return law
    return OutputLaw(law.probs[0], float(law.fallback[0]), None if law.acceptance is None else law.acceptance[0])


# --- PrivITP -------------------------------------------------------------------------------------------

def _g_neg(x: np.ndarray) -> np.ndarray:
    """G(−x) = φ(x) − x·Φ̄(x) = φ(x)·(1 − x·m(x)) for x ≥ 0 (no cancellation against a large term)."""
    phi = _INV_SQRT_2PI * np.exp(-0.5 * x * x)
    return phi * (1.0 - x * _SQRT_HALF_PI * erfcx(x / math.sqrt(2.0)))


def _g_diff(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """G(hi) − G(lo) for hi ≥ lo, using G(u) = u + G(−u) on the positive side."""
    gh = np.where(hi > 0, _g_neg(np.abs(hi)), 0.0)
    gl = np.where(lo > 0, _g_neg(np.abs(lo)), 0.0)
    both_neg = _g_neg(np.maximum(-hi, 0.0)) - _g_neg(np.maximum(-lo, 0.0))
    mixed = hi + gh - _g_neg(np.maximum(-lo, 0.0))
    both_pos = (hi - lo) + gh - gl
    return np.where(hi <= 0, both_neg, np.where(lo <= 0, mixed, both_pos))


def acceptance_rejection(scores, lambda_tilde, c, sigma_z) -> tuple[np.ndarray, np.ndarray]:
    """(P_acc, P_rej) of one Phase-2 round for clean scores r, elementwise (broadcasting):
    P_acc = E_U[Φ((r − λ̃ − c·U)/σ_Z)], P_rej = 1 − P_acc, each accurate in relative terms when small."""
    r = v.real_array("scores", scores)
    lt = v.real_array("lambda_tilde", lambda_tilde)
    c = v.real_array("c", c)
    u1 = (r - lt) / sigma_z
    h = np.broadcast_to(c / sigma_z, u1.shape)
    u0 = u1 - h
    with np.errstate(divide="ignore", invalid="ignore"):
        acc_direct = _g_diff(u1, u0) / h
        rej_direct = _g_diff(-u0, -u1) / h
    mid = u1 - 0.5 * h
    corr = (h * h / 24.0) * mid * _INV_SQRT_2PI * np.exp(-0.5 * mid * mid)
    small = h < _SMALL_WIDTH
    acc = np.where(small, ndtr(mid) - corr, acc_direct)
    rej = np.where(small, ndtr(-mid) + corr, rej_direct)
    acc = np.clip(acc, 0.0, 1.0)
    rej = np.clip(rej, 0.0, 1.0)
    use_acc = acc <= rej
    return np.where(use_acc, acc, 1.0 - rej), np.where(use_acc, 1.0 - acc, rej)


def _given_lambda(s: np.ndarray, lt: np.ndarray, params: PrivITPParams) -> tuple[np.ndarray, ...]:
    c = np.array([params.threshold_width(x) for x in lt.tolist()])
    acc, rej = acceptance_rejection(s, lt[:, None], c[:, None], params.sigma_z)
    log_rej = np.where(acc < 0.5, np.log1p(-acc), np.log(np.maximum(rej, 1e-320)))
    log_rej = np.where(rej == 0.0, -np.inf, log_rej)
    probs, fb = _sequential(acc, log_rej)
    return probs, fb, acc


def _phase2_matrix(phase2_scores, params: PrivITPParams) -> np.ndarray:
    if not isinstance(params, PrivITPParams):
        raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
    return prepare_scores(phase2_scores, params.r_lo, params.r_max, clip=True, name="phase2_scores")


def privitp_law_given_lambda(phase2_scores, lambda_tilde, params: PrivITPParams) -> OutputLaw:
    """Exact law of PrivITP's Phase 2 given the released λ̃ (scalar or one per prompt).

    Scores are clipped to the public range as the mechanism does; c = params.threshold_width(λ̃).
    `acceptance` holds the per-round P_acc.
    """
    one_prompt = is_one_prompt(phase2_scores, "phase2_scores")
    s = _phase2_matrix(phase2_scores, params)
    lt = per_prompt_values("lambda_tilde", lambda_tilde, s.shape[0])
    with np.errstate(divide="ignore"):
        probs, fb, acc = _given_lambda(s, lt, params)
    return _squeeze(OutputLaw(probs, fb, acc), one_prompt)


def _composite_legendre(kinks: np.ndarray, width: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights [P, K] of ∫ φ(x)·f(x) dx over [−T, T] (T = 13: the neglected mass 2Φ(−13) < 1e−37
    bounds the error, f ∈ [0, 1]), by Gauss–Legendre of `order` on panels of width ≤ `width`, with the
    prompt's kink added as a panel edge (a kink outside [−T, T] gives a zero-width panel)."""
    t = 13.0
    panels = int(min(4096, math.ceil(2 * t / width)))
    base = np.linspace(-t, t, panels + 1)
    edges = np.sort(np.concatenate([np.broadcast_to(base, (kinks.size, base.size)),
                                    np.clip(kinks, -t, t)[:, None]], axis=1), axis=1)
    g, wg = np.polynomial.legendre.leggauss(order)
    mid = 0.5 * (edges[:, 1:] + edges[:, :-1])
    half = 0.5 * (edges[:, 1:] - edges[:, :-1])
    x = (mid[:, :, None] + half[:, :, None] * g).reshape(kinks.size, -1)
    w = (half[:, :, None] * wg).reshape(kinks.size, -1) * _INV_SQRT_2PI * np.exp(-0.5 * x * x)
    return x, w


def privitp_law(phase2_scores, lambda_hat, params: PrivITPParams, nodes: int = 96,
                method: str = "auto") -> OutputLaw:
    """Exact law of PrivITP given the Phase-1 λ̂ (scalar or one per prompt) and the Phase-2 scores:
    the law given λ̃ averaged over λ̃ ~ N(λ̂, σ_X²). The average is taken over the whole sequential law
    (outside the product over rounds), never over the per-round acceptance probabilities.

    `method`:
    * "gauss_hermite": `nodes`-point Gauss–Hermite. Accurate when the law is smooth in λ̃ over the
      Gaussian's support.
    * "split": composite Gauss–Legendre (order 10, panels of width ≤ min(1, σ_Z/σ_X) on [−13σ_X, 13σ_X])
      with a panel edge at the kink λ̃* = r_max + σ_Z·L − c_min where the clamp c = max(·, c_min) starts
      to bind: there the law has a jump in its derivative and Gauss–Hermite converges slowly (errors up
      to ~1e−4 at 96 nodes when λ̃* is within a few σ_X of λ̂).
    * "auto" (default): "gauss_hermite" when every prompt's kink lies more than 13σ_X from λ̂, else "split".
    """
    nodes = v.count("nodes", nodes, minimum=2)
    if method not in ("auto", "gauss_hermite", "split"):
        raise InvalidParameter("method", method, "'auto', 'gauss_hermite' or 'split'")
    one_prompt = is_one_prompt(phase2_scores, "phase2_scores")
    s = _phase2_matrix(phase2_scores, params)
    lam = per_prompt_values("lambda_hat", lambda_hat, s.shape[0])
    kinks = (params.r_max + params.sigma_z * params.headroom - params.c_min - lam) / params.sigma_x
    if method == "auto":
        method = "gauss_hermite" if np.all(np.abs(kinks) > 13.0) else "split"
    if method == "gauss_hermite":
        x1, w1 = np.polynomial.hermite_e.hermegauss(nodes)      # weight e^{−x²/2}; Σ w = √(2π)
        x = np.broadcast_to(x1, (s.shape[0], nodes))
        w = np.broadcast_to(w1 / math.sqrt(2.0 * math.pi), (s.shape[0], nodes))
    else:
        x, w = _composite_legendre(kinks, min(1.0, params.sigma_z / params.sigma_x), 10)
    probs = np.zeros(s.shape)
    fb = np.zeros(s.shape[0])
    with np.errstate(divide="ignore"):
        for j in range(x.shape[1]):
            wj = w[:, j]
            if not np.any(wj > 0):
                continue
            p_k, f_k, _ = _given_lambda(s, lam + params.sigma_x * x[:, j], params)
            probs += wj[:, None] * p_k
            fb += wj * f_k
    return _squeeze(OutputLaw(probs, fb, None), one_prompt)
