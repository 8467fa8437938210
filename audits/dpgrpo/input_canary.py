"""One-run audit of DP-GRPO with input-space binary canaries, scored end to end.

The protocol, the measured figures and the limits are in docs/audits.md ("Input-space binary canaries"). The
statistics, the sealed membership, the privacy plan, the report and the private-directory handling are those of
the gradient-canary audit (`audits.dpgrpo.gradient_canary`); only the canaries, the score and the power pilot differ.
The parts live in one module each:

* `audits.dpgrpo.input_prompts` — public prompts, secret labels, the public binary-choice pretraining;
* `audits.dpgrpo.input_scoring` — the canaries, the scorer's view of the trained policy, the log-odds score;
* `audits.dpgrpo.input_training` — training with appended canary records, the hooks' per-canary facts;
* `audits.dpgrpo.input_pilot` — the public power pilot;
* `audits.dpgrpo.input_noiseless` — the public pilot retrained without noise: does the noiseless guard hold?
* `audits.dpgrpo.input_design` — the pre-registered design;
* `audits.dpgrpo.input_report` — scoring, reveal, test and diagnostics after training;
* this module — the end-to-end audit (`run_input_canary_audit`), which re-exports the public names above.

What `run_input_canary_audit` guarantees, in protocol order:

1. **Public base policy.** The preset's public SFT pretraining, then a second public phase on binary-choice
   examples mixed with the preset's addition examples (`BinaryPretraining`). Both run before any record is read and
   the summary goes into the report.
2. **Canaries.** Canary i is an ordinary `Record`: a distinct public prompt of `prompt_digits` random digits plus
   "=", with a **secret** reference answer ℓ_i uniform on {"0", "1"} drawn by `draw_labels` from its own generator
   (OS entropy; a derived seed in tests), never from S. The verifier is the preset's (reward 1 iff the completion is
   ℓ_i).
3. **Pre-registration.** S comes from `audits.canary.draw_membership`; S and the labels are committed with fresh
   salts (the label commitment uses the same byte layout, bit 1 ⇔ label "1"). The privacy plan is
   `audits.dpgrpo.gradient_canary.audit_plan`: n real records plus m canary slots, σ calibrated for the target ε at
   δ = 1/(10·(n + m)); the certified ε is the plan's and nothing else. A public **pilot** fixes (k₊, k₋) through
   `audits.statistics.power.plan` before training.
4. **Training.** The m canary records are appended after the n real slots; (q, σ, T, δ) are unchanged and the
   trainer's public divisor is the plan's q·(n + m). The trainer's privacy claim must report the audit's plan, the
   canary slots and the commitment, and the plan's ε must not change when the canaries are removed — the audit stops
   otherwise. `AuditHooks` write the per-round diagnostics to the auditor's private log.
5. **Score.** `LogOddsDelta` on the trained policy against its public base; scores are frozen before S is revealed.
6. **Reveal, test, diagnostics.** S is revealed against the frozen scores and both commitments are verified;
   `audits.statistics.one_run.from_scores` applies the pre-registered rule. The diagnostics (realised inclusions,
   present canaries never sampled, the fraction of constant-reward canary groups, pre-clip norms, the base policy's mass
   on the two options, AUROC) are never read by the statistic.

Scope: input-space canaries go through the whole mechanism (rollouts, verifier, advantages, loss, clipping, noise,
accounting). Their power at tiny-cpu scale is small (the pilot's plan says so and the report carries it); a zero
bound is "no evidence", never "private". Assumptions: the trainer honours the canary slots and the hooks; the claim
is the per-slot add/remove (ε, δ) of the plan. A seeded run (`seed=`) is a test, not an audit release.
"""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audits import canary as cn
from audits.dpgrpo.gradient_canary import (
    LOG_NAME,
    PLAN_SIMS,
    AuditPreset,
    audit_config,
    audit_plan,
    check_audit_size,
    check_before_commit,
    check_counts,
    check_fresh_out,
    check_seed,
    check_trainer_cls,
    epsilon_with_canaries,
    final_private_path,
    membership_seed,
    private_files,
    resolve_preset,
    write_audit_files,
)
from audits.dpgrpo.input_design import (
    CANARY_TYPE,
    SCORE_NAME,
    InputAuditDesign,
    design_input_audit,
)
from audits.dpgrpo.input_pilot import Pilot, run_pilot
from audits.dpgrpo.input_prompts import (
    DEFAULT_PROMPT_DIGITS,
    MAX_PROMPT_DIGITS,
    OPTIONS,
    BinaryPretraining,
    build_base_policy,
    derived_seed,
    draw_labels,
    label_bits,
    label_seed,
    public_prompts,
)
from audits.dpgrpo.input_report import analyse
from audits.dpgrpo.input_scoring import (
    InputCanary,
    LogOddsDelta,
    PolicyView,
    input_canaries,
    score_model_view,
)
from audits.dpgrpo.input_training import CanaryTelemetry, train_with_canaries
from audits.statistics.report import AuditReport
from mechanisms.dpgrpo.pipeline.run import torch_threads
from privcheck import validation as val
from privcheck.errors import InvalidParameter

