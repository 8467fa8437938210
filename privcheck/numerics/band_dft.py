"""The DFT of nonnegative masses with a short support, on a few frequencies only, with a proven error bound; and a
proven upper bound on its modulus at every other frequency (the speed path of the certified PLD at large T).

After T rounds only the frequencies k with |X_k| close to the total mass survive the T-th power. Rather than the
whole length-N transform, `band` proves where |X(ω)| ≤ θ (so that |X|^T is negligible) from a coarse transform,
and `dft_at` evaluates the few others directly. Proofs in docs/accounting.md, "Certified PLD" (Band DFT):

* Coarse bound. For masses x_j ≥ 0 at positions j < S ≤ M (M a power of two dividing N), the length-M FFT gives
  X(2πκ/M) exactly up to the FFT's proven 2-norm error e (`fft.fft_error_bound`; each entry errs by at most e).
  With c any centre, X(ω)·e^{iωc} has derivative bounded by D = Σ|j − c|·x_j, so between two coarse points
  |X(ω)| ≤ max(|X̃_κ|, |X̃_{κ+1}|) + e + D·π/M.
* Direct evaluation. X_k = Σ_{j1} w^{j1·B·k}·Σ_{j2} x_{j1·B+j2}·w^{j2·k} (w = e^{−2πi/N}, B = 256): the inner sums
  are real × complex matrix products (any summation order, with or without fused multiply-add, errs by at most
  γ_B·Σ|terms|, γ_n = nu/(1 − nu)), the outer ones a rounded complex product (√5·u) and a sum (γ_{n1}). With β the
  stored twiddles' error (`fft.twiddle_error`) and m = Σx:
  |X̃_k − X_k| ≤ [b + √2·γ_{n1}·(1 + b)]·m + S·2^-1070, a = β + √2·γ_B·(1 + β),
  b = a·(1 + β) + β + √5·u·(1 + a)·(1 + β).
"""

from __future__ import annotations

import math

import numpy as np
from flint import arb, ctx

from privcheck.numerics import fft as bfft
from privcheck.numerics.certified import float_down, float_up

__all__ = ["BLOCK", "band", "dft_at", "dft_at_error", "power_cut"]

BLOCK = 256
_U = 2.0 ** -53
_PREC = 128


