"""Shared pytest configuration: a deterministic hypothesis profile, loaded by default.

`derandomize=True` makes every property test draw the same examples on every run (no flaky CI, no
example database needed) and `deadline=None` because several properties call accounting code whose
cost varies by an order of magnitude with the parameters. Select another profile with
`HYPOTHESIS_PROFILE=<name>`; "thorough" draws more examples (still deterministic).
"""

from __future__ import annotations

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
