"""Canary audit hooks of the DP-GRPO trainer (docs/audits.md describes the audits that read them).

`AuditHooks(reserved, log_path, mask_reserved_for_real_records=False)` makes `DPTrainer` append, every round,
one JSON line to the auditor's private log:

    {"kind": "round", "t": t, "reserved": [j...], "U": [U_t[j]...], "sigma_C": σ·C, "divisor": q·(n + m_c)}

with U_t[J] = S_t[J] + z_t[J], the noisy sum on the reserved coordinates before the division. It is computed
from the released update as ĝ_t[J]·q·(n + m_c), so it is a post-processing of ĝ_t (inside the guarantee) and
never touches S_t or z_t on their own; it equals S_t[J] + z_t[J] up to one rounding of the multiplication
(exactly when the divisor is a power of two). Diagnostics, never used by the test statistic, go to separate
lines `{"kind": "diagnostics", "t": t, "diagnostics": {...}}`: realised inclusion of each canary slot,
canary pre-clip norms, the fraction of constant-reward canary groups, and the cross-talk S_real[J] of real
records on the reserved coordinates.

With `mask_reserved_for_real_records=True`, real records' gradients are zeroed on J before clipping (a fixed
per-record map, Corollary 2); canary records are never masked.

The log is written by `privcheck.integrations.auditor_log` (mode 0600, one append-mode write per line, so
concurrent lines are not interleaved; non-finite floats as the strings "nan", "inf", "-inf").
"""

from __future__ import annotations

import os

import torch

from privcheck.errors import InvalidParameter
from privcheck.integrations.auditor_log import LOG_MODE, append_line, read_log

__all__ = ["LOG_MODE", "AuditHooks", "read_log"]


class AuditHooks:
    """Reserved coordinates J (a 1-D LongTensor of distinct non-negative indices; bounds are checked against
    the ParamSpace dimension when a trainer binds the hooks), the auditor's private log path, and the masking
    option. The trainer calls `bind(dim)`, `mask(v)`, `log_round(...)` and `log_diagnostics(...)`."""

    def __init__(self, reserved, log_path, mask_reserved_for_real_records: bool = False):
        if (not isinstance(reserved, torch.Tensor) or reserved.dtype != torch.int64 or reserved.dim() != 1
                or reserved.numel() < 1):
            raise InvalidParameter("reserved", getattr(reserved, "shape", reserved),
                                   "a non-empty 1-D LongTensor of coordinate indices")
        reserved = reserved.detach().cpu().clone()
        if bool((reserved < 0).any()):
            raise InvalidParameter("reserved", reserved.tolist(), "non-negative coordinate indices")
        if torch.unique(reserved).numel() != reserved.numel():
            raise InvalidParameter("reserved", reserved.tolist(), "distinct coordinate indices")
        if not isinstance(log_path, (str, os.PathLike)) or not os.fspath(log_path):
            raise InvalidParameter("log_path", log_path, "a file path (the auditor's private log)")
        if not isinstance(mask_reserved_for_real_records, bool):
            raise InvalidParameter("mask_reserved_for_real_records", mask_reserved_for_real_records, "a bool")
        self.reserved = reserved
        self.log_path = os.fspath(log_path)
        self.mask_reserved_for_real_records = mask_reserved_for_real_records
        self.dim: int | None = None

    def bind(self, dim: int) -> None:
        """Check J against the flat dimension (InvalidParameter if an index is out of range)."""
        if int(self.reserved.max()) >= dim:
            raise InvalidParameter("reserved", self.reserved.tolist(), f"indices in [0, {dim}) (ParamSpace dimension)")
        self.dim = dim

    def mask(self, v: torch.Tensor) -> torch.Tensor:
        """The fixed per-record map v ↦ v with v[J] = 0 (a copy; v is not modified)."""
        out = v.clone()
        out[self.reserved.to(out.device)] = 0
        return out

    def reserved_values(self, v: torch.Tensor) -> list[float]:
        return [float(x) for x in v.detach()[self.reserved.to(v.device)].double().cpu().tolist()]

    # ---------------------------------------------------------------------------------- private log

    def _append(self, obj: dict) -> None:
        append_line(self.log_path, obj)

    def log_round(self, t: int, g_hat: torch.Tensor, sigma_C: float, divisor: float) -> dict:
        """Append U_t[J] = ĝ_t[J]·divisor (= S_t[J] + z_t[J]) with σ·C, the divisor and the round index."""
        U = [x * divisor for x in self.reserved_values(g_hat)]
        rec = {"kind": "round", "t": int(t), "reserved": self.reserved.tolist(), "U": U,
               "sigma_C": float(sigma_C), "divisor": float(divisor)}
        self._append(rec)
        return rec

    def log_diagnostics(self, t: int, diagnostics: dict) -> dict:
        """Append diagnostics (never used by the test statistic) under their own key."""
        rec = {"kind": "diagnostics", "t": int(t), "diagnostics": diagnostics}
        self._append(rec)
        return rec

