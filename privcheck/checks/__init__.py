"""Reusable checks. A check compares an observed value with an independent reference under a declared
tolerance and returns a `CheckResult`; an exception inside a check is a failure, never a skip.

Importing this package is cheap (the artifact records, and through them the accountant, are imported when a
check runs), so that the pytest plugin `privcheck.checks.pytest_plugin` costs nothing in a test run that does
not ask for it."""

from __future__ import annotations

import math
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from privcheck.interrupts import reraise_if_interrupted

__all__ = ["Recorder", "all_of", "at_most", "within"]

if TYPE_CHECKING:
    from privcheck.artifacts.records import CheckResult


class Recorder:
    """Collects CheckResults for one suite; `run` turns exceptions into failed checks."""

    def __init__(self, suite: str):
        self.suite = suite
        self.checks: list[CheckResult] = []

    def run(self, name: str, fn: Callable[[], dict], *, reference: str, inputs: dict | None = None) -> CheckResult:
        """`fn()` returns dict(passed, observed, expected, tolerance[, message])."""
        from privcheck.artifacts.records import CheckResult

        start = time.perf_counter()
        try:
            out = fn()
            result = CheckResult(name=name, suite=self.suite, passed=out["passed"], observed=out["observed"],
                                 expected=out["expected"], tolerance=out["tolerance"], reference=reference,
                                 inputs=inputs or {}, message=out.get("message", ""),
                                 seconds=time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - a crashing check is reported as a failure
            reraise_if_interrupted(exc)
            result = CheckResult(name=name, suite=self.suite, passed=False, observed=None, expected=None,
                                 tolerance=None, reference=reference, inputs=inputs or {},
                                 message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}",
                                 seconds=time.perf_counter() - start, status="error")
        self.checks.append(result)
        return result


def within(observed: float, expected: float, tol: float, message: str = "") -> dict[str, Any]:
    """|observed − expected| ≤ tol (NaN/inf fail)."""
    ok = math.isfinite(observed) and abs(observed - expected) <= tol
    return {"passed": ok, "observed": observed, "expected": expected, "tolerance": tol,
            "message": message or f"|{observed!r} - {expected!r}| = {abs(observed - expected):.3g}"}


def at_most(observed: float, bound: float, slack: float = 0.0, message: str = "") -> dict[str, Any]:
    """observed ≤ bound + slack."""
    ok = math.isfinite(observed) and observed <= bound + slack
    return {"passed": ok, "observed": observed, "expected": f"<= {bound!r}", "tolerance": slack,
            "message": message or f"{observed!r} vs bound {bound!r}"}


def all_of(*parts: dict[str, Any]) -> dict[str, Any]:
    """Combine several comparisons into one verdict."""
    return {"passed": all(p["passed"] for p in parts), "observed": [p["observed"] for p in parts],
            "expected": [p["expected"] for p in parts], "tolerance": [p["tolerance"] for p in parts],
            "message": "; ".join(p.get("message", "") for p in parts)}
