"""A check's verdict as a function of the figures it records: the rule, stored beside them, that `privcheck report`
re-applies (docs/artifacts.md, "What a report re-derives").

A check built by the comparison helpers (`privcheck.checks.within`, `at_most`, `at_least`, `greater`, `equal`,
`all_of`, and the `fields` / `none_failed` rules of the training checks) records a `rule` and takes its verdict
*from* that rule, so the figures in an artifact and its verdict cannot disagree unless the document was edited.
Rules are JSON objects:

* `{"kind": "within"}` — pass iff observed, expected and tolerance are finite numbers and
  |observed − expected| ≤ tolerance;
* `{"kind": "at_most", "bound": b}` — pass iff observed is finite and observed ≤ b + tolerance;
* `{"kind": "at_least", "bound": b}` — pass iff observed is finite and observed ≥ b − tolerance;
* `{"kind": "greater", "bound": b}` — pass iff observed > b (strict; observed may be +inf);
* `{"kind": "below", "bound": b}` — pass iff observed < b (strict; observed may be −inf);
* `{"kind": "overlaps"}` — observed and expected are intervals [lo, hi] of numbers that intersect:
  observed lo ≤ expected hi and expected lo ≤ observed hi (an enclosure against a reference enclosure);
* `{"kind": "equal"}` — pass iff observed equals expected (JSON equality; 1 and 1.0 are equal, true and 1 are not);
* `{"kind": "all_of", "parts": [rule, …]}` — observed, expected and tolerance are lists with one entry per part;
  pass iff every part passes;
* `{"kind": "fields", "fields": {key: rule, …}}` — observed is an object; each named field is judged by its rule
  with `observed[key]`, `expected[key]` and `tolerance[key]` (absent: null); pass iff every field passes;
* `{"kind": "binomial_cells", "trials": N, "alpha": a}` — observed are the K cell frequencies of N Monte-Carlo
  draws and expected the K cell probabilities; pass iff every cell's exact two-sided binomial p-value
  (`privcheck.numerics.binomial.binomial_pvalues`) is at least a/K (Bonferroni);
* `{"kind": "binomial_upper_tail", "trials": N, "p": p, "alpha": a}` — observed is a frequency k/N; pass iff
  P[Binomial(N, p) ≥ k] ≥ a (the one-sided exact test of "at most p");
* `{"kind": "none_failed", "field": f}` — observed is an object and pass iff `observed[f]` is an empty list (the
  checks that list every failed quantity there).

`verdict(rule, observed, expected, tolerance)` is the one function that applies a rule; `rule_problem(rule)` says
what is wrong with a malformed one. Numbers are compared as the float64 values JSON stores ("inf", "-inf" and
"nan" are the non-finite ones, `privcheck.serialization.jsonable`), so re-applying a rule to an artifact gives the
verdict the check computed. A check without a rule (statistical tests judged on p-values it does not record, checks
of structure) cannot be re-derived, and a report says so by name.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["RULE_KINDS", "RuleError", "rule_problem", "verdict"]

RULE_KINDS = ("within", "at_most", "at_least", "greater", "below", "overlaps", "equal", "all_of", "fields",
              "binomial_cells", "binomial_upper_tail", "none_failed")
_BOUNDED = ("at_most", "at_least", "greater", "below")
_BINOMIAL = ("binomial_cells", "binomial_upper_tail")
MAX_TRIALS = 2**40             # counts are recovered as round(frequency · N), exact far below 2**52
_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
MAX_RULE_DEPTH = 8


class RuleError(ValueError):
    """A rule that is not one of the forms of the module docstring."""


def _number(x) -> float | None:
    """The float a recorded figure stands for, or None when it is not a number (bools are not numbers)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        try:
            return float(x)
        except OverflowError:           # an integer beyond float range: not a figure a rule can compare
            return None
    return _SPECIAL.get(x) if isinstance(x, str) else None


