"""argparse `type=` parsers shared by every `privcheck` subcommand.

`number` and `integer` only turn text into a number, in the one number grammar of `privcheck.validation.real_text`
and `integer_text` (ASCII digits, no underscores or whitespace, at most NUMBER_TEXT_MAX characters); range checks
(and their error messages naming the parameter) belong to the library function the command calls, so the CLI and
the Python API reject the same values. `seed`
is the exception: every seed flag follows the one seed rule (`privcheck.validation.seed`) at parse time, so a bad
seed exits 2 before any command starts, whichever command it is given to.
"""

from __future__ import annotations

import argparse

from privcheck import validation
from privcheck.errors import InvalidParameter, shown

__all__ = ["integer", "number", "seed"]


def _type_error(exc: InvalidParameter, what: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"not {what}: {shown(exc.value)}: allowed is {exc.allowed}")


def number(text: str) -> float:
    """A float in the number grammar ("0.5", "1e-5", "-.5E3"; "inf", "1_0", "١" and "1\\n" are refused; range
    checks come later)."""
    try:
        return validation.real_text("value", text)
    except InvalidParameter as exc:
        raise _type_error(exc, "a number") from None


def integer(text: str) -> int:
    """A base-10 integer in the integer grammar ("100"; "1e2", "1.0" and "1_000" are refused)."""
    try:
        return validation.integer_text("value", text)
    except InvalidParameter as exc:
        raise _type_error(exc, "an integer") from None


def seed(text: str) -> int:
    """A seed: a base-10 integer in [0, SEED_MAX] (`privcheck.validation.seed`)."""
    try:
        return validation.seed("seed", integer(text))
    except InvalidParameter as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