__all__ = ["CANARY_TYPE", "DEFAULT_PRETRAINING", "OPTIONS", "SCORE_NAME", "BinaryPretraining", "CanaryTelemetry",
           "InputAuditDesign", "InputAuditResult", "InputCanary", "LogOddsDelta", "Pilot", "PolicyView", "analyse",
           "draw_labels", "input_canaries", "label_bits", "label_seed", "public_prompts", "run_input_canary_audit",
           "run_pilot", "score_model_view"]


DEFAULT_PRETRAINING = BinaryPretraining()


@dataclass(frozen=True, eq=False)
class InputAuditResult:
    """Everything one audit produced: the report, its design and plans, the frozen scores, the revealed S and
    labels, and the trained policy (`model`, the audited mechanism's output) with its tokenizer."""

    report: AuditReport
    design: InputAuditDesign
    scores: np.ndarray
    membership: np.ndarray
    labels: tuple[str, ...]
    scores_frozen_at: int
    membership_revealed_at: int
    epsilon_with_canaries: float
    privacy_claim: dict
    log_path: Path
    artifact: Path | None
    document: dict | None
    timings: dict
    model: object = field(repr=False, default=None)
    tokenizer: object = field(repr=False, default=None)

    @property
    def eps_lower(self) -> float:
        return self.report.result["eps_lower"]

    def headline(self) -> dict:
        """The CLI's top-level keys: the one-run headline plus the planned bound."""
        return {**self.report.headline(), "planned_eps_lower": self.report.power["planned_eps_lower"]}


def run_input_canary_audit(*, preset="tiny-cpu", canaries: int, out_dir=None, seed: int | None = None,
                           rounds: int | None = None, q: float | None = None, confidence: float = 0.95,
                           n_real: int | None = None, target_epsilon: float | None = None, C: float | None = None,
                           pilot_canaries: int | None = None, prompt_digits: int = DEFAULT_PROMPT_DIGITS,
                           pretraining: BinaryPretraining | None = DEFAULT_PRETRAINING, plan_sims: int = PLAN_SIMS,
                           trainer_cls=None, before_commit=None) -> InputAuditResult:
    """Run the pre-registered one-run audit of DP-GRPO with `canaries` input-space binary canaries (module
    docstring).

    `preset`: a registered name (`tiny-cpu`) or an `AuditPreset`; `rounds`, `q`, `n_real`, `target_epsilon`, `C`
    override its T, q, n, ε and C. `pilot_canaries`: public canaries of the power pilot (default `canaries`).
    `prompt_digits`: random digits per canary prompt. `pretraining`: the public binary-choice phase, or None to
    skip it (then most canary groups have constant reward). `out_dir`: where `audit.json` (sealed, atomic) and
    `private/` (auditor and pilot logs, the reveal; mode 0600) go; None keeps the private files in a fresh
    temporary directory and writes no artifact. `seed`: a seeded test run (trainers, membership, labels, prompts,
    pilot, plan), never an audit release. `trainer_cls`: the `DPTrainer` subclass to audit (pilot included).
    `before_commit`: see `audits.dpgrpo.gradient_canary.check_before_commit`. Every input is validated before any work
    or file.
    """
    from mechanisms.dpgrpo.trainer import DPTrainer

    m, rounds = check_counts(canaries, rounds, minimum=2)
    spec = resolve_preset(preset)
    q = spec.q if q is None else val.sampling_rate("q", q)
    T = spec.T if rounds is None else rounds
    n_real = spec.n if n_real is None else val.count("n_real", n_real)
    confidence = val.open_unit("confidence", confidence)
    target_epsilon = spec.target_epsilon if target_epsilon is None else val.positive("target_epsilon",
                                                                                     target_epsilon)
    C = spec.C if C is None else val.positive("C", C)
    m_pilot = m if pilot_canaries is None else val.count("pilot_canaries", pilot_canaries, minimum=2)
    digits = val.count("prompt_digits", prompt_digits)
    if digits > MAX_PROMPT_DIGITS or 10 ** digits < m + m_pilot:
        raise InvalidParameter("prompt_digits", prompt_digits, f"an integer in [1, {MAX_PROMPT_DIGITS}] with "
                               f"10**digits >= canaries + pilot_canaries = {m + m_pilot} (distinct prompts)")
    if pretraining is not None and not isinstance(pretraining, BinaryPretraining):
        raise InvalidParameter("pretraining", pretraining, "a BinaryPretraining or None")
    seed = check_seed(seed)
    plan_sims = val.count("plan_sims", plan_sims)
    check_audit_size(m=max(m, m_pilot), T=T, n_real=n_real, plan_sims=plan_sims, per_step_llr=False)
    trainer_cls = check_trainer_cls(DPTrainer if trainer_cls is None else trainer_cls)
    before_commit = check_before_commit(before_commit)
    out = check_fresh_out(out_dir)

    with torch_threads(spec.cpu_threads):
        return _run(spec, m=m, m_pilot=m_pilot, digits=digits, q=q, T=T, n_real=n_real, confidence=confidence,
                    target_epsilon=target_epsilon, C=C, seed=seed, pretraining=pretraining, plan_sims=plan_sims,
                    trainer_cls=trainer_cls, out=out, before_commit=before_commit)


