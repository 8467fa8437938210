"""Input-space canary audits of any training run (a TRL / DP-GRPO run, or any other) through a scores file
(docs/integrations/trl.md, "How to audit"; the statistic and its assumptions: docs/audits.md).

Protocol order:

1. `prepare(...)` before training, from public inputs only: the run's public parameters (Poisson rate q, noise
   multiplier σ, steps T; δ; the claim's ε, or privcheck's PLD of the event (q, σ, T) at δ), the number of
   canaries, the CLI's design options and a score model — the scores of a public pilot (`pilot_in`, `pilot_out`:
   `Empirical`, carrying q and T for the noiseless guard) or any score-model string of
   `audits.statistics.power.parse_score_model`. It draws the membership S (`audits.canary`; OS entropy, `seed`
   only in tests), commits it with a fresh salt, plans the audit (`audits.statistics.power.plan`), assesses the
   plan (`audits.statistics.power.assess`: UNDERPOWERED below `fraction` of the claim's ε, with the canary count
   that would reach it) and fixes (k₊, k₋) in a `Preregistration`.
2. The trainer includes canary i iff `presence_for_training()[i]`; the public n must not depend on it.
3. After training, each canary is scored from the trained model only; `write_scores` freezes the scores, reveals S
   and writes the scores file with the preregistration (`audits.scores_file.write_scores_file`); `analyse` runs
   `audits.scores_file.audit_scores_file` with the pre-registered rule and the plan's verdict as the report's
   `power` block (so `report.warning` is the UNDERPOWERED line when the plan is).

Everything `prepare` feeds into the plan is public (m, q, σ, T, δ, ε, the pilot's scores), so (k₊, k₋) can be
pre-registered before the labels exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audits import canary as cn
from audits.statistics.power import (
    UNDERPOWERED_FRACTION,
    PowerReport,
    PowerVerdict,
    assess,
    check_fraction,
    validate_plan_inputs,
)
from audits.statistics.power import plan as power_plan
from audits.statistics.pvalue import MAX_CANARIES
from audits.statistics.report import AuditReport
from audits.statistics.score_models import Empirical, ScoreModel, parse_score_model
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError

__all__ = ["CANARY_TYPE", "MECHANISM_NAME", "InputSpaceAudit", "prepare"]

CANARY_TYPE = "input_space"
MECHANISM_NAME = "poisson_gaussian"


@dataclass(frozen=True, eq=False)
class InputSpaceAudit:
    """The auditor's side of one input-space audit: the public design (plan, verdict, preregistration), the sealed
    membership and the commitment's salt. Give the trainer `presence_for_training()` only."""

    canary_ids: tuple
    membership: cn.Membership = field(repr=False)
    salt: bytes = field(repr=False)
    commitment: str
    delta: float
    confidence: float
    epsilon: float                   # the claim's ε tested by the audit
    epsilon_source: str              # "given" or the PLD event it was computed from
    event: object | None             # privcheck.accounting.PoissonGaussianEvent (q, σ, T), when σ was given
    score_model: ScoreModel
    score_name: str | None
    power: PowerReport
    verdict: PowerVerdict
    preregistration: cn.Preregistration

    @property
    def m(self) -> int:
        return len(self.canary_ids)

    @property
    def warning(self) -> str | None:
        """The "UNDERPOWERED: ..." line when the plan cannot reach its fraction of the claim's ε, else None."""
        return self.verdict.warning

    @property
    def canaries_needed(self) -> int | None:
        """A canary count whose plan would reach the fraction of the claim (`PowerVerdict.canaries_needed`)."""
        return self.verdict.canaries_needed

    def presence_for_training(self) -> np.ndarray:
        """The presence bits the trainer needs to build its dataset (1 = include canary i)."""
        return self.membership.presence_for_training()

    @property
    def claim(self) -> dict:
        """The report's claim block: the mechanism when the event is known, the accountant when ε came from it."""
        if self.event is None:
            return {"neighboring": "add_remove"}
        ev = self.event
        return {"neighboring": "add_remove", "accountant": "pld" if self.epsilon_source != "given" else None,
                "mechanism": {"name": MECHANISM_NAME, "params": {"q": ev.sampling_rate,
                                                                 "sigma": ev.noise_multiplier, "steps": ev.steps}}}

    def write_scores(self, path, scores) -> Path:
        """Freeze `scores` (one per canary, in `canary_ids` order, computed from the trained model only), reveal S
        and write the scores file with the commitment and the preregistration (mode 0600)."""
        from audits.scores_file import write_scores_file

        return write_scores_file(path, scores, self.membership, canary_ids=list(self.canary_ids), salt=self.salt,
                                 commitment=self.commitment, preregistration=self.preregistration,
                                 canary_type=CANARY_TYPE, score=self.score_name)

    def analyse(self, path) -> AuditReport:
        """The one-run audit of the scores file at `path` with the pre-registered rule, the claim's ε and the plan's
        verdict as the `power` block; PrivcheckError when the file holds another audit's membership."""
        from audits.scores_file import audit_scores_file

        prereg = self.preregistration
        report = audit_scores_file(path, delta=self.delta, confidence=self.confidence, k_plus=prereg.k_plus,
                                   k_minus=prereg.k_minus, eps_nominal=self.epsilon,
                                   tie_break_seed=prereg.tie_break_seed, power=self.verdict, claim=self.claim)
        if report.canaries["membership_commitment"] != self.commitment:
            raise PrivcheckError(f"the scores file's membership commitment "
                                 f"{report.canaries['membership_commitment']} is not this audit's {self.commitment}")
        return report


