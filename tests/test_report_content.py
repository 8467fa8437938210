"""`privcheck report` checks what an artifact says, not only its checksum (docs/artifacts.md, "What a report
re-derives"): each check's verdict is re-derived from its recorded figures by the rule it records, the artifact's
invariants are checked (suites, duplicate checks, claims and accounting records in their ranges), and every
re-sealed document that contradicts itself exits 1 with the warning first. The checks it cannot re-derive are named.
"""

from __future__ import annotations

import copy
import json
import math

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privcheck.artifacts import CheckResult, Claim, SuiteResult, seal
from privcheck.artifacts.integrity import check_artifact
from privcheck.artifacts.verdicts import RuleError, verdict
from privcheck.checks import Recorder, all_of, at_most, greater, within
from privcheck.checks.common import NONE_FAILED
from privcheck.checks.statistics import binomial_agreement
from privcheck.errors import InvalidParameter
from tests.artifact_fixtures import copy_for_test, reseal, verify_suites
from tests.artifact_fixtures import report as run_report

EXIT_PROBLEMS = 1


def _alpha(seed=None):
    rec = Recorder("alpha")
    rec.run("close_to_pi", lambda: within(3.14159, math.pi, 1e-4), reference="closed form")
    rec.run("below_one", lambda: at_most(0.25, 1.0, 0.0), reference="closed form")
    rec.run("both", lambda: all_of(within(2.0, 2.0, 0.0), greater(5.0, 1.0)), reference="closed form")
    rec.run("die_is_fair", lambda: binomial_agreement([98, 102, 100, 97, 103, 100], [1 / 6] * 6),
            reference="exact binomial")
    res = SuiteResult(name="alpha", checks=rec.checks)
    res.claims.append(Claim(mechanism="toy", epsilon=1.0, delta=1e-5, neighboring="add_remove", assumptions=("x",)))
    return res


def _beta(seed=None):
    res = SuiteResult(name="beta")
    res.checks.append(CheckResult(name="no_failures", suite="beta", passed=True, observed={"failures": [], "n": 3},
                                  expected={"n": 3}, tolerance=None, reference="by construction", rule=NONE_FAILED))
    res.checks.append(CheckResult(name="judged_by_hand", suite="beta", passed=True, observed="ok", expected="ok",
                                  tolerance=None, reference="no rule recorded"))
    return res


