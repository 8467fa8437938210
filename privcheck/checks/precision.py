"""Precision settings of the training checks: one tolerance table per precision (docs/checks.md, "Precision").

A precision names the arithmetic of the checked trainer, not of the checks (the references are float64):

- "float64": every tensor float64 (the reference fixtures). The tolerances are those each check's docstring
  states; they were chosen for float64 and are unchanged.
- "float32": parameters, gradients, clipping, noise and the update in float32. Unit roundoff u = 2^-24 ≈ 6.0e-8,
  machine epsilon 2u = 1.19e-7.
- "bfloat16": mixed precision, the convention of the precision preflight V13: *frozen* base weights in bfloat16,
  trainable parameters (LoRA), gradients, clip, noise and optimizer in float32. So every quantity a check compares
  is a float32 quantity except a model forward (V1's log-probabilities, V8's chunked gradients), where bfloat16's
  u = 2^-8 ≈ 3.9e-3 shows. A trainer that clips or adds noise *in* bfloat16 is outside this table.

`tolerances(precision)` returns, per check name, the keyword options that precision sets (a check absent from a
row takes no precision-dependent option: statistical checks, bit-identity checks and the accountant check are
the same at every precision). Each check takes `precision` (None → the bindings' `precision` → "float64") and an
explicit keyword option overrides the table. Why each entry holds, in short (the derivations are in
docs/checks.md):

- loss_reference `rtol` (|obs − ref| ≤ rtol·max(1, |ref|)): eq. (7) over G·L ≤ 56 terms, with exp and one
  division per row, accumulates ≲ 60u ≈ 4e-6 in float32 → 1e-5. bfloat16: the log-probabilities of a bfloat16
  forward are rounded to u_bf16 relative to their size → 2e-2 (≈ 5 u_bf16).
- clip_contract `norm_ratio` (‖clip(v)‖ ≤ C·(1 + tol)): ‖v‖ in float32 is within n·u (sequential) or
  (log₂n + 2)·u (pairwise) of the truth, the scale and the product add 2u: ≤ 3.9e-6 for n = 64 → 1e-5.
  `cosine` (cos(clip(v), v) ≥ 1 − tol): rounding each entry by ≤ u turns the direction by ≤ u, so 1 − cos ≤ u²
  ≈ 4e-15; 1e-10 keeps a margin and still catches any per-coordinate clip. `working_dtype`: the dtype a
  bit-identical inside-the-ball output may be rounded to.
- sensitivity_add_remove `tol` (‖Δ clipped sum‖/C ≤ 1 + tol): one float32 ulp is 1.2e-7, a sum of ≤ 30
  clipped vectors rounds each coordinate ≤ 30u → 1e-6 (V13's value).
- nonprivate_equivalence (max|Δθ| ≤ tol + param_ulps·eps·max|θ₀| + step_rtol·‖θ₁ − θ₀‖_∞): two float32 paths
  each round θ − lr·g once (≤ 1 ulp of |θ| each, so ≤ 2 ulp apart; 4 leaves a margin) and reassociate the loss
  sum (relative ≲ 1e-5 of the step; 1e-3 is generous yet 300× below the defects V4 exists for, which change
  the step by a factor, e.g. G).
- constant_reward_groups `retention_rtol`: the difference of two float32 sums, ≤ 1e-5·max(1, ‖·‖) (V13).
- chunk_identity `rel_tol` (relative ℓ2): float32 1e-5 (accumulation of ≤ 8 chunks), bfloat16 5e-2 (the
  chunked and unchunked forwards of a bfloat16 base differ by a few u_bf16; V13).
- public_normalisation `ulp_dtype`: the update's dtype, float32 below float64 (2 ulp of that dtype).
- the whole-step checks (step_sensitivity, step_public_outputs, step_noise, step_record_isolation,
  step_poisson_sampling) and the whole-run checks (run_*): the row of
  `privcheck.checks.whole_step.WHOLE_STEP_TOLERANCES` for the precision (record_rel, public_ulps, hat_multiple,
  eps; justified there and in docs/whole_step.md), read from that module.
"""

