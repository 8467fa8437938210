"""Record-level and whole-step checks of DP-SGD / DP-GRPO training (docs/checks.md, docs/dpgrpo.md): the public
entry point. The checks live in modules by job and are re-exported here, so `privcheck.checks.training` keeps
every name it had:

- `privcheck.checks.common`: `SuiteBindings`, `DropoutEnabled`, `assert_no_dropout` and the result wrapper;
- `privcheck.checks.dpsgd`: generic DP-SGD checks (V2, V3, V5, V6, V9, V10, V11, `accountant_agreement`);
- `privcheck.checks.whole_step`: generic whole-step checks driving the user's real training step;
- `privcheck.checks.grpo`: GRPO-specific checks (V1, V4, V7, V8) and the self-check V12 `accountant_reference`;
- `privcheck.checks.catalogue`: `DPSGD_CHECKS`, `GRPO_CHECKS`, `CHECKS` (the full user-facing catalogue),
  `SELF_CHECKS`, `run_suite`, and V13 `precision_preflight`;
- `privcheck.checks.precision`: `PRECISIONS` and the tolerance table of every check.

Every check takes a `SuiteBindings` (user-supplied callables and fixtures; every field optional) and a
`precision` (None → `bindings.precision` → "float64") and returns one `CheckResult` of suite "dpgrpo" with that
precision recorded (V13, `precision_preflight`, returns one per rerun check, named
`precision_preflight.<precision>.<check>`):

- a binding the check needs is missing → status "skipped" with the names of the missing fields (never "pass");
- a binding cannot show what the check needs (`privcheck.errors.CannotObserve`) → status "fail" with
  "cannot observe <what>: <reason>"; any other exception of a bound callable → status "error" naming the binding
  and the function that raised;
- otherwise "pass"/"fail" from the comparison with an *independent* reference (closed form, an independent
  transcription of the paper's equations, privcheck's PLD for the user's accountant, or the published Table VI /
  VII values), under the tolerance each check's docstring states and justifies for the precision.

This package never imports `mechanisms` (dependencies flow audits → mechanisms → privcheck) and imports torch
lazily, inside functions, so `privcheck.accounting` keeps working without torch.

Binding signatures (all tensors 1-D flat float vectors unless stated):

=========================  ===========================================================================
field                      signature
=========================  ===========================================================================
sample                     ``sample(n, q) -> BoolTensor[n]`` (the trainer's own coins generator)
advantages                 ``advantages(rewards: Tensor[G]) -> Tensor[G]`` (eq. (2))
prompt_loss                ``prompt_loss(logp[G,L], ref_logp[G,L], adv[G], mask[G,L], beta) -> scalar``
token_logprobs             ``token_logprobs(model, prompt_ids[P], completion_ids[G,L]) -> Tensor[G,L]``
record_gradient            ``record_gradient(item) -> Tensor[p]`` (unclipped)
record_loss_and_grad       ``record_loss_and_grad(item, chunk_size | None, C) -> (loss, grad, clipped)``
                           (clipped = the production contribution of `item` at clip norm C with that chunking)
contributions              ``contributions(items) -> list[Tensor[p]]`` (clipped, production path)
clipped_sum                ``clipped_sum(items, C) -> Tensor[p]`` (all present and sampled, no noise/division)
privatize                  ``privatize(S, *, sigma, C, q, n) -> Tensor[p]`` ((S + z)/(q·n))
noisy_update               ``noisy_update(items, *, sigma, C, q, n) -> Tensor[p]``
private_update/flat_update ``f(params: Tensor[p]) -> Tensor[p]`` (parameters after one step, see V4)
clip                       ``clip(v, C) -> Tensor``
make_randomness            ``make_randomness(seed=None, release=False) -> handle`` with ``handle.sample_coins(n,
                           q)``, ``handle.privatize(S, *, sigma, C, q, n)`` and ``handle.privacy_release: bool``
epsilon_pld / epsilon_rdp  ``f(q, sigma, T, delta) -> float | object with .value`` (RDP: optional
                           ``.details["order"]``; V12 self-check only)
accountant_event           the user's run as a ``PoissonGaussianEvent`` or ``CompositionHistory`` (q, σ, T)
delta / user_epsilon       the user's δ; ``user_epsilon`` a float, a record with ``.value``, or ``() -> float``:
                           the ε the user's own accountant reports (``accountant_agreement``)
sampling_scheme            the scheme the loop was observed to iterate (``ObservedScheme`` of
                           ``privcheck.integrations.sampling_scheme``): poisson_sampling reports it and its figures
whole_step                 a ``privcheck.checks.whole_step.WholeStepBindings`` (the whole-step checks)
precision                  "float64" | "float32" | "bfloat16": the trainer's arithmetic (selects tolerances)
calibrate_sigma            ``calibrate_sigma(q, T, delta, target_eps) -> float | object with .value``
=========================  ===========================================================================

Fixtures: ``items`` (≥ 3 base records; V3 uses the first 5), ``additions`` (real records for V3),
``make_gradient_record(v)``, ``perturb(item)`` (V6), ``constant_items`` ((all-correct, all-wrong) versions of one
record, V7), ``reference_record_gradient`` (``item -> Tensor`` with LoRA at the reference, V7), ``chunk_item``
(a record with G = 8, V8), ``initial_params`` (V4), ``model`` and ``logprob_cases`` (V1), metadata ``C``,
``q``, ``n``, ``sigma``, ``dim``, ``G``, ``beta``.
"""

from __future__ import annotations

from privcheck.checks.catalogue import (
    CHECKS,
    DPSGD_CHECKS,
    GRPO_CHECKS,
    PREFLIGHT_CHECKS,
    PREFLIGHT_PRECISIONS,
    PREFLIGHT_TOLERANCES,
    SELF_CHECKS,
    WHOLE_RUN_CHECKS,
    WHOLE_STEP_CHECKS,
    check_names,
    precision_preflight,
    run_suite,
)
from privcheck.checks.common import SUITE, DropoutEnabled, SkipCheck, SuiteBindings, assert_no_dropout
from privcheck.checks.dpsgd import (
    check_accountant_agreement,
    check_clip_contract,
    check_fresh_randomness,
    check_noise_calibration,
    check_poisson_sampling,
    check_public_normalisation,
    check_record_isolation,
    check_sensitivity_add_remove,
)
from privcheck.checks.grpo import (
    check_accountant_reference,
    check_chunk_identity,
    check_constant_reward_groups,
    check_loss_reference,
    check_nonprivate_equivalence,
)
from privcheck.checks.precision import PRECISIONS, TOLERANCES, resolve_precision, tolerances

__all__ = ["CHECKS", "DPSGD_CHECKS", "GRPO_CHECKS", "PRECISIONS", "PREFLIGHT_CHECKS", "PREFLIGHT_PRECISIONS",
           "PREFLIGHT_TOLERANCES", "SELF_CHECKS", "SUITE", "TOLERANCES", "WHOLE_RUN_CHECKS", "WHOLE_STEP_CHECKS",
           "DropoutEnabled", "SkipCheck", "SuiteBindings", "assert_no_dropout", "check_accountant_agreement",
           "check_accountant_reference", "check_chunk_identity", "check_clip_contract",
           "check_constant_reward_groups", "check_fresh_randomness", "check_loss_reference", "check_names",
           "check_noise_calibration", "check_nonprivate_equivalence", "check_poisson_sampling",
           "check_public_normalisation", "check_record_isolation", "check_sensitivity_add_remove",
           "precision_preflight", "resolve_precision", "run_suite", "tolerances"]
