"""The console blocks of one section of a docs page, for the tests that run a section's commands themselves
(test_multirun_driver.py, test_backends.py): tests/doc_blocks.py's extraction and comparison rule."""

from tests.doc_blocks import DOCS, console_commands, run_cli, same, section

__all__ = ["DOCS", "console_commands", "run_cli", "same", "section"]