from __future__ import annotations

import types
from typing import Any, Mapping

from privcheck.errors import InvalidParameter

__all__ = ["DEFAULT_PRECISION", "PRECISIONS", "TOLERANCES", "resolve_precision", "tolerance", "tolerances"]

PRECISIONS = ("float64", "float32", "bfloat16")
DEFAULT_PRECISION = "float64"

_FLOAT64 = {
    "loss_reference": {"rtol": 1e-12},
    "clip_contract": {"norm_ratio": 1e-10, "cosine": 1e-12, "working_dtype": "float64"},
    "sensitivity_add_remove": {"tol": 1e-10},
    "nonprivate_equivalence": {"tol": 1e-12, "param_ulps": 0, "step_rtol": 0.0},
    "constant_reward_groups": {"retention_rtol": 1e-12},
    "chunk_identity": {"rel_tol": None},     # None: V8's float64 elementwise rtol 1e-10 / atol 1e-12
    "public_normalisation": {"ulp_dtype": "float64"},
}
_FLOAT32 = {
    "loss_reference": {"rtol": 1e-5},
    "clip_contract": {"norm_ratio": 1e-5, "cosine": 1e-10, "working_dtype": "float32"},
    "sensitivity_add_remove": {"tol": 1e-6},
    "nonprivate_equivalence": {"tol": 0.0, "param_ulps": 4, "step_rtol": 1e-3},
    "constant_reward_groups": {"retention_rtol": 1e-5},
    "chunk_identity": {"rel_tol": 1e-5},
    "public_normalisation": {"ulp_dtype": "float32"},
}
_BFLOAT16 = {**_FLOAT32, "loss_reference": {"rtol": 2e-2}, "chunk_identity": {"rel_tol": 5e-2}}


def _freeze(rows: dict) -> Mapping[str, Mapping[str, Any]]:
    return types.MappingProxyType({k: types.MappingProxyType(dict(v)) for k, v in rows.items()})


def _with_whole_step(precision: str, rows: dict) -> dict:
    """`rows` plus one row per whole-step check: that module's own table (an import of two light modules)."""
    try:
        from privcheck.checks import whole_step
    except ModuleNotFoundError as exc:
        if exc.name != "privcheck.checks.whole_step":
            raise
        return rows
    from privcheck.checks import whole_run  # the whole-run checks use the same table (docs/whole_run.md)

    row = whole_step.WHOLE_STEP_TOLERANCES[precision]
    return {**rows, **{name: row for name in (*whole_step.WHOLE_STEP_CHECKS, *whole_run.WHOLE_RUN_CHECKS)}}


TOLERANCES: Mapping[str, Mapping[str, Mapping[str, Any]]] = types.MappingProxyType(
    {p: _freeze(_with_whole_step(p, rows))
     for p, rows in (("float64", _FLOAT64), ("float32", _FLOAT32), ("bfloat16", _BFLOAT16))})


def _check_name(precision) -> str:
    if precision not in PRECISIONS:
        raise InvalidParameter("precision", precision, f"one of {PRECISIONS}")
    return precision


def tolerances(precision: str) -> Mapping[str, Mapping[str, Any]]:
    """Per check name, the keyword options `precision` sets (read-only)."""
    return TOLERANCES[_check_name(precision)]


def tolerance(precision: str, check: str, option: str, given: Any = None) -> Any:
    """`given` when not None, else the table's value of `option` for `check` at `precision`."""
    if given is not None:
        return given
    return tolerances(precision)[check][option]


def resolve_precision(precision: str | None, bindings: Any = None) -> str:
    """`precision`, else the bindings' declared `precision`, else "float64"; raises `InvalidParameter` for a
    name outside `PRECISIONS` (before any check runs)."""
    if precision is None:
        precision = getattr(bindings, "precision", None)
    if precision is None:
        precision = DEFAULT_PRECISION
    return _check_name(precision)
