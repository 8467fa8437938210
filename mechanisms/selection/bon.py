"""BoN: the non-private Best-of-N baseline.

Guarantee: NONE. The arg-max is a deterministic function of the private scores, so BoN is not
differentially private; its result carries `record=None` and `privacy_release=False`, and it must never
be released as a private output. It exists as the utility baseline of the benchmarks (it is not
scaling-monotone under a misspecified reward, Huang et al. 2025).

Assumptions: none (scores must be finite). Proofs and discussion: docs/selection.md.

    best_of_n(scores[P, n]):
        s ← validated scores (clipped to [r_lo, r_max] when a range is given)
        return argmax_i s[p, i] for every prompt p, ties to the lowest index
"""

from __future__ import annotations

import numpy as np

from mechanisms.selection.results import SelectionResult, frozen_array
from mechanisms.selection.scores import as_score_matrix, prepare_scores

__all__ = ["best_of_n"]


def best_of_n(scores, *, r_lo: float | None = None, r_max: float | None = None) -> SelectionResult:
    """Arg-max index per prompt (ties to the lowest index, as `np.argmax`); no privacy claim.

    With `r_max` given (and `r_lo`, default 0), the scores are first clipped to the public range, as the
    private mechanisms do; otherwise they are used as given (finite values required).
    """
    if r_max is None and r_lo is None:
        s = as_score_matrix(scores)
    else:
        s = prepare_scores(scores, 0.0 if r_lo is None else r_lo, r_max, clip=True)
    return SelectionResult(mechanism="bon", indices=frozen_array(np.argmax(s, axis=1), np.int64), record=None,
                           randomness_mode=None, privacy_release=False)
