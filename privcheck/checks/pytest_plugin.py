"""pytest plugin exposing the DP-GRPO training checks V1–V12 (docs/dpgrpo.md, "`pytest --privcheck` in your CI").

Registered through the ``pytest11`` entry point named ``privcheck.checks.pytest_plugin``, i.e. this module's own
name: an explicit ``-p privcheck.checks.pytest_plugin`` (needed only under ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) or
``pytest_plugins = ["privcheck.checks.pytest_plugin"]`` names the same plugin, which pytest then loads once
(registered under another name, the module would be loaded twice and its ``--privcheck`` option clash).

Guarantees: without ``--privcheck`` the plugin is inert. Importing it imports nothing beyond pytest (the checks,
and with them torch and the accountant, are imported only when a check runs); it adds no test, changes no test's
outcome, and its only standing effect is a default ``privcheck_bindings`` fixture that nothing else requests.

Use: override the ``privcheck_bindings`` fixture in your **rootdir** ``conftest.py`` to return your
`privcheck.checks.training.SuiteBindings` and run ``pytest --privcheck``: one test per check is collected,
``privcheck[<check name>]``. A check whose bindings are missing is reported as *skipped* with its reason (never
as passed); a failing or erroring check fails its test.

Alternatively import the provided test function into any test module (it is parametrised over the checks by
this plugin's ``pytest_generate_tests``, with or without ``--privcheck``)::

    from privcheck.checks.pytest_plugin import privcheck_test as test_privcheck  # noqa: F401
"""

from __future__ import annotations

import pytest

__all__ = ["check_names", "privcheck_bindings", "privcheck_test", "pytest_addoption", "pytest_collection_modifyitems",
           "pytest_generate_tests", "run_check"]


def check_names() -> tuple[str, ...]:
    """Names of the checks V1–V12, in suite order (imports the checks module)."""
    from privcheck.checks import training

    return tuple(training.CHECKS)


def pytest_addoption(parser):
    group = parser.getgroup("privcheck")
    group.addoption("--privcheck", action="store_true", default=False,
                    help="collect one test per privcheck dpgrpo check (V1–V12) against the `privcheck_bindings` "
                         "fixture of the rootdir conftest.py")


@pytest.fixture
def privcheck_bindings():
    """Override in your rootdir conftest.py: return a `privcheck.checks.training.SuiteBindings`."""
    pytest.fail("privcheck: no bindings. Define a `privcheck_bindings` fixture in your rootdir conftest.py that "
                "returns privcheck.checks.training.SuiteBindings(...) bound to your trainer", pytrace=False)


def run_check(name: str, bindings):
    """Run one check and translate its status: skipped → pytest.skip(reason), fail/error → pytest.fail."""
    from privcheck.checks import training

    if not isinstance(bindings, training.SuiteBindings):
        pytest.fail(f"privcheck_bindings must return SuiteBindings, got {type(bindings).__name__}", pytrace=False)
    result = training.CHECKS[name](bindings)
    if result.status == "skipped":
        pytest.skip(f"{name}: {result.message}")
    if result.status != "pass":
        pytest.fail(f"privcheck {name} {result.status}: observed={result.observed!r} expected={result.expected!r} "
                    f"tolerance={result.tolerance!r}; {result.message}", pytrace=False)
    return result


def privcheck_test(privcheck_check, privcheck_bindings):
    """One privcheck check (parametrised by `pytest_generate_tests`)."""
    run_check(privcheck_check, privcheck_bindings)


def pytest_generate_tests(metafunc):
    if "privcheck_check" in metafunc.fixturenames:
        names = check_names()
        metafunc.parametrize("privcheck_check", names, ids=names)


def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("privcheck", default=False):
        return
    for name in check_names():
        def _test(privcheck_bindings, _name=name):
            run_check(_name, privcheck_bindings)

        _test.__name__ = f"privcheck[{name}]"
        items.append(pytest.Function.from_parent(session, name=f"privcheck[{name}]", callobj=_test))