def _rule(k_plus, k_minus, m: int):
    """The k_grid of a rule fixed by the caller ((k₊, k₋), k₋ default 0), or None: the plan chooses."""
    if k_plus is None and k_minus is None:
        return None
    kp = 0 if k_plus is None else val.count("k_plus", k_plus, 0, m)
    km = 0 if k_minus is None else val.count("k_minus", k_minus, 0, m)
    if not 1 <= kp + km <= m:
        raise InvalidParameter("k_plus", (k_plus, k_minus), f"k_plus + k_minus in [1, canaries = {m}]")
    return [(kp, km)]


def _score_model(score_model, pilot_in, pilot_out, q, steps) -> ScoreModel:
    """A pilot's `Empirical` (with the run's q, T when known) or a parsed score model; exactly one of the two."""
    if (pilot_in is None) != (pilot_out is None):
        raise InvalidParameter("pilot_out" if pilot_out is None else "pilot_in", None,
                               "pilot_in and pilot_out given together (the pilot's in- and out-scores)")
    if (pilot_in is None) == (score_model is None):
        raise InvalidParameter("score_model", score_model, "exactly one of score_model and pilot_in/pilot_out")
    if score_model is not None:
        return parse_score_model(score_model)
    for name, scores in (("pilot_in", pilot_in), ("pilot_out", pilot_out)):
        try:
            Empirical(scores, [0.0])
        except InvalidParameter as exc:
            raise InvalidParameter(name, exc.value, exc.allowed) from None
    return Empirical(pilot_in, pilot_out, q, steps)


