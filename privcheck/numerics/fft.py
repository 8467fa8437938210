"""A radix-2 FFT in float64 whose rounding error has a proven bound (the speed path of the certified PLD).

`fft(re, im)` computes X[k] = Σ_j x[j]·e^{−2πijk/N} for N = 2^n by decimation in time, on separate real and
imaginary arrays so that every operation is one IEEE-754 correctly rounded float64 operation (numpy's elementwise
+, −, × on float64 arrays; no fused multiply-add, no library FFT whose algorithm we cannot bound).

Error bound (proof in docs/accounting.md, "Certified PLD"): with u = 2^-53, β a bound on the error of each
stored twiddle factor and γ = u + (1 + u)·(√5·u + β·(1 + √5·u)),

    ‖fl(FFT x) − FFT x‖₂ ≤ ((1 + γ)^n − 1)·√N·‖x‖₂ + n·N·(1 + γ)^n·τ,

where τ = 2^-1070 covers underflow (each butterfly output is off by at most a few subnormal units beyond the
relative bound). `fft_error_bound(n, norm2)` returns this bound as an Arb ball's upper end. The twiddles are
products of two short tables whose entries are within one ulp of Arb values, so β ≤ (4√2 + √5)·u + O(u²).

`ifft` is conj(FFT(conj y))/N: conjugation is exact and N is a power of two, so the same bound holds with the
division applied to both sides (up to the underflow term).
"""

from __future__ import annotations

import functools

import numpy as np
from flint import arb, ctx

__all__ = ["MAX_LOG2", "fft", "fft_error_bound", "ifft", "length_log2", "twiddle_error", "twiddles"]

MAX_LOG2 = 26
_U = arb(2) ** -53


