"""Exact rational views of Arb balls for tests (independent of the library's own rounding code)."""

from fractions import Fraction

from flint import arb


def frac_exact(x: arb) -> Fraction:
    """Exact value of an exact arb (a midpoint or a radius)."""
    man, exp = x.man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def ball_ends(x: arb) -> tuple[Fraction, Fraction]:
    """Exact [mid − rad, mid + rad] of a finite ball."""
    assert x.is_finite(), f"ball not finite: {x}"
    mid, rad = frac_exact(x.mid()), frac_exact(x.rad())
    return mid - rad, mid + rad
