"""Exact two-sided binomial p-values, shared by the Monte-Carlo checks (`privcheck.checks.statistics`) and the
verdict rules that re-derive them from an artifact (`privcheck.artifacts.verdicts`)."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

__all__ = ["binomial_pvalues"]


def binomial_pvalues(counts, probs) -> np.ndarray:
    """Per cell k, min(1, 2·min(P[X ≤ count_k], P[X ≥ count_k])) for X ~ Binomial(Σ counts, p_k) (conservative)."""
    counts = np.asarray(counts, dtype=np.int64)
    probs = np.clip(np.asarray(probs, dtype=np.float64), 0.0, 1.0)
    n = int(counts.sum())
    lower = binom.cdf(counts, n, probs)
    upper = binom.sf(counts - 1, n, probs)
    return np.minimum(1.0, 2.0 * np.minimum(lower, upper))
