"""argparse `type=` parsers shared by every `privcheck` subcommand.

They only turn text into a number; range checks (and their error messages naming the parameter) belong to
the library function the command calls, so the CLI and the Python API reject the same values.
"""

from __future__ import annotations

import argparse

__all__ = ["integer", "number"]


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
