"""Tightness of the certified PLD enclosure at small q and small ε (issue 25 item 4).

Both ends are judged against dp-accounting (tests/accounting/pld_references.py): its pessimistic
connect-the-dots PLD at a 10× finer interval than the one the certified figure used (details["interval"]) is the
upper reference, its optimistic PLD (losses rounded down, a lower bound on the exact ε) the lower one. Soundness:
the certified upper end is never below the optimistic ε and the lower end never above the pessimistic one.
Tightness: where the record says `meets_tolerance`, both ends lie within DEFAULT_REL_TOLERANCE of the
pessimistic reference (DEFAULT_ABS_TOLERANCE below ε = 0.01), as the target gap promises; where it does not, the
record's gap really exceeds its target. Where dp-accounting's PLD at the finer interval would exceed
REFERENCE_MAX_BUCKETS buckets, the references are taken at the finest interval that fits and only soundness is
asserted (the optimistic/pessimistic PLDs bound the exact ε at any interval, docs/accounting.md "Certified PLD").
At q = 1 both references are the exact ε of T Gaussian rounds (Balle–Wang, 60-digit mpmath): there dp-accounting's
"optimistic" ε lies above the exact one at δ = 1e-12 (q = 1, σ = 1, T = 1: 7.238616 vs 7.238494), so it is
no lower bound. Hypothesis draws are derandomized (tests/conftest.py profile), so every run checks the same points.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from privcheck.accounting.pld_certified import (
    DEFAULT_ABS_TOLERANCE,
    DEFAULT_REL_TOLERANCE,
    DEFAULT_TOLERANCE,
    certified_epsilon,
    gap_target,
)
from privcheck.errors import InvalidParameter
from tests.accounting import pld_references as ref

REFERENCE_MAX_BUCKETS = 1 << 22


def reference_buckets(q: float, sigma: float, steps: int, interval: float) -> float:
    """About how many buckets dp-accounting's composed PLD holds: one round's loss range over ±8σ of noise plus
    the composed spread (at most 16√T loss standard deviations), over the interval (a size estimate only)."""
    top = 1.0 + 8.0 * sigma
    bottom = -8.0 * sigma

    def loss(x):
        return math.log1p(q * math.expm1(min((2 * x - 1) / (2 * sigma * sigma), 700.0)))
    width = loss(top) - loss(bottom)
    spread = q * math.sqrt(math.expm1(min(1.0 / (sigma * sigma), 700.0)))
    return (width + min(steps * width, 16 * math.sqrt(steps) * spread)) / interval


def within(x: float, reference: float) -> bool:
    return abs(x - reference) <= max(DEFAULT_REL_TOLERANCE * reference, DEFAULT_ABS_TOLERANCE)


def judge(q: float, sigma: float, steps: int, delta: float) -> dict:
    """Certify one point and check it against dp-accounting as described in the module docstring."""
    b = certified_epsilon(((q, sigma, steps),), delta)
    fine = b.details["interval"] / 10
    h = fine
    while reference_buckets(q, sigma, steps, h) > REFERENCE_MAX_BUCKETS:
        h *= 2
    if q == 1.0:       # Gaussian rounds: the exact ε (Balle–Wang closed form, 60-digit mpmath) serves as both
        opt = pess = float(ref.gdp_epsilon(math.sqrt(steps) / sigma, delta))
    else:
        ((opt, pess),) = ref.dpa_bracket(((q, sigma, steps),), (delta,), h)
    point = {"point": (q, sigma, steps, delta), "certified": (b.lower, b.upper), "reference": (opt, pess),
             "interval": b.details["interval"], "reference_interval": h,
             "meets_tolerance": b.details["meets_tolerance"]}
    assert b.lower <= b.upper, point
    assert b.upper >= opt, point                   # never below a lower bound on the exact ε
    assert b.lower <= pess, point                  # never above an upper bound on it
    if b.details["meets_tolerance"]:
        assert b.gap <= gap_target(b.lower), point
        if h == fine:
            assert within(b.upper, pess) and within(b.lower, pess), point
    else:
        assert b.gap > gap_target(b.lower), point

    return point


# --- the target gap and the start lattice -------------------------------------------------------------------

@pytest.mark.parametrize("lower, expected", [
    (0.0, DEFAULT_ABS_TOLERANCE),                  # below ε = 0.01: the absolute floor
    (0.005, DEFAULT_ABS_TOLERANCE),
    (0.05, 0.05 * DEFAULT_REL_TOLERANCE),          # 1% of ε
    (0.1, 0.1 * DEFAULT_REL_TOLERANCE),            # = 1e-3: where the absolute cap takes over
    (8.0, DEFAULT_TOLERANCE),                      # never looser than 1e-3
])
def test_gap_target_closed_form(lower, expected):
    assert math.isclose(gap_target(lower), expected, rel_tol=1e-12)
    assert (DEFAULT_REL_TOLERANCE, DEFAULT_ABS_TOLERANCE, DEFAULT_TOLERANCE) == (1e-2, 1e-4, 1e-3)


@pytest.mark.parametrize("name", ["tolerance", "rel_tolerance", "abs_tolerance"])
@pytest.mark.parametrize("bad", [0.0, -1e-3, float("nan"), "x"])
def test_bad_tolerances_are_refused(name, bad):
    with pytest.raises(InvalidParameter, match=name):
        certified_epsilon(((0.01, 1.0, 10),), 1e-5, **{name: bad})


@pytest.mark.parametrize("q, sigma, expected", [
    (1.0, 1.0, 4e-4),              # wide spread: 1e-4·2^k with k ≤ 2, as before
    (0.01, 1.0, 2e-4),             # spread 0.0131: 1/64 of it rounded down to 1e-4·2^k
    (1e-3, 1.0, 1e-4),             # spread 1.3e-3: eight lattice points or more at 1e-4
    (1.18e-4, 0.961, 1.25e-5),     # spread 1.6e-4: 1/8 of it rounded down to 1e-4·2^-k
    (1e-6, 1.0, 6.25e-6),          # spread 1.3e-6: the start's floor (finer only on demand)
])
def test_start_interval_follows_the_loss_spread(q, sigma, expected):
    b = certified_epsilon(((q, sigma, 1),), 1e-5)
    assert b.details["tries"][0]["interval"] == expected


# --- the loose corners of the issue -------------------------------------------------------------------------

def test_small_q_small_delta_corner_sigma_1_2():
    """q = 1.18e-4, σ = 1.2, T = 133, δ = 5e-12: main reported 0.0737 where dp-accounting gives 0.0217."""
    point = judge(1.18e-4, 1.2, 133, 5e-12)
    assert point["meets_tolerance"], point


def test_tiny_q_corner():
    """q = 1e-6, σ = 1, T = 100, δ = 1e-5: the exact ε is 0 (δ(0), the total variation, is below δ); the enclosure
    was [0, 8.2e-5] and is now within 1e-4 of it at a lattice scaled to the spread."""
    point = judge(1e-6, 1.0, 100, 1e-5)
    assert point["meets_tolerance"] and point["interval"] < 1e-4, point


@pytest.mark.slow
def test_large_t_small_q_corner():
    """q = 1e-4, σ = 0.5, T = 10⁴, δ = 1e-5 (main: [1.1550, 1.1776]): both ends within 1% of dp-accounting even
    where the 1e-3 cap is not met."""
    b = certified_epsilon(((1e-4, 0.5, 10 ** 4),), 1e-5)
    ((opt, pess),) = ref.dpa_bracket(((1e-4, 0.5, 10 ** 4),), (1e-5,), 1e-5)
    assert opt <= b.upper and b.lower <= pess
    assert within(b.upper, pess) and within(b.lower, pess), (b.lower, b.upper, opt, pess)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not met yet: the composition's float error bounds dominate at q = 1.18e-4, "
                                       "σ = 0.961, δ = 5e-12 (enclosure about [0.033, 0.095] around 0.0871)")
def test_small_q_small_delta_corner_sigma_0_961():
    point = judge(1.18e-4, 0.961, 133, 5e-12)
    assert point["meets_tolerance"], point


# --- the Done-when box --------------------------------------------------------------------------------------

BOX = dict(
    log_q=st.floats(math.log(1e-6), 0.0),
    log_sigma=st.floats(math.log(0.3), math.log(20.0)),
    log_steps=st.floats(0.0, math.log(1e5)),
    log_delta=st.floats(math.log(1e-12), math.log(1e-2)),
)


# a failing point is reported as drawn: shrinking would recompute certified enclosures for minutes
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _point(log_q, log_sigma, log_steps, log_delta):
    return (min(math.exp(log_q), 1.0), math.exp(log_sigma), max(1, min(10 ** 5, round(math.exp(log_steps)))),
            math.exp(log_delta))


@settings(max_examples=2, deadline=None, phases=NO_SHRINK)
@given(log_q=BOX["log_q"], log_sigma=BOX["log_sigma"], log_steps=BOX["log_steps"], log_delta=BOX["log_delta"])
def test_box_sweep_fast(log_q, log_sigma, log_steps, log_delta):
    judge(*_point(log_q, log_sigma, log_steps, log_delta))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, phases=NO_SHRINK)
@given(log_q=BOX["log_q"], log_sigma=BOX["log_sigma"], log_steps=BOX["log_steps"], log_delta=BOX["log_delta"])
def test_box_sweep_slow(log_q, log_sigma, log_steps, log_delta):
    judge(*_point(log_q, log_sigma, log_steps, log_delta))
