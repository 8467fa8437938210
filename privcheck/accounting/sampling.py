"""Bounds on ε for DP-SGD with batches that are not Poisson samples (proofs in docs/accounting.md, "Sampling schemes").

- Fixed-size batches without replacement (replace-one). Upper: the subsampling theorem of f-DP for uniform m-of-n
  batches gives each round the symmetrised trade-off C_γ(G_{2/σ}), whose privacy loss above 0 is that of the pair
  R = ((1 − γ)N(0, s²) + γN(1, s²), N(0, s²)), s = σ/2 (sensitivity 2C under replace-one). Losses of the
  symmetrised pair are R's above 0 and mirrored below, so its Rényi divergence at order α is a sum of Gaussian
  integrals bounded in closed form in Arb; RDP composes, and the RDP-to-(ε, δ) conversion of Canonne, Kamath and
  Steinke turns it into ε. Its losses are also below L_R + log(1/(1 − γ)), which gives a second bound from R's
  certified PLD; the smaller is reported. Lower: a dataset realises R (and its
  reverse) exactly in every round, so the certified PLD's lower end for the add/remove pairs at (γ, s) is one.
- Shuffled batches and balls-in-bins (add/remove): no upper bound is claimed. Lower: with every other record
  contributing 0, an epoch shows N(e_J, σ²I_t) (J the record's step) against N(0, σ²I_t); the test "at least k of
  the E epochs have a maximum coordinate above x₀" is a post-processing whose two probabilities are binomial tails
  of closed forms, so log((P(A) − δ)/Q(A)) is a certified lower bound.
- Fixed-size batches with replacement (replace-one): the same test per round, with the record drawn K ~ Bin(b, 1/n)
  times; no upper bound is claimed.

Floats only choose the order α, the threshold x₀ and the count k; every reported bound is an Arb ball's safe end.
"""

from __future__ import annotations

import math

import numpy as np
from flint import arb, ctx
from scipy.special import log_ndtr
from scipy.stats import binom

from privcheck.numerics.certified import float_down, float_up

__all__ = ["ORDERS", "PREC", "count_test_lower_bound", "max_coordinate_centre", "max_coordinate_probabilities",
           "replacement_probabilities", "shifted_pld_upper", "symmetrised_rdp_epsilon", "threshold_grid"]

ORDERS = tuple(range(2, 65)) + (72, 80, 96, 112, 128, 160, 192, 256)
PREC = 128
_MAX_COPIES = 64          # copies of the record counted in one with-replacement batch (the rest only helps)


def _sf(z: arb) -> arb:
    """P[N(0, 1) > z] as a ball."""
    return (z / arb(2).sqrt()).erfc() / 2


def _cdf(z: arb) -> arb:
    return (-z / arb(2).sqrt()).erfc() / 2


# --- fixed-size batches without replacement: certified upper bound ------------------------------------------

def _log_moment(alpha: int, gamma: arb, s: arb) -> arb:
    """An upper bound on log E_S[e^{(α−1)L_S}] for the symmetrised pair S of R = ((1 − γ)N(0, s²) + γN(1, s²),
    N(0, s²)) (module docstring). With u = e^{(2x−1)/(2s²)} = N(1, s²)/N(0, s²) at x, L_R = log(1 + γ(u − 1)) and
    L_R > 0 iff x > 1/2; S's P-loss law is R's P-loss law above 0, R's Q-loss law mirrored below 0, and an atom
    at 0, so E_S[e^{(α−1)L}] = A + B + (1 − P_R[x > 1/2] − Q_R[x > 1/2]) with
      A = E_Q[(1 + γ(u − 1))^α; x > 1/2] = Σ_k C(α, k)(1 − γ)^{α−k}γ^k·I_k (exact),
      B = E_Q[(1 + γ(u − 1))^{−(α−1)}; x > 1/2] ≤ min(I_0, I_0 − mγ(I_1 − I_0) + m(m+1)/2·γ²(I_2 − 2I_1 + I_0)),
    m = α − 1 ((1 + y)^{−m} ≤ 1 − my + m(m+1)y²/2 for y ≥ 0, its third derivative being negative), where
    I_j = E_Q[u^j; x > 1/2] = e^{(j² − j)/(2s²)}·P[N(0, 1) > (1/2 − j)/s]."""
    half = arb(1) / 2
    s2 = s * s

    def moment(j: int) -> arb:
        return (arb(j * j - j) / (2 * s2)).exp() * _sf((half - j) / s)

    one_minus = 1 - gamma
    a_sum = arb(0)
    binom_k = arb(1)
    for k in range(alpha + 1):
        if k:
            binom_k = binom_k * (alpha - k + 1) / k
        a_sum += binom_k * one_minus ** (alpha - k) * gamma ** k * moment(k)
    i0, i1, i2 = moment(0), moment(1), moment(2)
    m = arb(alpha - 1)
    quadratic = i0 - m * gamma * (i1 - i0) + m * (m + 1) / 2 * gamma * gamma * (i2 - 2 * i1 + i0)
    b_bound = quadratic if quadratic < i0 else i0           # either is an upper bound on B
    p_positive = one_minus * _sf(half / s) + gamma * _cdf(half / s)   # P_R[x > 1/2]
    return (a_sum + b_bound + 1 - p_positive - i0).log()


