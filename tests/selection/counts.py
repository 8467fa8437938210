"""Monte-Carlo acceptance tests with a pre-declared false-failure rate.

`assert_counts_match(counts, probs)` runs, for each of the K cells, the exact two-sided binomial test of
"count_k ~ Binomial(N, p_k)": p-value = min(1, 2·min(P[X ≤ count_k], P[X ≥ count_k])). Doubling the smaller
tail is conservative, so under the null hypothesis P(p-value ≤ a) ≤ a for every a. The test fails when some
cell has p-value < α/K (Bonferroni), so by the union bound a correct sampler fails with probability at most
α = 1e-6 per call. All samplers use fixed seeds, so a passing run passes deterministically; the bound says
how unlikely it was to pick a seed that fails a correct implementation. Cells with p_k = 0 require count 0.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2_contingency

from privcheck.checks.statistics import binomial_pvalues

ALPHA = 1e-6


def assert_counts_match(counts, probs, alpha: float = ALPHA) -> None:
    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    assert counts.shape == probs.shape
    assert abs(probs.sum() - 1.0) < 1e-9, f"law does not sum to 1: {probs.sum()}"
    pvals = binomial_pvalues(counts, probs)
    worst = int(np.argmin(pvals))
    n = counts.sum()
    assert pvals[worst] >= alpha / probs.size, (
        f"cell {worst}: count {counts[worst]} of {n} (freq {counts[worst] / n:.6g}) vs p = {probs[worst]:.6g}, "
        f"p-value {pvals[worst]:.3g} < {alpha / probs.size:.3g}")


def assert_same_distribution(counts_a, counts_b, alpha: float = ALPHA) -> None:
    """Two-sample chi-square test of homogeneity (asymptotic level α); empty cells in both are dropped."""
    table = np.array([counts_a, counts_b])
    table = table[:, table.sum(axis=0) > 0]
    pvalue = chi2_contingency(table).pvalue
    assert pvalue >= alpha, f"samplers disagree: chi-square p-value {pvalue:.3g} < {alpha}"


def outcome_counts(indices, n: int) -> np.ndarray:
    """Counts of indices 0..n−1 followed by the count of the fallback index −1 (last cell)."""
    idx = np.asarray(indices)
    counts = np.bincount(idx[idx >= 0], minlength=n)
    return np.append(counts, np.count_nonzero(idx < 0))
