"""The fenced blocks of README.md and docs/**/*.md, how to run them, and the rule that compares what a block shows
with what the code prints (tests/test_docs.py states the rule and applies it to every page).

A shown line is matched against a printed line as a pattern: its words and punctuation literally (runs of spaces
stand for any spacing), `...` (or `…`) for any text, a line that is only `...` for any number of lines, and each
number by `shown_number_matches`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import sys
import tokenize
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path

__all__ = ["DOCS", "REPO", "Block", "Command", "blocks", "commands", "console_commands", "doc_pages",
           "match_lines", "run_cli", "run_command", "run_python", "same", "section", "shown_number_matches",
           "table_after", "value_comment"]

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_ELLIPSIS = r"\.\.\.|…"
_TOKEN = re.compile(rf"({_ELLIPSIS}|{NUMBER})")
_VALUE = re.compile(rf"(?:{NUMBER})(?:{_ELLIPSIS})?|True|False|None")
_EXIT_CODE = re.compile(r"exit code (\d+)")


def doc_pages() -> list[str]:
    """README.md and every docs/**/*.md, as paths relative to the repository."""
    return ["README.md"] + sorted(p.relative_to(REPO).as_posix() for p in DOCS.rglob("*.md"))


@dataclass(frozen=True)
class Block:
    page: str
    line: int        # line of the opening fence
    lang: str        # the fence's info string ("console", "python", "py", "bash", "" ...)
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@cache
def blocks(page: str) -> tuple[Block, ...]:
    """Every fenced block of `page`, in order."""
    text = (REPO / page).read_text(encoding="utf-8")
    found = []
    for m in re.finditer(r"^```(\S*)[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return tuple(found)


def section(page: str, heading: str) -> str:
    """The text of `docs/<page>` from the heading line `heading` to the next heading of the same level."""
    text = (DOCS / page).read_text(encoding="utf-8")
    level = heading.split(" ", 1)[0]
    body = text.split(heading + "\n", 1)[1]
    return re.split(rf"\n{re.escape(level)} ", body, maxsplit=1)[0]


def table_after(page: str, marker: str, header: bool = False) -> list[list[str]]:
    """The rows (cells stripped; the rule left out, and the header unless `header`) of the first Markdown table after
    the first line of `page` that contains `marker` (or starting at that line)."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if marker in line)
    first = next(i for i in range(start + (not lines[start].startswith("|")), len(lines))
                 if lines[i].startswith("|"))
    rows = [[cell.strip() for cell in lines[first].strip().strip("|").split(" | ")]] if header else []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def _split_comment(line: str) -> tuple[str, str]:
    """(text, comment) of a shell or output line: the comment starts at the first ` # ` (never inside an argument
    in these docs)."""
    m = re.search(r"\s#\s", line)
    return (line.rstrip(), "") if m is None else (line[:m.start()].rstrip(), line[m.end():].strip())


@dataclass(frozen=True)
class Command:
    """One `$ ...` line of a console block (continuations joined), with the output lines shown under it."""

    block: Block
    line: int
    text: str                 # the command without its comment
    comment: str              # the comment after it (continuations included)
    shown: tuple[str, ...]    # the output lines shown under it, their own comments removed
    notes: tuple[str, ...]    # the comments of the output lines

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def where(self) -> str:
        return f"{self.block.page}:{self.line}"

    @property
    def exit_code(self) -> int:
        """0, or the code a comment on the command or its output states ("# exit code 2")."""
        for note in (self.comment, *self.notes):
            m = _EXIT_CODE.search(note)
            if m:
                return int(m.group(1))
        return 0

    @property
    def shows_output(self) -> bool:
        return bool(self.shown) or self.comment_value is not None

    @property
    def comment_value(self) -> tuple[str | None, str] | None:
        """`# [row] value` after a command that shows no output: (row label or None for the first row, value)."""
        m = re.fullmatch(rf"(?:(\w+) )?({NUMBER})", self.comment)
        return None if m is None else (m.group(1), m.group(2))


