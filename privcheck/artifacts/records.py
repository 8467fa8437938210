"""Records that make up a verification artifact: check results and privacy claims."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from privcheck.errors import InvalidParameter
from privcheck.serialization import jsonable

__all__ = ["CheckResult", "Claim", "SuiteResult"]


@dataclass(frozen=True)
class CheckResult:
    """One verification check: what was compared with what, under which tolerance, and the verdict.

    `expected` names an independent reference (published figure, closed form, mpmath, dp-accounting);
    `reference` says which. A check that could not run is a failure, never a skip. `rule`, when the check has one,
    is how its verdict follows from (observed, expected, tolerance) as recorded (`privcheck.artifacts.verdicts`): a
    result whose pass/fail verdict contradicts its own rule is refused, so an artifact can be re-derived by
    `privcheck report`.
    """

    name: str
    suite: str
    passed: bool
    observed: Any
    expected: Any
    tolerance: Any
    reference: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    seconds: float = 0.0
    status: str | None = None   # "pass" | "fail" | "error" | "skipped" (default: from `passed`)
    precision: str | None = None  # e.g. "float64", "float32" for checks run at a stated precision
    # the `privcheck.artifacts.identity.Subject` of the bindings it ran on (set by `run_suite`): which trainer
    # the result verified; recorded by the run artifact's binding, not by `to_json`
    verified: Any = field(default=None, compare=False)
    rule: Mapping[str, Any] | None = None

    def _check_rule(self) -> None:
        from privcheck.artifacts.verdicts import rule_problem, verdict

        rule = jsonable(self.rule)
        problem = rule_problem(rule)
        if problem:
            raise InvalidParameter("rule", rule, f"a verdict rule ({problem})")
        if self.status in ("pass", "fail"):
            derived = verdict(rule, jsonable(self.observed), jsonable(self.expected), jsonable(self.tolerance))
            if derived != self.passed:
                raise InvalidParameter("passed", self.passed, f"{derived}, the verdict of the check's own rule "
                                                              f"{rule['kind']!r} on its figures")

    def __post_init__(self):
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))
        object.__setattr__(self, "passed", bool(self.passed))
        status = self.status or ("pass" if self.passed else "fail")
        if status not in ("pass", "fail", "error", "skipped"):
            raise InvalidParameter("status", status, "'pass', 'fail', 'error' or 'skipped'")
        if self.passed != (status == "pass"):
            raise InvalidParameter("passed", self.passed, f"{status == 'pass'} (True exactly when status is 'pass')")
        object.__setattr__(self, "status", status)
        if self.rule is not None:
            self._check_rule()

    def to_json(self) -> dict:
        return {"name": self.name, "suite": self.suite, "passed": self.passed,
                "observed": jsonable(self.observed), "expected": jsonable(self.expected),
                "tolerance": jsonable(self.tolerance), "reference": self.reference,
                "inputs": jsonable(self.inputs), "message": self.message, "seconds": self.seconds,
                "status": self.status, "precision": self.precision, "rule": jsonable(self.rule)}


@dataclass(frozen=True)
class Claim:
    """A privacy claim: mechanism, (ε, δ), neighbouring relation and the assumptions it rests on."""

    mechanism: str
    epsilon: float
    delta: float
    neighboring: str
    assumptions: tuple[str, ...]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    accountant: str = ""

    def __post_init__(self):
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))

    def to_json(self) -> dict:
        return {"mechanism": self.mechanism, "epsilon": jsonable(self.epsilon), "delta": self.delta,
                "neighboring": self.neighboring, "assumptions": list(self.assumptions),
                "parameters": jsonable(self.parameters), "accountant": self.accountant}


@dataclass
class SuiteResult:
    """What one verification suite produced (assembled into the artifact by `privcheck.verify`)."""

    name: str
    checks: list[CheckResult] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)       # AccountingRecord / Calibration
    figures: dict[str, Any] = field(default_factory=dict)  # plot data: {"title", "x", "series", ...}
    randomness: str = "deterministic"                       # "deterministic" | "seeded" | "os_entropy"
