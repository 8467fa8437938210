"""Certified PLD accountant for composed Poisson-subsampled Gaussian rounds: ε(δ) enclosed in [lower, upper].

Method (proof in docs/accounting.md, "Certified PLD"):

1. Discretise each round's privacy-loss distribution on the lattice h·ℤ twice, with bucket masses computed as Arb
   balls (Gaussian CDF differences at the closed-form crossing points):
   - upper: connect-the-dots. Each loss bucket (e_b, e_{b+1}] keeps its P- and Q-mass, split between its two
     ends; its hockey-stick curve is the chord of the true (convex) one, so it dominates it for every α. Mass
     beyond the top goes to +∞, mass below the bottom to the bottom point. Every mass is rounded up.
   - lower: a post-processing of the mechanism (each output collects the x whose loss lies in one
     midpoint bucket, with small fractions of a neighbour borrowed where needed) so that every output's loss is
     at least the lattice point it is placed on; the pair is then dominated by the true one. Rounded down.
   Both discretisations are second order in the bucket width, so the gap shrinks like h², not h.
2. Compose all rounds at once: exponentially tilt the masses by e^{λ·loss} (so that the region around the
   answer carries most of the mass), one forward FFT per phase, the T-th power, one inverse FFT, all in the
   radix-2 FFT of `privcheck.numerics.fft` whose rounding error has a proven bound. The bound, the wrap-around
   of the cyclic convolution (bounded by Chernoff bounds computed in Arb) and every float rounding are added
   to the upper masses and subtracted from the lower ones. After many rounds only a narrow band of frequencies
   survives the T-th power: the band is proven (|X|^T ≤ 2^-1000 elsewhere) and summed directly
   (`privcheck.numerics.band_dft`) instead of the length-N forward FFT, and only the band is powered.
3. δ(ε) = Σ_{ℓ>ε}(1 − e^{ε−ℓ})·p(ℓ) + p(∞) is piecewise of the form A − e^ε·B between lattice points, so
   ε(δ) is solved in closed form in Arb on the segment where the crossing lies (no float bisection): the upper
   end of the upper discretisation's ε is reported, the lower end of the lower one's ε is the lower bound.

Floats are used only to choose the grid, the tilt and the window; no float enters the enclosure without a
rigorous bound on its error.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
from flint import arb, ctx
from scipy.optimize import minimize_scalar

from privcheck import validation as v
from privcheck.accounting.pld_pairs import Pair, pairs_for
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics import band_dft
from privcheck.numerics import fft as bfft
from privcheck.numerics.certified import float_down, float_up
from privcheck.numerics.powers import geometric_powers

__all__ = ["DEFAULT_ABS_TOLERANCE", "DEFAULT_REL_TOLERANCE", "DEFAULT_TOLERANCE", "DELTA_MIN", "MAX_LOG2_FFT",
           "MAX_PHASES", "MAX_STEPS", "NOISE_RANGE", "PLDBounds", "certified_epsilon", "certified_epsilons",
           "check_delta", "check_noise", "check_phases", "gap_target"]

# The gap the refinement aims at (`gap_target`): min(tolerance, max(rel·ε, abs)), ε the enclosure's lower end. The
# relative part keeps small ε as well resolved as large ones (1% of ε, 1e-4 absolute below ε = 0.01); the absolute
# 1e-3 keeps every ε ≥ 0.1 resolved as before (1e-3 is tighter than 1% there).
DEFAULT_TOLERANCE = 1e-3
DEFAULT_REL_TOLERANCE = 1e-2
DEFAULT_ABS_TOLERANCE = 1e-4
DEFAULT_START_INTERVAL = 1e-4
_COARSEST_START_DOUBLINGS = 2      # the automatic lattice starts at 1e-4·2^k, k ≤ 2, or finer for a narrow spread
_FINEST_START_INTERVAL = DEFAULT_START_INTERVAL / 16   # finer only on demand (the refinement halves it)
# The loss distribution is cut above where its mass is fraction·δ/T (the cut mass goes to +∞, so at most fraction·δ
# is added to δ: sound at any fraction). A far cut wastes the float FFT's range on tilted mass above the answer
# where δ is small and q is small (rare single-round losses set ε); the refinement raises it when the
# composition's error bounds, not the discretisation, dominate the gap.
_TOP_FRACTIONS = (1e-12, 1e-6, 1e-3, 1e-2)
MAX_LOG2_FFT = 22
_AUTO_LOG2_FFT = 20
_REFINE_SECONDS = 30.0
PREC = 128
_U = 2.0 ** -53
_WINDOW_STDS = 12.0
_MAX_WIDTH_LOG2 = 12
_GAP_CONSTANT = 0.2
_COARSE_ESTIMATE_LOG2 = 6     # the float estimate of ε behind the tilt: lattice at most 64·h

# What the certified PLD can use (docs/accounting.md, "Legal ranges"): at most MAX_STEPS rounds per phase and in
# total, and at most MAX_PHASES phases. Measured on a 2-core CPU: 10⁶ rounds take ≈ 2 s at the lattice 1e-4
# (q = 0.01, σ = 1; docs/accounting.md "Speed at scale"); at 10⁷ the float
# T-th powers of the spectra overflow (ε = inf) or the enclosure widens 100-fold. Each phase costs one
# discretisation and one FFT (≈ 0.7 s): 100 phases take 1–1.5 min.
MAX_STEPS = 10 ** 6
MAX_PHASES = 100
# The smallest δ: at 1e-80 the tilted composed sums overflow floats (ε = inf) for q = 0.01, σ = 1, T = 100; down to
# 1e-60 every configuration tried was certified in seconds. 1e-50 leaves a margin (and no one asks for less).
DELTA_MIN = 1e-50
# The noise multipliers: below 0.1 one round's loss spans thousands and the certified PLD fails or widens (q = 1,
# σ = 0.01: no enclosure; q = 1e-6, σ = 0.01, T = 10: [0, 6711] where ε ≈ 0), above 10⁸ ε is 0 to the lattice.
NOISE_RANGE = (0.1, 1e8)


@dataclass(frozen=True)
class PLDBounds:
    """ε enclosed: lower ≤ ε_exact(δ) ≤ upper, at lattice interval `interval`."""

    lower: float
    upper: float
    interval: float
    details: Mapping = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return self.upper - self.lower


def logsumexp(x) -> float:
    """log Σ e^x for a float array (−inf for an empty or all −inf one)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return -math.inf
    m = float(np.max(x))
    if not math.isfinite(m):
        return m
    return m + math.log(float(np.sum(np.exp(x - m))))


# --- step 1: discretisation ---------------------------------------------------------------------------------

@dataclass
class _Round:
    """One phase's round, one direction: sparse lattice masses (indices, tilted float masses) and p(∞)."""

    steps: int
    index: np.ndarray        # lattice indices k (loss k·h) of the breakpoints
    upper: np.ndarray        # float, ≥ (upper P-mass)·e^{λkh}/Z
    lower: np.ndarray        # float, ≤ (lower P-mass)·e^{λkh}/Z
    log_z: float             # Z = e^{log_z} (float, exact as used)
    p_inf: arb               # upper bound on the P-mass at +∞
    log_p_cells: np.ndarray = None  # float cell masses on the dense lattice (choosing tilts only)
    cells_k0: int = 0


def _lattice_range(pair: Pair, h: float, eta_top: float, eta_bot: float) -> tuple[int, int]:
    lo, hi = pair.loss_range()

    def solve(side: str, target: float, start: float, direction: float) -> float:
        # bisection on a monotone float tail: returns a loss where the tail mass is ≤ target
        a = start
        step = 1.0
        b = a + direction * step
        f = lambda e: float(pair.log_loss_tail_float(np.array([e]), side)[0])  # noqa: E731
        while f(b) > math.log(target):
            step *= 2
            b = a + direction * step
            if step > 1e7:
                raise CertificationError("cannot find the truncation point of the loss distribution")
        for _ in range(80):
            m = (a + b) / 2
            if f(m) > math.log(target):
                a = m
            else:
                b = m
        return b

    centre = 0.0 if not math.isfinite(lo) else lo + 1e-9
    if math.isfinite(hi):
        k_top = math.ceil(hi / h) + 1
    else:
        k_top = math.ceil(solve("above", eta_top, max(centre, 0.0), 1.0) / h) + 1
    if math.isfinite(lo):
        k_bot = math.floor(lo / h) - 1
    else:
        start = 0.0 if not math.isfinite(hi) else min(0.0, hi - 1e-9)
        k_bot = math.floor(solve("below", eta_bot, start, -1.0) / h) - 1
    return k_bot, k_top


