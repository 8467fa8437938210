"""The pytest plugin (`pytest --privcheck`) on tiny user projects: one selectable item per check for every
conftest.py defining `privcheck_bindings`, settings in pyproject.toml ([tool.privcheck] checks / precision /
xfail / skip), `--privcheck-precision`, and inertness without the option.

The projects bind a clip only (plus the user's accountant in one case): the checks themselves are tested in
test_training_checks.py and test_catalogue.py; here the plugin only has to map the checks' statuses onto pytest
outcomes. Runs are in-process (pytester), except one subprocess run that proves the installed `pytest11` entry
point loads the plugin without `-p`."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

# torch is imported before pytester's in-process runs: pytester forgets the modules a run imported first, and
# torch's C extension cannot be imported a second time
import torch  # noqa: F401

from privcheck.checks import training

pytest_plugins = ["pytester"]

PLUGIN = "privcheck.checks.pytest_plugin"
N = len(training.CHECKS)

CONFTEST = """
import math, pytest, torch
from privcheck.checks.training import SuiteBindings

def good_clip(v, C):
    norm = float(torch.linalg.vector_norm(v.double()))
    if not bool(torch.isfinite(v).all()) or not math.isfinite(norm):
        return torch.zeros_like(v)
    return v * (C / norm) if norm > C else v.clone()

def passthrough_clip(v, C):                 # broken: NaN/inf gradients enter the sum
    return v.clone() if not bool(torch.isfinite(v).all()) else good_clip(v, C)

def raising_clip(v, C):
    raise RuntimeError("boom from the user's clip")

def clip32(v, C):                           # correct, computed in float32 as a float32 trainer does
    return good_clip(v.to(torch.float32), C)

@pytest.fixture
def privcheck_bindings():
    return SuiteBindings(clip={clip}, C=1.0, dim=16)
