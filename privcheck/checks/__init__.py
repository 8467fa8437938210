"""Reusable checks. A check compares an observed value with an independent reference under a declared
tolerance and returns a `CheckResult`; an exception inside a check is a failure, never a skip.

Importing this package is cheap (the artifact records, and through them the accountant, are imported when a
check runs), so that the pytest plugin `privcheck.checks.pytest_plugin` costs nothing in a test run that does
not ask for it."""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from privcheck.interrupts import reraise_if_interrupted

__all__ = ["Recorder", "all_of", "at_least", "at_most", "equal", "greater", "judged", "overlaps", "within"]

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
                                 inputs=inputs or {}, message=out.get("message", ""), rule=out.get("rule"),
                                 seconds=time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - a crashing check is reported as a failure
            reraise_if_interrupted(exc)
            result = CheckResult(name=name, suite=self.suite, passed=False, observed=None, expected=None,
                                 tolerance=None, reference=reference, inputs=inputs or {},
                                 message=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}",
                                 seconds=time.perf_counter() - start, status="error")
        self.checks.append(result)
        return result


def judged(rule: dict, observed, expected, tolerance, message: str) -> dict[str, Any]:
    """The comparison dict of a check whose verdict is `rule` applied to its figures as the artifact records them
    (privcheck.artifacts.verdicts), so that `privcheck report` re-derives the same verdict."""
    from privcheck.artifacts.verdicts import verdict
    from privcheck.serialization import jsonable

    observed, expected, tolerance = jsonable(observed), jsonable(expected), jsonable(tolerance)
    return {"passed": verdict(rule, observed, expected, tolerance), "observed": observed, "expected": expected,
            "tolerance": tolerance, "message": message, "rule": rule}


def within(observed: float, expected: float, tol: float, message: str = "") -> dict[str, Any]:
    """|observed − expected| ≤ tol (NaN/inf fail)."""
    return judged({"kind": "within"}, observed, expected, tol,
                   message or f"|{observed!r} - {expected!r}| = {abs(observed - expected):.3g}")


def at_most(observed: float, bound: float, slack: float = 0.0, message: str = "") -> dict[str, Any]:
    """observed ≤ bound + slack (NaN/inf observed fail)."""
    return judged({"kind": "at_most", "bound": _bound(bound)}, observed, f"<= {bound!r}", slack,
                   message or f"{observed!r} vs bound {bound!r}")


def at_least(observed: float, bound: float, slack: float = 0.0, message: str = "") -> dict[str, Any]:
    """observed ≥ bound − slack (NaN/inf observed fail)."""
    return judged({"kind": "at_least", "bound": _bound(bound)}, observed, f">= {bound!r}", slack,
                   message or f"{observed!r} vs bound {bound!r}")


def greater(observed: float, bound: float, message: str = "") -> dict[str, Any]:
    """observed > bound, strictly (+inf passes, NaN fails)."""
    return judged({"kind": "greater", "bound": _bound(bound)}, observed, f"> {bound!r}", 0.0,
                   message or f"{observed!r} vs bound {bound!r}")


def overlaps(observed: list, expected: list, message: str = "") -> dict[str, Any]:
    """The interval `observed` = [lo, hi] intersects the interval `expected` (None observed: fails)."""
    return judged({"kind": "overlaps"}, observed, expected, 0.0, message or f"{observed!r} meets {expected!r}")


def equal(observed, expected, message: str = "") -> dict[str, Any]:
    """observed = expected, as JSON values."""
    return judged({"kind": "equal"}, observed, expected, None, message or f"{observed!r} vs {expected!r}")


def _bound(x) -> float:
    from privcheck.serialization import jsonable
    return jsonable(float(x))


def all_of(*parts: dict[str, Any]) -> dict[str, Any]:
    """Combine several comparisons into one verdict (re-derivable when every part records its rule)."""
    rules = [p.get("rule") for p in parts]
    out = {"passed": all(p["passed"] for p in parts), "observed": [p["observed"] for p in parts],
           "expected": [p["expected"] for p in parts], "tolerance": [p["tolerance"] for p in parts],
           "message": "; ".join(p.get("message", "") for p in parts)}
    if all(rules):
        out["rule"] = {"kind": "all_of", "parts": rules}
    return out
