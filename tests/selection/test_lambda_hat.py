"""λ̂ solver against the reference values O-1 (docs/selection.md) and a brute-force root finder, and the
invariants proved in docs/selection.md (bounds, equivariance, monotonicity, sensitivity) as hypothesis
properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import brentq

from mechanisms.selection import lambda_hat

# O-1 (docs/selection.md reference values): exact values, tolerance 1e-12.
O1 = [
    ("O-1a", [0.1, 0.4, 0.45, 0.9], 0.1, 0.5),
    ("O-1b", [0.2, 0.8, 0.9], 0.1, 0.7),
    ("O-1c", [0.0, 1.0], 1.0, -0.5),
    ("O-1d", [0.0, 0.25, 0.5, 0.75, 1.0], 0.05, 0.75),   # tie at the boundary
    ("O-1e", [0.3] * 5, 0.2, 0.1),
]


@pytest.mark.parametrize("case,scores,beta,expected", O1, ids=[c[0] for c in O1])
def test_reference_values_o1(case, scores, beta, expected):
    assert abs(lambda_hat(scores, beta) - expected) <= 1e-12


def test_batch_of_reference_rows_matches_each_row():
    # the O-1a/b/d rows padded to a common width would change n, so batch rows of equal length instead
    rows = np.array([[0.1, 0.4, 0.45, 0.9], [0.9, 0.45, 0.4, 0.1], [0.3, 0.3, 0.3, 0.3]])
    got = lambda_hat(rows, 0.1)
    assert got.shape == (3,)
    assert abs(got[0] - 0.5) <= 1e-12 and abs(got[1] - 0.5) <= 1e-12
    # equal scores: (1/n)·Σ relu((0.3 − λ)/β) = (0.3 − λ)/β = 1  ⇒  λ = 0.3 − β
    assert abs(got[2] - 0.2) <= 1e-12


def reference_root(s: np.ndarray, beta: float) -> float:
    """Brute force: the root of (1/n)·Σ relu((s_i − λ)/β) − 1 by Brent's method on a bracket where the
    function changes sign (−1 at λ = max s; > 0 at λ = max s − nβ − 1)."""
    n = s.size
    f = lambda lam: np.maximum((s - lam) / beta, 0.0).mean() - 1.0  # noqa: E731
    return brentq(f, s.max() - n * beta - 1.0, s.max(), xtol=1e-15, rtol=1e-15, maxiter=500)


score_lists = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=40)
betas = st.floats(1e-3, 2.0)
TOL = 1e-9   # float64 cumulative sums of ≤ 40 values in [−3, 3]: actual errors are ~1e-15


@given(score_lists, betas)
def test_matches_brute_force_root(scores, beta):
    s = np.array(scores)
    assert abs(lambda_hat(s, beta) - reference_root(s, beta)) <= TOL


@given(score_lists, betas)
def test_bounds(scores, beta):
    s = np.array(scores)
    lam = lambda_hat(s, beta)
    lower = max(s.mean() - beta, s.max() - s.size * beta)
    assert lower - TOL <= lam <= s.max() - beta + TOL


@given(score_lists, betas, st.floats(-5.0, 5.0))
def test_translation_equivariance(scores, beta, a):
    s = np.array(scores)
    assert abs(lambda_hat(s + a, beta) - (lambda_hat(s, beta) + a)) <= TOL


@given(st.data(), score_lists, betas)
def test_monotone_and_one_lipschitz(data, scores, beta):
    s = np.array(scores)
    up = np.array(data.draw(st.lists(st.floats(0.0, 0.5), min_size=s.size, max_size=s.size)))
    bigger = s + up
    assert lambda_hat(s, beta) <= lambda_hat(bigger, beta) + TOL
    # sensitivity: |λ̂(s) − λ̂(s′)| ≤ ‖s − s′‖∞ for an arbitrary perturbation
    d = np.array(data.draw(st.lists(st.floats(-0.3, 0.3), min_size=s.size, max_size=s.size)))
    other = s + d
    assert abs(lambda_hat(s, beta) - lambda_hat(other, beta)) <= np.abs(d).max() + TOL


@given(score_lists, betas, st.floats(0.0, 1.0))
def test_sensitivity_is_tight_for_a_uniform_shift(scores, beta, delta):
    s = np.array(scores)
    assert abs(lambda_hat(s + delta, beta) - lambda_hat(s, beta) - delta) <= TOL


def test_vectorised_rows_agree_with_single_rows_and_permutations():
    rng = np.random.default_rng(11)
    s = rng.random((50, 33))
    batch = lambda_hat(s, 0.03)
    for p in range(50):
        assert abs(batch[p] - reference_root(s[p], 0.03)) <= TOL
        assert abs(lambda_hat(rng.permutation(s[p]), 0.03) - batch[p]) <= 1e-12