@functools.lru_cache(maxsize=8)
def _tables(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Two tables (coarse U[a] = w^{aB}, fine V[b] = w^b, w = e^{−2πi/N}) rounded to nearest from Arb."""
    N = 1 << n
    half = N // 2
    B = 1 << ((n - 1 + 1) // 2)
    A = max(1, half // B)
    with ctx.workprec(128):
        two_pi = 2 * arb.pi()

        def table(count: int, step: int):
            re = np.empty(count)
            im = np.empty(count)
            for a in range(count):
                angle = two_pi * (a * step) / N
                re[a] = float(angle.cos().mid())      # nearest float to a 128-bit ball: within u of the cosine
                im[a] = -float(angle.sin().mid())
            return re, im

        ure, uim = table(A, B)
        vre, vim = table(B, 1)
    return ure, uim, vre, vim, B


@functools.lru_cache(maxsize=8)
def twiddles(n: int) -> tuple[np.ndarray, np.ndarray]:
    """w^j for j < N/2 as float64 (re, im): U[j // B]·V[j % B], one rounded complex product each."""
    ure, uim, vre, vim, B = _tables(n)
    half = (1 << n) // 2
    j = np.arange(half)
    a, b = j // B, j % B
    re = ure[a] * vre[b] - uim[a] * vim[b]
    im = ure[a] * vim[b] + uim[a] * vre[b]
    re.setflags(write=False)
    im.setflags(write=False)
    return re, im


def twiddle_error() -> arb:
    """β: |stored twiddle − exact| ≤ β (each table entry within √2·u·(1 + tiny), product rounding √5·u)."""
    u = _U
    e_tab = 2 * arb(2).sqrt() * u * (1 + 2 * u)          # |Ũ − U|, |Ṽ − V|: each part within one ulp (2u)
    prod = e_tab * (1 + e_tab) + e_tab                    # |ŨṼ − UV|
    return prod + arb(5).sqrt() * u * (1 + e_tab) ** 2    # plus the rounding of the product


def length_log2(N: int) -> int:
    """n for N = 2^n, refusing any other length."""
    n = N.bit_length() - 1
    if N < 2 or (1 << n) != N or n > MAX_LOG2:
        raise ValueError(f"FFT length must be a power of two in [2, 2^{MAX_LOG2}], got {N}")
    return n


def fft(re: np.ndarray, im: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward DFT of re + i·im (float64 arrays of length 2^n), decimation in time without bit reversal.

    Level L holds an (L, N/L) array: column c is the length-L DFT of x[c::N/L]. Going to 2L pairs column c
    (the even samples of x[c::N/(2L)]) with column c + N/(2L) (the odd samples): X = E ± w_{2L}^r·O.
    """
    N = re.shape[0]
    n = length_log2(N)
    wre, wim = twiddles(n)
    xr = np.ascontiguousarray(re, dtype=np.float64)
    xi = np.ascontiguousarray(im, dtype=np.float64)
    ar, ai, L = _first_level(xr, xi, wre, wim)
    while L < N:
        M = N // L
        er, ei = ar[:, : M // 2], ai[:, : M // 2]
        orr, oi = ar[:, M // 2:], ai[:, M // 2:]
        step = N // (2 * L)
        tr = wre[::step][:L, None]
        ti = wim[::step][:L, None]
        pr = tr * orr - ti * oi
        pi = tr * oi + ti * orr
        nr = np.empty((2 * L, M // 2))
        ni = np.empty((2 * L, M // 2))
        np.add(er, pr, out=nr[:L])
        np.subtract(er, pr, out=nr[L:])
        np.add(ei, pi, out=ni[:L])
        np.subtract(ei, pi, out=ni[L:])
        ar, ai = nr, ni
        L *= 2
    return ar.reshape(N), ai.reshape(N)


def _first_level(xr: np.ndarray, xi: np.ndarray, wre: np.ndarray, wim: np.ndarray):
    """The first level worth computing by butterflies, formed directly when the input is zero outside a short
    cyclic block [N − neg, N) ∪ [0, pos) (zero-padded masses, band-limited spectra).

    With M = N/L ≥ pos + neg every column c of level L (the length-L DFT of x[c::M]) holds at most one nonzero
    sample: x[c] first (c < pos), so every row is x[c], exactly what the skipped butterflies give (they add
    zeros); or y = x[c + N − M] last (c ≥ M − neg), so row r is y·w^{−Mr}: one rounded complex product with a
    stored twiddle, within γ·|y| of the exact value, inside what the induction allows the skipped stages.
    """
    N = xr.shape[0]
    half = N // 2
    nz = np.flatnonzero((xr != 0) | (xi != 0))
    pos = int(nz[nz < half][-1]) + 1 if np.any(nz < half) else 0
    neg = N - int(nz[nz >= half][0]) if np.any(nz >= half) else 0
    if pos + neg > half or N < 4:
        return xr.reshape(1, N), xi.reshape(1, N), 1
    M = 1 << max(pos + neg - 1, 1).bit_length()
    L = N // M
    ar = np.zeros((L, M))
    ai = np.zeros((L, M))
    ar[:, :pos] = xr[:pos]
    ai[:, :pos] = xi[:pos]
    if neg:
        j = M * np.arange(L)
        up = j >= half                         # w^j = −w^{j − N/2}; w^{−j} = conj(w^j): exact sign changes
        k = np.where(up, j - half, j)
        tr = np.where(up, -wre[k], wre[k])[:, None]
        ti = np.where(up, wim[k], -wim[k])[:, None]
        yr, yi = xr[N - neg:], xi[N - neg:]
        ar[:, M - neg:] = tr * yr - ti * yi
        ai[:, M - neg:] = tr * yi + ti * yr
    return ar, ai, L


def ifft(re: np.ndarray, im: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse DFT: conj(FFT(conj y))/N (exact conjugation and exact division by a power of two)."""
    N = re.shape[0]
    xr, xi = fft(re, -np.asarray(im, dtype=np.float64))
    return xr / N, -xi / N


def fft_error_bound(n: int, norm2: float | arb) -> arb:
    """Upper bound on ‖fl(FFT x) − FFT x‖₂ for an input of 2-norm ≤ norm2 and length 2^n (module docstring)."""
    u = _U
    beta = twiddle_error()
    gamma = u + (1 + u) * (arb(5).sqrt() * u + beta * (1 + arb(5).sqrt() * u))
    grow = (1 + gamma) ** n
    root_n = arb(2) ** (arb(n) / 2)
    tau = arb(2) ** -1070
    return (grow - 1) * root_n * arb(norm2) + n * arb(2) ** n * grow * tau


