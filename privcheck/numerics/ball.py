"""Closed forms in Arb ball arithmetic (python-flint), with a precision-doubling driver.

Every function here takes and returns `arb` balls and is evaluated at the caller's working precision;
`evaluate` and `decide` wrap a computation in a loop that doubles the precision until the ball is narrow
enough (or a comparison is decided), and fail closed past `MAX_PREC`.
"""

from __future__ import annotations

from typing import Callable

from flint import arb, ctx

from privcheck.errors import CertificationError

__all__ = ["MAX_PREC", "REL_TOL", "START_PREC", "ThresholdPredicate", "decide", "erfc", "evaluate", "evaluate_all",
           "gauss_G", "log_diff_exp", "log_gauss_G", "log_normal_cdf", "normal_cdf", "normal_pdf", "normal_sf"]

START_PREC = 64
MAX_PREC = 8192
REL_TOL = 1e-12


def evaluate(compute: Callable[[], arb], *, start_prec: int = START_PREC, max_prec: int = MAX_PREC,
             rel_tol: float = REL_TOL) -> tuple[arb, int]:
    """Run `compute()` at increasing precision until its ball has relative radius <= rel_tol.

    Returns (ball, precision_bits). Raises CertificationError if max_prec is not enough.
    """
    prec = start_prec
    while prec <= max_prec:
        with ctx.workprec(prec):
            ball = compute()
        if ball.is_finite():
            mid = abs(ball.mid())
            if ball.is_zero() or ball.rad() <= arb(rel_tol) * mid:
                return ball, prec
        prec *= 2
    raise CertificationError(f"ball did not reach relative radius {rel_tol} at {max_prec} bits")


def evaluate_all(compute: Callable[[], tuple[arb, ...]], *, start_prec: int = START_PREC,
                 max_prec: int = MAX_PREC, rel_tol: float = REL_TOL) -> tuple[tuple[arb, ...], int]:
    """`evaluate` for a computation returning several balls that share work; all must meet rel_tol."""
    prec = start_prec
    while prec <= max_prec:
        with ctx.workprec(prec):
            balls = compute()
        if all(b.is_finite() and (b.is_zero() or b.rad() <= arb(rel_tol) * abs(b.mid())) for b in balls):
            return balls, prec
        prec *= 2
    raise CertificationError(f"balls did not reach relative radius {rel_tol} at {max_prec} bits")


def decide(compute: Callable[[], arb], threshold: float, *, start_prec: int = START_PREC,
           max_prec: int = MAX_PREC) -> tuple[bool | None, arb, int]:
    """Decide `compute() <= threshold` rigorously.

    Returns (True, ...) when the whole ball is <= threshold, (False, ...) when it is wholly above, and
    (None, ...) when max_prec cannot separate them (callers must treat None as "not certified").
    """
    prec = start_prec
    t = arb(threshold)
    ball = arb.nan()
    while prec <= max_prec:
        with ctx.workprec(prec):
            ball = compute()
        if ball.is_finite():
            if ball <= t:
                return True, ball, prec
            if ball > t:
                return False, ball, prec
        prec *= 2
    return None, ball, prec // 2


# --- closed forms -------------------------------------------------------------------------------

_CONSTANTS: dict[int, tuple[arb, arb]] = {}


def _constants() -> tuple[arb, arb]:
    """(√2, 1/√(2π)) at the working precision (cached per precision)."""
    prec = ctx.prec
    if prec not in _CONSTANTS:
        _CONSTANTS[prec] = (arb(2).sqrt(), 1 / (2 * arb.pi()).sqrt())
    return _CONSTANTS[prec]


def _sqrt2() -> arb:
    return _constants()[0]


def erfc(t: arb) -> arb:
    """erfc over the ball t, through its exact endpoints (erfc is decreasing).

    Arb's erfc of an inexact argument far in the tail (t ≈ 7·10⁷ with a radius of rounding size, at every precision
    up to 4096 bits) returns a ball holding 0, so no precision certifies a ratio or a logarithm of it; and of a wide
    argument it returns a ball reaching below 0 and above 2. At an exact point Arb's erfc has full relative
    accuracy (no underflow), so the union of the two endpoint values is a tight enclosure of the exact range.
    """
    if t.rad() == 0:
        return t.erfc()
    return t.upper().erfc().union(t.lower().erfc())


