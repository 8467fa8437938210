"""Composition: basic (ex-ante) composition and the pure ex-post privacy filter.

Filter rule (proof in docs/selection.md): mechanism k, whose ex-post loss
function ε_k(·) is fixed before it runs, is run only if  Σ_{j<k} ε_j(o_j) + sup_o ε_k(o) ≤ E;
otherwise it is refused (a public decision; later, cheaper mechanisms may still run). Every decision is
a function of earlier public outputs, so the transcript's likelihood ratio is at most exp(Σ ε_k(o_k)) ≤ e^E.
δ terms add: with per-query δ, at most ⌊δ_total/δ⌋ approximate-DP steps are admitted.

`mode="replication_unsound"` reproduces the published "run, then drop the overshooting query" rule. It is
NOT differentially private (whether a query is dropped depends on its private outcome); its outputs carry
`provable: False` and it is never the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from flint import arb

from privcheck import validation as v
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.numerics.certified import float_up

__all__ = ["BudgetExceeded", "ExPostFilter", "FilterEntry", "MODES", "basic_composition"]

MODES = ("provable", "replication_unsound")


def basic_composition(epsilons, deltas=()) -> tuple[float, float]:
    """(Σ ε, Σ δ), each sum rounded up (certified by Arb)."""
    eps = arb(0)
    for e in epsilons:
        eps += arb(v.nonnegative("epsilon", e))
    dlt = arb(0)
    for d in deltas:
        dlt += arb(v.nonnegative("delta", d))
    return float_up(eps), float_up(dlt)


def _fraction_up(x: Fraction) -> float:
    f = float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


def _worst_case(value) -> float:
    """A declared worst-case ε: a finite real ≥ 0, or +inf (a mechanism without a finite bound: never admitted)."""
    if isinstance(value, float) and value == math.inf:
        return math.inf
    return v.nonnegative("worst_case", value)


class BudgetExceeded(PrivcheckError):
    """A charge would break the filter's invariant (a caller bug: charged more than it declared)."""


@dataclass
class FilterEntry:
    label: str
    worst_case: float
    realised: float | None          # None when refused
    delta: float
    refused: bool
    spent_after: float


@dataclass
class ExPostFilter:
    """Pure ex-post privacy filter with total budget E (and optional δ budget)."""

    budget: float
    delta_total: float | None = None
    mode: str = "provable"
    entries: list[FilterEntry] = field(default_factory=list)
    _spent: arb = field(default_factory=lambda: arb(0), repr=False)
    _delta_spent: Fraction = field(default_factory=Fraction, repr=False)   # exact: K_max·δ = δ_total fits

    def __post_init__(self):
        self.budget = v.positive("budget", self.budget)
        if self.delta_total is not None:
            self.delta_total = v.open_unit("delta_total", self.delta_total)
        if self.mode not in MODES:
            raise InvalidParameter("mode", self.mode, " or ".join(MODES))

    @property
    def provable(self) -> bool:
        return self.mode == "provable"

    @property
    def spent(self) -> float:
        """Certified upper bound on the ε spent so far."""
        return float_up(self._spent)

    @property
    def remaining(self) -> float:
        """A lower bound on the remaining budget (never overstated)."""
        return max(0.0, -float_up(self._spent - arb(self.budget)))

    def admits(self, worst_case: float, delta: float = 0.0) -> bool:
        """True iff spent + worst_case ≤ E (decided on the certified upper end) and δ still fits (an infinite
        worst case is never admitted)."""
        worst_case, delta = _worst_case(worst_case), v.half_open_unit("delta", delta)
        if not math.isfinite(worst_case):
            return False
        fits = float_up(self._spent + arb(worst_case)) <= self.budget
        if self.delta_total is not None and delta > 0:
            fits = fits and self._delta_spent + Fraction(delta) <= Fraction(self.delta_total)
        return fits

    def refuse(self, label: str, worst_case: float, delta: float = 0.0) -> None:
        delta = v.half_open_unit("delta", delta)
        self.entries.append(FilterEntry(label, _worst_case(worst_case), None, delta, True, self.spent))

    def charge(self, label: str, realised: float, worst_case: float, delta: float = 0.0) -> None:
        """Record a run's realised ex-post loss. In provable mode the run must have been admitted with
        this `worst_case` and the realised loss may not exceed it."""
        realised = v.nonnegative("realised", realised)
        worst_case, delta = _worst_case(worst_case), v.half_open_unit("delta", delta)
        if self.provable:
            if realised > worst_case:
                raise BudgetExceeded(f"{label}: realised loss {realised} exceeds its declared worst case {worst_case}")
            if not self.admits(worst_case, delta):
                raise BudgetExceeded(f"{label}: charged without being admitted (spent {self.spent}, "
                                     f"worst case {worst_case}, budget {self.budget})")
        self._spent = self._spent + arb(realised)
        self._delta_spent = self._delta_spent + Fraction(delta)
        self.entries.append(FilterEntry(label, worst_case, realised, delta, False, self.spent))

    def to_json(self) -> dict:
        return {"budget": self.budget, "delta_total": self.delta_total, "mode": self.mode,
                "provable": self.provable, "spent": self.spent, "delta_spent": _fraction_up(self._delta_spent),
                "answered": sum(not e.refused for e in self.entries),
                "refused": sum(e.refused for e in self.entries),
                "entries": [e.__dict__ for e in self.entries],
                "note": None if self.provable else "not DP: replication of the charge-after-run rule"}