def symmetrised_rdp_epsilon(gamma_num: int, gamma_den: int, sigma: float, steps: int, delta: float,
                            orders=ORDERS) -> tuple[float, int]:
    """A certified upper bound on ε(δ) of `steps` fixed-size (γ = gamma_num/gamma_den, without replacement)
    Gaussian rounds of noise multiplier σ under replace-one, and the order α that gave it (module docstring)."""
    best, best_order = math.inf, 0
    with ctx.workprec(PREC):
        gamma = arb(gamma_num) / gamma_den
        s = arb(sigma) / 2
        log_delta = arb(delta).log()
        for alpha in orders:
            rho = _log_moment(alpha, gamma, s) / (alpha - 1)
            a = arb(alpha)
            eps = steps * rho + ((a - 1) / a).log() - (log_delta + a.log()) / (a - 1)
            up = float_up(eps)
            if up < best:
                best, best_order = up, alpha
    return max(best, 0.0), best_order


def shifted_pld_upper(pld_upper: float, gamma_num: int, gamma_den: int, steps: int) -> float:
    """ε_R(δ) + T·log(1/(1 − γ)) rounded up: the pair R's losses are above log(1 − γ), so max(L_R, 0) ≤ L_R +
    log(1/(1 − γ)) and the symmetrised pair's composed δ at ε is at most R's at ε − T·log(1/(1 − γ)).
    `pld_upper` is a certified upper end of R's composed ε(δ)."""
    if gamma_num >= gamma_den or not math.isfinite(pld_upper):
        return math.inf
    with ctx.workprec(PREC):
        shift = -steps * (-(arb(gamma_num) / gamma_den)).log1p()
        return float_up(arb(pld_upper) + shift)


# --- lower bounds from a count test on per-round (or per-epoch) events ----------------------------------

def max_coordinate_probabilities(x0: float, sigma: float, t: int) -> tuple[arb, arb]:
    """(P, Q) of {max_j Y_j > x₀} for Y ~ N(e_J, σ²I_t) with J uniform (or any law of J) against N(0, σ²I_t)."""
    x, s = arb(x0), arb(sigma)
    below = _cdf(x / s)
    p_event = 1 - _cdf((x - 1) / s) * below ** (t - 1)
    q_event = 1 - below ** t
    return p_event, q_event


def replacement_probabilities(x0: float, sigma: float, batch_size: int, dataset_size: int) -> tuple[arb, arb]:
    """(P, Q) of {Y > x₀} for Y ~ Σ_k Bin(b, 1/n)(k)·N(2k, σ²) against N(0, σ²): a with-replacement batch where the
    record (+C against −C, every other record −C) is drawn k times. P keeps k ≤ _MAX_COPIES (a lower bound)."""
    x, s = arb(x0), arb(sigma)
    p_draw = arb(1) / dataset_size
    weight = (1 - p_draw) ** batch_size
    p_event = arb(0)
    for k in range(min(batch_size, _MAX_COPIES) + 1):
        if k:
            weight = weight * (batch_size - k + 1) / k * p_draw / (1 - p_draw)
        p_event += weight * _sf((x - 2 * k) / s)
    return p_event, _sf(x / s)


