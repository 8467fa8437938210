"""The catalogue of training checks, the suite runner and the precision preflight V13 (docs/checks.md).

- `DPSGD_CHECKS`: generic DP-SGD checks, for any Poisson-sampled, clipped, Gaussian-noised trainer (example level
  as in Opacus, prompt level as in DP-GRPO): clip_contract, sensitivity_add_remove, poisson_sampling,
  record_isolation, public_normalisation, noise_calibration, fresh_randomness, accountant_agreement, then the
  whole-step checks of `privcheck.checks.whole_step` (`WHOLE_STEP_CHECKS`) and the whole-run checks of
  `privcheck.checks.whole_run` (`WHOLE_RUN_CHECKS`).
- `GRPO_CHECKS`: GRPO-specific checks: loss_reference, nonprivate_equivalence, constant_reward_groups,
  chunk_identity.
- `CHECKS`: the full user-facing catalogue, `DPSGD_CHECKS` then `GRPO_CHECKS`, in that order.
- `SELF_CHECKS`: checks of privcheck itself, not of the user's trainer: accountant_reference (V12, privcheck's
  accountant against the DP-GRPO paper's Table VI), run by privcheck's own dpgrpo verification suite.

`privcheck.checks.whole_step` must not import this module or `privcheck.checks.training` at its top (it does
not: it is self-contained), else importing it first would be an import cycle.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.checks import dpsgd, grpo, whole_run
from privcheck.checks.common import SuiteBindings, assert_no_dropout
from privcheck.checks.precision import resolve_precision, tolerances
from privcheck.errors import InvalidParameter

__all__ = ["CHECKS", "DPSGD_CHECKS", "GRPO_CHECKS", "PREFLIGHT_CHECKS", "PREFLIGHT_PRECISIONS", "PREFLIGHT_TOLERANCES",
           "SELF_CHECKS", "WHOLE_RUN_CHECKS", "WHOLE_STEP_CHECKS", "check_names", "precision_preflight", "run_suite"]

# generic DP-SGD checks that do not drive the whole step (the whole-step checks are appended on first access)
_DPSGD_PARTS: dict[str, Callable[..., CheckResult]] = {
    "clip_contract": dpsgd.check_clip_contract,
    "sensitivity_add_remove": dpsgd.check_sensitivity_add_remove,
    "poisson_sampling": dpsgd.check_poisson_sampling,
    "record_isolation": dpsgd.check_record_isolation,
    "public_normalisation": dpsgd.check_public_normalisation,
    "noise_calibration": dpsgd.check_noise_calibration,
    "fresh_randomness": dpsgd.check_fresh_randomness,
    "accountant_agreement": dpsgd.check_accountant_agreement,
}
GRPO_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "loss_reference": grpo.check_loss_reference,
    "nonprivate_equivalence": grpo.check_nonprivate_equivalence,
    "constant_reward_groups": grpo.check_constant_reward_groups,
    "chunk_identity": grpo.check_chunk_identity,
}
SELF_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "accountant_reference": grpo.check_accountant_reference,
}


def _whole_step_checks() -> dict[str, Callable[..., CheckResult]]:
    """`privcheck.checks.whole_step.WHOLE_STEP_CHECKS`; an empty dict only while that module does not exist (any
    other import failure propagates: a catalogue must never silently lose checks)."""
    try:
        from privcheck.checks import whole_step
    except ModuleNotFoundError as exc:
        if exc.name != "privcheck.checks.whole_step":
            raise
        return {}
    return dict(whole_step.WHOLE_STEP_CHECKS)


WHOLE_STEP_CHECKS: dict[str, Callable[..., CheckResult]] = _whole_step_checks()
WHOLE_RUN_CHECKS: dict[str, Callable[..., CheckResult]] = dict(whole_run.WHOLE_RUN_CHECKS)
DPSGD_CHECKS: dict[str, Callable[..., CheckResult]] = {**_DPSGD_PARTS, **WHOLE_STEP_CHECKS, **WHOLE_RUN_CHECKS}
CHECKS: dict[str, Callable[..., CheckResult]] = {**DPSGD_CHECKS, **GRPO_CHECKS}
if len(CHECKS) + len(SELF_CHECKS) != len({**CHECKS, **SELF_CHECKS}) or \
        len(DPSGD_CHECKS) != len(_DPSGD_PARTS) + len(WHOLE_STEP_CHECKS) + len(WHOLE_RUN_CHECKS) or \
        len(CHECKS) != len(DPSGD_CHECKS) + len(GRPO_CHECKS):
    raise RuntimeError("check names clash between the catalogues")


def check_names() -> tuple[str, ...]:
    """The names of `CHECKS`, in catalogue order."""
    return tuple(CHECKS)


def run_suite(bindings: SuiteBindings, precision: str | None = None, checks: Sequence[str] | None = None
              ) -> list[CheckResult]:
    """Run `checks` (names of `CHECKS` or `SELF_CHECKS`, in the given order; default: every check of `CHECKS`,
    in catalogue order) on `bindings` at `precision` (None → `bindings.precision` → "float64"). Each result
    carries `bindings.subject` (`CheckResult.verified`: the identity of the trainer it verified).

    Bad input (not a SuiteBindings, an unknown precision or check name) raises `InvalidParameter` and a model
    with dropout raises `DropoutEnabled`, before any check runs."""
    if not isinstance(bindings, SuiteBindings):
        raise InvalidParameter("bindings", type(bindings).__name__, "a SuiteBindings")
    precision = resolve_precision(precision, bindings)
    table = {**CHECKS, **SELF_CHECKS}
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in table]
    if unknown or (checks is not None and isinstance(checks, str)):
        raise InvalidParameter("checks", checks, f"a sequence of names among {tuple(table)}")
    from privcheck.artifacts.identity import stamp

    stamp((), bindings)                 # a malformed subject is refused before any check runs
    assert_no_dropout(bindings.model)
    return stamp([table[n](bindings, precision) for n in names], bindings)


# ----------------------------------------------------------------------------------------------- V13

PREFLIGHT_CHECKS = ("sensitivity_add_remove", "record_isolation", "constant_reward_groups", "chunk_identity",
                    "public_normalisation")
PREFLIGHT_PRECISIONS = ("float32", "bfloat16")
# V13's tolerances by their historical names, read from the precision table (docs/dpgrpo.md, "V13: precision
# preflight"): the base weights are in the named precision; LoRA, gradients, clip, noise and the update are
# float32 in both, so only V8's chunked-vs-unchunked gradient difference feels the bfloat16 base.
PREFLIGHT_TOLERANCES = {
    p: {"v3_ratio_minus_one": tolerances(p)["sensitivity_add_remove"]["tol"],
        "v7_retention_rtol": tolerances(p)["constant_reward_groups"]["retention_rtol"],
        "v8_rel": tolerances(p)["chunk_identity"]["rel_tol"],
        "v9_ulp_dtype": tolerances(p)["public_normalisation"]["ulp_dtype"]}
    for p in PREFLIGHT_PRECISIONS}
_V3_OPTIONS = ("seed", "n_base", "n_gradient_records", "clip_norms")


def _model_dtype_note(model, precision: str) -> str:
    """The model's dtypes must match `precision`: float32 trainable tensors, and frozen floating tensors in the
    base precision. Returns a note ("" or why nothing was verified); raises `InvalidParameter` on a mismatch."""
    if model is None:
        return "dtypes not verified (no model bound)"
    import torch

    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    if not params:
        return "dtypes not verified (model has no torch parameters)"
    trainable = {str(p.dtype).replace("torch.", "") for p in params if p.requires_grad}
    frozen = {str(p.dtype).replace("torch.", "") for p in params if not p.requires_grad and p.is_floating_point()}
    if trainable != {"float32"} or not frozen <= {precision}:
        raise InvalidParameter("precision", precision, f"the model's dtypes: trainable {sorted(trainable)} must be "
                               f"['float32'], frozen {sorted(frozen)} must be [{precision!r}]")
    return ""


def precision_preflight(b: SuiteBindings, precision: str, *, v3_options: dict | None = None) -> list[CheckResult]:
    """V13 `precision_preflight`: rerun V3, V6, V7, V8 and V9 on bindings built at a lower precision.

    `precision` is "float32" (everything float32) or "bfloat16" (base weights bfloat16; LoRA, gradients, clip,
    noise and optimizer float32); `b` must be bound to such a build (the model's dtypes are verified when
    `b.model` is a torch module). Tolerances: the precision's row of `privcheck.checks.precision` — V3 ratio
    ≤ 1 + 1e-6 (one float32 ulp is 1.2e-7); V6 bit identity; V7 exact zero advantages, bit-identical
    constant-group gradients, retention within 1e-5·max(1, ‖·‖) (float32 sums); V8 relative gradient difference
    ≤ 1e-5 (float32) or ≤ 5e-2 (bfloat16), with the clip-decision flips at the tested C reported; V9 bit
    identity across batch sizes and 2 float32 ulp. `v3_options` passes `seed`, `n_base`, `n_gradient_records`
    or `clip_norms` to V3 (its tolerance is the table's).

    Returns one `CheckResult` per check, named `precision_preflight.<precision>.<check>`, with `precision` set,
    so that they are never merged with the float64 results. Bad input raises `InvalidParameter` before any check
    runs; a model with dropout raises `DropoutEnabled`."""
    if precision not in PREFLIGHT_PRECISIONS:
        raise InvalidParameter("precision", precision, f"one of {PREFLIGHT_PRECISIONS}")
    v3_options = dict(v3_options or {})
    unknown = sorted(set(v3_options) - set(_V3_OPTIONS))
    if unknown:
        raise InvalidParameter("v3_options", unknown, f"keys among {_V3_OPTIONS}")
    if not isinstance(b, SuiteBindings):
        raise InvalidParameter("bindings", type(b).__name__, "a SuiteBindings")
    note = _model_dtype_note(b.model, precision)
    assert_no_dropout(b.model)
    results = [
        dpsgd.check_sensitivity_add_remove(b, precision, **v3_options),
        dpsgd.check_record_isolation(b, precision),
        grpo.check_constant_reward_groups(b, precision),
        grpo.check_chunk_identity(b, precision),
        dpsgd.check_public_normalisation(b, precision),
    ]
    out = []
    for r in results:
        message = f"{r.message}; {note}" if note else r.message
        out.append(dataclasses.replace(r, name=f"precision_preflight.{precision}.{r.name}", message=message,
                                       inputs={**r.inputs, "preflight_precision": precision}))
    return out
