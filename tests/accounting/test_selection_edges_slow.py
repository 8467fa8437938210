"""Larger sweeps of tests/accounting/test_selection_edges.py (same oracles and strategies, more examples)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.accounting import test_selection_edges as edges

pytestmark = pytest.mark.slow


@settings(max_examples=400)
@given(edges.privitp_points())
def test_kappa_single_sweep(point):
    edges.test_kappa_single_never_under_reports_and_encloses.hypothesis.inner_test(point)


@settings(max_examples=150)
@given(edges.privitp_points(), st.integers(-40, 0))
def test_kappa_batch_sweep(point, log2_step):
    edges.test_kappa_batch_bounds_and_agrees_with_single.hypothesis.inner_test(point, log2_step)


@settings(max_examples=100)
@given(edges.privitp_points(), st.sampled_from([1, 3, None]), st.floats(-10, 5), st.floats(-12, -0.5))
def test_loss_sweep(point, t, log2_mu, log10_delta):
    edges.test_loss_single_and_batch_never_under_report.hypothesis.inner_test(point, t, log2_mu, log10_delta)


@settings(max_examples=600)
@given(edges.bon_points())
def test_privbon_sweep(point):
    edges.test_privbon_bounded_range_never_under_reports_and_encloses.hypothesis.inner_test(point)
