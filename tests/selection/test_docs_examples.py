"""The ```python blocks of docs/selection.md run as written (the event-model examples stay true)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "selection.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_docs_have_one_event_example_per_selection_mechanism():
    code = "\n".join(python_blocks(DOC.read_text("utf-8")))
    for event in ("PrivBoNEvent(", "PrivITPEvent(", "PrivITPPhase1Event(", "PrivITPWorstCaseEvent(",
                  "GaussianReportNoisyMaxEvent(", "GaussianAboveThresholdEvent("):
        assert f"epsilon({event}" in code, event


def test_docs_python_blocks_run():
    blocks = python_blocks(DOC.read_text("utf-8"))
    assert blocks, "docs/selection.md has no python block"
    namespace: dict = {"__name__": "docs_selection"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/selection.md[python block {i}]", "exec"), namespace)
