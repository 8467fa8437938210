"""ITP (InferenceTimePessimism, Huang et al. 2025): the non-private χ²-regularised rejection sampler,
and the O(n log n) solver for its normalisation λ̂ that PrivITP's Phase 1 also uses.

Guarantee: NONE for `ITP.select` (every step is a deterministic or public-randomness function of the
private scores; results carry no record and `privacy_release=False`). For `lambda_hat` the library relies
on the invariants proved in docs/selection.md ("Proof notes: the normalisation λ̂"): bounds
max(s̄ − β, s_max − nβ) ≤ λ̂ ≤ s_max − β, translation equivariance, monotonicity, and hence
|λ̂(s) − λ̂(s′)| ≤ ‖s − s′‖_∞ ≤ Δ, the sensitivity that Phase 1 of PrivITP relies on.

Target: π_β(y) = π0(y)·relu((r(y) − λ)/β) with E_{π0}[relu((r − λ)/β)] = 1 (the maximiser of
E_π[r] − β·χ²(π‖π0) with χ² = ½E_{π0}[(π/π0 − 1)²]); λ̂ is the unique root of
(1/n)·Σ_i relu((s_i − λ)/β) = 1.

    lambda_hat(s[P, n], β):                                   # O(n log n) per prompt, vectorised
        sort each row descending; λ_k = (Σ_{j≤k} s_(j) − nβ)/k
        return λ_k at the first k with λ_k ≥ s_(k+1), or k = n
    ITP(β, r_max).select(s, rng, phase2_scores=None):
        λ̂ ← lambda_hat(clip(s)); candidates ← phase2_scores or s (ITP may reuse them)
        w_i = relu((s_i − λ̂)/β); M per the rule ("range": (r_max − λ̂)/β, "loose": 1 + (r_max − r_lo)/β,
        "max_weight": max_i w_i); accept the first i with U_i < min(1, w_i/M); else the fallback
        (FRESH_PI0 = −1: the caller draws a fresh π0 sample; or the last / a uniform candidate)
"""

from __future__ import annotations

import numpy as np

from mechanisms.selection.randomness import as_randomness
from mechanisms.selection.results import FRESH_PI0, HALT_FALLBACK, RejectionResult, frozen_array
from mechanisms.selection.scores import as_score_matrix, is_one_prompt, per_prompt_values, prepare_scores, score_range
from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["FALLBACKS", "ITP", "M_RULES", "fallback_indices", "itp_weights", "lambda_hat", "lambda_hat_matrix"]

M_RULES = ("range", "loose", "max_weight")
FALLBACKS = ("fresh_pi0", "last_candidate", "uniform_candidate")


def lambda_hat_matrix(s: np.ndarray, beta: float) -> np.ndarray:
    """λ̂ per row of an already validated float64 matrix [prompts, n] with β > 0 (no checks: the
    mechanisms' inner loop; `lambda_hat` is the validating entry point)."""
    prompts, n = s.shape
    desc = np.sort(s, axis=1)[:, ::-1]
    lam = np.cumsum(desc, axis=1)                                   # Σ_{j≤k} s_(j)
    lam -= n * beta
    lam /= np.arange(1, n + 1, dtype=np.float64)                    # λ_k
    stop = np.empty((prompts, n), dtype=bool)
    np.greater_equal(lam[:, :-1], desc[:, 1:], out=stop[:, :-1])   # λ_k ≥ s_(k+1) (ties allowed)
    stop[:, -1] = True                                              # k = n
    first = np.argmax(stop, axis=1)
    return lam[np.arange(prompts), first]


def lambda_hat(scores, beta):
    """λ̂ solving (1/n)·Σ_i relu((s_i − λ)/β) = 1 for each prompt.

    `scores`: a 1-D array (returns a float) or [prompts, n] (returns an array [prompts]); finite values.
    No clipping is applied here: mechanisms clip before calling it.
    """
    beta = v.positive("beta", beta)
    one_prompt = is_one_prompt(scores)
    lam = lambda_hat_matrix(as_score_matrix(scores), beta)
    return float(lam[0]) if one_prompt else lam


