"""Shared fixtures of the audit tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fresh_ceiling_cache():
    """Tests that monkeypatch the p-value internals must not leave a poisoned cached ceiling for later tests."""
    from audits import pvalue

    pvalue.ceiling.cache_clear()
    yield
    pvalue.ceiling.cache_clear()
