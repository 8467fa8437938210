"""The DP-SGD / DP-GRPO plan: the public privacy parameters of a training run, bound to their ε.

A `DPSGDPlan` holds what the privacy guarantee depends on and nothing else: the number of privacy records n (an
example for DP-SGD; one prompt with all its rollouts for DP-GRPO), the Poisson sampling rate q, the noise
multiplier σ, the clip norm C, the number of steps T, δ, the number of auditor canaries m_c (which enter only
the public divisor q·(n + m_c)) and the neighbouring relation. Training and performance settings (learning rate,
batch chunking, precision, ...) live elsewhere, so changing them can never touch the guarantee.

The ε of a plan is never stored: `plan.epsilon()` is `epsilon(plan.event, plan.delta)` every time (cached by the
accountant). A calibration attached to a plan is checked against the plan's own event and δ at construction
(`CalibrationMismatch` otherwise), and `replace()` drops it whenever the event changes, so a plan cannot carry an
ε that its parameters do not produce (docs/accounting.md, "Events and plans").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from privcheck import validation as v
from privcheck.accounting.accountant import epsilon
from privcheck.accounting.calibration import Calibration, calibrate_sigma
from privcheck.accounting.events import (
    BallsInBinsGaussianEvent,
    Event,
    FixedSizeGaussianEvent,
    NeighboringRelation,
    PoissonGaussianEvent,
    ShuffledGaussianEvent,
    TruncatedPoissonGaussianEvent,
)
from privcheck.accounting.pld_certified import MAX_STEPS
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CalibrationMismatch, InvalidParameter

__all__ = ["DPGRPOPlan", "DPSGDPlan", "MAX_RECORDS", "PRIVACY_FIELDS", "SAMPLING_FIELDS", "SAMPLINGS"]

PRIVACY_FIELDS = ("records", "sampling_rate", "noise_multiplier", "clip_norm", "steps", "delta", "canaries",
                  "relation")
# The batch sampling scheme (docs/accounting.md, "Sampling schemes"); written by to_json only when not Poisson, so
# that Poisson plans serialise as before.
SAMPLINGS = ("poisson", "fixed-size", "fixed-size-replacement", "shuffle", "balls-in-bins", "truncated-poisson")
SAMPLING_FIELDS = ("sampling", "max_batch_size")
_REPLACE_ONE_SCHEMES = ("fixed-size", "fixed-size-replacement")
ACCOUNTANT = "privcheck.accounting.epsilon (PLD, dp-accounting, pessimistic)"
# n + m_c at most 2^53, the integers a float holds exactly: the public divisor q·(n + m_c) is a float.
MAX_RECORDS = 2 ** 53


@dataclass(frozen=True)
class DPSGDPlan:
    """Poisson-sampled, clipped, Gaussian-noised training: T rounds of (S + N(0, (σC)²))/(q·(n + m_c))."""

    records: int
    sampling_rate: float
    noise_multiplier: float
    clip_norm: float
    steps: int
    delta: float
    canaries: int = 0
    relation: NeighboringRelation = NeighboringRelation.ADD_REMOVE
    calibration: Calibration | None = field(default=None, compare=False)
    sampling: str = "poisson"
    max_batch_size: int | None = None

    def __post_init__(self):
        s = object.__setattr__
        s(self, "records", v.count("records", self.records, maximum=MAX_RECORDS))
        s(self, "sampling_rate", v.sampling_rate("sampling_rate", self.sampling_rate))
        s(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        s(self, "clip_norm", v.positive("clip_norm", self.clip_norm))
        s(self, "steps", v.count("steps", self.steps, maximum=MAX_STEPS))
        s(self, "delta", v.open_unit("delta", self.delta))
        s(self, "canaries", v.count("canaries", self.canaries, minimum=0, maximum=MAX_RECORDS - self.records))
        relation = NeighboringRelation.coerce(self.relation)
        if relation is NeighboringRelation.SCORE_SENSITIVITY:
            raise InvalidParameter("relation", relation.value, "'add_remove' or 'replace_one'")
        s(self, "relation", relation)
        self._check_sampling()
        if self.calibration is not None:
            self._check_calibration(self.calibration)

    def _check_sampling(self) -> None:
        """Each scheme's public sizes: integral batch (q·n), whole epochs, its own relation."""
        if self.sampling not in SAMPLINGS:
            raise InvalidParameter("sampling", self.sampling, " or ".join(repr(x) for x in SAMPLINGS))
        if self.sampling == "truncated-poisson":
            object.__setattr__(self, "max_batch_size", v.count("max_batch_size", self.max_batch_size,
                                                               maximum=MAX_RECORDS))
        elif self.max_batch_size is not None:
            raise InvalidParameter("max_batch_size", self.max_batch_size, "None unless sampling='truncated-poisson'")
        if self.sampling == "poisson":
            return
        wanted = (NeighboringRelation.REPLACE_ONE if self.sampling in _REPLACE_ONE_SCHEMES
                  else NeighboringRelation.ADD_REMOVE)
        if self.relation is not wanted:
            raise InvalidParameter("relation", self.relation.value, f"{wanted.value!r} for sampling={self.sampling!r}")
        if self.sampling in ("fixed-size", "fixed-size-replacement", "shuffle"):
            batch = round(self.sampling_rate * self.records)
            if batch < 1 or batch / self.records != self.sampling_rate:
                raise InvalidParameter("sampling_rate", self.sampling_rate,
                                       f"a multiple of 1/records (batch size q·n an integer) for {self.sampling!r}")
        per_epoch = self._steps_per_epoch()
        if per_epoch is not None and self.steps % per_epoch:
            raise InvalidParameter("steps", self.steps, f"a multiple of the {per_epoch} steps of one epoch for "
                                                        f"sampling={self.sampling!r}")

    def _steps_per_epoch(self) -> int | None:
        if self.sampling == "shuffle":
            return -(-self.records // round(self.sampling_rate * self.records))
        if self.sampling == "balls-in-bins":
            t = round(1 / self.sampling_rate)
            if 1 / t != self.sampling_rate:
                raise InvalidParameter("sampling_rate", self.sampling_rate,
                                       "1/(steps per epoch) for sampling='balls-in-bins'")
            return t
        return None

    def _check_calibration(self, cal) -> None:
        if not isinstance(cal, Calibration):
            raise CalibrationMismatch(
                f"calibration must be a privcheck.accounting.Calibration computed for this plan, not "
                f"{type(cal).__name__} (a mapping's epsilon cannot be checked)")
        if cal.event != self.event or cal.delta != self.delta or cal.value != self.noise_multiplier:
            raise CalibrationMismatch(
                f"calibration was computed for {None if cal.event is None else cal.event.to_json()} at "
                f"delta={cal.delta!r}, but the plan is {self.event.to_json()} at delta={self.delta!r}")

    # ------------------------------------------------------------------ derived public values

    @property
    def event(self) -> Event:
        """The plan's mechanism: Poisson by default, else the sampling scheme's event."""
        n, q, sigma, T = self.records, self.sampling_rate, self.noise_multiplier, self.steps
        if self.sampling == "poisson":
            return PoissonGaussianEvent(q, sigma, T, self.relation)
        if self.sampling in _REPLACE_ONE_SCHEMES:
            return FixedSizeGaussianEvent(n, round(q * n), sigma, T, replacement=self.sampling != "fixed-size")
        if self.sampling == "truncated-poisson":
            return TruncatedPoissonGaussianEvent(n, q, self.max_batch_size, sigma, T)
        per_epoch = self._steps_per_epoch()
        if self.sampling == "shuffle":
            return ShuffledGaussianEvent(n, round(q * n), sigma, T // per_epoch)
        return BallsInBinsGaussianEvent(per_epoch, sigma, T // per_epoch)

    @property
    def divisor(self) -> float:
        """The public normaliser q·(n + m_c): never the realised batch size."""
        return self.sampling_rate * (self.records + self.canaries)

    @property
    def expected_batch_size(self) -> float:
        return self.sampling_rate * self.records

    @property
    def noise_std(self) -> float:
        """σ·C, the standard deviation of the noise added to the clipped sum."""
        return self.noise_multiplier * self.clip_norm

    @property
    def target_epsilon(self) -> float | None:
        return None if self.calibration is None else self.calibration.target_epsilon

    def epsilon(self, *, method: str | None = None) -> AccountingRecord:
        """The plan's ε, from its event (the one accounting entry point); `method="rdp"` for the cross-check."""
        return epsilon(self.event, self.delta, method=method)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_target(cls, *, records, sampling_rate, clip_norm, steps, delta, target_epsilon, canaries=0,
                    relation=NeighboringRelation.ADD_REMOVE, sampling="poisson", max_batch_size=None) -> "DPSGDPlan":
        """σ calibrated for `target_epsilon` (never overshooting), with the calibration attached."""
        q = v.sampling_rate("sampling_rate", sampling_rate)
        if sampling != "poisson":
            raise InvalidParameter("sampling", sampling, "'poisson' for a calibrated plan (the other schemes: give "
                                                         "noise_multiplier)")
        cal = calibrate_sigma(q, steps, delta, target_epsilon, relation=relation)
        return cls(records=records, sampling_rate=q, noise_multiplier=cal.value, clip_norm=clip_norm, steps=steps,
                   delta=delta, canaries=canaries, relation=relation, calibration=cal)

    def replace(self, *, target_epsilon: float | None = None, **changes) -> "DPSGDPlan":
        """A new plan with `changes`. If the event or δ changes, the calibration is dropped, or, when
        `target_epsilon` is given, σ is calibrated again for the new parameters; it is never kept stale."""
        unknown = set(changes) - set(PRIVACY_FIELDS) - set(SAMPLING_FIELDS)
        if unknown:
            name = sorted(unknown)[0]
            raise InvalidParameter(name, changes[name], f"one of the plan's fields {PRIVACY_FIELDS}")
        new = dataclasses.replace(self, calibration=None, **changes)
        if target_epsilon is not None:
            fields = {k: getattr(new, k) for k in PRIVACY_FIELDS + SAMPLING_FIELDS if k != "noise_multiplier"}
            return type(self).from_target(target_epsilon=target_epsilon, **fields)
        cal = self.calibration
        if cal is not None and cal.event == new.event and cal.delta == new.delta:
            return dataclasses.replace(new, calibration=cal)
        return new

    # ------------------------------------------------------------------ serialisation

    def claim(self) -> dict:
        """What an artifact states about the guarantee; ε computed now from the plan's own event."""
        rec = self.epsilon()
        return {"epsilon": rec.value, "delta": self.delta, "sampling_rate": self.sampling_rate,
                "noise_multiplier": self.noise_multiplier, "steps": self.steps, "clip_norm": self.clip_norm,
                "records": self.records, "canaries": self.canaries, "divisor": self.divisor,
                "neighboring": self.relation.value, "accountant": ACCOUNTANT, "event": self.event.to_json(),
                "target_epsilon": self.target_epsilon,
                "calibration": None if self.calibration is None else self.calibration.to_json()}

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in PRIVACY_FIELDS}
        out["relation"] = self.relation.value
        out["target_epsilon"] = self.target_epsilon
        if self.sampling != "poisson":
            out["sampling"] = self.sampling
            out["max_batch_size"] = self.max_batch_size
        return out

    @classmethod
    def from_json(cls, document) -> "DPSGDPlan":
        """Inverse of `to_json`; a recorded target ε is re-calibrated and must give the recorded σ exactly."""
        if not isinstance(document, dict):
            raise InvalidParameter("plan", type(document).__name__, "a mapping from DPSGDPlan.to_json()")
        missing = [k for k in PRIVACY_FIELDS if k not in document]
        if missing:
            raise InvalidParameter("plan", sorted(document), f"a mapping with the fields {PRIVACY_FIELDS}")
        plan = cls(**{k: document[k] for k in PRIVACY_FIELDS},
                   **{k: document[k] for k in SAMPLING_FIELDS if k in document})
        target = document.get("target_epsilon")
        if target is None:
            return plan
        if plan.sampling != "poisson":
            raise InvalidParameter("target_epsilon", target, "None for sampling other than 'poisson'")
        cal = calibrate_sigma(plan.sampling_rate, plan.steps, plan.delta, target, relation=plan.relation)
        if cal.value != plan.noise_multiplier:
            raise CalibrationMismatch(f"recorded noise_multiplier {plan.noise_multiplier!r} is not the calibration "
                                      f"for target epsilon {target!r} ({cal.value!r})")
        return dataclasses.replace(plan, calibration=cal)


# In DP-GRPO the privacy record is one prompt with all its rollouts; the plan is the same object.
DPGRPOPlan = DPSGDPlan
