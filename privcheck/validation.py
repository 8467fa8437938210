"""Validators for public parameters: each returns the value as a float/int or raises InvalidParameter naming the
parameter and its allowed range, before any work is done.

One family: `real` is the finite-real check every interval validator starts from (NaN, ±inf, bools and
non-numbers are refused with the interval in the message), `count` the integer check. Counts that drive work (loops,
samples, arrays) are checked against a stated maximum of what the method can use, defined once where the quantity
is defined and named in the message ("an integer in [1, 10000000]"), never left to overflow. Every seed follows one
rule, `seed`: an integer in [0, SEED_MAX].

Numbers given as text (every command-line number flag, the `--history` phases "σ:q:steps", the scores of a CSV
file) follow one grammar, `real_text` and `integer_text`: ASCII decimal digits only, at most NUMBER_TEXT_MAX
characters, no underscores, no non-ASCII digits, no whitespace or newline anywhere. A real is
`[+-]?(digits[.digits?] | .digits)([eE][+-]?digits)?`; an integer is `[+-]?digits` ("1e1" and "1.0" are not
integers, wherever a count is read).
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal

from privcheck.errors import InvalidParameter

__all__ = ["INTEGER_TEXT", "NUMBER_TEXT_MAX", "REAL_TEXT", "SEED_MAX", "closed_range", "count", "finite",
           "half_open_unit", "integer_text", "nonnegative", "open_unit", "ordered_counts", "positive", "real",
           "real_array", "real_text", "sampling_rate", "seed", "significance", "unit_interval"]

SEED_MAX = 2**63 - 1    # every seed flag and seed argument: [0, 2^63 − 1], what every generator we seed accepts
NUMBER_TEXT_MAX = 100   # characters of a number given as text (a longer one is refused, never parsed)
# [0-9], not \d: \d also matches Arabic-Indic, fullwidth and other Unicode digits, which float() and int() accept
REAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_REAL_TEXT_ALLOWED = (f"an ASCII decimal number such as 0.5, -2, 1e-5 or .5E+3 (at most {NUMBER_TEXT_MAX} characters; "
                      "no underscores, spaces or non-ASCII digits)")
_INTEGER_TEXT_ALLOWED = (f"an ASCII base-10 integer such as 100 or -3 (at most {NUMBER_TEXT_MAX} characters; "
                         "no exponent, decimal point, underscores, spaces or non-ASCII digits)")


def real_text(name: str, text) -> float:
    """The float of `text` in the number grammar (module docstring); InvalidParameter naming `name` otherwise. The
    result may be ±inf for a huge exponent ("1e999"): finiteness and ranges are the caller's checks."""
    if not isinstance(text, str) or len(text) > NUMBER_TEXT_MAX or REAL_TEXT.fullmatch(text) is None:
        raise InvalidParameter(name, text, _REAL_TEXT_ALLOWED)
    return float(text)


def integer_text(name: str, text) -> int:
    """The int of `text` in the integer grammar (module docstring); InvalidParameter naming `name` otherwise."""
    if not isinstance(text, str) or len(text) > NUMBER_TEXT_MAX or INTEGER_TEXT.fullmatch(text) is None:
        raise InvalidParameter(name, text, _INTEGER_TEXT_ALLOWED)
    return int(text)