def commands(block: Block) -> list[Command]:
    """The `$ ` commands of a console block."""
    lines = block.text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        start = i
        text, comment = _split_comment(lines[i][2:])
        comments = [comment]
        while text.endswith("\\"):
            i += 1
            more, comment = _split_comment(lines[i].strip())
            text, comments = text[:-1].rstrip() + " " + more, comments + [comment]
        i += 1
        shown, notes = [], []
        while i < len(lines) and not lines[i].startswith("$ "):
            m = re.fullmatch(r"(.*\S)\s{2,}#\s(.*)", lines[i])
            shown.append(m.group(1) if m else lines[i])
            notes.append(m.group(2) if m else "")
            i += 1
        out.append(Command(block, block.line + 1 + start, text, " ".join(c for c in comments if c),
                           tuple(shown), tuple(notes)))
    return out


def console_commands(text: str, prefix: str = "$ privcheck") -> list[tuple[list[str], list[str]]]:
    """(argv without the program name, shown output lines) of each `$ privcheck ...` command of the console blocks
    in `text` (a page's section; for the tests that run one section's commands)."""
    found = []
    for body in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for cmd in commands(Block("", 0, "console", body)):
            if ("$ " + cmd.text).startswith(prefix):
                found.append((cmd.argv[1:], list(cmd.shown)))
    return found


# --- the comparison rule ---------------------------------------------------------------------------------

def _decimals(number: str) -> int:
    """Decimal places of the last shown digit: "3.7697" → 4, "8.412886e-04" → 10, "59" → 0."""
    mantissa, _, exponent = number.lower().partition("e")
    places = len(mantissa.partition(".")[2])
    return places - int(exponent or 0)


def _significant(number: str) -> int:
    digits = number.lower().partition("e")[0].lstrip("-").replace(".", "").lstrip("0")
    return len(digits)


def shown_number_matches(shown: str, printed: str, rel: float = 0.0, truncated: bool = False) -> bool:
    """A shown number against the number printed in its place.

    An integer (no point, no exponent) is a count: printed exactly. A number followed by `...` is the start of the
    printed one. Any other shown number is the printed number rounded to the shown digits: |printed − shown| is at
    most half a unit of the last shown digit, and the doc shows no more significant digits than are printed. `rel`
    (only for figures that depend on float FFT libraries) also accepts |printed − shown| ≤ rel·|shown|.
    """
    if truncated:
        return printed.startswith(shown)
    if re.fullmatch(r"-?\d+", shown):
        return printed == shown
    if _significant(shown) > _significant(printed):
        return False
    s, p = Decimal(shown), Decimal(printed)
    half_unit = Decimal(5) * Decimal(10) ** (-_decimals(shown) - 1)
    return abs(p - s) <= max(half_unit, Decimal(rel) * abs(s))


def _pattern(shown: str) -> tuple[re.Pattern, list[tuple[str, bool]]]:
    parts, numbers = [], []
    pieces = _TOKEN.split(shown.strip())
    for k, piece in enumerate(pieces):
        if k % 2 == 0:
            parts.append("".join(r"\s+" if w.isspace() else re.escape(w) for w in re.split(r"(\s+)", piece)))
        elif re.fullmatch(_ELLIPSIS, piece):
            parts.append(".*?")
        else:
            parts.append(f"({NUMBER})")
            numbers.append((piece, k + 1 < len(pieces) and pieces[k + 1] == "" and k + 2 < len(pieces)
                            and re.fullmatch(_ELLIPSIS, pieces[k + 2]) is not None))
    return re.compile("".join(parts), flags=re.S), numbers


def same(shown: str, printed: str, rel: float = 0.0) -> bool:
    """One shown line against one printed line (see the module docstring)."""
    return _line_mismatch(shown, printed, rel) is None


def _line_mismatch(shown: str, printed: str, rel: float) -> str | None:
    pattern, numbers = _pattern(shown)
    m = pattern.fullmatch(printed.strip())
    if m is None:
        return f"shown   {shown.strip()!r}\nprinted {printed.strip()!r}: the text differs"
    for (s, truncated), p in zip(numbers, m.groups()):
        if not shown_number_matches(s, p, rel, truncated):
            return f"shown   {shown.strip()!r}\nprinted {printed.strip()!r}: {s} is not {p} at the shown digits"
    return None