def _score_name(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
        raise InvalidParameter("score_name", value, "a non-empty one-line string or None")
    return None if value is None else value.strip()


def prepare(*, canaries: int, delta: float, sampling_rate: float | None = None,
            noise_multiplier: float | None = None, steps: int | None = None, epsilon: float | None = None,
            pilot_in=None, pilot_out=None, score_model=None, canary_ids=None, score_name: str | None = None,
            confidence: float = 0.95, plan_sims: int = 200, seed: int | None = None, k_plus: int | None = None,
            k_minus: int | None = None, fraction: float = UNDERPOWERED_FRACTION,
            search_canaries: bool = True) -> InputSpaceAudit:
    """Pre-register an input-space audit with `canaries` canaries (module docstring, step 1). Every input is
    validated before any work (InvalidParameter naming it).

    The run: `sampling_rate` q and `steps` T (both or neither: they give the pilot's `Empirical` its never-sampled
    share (1 − q)^T, and with it the noiseless guard), `noise_multiplier` σ (with q and T: the event), `delta`, and
    the claim's `epsilon` (default: privcheck's PLD ε of the event at δ). The score model: `pilot_in`/`pilot_out`
    (scores of a public pilot, included / left out) or `score_model` (a ScoreModel or a string such as `gdp:MU`).
    The design options are the CLI's (`privcheck audit power`): `confidence`, `plan_sims`, `seed` (a seeded test:
    membership and plan; never an audit release), `k_plus`/`k_minus` to fix the rule (k₋ defaults to 0; else the
    plan chooses it), `fraction` (the UNDERPOWERED threshold) and `search_canaries` (an underpowered plan searches
    the canary count that would reach it, `audits.statistics.power.canaries_to_reach`: a few plans of < 1 s each).
    `canary_ids`: the ids the commitment is made with (default `canary-0`, `canary-1`, ...); `score_name`: a
    free-text name of the score, copied into the scores file and the report."""
    from privcheck.accounting import PoissonGaussianEvent
    from privcheck.accounting import epsilon as pld_epsilon

    m = val.count("canaries", canaries, 1, MAX_CANARIES)
    delta = val.open_unit("delta", delta)
    if (sampling_rate is None) != (steps is None):
        raise InvalidParameter("sampling_rate" if sampling_rate is None else "steps", None,
                               "sampling_rate and steps given together (the run's q and T), or neither")
    event = None
    if noise_multiplier is not None:
        if sampling_rate is None:
            raise InvalidParameter("noise_multiplier", noise_multiplier, "given with sampling_rate and steps")
        event = PoissonGaussianEvent(sampling_rate, noise_multiplier, steps)
        sampling_rate, steps = event.sampling_rate, event.steps
    elif sampling_rate is not None:
        sampling_rate = val.sampling_rate("sampling_rate", sampling_rate)
        steps = val.count("steps", steps)
    if epsilon is None and event is None:
        raise InvalidParameter("epsilon", None, "the claim's ε, or noise_multiplier, sampling_rate and steps to "
                                                "compute it")
    epsilon = None if epsilon is None else val.nonnegative("epsilon", epsilon)
    model = _score_model(score_model, pilot_in, pilot_out, sampling_rate, steps)
    confidence = val.open_unit("confidence", confidence)
    plan_sims = val.count("plan_sims", plan_sims)
    seed = None if seed is None else val.seed("seed", seed)
    fraction = check_fraction(fraction)
    if not isinstance(search_canaries, bool):
        raise InvalidParameter("search_canaries", search_canaries, "True or False")
    k_grid = _rule(k_plus, k_minus, m)
    ids = tuple(f"canary-{i}" for i in range(m)) if canary_ids is None else canary_ids
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__") or len(ids) != m:
        raise InvalidParameter("canary_ids", type(ids).__name__, f"a sequence of {m} distinct str or int ids")
    score_name = _score_name(score_name)
    validate_plan_inputs(m, delta=delta, confidence=confidence, eps_nominal=epsilon, score_model=model,
                         k_grid=k_grid, sims=plan_sims, seed=seed)     # the plan's cost, before any work
    cn.commit(np.ones(m, dtype=np.int8), list(ids), bytes(cn.SALT_BYTES))   # the ids: distinct str / int

    source = "given"
    if epsilon is None:
        epsilon = float(pld_epsilon(event, delta).value)
        source = f"pld(q={event.sampling_rate!r}, sigma={event.noise_multiplier!r}, T={event.steps}, delta={delta!r})"
    membership = cn.draw_membership(m, seed=seed)
    salt = cn.new_salt()
    commitment = membership.commit(list(ids), salt)
    power = power_plan(m, delta=delta, confidence=confidence, eps_nominal=epsilon, score_model=model,
                       sims=plan_sims, seed=seed, k_grid=k_grid)
    verdict = assess(power, fraction=fraction, score_model=model if search_canaries else None, seed=seed)
    prereg = cn.Preregistration(m=m, delta=delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=score_name, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    return InputSpaceAudit(canary_ids=tuple(ids), membership=membership, salt=salt, commitment=commitment,
                           delta=delta, confidence=confidence, epsilon=epsilon, epsilon_source=source, event=event,
                           score_model=model, score_name=score_name, power=power, verdict=verdict,
                           preregistration=prereg)
