"""privcheck.serialization: the one set of JSON helpers (jsonable, freeze/thaw, canonical_json, utc_now)."""

import datetime as dt
import enum
import json
import math
import re
from types import MappingProxyType

import numpy as np
import pytest

from privcheck.serialization import canonical_json, dump_json, freeze, jsonable, thaw, utc_now


class Colour(str, enum.Enum):
    RED = "red"


class Record:
    def to_json(self):
        return {"eps": math.inf}


def test_jsonable_encodes_non_finite_numpy_tuples_and_records():
    value = {"inf": math.inf, "ninf": -math.inf, "nan": math.nan, "t": (1, 2.5), 3: "int key",
             "np": [np.float32(1.5), np.int64(7), np.bool_(True), np.float64(-np.inf)],
             "arr": np.array([[1.0, np.nan]]), "enum": Colour.RED, "rec": Record(),
             "proxy": MappingProxyType({"a": (1,)})}
    out = jsonable(value)
    assert out == {"inf": "inf", "ninf": "-inf", "nan": "nan", "t": [1, 2.5], "3": "int key",
                   "np": [1.5, 7, True, "-inf"], "arr": [[1.0, "nan"]], "enum": "red",
                   "rec": {"eps": "inf"}, "proxy": {"a": [1]}}
    assert type(out["np"][1]) is int and type(out["np"][2]) is bool
    json.dumps(out, allow_nan=False)
    assert jsonable(out) == out                                      # idempotent


def test_jsonable_keeps_float_precision():
    x = 0.1 + 0.2
    assert jsonable(x) == x and json.loads(canonical_json({"x": x}))["x"] == x


def test_freeze_and_thaw_round_trip():
    value = {"a": [1, {"b": (2, [3])}], "c": np.float64(0.5), "d": np.int32(4)}
    frozen = freeze(value)
    assert isinstance(frozen, MappingProxyType) and isinstance(frozen["a"], tuple)
    assert isinstance(frozen["a"][1]["b"][1], tuple)
    with pytest.raises(TypeError):
        frozen["a"] = 1
    assert type(frozen["d"]) is int and type(frozen["c"]) is float
    assert thaw(frozen) == {"a": [1, {"b": [2, [3]]}], "c": 0.5, "d": 4}
    hash(freeze([1, (2, "x")]))                                         # tuples of scalars are hashable


def test_freeze_strict_refuses_non_finite_and_unknown_values():
    assert freeze({"x": math.inf})["x"] == math.inf                    # not strict: kept
    with pytest.raises(ValueError, match="non-finite"):
        freeze({"x": [math.nan]}, strict=True)
    with pytest.raises(TypeError, match="object"):
        freeze({"x": object()}, strict=True)
    assert freeze({"x": np.bool_(False)}, strict=True) == {"x": False}


def test_canonical_json_is_sorted_compact_utf8_and_refuses_nan():
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    frozen = freeze({"b": [1, 2], "a": {"x": np.int64(2)}})
    assert canonical_json(frozen) == canonical_json({"a": {"x": 2}, "b": [1, 2]})
    for bad in (math.nan, math.inf, np.float32("inf")):
        with pytest.raises(ValueError):
            canonical_json({"x": bad})
    with pytest.raises(TypeError):
        canonical_json({"x": object()})


def test_dump_json_is_indented_with_trailing_newline():
    assert dump_json({"b": 1, "a": "é"}) == '{\n  "a": "é",\n  "b": 1\n}\n'.encode()
    with pytest.raises(ValueError):
        dump_json({"x": math.nan})


def test_utc_now_is_rfc3339_utc():
    stamp = utc_now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
    parsed = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - parsed).total_seconds()) < 60
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_now("seconds"))
