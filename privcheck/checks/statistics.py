"""Monte-Carlo agreement tests with a pre-declared false-failure rate.

`binomial_agreement(counts, probs, alpha)`: for each of the K cells, the exact two-sided binomial test of
count_k ~ Binomial(N, p_k), p-value = min(1, 2·min(P[X ≤ count_k], P[X ≥ count_k])) (conservative). The
check fails when some cell's p-value is below α/K (Bonferroni), so a correct sampler fails with probability
at most α. Cells with p_k = 0 require a count of 0.
"""

from __future__ import annotations

import numpy as np

from privcheck.numerics.binomial import binomial_pvalues

__all__ = ["DEFAULT_ALPHA", "binomial_agreement", "binomial_family", "binomial_pvalues"]

DEFAULT_ALPHA = 1e-6


def binomial_agreement(counts, probs, alpha: float = DEFAULT_ALPHA) -> dict:
    """A check dict (passed, observed, expected, tolerance, message) for Monte-Carlo counts vs an exact law."""
    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    if counts.shape != probs.shape or abs(probs.sum() - 1.0) > 1e-9:
        return {"passed": False, "observed": counts.tolist(), "expected": probs.tolist(), "tolerance": alpha,
                "message": f"shape mismatch or law not normalised (sum {probs.sum()})"}
    from privcheck.checks import judged

    pvals = binomial_pvalues(counts, probs)
    worst = int(np.argmin(pvals))
    n = int(counts.sum())
    out = judged({"kind": "binomial_cells", "trials": n, "alpha": alpha}, (counts / n).tolist(), probs.tolist(),
                 f"Bonferroni exact binomial, alpha={alpha}",
                 f"N={n}; worst cell {worst}: p-value {pvals[worst]:.3g} vs {alpha / probs.size:.3g}")
    if out["passed"] != bool(pvals[worst] >= alpha / probs.size):     # the rule is this test, re-applied
        raise AssertionError("binomial_cells rule disagrees with the test it records")
    return out


def binomial_family(tests, alpha: float) -> dict:
    """Exact two-sided binomial tests of (label, count, trials, p), Bonferroni at `alpha` over the family:
    {"report": {label: count, of, expected, p_value}, "failures": [...], "alpha_each", "worst": (p_value, label)}.
    A failure names the count, its expectation, the p-value and its bound."""
    import math

    tests = list(tests)
    alpha_each = alpha / max(1, len(tests))
    report, failures, worst = {}, [], (math.inf, None)
    for label, count, total, p in tests:
        pval = float(binomial_pvalues(np.array([count, total - count]), np.array([p, 1 - p]))[0])
        report[label] = {"count": count, "of": total, "expected": total * p, "p_value": pval}
        worst = min(worst, (pval, label))
        if pval < alpha_each:
            failures.append(f"{label}: {count} of {total} (expected {total * p:.4g}, p-value {pval:.3g}; "
                            f"bound: p-value ≥ {alpha_each:.3g})")
    return {"report": report, "failures": failures, "alpha_each": alpha_each, "worst": worst}
