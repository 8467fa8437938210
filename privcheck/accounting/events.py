"""Events: frozen, hashable, JSON-serialisable descriptions of what a mechanism does.

An event names a mechanism and its public parameters, nothing else: no data, no realised noise, no ε. The one
entry point `privcheck.accounting.epsilon(event, delta)` turns an event into a frozen `AccountingRecord`;
`privcheck.accounting.calibrate(make_event, target_epsilon, delta)` finds the parameter of a family of events
that meets a target. Because the ε is always recomputed from the event, a caller cannot carry a stale or forged
ε next to parameters that do not produce it (docs/accounting.md, "Events and plans").

Events that dp-accounting can represent have `to_dp_event()`, so a user can compose ours in their own
dp-accounting accountant. The neighbouring relation of an event is a `NeighboringRelation`; dp-accounting keeps
it on the accountant instead (`NeighboringRelation.to_dp_accounting()`).

Ex-post events (PrivITP, Gaussian AboveThreshold) carry the released outcome (λ̃ and the halting time): their
loss is a function of public outputs only, fixed before the mechanism runs.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import dp_accounting

from privcheck import validation as v
from privcheck.accounting.gaussian_selection import COUNT_MAX, range_sensitivity, score_range
from privcheck.accounting.pld_certified import MAX_STEPS, check_phases
from privcheck.accounting.selection import (
    MAX_CANDIDATES,
    PrivITPParams,
    check_privbon_sigma,
    sensitivity_and_range,
)
from privcheck.errors import InvalidParameter

__all__ = [
    "CompositionHistory", "Event", "GaussianAboveThresholdEvent", "GaussianEvent", "GaussianReportNoisyMaxEvent",
    "NeighboringRelation", "PoissonGaussianEvent", "PrivBoNEvent", "PrivITPEvent", "PrivITPPhase1Event",
    "PrivITPWorstCaseEvent", "event_from_json",
    "FixedSizeGaussianEvent", "ShuffledGaussianEvent", "BallsInBinsGaussianEvent", "TruncatedPoissonGaussianEvent",
]


class NeighboringRelation(str, enum.Enum):
    """Which datasets are neighbours. The value is what records and artifacts write."""

    ADD_REMOVE = "add_remove"            # D′ = D with one privacy record added or removed
    REPLACE_ONE = "replace_one"          # D′ = D with one privacy record replaced
    SCORE_SENSITIVITY = "score_sensitivity"  # selection: any relation under which every score moves by ≤ Δ

    @classmethod
    def coerce(cls, value, name: str = "relation") -> "NeighboringRelation":
        try:
            return cls(value)
        except ValueError:
            raise InvalidParameter(name, value, " or ".join(repr(r.value) for r in cls)) from None

    def to_dp_accounting(self):
        """The same relation as dp-accounting's enum (selection's score relation has no counterpart)."""
        table = {NeighboringRelation.ADD_REMOVE: dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                 NeighboringRelation.REPLACE_ONE: dp_accounting.NeighboringRelation.REPLACE_ONE}
        if self not in table:
            raise InvalidParameter("relation", self.value, "'add_remove' or 'replace_one' for dp-accounting")
        return table[self]

    def __str__(self) -> str:
        return self.value


class Event:
    """Base of every event: `kind`, `to_json()`, `needs_delta` (approximate DP) and `to_dp_event()`."""

    kind: ClassVar[str] = ""
    needs_delta: ClassVar[bool] = True

    def to_json(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, NeighboringRelation):
                value = value.value
            elif isinstance(value, PrivITPParams):
                value = value.to_json()
            elif isinstance(value, tuple) and value and isinstance(value[0], Event):
                value = [e.to_json() for e in value]
            out[f.name] = value
        return out

    def canonical(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    def to_dp_event(self):
        raise InvalidParameter("event", self.kind, "an event dp-accounting can represent (Gaussian, "
                                                   "Poisson-subsampled Gaussian, composition history)")


def _set(obj, name, value):
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class GaussianEvent(Event):
    """One release of f(D) + N(0, σ²) for an f of L2 sensitivity `sensitivity`."""

    sigma: float
    sensitivity: float = 1.0
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self):
        _set(self, "sigma", v.positive("sigma", self.sigma))
        _set(self, "sensitivity", v.positive("sensitivity", self.sensitivity))

    def to_dp_event(self):
        return dp_accounting.GaussianDpEvent(self.sigma / self.sensitivity)


@dataclass(frozen=True)
class PoissonGaussianEvent(Event):
    """`steps` rounds of: Poisson-sample records with rate `sampling_rate`, add N(0, (noise_multiplier·C)²) to the
    sum of contributions clipped to norm C (DP-SGD; DP-GRPO with one prompt and its rollouts as the record)."""

    sampling_rate: float
    noise_multiplier: float
    steps: int = 1
    relation: NeighboringRelation = NeighboringRelation.ADD_REMOVE
    kind: ClassVar[str] = "poisson_gaussian"

    def __post_init__(self):
        _set(self, "sampling_rate", v.sampling_rate("sampling_rate", self.sampling_rate))
        # any σ > 0 describes a mechanism; the accountants' σ range (NOISE_RANGE) is checked when ε is computed
        _set(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "steps", v.count("steps", self.steps, maximum=MAX_STEPS))
        relation = NeighboringRelation.coerce(self.relation)
        if relation is NeighboringRelation.SCORE_SENSITIVITY:
            raise InvalidParameter("relation", relation.value, "'add_remove' or 'replace_one'")
        _set(self, "relation", relation)

    def to_dp_event(self):
        one = dp_accounting.PoissonSampledDpEvent(self.sampling_rate,
                                                  dp_accounting.GaussianDpEvent(self.noise_multiplier))
        return one if self.steps == 1 else dp_accounting.SelfComposedDpEvent(one, self.steps)


@dataclass(frozen=True)
class CompositionHistory(Event):
    """Phases of Poisson-subsampled Gaussian rounds run one after the other (a changing schedule), as Opacus's
    accountants keep them: `history = [(noise_multiplier, sample_rate, steps), ...]`."""

    phases: tuple
    kind: ClassVar[str] = "composition_history"

    def __post_init__(self):
        phases = tuple(self.phases) if isinstance(self.phases, (list, tuple)) else None
        if not phases:
            raise InvalidParameter("phases", self.phases, "a non-empty sequence of PoissonGaussianEvent")
        converted = []
        for i, p in enumerate(phases):
            if isinstance(p, PoissonGaussianEvent):
                converted.append(p)
            elif isinstance(p, (list, tuple)) and len(p) == 3:
                converted.append(PoissonGaussianEvent(sampling_rate=p[1], noise_multiplier=p[0], steps=p[2]))
            else:
                raise InvalidParameter(f"phases[{i}]", p, "a PoissonGaussianEvent or (noise_multiplier, "
                                                          "sampling_rate, steps)")
        check_phases(tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in converted))
        if len({p.relation for p in converted}) != 1:
            raise InvalidParameter("phases", [p.relation.value for p in converted], "one relation for all phases")
        _set(self, "phases", tuple(converted))

    @property
    def relation(self) -> NeighboringRelation:
        return self.phases[0].relation

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    @classmethod
    def from_opacus(cls, history) -> "CompositionHistory":
        """From an Opacus accountant's `history`: a list of (noise_multiplier, sample_rate, num_steps)."""
        if isinstance(history, (str, bytes)) or not isinstance(history, (list, tuple)):
            raise InvalidParameter("history", history, "a list of (noise_multiplier, sample_rate, steps)")
        return cls(tuple(tuple(h) if isinstance(h, (list, tuple)) else h for h in history))

    @classmethod
    def parse(cls, text: str) -> "CompositionHistory":
        """"σ:q:steps,σ:q:steps,..." (noise multiplier, sampling rate, steps per phase; the CLI form). Each number
        follows the command line's grammar (`privcheck.validation.real_text`; steps `integer_text`, like --steps),
        with no space around it."""
        allowed = "comma-separated phases noise_multiplier:sampling_rate:steps, e.g. '1.0:0.05:100,0.8:0.05:100'"
        if not isinstance(text, str) or not text.strip():
            raise InvalidParameter("history", text, allowed)
        phases = []
        for part in text.split(","):
            pieces = part.split(":")
            if len(pieces) != 3:
                raise InvalidParameter("history", text, allowed)
            try:             # the number grammar of the command line: steps is an integer, as for --steps
                sigma, q = v.real_text("history", pieces[0]), v.real_text("history", pieces[1])
                steps = v.integer_text("history", pieces[2])
            except InvalidParameter:
                raise InvalidParameter("history", text, allowed + " (numbers in the command-line grammar: ASCII "
                                       "digits, no spaces or underscores; steps an integer, 1e1 refused)") from None
            phases.append((sigma, q, steps))
        return cls(tuple(phases))

    def to_opacus(self) -> list[tuple[float, float, int]]:
        return [(p.noise_multiplier, p.sampling_rate, p.steps) for p in self.phases]

    def to_dp_event(self):
        return dp_accounting.ComposedDpEvent([p.to_dp_event() for p in self.phases])


