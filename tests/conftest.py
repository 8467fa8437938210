"""Shared pytest configuration: a deterministic hypothesis profile, loaded by default.

`derandomize=True` makes every property test draw the same examples on every run (no flaky CI, no
example database needed) and `deadline=None` because several properties call accounting code whose
cost varies by an order of magnitude with the parameters. Select another profile with
`HYPOTHESIS_PROFILE=<name>`; "thorough" draws more examples (still deterministic).
"""

from __future__ import annotations

import os

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