def real(name: str, value, allowed: str) -> float:
    """A finite real number; `allowed` names the caller's range in the error (e.g. "(0, 1)")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)")
    try:
        x = float(value)
    except OverflowError:                     # an integer (or Fraction) beyond the float range
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)") from None
    if not math.isfinite(x):
        raise InvalidParameter(name, value, f"{allowed} (a finite real number)")
    return x


def _interval(name: str, value, allowed: str, inside) -> float:
    x = real(name, value, allowed)
    if not inside(x):
        raise InvalidParameter(name, value, allowed)
    return x


def finite(name: str, value) -> float:
    """x in (-inf, inf)."""
    return real(name, value, "(-inf, inf)")


def positive(name: str, value) -> float:
    """x in (0, inf)."""
    return _interval(name, value, "(0, inf)", lambda x: x > 0)


def nonnegative(name: str, value) -> float:
    """x in [0, inf) (e.g. an ε, a μ)."""
    return _interval(name, value, "[0, inf)", lambda x: x >= 0)


def sampling_rate(name: str, value) -> float:
    """q in (0, 1]."""
    return _interval(name, value, "(0, 1]", lambda x: 0 < x <= 1)


def open_unit(name: str, value) -> float:
    """x in (0, 1): a δ that must be positive, a confidence or significance level, a fraction."""
    return _interval(name, value, "(0, 1)", lambda x: 0 < x < 1)


def unit_interval(name: str, value) -> float:
    """x in [0, 1]: a probability, or a δ where δ = 0 (pure DP) and δ = 1 are meaningful."""
    return _interval(name, value, "[0, 1]", lambda x: 0 <= x <= 1)


def closed_range(name: str, value, lo: float, hi: float, what: str = "") -> float:
    """x in [lo, hi]: a range a method states it can use (`what` describes the quantity in the error)."""
    allowed = f"[{lo:g}, {hi:g}]" + (f" ({what})" if what else "")
    return _interval(name, value, allowed, lambda x: lo <= x <= hi)


def half_open_unit(name: str, value) -> float:
    """x in [0, 1): the δ of an (ε, δ) guarantee that is audited, converted or composed (δ = 0 is pure DP; at δ = 1
    every mechanism meets the guarantee, so it says nothing, and every audit lower bound is 0)."""
    return _interval(name, value, "[0, 1)", lambda x: 0 <= x < 1)


def count(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum] (bools and non-integral floats rejected). `maximum` is the largest value the
    method behind it can use, so that a huge integer (10**30) is refused before any work instead of overflowing or
    hanging inside it; None only where any size is cheap."""
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    if isinstance(value, bool):
        raise InvalidParameter(name, value, allowed)
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, numbers.Real) and _integral_real(value):
        n = int(value)
    else:
        raise InvalidParameter(name, value, allowed)
    if n < minimum or (maximum is not None and n > maximum):
        raise InvalidParameter(name, value, allowed)
    return n


def _integral_real(value) -> bool:
    """A real of integral value (2.0, Fraction(4, 2)); one beyond the float range (a huge Fraction) counts as not,
    so that it is refused with the allowed range rather than an OverflowError."""
    try:
        x = float(value)
    except OverflowError:
        return False
    return math.isfinite(x) and x.is_integer()


def seed(name: str, value) -> int:
    """A seed: an integer in [0, SEED_MAX] (numpy, torch and `privcheck.randomness.derive_seed` all accept it)."""
    return count(name, value, 0, SEED_MAX)


def ordered_counts(m, r, v, *, m_name: str = "m", r_name: str = "r", v_name: str = "v",
                   maximum: int | None = None) -> tuple[int, int, int]:
    """Integers with 0 ≤ v ≤ r ≤ m and 1 ≤ m ≤ maximum (e.g. canaries, guesses, correct guesses)."""
    m = count(m_name, m, 1, maximum)
    r = count(r_name, r, 0)
    v = count(v_name, v, 0)
    if r > m:
        raise InvalidParameter(r_name, r, f"an integer in [0, {m_name}={m}]")
    if v > r:
        raise InvalidParameter(v_name, v, f"an integer in [0, {r_name}={r}]")
    return m, r, v


def significance(confidence: float) -> float:
    """p = 1 − confidence of a validated confidence level, computed in decimal so that 0.95 gives exactly 0.05
    (float subtraction gives 0.050000000000000044)."""
    return float(Decimal(1) - Decimal(repr(float(confidence))))


def real_array(name: str, value):
    """`value` as a float64 numpy array, refusing what is not an array of real numbers: complex (numpy would keep only
    the real part), bool (a mask passed by mistake; cast it explicitly), object and string arrays (numpy would parse
    "0.5"), ragged nested lists. Shape and finiteness are the caller's checks."""
    import numpy as np  # here, not at the top: the scalar validators above need no numpy

    allowed = "an array of real numbers (integer or floating dtype; not complex, bool, object or strings)"
    if isinstance(value, np.ma.MaskedArray):    # np.asarray would drop the mask and use the masked entries
        raise InvalidParameter(name, "a masked array", allowed + ", unmasked")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(name, type(value).__name__, allowed) from exc
    if arr.dtype.kind not in "iuf":
        raise InvalidParameter(name, f"array of dtype {arr.dtype}", allowed)
    return arr.astype(np.float64, copy=False)