@dataclass(frozen=True)
class PrivBoNEvent(Event):
    """PrivBoN (Gumbel-max = exponential mechanism) on scores of sensitivity Δ with Gumbel scale σ. With
    `candidates` and `r_max` (scores clipped to [r_lo, r_max]) the tight bounded-range loss is charged in
    mode "exact"; otherwise, or in mode "nominal", 2Δ/σ. Pure DP."""

    sensitivity: float
    sigma: float
    candidates: int | None = None
    r_max: float | None = None
    r_lo: float = 0.0
    mode: str = "exact"
    kind: ClassVar[str] = "privbon"
    needs_delta: ClassVar[bool] = False

    def __post_init__(self):
        if self.mode not in ("exact", "nominal"):
            raise InvalidParameter("mode", self.mode, "'exact' or 'nominal'")
        sensitivity, r_lo, r_hi = sensitivity_and_range(self.sensitivity, self.r_lo, self.r_max)
        _set(self, "sigma", check_privbon_sigma(self.sigma, sensitivity))
        _set(self, "sensitivity", sensitivity)
        _set(self, "r_lo", float(r_lo))
        _set(self, "r_max", r_hi)
        if self.candidates is not None:
            _set(self, "candidates", v.count("candidates", self.candidates, maximum=MAX_CANDIDATES))
            if r_hi is None:
                raise InvalidParameter("r_max", None, "a finite upper score bound when candidates is given")


