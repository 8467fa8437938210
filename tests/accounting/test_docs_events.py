"""The Python snippets of docs/accounting.md ("Events and plans") run as shown: their asserts are the output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "accounting.md"
SECTION = DOC.read_text(encoding="utf-8").split("## Events and plans", 1)[1].split("\n## ", 1)[0]
SNIPPETS = re.findall(r"```python\n(.*?)```", SECTION, flags=re.S)


def test_the_section_has_one_snippet_per_topic():
    assert len(SNIPPETS) == 4


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index):
    exec(compile(SNIPPETS[index], f"docs/accounting.md[{index}]", "exec"), {})
