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