def _set_scores(event) -> None:
    """Scores in the public range [a, b] moving by at most Δ ≤ b − a between neighbours."""
    a, b = score_range(event.a, event.b)
    _set(event, "a", a)
    _set(event, "b", b)
    _set(event, "sensitivity", range_sensitivity(event.sensitivity, a, b))


def _params(value) -> PrivITPParams:
    if isinstance(value, PrivITPParams):
        return value
    if isinstance(value, dict):
        return PrivITPParams(**value)
    raise InvalidParameter("params", type(value).__name__, "a PrivITPParams")


def _halting_time(t, n: int):
    if t is None:
        return None
    try:
        return v.count("halting_time", t, maximum=n)
    except InvalidParameter:
        raise InvalidParameter("halting_time", t, f"an integer in [1, {n}] (or None for the fallback)") from None


@dataclass(frozen=True)
class PrivITPEvent(Event):
    """One PrivITP query that released λ̃ and halted at round `halting_time` (None: the fallback). Ex-post loss
    ε1 + ε2(t; λ̃) with the Phase-1 δ of `params`."""

    params: PrivITPParams
    lambda_tilde: float
    halting_time: int | None
    kind: ClassVar[str] = "privitp"

    def __post_init__(self):
        _set(self, "params", _params(self.params))
        _set(self, "lambda_tilde", v.finite("lambda_tilde", self.lambda_tilde))
        _set(self, "halting_time", _halting_time(self.halting_time, self.params.candidates))


@dataclass(frozen=True)
class PrivITPPhase1Event(Event):
    """The Phase-1 release λ̃ = λ̂ + N(0, σ_X²) of PrivITP: a Gaussian mechanism at score sensitivity Δ."""

    params: PrivITPParams
    kind: ClassVar[str] = "privitp_phase1"

    def __post_init__(self):
        _set(self, "params", _params(self.params))

    def gaussian(self) -> GaussianEvent:
        return GaussianEvent(sigma=self.params.sigma_x, sensitivity=self.params.sensitivity)


