"""`privcheck` subcommands contributed by `mechanisms.selection` (entry point `privcheck.commands`)."""

from __future__ import annotations


def register(verbs: dict, common) -> None:
    """Add `simulate selection` and `run selection` (each module imports its heavy dependencies lazily)."""
    from mechanisms.selection.simulate import add_simulate_parser
    from mechanisms.selection.pipeline import add_run_parser

    add_simulate_parser(verbs, common)
    add_run_parser(verbs, common)
