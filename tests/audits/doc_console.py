"""Console blocks of a docs page, run and compared the way tests/test_readme.py compares README's: numbers to a
relative 1e-6, words exactly, '...' in a shown line stands for any text."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from privcheck.cli import main

__all__ = ["DOCS", "console_commands", "run_cli", "same", "section"]

DOCS = Path(__file__).resolve().parents[2] / "docs"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)


def section(page: str, heading: str) -> str:
    """The text of `docs/<page>` from the heading line `heading` to the next heading of the same level."""
    text = (DOCS / page).read_text(encoding="utf-8")
    level = heading.split(" ", 1)[0]
    body = text.split(heading + "\n", 1)[1]
    return re.split(rf"\n{re.escape(level)} ", body, maxsplit=1)[0]


def console_commands(text: str, prefix: str = "$ privcheck") -> list[tuple[list[str], list[str]]]:
    """(argv without the program name, shown output lines) of each `$ privcheck ...` line of the console blocks."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith(prefix):
                i += 1
                continue
            command = lines[i][2:]
            while command.rstrip().endswith("\\"):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            out.append((shlex.split(command)[1:], shown))
    return out


def run_cli(argv) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(list(argv)) == 0
    return buf.getvalue()


def same(shown: str, actual: str) -> bool:
    """Equal once numbers are compared to rel 1e-6. A shown line with '...' stands for any text there: its other
    pieces must appear in `actual` in order, as written."""
    if "..." in shown:
        at = 0
        for piece in (p.strip() for p in shown.split("...")):
            at = actual.find(piece, at)
            if at < 0:
                return False
            at += len(piece)
        return True
    s_nums, a_nums = NUMBER.findall(shown), NUMBER.findall(actual)
    if NUMBER.sub("#", shown).split() != NUMBER.sub("#", actual).split() or len(s_nums) != len(a_nums):
        return False
    return all(abs(float(a) - float(s)) <= 1e-6 * max(1.0, abs(float(s))) for s, a in zip(s_nums, a_nums))
