"""The radix-2 FFT behind the certified PLD: its proven error bound holds against exact DFTs computed in Arb.

The exact transform of the float input is computed in Arb (O(N²) sums at 200 bits, an independent method), and
the float result must lie within `fft_error_bound`; the bound must also be informative (far below the data).
"""

from __future__ import annotations

import numpy as np
import pytest
from flint import arb, ctx

from privcheck.numerics import fft as bfft


def _exact_dft_error(xr: np.ndarray, xi: np.ndarray, yr: np.ndarray, yi: np.ndarray) -> arb:
    N = len(xr)
    with ctx.workprec(200):
        two_pi = 2 * arb.pi()
        cos = [(two_pi * j / N).cos() for j in range(N)]
        sin = [(two_pi * j / N).sin() for j in range(N)]
        total = arb(0)
        for k in range(N):
            re, im = arb(0), arb(0)
            for j in range(N):
                c, s = cos[(j * k) % N], sin[(j * k) % N]
                # x_j · e^{−2πijk/N} = (xr + i xi)(c − i s)
                re += arb(float(xr[j])) * c + arb(float(xi[j])) * s
                im += arb(float(xi[j])) * c - arb(float(xr[j])) * s
            dr, di = re - arb(float(yr[k])), im - arb(float(yi[k]))
            total += dr * dr + di * di
        return total.sqrt()


@pytest.mark.parametrize("n, kind", [(4, "uniform"), (6, "spiky"), (7, "uniform"), (8, "tiny")])
def test_forward_error_is_within_the_proven_bound(n, kind):
    N = 1 << n
    rng = np.random.default_rng(n)
    if kind == "uniform":
        xr, xi = rng.random(N), rng.random(N)
    elif kind == "spiky":
        xr, xi = np.where(rng.random(N) < 0.1, 1.0, 1e-12), np.zeros(N)
    else:
        xr, xi = rng.random(N) * 1e-200, rng.random(N) * 1e-200
    yr, yi = bfft.fft(xr, xi)
    err = _exact_dft_error(xr, xi, yr, yi)
    top = float(max(np.max(np.abs(xr)), np.max(np.abs(xi))))   # scaled: squares of 1e-200 would underflow
    norm = top * float(np.sqrt(np.sum((xr / top) ** 2 + (xi / top) ** 2)))
    bound = bfft.fft_error_bound(n, norm * (1 + 1e-12))
    assert err < bound, f"error {err} above the proven bound {bound}"
    assert bound < arb(1e-13) * norm * (1 << n), "the bound is vacuous"


@pytest.mark.parametrize("n, pos, neg", [(6, 5, 0), (7, 1, 0), (7, 3, 4), (8, 0, 9), (8, 20, 13), (6, 16, 16)])
def test_short_support_levels_stay_within_the_proven_bound(n, pos, neg):
    """Inputs zero outside [N − neg, N) ∪ [0, pos) (zero-padded masses, band-limited spectra): the first levels
    are formed directly (`fft._first_level`), and the result must still lie within the bound of the full FFT."""
    N = 1 << n
    rng = np.random.default_rng(100 + n + pos + neg)
    xr, xi = np.zeros(N), np.zeros(N)
    xr[:pos], xi[:pos] = rng.standard_normal(pos), rng.standard_normal(pos)
    if neg:
        xr[N - neg:], xi[N - neg:] = rng.standard_normal(neg), rng.standard_normal(neg)
    yr, yi = bfft.fft(xr, xi)
    err = _exact_dft_error(xr, xi, yr, yi)
    bound = bfft.fft_error_bound(n, float(np.sqrt(np.sum(xr ** 2 + xi ** 2))) * (1 + 1e-12))
    assert err < bound, f"error {err} above the proven bound {bound}"


