"""The certified value type and exact float rounding of Arb balls.

A `Certified` is what the library reports for a bound: the reported `value` (a float on the safe side of
the exact quantity), the enclosure `[lower, upper]` (floats rounded outward, so the exact value is
inside), the method that produced it and the working precision.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction

from flint import arb

__all__ = ["Certified", "float_down", "float_up"]


def float_up(x: arb) -> float:
    """The smallest float64 not below the upper end of the ball `x` (inf if unbounded)."""
    if not x.is_finite():
        return math.inf
    hi = x.upper()                      # an exact point: comparisons with exact points are exact
    f = float(hi)                       # nearest float (may be below hi)
    if math.isinf(f):
        return f if f > 0 else -sys.float_info.max
    if arb(f) < hi:
        f = math.nextafter(f, math.inf)
    return f


def float_down(x: arb) -> float:
    """The largest float64 not above the lower end of the ball `x` (-inf if unbounded)."""
    if not x.is_finite():
        return -math.inf
    lo = x.lower()
    f = float(lo)
    if math.isinf(f):
        return f if f < 0 else sys.float_info.max
    if arb(f) > lo:
        f = math.nextafter(f, -math.inf)
    return f


@dataclass(frozen=True)
class Certified:
    """A rigorously enclosed real number and the figure reported for it.

    `side` says which end is reported: "upper" where the safe side is larger (ε, δ, a noise scale σ),
    "lower" where it is smaller (a GDP parameter μ, a number of steps). The exact value lies in
    `[lower, upper]`. A bound known on one side only has the other end infinite (`upper = inf`: a certified lower
    bound with no proven upper one), with `reason` saying why; `to_json` writes the infinite end as null.
    """

    value: float
    lower: float
    upper: float
    method: str
    precision_bits: int
    side: str = "upper"
    reason: str | None = None

    def __post_init__(self):
        if not (self.lower <= self.upper):
            raise ValueError(f"empty enclosure [{self.lower}, {self.upper}]")
        if self.side not in ("upper", "lower"):
            raise ValueError("side must be 'upper' or 'lower'")

    @classmethod
    def from_ball(cls, ball: arb, method: str, precision_bits: int, side: str = "upper") -> "Certified":
        lower, upper = float_down(ball), float_up(ball)
        return cls(upper if side == "upper" else lower, lower, upper, method, precision_bits, side)

    @classmethod
    def from_bracket(cls, lower: float, upper: float, method: str, precision_bits: int,
                     side: str = "upper") -> "Certified":
        return cls(upper if side == "upper" else lower, lower, upper, method, precision_bits, side)

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def contains(self, x) -> bool:
        """True when x (float, Fraction, or mpmath mpf converted exactly) lies in the enclosure."""
        return Fraction(self.lower) <= _to_fraction(x) <= Fraction(self.upper)

    def to_json(self) -> dict:
        out = {"value": _finite_or_none(self.value), "lower": _finite_or_none(self.lower),
               "upper": _finite_or_none(self.upper), "method": self.method, "precision_bits": self.precision_bits,
               "side": self.side, "certified": True}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def _to_fraction(x) -> Fraction:
    if isinstance(x, Fraction):
        return x
    if isinstance(x, (int, float)):
        return Fraction(x)
    mpf_tuple = getattr(x, "_mpf_", None)
    if mpf_tuple is not None:  # mpmath mpf: (sign, mantissa, exponent, bitcount), exact
        sign, man, exp, _ = mpf_tuple
        if man == 0 and exp != 0:
            raise ValueError(f"non-finite mpf {x!r} has no exact fraction")
        value = Fraction(int(man)) * (Fraction(2) ** int(exp))
        return -value if sign else value
    return Fraction(str(x))
