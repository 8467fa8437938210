"""Events and the one entry point: every event round-trips, is hashable, validates before any work, and gives the
ε of an independent computation (dp-accounting's own accountants fed our `to_dp_event()`, Opacus's accountants on
the same history, mpmath closed forms)."""

from __future__ import annotations

import dataclasses
import json
import math

import mpmath
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from privcheck.accounting import (
    METHODS,
    BallsInBinsGaussianEvent,
    CompositionHistory,
    FixedSizeGaussianEvent,
    GaussianAboveThresholdEvent,
    GaussianEvent,
    GaussianReportNoisyMaxEvent,
    NeighboringRelation,
    PoissonGaussianEvent,
    PrivBoNEvent,
    PrivITPEvent,
    PrivITPParams,
    PrivITPPhase1Event,
    PrivITPWorstCaseEvent,
    ShuffledGaussianEvent,
    TruncatedPoissonGaussianEvent,
    calibrate,
    epsilon,
    event_from_json,
)
from privcheck.errors import InvalidParameter
from tests.accounting.reference_store import FFT_REL_TOL, ReferenceStore

# dp-accounting's PLDAccountant figures are stored references (tests/accounting/reference_store.py);
# `test_stored_references_match_live` recomputes a seeded sample of them on every run
STORE = ReferenceStore("events", libraries=("dp-accounting",), rel_tol=FFT_REL_TOL)

ITP = PrivITPParams(candidates=16, beta=0.05, sigma_x=0.05, sigma_z=0.05, headroom=0.5, sensitivity=0.01,
                    delta=1e-5, r_max=1.0)
