"""One-run audit of any DP-SGD model from a Dirac gradient-canary auditor log (docs/integrations/opacus.md,
"Audit an Opacus model"; the statistic and its assumptions: docs/audits.md).

The trainer side is a hook that writes the log: `privcheck.integrations.opacus.GradientCanaries` for Opacus (a
binary record per step, `privcheck.integrations.canary_log`, read as the entries below), or anything writing the
same JSON lines (`{"kind": "round", "t", "reserved", "U", "sigma_C", "divisor"}` with
U_t[J] = S_t[J] + z_t[J], and for the same t `{"kind": "diagnostics", "t", "diagnostics": {"canary_included": [m
bits]}}`, the realised inclusions that show the canaries entered the step). The auditor side, in protocol order:

1. `prepare(...)` before training: the public event (q, σ, T) and δ of the claim, m canaries on coordinates fixed
   by a public rule (`reserved_coordinates`, never from S), the membership S drawn by `audits.canary`
   (OS entropy; `seed` only in tests) and committed with a fresh salt, the power plan
   (`audits.statistics.power.plan` with `DPSGDDirac(q, σ, T, "llr")`) fixing (k₊, k₋), and the `Preregistration`. The
   nominal ε is privcheck's PLD of the event at δ (`privcheck.accounting.epsilon`). The trainer receives only
   `presence()` (the bits it needs to include present canaries).
2. Training writes the log (mode 0600).
3. `analyse(log_path, audit)`: a log in which the canaries were never observed is refused first
   (`privcheck.errors.CanariesNotObserved`, `audits.visibility`); then only the `round` lines are scored
   (y_t = U_t[j]/(σC), the per-step LLR), the scores are frozen, S is revealed against them, the commitment
   verified and `audits.statistics.one_run.from_scores` applies the pre-registered rule. The `diagnostics` lines
   (realised inclusions) are copied into the report beside the test, never into it.

Scope as in the DP-GRPO gradient audit: Dirac canaries audit sampling, clipping, noise and accounting of the
step that writes the log, not the model's per-sample gradient computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audits import canary as cn
from audits.dpgrpo.gradient_canary import (
    AuditorView,
    CanaryIds,
    DiracCanary,
    StepLLR,
    dirac_canaries,
    reserved_coordinates,
    split_log,
)
from audits.statistics.both_bounds import with_claim_curve
from audits.statistics.one_run import from_scores
from audits.statistics.power import UNDERPOWERED_FRACTION, PowerReport, PowerVerdict, assess, check_fraction
from audits.statistics.power import plan as power_plan
from audits.statistics.report import AuditReport
from audits.statistics.score_models import DPSGDDirac
from audits.statistics.strategies import Explicit
from audits.visibility import check_canaries_observed, read_auditor_log
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError

__all__ = ["CANARY_TYPE", "HOOK_HINTS", "MECHANISM_NAME", "SCORE_NAME", "GradientLogAudit", "GradientLogDesign",
           "analyse", "prepare"]

CANARY_TYPE = "gradient_dirac"
SCORE_NAME = "whitebox_step_llr"
MECHANISM_NAME = "dpsgd"
# Why the hook's canaries can go unobserved (audits.visibility; docs/integrations/opacus.md).
HOOK_HINTS = {
    "no_log": "the hooked optimizer never stepped: the loop calls another optimizer, or GradientCanaries was "
              "installed on an optimizer the loop does not use",
    "no_rounds": "the hooked optimizer never stepped: the loop calls another optimizer, or GradientCanaries was "
                 "installed on an optimizer the loop does not use",
    "no_inclusions": "the canaries were not added to the per-sample gradients of the step that wrote U_t[J]: the "
                     "hooked DPOptimizer's clip_and_accumulate did not run before it (the loop steps another "
                     "DPOptimizer over the same torch optimizer), or the log was written by a hook that does not "
                     "report the realised inclusions (a diagnostics line with m canary_included bits per round)",
}


@dataclass(frozen=True, eq=False)
class GradientLogDesign(CanaryIds):
    """The public, pre-registered design (no membership bits): the audited event, δ, canaries, power plan and
    guess rule."""

    event: object                    # privcheck.accounting.PoissonGaussianEvent (q, σ, T)
    clip_norm: float
    delta: float
    confidence: float
    canaries: tuple[DiracCanary, ...]
    reserved_rule: str
    power: PowerReport
    preregistration: cn.Preregistration
    score: StepLLR
    verdict: PowerVerdict | None = None      # `audits.statistics.power.assess` of `power` against the nominal ε

    @property
    def reserved(self) -> tuple[int, ...]:
        return tuple(c.coordinate for c in self.canaries)

    @property
    def noise_std(self) -> float:
        return self.event.noise_multiplier * self.clip_norm

    @property
    def epsilon(self) -> float:
        """The nominal ε: privcheck's accountant on the event at δ."""
        from privcheck.accounting import epsilon
        return epsilon(self.event, self.delta).value


