"""Slow tier of test_gaussian_edges.py: the same oracles and strategies over the full legal ranges, more examples.

Run with `-m slow`. Oracles: tests/accounting/gaussian_oracles.py (mpmath, ≥ 60 digits, independent of the
library). A few minutes on two cores.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.accounting.gaussian import dp_to_gdp, gdp_to_dp
from tests.accounting.test_gaussian_edges import (
    EPS_MAX,
    at_case,
    check_epsilon_record,
    check_mu_bracket,
    deltas,
    gaussian_epsilon_case,
    legal_sigma,
    rnm_case,
)

pytestmark = pytest.mark.slow


@settings(max_examples=120)
@given(delta=deltas, u=st.floats(0, 1), k=st.integers(-300, 300))
def test_gaussian_epsilon_full_range_many(delta, u, k):
    gaussian_epsilon_case(delta, u, k)


@settings(max_examples=60)
@given(delta=deltas, u=st.floats(0, 1))
def test_gdp_to_dp_full_range(delta, u):
    legal = legal_sigma(delta, u, 0)
    if legal is None:
        return
    _sigma, _sens, mu = legal
    mu_f = float(mu)
    if Fraction(mu_f) > mu:
        mu_f = math.nextafter(mu_f, 0.0)
    if mu_f > 0:
        check_epsilon_record(gdp_to_dp(mu_f, delta), Fraction(mu_f), delta)


@settings(max_examples=100)
@given(delta=deltas, x=st.floats(-323.0, 4.0))
def test_dp_to_gdp_full_range_many(delta, x):
    eps = min(10.0 ** x, float(EPS_MAX))
    if eps > 0:
        rec = dp_to_gdp(eps, delta)
        check_mu_bracket(rec.certified.lower, rec.certified.upper, eps, delta)


@settings(max_examples=15)
@given(d=st.one_of(st.integers(2, 64), st.integers(2, 2 ** 53)), k=st.integers(-300, 300),
       a_units=st.floats(-50, 50), s=st.floats(1e-3, 100.0), frac=st.floats(-300, 0).map(lambda x: 10.0 ** x))
def test_rnm_full_range_many(d, k, a_units, s, frac):
    rnm_case(d, k, a_units, s, frac)


@settings(max_examples=15)
@given(t=st.one_of(st.integers(1, 32), st.integers(1, 2 ** 53)), k=st.integers(-300, 300),
       a_units=st.floats(-50, 50), s=st.floats(1e-3, 50.0), rho_u=st.floats(0, 1), ratio=st.floats(-3, 2),
       frac=st.floats(-300, 0).map(lambda x: 10.0 ** x))
def test_at_full_range_many(t, k, a_units, s, rho_u, ratio, frac):
    at_case(t, k, a_units, s, rho_u, ratio, frac)
