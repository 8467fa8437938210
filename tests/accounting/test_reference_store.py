"""The stored-reference memo (tests/accounting/reference_store.py): exact round trips, live fallback, and a
recheck that fails on a wrong stored value."""

from __future__ import annotations

import json
from fractions import Fraction

import mpmath
import pytest

from tests.accounting.reference_store import ReferenceStore, decode, encode


def test_values_round_trip_exactly():
    with mpmath.workdps(80):
        third = mpmath.mpf(1) / 3
    for value in (0.1, -0.0, float("inf"), 5e-324, 2 ** 80, None, "x", Fraction(1, 3), third, (1.5, (third, None))):
        back = decode(json.loads(json.dumps(encode(value))))
        assert back == value and type(back) is type(value) and repr(back) == repr(value)
    with mpmath.workdps(15):                       # decoding does not round to the working precision
        assert decode(encode(third)) == third and decode(encode(third))._mpf_ == third._mpf_


def test_memo_hits_misses_and_a_wrong_entry_fails_the_recheck(monkeypatch):
    monkeypatch.delenv("PRIVCHECK_RECORD_REFERENCES", raising=False)
    store = ReferenceStore("no_such_store_for_tests")
    calls = []

    @store.memo
    def square(x, power=2):
        calls.append(x)
        return x ** power

    with pytest.warns(UserWarning, match="not stored"):
        assert square(3.0) == 9.0                  # a miss: computed live
    assert store.misses == 1 and calls == [3.0] and square.lookup(3.0) is None
    store.meta = {"libraries": store.libraries}
    key = json.dumps(["square", [3.0, 2]], separators=(",", ":"))
    store.entries[key] = encode(9.0)
    assert square(3.0, power=2) == 9.0 and calls == [3.0]      # a hit: nothing recomputed
    assert store.recheck(1, seed=0)[0][2] == 9.0
    store.entries[key] = encode(9.000000001)       # a wrong stored value
    with pytest.raises(AssertionError):
        store.recheck(1, seed=0)
