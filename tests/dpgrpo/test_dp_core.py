"""DP pieces of mechanisms.dpgrpo.core (Algorithm 1, lines 2, 7, 8) against closed forms and exact tests.

Statistical tests use fixed seeds and exact null laws with a pre-declared false-failure rate ≤ 1e-6 per test
(two-sided; Bonferroni where several cells are tested), so a correct implementation fails with probability
at most 1e-6 over the choice of seed; the fixed seed makes each run deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binomtest, chi2, norm

from mechanisms.dpgrpo.core import clip_flat, poisson_coins, privatize
from privcheck.checks.statistics import binomial_pvalues

ALPHA = 1e-6


# --------------------------------------------------------------------------------------------- line 2

def test_coins_are_float64_uniform_below_q():
    a = poisson_coins(1000, 0.3, torch.Generator().manual_seed(9))
    b = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(9)) < 0.3
    assert a.dtype == torch.bool and a.shape == (1000,)
    assert torch.equal(a, b)


def test_coins_q_one_all_true():
    assert bool(poisson_coins(17, 1.0, torch.Generator().manual_seed(0)).all())


def test_coins_frequency_binomial():
    n, T, q = 500, 400, 0.13
    gen = torch.Generator().manual_seed(123)
    coins = torch.stack([poisson_coins(n, q, gen) for _ in range(T)])  # [T, n]
    total = int(coins.sum())
    assert binomtest(total, n * T, q).pvalue >= ALPHA
    # per slot: Binomial(T, q) for each of the n slots (Bonferroni over slots)
    per_slot = coins.sum(0).numpy()
    pv = np.array([binomtest(int(k), T, q).pvalue for k in per_slot])
    assert pv.min() >= ALPHA / n


@pytest.mark.parametrize("axis", ["slots", "rounds"])
def test_coins_pairwise_independence(axis):
    # disjoint pairs (slot 2j, slot 2j+1) in each round, or (round 2s, round 2s+1) for each slot; under
    # independence the joint cell law is ((1−q)², (1−q)q, q(1−q), q²); per-cell exact binomial tests,
    # Bonferroni over the 4 cells.
    n, T, q = 400, 400, 0.3
    gen = torch.Generator().manual_seed(77)
    coins = torch.stack([poisson_coins(n, q, gen) for _ in range(T)]).to(torch.int64)
    if axis == "slots":
        a, b = coins[:, 0::2], coins[:, 1::2]
    else:
        a, b = coins[0::2, :], coins[1::2, :]
    cell = (2 * a + b).flatten()
    counts = np.bincount(cell.numpy(), minlength=4)
    probs = np.array([(1 - q) ** 2, (1 - q) * q, q * (1 - q), q * q])
    assert binomial_pvalues(counts, probs).min() >= ALPHA / 4


def test_coins_depend_only_on_generator():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    torch.manual_seed(0)
    a = poisson_coins(50, 0.5, g1)
    torch.manual_seed(1)
    b = poisson_coins(50, 0.5, g2)
    assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------- line 7

def test_clip_scales_long_vectors_to_C_keeping_direction():
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(1000, dtype=torch.float64, generator=gen) * 5  # norm ≈ 158
    C = 1.7
    out = clip_flat(v, C)
    norm_v = math.sqrt(sum(x * x for x in v.tolist()))
    assert torch.linalg.vector_norm(out).item() <= C * (1 + 1e-15)
    assert torch.linalg.vector_norm(out).item() == pytest.approx(C, rel=1e-14)
    torch.testing.assert_close(out, v * (C / norm_v), rtol=1e-14, atol=0)


def test_clip_leaves_short_vectors_unchanged():
    v = torch.tensor([0.3, -0.4], dtype=torch.float64)  # norm 0.5
    assert torch.equal(clip_flat(v, 1.0), v)
    assert torch.equal(clip_flat(v, 0.5), v)  # norm == C: factor 1


def test_clip_hand_example():
    v = torch.tensor([3.0, 4.0], dtype=torch.float64)  # norm 5 → times 1/5
    torch.testing.assert_close(clip_flat(v, 1.0), torch.tensor([0.6, 0.8], dtype=torch.float64), rtol=1e-15, atol=0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_non_finite_becomes_zero(bad, dtype):
    v = torch.tensor([1.0, bad, 2.0], dtype=dtype)
    out = clip_flat(v, 1.0)
    assert out.dtype == dtype
    assert torch.equal(out, torch.zeros(3, dtype=dtype))


def test_clip_overflowing_norm_becomes_zero():
    v = torch.tensor([1e200, 1e200], dtype=torch.float64)  # ‖v‖² overflows float64
    assert torch.equal(clip_flat(v, 1.0), torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_zero_stays_zero(dtype):
    out = clip_flat(torch.zeros(5, dtype=dtype), 1.0)
    assert torch.equal(out, torch.zeros(5, dtype=dtype)) and not bool(torch.isnan(out).any())


def test_clip_float32_huge_entries_use_float64_norm():
    # ‖(1e30, 1e30, 1e30, 1e30)‖ = 2e30, whose square 4e60 overflows float32 (max ≈ 3.4e38)
    v = torch.full((4,), 1e30, dtype=torch.float32)
    out = clip_flat(v, 1.0)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((4,), 0.5, dtype=torch.float32), rtol=1e-6, atol=0)


def test_clip_infinite_C_only_nonprivate():
    v = torch.tensor([30.0, 40.0], dtype=torch.float64)
    assert torch.equal(clip_flat(v, math.inf, nonprivate=True), v)
    assert torch.equal(clip_flat(torch.tensor([1.0, math.nan]), math.inf, nonprivate=True), torch.zeros(2))


# --------------------------------------------------------------------------------------------- line 8

def test_privatize_sigma_zero_exact():
    S = torch.tensor([25.0, 50.0, -75.0, 2.5], dtype=torch.float64)
    out = privatize(S, 0.0, 1.0, 0.25, 100, torch.Generator().manual_seed(0), nonprivate=True)
    # q·n = 25 (not the number of records that contributed): exact quotients
    assert torch.equal(out, torch.tensor([1.0, 2.0, -3.0, 0.1], dtype=torch.float64))
    out_inf = privatize(S, 0.0, math.inf, 0.25, 100, torch.Generator(), nonprivate=True)
    assert torch.equal(out_inf, out)


def test_privatize_noise_law():
    # residual R = ĝ·q·n − S must be N(0, (σC)²) per coordinate.
    # Variance: (N−1)s²/(σC)² ~ χ²_{N−1}; accept inside the central 1 − 1e-6 interval. With N = 200,000 the
    # interval is about ±1.6 % of the variance, so σ instead of σC (C = 2.5) or a wrong divisor is caught.
    # Mean: √N·mean/(σC) ~ N(0, 1); accept |z| ≤ Φ⁻¹(1 − 5e-7) ≈ 4.89. Total false-failure rate ≤ 2e-6
    # (1e-6 per statistic).
    N, sigma, C, q, n = 200_000, 0.8, 2.5, 0.2, 150
    gen = torch.Generator().manual_seed(2024)
    S = torch.linspace(-50, 50, N, dtype=torch.float64)
    g_hat = privatize(S, sigma, C, q, n, gen)
    R = (g_hat * (q * n) - S).numpy()
    s2 = R.var(ddof=1)
    stat = (N - 1) * s2 / (sigma * C) ** 2
    lo, hi = chi2.ppf(ALPHA / 2, N - 1), chi2.ppf(1 - ALPHA / 2, N - 1)
    assert lo <= stat <= hi, f"noise std {math.sqrt(s2)} vs σC = {sigma * C}"
    z = math.sqrt(N) * R.mean() / (sigma * C)
    assert abs(z) <= norm.ppf(1 - ALPHA / 2)


def test_privatize_divisor_is_public_q_n():
    # with σ tiny, ĝ ≈ S/(q·n) regardless of how many records contributed to S (m = q·n = 10)
    S = torch.tensor([3.0, 0.0], dtype=torch.float64)  # e.g. a sum of 3 unit contributions
    out = privatize(S, 1e-12, 1.0, 0.1, 100, torch.Generator().manual_seed(1))
    torch.testing.assert_close(out, torch.tensor([0.3, 0.0], dtype=torch.float64), rtol=0, atol=1e-10)


def test_privatize_uses_dedicated_generator_and_dtype():
    S = torch.zeros(1000, dtype=torch.float32)
    state = torch.get_rng_state()
    a = privatize(S, 1.0, 1.0, 0.5, 10, torch.Generator().manual_seed(3))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is not touched
    b = privatize(S, 1.0, 1.0, 0.5, 10, torch.Generator().manual_seed(3))
    assert a.dtype == torch.float32 and torch.equal(a, b)
    # z is drawn as randn on S's dtype with the generator, scaled by σC before dividing by q·n
    z = torch.randn(1000, dtype=torch.float32, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, z / 5.0, rtol=1e-6, atol=0)
    c = privatize(S, 1.0, 1.0, 0.5, 10, torch.Generator().manual_seed(4))
    assert not torch.equal(a, c)


def test_privatize_fresh_noise_each_call():
    gen = torch.Generator().manual_seed(8)
    S = torch.zeros(100, dtype=torch.float64)
    assert not torch.equal(privatize(S, 1.0, 1.0, 1.0, 1, gen), privatize(S, 1.0, 1.0, 1.0, 1, gen))


def test_clip_is_bit_identical_to_the_tensor_transcription():
    """clip_flat against the rule written as one tensor expression, x·where(‖x‖ > C, C/‖x‖, 1) in float64 cast
    back (torch forms C/‖x‖ as reciprocal times C), zero for a non-finite norm: the same bits for float32, float64
    and bfloat16 vectors across scales, lengths and clip norms (seeded)."""
    def transcription(v, C):
        x = v.to(torch.float64)
        norm = torch.linalg.vector_norm(x)
        factor = torch.where(norm > C, C / norm, torch.ones_like(norm)) if math.isfinite(C) else torch.ones_like(norm)
        return torch.where(torch.isfinite(norm), (x * factor).to(v.dtype), torch.zeros_like(v))

    def bits(t):
        return t.view({torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}[t.dtype])

    gen = torch.Generator().manual_seed(7)
    Cs = [1e-6, 0.3, 1.0, 5.0, 1e25] + [float(c) for c in torch.rand(5, generator=gen, dtype=torch.float64) * 10]
    compared = 0
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        vectors = [(torch.randn(n, generator=gen, dtype=torch.float64) * scale).to(dtype)
                   for scale in (1e-30, 1e-3, 0.3, 1.0, 7.0, 1e20, 1e30) for n in (1, 2, 64, 8192)]
        vectors += [torch.zeros(3, dtype=dtype), torch.tensor([-0.0, 0.0], dtype=dtype),
                    torch.tensor([math.nan, 1.0], dtype=dtype), torch.tensor([math.inf, 1.0], dtype=dtype)]
        for v in vectors:
            for C in Cs:
                assert torch.equal(bits(clip_flat(v, C)), bits(transcription(v, C))), (dtype, v[:3], C)
                compared += 1
            assert torch.equal(bits(clip_flat(v, math.inf, nonprivate=True)), bits(transcription(v, math.inf)))
    assert compared == 3 * 32 * len(Cs)