SUITES = {"alpha": "tests.test_report_content:_alpha", "beta": "tests.test_report_content:_beta"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return verify_suites(tmp_path_factory.mktemp("content") / "out", SUITES)


@pytest.fixture
def art(pristine, tmp_path, capsys):
    return copy_for_test(pristine, tmp_path, capsys)


def _check(doc, name):
    return next(c for c in doc["checks"] if c["name"] == name)


def _reseal(out, mutate):
    reseal(out, mutate, recount=True)


def test_the_pristine_artifact_is_re_derived_and_names_what_it_cannot(art, capsys):
    code, out, err = run_report(art, capsys, "--json")
    payload = json.loads(out)
    assert code == 0 and err == "" and payload["problems"] == []
    assert sorted(payload["rederived"]) == ["below_one", "both", "close_to_pi", "die_is_fair", "no_failures"]
    assert payload["not_rederived"] == ["judged_by_hand"]
    report = (art / "report.md").read_text()
    assert "verdicts re-derived from the recorded figures: 5 of 6 checks (every one agrees" in report
    assert "not re-derivable (1: " in report and "`judged_by_hand`" in report


def _set(name, **fields):
    return lambda d: _check(d, name).update(fields)


def _part(d):
    _check(d, "both")["observed"][1] = 0.5                # greater(·, 1) no longer holds


def _flip(d):
    _check(d, "below_one").update(passed=False, status="fail")


def _duplicate(d):
    d["checks"].append(copy.deepcopy(_check(d, "below_one")))


def _record(**fields):
    rec = {"quantity": "epsilon", "value": 1.0, "mechanism": "toy", "method": "pld", "inputs": {},
           "neighboring": "add_remove", "libraries": {},
           "certified": {"certified": True, "lower": 0.9, "upper": 1.0, "side": "upper", "value": 1.0}}
    rec.update(fields)
    return lambda d: d["accounting_records"].append(rec)


def _calibration(d):
    d["accounting_records"].append({"parameter": "noise_multiplier", "value": 0.5, "bracket": [0.4, 0.5],
                                    "target_epsilon": 8.0, "epsilon": 8.5, "achieved": {"value": 8.5},
                                    "libraries": {}})


CONTRADICTIONS = {
    # name: (mutation, a phrase the problems must contain); every one is re-sealed and re-counted
    "observed far from expected": (_set("close_to_pi", observed=1e6),
                                   "'close_to_pi': recorded pass, but its rule 'within'"),
    "tolerance shrunk": (_set("close_to_pi", tolerance=1e-9), "'close_to_pi': recorded pass"),
    "bound exceeded": (_set("below_one", observed=2.0), "'below_one': recorded pass, but its rule 'at_most'"),
    "one part of all_of": (_part, "'both': recorded pass, but its rule 'all_of'"),
    "Monte-Carlo counts": (_set("die_is_fair", observed=[0.9, 0.02, 0.02, 0.02, 0.02, 0.02]),
                           "'die_is_fair': recorded pass, but its rule 'binomial_cells'"),
    "a failure listed": (_set("no_failures", observed={"failures": ["x too big"], "n": 3}),
                         "'no_failures': recorded pass, but its rule 'none_failed'"),
    "passing check flipped to fail": (_flip, "'below_one': recorded fail, but its rule 'at_most' on its own "
                                             "figures gives pass"),
    "malformed rule": (_set("below_one", rule={"kind": "trust_me"}), "'below_one': malformed verdict rule"),
    "negative epsilon claim": (lambda d: d["claims"][0].update(epsilon=-1), "claims[0] 'toy': epsilon -1"),
    "NaN epsilon claim": (lambda d: d["claims"][0].update(epsilon="nan"), "claims[0] 'toy': epsilon 'nan'"),
    "epsilon beyond the stated range": (lambda d: d["claims"][0].update(epsilon=1e5), "claims[0] 'toy': epsilon"),
    "duplicate check": (_duplicate, "'below_one' of suite 'alpha' duplicates checks[1]"),
    "check of a suite not run": (_set("below_one", suite="gamma"), "belongs to suite 'gamma', which is not among"),
    "suite listed without checks": (lambda d: d["suites"].append("delta"), "suite 'delta' is listed as run but has"),
    "suite listed twice": (lambda d: d["suites"].append("alpha"), "lists a suite twice"),
    "value not the enclosure's safe end": (_record(value=0.95), "is not the enclosure's upper end"),
    "empty enclosure": (_record(certified={"lower": 2.0, "upper": 1.0, "side": "upper"}), "is empty"),
    "calibration above its target": (_calibration, "above its target 8.0"),
    "finished before created": (lambda d: d.update(finished_utc="2000-01-01T00:00:00Z"), "is before created_utc"),
}


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_a_resealed_artifact_that_contradicts_itself_exits_1_with_the_warning_first(art, capsys, case):
    mutate, phrase = CONTRADICTIONS[case]
    _reseal(art, mutate)
    code, out, err = run_report(art, capsys)
    assert code == EXIT_PROBLEMS and err == ""
    assert out.splitlines()[0].startswith("WARNING:") and "does not check out" in out.splitlines()[0]
    assert phrase in out
    report = (art / "report.md").read_text()
    assert report.startswith("> **WARNING:") and phrase in report.split("# privcheck")[0]


def test_a_check_stripped_of_its_rule_is_named_as_not_re_derived(art, capsys):
    _reseal(art, lambda d: _check(d, "close_to_pi").update(rule=None, observed=1e6))
    code, out, _ = run_report(art, capsys, "--json")
    payload = json.loads(out)
    assert code == 0 and "close_to_pi" in payload["not_rederived"]       # said, never passed as re-derived
    assert "close_to_pi" not in payload["rederived"]


# ------------------------------------------------------------------------------------ the rules themselves

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=200, deadline=None)
@given(finite, finite, st.floats(min_value=0, allow_nan=False, allow_infinity=False))
def test_within_and_at_most_are_the_float64_comparisons(o, e, t):
    assert verdict({"kind": "within"}, o, e, t) == (math.isfinite(o - e) and abs(o - e) <= t)
    assert verdict({"kind": "at_most", "bound": e}, o, "<= e", t) == (o <= e + t)
    assert verdict({"kind": "greater", "bound": e}, o, None, None) == (o > e)