EVENTS = [
    GaussianEvent(sigma=1.0),
    GaussianEvent(sigma=2.0, sensitivity=0.5),
    PoissonGaussianEvent(0.1, 3.0, 512),
    PoissonGaussianEvent(0.25, 1.1, 3, NeighboringRelation.REPLACE_ONE),
    CompositionHistory.parse("1.0:0.05:100,0.8:0.05:100"),
    PrivBoNEvent(0.1, 0.2, candidates=16, r_max=1.0),
    PrivBoNEvent(0.1, 0.2, mode="nominal"),
    PrivITPEvent(ITP, 0.6, 4),
    PrivITPEvent(ITP, 0.6, None),
    PrivITPPhase1Event(ITP),
    PrivITPWorstCaseEvent(ITP, 0.6, 16),
    GaussianReportNoisyMaxEvent(4, 0.3, 0.1),
    GaussianAboveThresholdEvent(3, 0.75, 0.3, math.sqrt(3) * 0.3, 1e-3),
    FixedSizeGaussianEvent(1000, 10, 1.0, 100),
    FixedSizeGaussianEvent(1000, 10, 1.0, 100, replacement=True),
    ShuffledGaussianEvent(1000, 100, 1.0, 3),
    BallsInBinsGaussianEvent(10, 1.0, 3),
    TruncatedPoissonGaussianEvent(1000, 0.01, 20, 1.0, 100),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_events_are_frozen_hashable_and_round_trip(event):
    assert hash(event) == hash(event_from_json(json.loads(json.dumps(event.to_json()))))
    assert event_from_json(json.loads(json.dumps(event.to_json()))) == event
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.__setattr__(dataclasses.fields(event)[0].name, 1)
    assert type(event) in METHODS


def test_every_event_kind_is_covered():
    assert {type(e) for e in EVENTS} == set(METHODS)


@pytest.mark.parametrize("make, name", [
    (lambda: PoissonGaussianEvent(1.5, 1.0, 1), "sampling_rate"),
    (lambda: PoissonGaussianEvent(0.1, 0.0, 1), "noise_multiplier"),
    (lambda: PoissonGaussianEvent(0.1, 1.0, 0), "steps"),
    (lambda: PoissonGaussianEvent(0.1, 1.0, 2.5), "steps"),
    (lambda: PoissonGaussianEvent(0.1, 1.0, 1, "neighbours"), "relation"),
    (lambda: GaussianEvent(sigma=float("nan")), "sigma"),
    (lambda: CompositionHistory(()), "phases"),
    (lambda: CompositionHistory.parse("1.0:0.05"), "history"),
    (lambda: CompositionHistory.parse("1.0:0.05:x"), "history"),
    (lambda: CompositionHistory.parse("1.0:2:10"), "sampling_rate"),
    (lambda: PrivBoNEvent(2.0, 0.2, candidates=16, r_max=1.0), "sensitivity"),
    (lambda: PrivBoNEvent(0.1, 0.2, candidates=16), "r_max"),
    (lambda: PrivITPEvent(ITP, 0.6, 17), "halting_time"),
    (lambda: GaussianReportNoisyMaxEvent(4, 0.3, 2.0), "sensitivity"),
    (lambda: GaussianAboveThresholdEvent(0, 0.75, 0.3, 0.3, 1e-3), "halting_time"),
])
def test_bad_events_are_refused_naming_the_parameter(make, name):
    with pytest.raises(InvalidParameter) as err:
        make()
    assert err.value.name == name


def test_entry_point_refuses_bad_calls_before_work():
    with pytest.raises(InvalidParameter, match="delta"):
        epsilon(PoissonGaussianEvent(0.1, 1.0, 10))          # approximate DP needs δ
    with pytest.raises(InvalidParameter, match="method"):
        epsilon(GaussianEvent(1.0), 1e-5, method="pld")
    with pytest.raises(InvalidParameter, match="interval"):
        epsilon(PoissonGaussianEvent(0.1, 1.0, 10), 1e-5, method="rdp", interval=1e-3)
    with pytest.raises(InvalidParameter, match="delta"):
        epsilon(PrivITPEvent(ITP, 0.6, 4), 1e-3)              # its own Phase-1 δ is 1e-5
    with pytest.raises(InvalidParameter, match="event"):
        epsilon({"kind": "gaussian", "sigma": 1.0}, 1e-5)
    with pytest.raises(InvalidParameter, match="replace-one"):
        epsilon(PoissonGaussianEvent(0.1, 1.0, 10, "replace_one"), 1e-5, method="rdp")


def test_record_carries_its_event_and_delta():
    event = PoissonGaussianEvent(0.1, 3.0, 512)
    rec = epsilon(event, 1e-6)
    assert rec.event == event and rec.delta == 1e-6
    assert rec.to_json()["event"] == event.to_json() and rec.to_json()["delta"] == 1e-6


# --- independent references: dp-accounting's own accountants on `to_dp_event()` ---------------------------------

@STORE.memo
def pld_accountant_epsilon(event_json: str, delta: float) -> float:
    """dp-accounting's PLDAccountant (its default interval) on the event's `to_dp_event()`."""
    event = event_from_json(json.loads(event_json))
    acc = PLDAccountant(neighboring_relation=event.phases[0].relation.to_dp_accounting()
                        if isinstance(event, CompositionHistory) else event.relation.to_dp_accounting())
    acc.compose(event.to_dp_event())
    return float(acc.get_epsilon(delta))


def test_stored_references_match_live():
    # the cheapest stored ones (the 64-round event and the three-round replace-one event)
    STORE.recheck(2, seed=1, where=lambda a: '"steps": 64' in a[0] or '"steps": 3' in a[0])


@pytest.mark.parametrize("event, delta", [
    (PoissonGaussianEvent(0.1, 3.0, 64), 1e-6),
    (PoissonGaussianEvent(128 / 6988, 0.4842404738068581, 50), 1 / 69880),
    (PoissonGaussianEvent(0.25, 1.1, 3, NeighboringRelation.REPLACE_ONE), 1e-5),
    (CompositionHistory.parse("1.0:0.05:100,0.8:0.05:100"), 1e-5),
    (CompositionHistory.parse("2.0:0.01:100,1.0:0.02:50,0.9:0.02:7"), 1e-6),
])
def test_pld_equals_dp_accountings_pld_accountant_on_our_dp_event(event, delta):
    reference = pld_accountant_epsilon(json.dumps(event.to_json(), sort_keys=True), delta)
    # the float cross-check is dp-accounting's figure exactly; the reported (certified) figure encloses the exact
    # ε and sits at most its stated gap above dp-accounting's pessimistic float estimate
    assert epsilon(event, delta, method="pld_float").value == pytest.approx(reference, rel=1e-9, abs=1e-9)
    record = epsilon(event, delta)
    assert record.certified is not None and record.value == record.certified.upper
    assert record.certified.lower <= reference + 1e-9
    assert record.value - reference <= max(record.certified.width, 1e-6)


def test_rdp_equals_dp_accountings_rdp_accountant_on_our_dp_event():
    event = CompositionHistory.parse("1.0:0.05:100,0.8:0.05:100")
    orders = [2, 3, 4, 5, 8, 16, 32, 64]
    acc = RdpAccountant(orders=orders)
    acc.compose(event.to_dp_event())
    assert epsilon(event, 1e-5, method="rdp", orders=orders).value == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_gaussian_dp_event_is_the_same_mechanism():
    event = GaussianEvent(sigma=2.0, sensitivity=0.5)
    acc = PLDAccountant(value_discretization_interval=1e-5)
    acc.compose(event.to_dp_event())
    certified = epsilon(event, 1e-5).value
    assert acc.get_epsilon(1e-5) == pytest.approx(certified, abs=1e-3)   # PLD discretisation vs exact
    assert acc.get_epsilon(1e-5) >= certified - 1e-9                     # pessimistic PLD is never below the exact


def test_history_of_one_phase_is_the_poisson_event_and_order_does_not_matter():
    one = epsilon(PoissonGaussianEvent(0.05, 1.0, 50), 1e-5).value
    split = epsilon(CompositionHistory.parse("1.0:0.05:30,1.0:0.05:20"), 1e-5).value
    swapped_a = epsilon(CompositionHistory.parse("1.0:0.05:25,0.8:0.05:25"), 1e-5).value
    swapped_b = epsilon(CompositionHistory.parse("0.8:0.05:25,1.0:0.05:25"), 1e-5).value
    assert split == pytest.approx(one, abs=1e-6)
    assert swapped_a == pytest.approx(swapped_b, abs=1e-6)


def test_gaussian_event_against_the_balle_wang_closed_form_in_mpmath():
    mpmath.mp.dps = 60
    rec = epsilon(GaussianEvent(sigma=1.0), 1e-5)
    mu = mpmath.mpf(1)

    def delta_at(e):
        return mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu)

    exact = mpmath.findroot(lambda e: delta_at(e) - mpmath.mpf("1e-5"), 4.4)
    assert rec.certified.lower <= exact <= rec.certified.upper == rec.value