@dataclass(frozen=True)
class PrivITPWorstCaseEvent(Event):
    """PrivITP given λ̃ with the loop capped at `rounds`: ε1 plus the largest Phase-2 loss over the outcomes
    (what an ex-post filter must admit before the query runs)."""

    params: PrivITPParams
    lambda_tilde: float
    rounds: int
    kind: ClassVar[str] = "privitp_worst_case"

    def __post_init__(self):
        _set(self, "params", _params(self.params))
        _set(self, "lambda_tilde", v.finite("lambda_tilde", self.lambda_tilde))
        _set(self, "rounds", v.count("rounds", self.rounds, maximum=self.params.candidates))


@dataclass(frozen=True)
class GaussianReportNoisyMaxEvent(Event):
    """Arg-max of `queries` scores in [a, b] (sensitivity Δ) each plus N(0, σ²). Pure DP, ex-ante."""

    queries: int
    sigma: float
    sensitivity: float
    a: float = 0.0
    b: float = 1.0
    kind: ClassVar[str] = "gaussian_report_noisy_max"
    needs_delta: ClassVar[bool] = False

    def __post_init__(self):
        _set(self, "queries", v.count("queries", self.queries, maximum=COUNT_MAX))
        _set(self, "sigma", v.positive("sigma", self.sigma))
        _set_scores(self)


@dataclass(frozen=True)
class GaussianAboveThresholdEvent(Event):
    """Gaussian AboveThreshold (threshold noise σ_threshold, query noise σ_query, scores in [a, b]) that halted at
    round `halting_time`. Pure ex-post DP."""

    halting_time: int
    threshold: float
    sigma_threshold: float
    sigma_query: float
    sensitivity: float
    a: float = 0.0
    b: float = 1.0
    kind: ClassVar[str] = "gaussian_above_threshold"
    needs_delta: ClassVar[bool] = False

    def __post_init__(self):
        _set(self, "halting_time", v.count("halting_time", self.halting_time, maximum=COUNT_MAX))
        _set(self, "threshold", v.finite("threshold", self.threshold))
        _set(self, "sigma_threshold", v.positive("sigma_threshold", self.sigma_threshold))
        _set(self, "sigma_query", v.positive("sigma_query", self.sigma_query))
        _set_scores(self)


# --- sampling schemes other than Poisson (docs/accounting.md, "Sampling schemes") --------------------------------

MAX_DATASET = 10 ** 12          # a public dataset size; larger sizes add nothing but overflow risks


def _dataset_and_batch(event, batch_name: str = "batch_size") -> None:
    _set(event, "dataset_size", v.count("dataset_size", event.dataset_size, maximum=MAX_DATASET))
    _set(event, batch_name, v.count(batch_name, getattr(event, batch_name), maximum=event.dataset_size))


@dataclass(frozen=True)
class FixedSizeGaussianEvent(Event):
    """`steps` rounds of: draw a batch of exactly `batch_size` of the `dataset_size` records (without replacement, or
    `replacement=True`: `batch_size` independent uniform draws), add N(0, (noise_multiplier·C)²) to the sum of the
    contributions clipped to norm C. Relation: replace-one (the dataset size is public)."""

    dataset_size: int
    batch_size: int
    noise_multiplier: float
    steps: int = 1
    replacement: bool = False
    kind: ClassVar[str] = "fixed_size_gaussian"

    def __post_init__(self):
        _dataset_and_batch(self)
        _set(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "steps", v.count("steps", self.steps, maximum=MAX_STEPS))
        if not isinstance(self.replacement, bool):
            raise InvalidParameter("replacement", self.replacement, "True or False")

    @property
    def relation(self) -> NeighboringRelation:
        return NeighboringRelation.REPLACE_ONE

    @property
    def sampling_rate(self) -> float:
        return self.batch_size / self.dataset_size

    def to_dp_event(self):
        if self.replacement:
            return super().to_dp_event()
        # dp-accounting's Gaussian noise multiplier is relative to the replace-one sensitivity, 2C here
        one = dp_accounting.SampledWithoutReplacementDpEvent(
            self.dataset_size, self.batch_size, dp_accounting.GaussianDpEvent(self.noise_multiplier / 2))
        return one if self.steps == 1 else dp_accounting.SelfComposedDpEvent(one, self.steps)