def match_lines(shown: list[str], printed: list[str], rel_of=lambda line: 0.0) -> str | None:
    """None if the shown lines match the printed ones (a line `...` stands for any number of lines), else why not.
    `rel_of(shown_line)` is the relative tolerance of that line's numbers (0: shown digits only)."""
    shown = [s for s in shown if s.strip()]
    printed = [p for p in printed if p.strip()]
    if shown and shown[0].lstrip().startswith("{"):         # a JSON object shown over several lines
        shown, printed = ["".join(shown)], ["".join(printed)]

    def walk(i: int, j: int) -> str | None:
        if i == len(shown):
            return None if j == len(printed) else f"printed more lines than shown: {printed[j:]}"
        if shown[i].strip() in ("...", "…"):
            why = f"no printed line after line {j} matches {shown[i + 1]!r}" if i + 1 < len(shown) else None
            for k in range(j, len(printed) + 1):
                attempt = walk(i + 1, k)
                if attempt is None:
                    return None
                if k < len(printed) and i + 1 < len(shown) and same(shown[i + 1], printed[k], rel_of(shown[i + 1])):
                    why = attempt           # the next shown line is here: say why the rest does not follow
            return why
        if j == len(printed):
            return f"shown line not printed: {shown[i]!r}"
        why = _line_mismatch(shown[i], printed[j], rel_of(shown[i]))
        return why if why is not None else walk(i + 1, j + 1)

    return walk(0, 0)


def value_comment(comment: str) -> str | None:
    """The value a code comment says a statement prints: everything after `->`, or the leading run of values
    (numbers, `digits...`, True, False, None) of a comment such as `# 2.00000 (never above the target)`."""
    comment = comment.lstrip("#").strip()
    if comment.startswith("->"):
        return comment[2:].strip()
    values = []
    for word in comment.split():
        if not _VALUE.fullmatch(word.rstrip(",")):
            break
        values.append(word)
    return " ".join(values).rstrip(",") or None


# --- running ---------------------------------------------------------------------------------------------

def run_cli(argv) -> str:
    """stdout of `privcheck <argv>` run in-process; the command must succeed."""
    code, out, err = run_command(argv)
    assert code == 0, (argv, code, err)
    return out


def run_command(argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `privcheck <argv>`, run in-process."""
    from privcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:       # argparse's own usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _comments(source: str) -> dict[int, str]:
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string
    return found


def _printed_value(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, tuple) else [str(value)]


def run_python(block: Block, namespace: dict, rel_of=lambda expected: 0.0) -> list[str]:
    """Run a ```python block statement by statement in `namespace`. An expression statement with a value comment
    (`value_comment`) must print (a `print(...)` call) or evaluate to (any other expression; a tuple element by
    element, the comment's values separated by commas) what the comment says. What the block prints is passed on
    to `sys.stdout`. Returns the mismatches."""
    tree = ast.parse(block.text)
    notes = _comments(block.text)
    filename = f"{block.page}:{block.line}"
    problems = []
    for stmt in tree.body:
        expected = value_comment(notes.get(stmt.end_lineno, "")) if isinstance(stmt, ast.Expr) else None
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            if isinstance(stmt, ast.Expr):
                value = eval(compile(ast.Expression(stmt.value), filename, "eval"), namespace)  # noqa: S307
            else:
                exec(compile(ast.Module([stmt], type_ignores=[]), filename, "exec"), namespace)  # noqa: S102
        sys.stdout.write(buf.getvalue())            # what the block prints still reaches the caller
        if expected is None:
            continue
        is_print = isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", None) == "print"
        where = f"{block.page}:{block.line + stmt.end_lineno}"
        if is_print:
            why = match_lines([expected], buf.getvalue().splitlines(), lambda _: rel_of(expected))
        else:
            printed = _printed_value(value)
            parts = [p.strip() for p in expected.split(",")] if isinstance(value, tuple) else [expected]
            why = (f"{len(parts)} values shown, {len(printed)} computed: {printed}" if len(parts) != len(printed)
                   else next((w for s, p in zip(parts, printed) if (w := _line_mismatch(s, p, rel_of(s)))), None))
        if why is not None:
            problems.append(f"{where}: {why}")
    return problems
