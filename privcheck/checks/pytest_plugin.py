"""pytest plugin running privcheck's training checks on your trainer (docs/checks.md, "pytest --privcheck").

Registered through the ``pytest11`` entry point named ``privcheck.checks.pytest_plugin``, i.e. this module's own
name: an explicit ``-p privcheck.checks.pytest_plugin`` (needed only under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) or
``pytest_plugins = ["privcheck.checks.pytest_plugin"]`` names the same plugin, which pytest then loads once
(registered under another name, the module would be loaded twice and its options clash).

Guarantees: without ``--privcheck`` the plugin is inert. Importing it imports nothing beyond pytest (the checks,
and with them torch and the accountant, are imported only when collecting with ``--privcheck`` or running a
check); it adds no test, changes no test's outcome, and its only standing effect is a default
``privcheck_bindings`` fixture that nothing else requests.

Use: define a ``privcheck_bindings`` fixture returning your `privcheck.checks.training.SuiteBindings` in a
``conftest.py`` (any directory) and run ``pytest --privcheck``. Each such conftest.py collects one test per check
of `privcheck.checks.training.CHECKS` (or of the ``checks`` setting), with node id
``<dir>/conftest.py::privcheck[<check name>]``: select one with
``pytest --privcheck 'path/conftest.py::privcheck[poisson_sampling]'`` or ``-k poisson_sampling``. A check whose
bindings are missing is reported as *skipped* with its reason (never as passed); a failing or erroring check
fails its test. When no conftest.py under the collected paths defines the fixture, the checks are collected for
every loaded conftest.py that does (the rootdir's, those above the given paths); with none, each check errors
with instructions.

Settings (``pyproject.toml`` of the rootdir)::

    [tool.privcheck]
    checks = ["clip_contract", "poisson_sampling"]          # a subset, in this order (default: all)
    precision = "float32"                                   # tolerances (``--privcheck-precision`` overrides)
    xfail = {record_isolation = "padding couples prompts"}  # expected failure (strict: an unexpected pass fails)
    skip = {fresh_randomness = "seeded CI run"}              # not run, reported as skipped with the reason

Alternatively import the provided test function into any test module (it is parametrised over the checks by
this plugin's ``pytest_generate_tests``, with or without ``--privcheck``, and follows the same settings)::

    from privcheck.checks.pytest_plugin import privcheck_test as test_privcheck  # noqa: F401
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["PRIVCHECK_PRECISIONS", "PrivcheckConftest", "Settings", "check_names", "privcheck_bindings",
           "privcheck_test", "pytest_addoption", "pytest_collect_file", "pytest_collection_modifyitems",
           "pytest_generate_tests", "pytest_pycollect_makemodule", "pytest_report_header", "run_check", "settings"]

# the names of privcheck.checks.precision.PRECISIONS, repeated here so that the option needs no import
PRIVCHECK_PRECISIONS = ("float64", "float32", "bfloat16")
FIXTURE = "privcheck_bindings"
_SETTINGS = pytest.StashKey()
_COLLECTED = pytest.StashKey()


def check_names() -> tuple[str, ...]:
    """Names of the user-facing checks (`privcheck.checks.training.CHECKS`), in catalogue order."""
    from privcheck.checks import training

    return tuple(training.CHECKS)


def pytest_addoption(parser):
    group = parser.getgroup("privcheck")
    group.addoption("--privcheck", action="store_true", default=False,
                    help="collect one test per privcheck training check (privcheck.checks.training.CHECKS, listed "
                         "in docs/checks.md) for each conftest.py defining a `privcheck_bindings` fixture")
    group.addoption("--privcheck-precision", default=None, choices=PRIVCHECK_PRECISIONS,
                    help="precision whose tolerances the checks use (default: [tool.privcheck] precision, else "
                         "the bindings' precision, else float64)")


# ---------------------------------------------------------------------------------------------- settings

class Settings:
    """The ``[tool.privcheck]`` settings, validated: `checks` (names, in run order), `precision` (None: the
    bindings' own), `xfail` and `skip` (check name → reason)."""

    def __init__(self, checks, precision, xfail, skip, source):
        self.checks, self.precision, self.xfail, self.skip, self.source = checks, precision, xfail, skip, source

    def marks(self, name: str) -> list:
        """The pytest marks the settings put on check `name`."""
        if name in self.skip:
            return [pytest.mark.skip(reason=f"[tool.privcheck] skip: {self.skip[name]}")]
        if name in self.xfail:
            return [pytest.mark.xfail(reason=f"[tool.privcheck] xfail: {self.xfail[name]}", strict=True)]
        return []


def _pyproject(config) -> Path:
    inipath = getattr(config, "inipath", None)
    if inipath is not None and Path(inipath).name == "pyproject.toml":
        return Path(inipath)
    return Path(config.rootpath) / "pyproject.toml"


def settings(config) -> Settings:
    """The validated settings of this run (cached); a bad setting raises `pytest.UsageError` naming it."""
    if _SETTINGS in config.stash:
        return config.stash[_SETTINGS]
    import tomllib

    path = _pyproject(config)
    table = {}
    if path.is_file():
        with path.open("rb") as fh:
            table = tomllib.load(fh).get("tool", {}).get("privcheck", {})
    names = check_names()

    def bad(key, value, allowed):
        return pytest.UsageError(f"{path}: [tool.privcheck] {key} = {value!r}: expected {allowed}")

    unknown_keys = sorted(set(table) - {"checks", "precision", "xfail", "skip"})
    if unknown_keys:
        raise bad(unknown_keys[0], table[unknown_keys[0]], "one of the keys checks, precision, xfail, skip")
    checks = table.get("checks", list(names))
    if not isinstance(checks, list) or not checks or any(c not in names for c in checks) \
            or len(set(checks)) != len(checks):
        raise bad("checks", checks, f"a non-empty list of distinct check names among {names}")
    per_check = {}
    for key in ("xfail", "skip"):
        value = table.get(key, {})
        if not isinstance(value, dict) or any(k not in names or not isinstance(r, str) or not r
                                              for k, r in value.items()):
            raise bad(key, value, f"a table of check name = \"reason\", names among {names}")
        per_check[key] = dict(value)
    both = sorted(set(per_check["xfail"]) & set(per_check["skip"]))
    if both:
        raise bad("xfail", per_check["xfail"], f"no check both in xfail and skip (found {both})")
    precision = config.getoption("privcheck_precision", default=None) or table.get("precision")
    if precision is not None and precision not in PRIVCHECK_PRECISIONS:
        raise bad("precision", precision, f"one of {PRIVCHECK_PRECISIONS}")
    out = Settings(tuple(checks), precision, per_check["xfail"], per_check["skip"], str(path))
    config.stash[_SETTINGS] = out
    return out


# ---------------------------------------------------------------------------------------------- running

@pytest.fixture
def privcheck_bindings():
    """Override in a conftest.py: return a `privcheck.checks.training.SuiteBindings`."""
    pytest.fail("privcheck: no bindings. Define a `privcheck_bindings` fixture in a conftest.py that returns "
                "privcheck.checks.training.SuiteBindings(...) bound to your trainer", pytrace=False)


def run_check(name: str, bindings, precision: str | None = None, item=None):
    """Run one check at `precision` (None: the bindings' own) and translate its status: skipped →
    pytest.skip(reason), fail/error → pytest.fail; the result's JSON goes to `item.user_properties`."""
    from privcheck.checks import training

    if not isinstance(bindings, training.SuiteBindings):
        pytest.fail(f"privcheck_bindings must return SuiteBindings, got {type(bindings).__name__}", pytrace=False)
    result = training.CHECKS[name](bindings, precision)
    if item is not None:
        item.user_properties.append(("privcheck", result.to_json()))
    if result.status == "skipped":
        pytest.skip(f"{name}: {result.message}")
    if result.status != "pass":
        # the message first: it names each failed quantity (and, for poisson_sampling, the observed scheme)
        pytest.fail(f"privcheck {name} {result.status} at {result.precision}: {result.message}\n"
                    f"observed={result.observed!r} expected={result.expected!r} tolerance={result.tolerance!r}",
                    pytrace=False)
    return result


def privcheck_test(privcheck_check, privcheck_bindings, request):
    """One privcheck check (parametrised by `pytest_generate_tests`)."""
    run_check(privcheck_check, privcheck_bindings, settings(request.config).precision, request.node)


def pytest_generate_tests(metafunc):
    if "privcheck_check" in metafunc.fixturenames:
        s = settings(metafunc.config)
        metafunc.parametrize("privcheck_check", [pytest.param(n, marks=s.marks(n), id=n) for n in s.checks])


# ---------------------------------------------------------------------------------------------- collection

def _run_item(privcheck_bindings, request):
    run_check(request.node.privcheck_check, privcheck_bindings, settings(request.config).precision, request.node)


class PrivcheckConftest(pytest.File):
    """The checks of one conftest.py that defines `privcheck_bindings`: one item per check, named
    ``privcheck[<check>]``, whose `privcheck_bindings` is the fixture visible from that directory."""

    def collect(self):
        s = settings(self.config)
        self.config.stash.setdefault(_COLLECTED, set()).add(self.path)
        for name in s.checks:
            item = pytest.Function.from_parent(self, name=f"privcheck[{name}]", callobj=_run_item)
            item.privcheck_check = name
            for mark in s.marks(name):
                item.add_marker(mark)
            yield item


def _defines_bindings(config, path: Path) -> bool:
    """True when the conftest module loaded from `path` defines the `privcheck_bindings` fixture."""
    path = Path(path).resolve()
    for plugin in config.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if file and Path(file).resolve() == path and hasattr(plugin, FIXTURE):
            return True
    return False


def pytest_collect_file(file_path, parent):
    # a conftest.py met while walking a directory (given explicitly, it reaches pytest_pycollect_makemodule)
    config = parent.config
    if not config.getoption("privcheck", default=False) or file_path.name != "conftest.py" \
            or parent.session.isinitpath(file_path) or not _defines_bindings(config, file_path):
        return None
    return PrivcheckConftest.from_parent(parent, path=file_path)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    # a conftest.py named on the command line ('path/conftest.py::privcheck[name]'): its checks, not a Module
    config = parent.config
    if config.getoption("privcheck", default=False) and module_path.name == "conftest.py" \
            and _defines_bindings(config, module_path):
        return PrivcheckConftest.from_parent(parent, path=module_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # before -k / -m deselection: when no collected conftest.py defined the fixture, the loaded ones that do (or,
    # with none, the rootdir's place, where the default fixture errors with instructions)
    if not config.getoption("privcheck", default=False) or config.stash.get(_COLLECTED, None):
        return
    paths = sorted({Path(p.__file__).resolve() for p in config.pluginmanager.get_plugins()
                    if getattr(p, "__file__", None) and Path(p.__file__).name == "conftest.py"
                    and hasattr(p, FIXTURE)})
    for path in paths or [Path(config.rootpath) / "conftest.py"]:
        collector = PrivcheckConftest.from_parent(session, path=path)
        new = list(collector.collect())
        items.extend(new)
        # counted in "collected N items" like any collected test
        config.hook.pytest_collectreport(report=pytest.CollectReport(collector.nodeid, "passed", None, new))


def pytest_report_header(config):
    if not config.getoption("privcheck", default=False):
        return None
    s = settings(config)
    extra = "".join(f", {k} {sorted(v)}" for k, v in (("xfail", s.xfail), ("skip", s.skip)) if v)
    return (f"privcheck: {len(s.checks)} checks, precision {s.precision or 'of the bindings (default float64)'}"
            f"{extra} (settings: {s.source})")