def _cell_log_masses(pair: Pair, k_bot: int, k_top: int, h: float) -> np.ndarray:
    """log P(ℓ ∈ (s_{k−1}, s_k]) for k in [k_bot, k_top] (floats; the bottom cell takes everything below)."""
    s = np.arange(k_bot - 1, k_top + 1) * h
    above = pair.log_loss_tail_float(s, "above")
    below = pair.log_loss_tail_float(s, "below")
    with np.errstate(all="ignore"):
        from_above = above[:-1] + np.log1p(-np.exp(above[1:] - above[:-1]))
        from_below = below[1:] + np.log1p(-np.exp(below[:-1] - below[1:]))
    out = np.where(above[:-1] < math.log(0.5), from_above, from_below)
    out[0] = below[1]
    return np.where(np.isnan(out), -np.inf, out)


def _error_weight(lc: np.ndarray, s: np.ndarray, lam: float, h: float) -> np.ndarray:
    """log of (tilted cell mass)·(1 + λ + local log-density slope, capped at one per cell): what a unit of
    bucket width² costs in ε at this cell."""
    lt = lc + lam * s
    lt = lt - logsumexp(lt)
    finite = np.isfinite(lc)
    filled = np.where(finite, lc, np.nan)
    with np.errstate(invalid="ignore"):
        slope = np.abs(np.gradient(filled)) / h
    slope = np.where(np.isfinite(slope), np.minimum(slope, 1.0 / h), 0.0)
    return np.where(finite, lt + np.log1p(slope + lam), -np.inf)


def _widths(weight: np.ndarray, beta: float, h: float) -> np.ndarray:
    """Bucket width in cells (a power of two) for each cell: the widest w with weight·(w·h)²·w ≤ β, i.e. each
    bucket (mass ≈ w cells) contributes about the same error."""
    with np.errstate(over="ignore", divide="ignore"):
        w = np.cbrt(beta / np.exp(weight)) / h ** (2 / 3)
    w = np.nan_to_num(w, nan=1.0, posinf=float(1 << 20))
    log_w = np.floor(np.log2(np.clip(w, 1.0, float(1 << 20))))
    return (2 ** log_w).astype(np.int64)


