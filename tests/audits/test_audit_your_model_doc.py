"""docs/audit_your_model.md runs as shown: its ```python blocks run in order in one namespace (their asserts are
the output) in a temporary directory, then every `$ privcheck` command is parsed and each one whose output the
page shows is run there and must print it. Numbers agree to a relative 1e-6; a shown line ending in '...' stands
for any suffix (the salt is fresh, so the commitment, the preregistration digest and the seal vary)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

from privcheck.cli import build_parser, main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "audit_your_model.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)


def _console():
    """(argv, shown output lines) of each `$ privcheck ...` line of the console blocks."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", DOC, flags=re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ privcheck"):
                shown = []
                for follow in lines[i + 1:]:
                    if follow.startswith("$ "):
                        break
                    shown.append(follow)
                out.append((shlex.split(line[len("$ privcheck"):]), shown))
    return out


def _matches(shown: str, actual: str) -> bool:
    if shown.endswith("..."):
        shown = shown[:-3]
        actual = actual[:len(shown)]
    s_nums, a_nums = NUMBER.findall(shown), NUMBER.findall(actual)
    if NUMBER.sub("#", shown).split() != NUMBER.sub("#", actual).split() or len(s_nums) != len(a_nums):
        return False
    return all(abs(float(a) - float(s)) <= 1e-6 * max(1.0, abs(float(s))) for s, a in zip(s_nums, a_nums))


def test_the_page_has_its_blocks():
    assert len(SNIPPETS) == 5 and len(_console()) == 2


def test_the_guide_runs_as_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parser = build_parser()
    commands = _console()
    for argv, _ in commands:
        parser.parse_args(argv)                         # every command shown is a valid command line
    namespace: dict = {}
    shown_commands = [c for c in commands if c[1]]
    # the blocks before the audit command, the command, the blocks after it (section order of the page)
    before = [s for s in SNIPPETS if DOC.index(s) < DOC.index("## 6. Run the audit")]
    after = [s for s in SNIPPETS if s not in before]
    for index, code in enumerate(before):
        exec(compile(code, f"docs/audit_your_model.md[{index}]", "exec"), namespace)
    for argv, shown in shown_commands:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv) == 0
        actual = buf.getvalue().splitlines()
        assert len(actual) == len(shown), (argv, actual)
        for s, a in zip(shown, actual):
            assert _matches(s, a), (s, a)
    for index, code in enumerate(after):
        exec(compile(code, f"docs/audit_your_model.md[{len(before) + index}]", "exec"), namespace)
    assert (tmp_path / "my-model" / "config.json").is_file() and (tmp_path / "my-tokenizer").is_dir()