def test_worst_case_bounds_every_outcome_it_covers():
    worst = epsilon(PrivITPWorstCaseEvent(ITP, 0.6, 16)).value
    outcomes = [epsilon(PrivITPEvent(ITP, 0.6, t)).value for t in [*range(1, 17), None]]
    assert max(outcomes) <= worst
    assert worst - max(outcomes) < 1e-9


# --- calibration through the one routine --------------------------------------------------------------------------

def test_calibrate_gaussian_sigma_never_overshoots_and_is_tight():
    cal = calibrate(lambda s: GaussianEvent(sigma=s), 1.0, 1e-5)
    assert cal.epsilon <= 1.0 and cal.event == GaussianEvent(sigma=cal.value) and cal.delta == 1e-5
    assert epsilon(GaussianEvent(sigma=cal.bracket[0]), 1e-5).value > 1.0
    assert cal.value - cal.bracket[0] <= 1e-6


def test_calibrate_steps_of_a_history_family():
    def family(t):
        return CompositionHistory(((3.0, 0.02, 20), (2.0, 0.05, t)))
    cal = calibrate(family, 1.0, 1e-5, parameter="steps")
    assert epsilon(family(cal.value), 1e-5).value <= 1.0 < epsilon(family(cal.value + 1), 1e-5).value


def test_calibrate_refuses_a_non_event_family():
    with pytest.raises(InvalidParameter, match="make_event"):
        calibrate(lambda s: s, 1.0, 1e-5)
    with pytest.raises(InvalidParameter, match="parameter"):
        calibrate(lambda s: GaussianEvent(s), 1.0, 1e-5, parameter="sigma")


# --- Opacus's accountants on the same two-phase schedule (optional extra) -----------------------------------------

def test_two_phase_schedule_matches_opacus_accountants():
    from opacus.accountants import PRVAccountant, RDPAccountant  # the pinned `integrations` extra

    history = [(1.0, 0.05, 100), (0.8, 0.05, 100)]
    event = CompositionHistory.from_opacus(history)
    assert event.to_opacus() == history
    rdp = RDPAccountant()
    rdp.history = list(history)
    integer_orders = [float(a) for a in range(2, 64)]
    ours_rdp = epsilon(event, 1e-5, method="rdp", orders=integer_orders).value
    assert ours_rdp == pytest.approx(rdp.get_epsilon(1e-5, alphas=integer_orders), rel=1e-9)
    prv = PRVAccountant()
    prv.history = list(history)
    upper = prv.get_epsilon(1e-5, eps_error=0.01)      # PRV's upper end; its estimate is within 2·eps_error
    assert upper - 0.02 <= epsilon(event, 1e-5).value <= upper