@dataclass(frozen=True, eq=False)
class GradientLogAudit:
    """The auditor's side of one audit: the public design, the sealed membership and the commitment's salt."""

    design: GradientLogDesign
    membership: cn.Membership
    salt: bytes

    @property
    def plan(self) -> PowerVerdict:
        """The power plan and its verdict (UNDERPOWERED or not, with the canary count), known before training."""
        return self.design.verdict

    @property
    def warning(self) -> str | None:
        """"UNDERPOWERED: ..." when the plan cannot reach its fraction of the nominal ε, else None."""
        return self.design.verdict.warning

    def presence(self) -> np.ndarray:
        """The presence bits the trainer's hook needs (present canaries are included by their own coins)."""
        return self.membership.presence_for_training()


def prepare(*, dim: int, canaries: int, sampling_rate: float, noise_multiplier: float, steps: int,
            clip_norm: float, delta: float, confidence: float = 0.95, reserved_rule: str = "last",
            plan_sims: int = 200, seed: int | None = None, k_plus: int | None = None, k_minus: int | None = None,
            fraction: float = UNDERPOWERED_FRACTION, search_canaries: bool = True) -> GradientLogAudit:
    """Pre-register a one-run audit of a DP-SGD run with `canaries` Dirac canaries on a `dim`-coordinate
    parameter space (module docstring, step 1). `seed`: a seeded test (membership and power plan), never an audit
    release. Every input is validated before any work.

    The design options are the CLI's (`privcheck audit power`, `audit one-run --scores`): `canaries`, `confidence`,
    `plan_sims` (Monte Carlo audits), `seed`, and the guess rule — `k_plus`/`k_minus` fix it (k₋ defaults to 0),
    else the plan chooses it. The returned audit's `plan` is `audits.statistics.power.assess` of the power plan at
    `fraction` of the nominal ε (`warning`: the "UNDERPOWERED: ..." line); with `search_canaries` an underpowered plan
    searches the canary count that would reach it (`audits.statistics.power.canaries_to_reach`, a few plans of 1–3 s
    each)."""
    from privcheck.accounting import PoissonGaussianEvent

    m = val.count("canaries", canaries)
    event = PoissonGaussianEvent(sampling_rate, noise_multiplier, val.count("steps", steps))
    clip_norm = val.positive("clip_norm", clip_norm)
    delta = val.open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    plan_sims = val.count("plan_sims", plan_sims)
    seed = None if seed is None else val.count("seed", seed, minimum=0)
    fraction = check_fraction(fraction)
    if not isinstance(search_canaries, bool):
        raise InvalidParameter("search_canaries", search_canaries, "True or False")
    k_grid = None
    if k_plus is not None or k_minus is not None:
        kp = 0 if k_plus is None else val.count("k_plus", k_plus, 0, m)
        km = 0 if k_minus is None else val.count("k_minus", k_minus, 0, m)
        if not 1 <= kp + km <= m:
            raise InvalidParameter("k_plus", (k_plus, k_minus), f"k_plus + k_minus in [1, canaries = {m}]")
        k_grid = [(kp, km)]
    reserved = reserved_coordinates(dim, m, reserved_rule)
    cans = dirac_canaries(reserved)
    membership = cn.draw_membership(m, seed=seed)
    salt = cn.new_salt()
    commitment = membership.commit([c.id for c in cans], salt)
    model = DPSGDDirac(event.sampling_rate, event.noise_multiplier, event.steps, "llr", 0.0)
    from privcheck.accounting import epsilon
    eps = epsilon(event, delta).value
    power = power_plan(m, delta=delta, confidence=confidence, eps_nominal=eps, score_model=model, sims=plan_sims,
                       seed=seed, k_grid=k_grid)
    verdict = assess(power, fraction=fraction, score_model=model if search_canaries else None, seed=seed)
    prereg = cn.Preregistration(m=m, delta=delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=SCORE_NAME, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    design = GradientLogDesign(event=event, clip_norm=clip_norm, delta=delta, confidence=confidence,
                               canaries=cans, reserved_rule=reserved_rule, power=power, preregistration=prereg,
                               score=StepLLR(model), verdict=verdict)
    return GradientLogAudit(design, membership, salt)


def _diagnostics(diag_lines: list[dict], signs: np.ndarray, design: GradientLogDesign) -> dict:
    """Realised inclusions from the log's diagnostics lines and the revealed S (never used by the test)."""
    m = design.m
    counts = np.zeros(m, dtype=np.int64)
    logged = False
    for line in diag_lines:
        inc = line.get("diagnostics", {}).get("canary_included") or []
        if len(inc) == m:
            counts += np.asarray(inc, dtype=np.int64)
            logged = True
    present = signs == 1
    return {"realized_inclusions_logged": logged,
            "never_sampled_in_canaries": int(np.sum(present & (counts == 0))) if logged else None,
            "absent_canaries_ever_sampled": int(np.sum(~present & (counts > 0))) if logged else None,
            "inclusions_present_mean": float(counts[present].mean()) if logged and present.any() else None,
            "inclusions_expected": design.event.sampling_rate * design.event.steps,
            "clip_norm": design.clip_norm}


def analyse(log_path, audit: GradientLogAudit, *, mechanism_params: dict | None = None) -> AuditReport:
    """Score the log's round lines, freeze, reveal S, verify the commitment and test (module docstring, step 3).
    Raises CanariesNotObserved before scoring when the log shows that the canaries were never observed
    (`audits.visibility`: no log or no round, a round without the m inclusion bits of its diagnostics line, no
    canary ever included, every U_t[J] exactly 0), and PrivcheckError when the log does not match the design
    (rounds 1..T, reserved coordinates, σC) or the membership does not match the commitment."""
    if not isinstance(audit, GradientLogAudit):
        raise InvalidParameter("audit", type(audit).__name__, "the GradientLogAudit prepare() returned")
    if mechanism_params is not None and not isinstance(mechanism_params, dict):
        raise InvalidParameter("mechanism_params", mechanism_params, "None or a dict")
    design, membership = audit.design, audit.membership
    rounds, diag_lines = split_log(read_auditor_log(log_path, HOOK_HINTS["no_log"]))
    check_canaries_observed(rounds, diag_lines, m=design.m, ids=design.canary_ids, hints=HOOK_HINTS)
    view = AuditorView.from_rounds(rounds, design.reserved, design.event.steps, design.noise_std)
    frozen = cn.score_canaries(design.score, view, design.canaries)
    signs = np.array(membership.reveal(frozen))
    if not cn.verify(design.preregistration.commitment, signs, list(design.canary_ids), audit.salt):
        raise PrivcheckError("membership does not match the pre-registered commitment")
    prereg, ev = design.preregistration, design.event
    params = {"q": ev.sampling_rate, "sigma": ev.noise_multiplier, "steps": ev.steps, "C": design.clip_norm,
              "reserved_rule": design.reserved_rule, **(mechanism_params or {})}
    base = from_scores(frozen, membership, delta=design.delta, confidence=design.confidence,
                       k_plus=prereg.k_plus, k_minus=prereg.k_minus, strategy=Explicit(),
                       eps_nominal=design.epsilon, tie_break_seed=prereg.tie_break_seed, preregistration=prereg,
                       power=design.power if design.verdict is None else design.verdict,
                       claim={"neighboring": "add_remove", "accountant": "pld",
                              "mechanism": {"name": MECHANISM_NAME, "params": params}},
                       canaries={"type": CANARY_TYPE, "added_slots": True, "score": SCORE_NAME},
                       diagnostics=_diagnostics(diag_lines, signs, design))
    return with_claim_curve(base, ev)         # the second bound, of the same counts (audits.statistics.both_bounds)
