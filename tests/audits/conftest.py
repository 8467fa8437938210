"""Shared fixtures of the audit tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fresh_ceiling_cache():
    """Tests that monkeypatch the p-value internals must not leave a poisoned cached ceiling for later tests."""
    from audits.statistics import pvalue

    pvalue.ceiling.cache_clear()
    yield
    pvalue.ceiling.cache_clear()


@pytest.fixture
def lightly_pretrained(monkeypatch):
    """`lightly_pretrained(name, **changes)` registers tiny-cpu (model, task, mechanism constants; `changes` to the
    preset) as `name` with 2 public pretraining steps instead of 100 and returns its audit preset: for the tests in
    which the pretrained weights do not matter (refusals before training, the command line)."""
    import dataclasses

    from audits.dpgrpo import gradient_canary as dc
    from mechanisms.dpgrpo import presets

    def register(name="tiny-cpu-light", **changes):
        monkeypatch.setitem(presets.PRESETS, name,
                            dataclasses.replace(presets.TINY_CPU, name=name, pretrain_steps=2, **changes))
        monkeypatch.setitem(dc.AUDIT_PRESETS, name, lambda: dc.audit_preset(name))
        return dc.resolve_preset(name)

    return register
