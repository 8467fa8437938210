"""Validators for public parameters. Each returns the value as a float/int or raises InvalidParameter."""

from __future__ import annotations

import math
import numbers

from privcheck.errors import InvalidParameter


def _real(name: str, value, allowed: str) -> float:
    """A finite real number (NaN and ±inf rejected with the parameter's allowed range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)")
    x = float(value)
    if not math.isfinite(x):
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)")
    return x


def finite(name: str, value) -> float:
    """x in (-inf, inf)."""
    return _real(name, value, "(-inf, inf)")


def positive(name: str, value) -> float:
    """x in (0, inf)."""
    x = _real(name, value, "(0, inf)")
    if not x > 0:
        raise InvalidParameter(name, value, "(0, inf)")
    return x


def nonnegative(name: str, value) -> float:
    """x in [0, inf)."""
    x = _real(name, value, "[0, inf)")
    if not x >= 0:
        raise InvalidParameter(name, value, "[0, inf)")
    return x


def sampling_rate(name: str, value) -> float:
    """q in (0, 1]."""
    x = _real(name, value, "(0, 1]")
    if not 0 < x <= 1:
        raise InvalidParameter(name, value, "(0, 1]")
    return x


def open_unit(name: str, value) -> float:
    """delta in (0, 1)."""
    x = _real(name, value, "(0, 1)")
    if not 0 < x < 1:
        raise InvalidParameter(name, value, "(0, 1)")
    return x


def count(name: str, value, minimum: int = 1) -> int:
    """An integer >= minimum (bools and non-integral floats rejected)."""
    if isinstance(value, bool):
        raise InvalidParameter(name, value, f"an integer >= {minimum}")
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value).is_integer():
        n = int(value)
    else:
        raise InvalidParameter(name, value, f"an integer >= {minimum}")
    if n < minimum:
        raise InvalidParameter(name, value, f"an integer >= {minimum}")
    return n