"""
OWN_TEST = ("def test_own(request):\n"
            f"    assert request.config.pluginmanager.has_plugin({PLUGIN!r})\n")


def project(pytester, clip="good_clip", where="", pyproject=None):
    base = pytester.path / where if where else pytester.path
    base.mkdir(parents=True, exist_ok=True)
    if clip is not None:
        (base / "conftest.py").write_text(CONFTEST.format(clip=clip))
    (pytester.path / "test_own.py").write_text(OWN_TEST)
    if pyproject is not None:
        (pytester.path / "pyproject.toml").write_text(pyproject)
    return pytester


def run(pytester, *args):
    return pytester.runpytest("-p", PLUGIN, "-p", "no:cacheprovider", *args)


def outcomes(result):
    return {k: v for k, v in result.parseoutcomes().items() if k not in ("warnings", "warning")}


# ---------------------------------------------------------------------------------------------- collection

def test_one_selectable_item_per_check(pytester):
    project(pytester)
    res = run(pytester, "--privcheck", "--co", "-q")
    ids = [line for line in res.outlines if "::privcheck[" in line]
    assert ids == [f"conftest.py::privcheck[{name}]" for name in training.CHECKS]
    assert f"{N + 1} tests collected" in res.stdout.str()          # the checks are counted
    one = run(pytester, "--privcheck", "-v", "conftest.py::privcheck[clip_contract]")
    assert outcomes(one) == {"passed": 1} and "collected 1 item" in one.stdout.str()
    by_k = run(pytester, "--privcheck", "-k", "clip_contract or accountant_agreement")
    assert outcomes(by_k) == {"passed": 1, "skipped": 1, "deselected": N - 1}


def test_statuses_map_onto_outcomes(pytester):
    project(pytester, "passthrough_clip")
    res = run(pytester, "--privcheck", "-rfs")
    assert outcomes(res) == {"failed": 1, "passed": 1, "skipped": N - 1}
    res.stdout.fnmatch_lines(["FAILED conftest.py::privcheck[[]clip_contract[]]*"])
    assert "privcheck clip_contract fail at float64" in res.stdout.str()
    assert "accountant_agreement: skipped: missing binding(s): accountant_event, delta, user_epsilon" \
        in res.stdout.str()
    (pytester.path / "conftest.py").write_text(CONFTEST.format(clip="raising_clip"))
    res = run(pytester, "--privcheck", "conftest.py::privcheck[clip_contract]")
    assert outcomes(res) == {"failed": 1} and "privcheck clip_contract error" in res.stdout.str()


def test_bindings_in_any_conftest(pytester):
    project(pytester, clip=None)
    (pytester.path / "a").mkdir()
    (pytester.path / "b").mkdir()
    (pytester.path / "a" / "conftest.py").write_text(CONFTEST.format(clip="good_clip"))
    (pytester.path / "b" / "conftest.py").write_text(CONFTEST.format(clip="passthrough_clip"))
    res = run(pytester, "--privcheck", "-v", "-k", "clip_contract")
    res.stdout.fnmatch_lines(["a/conftest.py::privcheck[[]clip_contract[]] PASSED*",
                              "b/conftest.py::privcheck[[]clip_contract[]] FAILED*"])
    res = run(pytester, "--privcheck", "b/conftest.py::privcheck[clip_contract]")
    assert outcomes(res) == {"failed": 1}


def test_rootdir_conftest_outside_testpaths(pytester):
    """testpaths = ["tests"] never visits the rootdir conftest.py: its checks are collected all the same."""
    project(pytester, pyproject='[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (pytester.path / "tests").mkdir()
    (pytester.path / "test_own.py").rename(pytester.path / "tests" / "test_own.py")
    res = run(pytester, "--privcheck", "-v")
    assert f"collected {N + 1} items" in res.stdout.str()
    res.stdout.fnmatch_lines(["conftest.py::privcheck[[]clip_contract[]] PASSED*"])
    assert outcomes(res) == {"passed": 2, "skipped": N - 1}


def test_without_bindings_fails_with_instructions(pytester):
    project(pytester, clip=None)
    res = run(pytester, "--privcheck")
    assert outcomes(res) == {"passed": 1, "errors": N}
    assert "Define a `privcheck_bindings` fixture in a conftest.py" in res.stdout.str()


def test_inert_without_option(pytester):
    project(pytester, "passthrough_clip")
    res = run(pytester, "-v")
    assert outcomes(res) == {"passed": 1} and "privcheck[" not in res.stdout.str()


# ---------------------------------------------------------------------------------------------- settings

def test_pyproject_subset_xfail_and_skip(pytester):
    project(pytester, "passthrough_clip", pyproject=(
        '[tool.privcheck]\nchecks = ["poisson_sampling", "clip_contract", "fresh_randomness"]\n'
        'xfail = {clip_contract = "known: non-finite gradients pass"}\n'
        'skip = {fresh_randomness = "seeded CI"}\n'))
    res = run(pytester, "--privcheck", "-v", "-rxs")
    res.stdout.fnmatch_lines(["*privcheck[[]poisson_sampling[]] SKIPPED*",
                              "*privcheck[[]clip_contract[]] XFAIL*",
                              "*privcheck[[]fresh_randomness[]] SKIPPED*"])
    assert "known: non-finite gradients pass" in res.stdout.str() and "seeded CI" in res.stdout.str()
    assert outcomes(res) == {"passed": 1, "skipped": 2, "xfailed": 1}
    assert "privcheck: 3 checks" in res.stdout.str()                  # report header


def test_xfail_is_strict(pytester):
    project(pytester, "good_clip", pyproject='[tool.privcheck]\nchecks = ["clip_contract"]\n'
                                             'xfail = {clip_contract = "stale"}\n')
    res = run(pytester, "--privcheck")
    assert outcomes(res) == {"passed": 1, "failed": 1}                 # XPASS(strict): the setting is stale


@pytest.mark.parametrize("setting", [
    'checks = ["no_such_check"]', 'xfail = {no_such_check = "x"}', 'skip = {clip_contract = 3}',
    'precision = "float16"', 'chekcs = ["clip_contract"]',
    'xfail = {clip_contract = "a"}\nskip = {clip_contract = "b"}'])
def test_bad_settings_are_usage_errors(pytester, setting):
    project(pytester, pyproject=f"[tool.privcheck]\n{setting}\n")
    res = run(pytester, "--privcheck")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "[tool.privcheck]" in res.stderr.str()


def _precisions(reprec):
    out = {}
    for rep in reprec.getreports("pytest_runtest_logreport"):
        for key, value in rep.user_properties:
            if key == "privcheck" and rep.when == "call":
                out[value["name"]] = (value["precision"], value["status"])
    return out


def test_precision_setting_and_option(pytester):
    """A correct float32 clip: false-failed at float64 tolerances, passed at float32 ones."""
    project(pytester, "clip32", pyproject='[tool.privcheck]\nchecks = ["clip_contract"]\n')
    assert _precisions(pytester.inline_run("-p", PLUGIN, "--privcheck")) == {"clip_contract": ("float64", "fail")}
    reprec = pytester.inline_run("-p", PLUGIN, "--privcheck", "--privcheck-precision", "float32")
    assert _precisions(reprec) == {"clip_contract": ("float32", "pass")}
    (pytester.path / "pyproject.toml").write_text('[tool.privcheck]\nchecks = ["clip_contract"]\n'
                                                  'precision = "float32"\n')
    assert _precisions(pytester.inline_run("-p", PLUGIN, "--privcheck")) == {"clip_contract": ("float32", "pass")}
    reprec = pytester.inline_run("-p", PLUGIN, "--privcheck", "--privcheck-precision", "float64")  # option wins
    assert _precisions(reprec) == {"clip_contract": ("float64", "fail")}


def test_provided_test_function_follows_settings(pytester):
    project(pytester, "passthrough_clip", pyproject='[tool.privcheck]\nskip = {poisson_sampling = "slow"}\n')
    (pytester.path / "test_mine.py").write_text(f"from {PLUGIN} import privcheck_test as test_privcheck  # noqa\n")
    res = run(pytester, "test_mine.py", "-v")
    res.stdout.fnmatch_lines(["test_mine.py::test_privcheck[[]clip_contract[]] FAILED*"])
    assert outcomes(res) == {"failed": 1, "skipped": N - 1}


# ---------------------------------------------------------------------------------------------- installation

def test_plugin_registered_as_pytest11_entry_point():
    (ep,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.value == PLUGIN]
    assert ep.name == PLUGIN  # same name as the module: `-p privcheck.checks.pytest_plugin` is the same plugin


def test_plugin_import_is_cheap():
    code = (f"import sys, {PLUGIN}\n"
            "heavy = [m for m in ('torch', 'privcheck.checks.training', 'privcheck.accounting', 'dp_accounting',"
            " 'tomllib') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_autoloaded_entry_point_end_to_end(tmp_path):
    """A user's project as a user runs it: a fresh `pytest --privcheck`, the plugin found through its entry point
    (no -p), a check selected by node id on the command line. Collection only (running checks is tested
    in-process above), so the subprocess never imports torch."""
    (tmp_path / "conftest.py").write_text("import pytest\nfrom privcheck.checks.training import SuiteBindings\n\n"
                                          "@pytest.fixture\ndef privcheck_bindings():\n    return SuiteBindings()\n")
    (tmp_path / "test_own.py").write_text(OWN_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={tmp_path}",
                           "--privcheck", "--co", "test_own.py", "conftest.py::privcheck[poisson_sampling]"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert proc.stdout.splitlines()[:2] == ["test_own.py::test_own", "conftest.py::privcheck[poisson_sampling]"], out
    assert "2 tests collected" in proc.stdout, out
