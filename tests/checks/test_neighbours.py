"""Neighbouring pairs (privcheck/checks/neighbours.py, docs/whole_step.md "Neighbours"): positions, the coupling
rule per removal mode, and the search's reproducibility. Expected pairs are written out by hand."""

from __future__ import annotations

import pytest

from privcheck.checks.neighbours import Pair, coverage, pairs, position_of, search_pairs, supported_positions
from privcheck.errors import InvalidParameter

A = None


def test_absent_add_at_every_slot():
    got = pairs(["a", "b"], "x", removal="absent", absent=A, cases=("add",))
    assert [(p.label, p.small, p.big, p.index, p.position) for p in got] == [
        ("add@first", (A, "a", "b"), ("x", "a", "b"), 0, "first"),
        ("add@middle", ("a", A, "b"), ("a", "x", "b"), 1, "middle"),
        ("add@last", ("a", "b", A), ("a", "b", "x"), 2, "last")]
    assert all(p.shared_index(j) == j for p in got for j in range(3))


def test_drop_index_coupling_keeps_indices():
    assert supported_positions("drop", "index") == ("last",)
    got = pairs(["a", "b", "c"], "x", removal="drop", cases=("add", "remove"))
    assert [(p.label, p.small, p.big, p.index) for p in got] == [
        ("add@last", ("a", "b", "c"), ("a", "b", "c", "x"), 3),
        ("remove[0]", ("b", "c"), ("b", "c", "a"), 2),
        ("remove[1]", ("a", "c"), ("a", "c", "b"), 2),
        ("remove[2]", ("a", "b"), ("a", "b", "c"), 2)]


def test_drop_record_coupling_shifts_indices():
    got = pairs(["a", "b", "c"], "x", removal="drop", coupling="record", cases=("add", "remove"))
    first = got[0]
    assert (first.label, first.big, first.index) == ("add@first", ("x", "a", "b", "c"), 0)
    assert [first.big[first.shared_index(j)] for j in range(3)] == list(first.small)
    middle = next(p for p in got if p.label == "remove[1]")
    assert (middle.small, middle.big, middle.position) == (("a", "c"), ("a", "b", "c"), "middle")
    assert [middle.big[middle.shared_index(j)] for j in range(2)] == list(middle.small)


def test_positions_and_validation():
    assert position_of(["x"], 0) == "alone" and position_of([A, "x", A], 1, removal="absent") == "alone"
    for bad in (dict(positions=("front",)), dict(positions=()), dict(removal="swap"), dict(coupling="hash")):
        with pytest.raises(InvalidParameter):
            pairs(["a", "b"], "x", **bad)
    with pytest.raises(InvalidParameter):
        search_pairs(["a", "b"], "x", examples=0)


def test_search_is_deterministic_and_sweeps_the_pool():
    pool = {"twin": "a2", "extreme": "z"}
    kw = dict(removal="absent", absent=A, pool=pool, examples=20, seed=7)
    one, two = search_pairs(["a", "b"], "x", **kw), search_pairs(["a", "b"], "x", **kw)
    assert one == two and len(one) == 20 and len({p.label for p in one}) == 20
    assert [p.label for p in one[:3]] == ["sweep:twin@first", "sweep:extreme@first", "sweep:addition@first"]
    for p in one:
        assert isinstance(p, Pair) and p.searched and len(p.big) == len(p.small) == 3
        assert p.small[p.index] is A and p.big[p.index] is not A
        assert [p.small[j] for j in range(3) if j != p.index] == [p.big[j] for j in range(3) if j != p.index]
    cov = coverage(one, removal="absent", absent=A)
    assert set(cov["positions"]) >= {"first", "last"} and {"twin", "extreme", "addition"} <= set(cov["kinds"])
    other = search_pairs(["a", "b"], "x", **{**kw, "seed": 8})
    assert other[:3] == one[:3] and other != one
    drop = search_pairs(["a", "b"], "x", removal="drop", coupling="record", pool=pool, examples=15, seed=1)
    for p in drop:          # record coupling: the records of a dataset are distinct
        assert len(set(p.big)) == len(p.big) and len(p.big) == len(p.small) + 1
