"""`privcheck.numerics.band_dft`: the direct DFT on a few frequencies within its proven bound (exact DFT in Arb at
200 bits), and the band: off it, the exact spectrum is at most 2^{−1000/T} (checked against the certified
length-N FFT, whose own error bound is added)."""

from __future__ import annotations

import numpy as np
import pytest
from flint import acb, arb, ctx

from privcheck.numerics import band_dft as bd
from privcheck.numerics import fft as bfft


def _masses(S: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((2, S))
    x[0] = rng.random(S)
    x[1] = rng.random(S) * 0.5
    return x / x.sum(axis=1, keepdims=True)


def test_direct_dft_is_within_its_bound():
    n, S = 14, 700
    N = 1 << n
    x = _masses(S, 0)
    ks = np.array([0, 1, 5, 100, 4097, N // 2, N - 3])
    re, im = bd.dft_at(x, n, ks)
    bound = bd.dft_at_error(S, arb(1) * (1 + arb(2) ** -40))
    with ctx.workprec(200):
        for row in range(2):
            for a, k in enumerate(ks):
                total = acb(0)
                for j in range(S):
                    t = arb(-2 * ((j * int(k)) % N)) / N
                    total += arb(float(x[row, j])) * acb(t.cos_pi(), t.sin_pi())
                err = abs(total - acb(float(re[row, a]), float(im[row, a])))
                assert err < bound, (row, k, err, bound)


@pytest.mark.parametrize("T", [1000, 5000, 20000])
def test_off_the_band_the_exact_spectrum_is_below_the_threshold(T):
    """A smooth bump of 400 masses on N = 2^16: the band holds few frequencies, and every frequency off it has
    |X_k| + (the certified FFT's error bound) ≤ 2^{−1000/T}."""
    n, S = 16, 400
    N = 1 << n
    j = np.arange(S)
    bump = np.exp(-0.5 * ((j - S / 2) / 40.0) ** 2)
    x = np.vstack([bump / bump.sum(), 0.5 * bump / bump.sum()])
    keep = bd.band(x, n, T)
    assert keep is not None and len(keep) < N // 64
    xr, xi = np.zeros(N), np.zeros(N)
    xr[:S] = x[0]
    xi[:S] = x[1]
    Xr, Xi = bfft.fft(xr, xi)
    Rr, Ri = np.roll(Xr[::-1], 1), np.roll(Xi[::-1], 1)
    A = np.hypot((Xr + Rr) / 2, (Xi - Ri) / 2)
    B = np.hypot((Xi + Ri) / 2, (Rr - Xr) / 2)
    off = np.setdiff1d(np.arange(N), keep)
    err = float(bfft.fft_error_bound(n, float(np.sqrt(np.sum(xr ** 2 + xi ** 2))) * 1.001).upper()) * 2
    assert np.max(np.maximum(A[off], B[off])) + err <= 2.0 ** (-1000 / T)
    # and the band is not the whole circle: the frequencies next to 0 are kept
    assert 0 in keep and 1 in keep and N - 1 in keep


def test_band_declines_where_the_full_transform_is_cheaper():
    x = _masses(700, 1)          # white-noise masses: |X| stays far from 1 only barely at small T
    assert bd.band(x, 12, 10 ** 6) is None        # the coarse length would exceed N/4
