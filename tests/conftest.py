"""Shared pytest configuration: a deterministic hypothesis profile, loaded by default.

`derandomize=True` makes every property test draw the same examples on every run (no flaky CI, no
example database needed) and `deadline=None` because several properties call accounting code whose
cost varies by an order of magnitude with the parameters. Select another profile with
`HYPOTHESIS_PROFILE=<name>`; "thorough" draws more examples (still deterministic).
"""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "privcheck",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("privcheck"), max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "privcheck"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module of tiny-model tests: faster, and immune to OpenMP spin-waits on a
    shared, loaded CPU. Use with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def steinke_only_audits():
    """The gradient-canary audits (audits.dpgrpo.gradient_canary, audits.gradient_log) without their second bound
    (audits.statistics.both_bounds: certified PLD curves, seconds per audit): for fast tests of other parts of an
    audit. The reports then carry the Steinke bound only; the second bound is tested in
    tests/audits/test_both_bounds.py, by the module audit of tests/audits/test_dpgrpo_canary.py and by the slow
    tests of tests/audits/test_gradient_log.py."""
    import audits.dpgrpo.gradient_canary as dc
    import audits.gradient_log as gl

    with pytest.MonkeyPatch.context() as mp:
        for module in (dc, gl):
            mp.setattr(module, "with_claim_curve", lambda report, event: report)
        yield


@pytest.fixture
def steinke_only():
    """`steinke_only_audits()` for one test."""
    with steinke_only_audits():
        yield


# Test files that evaluate the same certified ε (the seven Table VI rows, the JAX-Privacy row, the MATH ε = 8
# calibration: V12 `accountant_reference`, the `accounting` suite of `privcheck verify`, the docs' figures) share one
# xdist work unit, so the accountant's in-process cache computes each value once per session instead of once per worker.
# Every other file is a unit of its own, as `--dist loadfile` makes it (`make test`).
SHARED_ACCOUNTANT_UNIT = "table_vi_accountant"
SHARED_ACCOUNTANT_FILES = frozenset({
    "tests/accounting/test_dpsgd.py",
    "tests/accounting/test_calibration.py",
    "tests/test_verify.py",
    "tests/dpgrpo/test_suite.py",
    "tests/checks/test_training_checks.py",
    "tests/bug_zoo/test_dpgrpo_zoo.py",
    "tests/benchmarks/test_bench_accounting.py",
    "tests/test_docs.py",
})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadfile scheduler, with the files of SHARED_ACCOUNTANT_FILES as one unit (any other --dist
    mode is left to xdist)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedAccountantScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_ACCOUNTANT_UNIT if path in SHARED_ACCOUNTANT_FILES else path

    return SharedAccountantScheduling(config, log)