@dataclass(frozen=True)
class ShuffledGaussianEvent(Event):
    """`epochs` passes of: one uniform permutation of the `dataset_size` records cut into consecutive batches of
    `batch_size` (the last one smaller when it does not divide), each batch one Gaussian round as in DP-SGD.
    Relation: add/remove (the lower bound is for add/remove with the number of steps per epoch kept)."""

    dataset_size: int
    batch_size: int
    noise_multiplier: float
    epochs: int = 1
    kind: ClassVar[str] = "shuffled_gaussian"

    def __post_init__(self):
        _dataset_and_batch(self)
        _set(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "epochs", v.count("epochs", self.epochs, maximum=MAX_STEPS))

    @property
    def relation(self) -> NeighboringRelation:
        return NeighboringRelation.ADD_REMOVE

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.dataset_size // self.batch_size)

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


@dataclass(frozen=True)
class BallsInBinsGaussianEvent(Event):
    """`epochs` epochs of `steps_per_epoch` Gaussian rounds; each record takes part in exactly one uniformly chosen
    round of each epoch, independently of the others (balls in bins, random allocation). Relation: add/remove."""

    steps_per_epoch: int
    noise_multiplier: float
    epochs: int = 1
    kind: ClassVar[str] = "balls_in_bins_gaussian"

    def __post_init__(self):
        _set(self, "steps_per_epoch", v.count("steps_per_epoch", self.steps_per_epoch, maximum=MAX_STEPS))
        _set(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "epochs", v.count("epochs", self.epochs, maximum=MAX_STEPS))

    @property
    def relation(self) -> NeighboringRelation:
        return NeighboringRelation.ADD_REMOVE

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


@dataclass(frozen=True)
class TruncatedPoissonGaussianEvent(Event):
    """`steps` rounds of Poisson sampling at `sampling_rate` from `dataset_size` records, the batch cut to the public
    `max_batch_size` when larger, then one Gaussian round. Relation: add/remove."""

    dataset_size: int
    sampling_rate: float
    max_batch_size: int
    noise_multiplier: float
    steps: int = 1
    kind: ClassVar[str] = "truncated_poisson_gaussian"

    def __post_init__(self):
        _set(self, "dataset_size", v.count("dataset_size", self.dataset_size, maximum=MAX_DATASET))
        _set(self, "sampling_rate", v.sampling_rate("sampling_rate", self.sampling_rate))
        _set(self, "max_batch_size", v.count("max_batch_size", self.max_batch_size, maximum=MAX_DATASET))
        _set(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        _set(self, "steps", v.count("steps", self.steps, maximum=MAX_STEPS))

    @property
    def relation(self) -> NeighboringRelation:
        return NeighboringRelation.ADD_REMOVE


_KINDS = {cls.kind: cls for cls in (GaussianEvent, PoissonGaussianEvent, CompositionHistory, PrivBoNEvent,
                                    PrivITPEvent, PrivITPPhase1Event, PrivITPWorstCaseEvent,
                                    GaussianReportNoisyMaxEvent, GaussianAboveThresholdEvent,
                                    FixedSizeGaussianEvent, ShuffledGaussianEvent, BallsInBinsGaussianEvent,
                                    TruncatedPoissonGaussianEvent)}


def event_from_json(document) -> Event:
    """The inverse of `Event.to_json()`."""
    if not isinstance(document, dict) or document.get("kind") not in _KINDS:
        raise InvalidParameter("event", document, "a mapping with 'kind' in " + ", ".join(sorted(_KINDS)))
    cls = _KINDS[document["kind"]]
    kwargs = {k: val for k, val in document.items() if k != "kind"}
    if cls is CompositionHistory:
        kwargs["phases"] = tuple(event_from_json(p) for p in kwargs.get("phases", ()))
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise InvalidParameter("event", document, f"the fields of {cls.__name__}: {err}") from None
