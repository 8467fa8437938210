"""`memoized_power()`: inside it, `audits.statistics.power` computes each ε search and each ceiling once per test
module.

`audits.statistics.power.plan` spends most of its time in `eps_lower(m, k, v, δ, p)` (a p-value bisection) and in the
ceiling ε_max(m, δ, confidence) (24 of those searches), both pure functions of their arguments. A module that plans many
audits at the same (m, δ) repeats the same searches plan after plan. Inside the context the module
`audits.statistics.power` looks them up in memos that the real functions fill on first use, so every value is still the
library's own. Tests of `ceiling` or `eps_lower` themselves import the functions directly and call the real ones;
nothing here is active outside the `with` block (the p-value internals that other modules monkeypatch are never cached).
"""

from __future__ import annotations

import contextlib
import functools

import pytest

from audits.statistics import power

__all__ = ["memoized_power"]


@contextlib.contextmanager
def memoized_power():
    real_ceiling = power.ceiling
    eps_lower = functools.cache(power.eps_lower)
    cached_ceiling = functools.cache(real_ceiling)

    def ceiling(m, delta, confidence=0.95, r_grid=None):
        return real_ceiling(m, delta, confidence, r_grid) if r_grid is not None else cached_ceiling(m, delta,
                                                                                                      confidence)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(power, "eps_lower", eps_lower)
        patch.setattr(power, "ceiling", ceiling)
        yield
