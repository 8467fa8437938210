"""`privcheck audit ...` subcommands contributed by `audits` (entry point `privcheck.commands`)."""

from __future__ import annotations


def register(verbs: dict, common) -> None:
    """Add the `audit` verb and its commands."""