def _nonnegative(p: arb) -> arb:
    """A probability's enclosure without its part below 0 (x ↦ x⁺ keeps every point ≥ 0, so the exact value stays
    inside; the lower end becomes exactly 0)."""
    return p if p >= 0 else p.nonnegative_part()


def normal_cdf(u: arb) -> arb:
    """Φ(u) = erfc(−u/√2)/2 (accurate in both tails; Arb has no underflow).

    The enclosure is that of the exact range {Φ(x) : x ∈ u} (`erfc` maps the endpoints), never below 0, and above
    1 by at most a radius rounding (a midpoint-radius ball cannot end exactly at 1 − 10⁻³⁵⁰). Its lower end is 0
    only where the exact range is wider than a ball with a 30-bit radius can express (e.g. [Φ(−41), Φ(−39)]).
    """
    return _nonnegative(erfc(-u / _sqrt2()) / 2)


def normal_sf(u: arb) -> arb:
    """Φ̄(u) = 1 − Φ(u) = erfc(u/√2)/2 (enclosure as in `normal_cdf`)."""
    return _nonnegative(erfc(u / _sqrt2()) / 2)


def normal_pdf(u: arb) -> arb:
    """φ(u) = exp(−u²/2)/√(2π)."""
    return (-(u * u) / 2).exp() * _constants()[1]


def log_normal_cdf(u: arb) -> arb:
    """log Φ(u); for very negative u Φ(u) is tiny but representable in Arb, so no asymptotics needed."""
    return normal_cdf(u).log()


def log_diff_exp(a: arb, b: arb) -> arb:
    """log(e^a − e^b) for a > b, as a + log(−expm1(b − a)); NaN ball if a > b is not certain."""
    if not (a > b):
        return arb.nan()
    return a + (-(b - a).expm1()).log()


def gauss_G(u: arb) -> arb:
    """G(u) = u·Φ(u) + φ(u) = E[(u + Z)₊].

    For u < 0 uses G(u) = φ(v)·(1 − v·m(v)) with v = −u and Mills ratio m(v) = Φ̄(v)/φ(v); the bracket
    cancels to about 1/v², which the precision loop of `evaluate` absorbs. G is increasing (G′ = Φ), so a
    wide ball is mapped through its endpoints, which avoids the dependency blow-up of the formula.
    """
    if u.is_finite() and u.rad() > arb(2) ** (10 - ctx.prec) * (1 + abs(u.mid())):
        return _gauss_G_point(u.lower()).union(_gauss_G_point(u.upper()))
    return _gauss_G_point(u)  # exact or rounding-narrow: the formula's own blow-up is negligible


def _gauss_G_point(u: arb) -> arb:
    if u >= 0:
        return u * normal_cdf(u) + normal_pdf(u)
    v = -u
    pdf = normal_pdf(v)
    return pdf * (1 - v * (normal_sf(v) / pdf))


def log_gauss_G(u: arb) -> arb:
    """log G(u), stable for very negative u (G(u) ~ φ(u)/u²)."""
    if u >= 0:
        return gauss_G(u).log()
    v = -u
    # log φ(v) + log(1 − v·m(v)): never forms φ(v) on its own scale twice.
    log_pdf = -(v * v) / 2 - (2 * arb.pi()).sqrt().log()
    mills = normal_sf(v) / normal_pdf(v)
    return log_pdf + (1 - v * mills).log()


class ThresholdPredicate:
    """x ↦ `compute(x) ≤ threshold`, decided in Arb (True/False/None); remembers the highest precision used.

    This is the predicate handed to `certified_crossing`; `precision_bits` goes into the Certified record.
    """

    def __init__(self, compute: Callable[[float], arb], threshold: float):
        self.compute = compute
        self.threshold = threshold
        self.precision_bits = START_PREC

    def __call__(self, x: float) -> bool | None:
        ok, _ball, prec = decide(lambda: self.compute(x), self.threshold)
        self.precision_bits = max(self.precision_bits, prec)
        return ok