def _run(spec: AuditPreset, *, m, m_pilot, digits, q, T, n_real, confidence, target_epsilon, C, seed, pretraining,
         plan_sims, trainer_cls, out, before_commit) -> InputAuditResult:
    """The audit after validation: base, pre-registration (plan, pilot, power plan), train, analyse, write."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    model, tokenizer, pretrain_summary = build_base_policy(spec, pretraining, digits, seed)
    timings["base_policy_s"] = time.perf_counter() - clock

    # 1. Coins, secret labels and their commitments; public prompts (audit and pilot) apart from both.
    clock = time.perf_counter()
    prompt_rng = random.Random(secrets.randbits(64) if seed is None else derived_seed(seed, "prompts"))
    prompts = public_prompts(m + m_pilot, digits, prompt_rng)
    membership = cn.draw_membership(m, seed=None if seed is None else membership_seed(seed))
    labels = draw_labels(m, seed=None if seed is None else label_seed(seed))
    canaries = input_canaries(prompts[:m], labels)
    ids = [c.id for c in canaries]
    salt, label_salt = cn.new_salt(), cn.new_salt()
    commitment = membership.commit(ids, salt)
    label_commitment = cn.commit(label_bits(labels), ids, label_salt)

    # 2. The privacy plan, the public pilot, the power plan and the pre-registered guess rule.
    plan = audit_plan(n_real=n_real, m=m, q=q, T=T, target_epsilon=target_epsilon, C=C)
    config = audit_config(spec, plan, seed=seed)
    with private_files(out) as (staging, private):
        design = design_input_audit(spec, model, tokenizer, plan, config, canaries=canaries,
                                    pilot_prompts=prompts[m:], digits=digits, n_real=n_real, confidence=confidence,
                                    seed=seed, plan_sims=plan_sims, commitment=commitment,
                                    label_commitment=label_commitment, pretraining=pretrain_summary,
                                    private=private, trainer_cls=trainer_cls)
        timings["design_s"] = time.perf_counter() - clock

        # 3. Training with m added canary records.
        clock = time.perf_counter()
        log_path = private / LOG_NAME
        real = spec.records(n_real, 0 if seed is None else seed)
        trainer, claim = train_with_canaries(spec, config, model, tokenizer, real, canaries,
                                             membership.presence_for_training(), commitment, log_path, trainer_cls)
        epsilon_after = epsilon_with_canaries(trainer, claim, plan)
        timings["train_s"] = time.perf_counter() - clock

        # 4–6. Score, freeze, reveal, verify, test; diagnostics beside the test.
        clock = time.perf_counter()
        report, frozen, signs = analyse(model, tokenizer, log_path, design, membership, salt, label_salt,
                                        mechanism_params={
                                            "epsilon_with_canaries": epsilon_after,
                                            "trainer": type(trainer).__name__, "trainer_divisor": claim["divisor"],
                                            **spec.source,
                                            "privacy_release": bool(trainer.privacy_release
                                                                    and membership.audit_release and seed is None)})
        reveal = {"commitment": commitment, "salt_hex": salt.hex(), "canary_ids": ids,
                  "bits": "".join("1" if s == 1 else "0" for s in signs),
                  "label_commitment": label_commitment, "label_salt_hex": label_salt.hex(), "labels": list(labels),
                  "preregistration": design.preregistration.to_json(),
                  "preregistration_digest": design.preregistration.digest}
        artifact, document = write_audit_files(staging, private, reveal, report)
        timings["analyse_s"] = time.perf_counter() - clock
        result = InputAuditResult(report, design, frozen.values, signs, labels, frozen.frozen_at,
                                  membership.revealed_at, epsilon_after, claim,
                                  final_private_path(staging, private, LOG_NAME), artifact, document, timings, model,
                                  tokenizer)
        if staging is not None and before_commit is not None:
            before_commit(result, staging)
    return result