def _same(a, b) -> bool:
    """JSON equality: numbers by value (bools only equal bools), containers element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None and not isinstance(a, str) and not isinstance(b, str):
        return na == nb
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def rule_problem(rule, depth: int = 0) -> str | None:
    """What makes `rule` malformed, or None when it is one of the forms of the module docstring."""
    if depth > MAX_RULE_DEPTH:
        return f"rules nested deeper than {MAX_RULE_DEPTH}"
    if not isinstance(rule, dict) or rule.get("kind") not in RULE_KINDS:
        return f"not a rule (a JSON object whose kind is one of {', '.join(RULE_KINDS)})"
    kind = rule["kind"]
    if kind in _BOUNDED:
        bound = _number(rule.get("bound"))
        if bound is None or math.isnan(bound):
            return f"a {kind} rule needs a numeric bound"
    if kind == "all_of":
        parts = rule.get("parts")
        if not isinstance(parts, list) or not parts:
            return "an all_of rule needs a non-empty list of parts"
        return next((p for p in (rule_problem(r, depth + 1) for r in parts) if p), None)
    if kind == "fields":
        fields = rule.get("fields")
        if not isinstance(fields, dict) or not fields:
            return "a fields rule needs a non-empty object of field rules"
        return next((p for p in (rule_problem(r, depth + 1) for r in fields.values()) if p), None)
    if kind in _BINOMIAL:
        trials, alpha = rule.get("trials"), _number(rule.get("alpha"))
        if type(trials) is not int or not 1 <= trials <= MAX_TRIALS or alpha is None or not 0 < alpha < 1:
            return f"a {kind} rule needs trials in [1, {MAX_TRIALS}] and alpha in (0, 1)"
        p = _number(rule.get("p"))
        if kind == "binomial_upper_tail" and (p is None or not 0 <= p <= 1):
            return "a binomial_upper_tail rule needs p in [0, 1]"
    if kind == "none_failed" and not isinstance(rule.get("field"), str):
        return "a none_failed rule needs the name of the observed field that lists the failures"
    return None


def _interval(x) -> tuple[float, float] | None:
    if not isinstance(x, list) or len(x) != 2:
        return None
    lo, hi = _number(x[0]), _number(x[1])
    return None if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) else (lo, hi)


def _item(container, key):
    if isinstance(container, dict):
        return container.get(key)
    return None


def _counts(frequencies, trials: int) -> list[int] | None:
    values = [_number(f) for f in frequencies] if isinstance(frequencies, list) else [_number(frequencies)]
    if not values or any(v is None or not 0 <= v <= 1 for v in values):
        return None
    counts = [round(v * trials) for v in values]
    # a frequency that is not k/N for an integer k was not produced by N draws
    return counts if all(c / trials == v for c, v in zip(counts, values)) else None


def _binomial(rule: dict, observed, expected) -> bool:
    import numpy as np
    from scipy.stats import binom

    from privcheck.numerics.binomial import binomial_pvalues

    trials, alpha = rule["trials"], _number(rule["alpha"])
    counts = _counts(observed, trials)
    if counts is None:
        return False
    if rule["kind"] == "binomial_upper_tail":
        return bool(float(binom.sf(counts[0] - 1, trials, _number(rule["p"]))) >= alpha)
    probs = [_number(p) for p in expected] if isinstance(expected, list) else None
    if probs is None or len(probs) != len(counts) or sum(counts) != trials or any(p is None for p in probs):
        return False
    pvals = binomial_pvalues(np.array(counts), np.array(probs))
    return bool(pvals.min() >= alpha / len(counts))


def _verdict(rule: dict, observed, expected, tolerance) -> bool:
    kind = rule["kind"]
    if kind == "equal":
        return _same(observed, expected)
    if kind == "overlaps":
        o, e = _interval(observed), _interval(expected)
        return o is not None and e is not None and o[0] <= e[1] and e[0] <= o[1]
    if kind in _BINOMIAL:
        return _binomial(rule, observed, expected)
    if kind == "none_failed":
        return isinstance(observed, dict) and observed.get(rule["field"]) == []
    if kind == "all_of":
        parts = rule["parts"]
        if not all(isinstance(x, list) and len(x) == len(parts) for x in (observed, expected, tolerance)):
            return False
        return all(_verdict(r, o, e, t) for r, o, e, t in zip(parts, observed, expected, tolerance))
    if kind == "fields":
        if not isinstance(observed, dict):
            return False
        return all(key in observed and _verdict(r, observed[key], _item(expected, key), _item(tolerance, key))
                   for key, r in rule["fields"].items())
    o = _number(observed)
    if o is None:
        return False
    if kind == "greater":
        return o > _number(rule["bound"])
    if kind == "below":
        return o < _number(rule["bound"])
    t = _number(tolerance)
    if t is None:
        t = 0.0 if tolerance is None else math.nan
    if not math.isfinite(o) or not math.isfinite(t):
        return False
    if kind == "at_most":
        return o <= _number(rule["bound"]) + t
    if kind == "at_least":
        return o >= _number(rule["bound"]) - t
    e = _number(expected)           # within
    return e is not None and math.isfinite(e) and abs(o - e) <= t


def verdict(rule: dict, observed: Any, expected: Any, tolerance: Any) -> bool:
    """Whether figures recorded as (observed, expected, tolerance) pass under `rule` (module docstring); a figure of
    the wrong type fails. Raises RuleError for a malformed rule."""
    problem = rule_problem(rule)
    if problem:
        raise RuleError(problem)
    return _verdict(rule, observed, expected, tolerance)