def _twiddle_table(n: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stored w^idx for idx in [0, N): the table holds w^j for j < N/2, and w^{j + N/2} = −w^j (exact)."""
    wre, wim = bfft.twiddles(n)
    half = 1 << (n - 1)
    up = idx >= half
    j = np.where(up, idx - half, idx)
    sign = np.where(up, -1.0, 1.0)
    return sign * wre[j], sign * wim[j]


def _gamma(k: int) -> arb:
    u = arb(_U)
    return arb(k) * u / (1 - arb(k) * u)


def dft_at_error(span: int, mass: arb) -> arb:
    """Upper bound on |X̃_k − X_k| for `dft_at` on masses with support [0, span) and total at most `mass`."""
    with ctx.workprec(_PREC):
        u = arb(_U)
        beta = bfft.twiddle_error()
        n1 = max(1, -(-span // BLOCK))
        r2, r5 = arb(2).sqrt(), arb(5).sqrt()
        a = beta + r2 * _gamma(BLOCK) * (1 + beta)
        b = a * (1 + beta) + beta + r5 * u * (1 + a) * (1 + beta)
        return (b + r2 * _gamma(n1) * (1 + b)) * mass + arb(span) * arb(2) ** -1070


def dft_at(x: np.ndarray, n: int, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """X_k = Σ_j x[row, j]·e^{−2πijk/N} (N = 2^n) for each row of x (masses at positions 0..S−1) and each k in ks:
    (real, imaginary) arrays of shape (rows, len(ks)), within `dft_at_error` of the exact values."""
    rows, S = x.shape
    n1 = -(-S // BLOCK)
    padded = np.zeros((rows, n1 * BLOCK))
    padded[:, :S] = x
    N = 1 << n
    ks = np.asarray(ks, dtype=np.int64)
    j2 = np.arange(BLOCK, dtype=np.int64)
    e2r, e2i = _twiddle_table(n, (j2[:, None] * ks[None, :]) % N)                 # (B, K)
    j1 = np.arange(n1, dtype=np.int64) * BLOCK
    e1r, e1i = _twiddle_table(n, (j1[:, None] * ks[None, :]) % N)                 # (n1, K)
    blocks = padded.reshape(rows * n1, BLOCK)
    inner_r = (blocks @ e2r).reshape(rows, n1, len(ks))
    inner_i = (blocks @ e2i).reshape(rows, n1, len(ks))
    prod_r = inner_r * e1r - inner_i * e1i           # one rounded complex product (√5·u), no fused operations
    prod_i = inner_r * e1i + inner_i * e1r
    return prod_r.sum(axis=1), prod_i.sum(axis=1)


def band(x: np.ndarray, n: int, T: int) -> np.ndarray | None:
    """Frequencies k in [0, N) (N = 2^n), sorted, outside which every row's exact DFT satisfies
    |X_k| ≤ 2^{−1000/T} (so |X_k|^T ≤ 2^-1000), for masses x[row, j] ≥ 0 at positions j < S (one or two rows).
    The coarse length M is the power of two that keeps the interpolation slack D·π/M below half of 1 − 2^{−1000/T};
    None where M would exceed N/4, or the band hold more than N/64 frequencies or cost more to sum than the full
    transform (then that is used)."""
    rows, S = x.shape
    N = 1 << n
    if rows > 2:
        raise ValueError("band: at most two rows")
    pos = np.arange(S, dtype=float)
    u = arb(_U)
    with ctx.workprec(_PREC):
        theta_a = arb(2) ** (arb(-1000) / T)
        theta = float_down(theta_a)
        D = arb(0)
        for row in x:
            total = float(np.sum(row))
            centre = float(np.rint(np.dot(row, pos) / total)) if total > 0 else 0.0
            dist = np.abs(pos - centre)                  # exact: integers below 2^53
            d = arb(float(np.sum(dist * row))) * (1 + u) / (1 - arb(S) * u) + arb(S) * arb(2) ** -1070
            D = D.max(d)
        room = float_down(1 - theta_a)
    if not room > 0:
        return None
    M = 1 << max(10, math.ceil(math.log2(max(S, 2 * math.pi * float(D.mid()) / room * 1.01))))
    if M > N // 4:
        return None
    with ctx.workprec(_PREC):
        slack = float_up(D * arb.pi() / M)
    cr, ci = np.zeros(M), np.zeros(M)
    cr[:S] = x[0]
    if rows == 2:
        ci[:S] = x[1]
    with ctx.workprec(_PREC):
        # ‖x‖₂² from two dot products of length M and their sum: (1 + u)/(1 − Mu) each, one more rounding
        sq = arb(float(np.dot(cr, cr) + np.dot(ci, ci))) * (1 + u) ** 2 / ((1 - u) * (1 - arb(M) * u))
        norm = (sq + arb(2 * M) * arb(2) ** -1021).sqrt()
        F = bfft.fft_error_bound(int(math.log2(M)), norm)
        # the unpacked entries (X_κ ± conj X_{−κ})/2 err by at most the packed FFT's error plus their rounding
        e = float_up(F * (1 + u) + u * (arb(M).sqrt() * norm + F) * (1 + u))
    Xr, Xi = bfft.fft(cr, ci)
    Rr, Ri = np.roll(Xr[::-1], 1), np.roll(Xi[::-1], 1)
    parts = [((Xr + Rr) / 2, (Xi - Ri) / 2)]
    if rows == 2:
        parts.append(((Xi + Ri) / 2, (Rr - Xr) / 2))
    # |Ã| ≤ fl(√fl(fl(re² + im²) + 2^-1021))·(1 + 8u), rounded: the square's three roundings (relative u, or
    # absolute 2^-1075 below 2^-1022), the added term's, the root's and the product's; (1 + 8u)(1 − u) ≥ (1 − u)^-5
    top = np.zeros(M)
    for ar, ai in parts:
        top = np.maximum(top, np.sqrt(ar * ar + ai * ai + 2.0 ** -1021) * (1 + 8 * _U))
    edge = np.maximum(top, np.roll(top, -1))          # the interval [κ, κ + 1] (cyclic)
    bound = (edge + e + slack) * (1 + 4 * _U)         # a sum of three nonnegative floats, rounded twice
    open_ = np.flatnonzero(~(bound <= theta))         # intervals where |X| may exceed θ
    R = N // M
    if len(open_) * R > N // 64:
        return None
    ks = np.unique((open_[:, None] * R + np.arange(R + 1)[None, :]).ravel() % N)
    # the direct sums cost about 4·S·|band| matrix flops; the full transform about 10 array operations per entry
    # and level on log₂ S levels (those below the support are formed directly)
    if 4 * S * len(ks) > 10 * N * max(1, math.ceil(math.log2(S))):
        return None
    return ks


def power_cut(T: int) -> float:
    """A float c such that, wherever fl(re² + im²) ≤ c for both X_k and X_{−k} (the packed spectrum), both
    unpacked entries a_k = fl(fl(X_k + conj X_{−k})/2) and b_k satisfy |a_k|^T, |b_k|^T ≤ 2^-1000 (whether they
    are formed or not): |X|² ≤ V = (fl(re² + im²) + 2^-1021)/(1 − u)³ (three roundings, each relative u or,
    below 2^-1022, absolute 2^-1075), |a_k| ≤ (1 + u)·√V + 2^-1073, and that is at most C^{1/2}, C = 2^{−2000/T},
    when c = ((√C − 2^-1073)/(1 + u))²·(1 − u)³ − 2^-1021, rounded down. Negative (nothing dropped) for T < 2."""
    with ctx.workprec(_PREC):
        u = arb(_U)
        root = (arb(2) ** (arb(-1000) / T) - arb(2) ** -1073) / (1 + u)
        return float_down(root * root * (1 - u) ** 3 - arb(2) ** -1021)
