"""Score preparation shared by every selection mechanism: validation and clipping to the public range.

Guarantee: the returned scores lie in the public range [r_lo, r_hi]. Clipping x ↦ min(max(x, r_lo), r_hi)
is 1-Lipschitz, so a score sensitivity before clipping stays at most that sensitivity after it
(docs/selection.md, "Setting and public constants"). The range is a public constant supplied by the caller
and never derived from the scores: a range read off the data would leak it.

Assumptions: the caller's scores are the reward model's outputs on candidates drawn from the public base
policy π0; the library cannot check the claimed sensitivity Δ.

    prepare_scores(scores, r_lo, r_hi, clip=True):
        x ← float64 view of scores, shape [prompts, n] (a 1-D array is one prompt)
        reject non-real dtypes (complex, bool, object, strings),
        empty input, NaN and ±inf                                 (InvalidParameter "scores")
        if any x outside [r_lo, r_hi]:
            clip=True  → a clipped private copy (the caller's array is never modified)
            clip=False → InvalidParameter naming the range
        return x read-only

The per-prompt vector check and the independent-batch check of PrivITP's two phases live here too, so that
every mechanism and law validates its inputs the same way.
"""

from __future__ import annotations

import math

import numpy as np

from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["as_score_matrix", "check_independent", "is_one_prompt", "per_prompt_values", "prepare_scores",
           "score_range"]


def score_range(r_lo, r_hi) -> tuple[float, float]:
    """Validated public range (r_lo < r_hi, both finite)."""
    lo, hi = v.finite("r_lo", r_lo), v.finite("r_max", r_hi)
    if not lo < hi:
        raise InvalidParameter("r_max", r_hi, f"(r_lo, inf) with r_lo = {lo}")
    return lo, hi


def is_one_prompt(scores, name: str = "scores") -> bool:
    """True for a 1-D score vector (one prompt); the input is validated first (a ragged list or a complex array
    is refused with InvalidParameter instead of failing inside numpy)."""
    return v.real_array(name, scores).ndim == 1


def as_score_matrix(scores, name: str = "scores") -> np.ndarray:
    """float64 array of shape [prompts, n] with prompts ≥ 1, n ≥ 1 and finite entries (no range check).

    No copy is made when the input already is a float64 array; the result is a read-only view.
    """
    return _matrix(scores, name)[0]


def _matrix(scores, name: str) -> tuple[np.ndarray, float, float]:
    x = v.real_array(name, scores)    # a complex array would otherwise lose its imaginary part silently
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2:
        raise InvalidParameter(name, f"array of shape {x.shape}",
                               "a 1-D array [n] or a 2-D array [prompts, n] of finite reals")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise InvalidParameter(name, f"array of shape {x.shape}", "at least one prompt and n >= 1 candidates")
    # min/max propagate NaN and expose ±inf: two reductions instead of an isfinite temporary.
    lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InvalidParameter(name, "array containing NaN or inf", "finite real numbers")
    view = x.view()
    view.flags.writeable = False
    return view, lo, hi


def prepare_scores(scores, r_lo, r_hi, clip: bool = True, name: str = "scores") -> np.ndarray:
    """Validate and clip scores to the public range [r_lo, r_hi] (see the module docstring).

    Returns a read-only float64 array of shape [prompts, n]. When every score is already in range and the
    input is float64, this is a view of the caller's array (no copy); otherwise it is a private copy.
    """
    lo, hi = score_range(r_lo, r_hi)
    if not isinstance(clip, (bool, np.bool_)):
        raise InvalidParameter("clip", clip, "True or False")
    x, smin, smax = _matrix(scores, name)
    if smin >= lo and smax <= hi:
        return x
    if not clip:
        bad = smin if smin < lo else smax
        raise InvalidParameter(name, f"array with a score {bad!r} outside the range",
                               f"[{lo}, {hi}] (the public score range; clipping is disabled)")
    out = np.clip(x, lo, hi)  # a fresh array: the caller's scores are never modified
    out.flags.writeable = False
    return out


def per_prompt_values(name: str, value, prompts: int) -> np.ndarray:
    """A scalar or a length-`prompts` vector of finite reals, as a float64 vector (one value per prompt)."""
    arr = v.real_array(name, value)
    if arr.ndim == 0:
        arr = np.full(prompts, float(arr))
    if arr.shape != (prompts,) or not np.all(np.isfinite(arr)):
        raise InvalidParameter(name, value, f"a finite real or a vector of {prompts} finite reals")
    return arr


def check_independent(phase1, phase2) -> None:
    """PrivITP's Phase 2 must run on a fresh candidate batch, never on Phase 1's: reject aliasing inputs.

    Reusing the Phase-1 candidates would make the Phase-2 outcome depend on the scores behind λ̃ a second
    time, which the per-query guarantee does not cover (docs/selection.md, "PrivITP").
    """
    if phase1 is phase2:
        raise InvalidParameter("phase2_scores", "the same object as phase1_scores",
                               "scores of a fresh, independent Phase-2 batch (a different array)")
    if isinstance(phase1, np.ndarray) and isinstance(phase2, np.ndarray):
        try:
            shared = np.shares_memory(phase1, phase2, max_work=1 << 20)
        except np.exceptions.TooHardError:  # undecided: fail closed
            shared = True
        if shared:
            raise InvalidParameter("phase2_scores", "an array sharing memory with phase1_scores",
                                   "scores of a fresh, independent Phase-2 batch (separate memory)")
