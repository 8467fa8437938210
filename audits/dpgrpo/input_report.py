"""Analysis of an input-space canary audit after training: score, freeze, reveal, verify both commitments, test.

The statistic reads only the trained model and the canaries (`audits.dpgrpo.input_scoring`); the diagnostics come
from the hooks' log and the base policy and sit beside the test in the report, never in it.
"""

from __future__ import annotations

import numpy as np

from audits import canary as cn
from audits.dpgrpo.gradient_canary import TRAINER_HINTS, plan_params, preregistered_report, split_log
from audits.dpgrpo.input_design import InputAuditDesign
from audits.dpgrpo.input_prompts import OPTIONS, PROMPT_SUFFIX, label_bits
from audits.dpgrpo.input_scoring import PolicyView, score_model_view
from audits.dpgrpo.input_training import CanaryTelemetry
from audits.statistics.report import AuditReport
from audits.visibility import check_canaries_observed, read_auditor_log
from privcheck.errors import InvalidParameter, PrivcheckError

__all__ = ["analyse", "base_option_mass", "input_diagnostics"]


def base_option_mass(view: PolicyView, canaries) -> tuple[float, float]:
    """(mean of π_ref("0"⏎) + π_ref("1"⏎), mean share of "0" between the two) over the canary prompts."""
    probs = np.exp([view.option_logprobs(c.prompt, "reference") for c in canaries])
    return float(probs.sum(axis=1).mean()), float((probs[:, 0] / probs.sum(axis=1)).mean())


def input_diagnostics(telemetry: CanaryTelemetry, signs: np.ndarray, design: InputAuditDesign,
                      view: PolicyView) -> dict:
    """The report's diagnostics (never used by the test)."""
    plan = design.plan
    counts, norms = telemetry.inclusions, np.array(telemetry.pre_clip_norms)
    present = signs == 1
    mass, share0 = base_option_mass(view, design.canaries)
    return {
        "realized_inclusions_logged": telemetry.rounds > 0,
        "never_sampled_in_canaries": int(np.sum(present & (counts == 0))),
        "constant_reward_canary_groups_frac": telemetry.constant_fraction,
        "canary_groups_sampled": telemetry.groups,
        "absent_canaries_ever_sampled": int(np.sum(~present & (counts > 0))),
        "inclusions_present_mean": float(counts[present].mean()) if present.any() else None,
        "inclusions_present_min": int(counts[present].min()) if present.any() else None,
        "inclusions_expected": plan.sampling_rate * plan.steps,
        "canary_pre_clip_norm_min": float(norms.min()) if norms.size else None,
        "canary_pre_clip_norm_median": float(np.median(norms)) if norms.size else None,
        "canary_pre_clip_norm_max": float(norms.max()) if norms.size else None,
        "canary_clipped_frac": float(np.mean(norms > plan.clip_norm)) if norms.size else None,
        "clip_norm": plan.clip_norm,
        "base_option_mass_mean": mass,
        "base_share_of_option_0_mean": share0,
    }


def analyse(model, tokenizer, log_path, design: InputAuditDesign, membership: cn.Membership, salt: bytes,
            label_salt: bytes, *, mechanism_params: dict | None = None
            ) -> tuple[AuditReport, cn.FrozenScores, np.ndarray]:
    """Score, freeze, reveal S, verify both commitments and test (docs/audits.md, "Input-space binary canaries",
    steps 5–6). Returns (report, scores, S). Refuses (CanariesNotObserved, `audits.visibility`) a log in which no
    canary was ever included, before any score is frozen."""
    if not isinstance(membership, cn.Membership) or membership.m != design.m:
        raise InvalidParameter("membership", membership, f"the sealed Membership of the {design.m} canaries")
    # canaries never included (or a log without the hooks' inclusions) leave no trace to score: refuse, before
    # scoring; U_t[J] is a diagnostic here (the statistic reads the trained policy), so it is not required nonzero
    rounds, diag_lines = split_log(read_auditor_log(log_path, TRAINER_HINTS["no_log"]))
    check_canaries_observed(rounds, diag_lines, m=design.m, nonzero_u=False, hints=TRAINER_HINTS)
    cfg = design.config
    view = PolicyView(model, tokenizer, cfg.max_prompt_len)
    frozen = score_model_view(view, design.canaries)
    signs = np.array(membership.reveal(frozen))
    ids = list(design.canary_ids)
    if not cn.verify(design.preregistration.commitment, signs, ids, salt):
        raise PrivcheckError("membership does not match the pre-registered commitment")
    if not cn.verify(design.label_commitment, label_bits(c.label for c in design.canaries), ids, label_salt):
        raise PrivcheckError("canary labels do not match the pre-registered label commitment")
    params = {**plan_params(design.plan), "preset": design.preset, "G": cfg.G, "tau": cfg.tau,
              "config_sha256": cfg.sha256(),
              "canary_prompt": {"digits": design.prompt_digits, "suffix": PROMPT_SUFFIX, "options": list(OPTIONS)},
              "canary_labels": "secret, uniform on the options, own generator (independent of S)",
              "canary_labels_commitment": design.label_commitment,
              "public_pretraining": design.pretraining, "pilot": design.pilot.to_json(),
              "noiseless_pilot": None if design.noiseless_check is None else design.noiseless_check.to_json()}
    params.update(mechanism_params or {})
    telemetry = CanaryTelemetry.from_log(log_path, design.m)
    rep = preregistered_report(frozen, membership, design, params,
                               diagnostics=input_diagnostics(telemetry, signs, design, view))
    return rep, frozen, signs