def itp_weights(scores, lambda_hat_value, beta) -> np.ndarray:
    """w_i = relu((s_i − λ)/β), with λ a scalar or one value per prompt; returns [prompts, n]
    (or [n] for 1-D scores)."""
    beta = v.positive("beta", beta)
    one_prompt = is_one_prompt(scores)
    s = as_score_matrix(scores)
    lam = per_prompt_values("lambda_hat", lambda_hat_value, s.shape[0])
    w = np.maximum((s - lam[:, None]) / beta, 0.0)
    return w[0] if one_prompt else w


def fallback_indices(fallback: str, accepted: np.ndarray, first: np.ndarray, n: int,
                     gen: np.random.Generator) -> np.ndarray:
    """Selected positions: the first acceptance, else the fallback's position (FRESH_PI0 = −1 for
    "fresh_pi0", n − 1 for "last_candidate", a uniform position for "uniform_candidate")."""
    if fallback == "fresh_pi0":
        other = np.full(first.shape, FRESH_PI0, dtype=np.int64)
    elif fallback == "last_candidate":
        other = np.full(first.shape, n - 1, dtype=np.int64)
    else:
        other = gen.integers(0, n, size=first.shape, dtype=np.int64)
    return np.where(accepted, first, other).astype(np.int64, copy=False)


class ITP:
    """Non-private InferenceTimePessimism. See the module docstring.

    `M`: "range" (default, (r_max − λ̂)/β, a bound on every weight since s ≤ r_max), "loose"
    (1 + (r_max − r_lo)/β, also a bound since λ̂ ≥ r_lo − β) or "max_weight" (max_i w_i, replication only:
    the arg-max is always accepted, so the fallback never fires).
    `fallback`: "fresh_pi0" (default; index FRESH_PI0 = −1), "last_candidate", "uniform_candidate".
    """

    def __init__(self, beta, r_max, r_lo=0.0, M: str = "range", fallback: str = "fresh_pi0", clip: bool = True):
        self.beta = v.positive("beta", beta)
        self.r_lo, self.r_max = score_range(r_lo, r_max)
        if M not in M_RULES:
            raise InvalidParameter("M", M, " or ".join(repr(m) for m in M_RULES))
        if fallback not in FALLBACKS:
            raise InvalidParameter("fallback", fallback, " or ".join(repr(f) for f in FALLBACKS))
        if not isinstance(clip, (bool, np.bool_)):
            raise InvalidParameter("clip", clip, "True or False")
        self.M, self.fallback, self.clip = M, fallback, bool(clip)

    def truncation(self, lam: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """M per prompt under the configured rule."""
        if self.M == "range":
            return (self.r_max - lam) / self.beta
        if self.M == "loose":
            return np.full(lam.shape, 1.0 + (self.r_max - self.r_lo) / self.beta)
        return weights.max(axis=1)

    def select(self, scores, rng=None, phase2_scores=None) -> RejectionResult:
        """λ̂ from `scores`, rejection sampling over `phase2_scores` (default: the same candidates)."""
        s = prepare_scores(scores, self.r_lo, self.r_max, clip=self.clip)
        lam = lambda_hat_matrix(s, self.beta)
        s2 = s if phase2_scores is None else prepare_scores(phase2_scores, self.r_lo, self.r_max,
                                                            clip=self.clip, name="phase2_scores")
        if s2.shape[0] != s.shape[0]:
            raise InvalidParameter("phase2_scores", f"array of shape {s2.shape}",
                                   f"{s.shape[0]} prompts (as many as scores)")
        rand = as_randomness(rng)
        w = np.maximum((s2 - lam[:, None]) / self.beta, 0.0)
        m = self.truncation(lam, w)
        accept_prob = np.zeros_like(w)
        np.divide(w, m[:, None], out=accept_prob, where=m[:, None] > 0)   # M = 0 only if every w = 0
        np.minimum(accept_prob, 1.0, out=accept_prob)
        accept = rand.generator.random(w.shape) < accept_prob
        first = np.argmax(accept, axis=1)
        accepted = accept[np.arange(w.shape[0]), first]
        idx = fallback_indices(self.fallback, accepted, first, w.shape[1], rand.generator)
        halting = np.where(accepted, first + 1, HALT_FALLBACK)
        return RejectionResult(mechanism="itp", indices=frozen_array(idx, np.int64),
                               halting_times=frozen_array(halting, np.int64), accepted=frozen_array(accepted),
                               lambda_tilde=frozen_array(lam), threshold_width=frozen_array(self.beta * m),
                               fallback=self.fallback, records=None, randomness_mode=rand.mode,
                               privacy_release=False)
