"""Audits that cannot see must say so (docs/audits.md, "When the audit cannot see").

A canary audit whose canaries never reached what it reads would still produce a report, with ε_lower = 0 ("no
evidence") and an AUROC near 1/2, which reads like a pass. These checks run on the auditor's log before any score is
frozen and refuse such a run with `privcheck.errors.CanariesNotObserved`, naming what was not observed and the likely
cause. They read only the log's shape and the trainer's own reports: which rounds were logged, the realised
inclusion bits of the diagnostics lines, the pre-clip norms the trainer reported for the canaries it included, and
whether any U_t[J] is nonzero. None reads S, so the verdict does not depend on the membership.

Used by the DP-GRPO gradient and input-space audits (`audits.dpgrpo.gradient_canary`, `audits.dpgrpo.input_report`) and
by the DP-SGD gradient-log audit of the Opacus hook (`audits.gradient_log`).
"""

from __future__ import annotations

import math
import os

import numpy as np

from privcheck.errors import CanariesNotObserved
from privcheck.inputs import read_input
from privcheck.integrations.auditor_log import check_log_path, parse_lines
from privcheck.integrations.canary_log import is_canary_log, parse_canary_log

__all__ = ["HINTS", "check_canaries_observed", "read_auditor_log"]

# The likely causes, per condition; each audit passes its own where the trainer side differs.
HINTS = {
    "no_log": "nothing was written: no step ran with the canary hooks installed",
    "no_rounds": "no step ran with the canary hooks installed",
    "no_inclusions": "the step that wrote U_t[J] did not report which canaries it included, so the audit cannot tell "
                     "that they entered it",
    "not_recognised": "the trainer included these canary slots without treating them as canaries",
}


def read_auditor_log(log_path, no_log: str = HINTS["no_log"]) -> list[dict]:
    """The log's entries, from either format: the binary canary log of the Opacus hook
    (`privcheck.integrations.canary_log`, recognised by its magic bytes) or JSON lines (the DP-GRPO trainer's
    hooks, or another hook writing the documented lines). CanariesNotObserved when the file does not exist (no step
    ever wrote to it); InvalidParameter naming `log_path` when it exceeds `privcheck.inputs.LIMITS["auditor_log"]`
    (checked before it is read) or is truncated or corrupt."""
    path = check_log_path(log_path)
    if not os.path.exists(path):
        raise CanariesNotObserved(f"the auditor log {path}", f"no such file; {no_log}")
    data = read_input(path, "auditor_log", "log_path")
    return parse_canary_log(data, path).entries() if is_canary_log(data) else parse_lines(data, path)


def _listed(pairs: list, total: int, unit: str) -> str:
    shown = ", ".join(str(p) for p in pairs[:6])
    return f"{shown}{', ...' if len(pairs) > 6 else ''} ({len(pairs)} of {total} {unit})"


def _positive_finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def check_canaries_observed(rounds: list[dict], diagnostics: list[dict], *, m: int, ids=None,
                            require_norms: bool = False, nonzero_u: bool = True, hints: dict | None = None
                            ) -> np.ndarray:
    """Refuse (CanariesNotObserved) a log in which the audit cannot see its m canaries; return each canary's number
    of logged inclusions.

    Required: at least one `round` line; for every logged round a `diagnostics` line whose `canary_included` holds m
    bits; at least one inclusion over all canaries and rounds; with `require_norms`, a finite positive pre-clip norm
    (`canary_pre_clip_norms`, keyed by the canary's index as a string or by its id in `ids`) for every included
    canary, which the trainer reports only for slots it treated as canaries; with `nonzero_u`, some nonzero U_t[J].
    `hints` overrides entries of `HINTS`."""
    hint = {**HINTS, **(hints or {})}
    if not rounds:
        raise CanariesNotObserved("a round line (U_t[J]) in the auditor log", hint["no_rounds"])
    by_round = {d.get("t"): d.get("diagnostics") or {} for d in diagnostics}
    counts = np.zeros(m, dtype=np.int64)
    missing, unrecognised, inclusions = [], [], 0
    ts = sorted(r.get("t") for r in rounds)
    for t in ts:
        d = by_round.get(t, {})
        bits = d.get("canary_included")
        if not isinstance(bits, list) or len(bits) != m or any(b not in (0, 1) for b in bits):
            missing.append(t)
            continue
        bits = np.asarray(bits, dtype=np.int64)
        counts += bits
        inclusions += int(bits.sum())
        if require_norms:
            norms = d.get("canary_pre_clip_norms") or {}
            for k in np.flatnonzero(bits).tolist():
                v = norms.get(str(k), norms.get(ids[k]) if ids is not None else None)
                if not _positive_finite(v):
                    unrecognised.append(f"canary {k} in round {t}")
    if missing:
        raise CanariesNotObserved(f"the realised inclusions of the {m} canaries in rounds "
                                  f"{_listed(missing, len(ts), 'logged rounds')}", hint["no_inclusions"])
    if unrecognised:
        raise CanariesNotObserved("the pre-clip norm of included canaries: "
                                  + _listed(unrecognised, inclusions, "inclusions"), hint["not_recognised"])
    if not counts.any():
        raise CanariesNotObserved("any canary in any round", f"no canary slot was included in any of the {len(ts)} "
                                  "logged rounds, so no score carries a canary's signal")
    if nonzero_u and all(float(u) == 0.0 for r in rounds for u in r.get("U") or []):
        raise CanariesNotObserved("a nonzero U_t[J]", f"every logged U_t[J] of the {len(ts)} rounds is exactly 0: "
                                  "neither noise nor any canary reached the reserved coordinates")
    return counts
