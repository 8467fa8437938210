"""README.md is tested: its Python block prints what its `# ->` comments say, and every `privcheck` command that
shows output (or a `# name value` comment) prints that output. Numbers agree to a relative 1e-6 (the PLD figures
move in the last digits between numpy/scipy builds); words, keys and counts agree exactly."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from privcheck.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)


def _same(shown: str, actual: str) -> bool:
    """Text equal once numbers are compared to rel 1e-6; '...' in `shown` stands for any suffix."""
    if shown.endswith("..."):
        shown, actual = shown[:-3], actual[:len(shown) - 3]
        shown = shown.rstrip(".")
    s_nums, a_nums = NUMBER.findall(shown), NUMBER.findall(actual)
    if NUMBER.sub("#", shown).split() != NUMBER.sub("#", actual).split() or len(s_nums) != len(a_nums):
        return False
    return all(abs(float(a) - float(s)) <= 1e-6 * max(1.0, abs(float(s))) for s, a in zip(s_nums, a_nums))


def _commands():
    """(argv, shown output lines, trailing comment) for each `$ privcheck ...` line of the console blocks."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ privcheck"):
                i += 1
                continue
            command = line[2:]
            while command.rstrip().endswith("\\") or (command.split("#")[0].rstrip().endswith("\\")):
                head, _, comment = command.partition("  #")
                command = head.rstrip()[:-1] + " " + lines[i + 1].strip() + (("  #" + comment) if comment else "")
                i += 1
            text, _, comment = command.partition("#")
            shown = []
            i += 1
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            out.append((shlex.split(text.replace("[--suite accounting ...]", "")), shown, comment.strip()))
    return out


COMMANDS = [c for c in _commands() if c[1] or re.fullmatch(r"(\w+ )?" + NUMBER.pattern, c[2])]


def _run(argv) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue()


def test_readme_shows_commands_with_output():
    assert len(COMMANDS) >= 12


@pytest.mark.parametrize("argv, shown, comment", COMMANDS, ids=[" ".join(c[0][1:4]) for c in COMMANDS])
def test_readme_command_prints_what_it_shows(argv, shown, comment):
    actual = _run(argv[1:]).splitlines()
    if "--json" in argv:
        doc = json.loads(actual[0])
        flat = json.dumps(doc)
        for key, value in re.findall(r'"(\w+)": (-?[\d.]+(?:e-?\d+)?)', shown[0]):
            found = re.findall(rf'"{key}": (-?[\d.]+(?:e-?\d+)?)', flat)
            assert any(_same(value, f) for f in found), (key, value, found)
        return
    if shown:
        assert len(actual) == len(shown)
        for s, a in zip(shown, actual):
            assert _same(s, a), (s, a)
    else:   # `# [name] value`: that row (or the first row) of the table
        name, value = (comment.split() if " " in comment else (None, comment))
        row = next(r for r in actual if name is None or r.split()[0] == name)
        assert _same(value, row.split()[-1]), (comment, row)


def test_readme_python_block_prints_its_comments():
    block = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    expected = [line.split("# ->", 1)[1].strip() for line in block.splitlines() if "# ->" in line]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(block, "README.md", "exec"), {})
    printed = buf.getvalue().splitlines()
    assert len(printed) == len(expected) >= 4
    for s, a in zip(expected, printed):
        assert _same(s, a), (s, a)
