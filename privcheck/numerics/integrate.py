"""Rigorous 1-D integration with python-flint's `acb.integral`, plus explicit Gaussian tail bounds.

`integrate` returns an Arb ball that contains the integral over a finite interval; the caller adds the
neglected tails as an explicit interval (`with_tail`). `gaussian_tail_bound` is the elementary bound
Φ̄(t) ≤ φ(t)/t for t > 0, which needs no special function to certify.
"""

from __future__ import annotations

from typing import Callable

from flint import acb, arb, ctx

from privcheck.errors import CertificationError
from privcheck.numerics.ball import normal_pdf

__all__ = ["gaussian_tail_bound", "integrate", "with_tail"]


def integrate(integrand: Callable[[acb], acb], a, b, *, prec: int = 256,
              max_width: float | None = None, breakpoints=()) -> arb:
    """Enclosure of ∫_a^b integrand(x) dx for an entire integrand (real on the real line).

    The interval is split at `breakpoints` (e.g. around the integrand's mode) so the adaptive
    Gauss–Legendre rule does not miss a narrow peak. Fails closed if the enclosure is not finite or is
    wider than `max_width` (default: 2^(−prec/2) relative to the integral).
    """
    with ctx.workprec(prec):
        cuts = [arb(a)] + [arb(c) for c in sorted(breakpoints) if a < c < b] + [arb(b)]
        total = arb(0)
        abs_tol = arb(2) ** (-prec * 4)
        rel_tol = arb(2) ** (-(prec // 2))
        # acb.integral's tolerance is a goal, not a guarantee: aim 2^-8 below the width accepted at the end, so a
        # result that just misses its goal is not refused
        goal = rel_tol * arb(2) ** -8
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            piece = acb.integral(lambda z, _analytic: integrand(z), lo, hi,
                                 rel_tol=goal, abs_tol=abs_tol)
            if not piece.imag.contains(0):
                raise CertificationError("integral of a real integrand has a non-zero imaginary part")
            total += piece.real
        if not total.is_finite():
            raise CertificationError("acb.integral returned a non-finite enclosure")
        limit = arb(max_width) if max_width is not None else rel_tol * abs(total.mid())
        if total.rad() > limit and not total.is_zero():
            raise CertificationError(f"integral enclosure too wide: {total}")
        return total


def gaussian_tail_bound(t: arb) -> arb:
    """Upper bound on Φ̄(t) for t > 0: φ(t)/t (Mills-ratio inequality)."""
    if not (t > 0):
        raise CertificationError("gaussian_tail_bound needs t > 0")
    return normal_pdf(t) / t


def with_tail(core: arb, tail_low: arb, tail_high: arb) -> arb:
    """core + [tail_low, tail_high]: the integral over the whole line given bounds on the neglected part."""
    return (core + tail_low).union(core + tail_high)
