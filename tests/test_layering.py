"""The repository's structure rules, enforced rather than described.

- import-linter contracts of pyproject.toml: audits → mechanisms → privcheck, the two mechanisms independent of
  each other, and no import cycle between the modules of any package;
- no module imports another module's private (`_name`) function, class or constant, in the packages or the tests;
- ruff (lint and import order) is clean;
- nothing cites a file outside the repository.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privcheck", "mechanisms", "audits")
FIRST_PARTY = (*PACKAGES, "tests")
BIN = Path(sys.executable).parent


def _sources(*tops: str):
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


_TREES: dict[Path, ast.Module] = {}


@pytest.fixture(scope="module", autouse=True)
def parsed_once():
    """Each source is parsed once for the module's AST checks (parsing is most of their time), then released."""
    yield
    _TREES.clear()


def _tree(path: Path) -> ast.Module:
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return _TREES[path]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_import_linter_contracts_are_kept():
    out = _run("lint-imports", "--no-cache")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path) -> list[str]:
    """`from first_party.module import _name` and `alias._name` on an imported first-party module."""
    tree = _tree(path)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in FIRST_PARTY:
            for a in node.names:
                if _private(a.name):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module} import {a.name}")
                else:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in FIRST_PARTY:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and _private(node.attr):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_the_private_name_check_can_fail(tmp_path):
    (tmp_path / "x.py").write_text("from privcheck.accounting.dpsgd import _validate\nimport privcheck.cli as c\n"
                                   "c._hidden()\n")
    target = ROOT / "tests" / "_layering_probe.py"
    target.write_text((tmp_path / "x.py").read_text())
    try:
        assert len(private_imports(target)) == 2
    finally:
        target.unlink()
        _TREES.pop(target, None)


def test_no_module_imports_a_private_name_of_another():
    offenders = [hit for path in _sources(*FIRST_PARTY) for hit in private_imports(path)]
    assert offenders == []


def test_ruff_is_clean():
    out = _run("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout[-4000:]


SHARED = re.compile(r"/wor[k]/|shared/(spec|seeds)|\bspec\s*§|§\s*\d+(\.\d+)*\s*of the spec|\bspec [a-z]+\.md")


@pytest.mark.parametrize("top", [*FIRST_PARTY, "docs", "scripts"])
def test_nothing_cites_files_outside_the_repository(top):
    hits = []
    for path in sorted((ROOT / top).rglob("*")):
        if path.suffix not in {".py", ".md", ".sh", ".json", ".toml"} or "figures" in path.parts:
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SHARED.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()[:100]}")
    assert hits == []


def test_every_public_module_declares_all():
    missing = []
    for path in _sources(*PACKAGES):
        if any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(ROOT).parts):
            continue
        tree = _tree(path)
        names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        if "__all__" not in names and any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
            missing.append(_module_name(path))
    assert missing == []
