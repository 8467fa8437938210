"""argparse `type=` parsers shared by every `privcheck` subcommand.

`number` and `integer` only turn text into a number; range checks (and their error messages naming the parameter)
belong to the library function the command calls, so the CLI and the Python API reject the same values. `seed`
is the exception: every seed flag follows the one seed rule (`privcheck.validation.seed`) at parse time, so a bad
seed exits 2 before any command starts, whichever command it is given to.
"""

from __future__ import annotations

import argparse

from privcheck import validation
from privcheck.errors import InvalidParameter

__all__ = ["integer", "number", "seed"]


def number(text: str) -> float:
    """A float as Python spells it ("0.5", "1e-5", "inf" are accepted; range checks come later)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def integer(text: str) -> int:
    """A base-10 integer ("100"; "1e2" and "1.0" are refused)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def seed(text: str) -> int:
    """A seed: a base-10 integer in [0, SEED_MAX] (`privcheck.validation.seed`)."""
    try:
        return validation.seed("seed", integer(text))
    except InvalidParameter as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
