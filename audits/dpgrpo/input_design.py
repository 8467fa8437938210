"""The pre-registered design of an input-space canary audit: privacy plan, public pilot, power plan, guess rule.

Everything here is fixed before the audited training starts and holds no membership bit: the canaries (their
secret labels stay with the auditor until the reveal), the privacy plan with its certified ε, the pilot's scores,
the power plan that fixes (k₊, k₋) and the `Preregistration` that binds them to the membership commitment. When
the plan is guarded against runs without noise, the pilot is retrained without noise to check the guard's
assumption (`audits.dpgrpo.input_noiseless`); the check is reported and never changes (k₊, k₋).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from audits import canary as cn
from audits.dpgrpo.gradient_canary import AuditPreset, CanaryIds
from audits.dpgrpo.input_noiseless import (
    NOISELESS_PILOT_LOG_NAME,
    NoiselessCheck,
    check_noiseless_assumption,
    with_noiseless_check,
)
from audits.dpgrpo.input_pilot import PILOT_LOG_NAME, Pilot, run_pilot
from audits.dpgrpo.input_scoring import InputCanary, LogOddsDelta
from audits.statistics.power import PowerReport
from audits.statistics.power import plan as power_plan
from audits.statistics.score_models import Empirical

__all__ = ["CANARY_TYPE", "SCORE_NAME", "InputAuditDesign", "design_input_audit", "pilot_model"]

CANARY_TYPE = "input_space"
SCORE_NAME = "loss_delta_vs_base"


@dataclass(frozen=True, eq=False)
class InputAuditDesign(CanaryIds):
    """The pre-registered design of one audit (fixed before training; holds no membership bits). `canaries`
    carry the secret labels, which stay with the auditor until the reveal. `plan` is the privacy plan of the
    audited run: the certified ε is its ε and nothing else."""

    preset: str
    plan: object                     # privcheck.accounting.DPSGDPlan: n real records + m canary slots
    config: object                   # mechanisms.dpgrpo.config.DPGRPOConfig (its plan: `plan` without canaries)
    n_real: int
    canaries: tuple[InputCanary, ...] = field(repr=False)
    prompt_digits: int
    pilot: Pilot
    power: PowerReport
    preregistration: cn.Preregistration
    label_commitment: str
    pretraining: dict
    confidence: float
    score: LogOddsDelta = field(default_factory=LogOddsDelta)
    noiseless_check: NoiselessCheck | None = None   # the pilot without noise, when the plan is guarded

    @property
    def epsilon(self) -> float:
        """The certified ε: the plan's, from its event by the accountant."""
        return self.plan.epsilon().value

    @property
    def score_model(self) -> Empirical:
        """The plan's score model: the pilot's empirical in/out scores with the audited run's public q and T."""
        return pilot_model(self.pilot, self.plan)


def pilot_model(pilot: Pilot, plan) -> Empirical:
    """The pilot's scores with the audited run's public q and T, so that the planner's noiseless guard applies
    (docs/audits.md, "Runs without noise")."""
    return Empirical(pilot.in_scores, pilot.out_scores, plan.sampling_rate, plan.steps)


def design_input_audit(spec: AuditPreset, model, tokenizer, plan, config, *, canaries: tuple[InputCanary, ...],
                       pilot_prompts, digits: int, n_real: int, confidence: float, seed: int | None, plan_sims: int,
                       commitment: str, label_commitment: str, pretraining: dict, private: Path,
                       trainer_cls) -> InputAuditDesign:
    """Run the public pilot on a copy of `model` under `config` (`audit_config(spec, plan)`), plan (k₊, k₋) and
    pre-register (inputs already validated; the membership and the labels are committed)."""
    m = len(canaries)
    pilot = run_pilot(spec, model, tokenizer, config, prompts=pilot_prompts, seed=seed,
                      log_path=private / PILOT_LOG_NAME, trainer_cls=trainer_cls)
    power = power_plan(m, delta=plan.delta, confidence=confidence, eps_nominal=plan.epsilon().value,
                       score_model=pilot_model(pilot, plan), sims=plan_sims, seed=seed)
    check = None
    if power.noiseless is not None and power.noiseless["guarded"]:      # the plan promises a noiseless rejection
        check = check_noiseless_assumption(spec, model, tokenizer, config, prompts=pilot_prompts, seed=seed,
                                           log_path=private / NOISELESS_PILOT_LOG_NAME, trainer_cls=trainer_cls,
                                           k_plus=power.k_plus, k_minus=power.k_minus, m=m)
    power = with_noiseless_check(power, check)
    prereg = cn.Preregistration(m=m, delta=plan.delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=SCORE_NAME, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    return InputAuditDesign(preset=spec.name, plan=plan, config=config, n_real=n_real, canaries=canaries,
                            prompt_digits=digits, pilot=pilot, power=power, preregistration=prereg,
                            label_commitment=label_commitment, pretraining=pretraining, confidence=confidence,
                            noiseless_check=check)
