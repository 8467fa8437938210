"""Result records returned by the selection mechanisms (frozen; arrays are read-only).

Every result states the randomness mode it was produced with and whether it may be released as a private
output (`privacy_release`: True only for OS-entropy randomness and a private mechanism). Index
conventions (shared by every mechanism, documented in docs/selection.md):

* `indices[p]` is the 0-based position of the selected candidate in prompt p's (Phase-2) list;
* `__all__ = ["FRESH_PI0", "HALT_FALLBACK", "RejectionResult", "SelectionResult", "frozen_array"]

FRESH_PI0 = -1` means "the fallback fired and the caller must return a fresh π0 sample"
  (PrivITP/ITP with fallback "fresh_pi0");
* `halting_times[p]` is the 1-based acceptance round t of ITP/PrivITP, and `HALT_FALLBACK = 0` encodes
  t = ⊥ (nothing accepted); the matching accounting call uses `halting_time=None`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privcheck.accounting.records import AccountingRecord

__all__ = ["FRESH_PI0", "HALT_FALLBACK", "RejectionResult", "SelectionResult", "frozen_array"]

FRESH_PI0 = -1
HALT_FALLBACK = 0


def frozen_array(x, dtype=None) -> np.ndarray:
    """A read-only copy of `x` (results are frozen: a caller cannot edit a released output in place)."""
    a = np.array(x, dtype=dtype, copy=True)
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class SelectionResult:
    """Output of BoN or PrivBoN for a batch of prompts.

    `record` is the per-query accounting record (None for the non-private BoN). For PrivBoN its `value` is
    the ε charged to each prompt (the same for every prompt), and `details` add `queries` (= prompts),
    `composition` ("basic") and `total_epsilon` (the basic-composition total over the batch).
    """

    mechanism: str
    indices: np.ndarray
    record: AccountingRecord | None
    randomness_mode: str | None
    privacy_release: bool

    @property
    def prompts(self) -> int:
        return int(self.indices.shape[0])

    @property
    def epsilon_per_prompt(self) -> float | None:
        return None if self.record is None else self.record.value

    @property
    def epsilon_total(self) -> float | None:
        return None if self.record is None else self.record.details["total_epsilon"]


@dataclass(frozen=True)
class RejectionResult:
    """Output of ITP or PrivITP for a batch of prompts.

    * `indices`: selected position in the Phase-2 list, or `FRESH_PI0` (-1) for the "fresh_pi0" fallback
      ("last_candidate" gives n-1, "uniform_candidate" a uniform position);
    * `halting_times`: 1-based acceptance round, `HALT_FALLBACK` (0) when nothing was accepted;
    * `accepted`: halting_times > 0;
    * `lambda_tilde`: PrivITP's released noisy normalisation λ̃ (for ITP, the non-private λ̂);
    * `threshold_width`: c = βM per prompt (PrivITP: `PrivITPParams.threshold_width(λ̃)`);
    * `records`: one ex-post record per prompt (`epsilon(PrivITPEvent(...))`) (None for ITP, or with `account=False`).
    """

    mechanism: str
    indices: np.ndarray
    halting_times: np.ndarray
    accepted: np.ndarray
    lambda_tilde: np.ndarray
    threshold_width: np.ndarray
    fallback: str
    records: tuple[AccountingRecord, ...] | None
    randomness_mode: str | None
    privacy_release: bool

    @property
    def prompts(self) -> int:
        return int(self.indices.shape[0])

    @property
    def epsilons(self) -> np.ndarray | None:
        """Per-prompt ex-post ε (ε1 + ε2) from the records, or None when accounting was skipped."""
        return None if self.records is None else np.array([r.value for r in self.records])