def _breakpoints(widths: np.ndarray, k_bot: int, k_top: int) -> np.ndarray:
    """Lattice indices from k_bot stepping by the width of the cell reached, to k_top. Every step is a power of
    two; the last one, cut at k_top, is stretched to the narrowest width g used (by less than g cells; any
    breakpoints are sound), so that all of them lie on k_bot + gℤ and the composition can run on that
    sublattice."""
    out = [k_bot]
    k = k_bot
    narrowest = 1 << 62
    while k < k_top:
        i = k - k_bot
        w = int(widths[i])
        while w > 1 and int(widths[i:i + w].min()) < w:   # a bucket never reaches into finer cells
            w //= 2
        if k + w <= k_top:
            narrowest = min(narrowest, w)
        k = min(k + w, k_top)
        out.append(k)
    if len(out) > 2 and narrowest < (1 << 62):
        out[-1] = max(out[-2] + narrowest, k_bot + -(-(k_top - k_bot) // narrowest) * narrowest)
    return np.array(out, dtype=np.int64)


def _predicted_gap(cells, lam: float, h: float, beta: float) -> float:
    """Heuristic ε-gap of both discretisations, Σ_rounds Σ_cells weight·(width·h)² (floats; it only chooses β;
    the driver refines whenever the certified gap exceeds the tolerance)."""
    total = 0.0
    for T, lc, s in cells:
        wt = _error_weight(lc, s, lam, h)
        w = _widths(wt, beta, h) * h
        total += T * float(np.sum(np.exp(wt) * np.minimum(w, 1e3) ** 2))
    return _GAP_CONSTANT * total


def _phi_pair(z: arb, r2: arb) -> tuple[int, arb]:
    """(sign, small tail): Φ̄(z) for z ≥ 0, Φ(z) for z < 0 — the side that is accurate as a small number
    (r2 = √2 at the working precision)."""
    if z >= 0:
        return 1, (z / r2).erfc() / 2
    return -1, (-z / r2).erfc() / 2


def _interval_mass(a, b) -> arb:
    """Gaussian mass of [z_a, z_b] from `_phi_pair` values (None for ∓∞)."""
    if a is None and b is None:
        return arb(1)
    if a is None:          # (−∞, z_b]
        sb, tb = b
        return tb if sb < 0 else 1 - tb
    if b is None:          # [z_a, ∞)
        sa, ta = a
        return ta if sa > 0 else 1 - ta
    (sa, ta), (sb, tb) = a, b
    if sa > 0 and sb > 0:
        return ta - tb
    if sa < 0 and sb < 0:
        return tb - ta
    return 1 - ta - tb     # a < 0 ≤ b


def _masses_arb(pair: Pair, losses: list[arb]):
    """For increasing loss points t_0 < ... < t_M: P- and Q-masses of (t_i, t_{i+1}], of {ℓ ≤ t_0}, {ℓ > t_M}."""
    s = arb(pair.sigma)
    r2 = arb(2).sqrt()
    means = pair.means
    inc = pair.increasing
    # the mixture components that carry weight (zero weights are skipped, as exact zeros)
    p_terms = [(mi, wt) for mi, wt in enumerate(pair.arb_weights("p")) if not wt == 0]
    q_terms = [(mi, wt) for mi, wt in enumerate(pair.arb_weights("q")) if not wt == 0]
    vals = []   # per point: list over means of _phi_pair, or "bottom"/"top" outside the loss range
    for t in losses:
        side = _range_side(pair, t)
        if side is not None:
            vals.append(side)
        else:
            x = pair.crossing_arb(t)
            if not x.is_finite():
                raise CertificationError(f"crossing point of loss {t} is not finite")
            vals.append([_phi_pair((x - m) / s, r2) for m in means])

    needed = sorted({mi for mi, _ in p_terms} | {mi for mi, _ in q_terms})

    def masses(i, j):   # (P, Q) of the loss interval (t_i, t_j], i = None for −∞ and j = None for +∞
        a = None if i is None else vals[i]
        b = None if j is None else vals[j]
        if isinstance(a, list) and isinstance(b, list):     # both inside the loss range: `_interval_mass` inline
            gauss = {}
            for mi in needed:
                (sa, ta), (sb, tb) = (a[mi], b[mi]) if inc else (b[mi], a[mi])
                gauss[mi] = ta - tb if sa > 0 and sb > 0 else tb - ta if sa < 0 and sb < 0 else 1 - ta - tb
            P, Q = arb(0), arb(0)
            for mi, wt in p_terms:
                P += wt * gauss[mi]
            for mi, wt in q_terms:
                Q += wt * gauss[mi]
            return P, Q
        gauss = {}      # a component's Gaussian mass of the interval, shared by P and Q (None: empty)

        def component(mi):
            if mi not in gauss:
                a_gauss = _x_end(a, mi, inc, lower_loss=True)
                b_gauss = _x_end(b, mi, inc, lower_loss=False)
                if a_gauss == "empty" or b_gauss == "empty":
                    gauss[mi] = None
                else:
                    gauss[mi] = _interval_mass(a_gauss, b_gauss) if inc else _interval_mass(b_gauss, a_gauss)
            return gauss[mi]

        out = []
        for terms in (p_terms, q_terms):
            total = arb(0)
            for mi, wt in terms:
                m = component(mi)
                if m is not None:
                    total += wt * m
            out.append(total)
        return out[0], out[1]

    M = len(losses) - 1
    between = [masses(i, i + 1) for i in range(M)]
    return between, masses(None, 0), masses(M, None)


def _range_side(pair: Pair, t: arb):
    """"bottom" if the loss t is at or below the infimum of the pair's loss range, "top" if at or above its
    supremum, None inside — decided in Arb (e^t > 1 − q for `remove`, e^{−t} > 1 − q for `add`)."""
    if pair.q == 1.0 or pair.kind == "replace":
        return None
    inside = (t if pair.kind == "remove" else -t).expm1() + arb(pair.q)
    if inside > 0:
        return None
    if inside <= 0:
        return "bottom" if pair.kind == "remove" else "top"
    raise CertificationError(f"cannot decide whether the loss {t} lies inside the loss range")


def _x_end(v, mean_index: int, increasing: bool, lower_loss: bool):
    """Translate a loss endpoint into a Gaussian endpoint for `_interval_mass` (None = ∓∞, "empty")."""
    if v is None:
        return None
    if v == "bottom":      # loss at/below the infimum: x = −∞ (increasing) or +∞ (decreasing)
        return None if lower_loss else "empty"
    if v == "top":
        return "empty" if lower_loss else None
    return v[mean_index]


def _discretise(pair: Pair, steps: int, h: float, lam: float, k_bot: int, k_top: int,
                log_cells: np.ndarray, beta: float) -> _Round:
    """Arb pass: connect-the-dots upper masses and borrowed-midpoint lower masses at chosen breakpoints."""
    grid = np.arange(k_bot, k_top + 1) * h
    log_z = float(logsumexp(log_cells + lam * grid))
    ks = _breakpoints(_widths(_error_weight(log_cells, grid, lam, h), beta, h), k_bot, k_top)
    K = len(ks) - 1
    with ctx.workprec(PREC):
        ha = arb(h)
        e = [arb(int(k)) * ha for k in ks]
        mids = [(e[i] + e[i + 1]) / 2 for i in range(K)]
        pts = []
        for i in range(K):
            pts.extend((e[i], mids[i]))
        pts.append(e[K])
        between, below, above = _masses_arb(pair, pts)
        alpha = [x.exp() for x in e]
        # connect-the-dots (upper)
        up = [arb(0)] * (K + 1)
        up[0] = below[0]
        for b in range(K):
            P = between[2 * b][0] + between[2 * b + 1][0]
            Q = between[2 * b][1] + between[2 * b + 1][1]
            c = (alpha[b + 1] * Q - P) / (alpha[b + 1] - alpha[b])
            to_low = alpha[b] * c
            up[b] = up[b] + _clip_upper(to_low, P)
            up[b + 1] = up[b + 1] + _clip_upper(P - to_low, P)
        top_atom = alpha[K] * above[1]
        up[K] = up[K] + _clip_upper(top_atom, above[0])
        p_inf = _nonneg_upper(above[0] - top_atom)
        # borrowed midpoint buckets (lower)
        raw = []
        for k in range(K + 1):
            if k == 0:
                P, Q = below[0] + between[0][0], below[1] + between[0][1]
            elif k == K:
                P, Q = between[2 * K - 1][0] + above[0], between[2 * K - 1][1] + above[1]
            else:
                P = between[2 * k - 1][0] + between[2 * k][0]
                Q = between[2 * k - 1][1] + between[2 * k][1]
            raw.append((P, Q))
        low = _borrow(raw, alpha)
        # tilt by e^{λ e_k}/Z and round outward
        lam_a = arb(lam)
        inv_z = arb(-log_z).exp()
        upper = np.empty(K + 1)
        lower = np.empty(K + 1)
        for k in range(K + 1):
            t = (lam_a * e[k]).exp() * inv_z
            upper[k] = float_up(up[k] * t)
            lower[k] = max(0.0, float_down(low[k] * t)) if low[k] > 0 else 0.0
    if not (np.all(np.isfinite(upper)) and np.all(np.isfinite(lower)) and p_inf.is_finite()):
        raise CertificationError("a discretised mass is not finite")
    # Z as used: the masses are bounded through e^{log_z} computed in Arb from the same float log_z
    return _Round(steps=steps, index=ks, upper=upper, lower=lower, log_z=log_z, p_inf=p_inf)


def _clip_upper(x: arb, cap: arb) -> arb:
    """An upper bound of x known to lie in [0, cap]: min(x.upper, cap.upper), never negative."""
    hi = x.upper().min(cap.upper())
    return hi.max(arb(0))


def _nonneg_upper(x: arb) -> arb:
    return x.upper().max(arb(0))


def _borrow(raw: list[tuple[arb, arb]], alpha: list[arb]) -> list[arb]:
    """Lower P-masses at e_k from midpoint-bucket atoms (P̃_k, Q̃_k).

    An atom may sit at e_k only if its loss log(P̃/Q̃) ≥ e_k (then P-mass P̃ at e_k has Q-mass P̃/α_k ≥ Q̃ and
    the discrete pair stays dominated). An atom just below e_k borrows the fraction β of the next atom that
    lifts the mixture to exactly e_k (a post-processing); β is O(h), so the loss is second order. When that is
    impossible the atom moves down one point (its loss is above the previous midpoint) or is dropped.
    """
    K = len(raw) - 1
    out = [arb(0)] * (K + 1)
    frac = [1.0] * (K + 1)
    for k in range(K + 1):
        P, Q = raw[k]
        f = frac[k]
        P, Q = f * P, f * Q
        if f <= 0:
            continue
        if P.lower() >= (alpha[k] * Q).upper():
            out[k] = out[k] + P.lower()
            continue
        if k < K:
            P2, Q2 = raw[k + 1]
            denom = P2 - alpha[k] * Q2
            if denom > 0:
                beta = (alpha[k] * Q - P) / denom
                b = float_up(beta)
                if math.isfinite(b):
                    b = max(0.0, b) * (1 + 2.0 ** -30) + 2.0 ** -80
                if math.isfinite(b) and b <= frac[k + 1]:
                    Pm, Qm = P + b * P2, Q + b * Q2
                    if Pm.lower() >= (alpha[k] * Qm).upper():
                        out[k] = out[k] + Pm.lower()
                        frac[k + 1] = math.nextafter(frac[k + 1] - b, 0.0)   # never more than what is left
                        continue
        if k > 0 and P.lower() >= (alpha[k - 1] * Q).upper():
            out[k - 1] = out[k - 1] + P.lower()
    return [x.max(arb(0)) for x in out]


# --- step 2: composition by a bounded FFT ---------------------------------------------------------------------

def _log_mgf(r: _Round, theta: float) -> float:
    x = np.log(np.maximum(r.upper, 1e-320)) + theta * r.index
    return float(logsumexp(x))


def _chernoff_arb(rounds: list[_Round], which: str, theta: float, t: int) -> arb:
    """Rigorous bound on the composed (tilted, float) mass with index > t (θ > 0) or < t (θ < 0):
    e^{−θt}·Π_p (Σ_k x_{p,k} e^{θk})^{T_p}, in Arb from the exact floats."""
    th = arb(theta)
    total = -th * t
    for r in rounds:
        v = r.upper if which == "upper" else r.lower
        s = arb(0)
        for k, x in zip(r.index, v):
            if x > 0:
                s += arb(x) * (th * int(k)).exp()
        total += r.steps * s.log()
    return total.exp()


def _best_theta(rounds, which, t, sign) -> float:
    def f(log_theta):
        theta = sign * math.exp(log_theta)
        val = -theta * t
        for r in rounds:
            v = r.upper if which == "upper" else r.lower
            x = np.log(np.maximum(v, 1e-320)) + theta * r.index
            val += r.steps * float(logsumexp(x))
        return val
    res = minimize_scalar(f, bounds=(-25.0, 5.0), method="bounded", options={"xatol": 1e-3})
    return sign * math.exp(res.x)


def _norm2_arb(v: np.ndarray) -> arb:
    """Upper bound on ‖v‖₂² for a float array: any summation order errs by at most (n−1)·u·Σ|x|, each square
    by u relative, and a square that underflows loses less than 2^-1021."""
    n = max(int(v.size), 1)
    total = float(np.dot(v.ravel(), v.ravel()))
    return arb(total) * (1 + arb(_U)) / (1 - arb(n) * arb(_U)) + arb(n) * arb(2) ** -1021


def _sum_arb(v: np.ndarray) -> arb:
    """Upper bound on Σ v for a nonnegative float array (same argument as `_norm2_arb`)."""
    n = max(int(v.size), 1)
    return arb(float(np.sum(v))) / (1 - arb(n) * arb(_U))


def _complex_pow(re: np.ndarray, im: np.ndarray, T: int):
    """z^T by binary powering on (re, im) float arrays (each product: 4 multiplications, 2 additions)."""
    rr, ri = np.ones_like(re), np.zeros_like(re)
    br, bi = re.copy(), im.copy()
    first = True
    while T:
        if T & 1:
            if first:
                rr, ri = br.copy(), bi.copy()
                first = False
            else:
                rr, ri = rr * br - ri * bi, rr * bi + ri * br
        T >>= 1
        if T:
            br, bi = br * br - bi * bi, 2.0 * (br * bi)
    return rr, ri


def _band(Xr: np.ndarray, Xi: np.ndarray, T: int) -> np.ndarray | None:
    """Indices k whose unpacked spectra may exceed 2^-1000 after the T-th power (`band_dft.power_cut`; the band of
    frequencies that survives T rounds, a few hundred entries after T ≥ 10³ rounds), or None for all."""
    cut = band_dft.power_cut(T)
    if not cut > 0:
        return None
    big = Xr * Xr + Xi * Xi > cut
    big |= np.roll(big[::-1], 1)          # k kept whenever X_k or X_{−k} is large
    keep = np.flatnonzero(big)
    return None if len(keep) > len(Xr) // 2 else keep


def _sublattice(rounds: list[_Round], N: int) -> int:
    """The largest power of two g dividing every breakpoint spacing of every round (at most N/1024): the composed
    masses then live on one coset of gℤ, and the FFTs run on N/g points."""
    g = N >> 10
    for r in rounds:
        if len(r.index) > 1:
            d = np.bitwise_or.reduce(np.diff(r.index))
            g = min(g, int(d) & -int(d))
    return max(g, 1)


def _compose(rounds: list[_Round], N: int, j0: int, g: int):
    """Tilted composed masses on window indices [j0, j0 + N): (upper floats, lower floats, entry error bound).

    The cyclic convolution runs on the sublattice of spacing g (`_sublattice`, which must divide every
    breakpoint spacing and N/1024): array position i holds the
    composed index shift + g·i (mod N). Entries off that coset are exactly zero; the bound E is still added to
    them by the extraction, which is only conservative."""
    cr, ci, E, shift = _compose_cyclic(rounds, N // g, g)
    full_r, full_i = np.zeros(N), np.zeros(N)
    at = (shift - j0 + g * np.arange(N // g)) % N     # entry t of the window holds index j0 + t
    full_r[at], full_i[at] = cr, ci
    return full_r, full_i, E


def _full_spectrum(r: _Round, pos: np.ndarray, span: int, N: int, n: int, T: int):
    """One round's upper and lower spectra by one packed length-N FFT: (m_U, m_L, e₁, the frequencies kept,
    (A re, A im, B re, B im) on them). Off the band (`_band`) the entries are left out: their T-th powers are within
    2^-1000 of zero (`band_dft.power_cut`)."""
    u = arb(_U)
    xr = np.zeros(N)
    xi = np.zeros(N)
    if span <= N:                   # distinct positions (increasing indices on the coset): copied
        xr[pos], xi[pos] = r.upper, r.lower
        placed_r, placed_i = r.upper, r.lower      # the nonzero entries, for the norms and sums
    else:
        np.add.at(xr, pos, r.upper)
        np.add.at(xi, pos, r.lower)
        counts = np.bincount(pos, minlength=N)
        hit = counts > 1             # positions holding several masses (a round wider than N): sums rounded
        if np.any(hit):
            grow = 2.0 * counts[hit] * _U
            xr[hit] = np.nextafter(xr[hit] * (1 + grow), np.inf)
            xi[hit] = np.maximum(np.nextafter(xi[hit] * (1 - grow), 0.0), 0.0)
        placed_r, placed_i = xr, xi
    with ctx.workprec(PREC):
        norm = (_norm2_arb(placed_r) + _norm2_arb(placed_i)).sqrt()
        m_U, m_L = _sum_arb(placed_r), _sum_arb(placed_i)
        F = bfft.fft_error_bound(n, norm)
        e1 = F * (1 + u) + u * (arb(N).sqrt() * norm + F) * (1 + u)
    Xr, Xi = bfft.fft(xr, xi)
    keep = _band(Xr, Xi, T)
    # unpack: A_k = (X_k + conj X_{−k})/2, B_k = (X_k − conj X_{−k})/(2i), on the band only
    at = np.arange(N) if keep is None else keep
    mirror = (-at) % N
    Xr_k, Xi_k, Rr, Ri = Xr[at], Xi[at], Xr[mirror], Xi[mirror]
    return m_U, m_L, e1, at, ((Xr_k + Rr) / 2, (Xi_k - Ri) / 2, (Xi_k + Ri) / 2, (Rr - Xr_k) / 2)


def _band_direct(r: _Round, pos: np.ndarray, span: int, n: int, T: int, mass: arb):
    """One round's spectra on the band of frequencies that survives T rounds only, without the length-N FFT
    (`privcheck.numerics.band_dft`: a coarse transform proves |b_k| ≤ 2^{−1000/T} off the band, so |b_k|^T ≤ 2^-1000
    for the exact spectrum; the band is summed directly): (frequencies, (A re, A im, B re, B im), e₁ = the 2-norm
    of the band's errors), or None where the full transform is cheaper."""
    dense = np.zeros((2, span))
    dense[0, pos], dense[1, pos] = r.upper, r.lower
    keep = band_dft.band(dense, n, T)
    if keep is None:
        return None
    re, im = band_dft.dft_at(dense, n, keep)
    with ctx.workprec(PREC):
        e1 = arb(len(keep)).sqrt() * band_dft.dft_at_error(span, mass)
    return keep, (re[0], im[0], re[1], im[1]), e1


def _compose_cyclic(rounds: list[_Round], N: int, g: int):
    """Cyclic composition on N points of the sublattice gℤ: (upper, lower, entry error bound, shift) with
    position i holding the composed lattice index shift + g·i (mod g·N)."""
    n = N.bit_length() - 1
    u = arb(_U)
    sqrtN = arb(N).sqrt()
    spec_U = spec_L = None
    err_U = err_L = arb(0)
    shift = 0
    for r in rounds:
        ref = int(r.index[0])
        shift += r.steps * ref
        pos = ((r.index - ref) // g) % N
        span = (int(r.index[-1]) - ref) // g + 1
        T = r.steps
        keep = None
        if span <= N // 8 and T >= 2:     # short support, many rounds: the band alone (`_band_direct`)
            with ctx.workprec(PREC):
                m_U, m_L = _sum_arb(r.upper), _sum_arb(r.lower)
            direct = _band_direct(r, pos, span, n, T, m_U.max(m_L))
            if direct is not None:
                keep, (Ar, Ai, Br, Bi), e1 = direct
        if keep is None:
            m_U, m_L, e1, keep, (Ar, Ai, Br, Bi) = _full_spectrum(r, pos, span, N, n, T)
        at = keep
        PUr, PUi, PLr, PLi = np.zeros(N), np.zeros(N), np.zeros(N), np.zeros(N)
        PUr[at], PUi[at] = _complex_pow(Ar, Ai, T)
        PLr[at], PLi[at] = _complex_pow(Br, Bi, T)
        with ctx.workprec(PREC):
            rho = (1 + arb(5).sqrt() * u) ** (2 * T) - 1
            tau = 2 * arb(2) ** -1000 * sqrtN     # underflow in the powering, and the entries off the band
            grow = T * (m_U.max(m_L) + e1) ** (T - 1) * e1        # |a^T − b^T| ≤ T|a − b|·max(|a|, |b|)^{T−1}
            eU = grow + rho / (1 - rho) * (_norm2_arb(PUr) + _norm2_arb(PUi)).sqrt() + tau
            eL = grow + rho / (1 - rho) * (_norm2_arb(PLr) + _norm2_arb(PLi)).sqrt() + tau
        if spec_U is None:
            spec_U, spec_L, err_U, err_L = (PUr, PUi), (PLr, PLi), eU, eL
            mU_prev, mL_prev = m_U ** T, m_L ** T
        else:
            with ctx.workprec(PREC):
                err_U = err_U * (m_U ** T + eU) + eU * mU_prev
                err_L = err_L * (m_L ** T + eL) + eL * mL_prev
                mU_prev, mL_prev = mU_prev * m_U ** T, mL_prev * m_L ** T
            spec_U = (spec_U[0] * PUr - spec_U[1] * PUi, spec_U[0] * PUi + spec_U[1] * PUr)
            spec_L = (spec_L[0] * PLr - spec_L[1] * PLi, spec_L[0] * PLi + spec_L[1] * PLr)
            with ctx.workprec(PREC):
                rho1 = arb(5).sqrt() * u * 1.0000001
                err_U += rho1 * (_norm2_arb(spec_U[0]) + _norm2_arb(spec_U[1])).sqrt()
                err_L += rho1 * (_norm2_arb(spec_L[0]) + _norm2_arb(spec_L[1])).sqrt()
    # pack C_U + i·C_L and invert
    Yr = spec_U[0] - spec_L[1]
    Yi = spec_U[1] + spec_L[0]
    cr, ci = bfft.ifft(Yr, Yi)
    with ctx.workprec(PREC):
        ny = (_norm2_arb(Yr) + _norm2_arb(Yi)).sqrt()
        gamma_n = bfft.fft_error_bound(n, arb(1)) / sqrtN      # ((1+γ)^n − 1) plus the underflow term
        e_spec = err_U + err_L + u * ny
        E = (gamma_n * ny + e_spec) / sqrtN + arb(2) ** -1000
    return cr, ci, E, shift


# --- step 3: ε from the composed masses ---------------------------------------------------------------------

def _epsilon_bracket(cU, cL, E: arb, alias_L: arb, tail_U: arb, p_inf: arb, log_zT: arb, lam: float,
                     j0: int, h: float, delta: float, memo: dict | None = None) -> tuple[float, float, dict]:
    """ε enclosure at δ from the composed masses; `memo` shares the δ-independent arrays between calls on the
    same composition (several δ)."""
    memo = {} if memo is None else memo
    N = len(cU)
    if "arrays" not in memo:
        s = (j0 + np.arange(N)) * h
        with ctx.workprec(PREC):
            E_f = float_up(E)
            a_f = float_up(alias_L + E)
        up = cU + E_f
        lo = np.maximum(cL - a_f, 0.0)
        # float guess of the crossing from the upper masses (only to pick the segment)
        with np.errstate(all="ignore"):
            logw = np.log(np.maximum(up, 1e-320)) - lam * s + float(log_zT.mid())
        memo["arrays"] = (s, up, lo, E_f, _block_delta_points(logw, s, _GUESS_BLOCK))
    s, up, lo, E_f, d_float = memo["arrays"]
    below = d_float <= delta
    hit = int(np.argmax(below))             # the first block start at or below δ, if any
    j_guess = min(max(hit * _GUESS_BLOCK if below[hit] else N - 1, 1), N - 1)
    if "extra" not in memo:        # δ-independent: the mass above the window and at infinity
        memo["extra"] = tail_U * log_zT.exp() * (-arb(lam) * (arb(j0 + N) * arb(h))).exp() + p_inf
    extra = memo["extra"]
    upper = _solve_moving(up, s, j_guess, lam, log_zT, delta, h, extra, "upper", memo)
    lower = _solve_moving(lo, s, j_guess, lam, log_zT, delta, h, arb(0), "lower", memo)
    return lower, upper, {"window": [float(s[0]), float(s[-1])], "entry_error": E_f}


def _solve_moving(c, s, j, lam, log_zT, delta, h, extra: arb, side: str, memo: dict) -> float:
    """`_solve_segments` from the float guess j, moving its reference down while the crossing lies below the
    part of the window its sums cover."""
    for _ in range(64):
        try:
            return _solve_segments(c, s, float(s[j]), j, lam, log_zT, delta, h, extra, side, memo)
        except _Outside as out:
            if str(out) == "above" or j <= 1:
                raise _WindowMissed("the crossing lies outside the composed window") from None
            j = max(1, j - max(1, int(500.0 / max(lam * h, 1e-300))))
    raise _WindowMissed("the crossing lies outside the composed window")


def _suffix_sums(c, s, i0: int, lam: float, h: float, memo: dict | None = None):
    """Suffix sums of c_i·r̃^{i−i0} and c_i·r̃'^{i−i0} (r = e^{−λh}, r' = e^{−(λ+1)h}) from entry i0, and the
    Arb factors that bound their float rounding (independent of δ and of the reference point). Each sum array
    carries one more entry, 0, at its end (the shifted sums of `_solve_segments` are views of it); the powers
    r̃^i are shared through `memo` by the upper and lower sides (the same floats)."""
    with ctx.workprec(PREC):
        r = (-arb(lam) * arb(h)).exp()
        rp = (-(arb(lam) + 1) * arb(h)).exp()
    n = len(s) - i0
    memo = {} if memo is None else memo
    if ("powers", i0) not in memo:
        memo[("powers", i0)] = geometric_powers(float(r.mid()), n), geometric_powers(float(rp.mid()), n)
    pw, pw_p = memo[("powers", i0)]
    with np.errstate(over="ignore", under="ignore"):
        t1 = c[i0:] * pw
        t2 = c[i0:] * pw_p
    S1, S2 = np.zeros(n + 1), np.zeros(n + 1)
    np.cumsum(t1[::-1], out=S1[n - 1::-1])      # the same sequential sums from the top entry down
    np.cumsum(t2[::-1], out=S2[n - 1::-1])
    with ctx.workprec(PREC):
        # float rounding of the powers ((1+u)^{2i+1}, `geometric_powers`), the products and the sequential sums:
        # (1+u)^{3n+2} ≤ fac
        fac = (1 + arb(8) * arb(_U)) ** (n + 4)
        # terms that underflowed to zero: each below 2^-1000 times the largest mass
        under = arb(n) * arb(max(float(np.max(c)), 1.0)) * arb(2) ** -1000
        fr = (1 + 2 * _rel_error(float(r.mid()), r)) ** arb(n)      # r^i ≤ r̃^i·(1 + 2·rel)^i
        frp = (1 + 2 * _rel_error(float(rp.mid()), rp)) ** arb(n)
    return S1, S2, n, fac, under, fr, frp


def _first_at_most(kf: float, nxt1: np.ndarray, exp_kfp: np.ndarray, nxt2: np.ndarray, extra: float,
                   delta: float) -> int:
    """The first index with kf·nxt1 − exp_kfp·nxt2 + extra ≤ δ (float δ(ε) guess), −1 if none. Evaluated in
    growing blocks from the start: each entry is the same float expression, so the index is the one the whole
    array gives, while the entries past the crossing are never formed."""
    n = len(nxt1)
    start, width = 0, 4096
    while start < n:
        stop = min(n, start + width)
        with np.errstate(over="ignore", invalid="ignore"):
            below = kf * nxt1[start:stop] - exp_kfp[start:stop] * nxt2[start:stop] + extra <= delta
        hit = int(np.argmax(below))
        if below[hit]:
            return start + hit
        start, width = stop, 2 * width
    return -1


def _solve_segments(c, s, ref, j, lam, log_zT, delta, h, extra: arb, side: str, memo: dict | None = None) -> float:
    """Crossing of A_j − e^ε·B_j = δ on the segment ε ∈ [s_{j−1}, s_j), moving j until it lies inside."""
    N = len(c)
    # start the sums where the weights e^{−λ(s − ref)} are at most e^{600} (no float overflow, no huge factor)
    i0 = max(0, j - int(600.0 / max(lam * h, 600.0 / N)))
    key = (side, i0)
    memo = {} if memo is None else memo
    if key not in memo:
        S1x, S2x, *rest = _suffix_sums(c, s, i0, lam, h, memo)
        # the sums and the sums shifted by one entry (the float segment guess below), once per (side, i0)
        memo[key] = (S1x[:-1], S2x[:-1], *rest), S1x[1:], S2x[1:]
    (S1, S2, n, fac, under, fr, frp), nxt1, nxt2 = memo[key]
    # the factors at the reference depend on (i0, ref) only; the last ones are kept, so the lower side and a
    # following δ with the same reference reuse them (the float e^{s − ref} over the window is the costly part)
    last = memo.get("reference")
    if last is None or last[0] != (i0, ref):
        with ctx.workprec(PREC):
            first = arb(int(j0_of(s, h)) + i0) * arb(h) - arb(ref)     # the exact lattice loss of entry i0, minus ref
            g0 = (-arb(lam) * first).exp()
            g0p = (-(arb(lam) + 1) * first).exp()
            K = log_zT.exp() * (-arb(lam) * arb(ref)).exp()
            Kg, Kgp = K * g0, K * g0p
        kfp = float(K.mid()) * float(g0p.mid())
        with np.errstate(over="ignore", invalid="ignore"):
            exp_kfp = np.exp(s[i0:] - ref) * kfp      # e^{s − ref}·kfp: the same floats as in the sum below
        last = memo["reference"] = ((i0, ref), Kg, Kgp, float(K.mid()) * float(g0.mid()), exp_kfp)
    _, Kg, Kgp, kf, exp_kfp = last
    with ctx.workprec(PREC):
        d = arb(delta)
        # the segment from the float sums (δ is decreasing), then corrected by the certified crossing itself
        hit = _first_at_most(kf, nxt1, exp_kfp, nxt2, float(extra.mid()), delta)
        jj = hit + 1 if hit >= 0 else n - 1
        j = min(max(i0 + jj, i0 + 1), N - 1)
        seen = set()
        while j not in seen:
            seen.add(j)
            jj = j - i0
            if jj >= n:
                raise _Outside("above")
            if jj <= 0:
                if i0 == 0:        # the crossing lies at or below the window's start
                    return float(s[0]) if side == "upper" else 0.0
                raise _Outside("below")
            if side == "upper":
                A = Kg * (arb(float(S1[jj])) * fac * fr + under) + extra
                B = Kgp * arb(float(S2[jj])) / (fac * frp)
            else:
                A = Kg * arb(float(S1[jj])) / (fac * fr)
                B = Kgp * (arb(float(S2[jj])) * fac * frp + under)
            num = A - d
            if not (A.is_finite() and B.is_finite()):
                raise CertificationError("a composed sum is not finite")
            if not (num > 0 or num <= 0):
                raise CertificationError("cannot decide on which side of δ the segment starts")
            if not (num > 0):                  # crossing before this segment
                if side == "lower" and jj <= 1:
                    if i0 == 0:
                        return 0.0
                    raise _Outside("below")
                j -= 1
                continue
            if not (B > 0):
                j += 1
                continue
            eps = arb(ref) + (num / B).log()
            val = float_up(eps) if side == "upper" else float_down(eps)
            target = int(np.searchsorted(s, val, side="right"))   # the segment [s_{t−1}, s_t) holding val
            if target >= N:
                raise _Outside("above")
            if target == j or (side == "lower" and target < j and jj <= 1):
                # the formula holds on [s_{j−1}, s_j) with the exact lattice ends: keep val inside them
                lo_end, hi_end = arb(int(j0_of(s, h)) + j - 1) * arb(h), arb(int(j0_of(s, h)) + j) * arb(h)
                return max(val, float_up(lo_end)) if side == "upper" else min(val, float_down(hi_end))
            if target <= i0 and i0 > 0:
                raise _Outside("below")
            j = min(max(target, i0 + 1), N - 1)
        # a cycle between two segments: the crossing sits on their common end; take the safe side
        return float(s[max(seen)]) if side == "upper" else float(s[min(seen) - 1])


def j0_of(s: np.ndarray, h: float) -> int:
    """The lattice index of the window's first entry (s[0] = j0·h)."""
    return int(round(float(s[0]) / h))


def _rel_error(f: float, exact: arb) -> arb:
    """|f/exact − 1| as an upper bound."""
    return ((arb(f) - exact) / exact).abs_upper()


# --- driver -------------------------------------------------------------------------------------------------

def _tilt(cells: list[tuple[int, np.ndarray, int, float]], delta: float) -> float:
    """λ > 0 minimising the Chernoff estimate (Σ T_p K_p(λ) − log δ)/λ (floats; only a choice)."""
    def K(lam):
        return sum(T * float(logsumexp(lc + lam * s)) for T, lc, s in cells)

    def f(log_lam):
        lam = math.exp(log_lam)
        return (K(lam) - math.log(delta)) / lam
    res = minimize_scalar(f, bounds=(-14.0, 7.0), method="bounded", options={"xatol": 1e-4})
    return math.exp(res.x)


_GUESS_BLOCK = 64


def _block_delta_points(logw: np.ndarray, s: np.ndarray, block: int) -> np.ndarray:
    """`_float_delta_points` at every `block`-th entry, each block's mass placed at its start (floats: only the
    starting segment of the certified solve, which moves to the segment holding the crossing itself)."""
    n = len(logw) // block * block
    if n < 2 * block:
        return _float_delta_points(logw, s)[::block]
    rows = logw[:n].reshape(-1, block)
    top = rows.max(axis=1)
    with np.errstate(all="ignore"):
        lb = top + np.log(np.sum(np.exp(rows - top[:, None]), axis=1))
    lb = np.where(np.isfinite(top), lb, -np.inf)
    return _float_delta_points(lb, s[:n:block])


def _float_delta_points(logw: np.ndarray, s: np.ndarray) -> np.ndarray:
    """δ(s_j) = Σ_{i>j} w_i·(1 − e^{s_j − s_i}) for every j, from log-weights (floats, overflow-free)."""
    with np.errstate(all="ignore"):
        a = np.logaddexp.accumulate(logw[::-1])[::-1]
        b = np.logaddexp.accumulate((logw - s)[::-1])[::-1]
        a1 = np.append(a[1:], -np.inf)
        b1 = np.append(b[1:], -np.inf) + s
        return np.where(a1 > b1, np.exp(a1) * -np.expm1(b1 - a1), 0.0)


def _float_epsilon(cells, lam: float, delta: float, h: float, hi_loss: float | None = None) -> float:
    """ε(δ) of the dense cell masses composed by numpy's FFT under the tilt λ (floats: an estimate only)."""
    mean, var = _tilted_moments(cells, lam)
    std = math.sqrt(max(var, 0.0))
    lo = math.floor((mean - _WINDOW_STDS * std) / h)
    hi = math.ceil((max(mean + _WINDOW_STDS * std, hi_loss if hi_loss is not None else -math.inf)) / h)
    support_lo = sum(T * int(round(s[0] / h)) for T, _, s in cells)
    support_hi = sum(T * int(round(s[-1] / h)) for T, _, s in cells)
    lo, hi = max(lo, support_lo), min(hi, support_hi)
    n = 1 << max(10, math.ceil(math.log2(hi - lo + 64)))
    if n > (1 << 23):
        raise ValueError("float estimate too large")
    spec = np.ones(n // 2 + 1, dtype=complex)
    log_zT = 0.0
    for T, lc, s in cells:
        lt = lc + lam * s
        lz = float(logsumexp(lt))
        x = np.zeros(n)
        k0 = int(round(s[0] / h))
        np.add.at(x, (np.arange(len(lt)) + k0) % n, np.exp(lt - lz))
        spec *= np.fft.rfft(x) ** T
        log_zT += T * lz
    c = np.fft.irfft(spec, n)
    idx = lo + ((np.arange(n) - lo) % n)            # composed index held at each position
    order = np.argsort(idx)
    sv, cv = idx[order] * h, np.maximum(c[order], 0.0)
    logw = np.log(np.maximum(cv, 1e-300)) - lam * sv + log_zT
    d = _float_delta_points(logw, sv)
    hit = np.nonzero(d <= delta)[0]
    return float(sv[hit[0]]) if len(hit) else float(sv[-1])


def _coarse_cells(cells, h: float, g: int):
    """The cells on the lattice g·h, each mass split between its two coarse neighbours so that every step's
    mean loss is kept (the composed estimate then drifts by O(T·(gh)²/std), not O(T·gh)); floats, an estimate."""
    if g == 1:
        return cells, h
    out = []
    for T, lc, s in cells:
        k = np.rint(s / h).astype(np.int64)
        lo = k // g
        frac = (k - lo * g) / g
        top = float(np.max(lc))
        w = np.exp(lc - top)
        base = int(lo[0])
        m = np.zeros(int(lo[-1]) - base + 2)
        np.add.at(m, lo - base, w * (1 - frac))
        np.add.at(m, lo - base + 1, w * frac)
        with np.errstate(divide="ignore"):
            out.append((T, np.log(m) + top, (base + np.arange(len(m))) * (g * h)))
    return out, g * h


def _refined_tilt(cells, delta: float, h: float) -> float:
    """The tilt that centres the composed distribution on a float estimate of ε (Chernoff's tilt aims at the
    Chernoff ε, which can lie far above the true one; the masses around ε then carry little tilted weight).
    The estimate runs on a lattice coarse against the tilted spread (an error of a few 1e-3 std moves the
    centre, not the bound)."""
    lam_c = _tilt(cells, delta)
    std_c = math.sqrt(max(_tilted_moments(cells, lam_c)[1], 0.0))
    g = 1 << max(0, min(_COARSE_ESTIMATE_LOG2, int(math.floor(math.log2(max(std_c / (256 * h), 1.0))))))
    est_cells, est_h = _coarse_cells(cells, h, g)
    try:       # untilted: float FFT errors (~1e-16 absolute) are far below δ ≥ 1e-12 in the estimate's use
        eps_f = _float_epsilon(est_cells, 0.0, delta, est_h,
                               hi_loss=_chernoff_epsilon(cells, lam_c, delta) + 1.0)
    except (ValueError, FloatingPointError, MemoryError):
        try:
            eps_f = _float_epsilon(est_cells, lam_c, delta, est_h)
        except (ValueError, FloatingPointError, MemoryError):
            return lam_c
    a, b = 1e-9, lam_c
    if _tilted_moments(cells, a)[0] >= eps_f:
        return a
    if _tilted_moments(cells, b)[0] <= eps_f:
        return b
    for _ in range(30):
        if b / a < 1.001:
            break
        m = math.sqrt(a * b)
        if _tilted_moments(cells, m)[0] < eps_f:
            a = m
        else:
            b = m
    return b


def _tilted_moments(cells, lam):
    mean = var = 0.0
    for T, lc, s in cells:
        lw = lc + lam * s
        w = np.exp(lw - logsumexp(lw))
        m = float(np.sum(w * s))
        mean += T * m
        var += T * float(np.sum(w * (s - m) ** 2))
    return mean, var


def _chernoff_epsilon(cells, lam: float, delta: float) -> float:
    return (sum(T * float(logsumexp(lc + lam * s)) for T, lc, s in cells) - math.log(delta)) / lam


def _direction(pairs: list[Pair], steps: list[int], deltas: tuple[float, ...], h: float, budget: float,
               max_log2: int = MAX_LOG2_FFT, top_fraction: float = _TOP_FRACTIONS[0]
               ) -> tuple[list[tuple[float, float]], dict]:
    T_total = sum(steps)
    eta_top = min(deltas) * top_fraction / T_total
    cells = []
    ranges = []
    for pair, T in zip(pairs, steps):
        k_bot, k_top = _lattice_range(pair, h, eta_top, 1e-40)
        if k_top - k_bot > (1 << (max_log2 + 2)):
            raise _TooFine(k_top - k_bot)
        lc = _cell_log_masses(pair, k_bot, k_top, h)
        cells.append((T, lc, np.arange(k_bot, k_top + 1) * h))
        ranges.append((k_bot, k_top, lc))
    ordered = sorted(deltas)
    lam = _refined_tilt(cells, ordered[len(ordered) // 2], h)
    mean, var = _tilted_moments(cells, lam)
    std = math.sqrt(max(var, 0.0))
    span_lo = min(mean, _chernoff_epsilon(cells, _tilt(cells, ordered[-1]), ordered[-1]) - 2 * std)
    span_hi = max(mean, _chernoff_epsilon(cells, _tilt(cells, ordered[0]), ordered[0]))
    # the window: ±_WINDOW_STDS tilted standard deviations around the span of answers, clipped to the support
    support_lo = sum(T * kb for T, (kb, _, _) in zip(steps, ranges))
    support_hi = sum(T * kt for T, (_, kt, _) in zip(steps, ranges))
    lo_idx = max(math.floor((span_lo - _WINDOW_STDS * std) / h), support_lo)
    hi_idx = min(math.ceil((span_hi + _WINDOW_STDS * std) / h), support_hi)
    if _fft_length(hi_idx - lo_idx) > (1 << max_log2):
        raise _TooFine(_fft_length(hi_idx - lo_idx))
    beta = 1.0
    predicted = _predicted_gap(cells, lam, h, beta)
    while beta > 1e-40 and predicted > budget:
        finer = _predicted_gap(cells, lam, h, beta / 8)
        if finer > 0.95 * predicted:     # the lattice, not the bucket widths, limits the gap: stop narrowing
            break
        beta, predicted = beta / 8, finer
    rounds = [_discretise(pair, T, h, lam, kb, kt, lc, beta) for pair, T, (kb, kt, lc) in zip(pairs, steps, ranges)]
    try:
        out, info = _compose_and_solve(rounds, deltas, lam, h, beta, lo_idx, hi_idx, support_lo)
    except _WindowMissed:
        # the Chernoff bound on the mass above the window can exceed δ where wide buckets put a small mass far above
        # it (rare sampling, e.g. q = 1e-6, σ = 0.1): compose the whole support instead, when it fits
        if (lo_idx, hi_idx) == (support_lo, support_hi) or _fft_length(support_hi - support_lo) > (1 << max_log2):
            raise
        out, info = _compose_and_solve(rounds, deltas, lam, h, beta, support_lo, support_hi, support_lo)
    info["top_fraction"] = top_fraction
    return out, info


def _discretisation_gap(cU, cL, log_zT: arb, lam: float, j0: int, h: float, deltas) -> float | None:
    """The widest gap over `deltas` of the same composed masses with the composition's error terms (entry error,
    wrap-around, tails, the cut top) set to zero: the part of the gap that the lattice and the bucket widths
    cause. A float diagnostic that steers the refinement (`certified_epsilons`); no bound comes from it."""
    zero = arb(0)
    memo: dict = {}
    try:
        return max(up - lo for lo, up, _ in (_epsilon_bracket(cU, cL, zero, zero, zero, zero, log_zT, lam, j0, h, d,
                                                               memo) for d in deltas))
    except (CertificationError, ArithmeticError, ValueError):
        return None


def _fft_length(width: int) -> int:
    """The FFT length holding a window of `width` lattice steps (with a margin of 64)."""
    return 1 << max(10, math.ceil(math.log2(width + 64)))


def _compose_and_solve(rounds: list[_Round], deltas, lam: float, h: float, beta: float, lo_idx: int, hi_idx: int,
                       support_lo: int) -> tuple[list[tuple[float, float]], dict]:
    """Compose the rounds on the window [lo_idx, hi_idx] and solve ε at every δ (steps 2 and 3)."""
    N = _fft_length(hi_idx - lo_idx)
    j0 = lo_idx - 32 if lo_idx > support_lo else lo_idx
    g = _sublattice(rounds, N)
    cU, cL, E = _compose(rounds, N, j0, g)
    with ctx.workprec(PREC):
        hi_t = j0 + N - 1
        tail_U = _chernoff_arb(rounds, "upper", _best_theta(rounds, "upper", hi_t, 1.0), hi_t)
        tail_L = _chernoff_arb(rounds, "lower", _best_theta(rounds, "lower", hi_t, 1.0), hi_t)
        if j0 > support_lo:      # nothing lies below the support: no wrap-around from there
            tail_L += _chernoff_arb(rounds, "lower", _best_theta(rounds, "lower", j0, -1.0), j0)
        p_inf = sum((r.steps * r.p_inf for r in rounds), arb(0))
    with ctx.workprec(PREC):
        log_zT = sum((arb(r.log_z) * r.steps for r in rounds), arb(0))     # exact: Π Z_p^{T_p} with Z_p = e^{log_z}
    out = []
    info = {}
    memo: dict = {}
    for delta in deltas:
        lower, upper, info = _epsilon_bracket(cU, cL, E, tail_L, tail_U, p_inf, log_zT, lam, j0, h, delta, memo)
        out.append((lower, upper))
    info["discretisation_gap"] = _discretisation_gap(cU, cL, log_zT, lam, j0, h, deltas)
    info.update({"tilt": lam, "fft_length": N, "sublattice": g, "beta": beta,
                 "breakpoints": int(sum(len(r.index) for r in rounds)),
                 "min_width_cells": int(min(np.min(np.diff(r.index)) if len(r.index) > 1 else 1 for r in rounds)),
                 "tail_upper": float_up(tail_U), "alias_lower": float_up(tail_L)})
    return out, info


class _TooFine(Exception):
    pass


class _WindowMissed(CertificationError):
    """The crossing lies outside the composed window (`_direction` then tries the whole support)."""


class _Outside(Exception):
    """The crossing lies outside the part of the window the sums covered."""


def gap_target(lower: float, tolerance: float = DEFAULT_TOLERANCE, rel_tolerance: float = DEFAULT_REL_TOLERANCE,
               abs_tolerance: float = DEFAULT_ABS_TOLERANCE) -> float:
    """The gap an enclosure [lower, upper] must meet: min(tolerance, max(rel_tolerance·lower, abs_tolerance)).

    Why the lower end: gap ≤ rel·lower puts both ends within rel of the exact ε (lower ≤ ε ≤ upper)."""
    return min(tolerance, max(rel_tolerance * max(lower, 0.0), abs_tolerance))


def certified_epsilon(phases, delta: float, relation: str = "add_remove", *, interval: float | None = None,
                      tolerance: float = DEFAULT_TOLERANCE, rel_tolerance: float = DEFAULT_REL_TOLERANCE,
                      abs_tolerance: float = DEFAULT_ABS_TOLERANCE) -> PLDBounds:
    """Certified ε(δ) for phases ((q, σ, steps), ...) run one after the other, as an enclosure [lower, upper].

    `interval` fixes the lattice; None starts from the loss spread (`_start_interval`). The refinement runs while
    the gap exceeds `gap_target` (tolerance, rel_tolerance, abs_tolerance), refining what dominates the gap
    (`certified_epsilons`); the details say when the target could not be met. Arguments are validated by the
    caller (`privcheck.accounting.dpsgd`)."""
    return certified_epsilons(phases, (delta,), relation, interval=interval, tolerance=tolerance,
                              rel_tolerance=rel_tolerance, abs_tolerance=abs_tolerance)[0]


def certified_epsilons(phases, deltas, relation: str = "add_remove", *, interval: float | None = None,
                       tolerance: float = DEFAULT_TOLERANCE, rel_tolerance: float = DEFAULT_REL_TOLERANCE,
                       abs_tolerance: float = DEFAULT_ABS_TOLERANCE) -> tuple[PLDBounds, ...]:
    """`certified_epsilon` for several δ from one discretisation and one composition (a privacy profile).

    Each try diagnoses its gap: the part left with the composition's error terms set to zero
    (`_discretisation_gap`) is the discretisation's; the rest is the composition's (float error bounds,
    wrap-around, tails, the cut top). Where the composition's part dominates the top cut moves down
    (`_TOP_FRACTIONS`); otherwise the lattice halves where the buckets are already one cell wide, else the buckets
    narrow. It stops when every gap meets its target, after three tries in a row that do not shrink the worst
    gap/target ratio by a quarter, when the composition dominates at the nearest top cut, or after
    _REFINE_SECONDS."""
    if relation not in ("add_remove", "replace_one"):
        raise InvalidParameter("relation", relation, "'add_remove' or 'replace_one'")
    phases = check_phases(tuple((v.sampling_rate("sampling_rate", q), check_noise("noise_multiplier", s),
                                 v.count("steps", t, maximum=MAX_STEPS)) for q, s, t in phases))
    deltas = tuple(check_delta("delta", d) for d in deltas)
    if not deltas:
        raise InvalidParameter("deltas", deltas, "at least one δ in (0, 1)")
    if interval is not None:
        interval = v.positive("interval", interval)
    tolerance = v.positive("tolerance", tolerance)
    rel_tolerance = v.positive("rel_tolerance", rel_tolerance)
    abs_tolerance = v.positive("abs_tolerance", abs_tolerance)

    def target(lower):
        return gap_target(lower, tolerance, rel_tolerance, abs_tolerance)

    start = time.perf_counter()
    auto = interval is None
    h = _start_interval(phases) if auto else interval
    cap = _AUTO_LOG2_FFT if auto else MAX_LOG2_FFT      # auto: coarsen first to a fast FFT, refine on demand
    budget = tolerance / 4
    top = 0
    tries = []
    best = None
    stalled = 0
    for _ in range(24):
        try:
            res, infos = _at_interval(phases, deltas, relation, h, budget, cap, _TOP_FRACTIONS[top])
        except _TooFine:
            if not auto or best is not None:
                if best is not None:
                    break
                raise CertificationError(f"lattice interval {h} needs an FFT longer than 2^{cap}") from None
            h *= 2
            continue
        worst = max(up - lo for lo, up in res)
        ratio = max((up - lo) / target(lo) for lo, up in res)
        disc = [i["discretisation_gap"] for i in infos]
        # a diagnostic that failed or came out negative (float noise with the error terms removed) says nothing:
        # refine the discretisation then, as without it
        known = None not in disc and max(disc) >= 0
        composition_dominates = known and max(disc) < 0.5 * worst
        tries.append({"interval": h, "budget": budget, "top_fraction": _TOP_FRACTIONS[top], "worst_gap": worst,
                      "worst_gap_over_target": ratio, "discretisation_gap": None if None in disc else max(disc),
                      "fft_length": max(i["fft_length"] for i in infos)})
        stalled = 0 if best is None or ratio < 0.75 * best[0] else stalled + 1
        if best is None or ratio < best[0]:
            best = (ratio, res, h, infos)
        if ratio <= 1 or stalled >= 3 or time.perf_counter() - start > _REFINE_SECONDS:
            break      # met, or refining no longer pays: the details say meets_tolerance = False
        if composition_dominates:
            if top + 1 == len(_TOP_FRACTIONS):
                break      # a finer lattice only adds float error (the entry errors add up over 1/(λh) entries)
            top += 1                       # tails: cut the top nearer the answer
            continue
        budget = min(budget, min(target(lo) for lo, _ in res) / 4) / 8
        if min(i["min_width_cells"] for i in infos) == 1:
            if not auto:
                break
            h /= 2                         # lattice: the buckets are one cell wide already
            cap = MAX_LOG2_FFT
    if best is None:
        raise CertificationError("no lattice interval gave a composed PLD")
    _, res, h_used, infos = best
    wall = time.perf_counter() - start
    out = []
    for lower, upper in res:
        goal = target(lower)
        details = {"method": "certified_pld", "interval": h_used, "tolerance": tolerance,
                   "rel_tolerance": rel_tolerance, "abs_tolerance": abs_tolerance, "target_gap": goal,
                   "gap": upper - lower, "meets_tolerance": upper - lower <= goal, "tries": tries,
                   "directions": infos, "wall_time_s": wall}
        out.append(PLDBounds(lower=lower, upper=upper, interval=h_used, details=details))
    return tuple(out)


def check_noise(name: str, value) -> float:
    """A noise multiplier σ in NOISE_RANGE."""
    return v.closed_range(name, value, *NOISE_RANGE)


def check_delta(name: str, value) -> float:
    """δ in [DELTA_MIN, 1)."""
    allowed = f"[{DELTA_MIN:g}, 1)"
    x = v.real(name, value, allowed)
    if not DELTA_MIN <= x < 1:
        raise InvalidParameter(name, value, allowed)
    return x


def check_phases(phases: tuple) -> tuple:
    """Refuse a history the certified PLD cannot compose in minutes: no phase, more than MAX_PHASES phases, or more
    than MAX_STEPS rounds in total (the steps of each (q, σ, steps) phase are validated by the caller)."""
    if not 1 <= len(phases) <= MAX_PHASES:
        raise InvalidParameter("phases", f"{len(phases)} phases", f"1 to {MAX_PHASES} phases")
    total = sum(p[2] for p in phases)
    if total > MAX_STEPS:
        raise InvalidParameter("steps", total, f"at most {MAX_STEPS} rounds in total over the phases")
    return phases


def _start_interval(phases) -> float:
    """The first lattice of the automatic mode, 1e-4·2^k from the narrowest round's loss spread
    s = q·√(e^{1/σ²} − 1) (the spread of the likelihood ratio): s/64 rounded down, k ≤ 2, where s/64 ≥ 1e-4 (a
    coarse lattice suffices where the spread is wide: the bucket widths, not the lattice, set the gap there);
    s/8 rounded down, never above 1e-4, where s < 8e-4, so that one round's mass spreads over several lattice
    points (q = 1.18e-4, σ = 0.961: s = 1.6e-4, h = 1.6e-5 rounded down to 1.25e-5), down to
    _FINEST_START_INTERVAL; the driver coarsens a lattice whose composition needs too long an FFT."""
    spread = min(q * math.sqrt(math.expm1(min(1.0 / (sigma * sigma), 700.0))) for q, sigma, _ in phases)
    if spread / 64 >= DEFAULT_START_INTERVAL:
        doublings = min(math.floor(math.log2(spread / 64 / DEFAULT_START_INTERVAL)), _COARSEST_START_DOUBLINGS)
    else:
        doublings = min(math.floor(math.log2(max(spread / 8, _FINEST_START_INTERVAL) / DEFAULT_START_INTERVAL)), 0)
    return DEFAULT_START_INTERVAL * 2.0 ** doublings


def _at_interval(phases, deltas, relation, h, budget, cap=MAX_LOG2_FFT, top_fraction=_TOP_FRACTIONS[0]):
    per_dir: dict[int, list] = {}
    for q, sigma, steps in phases:
        for d, pair in enumerate(pairs_for(relation, q, sigma)):
            per_dir.setdefault(d, []).append((pair, steps))
    results, infos = [], []
    for d in sorted(per_dir):
        pairs = [p for p, _ in per_dir[d]]
        steps = [t for _, t in per_dir[d]]
        res, info = _direction(pairs, steps, deltas, h, budget, cap, top_fraction)
        info["pair"] = pairs[0].kind
        results.append(res)
        infos.append(info)
    combined = [(max(max(r[i][0], 0.0) for r in results), max(max(r[i][1], 0.0) for r in results))
                for i in range(len(deltas))]
    return combined, infos
