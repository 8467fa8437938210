"""PrivBoN: private Best-of-N by Gumbel-max (= softmax = exponential mechanism).

Guarantee (proofs in docs/selection.md, "PrivBoN"): with scores clipped to the public range [r_lo, r_max]
and score sensitivity Δ ≤ r_max − r_lo, one query with n candidates and Gumbel scale σ is ε-DP with

    ε_BoN(n) = log(1 + (n−1)e^{R/σ}) − log(1 + (n−1)e^{(R−2Δ)/σ}) ≤ 2Δ/σ,   R = r_max − r_lo,

(mode "exact", the default) or the nominal ε = 2Δ/σ (mode "nominal", as in Bhattad & Ray Chowdhury).
The loss is the same for every output, so ex-post and ex-ante coincide. A batch of P prompts is P
queries; the record gives the per-query ε and the basic-composition total P·ε (certified sums).
The ε always comes from `privcheck.accounting.epsilon(PrivBoNEvent(...))`; this module never computes one.

Assumptions: Δ is a public claim about the reward model (not verified); r_lo, r_max, Δ, σ are public and
fixed before any score is seen; candidates are drawn from π0 independently of the data; noise is the
idealised real-valued Gumbel (numpy's sampler; the floating-point gap is discussed in docs/selection.md).

    PrivBoN(Δ, σ, r_max).select(scores[P, n], rng):
        s ← clip(scores, r_lo, r_max)                         # 1-Lipschitz: sensitivity stays Δ
        gumbel : i* = argmax_i (s_i + g_i),  g_i = −σ·log(−log U_i),  U_i ~ Unif(0, 1) open
        softmax: log p = s/σ − logsumexp(s/σ);  i* = inverse CDF of p at one uniform draw
        return i*[P], epsilon(PrivBoNEvent(Δ, σ, candidates=n, r_max, r_lo, mode)) (+ queries = P)

Sampler note: `numpy.random.Generator.gumbel` computes loc − scale·log(−log U) with U = 1 − next_double
in (0, 1] and rejects U = 1 (numpy/random/src/distributions/distributions.c, `random_gumbel`), so U lies
in the open interval (0, 1): it is exactly the Gumbel form above, with the U = 0 guard built in.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from flint import arb
from scipy.special import logsumexp

from mechanisms.selection.randomness import as_randomness
from mechanisms.selection.results import SelectionResult
from mechanisms.selection.scores import prepare_scores, score_range
from privcheck import validation as v
from privcheck.accounting import AccountingRecord, PrivBoNEvent, epsilon, privbon_sigma
from privcheck.accounting.selection import MAX_CANDIDATES, check_privbon_sigma, sensitivity_and_range
from privcheck.errors import InvalidParameter
from privcheck.numerics.certified import float_up

__all__ = ["MAX_PROMPTS", "MODES", "SAMPLERS", "PrivBoN"]

SAMPLERS = ("gumbel", "softmax")
# The most prompts one record composes: 2^53, the integers a float holds exactly (the record states P and P·ε).
MAX_PROMPTS = 2 ** 53
MODES = ("exact", "nominal")


class PrivBoN:
    """Private Best-of-N with public constants fixed at construction (see the module docstring).

    Parameters: `sensitivity` Δ in (0, r_max − r_lo]; `sigma` σ > 0 (Gumbel scale = softmax temperature);
    `r_max`, `r_lo` the public score range; `mode` "exact" (ε_BoN(n)) or "nominal" (2Δ/σ); `sampler`
    "gumbel" (default, fastest) or "softmax" (the same law: Gumbel-max samples the softmax); `clip` False
    makes out-of-range scores an error instead of clipping them.
    """

    def __init__(self, sensitivity, sigma, r_max, r_lo=0.0, mode: str = "exact", sampler: str = "gumbel",
                 clip: bool = True):
        self.r_lo, self.r_max = score_range(r_lo, r_max)
        self.sensitivity = sensitivity_and_range(sensitivity, self.r_lo, self.r_max)[0]   # Δ ≤ r_max − r_lo, exactly
        self.sigma = check_privbon_sigma(sigma, self.sensitivity)                        # 2Δ/σ a float
        if mode not in MODES:
            raise InvalidParameter("mode", mode, "'exact' or 'nominal'")
        if sampler not in SAMPLERS:
            raise InvalidParameter("sampler", sampler, "'gumbel' or 'softmax'")
        if not isinstance(clip, (bool, np.bool_)):
            raise InvalidParameter("clip", clip, "True or False")
        self.mode, self.sampler, self.clip = mode, sampler, bool(clip)
        self.calibration: AccountingRecord | None = None
        self._max_candidates: int | None = None   # set by a tight calibration for n candidates
        self._records: dict[tuple[int, int], AccountingRecord] = {}

    @classmethod
    def from_epsilon(cls, sensitivity, epsilon, r_max, r_lo=0.0, *, candidates: int | None = None,
                     tight: bool = False, mode: str = "exact", sampler: str = "gumbel",
                     clip: bool = True) -> "PrivBoN":
        """σ from a target ε via `privbon_sigma`: 2Δ/ε (default, valid for every n), or with `tight=True`
        the smallest certified σ with ε_BoN(candidates; σ) ≤ ε (then `select` refuses more than
        `candidates` candidates per prompt, since ε_BoN increases in n)."""
        rec = privbon_sigma(sensitivity, epsilon, candidates=candidates, r_max=r_max, r_lo=r_lo, tight=tight)
        mech = cls(sensitivity, rec.value, r_max, r_lo, mode=mode, sampler=sampler, clip=clip)
        mech.calibration = rec
        if tight:
            mech._max_candidates = int(rec.inputs["candidates"])
        return mech

    def public_constants(self) -> dict:
        return {"sensitivity": self.sensitivity, "sigma": self.sigma, "r_lo": self.r_lo, "r_max": self.r_max,
                "mode": self.mode, "sampler": self.sampler, "clip": self.clip}

    def event(self, candidates: int) -> PrivBoNEvent:
        """The accounting event of one query with `candidates` candidates."""
        return PrivBoNEvent(self.sensitivity, self.sigma, candidates=candidates, r_max=self.r_max, r_lo=self.r_lo,
                            mode=self.mode)

    def epsilon_record(self, candidates: int, prompts: int = 1) -> AccountingRecord:
        """The accounting record of `prompts` queries with `candidates` candidates each (cached)."""
        key = (v.count("candidates", candidates, maximum=MAX_CANDIDATES),
               v.count("prompts", prompts, maximum=MAX_PROMPTS))
        rec = self._records.get(key)
        if rec is None:
            base = epsilon(self.event(key[0]))
            total = float_up(arb(key[1]) * arb(base.value))     # basic composition of P equal charges, rounded up
            rec = dataclasses.replace(base, details={
                **base.details, "queries": key[1], "per_query_epsilon": base.value, "composition": "basic",
                "total_epsilon": total, "sampler": self.sampler, "clip": self.clip})
            self._records[key] = rec
        return rec

    def select(self, scores, rng=None) -> SelectionResult:
        """One PrivBoN query per prompt: `scores` is [prompts, n] (1-D = one prompt).

        `rng`: None (fresh OS entropy), a `NumpyRandomness` from `make_rng`, a `RandomnessPolicy`, a seed, or a
        numpy Generator.
        Returns `SelectionResult(indices[P], record, randomness_mode, privacy_release)`.
        """
        s = prepare_scores(scores, self.r_lo, self.r_max, clip=self.clip)
        prompts, n = s.shape
        if self._max_candidates is not None and n > self._max_candidates:
            raise InvalidParameter("scores", f"array with n = {n} candidates",
                                   f"n <= {self._max_candidates} (σ was calibrated tightly for that n)")
        rand = as_randomness(rng)
        if self.sampler == "gumbel":
            idx = _gumbel_argmax(s, self.sigma, rand.generator)
        else:
            idx = _softmax_inverse_cdf(s, self.sigma, rand.generator)
        idx.flags.writeable = False
        return SelectionResult(mechanism="privbon", indices=idx, record=self.epsilon_record(n, prompts),
                               randomness_mode=rand.mode, privacy_release=rand.privacy_release)


def _gumbel_argmax(s: np.ndarray, sigma: float, gen: np.random.Generator) -> np.ndarray:
    """argmax_i (s_i + g_i), g ~ Gumbel(0, σ) i.i.d.; one temporary array, added in place."""
    noisy = gen.gumbel(0.0, sigma, size=s.shape)
    noisy += s
    return np.argmax(noisy, axis=1).astype(np.int64, copy=False)


def _softmax_inverse_cdf(s: np.ndarray, sigma: float, gen: np.random.Generator) -> np.ndarray:
    """Sample i with probability softmax(s/σ)_i: log-probabilities by logsumexp, then inverse CDF.

    The chosen index is the smallest i with CDF_i > u·CDF_n (u ~ Unif[0, 1)), so a zero-probability
    candidate (an empty CDF step) is never chosen; the rare float case u·CDF_n ≥ CDF_n is mapped to the
    last candidate of positive probability.
    """
    z = s / sigma
    z -= logsumexp(z, axis=1, keepdims=True)
    np.exp(z, out=z)
    cdf = np.cumsum(z, axis=1, out=z)
    target = gen.random(s.shape[0]) * cdf[:, -1]
    above = cdf > target[:, None]
    idx = np.argmax(above, axis=1).astype(np.int64, copy=False)
    for p in np.flatnonzero(~above[:, -1]):
        steps = np.flatnonzero(np.diff(cdf[p], prepend=0.0) > 0)
        idx[p] = steps[-1]
    return idx
