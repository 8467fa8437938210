"""Frozen records returned by every accounting call (inputs, method, versions, enclosure, to_json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from privcheck.environment import library_versions
from privcheck.numerics.certified import Certified
from privcheck.serialization import jsonable

__all__ = ["AccountingRecord", "EpsilonResult"]


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class AccountingRecord:
    """One accounting result.

    `value` is the reported figure, always on the safe side (an upper bound on ε or δ, a σ that meets
    the target). `certified` holds the rigorous enclosure when the method provides one; a PLD figure
    from dp-accounting is a pessimistic (upper) estimate but not a ball, so it carries `certified=None`
    and is cross-checked elsewhere. A numerical failure gives `value = inf` with a `reason` (fail closed).
    """

    quantity: str                      # "epsilon", "delta", "sigma", "mu", "steps"
    value: float
    mechanism: str                     # e.g. "gaussian", "poisson_subsampled_gaussian"
    method: str                        # e.g. "analytic_gaussian_arb", "pld", "rdp"
    inputs: Mapping[str, Any]
    neighboring: str = "add_remove"
    certified: Certified | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    libraries: Mapping[str, str] = field(default_factory=library_versions)
    wall_time_s: float = 0.0
    reason: str | None = None
    event: Any = field(default=None, compare=False)   # the event this record was computed from (`epsilon`)
    delta: float | None = None                         # the δ it was computed at (None: pure / ex-post)

    def __post_init__(self):
        object.__setattr__(self, "inputs", _frozen(self.inputs))
        object.__setattr__(self, "details", _frozen(self.details))
        object.__setattr__(self, "libraries", _frozen(self.libraries))

    @property
    def epsilon(self) -> float:
        if self.quantity != "epsilon":
            raise AttributeError(f"record holds {self.quantity}, not epsilon")
        return self.value

    def to_json(self) -> dict:
        return {
            "quantity": self.quantity,
            "value": jsonable(self.value),
            "mechanism": self.mechanism,
            "method": self.method,
            "inputs": jsonable(self.inputs),
            "neighboring": self.neighboring,
            "certified": self.certified.to_json() if self.certified else None,
            "details": jsonable(self.details),
            "libraries": dict(self.libraries),
            "wall_time_s": self.wall_time_s,
            "reason": self.reason,
            "event": None if self.event is None else self.event.to_json(),
            "delta": self.delta,
        }


# Another name for the same record, kept for the DP-GRPO code.
EpsilonResult = AccountingRecord
