"""pytest plugin exposing the dpgrpo checks V1–V12 (spec §8).

Use: ``pytest -p privcheck.checks.pytest_plugin --privcheck`` (or register it through a ``pytest11`` entry
point). Override the ``privcheck_bindings`` fixture in your **rootdir** ``conftest.py`` to return your
`SuiteBindings`; ``--privcheck`` then collects one test per check, ``privcheck[<check name>]``. A check whose
bindings are missing is reported as *skipped* with its reason; a failing or erroring check fails the test.

Alternatively import the provided test function into any test module (it is parametrised over the checks by
this plugin's ``pytest_generate_tests``)::

    from privcheck.checks.pytest_plugin import privcheck_test as test_privcheck  # noqa: F401
"""

from __future__ import annotations

import pytest

from privcheck.checks import dpsgd

CHECK_NAMES = tuple(dpsgd.CHECKS)


def pytest_addoption(parser):
    group = parser.getgroup("privcheck")
    group.addoption("--privcheck", action="store_true", default=False,
                    help="collect one test per privcheck dpgrpo check (V1–V12) against the `privcheck_bindings` "
                         "fixture")


@pytest.fixture
def privcheck_bindings():
    """Override in your rootdir conftest.py: return a `privcheck.checks.dpsgd.SuiteBindings`."""
    pytest.fail("privcheck: no bindings. Define a `privcheck_bindings` fixture in your rootdir conftest.py that "
                "returns privcheck.checks.dpsgd.SuiteBindings(...) bound to your trainer", pytrace=False)


def run_check(name: str, bindings):
    """Run one check and translate its status: skipped → pytest.skip(reason), fail/error → pytest.fail."""
    if not isinstance(bindings, dpsgd.SuiteBindings):
        pytest.fail(f"privcheck_bindings must return SuiteBindings, got {type(bindings).__name__}", pytrace=False)
    result = dpsgd.CHECKS[name](bindings)
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
        metafunc.parametrize("privcheck_check", CHECK_NAMES, ids=CHECK_NAMES)


def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("privcheck", default=False):
        return
    for name in CHECK_NAMES:
        def _test(privcheck_bindings, _name=name):
            run_check(_name, privcheck_bindings)

        _test.__name__ = f"privcheck[{name}]"
        items.append(pytest.Function.from_parent(session, name=f"privcheck[{name}]", callobj=_test))
