"""Serialisation helpers shared by records, configs and artifacts.

* `jsonable(x)` — a JSON-ready copy: mappings become dicts with string keys, lists/tuples become lists,
  numpy scalars and arrays become Python numbers and lists, enums their value, objects with `to_json()`
  that, and the non-finite floats the strings "inf", "-inf" and "nan" (JSON has no literal for them, and
  an ε that is +inf must stay visible in an artifact rather than break it).
* `freeze(x)` / `thaw(x)` — a read-only deep copy for frozen dataclass fields (MappingProxyType, tuples)
  and its inverse (dicts, lists). `freeze(x, strict=True)` also rejects non-finite numbers and any value
  that is not JSON-like, for documents that must not carry them.
* `canonical_json(x)` — the bytes every sha256 in the project is taken over: sorted keys, no whitespace,
  UTF-8, NaN/inf refused.
* `dump_json(x)` — the human-readable file form of an artifact (indented, sorted keys, trailing newline).
* `utc_now()` — an RFC 3339 UTC timestamp with a `Z` suffix.

See docs/artifacts.md.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import numbers
import os
from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["canonical_json", "dump_json", "freeze", "jsonable", "thaw", "utc_now"]

_NON_FINITE = {math.inf: "inf", -math.inf: "-inf"}


def _non_finite(x: float) -> str:
    # repr() spells these the same way ("inf", "-inf", "nan"); the mapping keeps it explicit.
    return _NON_FINITE.get(x, "nan")


def _key(k) -> str:
    return k if isinstance(k, str) else str(k.value if isinstance(k, enum.Enum) else k)


def _numpy_item(x):
    """The Python value of a numpy scalar or 0-d array, else the NotImplemented sentinel."""
    item = getattr(x, "item", None)
    if item is None or not hasattr(x, "dtype") or getattr(x, "shape", None) != ():
        return NotImplemented
    return item()


def _plain_numbers(x):
    """`list(x)` when every element is a plain int or a finite plain float (what `jsonable` would return
    element by element, without a Python call per element: the long U and inclusion lists of the canary
    logs), else None."""
    kinds = set(map(type, x))
    if kinds == {int} or (kinds == {float} and all(map(math.isfinite, x))):
        return list(x)
    return None


def jsonable(x):
    """A copy of `x` made of dict/list/str/int/float/bool/None only, with non-finite floats as strings.

    Strings, ints, bools and None are returned as they are; anything else that is not a mapping, a sequence
    (list/tuple), a number, a numpy value, an enum, a path or an object with `to_json()` is returned unchanged
    (json.dumps will then say what it cannot encode).
    """
    if x is None or isinstance(x, (str, bool)):
        return x.value if isinstance(x, enum.Enum) else x
    if isinstance(x, float):
        return float(x) if math.isfinite(x) else _non_finite(x)
    if isinstance(x, numbers.Integral) and type(x) is int:
        return x
    if isinstance(x, Mapping):
        return {_key(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        plain = _plain_numbers(x)
        return plain if plain is not None else [jsonable(v) for v in x]
    if isinstance(x, enum.Enum):
        return jsonable(x.value)
    item = _numpy_item(x)
    if item is not NotImplemented:
        return jsonable(item)
    if hasattr(x, "dtype") and hasattr(x, "tolist"):       # numpy array of any shape
        return jsonable(x.tolist())
    if hasattr(x, "to_json"):
        return jsonable(x.to_json())
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return jsonable(float(x))
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return x


def freeze(x, *, strict: bool = False):
    """Read-only deep copy: mappings → MappingProxyType (string keys), lists and tuples → tuples, numpy
    scalars → Python numbers. Other values are kept as they are unless `strict`.

    strict=True (documents that must hold JSON values only): a non-finite number raises ValueError and a
    value that is not None/bool/int/float/str/mapping/sequence raises TypeError.
    """
    if isinstance(x, Mapping):
        return MappingProxyType({_key(k): freeze(v, strict=strict) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v, strict=strict) for v in x)
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        value = float(x)
        if strict and not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r} in a document that must be finite")
        return value
    item = _numpy_item(x)
    if item is not NotImplemented:          # numpy bool_ and friends
        return freeze(item, strict=strict)
    if strict:
        raise TypeError(f"unsupported value of type {type(x).__name__} in a JSON document")
    return x


def thaw(x):
    """The inverse of `freeze`: MappingProxyType/mappings → dicts, tuples/lists → lists (recursively)."""
    if isinstance(x, Mapping):
        return {k: thaw(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [thaw(v) for v in x]
    return x


def _default(x):
    """json.dumps fallback for values json cannot encode natively: frozen mappings, enums, numpy scalars and
    arrays, records with `to_json()`. Numbers are handed back as Python numbers, so NaN/inf are still refused."""
    if isinstance(x, Mapping):
        return dict(x)
    if isinstance(x, enum.Enum):
        return x.value
    item = _numpy_item(x)
    if item is not NotImplemented:
        return item
    if hasattr(x, "dtype") and hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "to_json"):
        return x.to_json()
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def canonical_json(x) -> bytes:
    """Sorted keys, compact separators, UTF-8 (non-ASCII kept), NaN/inf refused (ValueError).

    Floats keep their shortest round-trip repr. Records encode non-finite values as strings first (`jsonable`),
    so a bare NaN here is a bug upstream and is refused rather than hashed.
    """
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=_default).encode("utf-8")


def dump_json(x) -> bytes:
    """The file form of a JSON artifact: indent 2, sorted keys, UTF-8, trailing newline, NaN/inf refused."""
    return (json.dumps(x, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False, default=_default)
            + "\n").encode("utf-8")


def utc_now(timespec: str = "microseconds") -> str:
    """The current time as RFC 3339 UTC, e.g. "2025-01-31T12:00:00.123456Z" (`timespec` as in
    `datetime.isoformat`: "seconds" gives "2025-01-31T12:00:00Z")."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")