def _tail_ball(m: int, p: arb, k: int, side: str) -> arb:
    """P[Bin(m, p) ≥ k] enclosed from below (side "lower": a partial sum) or above ("upper": partial sum plus a
    geometric bound on the rest, the term ratios (m − j)p/((j + 1)(1 − p)) decreasing in j)."""
    if k <= 0:
        return arb(1)
    if k > m:
        return arb(0)
    one_minus = 1 - p
    log_term = (arb(m + 1).lgamma() - arb(k + 1).lgamma() - arb(m - k + 1).lgamma()
                + k * p.log() + (m - k) * one_minus.log())
    term = log_term.exp()
    total = arb(0)
    j = k
    while True:
        total += term
        if j == m:
            return total
        ratio = arb(m - j) * p / (arb(j + 1) * one_minus)
        term = term * ratio
        j += 1
        if side == "lower" and (j - k > 4000 or term < total * arb(2) ** -60):
            return total
        if side == "upper" and ratio < arb(1) / 2 and j - k > 8:
            return total + term / (1 - ratio)    # Σ_{i ≥ j} term_i ≤ term_j / (1 − ratio_j)
        if j - k > 200000:
            return arb(1) if side == "upper" else total


def count_test_lower_bound(probabilities, repeats: int, delta: float, grid) -> tuple[float, dict]:
    """A certified lower bound on ε(δ) of `repeats` independent runs of a pair whose event at threshold x₀ has
    probabilities `probabilities(x₀)` = (P, Q) (balls): max over x₀ in `grid` and k of log((P(A) − δ)/Q(A)) for
    A = {count ≥ k} (and, the neighbours swapped, A = {count < k}). Floats choose (x₀, k); the bound is the
    lower end of the Arb value. 0 when no test beats δ."""
    best = (-math.inf, None)
    ks = np.arange(repeats + 2)
    for x0 in grid:
        p, q = (float(b.mid()) for b in probabilities(x0))
        if not (0 < q < 1 and 0 < p < 1):
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            for swap in (False, True):
                a, b = (q, p) if swap else (p, q)
                # swap: A = {count < k}: P-probability of the neighbour's view
                pa = binom.cdf(ks - 1, repeats, a) if swap else binom.sf(ks - 1, repeats, a)
                qa = binom.cdf(ks - 1, repeats, b) if swap else binom.sf(ks - 1, repeats, b)
                score = np.log(np.maximum(pa - delta, 0)) - np.log(qa)
                score[~np.isfinite(score)] = -np.inf
                i = int(np.argmax(score))
                if score[i] > best[0]:
                    best = (float(score[i]), (x0, int(ks[i]), swap))
    if best[1] is None:
        return 0.0, {"test": None}
    x0, k, swap = best[1]
    with ctx.workprec(PREC):
        p, q = probabilities(x0)
        if swap:    # {count < k} under the swapped pair: tails of the complements
            pa = 1 - _tail_ball(repeats, q, k, "upper")
            qa = 1 - _tail_ball(repeats, p, k, "lower")
        else:
            pa = _tail_ball(repeats, p, k, "lower")
            qa = _tail_ball(repeats, q, k, "upper")
        gain = pa - delta
        if not gain > 0 or not qa > 0:
            return 0.0, {"test": None}
        bound = max(float_down((gain / qa).log()), 0.0)
    return bound, {"test": {"threshold": x0, "count_at_least" if not swap else "count_below": k,
                            "direction": "add" if swap else "remove", "repeats": repeats}}


def threshold_grid(centre: float, spread: float) -> np.ndarray:
    """Thresholds x₀ tried by the count test (public, data-free)."""
    return centre + spread * np.linspace(-2.0, 6.0, 33)


def max_coordinate_centre(sigma: float, t: int) -> float:
    """The float median of max_j N(0, σ²) over t coordinates (where the threshold grid starts)."""
    target = math.log(0.5) / t
    lo, hi = -10.0, 40.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if log_ndtr(mid) < target:
            lo = mid
        else:
            hi = mid
    return hi * sigma
