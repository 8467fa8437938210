"""Stored independent reference values, so that `make test` does not recompute the costly ones on every run.

A `ReferenceStore` memoises reference functions (mpmath at ≥ 50 digits, dp-accounting, prv_accountant, scipy
quadrature, written in the tests; never privcheck's own figures) on their exact inputs:

- a call whose inputs are in tests/accounting/reference_data/<name>.json returns the stored value (floats round-trip
  exactly through their repr, mpf values are stored as their exact binary mantissa and exponent);
- any other call computes the reference live (a privcheck change that moves the inputs only costs time, the check
  itself never weakens), and is counted in `misses`;
- `recheck` recomputes a fixed, seeded random subset of the stored entries live and compares: the proof, on every
  run, that the file still holds what the pinned libraries compute.

The values under test are always computed live by privcheck. The files are written by
tests/accounting/reference_data/make_references.py (which runs the tests that use them with
PRIVCHECK_RECORD_REFERENCES=1); each records the library versions and the mpmath precision it was made with.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import math
import os
import random
import warnings
from fractions import Fraction
from importlib import metadata
from pathlib import Path

import mpmath

__all__ = ["DATA", "FFT_REL_TOL", "RECORD_ENV", "ReferenceStore", "decode", "encode"]

DATA = Path(__file__).resolve().parent / "reference_data"
RECORD_ENV = "PRIVCHECK_RECORD_REFERENCES"
# The recheck tolerance of values that dp-accounting and prv_accountant compute through float FFTs: their last bits
# follow the CPU's vector instructions and the numpy/scipy build, not only the pinned library. Measured between two
# x86-64 machines (every stored entry recomputed): ≤ 1.1e-9 relative for the DP-SGD rows, ≤ 1.4e-8 for ≤ 300
# compositions, up to 3e-5 for thousands of compositions at δ ≈ 1e-10 (which the rechecks do not sample).
FFT_REL_TOL = 1e-6


def encode(x):
    """A JSON-able, exact form of floats, ints, strings, None, tuples/lists, Fractions and mpmath mpf."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"float": repr(x)}
    if hasattr(x, "_mpf_"):                  # an mpf of any mpmath context
        return {"mpf": list(x._mpf_)}
    if isinstance(x, Fraction):
        return {"fraction": [x.numerator, x.denominator]}
    if isinstance(x, (tuple, list)):
        return [encode(v) for v in x]
    raise TypeError(f"cannot store {type(x).__name__}: {x!r}")


def decode(x):
    if isinstance(x, list):
        return tuple(decode(v) for v in x)
    if isinstance(x, dict):
        if "float" in x:
            return float(x["float"])
        if "mpf" in x:
            return mpmath.mp.make_mpf(tuple(x["mpf"]))     # exact, whatever the working precision
        if "fraction" in x:
            return Fraction(*x["fraction"])
        raise ValueError(f"unknown stored value {x!r}")
    return x


def _close(a, b, rel: float) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if a is None or b is None or isinstance(a, (str, bool)):
        return a == b
    if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
        return a == b
    with mpmath.workdps(80):
        return abs(mpmath.mpf(a) - mpmath.mpf(b)) <= rel * max(abs(mpmath.mpf(a)), abs(mpmath.mpf(b)))


class ReferenceStore:
    """One JSON file of stored reference values; `memo` registers the reference functions it holds."""

    def __init__(self, name: str, *, libraries: tuple[str, ...] = (), mpmath_dps: int | None = None,
                 rel_tol: float = 0.0):
        self.name, self.path = name, DATA / f"{name}.json"
        self.libraries = {lib: metadata.version(lib) for lib in ("mpmath", *libraries)}
        self.mpmath_dps, self.rel_tol = mpmath_dps, rel_tol
        self.recording = os.environ.get(RECORD_ENV) == "1"
        self.functions: dict[str, object] = {}
        self.entries: dict[str, dict] = {}
        self.meta: dict = {}
        self.misses = 0
        if self.recording:
            self.meta = {"libraries": self.libraries}
            atexit.register(self.write)
        elif self.path.exists():
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            self.meta, self.entries = doc["meta"], doc["entries"]

    def memo(self, fn):
        """Decorator: the stored value for these exact inputs, else the live one."""
        sig = inspect.signature(fn)
        name = fn.__name__
        self.functions[name] = fn

        def key_of(args, kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            return json.dumps([name, encode(tuple(bound.arguments.values()))], separators=(",", ":")), bound

        def lookup(*args, **kwargs):
            """The stored value, or None where there is none (computed and stored when recording)."""
            if self.recording:
                return wrapper(*args, **kwargs)
            hit = self.entries.get(key_of(args, kwargs)[0])
            return None if hit is None else decode(hit)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            key, bound = key_of(args, kwargs)
            hit = self.entries.get(key)
            if hit is not None:
                return decode(hit)
            value = fn(*args, **kwargs)
            if self.recording:
                self.entries[key] = encode(value)
            else:
                self.misses += 1
                if self.misses == 1:       # once: a sweep of the slow tier misses on every call
                    warnings.warn(f"reference store {self.name}: {name}{tuple(bound.arguments.values())!r} is not "
                                  "stored; computed live (see tests/accounting/reference_data/make_references.py)",
                                  stacklevel=2)
            return value

        wrapper.live, wrapper.lookup = fn, lookup
        return wrapper

    def stored_calls(self, function: str | None = None):
        """[(function name, args, stored value)] of the stored entries, in a fixed order."""
        out = []
        for key in sorted(self.entries):
            name, args = json.loads(key)
            if function is None or name == function:
                out.append((name, decode(args), decode(self.entries[key])))
        return out

    def recheck(self, n: int, seed: int, function: str | None = None, where=None, rel_tol: float | None = None) -> list:
        """Recompute n stored entries (a seeded random choice, optionally among those `where(args)` accepts) live
        and assert each equals its stored value (to rel_tol); returns the rechecked (name, args, value)."""
        if self.recording:         # every reference of this run is being computed live: nothing stored to prove
            return []
        assert self.entries, f"reference store {self.path} is empty or missing"
        assert self.meta.get("libraries") == self.libraries, (
            f"{self.path} was made with {self.meta.get('libraries')}, installed {self.libraries}: regenerate it")
        calls = [c for c in self.stored_calls(function) if where is None or where(c[1])]
        chosen = random.Random(seed).sample(calls, min(n, len(calls)))
        assert len(chosen) >= min(n, 1), "nothing to recheck"
        for name, args, stored in chosen:
            live = self.functions[name](*args)
            tol = self.rel_tol if rel_tol is None else rel_tol
            assert _close(decode(encode(live)), stored, tol), (name, args, live, stored)
        return chosen

    def write(self) -> None:
        if not self.entries:
            return
        doc = {"meta": {"store": self.name, "libraries": self.libraries, "mpmath_dps": self.mpmath_dps,
                        "made_by": "tests/accounting/reference_data/make_references.py",
                        "functions": sorted({json.loads(k)[0] for k in self.entries})},
               "entries": dict(sorted(self.entries.items()))}
        DATA.mkdir(exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc["entries"].items()]   # one entry a line
        text = ('{"meta": ' + json.dumps(doc["meta"], sort_keys=True) + ',\n"entries": {\n' + ",\n".join(lines)
                + "\n}}\n")
        json.loads(text)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)