def test_non_finite_and_wrongly_typed_figures_fail():
    assert not verdict({"kind": "within"}, "nan", 0.0, 1.0)
    assert not verdict({"kind": "within"}, "inf", "inf", 1.0)
    assert not verdict({"kind": "at_most", "bound": 1.0}, True, None, 0.0)      # a bool is not a figure
    assert not verdict({"kind": "at_most", "bound": 1.0}, "0.5", None, 0.0)     # nor a numeral in a string
    assert not verdict({"kind": "within"}, 10**400, 0.0, 1.0)
    assert verdict({"kind": "greater", "bound": 0.0}, "inf", None, None)
    assert not verdict({"kind": "fields", "fields": {"x": {"kind": "within"}}}, {}, {"x": 1}, {"x": 0})
    assert not verdict({"kind": "all_of", "parts": [{"kind": "equal"}]}, [1, 2], [1, 2], [None, None])
    assert verdict({"kind": "equal"}, [1, {"a": 2.0}], [1.0, {"a": 2}], None)
    assert not verdict({"kind": "equal"}, True, 1, None)


@pytest.mark.parametrize("rule", [{"kind": "trust_me"}, {"kind": "at_most"}, {"kind": "at_most", "bound": "nan"},
                                  {"kind": "all_of", "parts": []}, {"kind": "fields", "fields": {}},
                                  {"kind": "binomial_cells", "trials": 0, "alpha": 0.1},
                                  {"kind": "binomial_upper_tail", "trials": 10, "alpha": 0.1, "p": 2},
                                  {"kind": "none_failed"}, "within"])
def test_malformed_rules_are_refused(rule):
    with pytest.raises(RuleError):
        verdict(rule, 1.0, 1.0, 0.0)


def _mp_upper_tail(k, n, p):
    """P[Binomial(n, p) ≥ k], summed exactly in mpmath at 60 digits (an independent reference)."""
    with mpmath.workdps(60):
        return sum(mpmath.binomial(n, j) * mpmath.mpf(p) ** j * (1 - mpmath.mpf(p)) ** (n - j)
                   for j in range(k, n + 1))


@pytest.mark.parametrize("k", [0, 5, 20, 21, 22, 23, 30, 150])
def test_binomial_upper_tail_against_an_exact_mpmath_sum(k):
    n, p, alpha = 150, 0.05, 1e-6
    rule = {"kind": "binomial_upper_tail", "trials": n, "p": p, "alpha": alpha}
    assert verdict(rule, k / n, None, None) == bool(_mp_upper_tail(k, n, p) >= alpha)


def test_binomial_frequencies_that_no_count_gives_fail():
    rule = {"kind": "binomial_upper_tail", "trials": 150, "p": 0.05, "alpha": 1e-6}
    assert not verdict(rule, 0.1234567, None, None)          # not k/150 for any integer k


def test_a_result_whose_verdict_contradicts_its_rule_is_refused():
    with pytest.raises(InvalidParameter, match="passed"):
        CheckResult(name="x", suite="s", passed=True, observed=2.0, expected="<= 1.0", tolerance=0.0,
                    reference="r", rule={"kind": "at_most", "bound": 1.0})
    ok = CheckResult(name="x", suite="s", passed=False, observed=2.0, expected="<= 1.0", tolerance=0.0,
                     reference="r", rule={"kind": "at_most", "bound": 1.0})
    assert ok.to_json()["rule"] == {"kind": "at_most", "bound": 1.0}
    errored = CheckResult(name="x", suite="s", passed=False, observed=None, expected=None, tolerance=None,
                          reference="r", status="error", rule={"kind": "within"})
    doc_check = errored.to_json()
    assert check_artifact is not None and doc_check["status"] == "error"      # an error is not re-judged


# ------------------------------------------------------------------------------------ hostile, schema-valid content

def _leaves(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, (*path, i))
    yield path


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | finite
    | st.sampled_from(["inf", "-inf", "nan", "", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["kind", "lower", "upper", "value",
                                                                                  "failures", "bound", "side"]),
                                                                 inner, max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def pristine_doc(pristine):
    return json.loads((pristine / "verification.json").read_text())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_any_edit_of_any_field_is_reported_never_raised(pristine_doc, data):
    """Whatever a forger writes in any field, the report's checks and its Markdown run to the end: problems are
    listed (or none, for an edit that keeps the document true), nothing raises."""
    from privcheck.artifacts.report import render_markdown

    doc = copy.deepcopy(pristine_doc)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in _leaves(doc) if p and p[0] != "sha256"]))
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = data.draw(json_values)
    doc = seal({k: v for k, v in doc.items() if k != "sha256"})
    problems = check_artifact(doc)
    assert isinstance(problems, list)
    assert render_markdown(doc, problems=problems).startswith(("> **WARNING", "# privcheck"))