def test_skipped_levels_with_leading_support_are_bit_identical():
    """Support [0, pos) only: the skipped butterflies add exact zeros, so the result equals the full
    radix-2 computation, every level computed by butterflies, bit for bit."""
    n, pos = 12, 300
    N = 1 << n
    rng = np.random.default_rng(7)
    xr, xi = np.zeros(N), np.zeros(N)
    xr[:pos], xi[:pos] = rng.random(pos), rng.random(pos)
    yr, yi = bfft.fft(xr, xi)
    # the same transform with every level computed: one stage at a time from level 1
    wre, wim = bfft.twiddles(n)
    ar, ai, L = xr.reshape(1, N), xi.reshape(1, N), 1
    while L < N:
        M = N // L
        step = N // (2 * L)
        tr, ti = wre[::step][:L, None], wim[::step][:L, None]
        er, ei, orr, oi = ar[:, :M // 2], ai[:, :M // 2], ar[:, M // 2:], ai[:, M // 2:]
        pr, pi = tr * orr - ti * oi, tr * oi + ti * orr
        ar, ai = np.vstack([er + pr, er - pr]), np.vstack([ei + pi, ei - pi])
        L *= 2
    assert np.array_equal(yr, ar.reshape(N)) and np.array_equal(yi, ai.reshape(N))


def _every_level(xr: np.ndarray, xi: np.ndarray, n: int):
    """The radix-2 transform level by level over the whole array, every level by butterflies (the reference)."""
    N = 1 << n
    wre, wim = bfft.twiddles(n)
    ar, ai, L = xr.reshape(1, N), xi.reshape(1, N), 1
    while L < N:
        M = N // L
        step = N // (2 * L)
        tr, ti = wre[::step][:L, None], wim[::step][:L, None]
        er, ei, orr, oi = ar[:, :M // 2], ai[:, :M // 2], ar[:, M // 2:], ai[:, M // 2:]
        pr, pi = tr * orr - ti * oi, tr * oi + ti * orr
        ar, ai = np.vstack([er + pr, er - pr]), np.vstack([ei + pi, ei - pi])
        L *= 2
    return ar.reshape(N), ai.reshape(N)


@pytest.mark.parametrize("block", [1, 16, 256, 1 << 16])
@pytest.mark.parametrize("pos,neg", [(4096, 0), (300, 0), (5, 7), (0, 40)])
def test_levels_run_on_blocks_of_residues_bit_identical(monkeypatch, block, pos, neg):
    """`fft._levels` runs the levels on one block of row residues mod L₀ at a time: the same float operations on
    the same operands, so every block size gives the level-by-level result bit for bit (dense, leading and
    band-limited supports; blocks of one residue up to the whole array)."""
    monkeypatch.setattr(bfft, "_BLOCK", block)
    n = 12
    N = 1 << n
    rng = np.random.default_rng(11)
    xr, xi = np.zeros(N), np.zeros(N)
    xr[:pos], xi[:pos] = rng.standard_normal(pos), rng.random(pos)
    if neg:
        xr[N - neg:], xi[N - neg:] = rng.random(neg), rng.standard_normal(neg)
    yr, yi = bfft.fft(xr, xi)
    if neg == 0:        # leading support only: the skipped levels add exact zeros, so all levels agree bit for bit
        rr, ri = _every_level(xr, xi, n)
        assert np.array_equal(yr, rr) and np.array_equal(yi, ri)
    monkeypatch.setattr(bfft, "_BLOCK", N)       # one block: the whole array level by level
    wr, wi = bfft.fft(xr, xi)
    assert np.array_equal(yr, wr) and np.array_equal(yi, wi)


def test_inverse_recovers_the_input_and_matches_numpy():
    rng = np.random.default_rng(1)
    x = rng.random(1 << 12)
    yr, yi = bfft.fft(x, np.zeros_like(x))
    ref = np.fft.fft(x)
    assert np.max(np.abs(yr - ref.real)) < 1e-9 and np.max(np.abs(yi - ref.imag)) < 1e-9
    br, bi = bfft.ifft(yr, yi)
    assert np.max(np.abs(br - x)) < 1e-12 and np.max(np.abs(bi)) < 1e-12


def test_twiddle_error_bound_covers_the_stored_twiddles():
    n = 10
    wr, wi = bfft.twiddles(n)
    N = 1 << n
    beta = bfft.twiddle_error()
    with ctx.workprec(200):
        worst = arb(0)
        for j in range(0, N // 2, 7):
            angle = 2 * arb.pi() * j / N
            d = ((arb(float(wr[j])) - angle.cos()) ** 2 + (arb(float(wi[j])) + angle.sin()) ** 2).sqrt()
            worst = worst.max(d)
    assert worst < beta


@pytest.mark.parametrize("N", [0, 3, 6, 1 << 27])
def test_bad_lengths_are_refused(N):
    with pytest.raises(ValueError, match="power of two"):
        bfft.length_log2(N)
