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
    Row r of level 2L needs only row r mod L of level L, so from the first level L₀ on (`_first_level`) the rows
    ρ + L₀·t with ρ in a block of residues mod L₀ form an independent computation: `_levels` runs the levels on one
    cache-sized block of residues at a time. Every output is the same sequence of float operations on the same
    operands as level by level over the whole array, so the results are bit-identical and the bound unchanged.
    """
    N = re.shape[0]
    n = length_log2(N)
    wre, wim = twiddles(n)
    xr = np.ascontiguousarray(re, dtype=np.float64)
    xi = np.ascontiguousarray(im, dtype=np.float64)
    ar, ai, L0 = _first_level(xr, xi, wre, wim)
    if L0 == N:
        return ar.reshape(N), ai.reshape(N)
    return _levels(ar, ai, L0, wre, wim)


_BLOCK = 1 << 16      # entries per block of residues (a few arrays of 512 KiB stay in cache)


def _levels(ar: np.ndarray, ai: np.ndarray, L0: int, wre: np.ndarray, wim: np.ndarray):
    """Levels L₀ → N of `fft` on blocks of row residues ρ mod L₀ (docstring of `fft`). At level L a block is a
    (L/L₀, b, M) array: entry [t, ρ, c] is row ρ₀ + ρ + L₀·t, column c, of the level-L array."""
    M0 = ar.shape[1]
    N = L0 * M0
    b = max(1, min(L0, _BLOCK // M0))
    size = b * M0
    out_r, out_i = np.empty((N // L0, L0)), np.empty((N // L0, L0))
    levels = []                     # per level: (L, twiddles w_{2L}^r for r < L viewed as (L/L₀, L₀))
    L = L0
    while L < N:
        step = N // (2 * L)
        levels.append((L, wre[::step][:L].reshape(L // L0, L0), wim[::step][:L].reshape(L // L0, L0)))
        L *= 2
    prod_r, prod_i, tmp = np.empty(size // 2), np.empty(size // 2), np.empty(size // 2)
    bufs = [(np.empty(size), np.empty(size)), (np.empty(size), np.empty(size))]
    for r0 in range(0, L0, b):
        r1 = min(r0 + b, L0)
        cr, ci = ar[r0:r1][None], ai[r0:r1][None]
        for lev, (L, twr, twi) in enumerate(levels):
            M = N // L
            half = M // 2
            t = L // L0
            shape = (t, r1 - r0, half)
            count = t * (r1 - r0) * half
            er, ei, orr, oi = cr[:, :, :half], ci[:, :, :half], cr[:, :, half:], ci[:, :, half:]
            tr, ti = twr[:, r0:r1, None], twi[:, r0:r1, None]
            pr, pi, q = prod_r[:count].reshape(shape), prod_i[:count].reshape(shape), tmp[:count].reshape(shape)
            np.multiply(tr, orr, out=pr)          # pr = tr·orr − ti·oi, pi = tr·oi + ti·orr: one rounding each
            np.multiply(ti, oi, out=q)
            np.subtract(pr, q, out=pr)
            np.multiply(tr, oi, out=pi)
            np.multiply(ti, orr, out=q)
            np.add(pi, q, out=pi)
            nr_buf, ni_buf = bufs[lev % 2]
            nr = nr_buf[:2 * count].reshape((2 * t, r1 - r0, half))
            ni = ni_buf[:2 * count].reshape((2 * t, r1 - r0, half))
            np.add(er, pr, out=nr[:t])
            np.subtract(er, pr, out=nr[t:])
            np.add(ei, pi, out=ni[:t])
            np.subtract(ei, pi, out=ni[t:])
            cr, ci = nr, ni
        out_r[:, r0:r1] = cr[:, :, 0]
        out_i[:, r0:r1] = ci[:, :, 0]
    return out_r.reshape(N), out_i.reshape(N)


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


