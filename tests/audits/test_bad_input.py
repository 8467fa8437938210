"""Bad input: InvalidParameter naming the parameter, raised before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest

from audits.statistics import clopper_pearson as multirun
from audits.statistics import gdp, one_run, strategies
from audits.statistics.one_run import eps_lower, from_counts, from_scores, p_value
from privcheck.errors import InvalidParameter

SCORES = np.linspace(0, 1, 20)
LABELS = np.tile([1, -1], 10)


@pytest.fixture
def no_work(monkeypatch):
    """Any attempt to compute a bound fails the test: validation must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before validation")
    monkeypatch.setattr(one_run, "search_eps_lower", forbidden)
    monkeypatch.setattr(strategies, "search_eps_lower", forbidden)
    monkeypatch.setattr(one_run, "p_value_unchecked", forbidden)
    monkeypatch.setattr(strategies, "p_value_unchecked", forbidden)


COUNT_CASES = [
    (dict(m=1000, guesses=100, correct=101), "correct"),            # V > R
    (dict(m=10, guesses=100, correct=5), "guesses"),                # R > M
    (dict(m=1000, guesses=-1, correct=0), "guesses"),               # negative counts
    (dict(m=1000, guesses=10, correct=-3), "correct"),
    (dict(m=0, guesses=0, correct=0), "m"),
    (dict(m=10.5, guesses=1, correct=1), "m"),
    (dict(m=True, guesses=1, correct=1), "m"),
]


@pytest.mark.parametrize("counts, name", COUNT_CASES)
def test_from_counts_counts(no_work, counts, name):
    with pytest.raises(InvalidParameter) as err:
        from_counts(counts["m"], counts["guesses"], counts["correct"], delta=1e-5)
    assert err.value.name == name


@pytest.mark.parametrize("kwargs, name", [(dict(confidence=1.0), "confidence"), (dict(confidence=0.0), "confidence"),
                                          (dict(confidence=-0.5), "confidence"),
                                          (dict(confidence=math.nan), "confidence"),
                                          (dict(delta=-1e-9), "delta"), (dict(delta=1.5), "delta"),
                                          (dict(delta=math.inf), "delta"), (dict(delta="1e-5"), "delta"),
                                          (dict(eps_nominal=-1.0), "eps_nominal")])
def test_from_counts_levels(no_work, kwargs, name):
    args = dict(delta=1e-5, confidence=0.95) | kwargs
    with pytest.raises(InvalidParameter) as err:
        from_counts(1000, 100, 90, **args)
    assert err.value.name == name


@pytest.mark.parametrize("args, name", [((1000, 100, 101, 1.0, 1e-5), "v"), ((10, 100, 5, 1.0, 1e-5), "r"),
                                        ((1000, 100, 90, -0.1, 1e-5), "eps"), ((1000, 100, 90, 1.0, 2.0), "delta"),
                                        ((1000, 100, 90, math.nan, 1e-5), "eps")])
def test_p_value(args, name):
    with pytest.raises(InvalidParameter) as err:
        p_value(*args)
    assert err.value.name == name


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, math.nan])
def test_eps_lower_significance(p):
    with pytest.raises(InvalidParameter) as err:
        eps_lower(1000, 100, 90, 1e-5, p)
    assert err.value.name == "p"


@pytest.mark.parametrize("scores, labels, name", [
    ([], [], "scores"),                                            # empty score arrays
    (np.array([0.1, np.nan, 0.3, 0.2]), [1, -1, 1, -1], "scores"),  # NaN scores
    (np.array([0.1, np.inf, 0.3, 0.2]), [1, -1, 1, -1], "scores"),
    (np.ones((2, 2)), [1, -1, 1, -1], "scores"),
    (SCORES, np.ones(20), "membership"),                           # one class only
    (SCORES, -np.ones(20), "membership"),
    (SCORES, np.zeros(20), "membership"),
    (SCORES, LABELS[:10], "membership"),                           # length mismatch
    (SCORES, np.full(20, 2), "membership"),
])
def test_from_scores_arrays(no_work, scores, labels, name):
    with pytest.raises(InvalidParameter) as err:
        from_scores(scores, labels, delta=1e-5, confidence=0.95, k_plus=3)
    assert err.value.name == name


@pytest.mark.parametrize("kwargs, name", [(dict(k_plus=21), "k_plus + k_minus"), (dict(k_plus=0), "k_plus + k_minus"),
                                          (dict(k_plus=-1), "k_plus"), (dict(k_plus=3, k_minus=-2), "k_minus"),
                                          (dict(k_plus=3, delta=-1.0), "delta"),
                                          (dict(k_plus=3, confidence=1.2), "confidence"),
                                          (dict(k_plus=3, strategy="split"), "strategy"),
                                          (dict(k_plus=3, tie_break_seed=-1), "tie_break_seed")])
def test_from_scores_parameters(no_work, kwargs, name):
    args = dict(delta=1e-5, confidence=0.95) | kwargs
    with pytest.raises(InvalidParameter) as err:
        from_scores(SCORES, LABELS, **args)
    assert err.value.name == name


def test_split_and_bonferroni_parameters():
    with pytest.raises(InvalidParameter):
        strategies.Split(frac=0.0)
    with pytest.raises(InvalidParameter):
        strategies.Split(frac=0.5, seed=-3)
    with pytest.raises(InvalidParameter):
        from_scores(SCORES, LABELS, delta=0.0, strategy=strategies.Bonferroni([(30, 0)]))   # larger than m


@pytest.mark.parametrize("call, name", [
    (lambda: multirun.clopper_pearson(1, 10, 1, 10, delta=1e-5, confidence=1.0), "confidence"),
    (lambda: multirun.clopper_pearson(1, 10, 1, 10, delta=-1.0), "delta"),
    (lambda: multirun.clopper_pearson(1, 10, 1, 10, delta=1e-5, n_thresholds=0), "n_thresholds"),
    (lambda: gdp.from_rates(1, 10, 1, 10, delta=0.0), "delta"),
    (lambda: gdp.from_rates(1, 10, 12, 10, delta=1e-5), "fn"),
    (lambda: gdp.fdp_one_run(100, 10, 11, delta=1e-5), "correct"),
    (lambda: gdp.fdp_one_run(100, 10, 5, delta=1e-5, confidence=0.0), "confidence"),
    (lambda: gdp.delta_of_eps(-1.0, 1.0), "eps"),
    (lambda: gdp.delta_of_eps(1.0, math.nan), "mu"),
    (lambda: gdp.mu_of_eps(1.0, 1.0), "delta"),
])
def test_other_methods(call, name):
    with pytest.raises(InvalidParameter) as err:
        call()
    assert err.value.name == name
