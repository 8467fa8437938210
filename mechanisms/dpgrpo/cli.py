"""`privcheck` subcommands contributed by `mechanisms.dpgrpo` (entry point `privcheck.commands`)."""

from __future__ import annotations


def register(verbs: dict, common) -> None:
    """Add `run dp-grpo` (heavy dependencies are imported lazily by the handler)."""
