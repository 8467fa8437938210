"""Checking a sealed artifact: its seal, its schema, and every summary it carries against what it summarises.

* `load_artifact(path)` — the document of a sealed artifact file, or `ArtifactUnreadable` (a PrivcheckError naming
  the file and the reason: missing, not UTF-8, not JSON, truncated, duplicate keys, NaN, not an object, no seal).
* `check_artifact(doc)` — the list of problems (empty when the document checks out): the sha256 seal recomputed
  and compared, the document validated against the schema its `schema` field names, and, when it is
  schema-valid, the kind's consistency rules (`consistency_problems`). Every artifact kind gets the seal and schema
  checks; the rules cover the summaries and flags each kind stores beside the data they are derived from.
* `count_checks(checks)` — the counts of a verification artifact recomputed from its checks (what reports show).

A document that checks out was not edited after sealing *or* was re-sealed after the edit: the seal is a checksum,
not a signature (docs/artifacts.md says what it proves).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema

from privcheck.artifacts.schema import available_schemas, load_schema
from privcheck.artifacts.seal import sha256_of
from privcheck.artifacts.verdicts import rule_problem, verdict
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.inputs import parse_json, read_input

__all__ = ["ArtifactInconsistent", "ArtifactUnreadable", "check_artifact", "consistency_problems", "count_checks",
           "load_artifact", "rederivable", "schema_kind", "schema_problems", "verdict_problems"]

MAX_SCHEMA_PROBLEMS = 20        # a badly broken document would otherwise list every field


class ArtifactUnreadable(PrivcheckError):
    """An artifact file that cannot be read as a sealed JSON document."""

    def __init__(self, path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"cannot read artifact {path}: {reason}")


class ArtifactInconsistent(ValueError):
    """A document about to be written contradicts itself (a summary that does not match its data)."""


def load_artifact(path) -> dict:
    """Read and parse a sealed artifact (module docstring); nothing is checked beyond its being one."""
    path = Path(path)
    try:
        data = read_input(path, "artifact", "artifact")
    except InvalidParameter as exc:     # not a regular file, unreadable, over the size limit (privcheck.inputs)
        raise ArtifactUnreadable(path, f"{exc.value}: allowed is {exc.allowed}") from None
    if not data.strip():
        raise ArtifactUnreadable(path, "an empty file")
    try:
        doc = parse_json(data, "artifact")
    except InvalidParameter as exc:     # not UTF-8, invalid or truncated, duplicate keys, NaN, 1e999, too deep
        raise ArtifactUnreadable(path, f"{exc.value} (allowed: {exc.allowed})") from None
    if not isinstance(doc, dict):
        raise ArtifactUnreadable(path, f"a JSON {type(doc).__name__ if doc is not None else 'null'}, "
                                       "not an object (an artifact is one JSON object)")
    if not isinstance(doc.get("sha256"), str):
        raise ArtifactUnreadable(path, "no sha256 seal (not a sealed privcheck artifact)")
    return doc


@functools.lru_cache(maxsize=None)
def _kinds_by_id() -> dict[str, str]:
    return {load_schema(kind)["$id"]: kind for kind in available_schemas()}


def schema_kind(doc) -> str | None:
    """The schema kind ("verification", "audit", ...) named by the document's `schema` field, or None."""
    return _kinds_by_id().get(doc.get("schema")) if isinstance(doc, dict) and isinstance(doc.get("schema"), str) \
        else None


def _seal_problems(doc: dict) -> list[str]:
    stored = doc.get("sha256")
    if not isinstance(stored, str):
        return ["no sha256 seal"]
    try:
        recomputed = sha256_of(doc)
    except (TypeError, ValueError) as exc:
        return [f"sha256 seal cannot be recomputed ({exc})"]
    if recomputed != stored:
        return [f"sha256 seal mismatch: stored {stored}, recomputed {recomputed} (edited after sealing)"]
    return []


def schema_problems(doc, kind: str) -> list[str]:
    """The ways `doc` fails schema `kind` (at most MAX_SCHEMA_PROBLEMS of them, then a count); [] when it is valid."""
    schema = load_schema(kind)
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=jsonschema.FormatChecker())
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        message = err.message if len(err.message) <= 160 else err.message[:157] + "..."
        problems.append(f"schema {schema['$id']}: {where}: {message}")
    if len(problems) > MAX_SCHEMA_PROBLEMS:
        problems = problems[:MAX_SCHEMA_PROBLEMS] + [f"... and {len(problems) - MAX_SCHEMA_PROBLEMS} more schema "
                                                     "problems"]
    return problems


def count_checks(checks: list[dict]) -> dict:
    """Counts recomputed from a verification artifact's checks: `checks`, `passed`, `failed`, `status` ("pass"
    iff every check passed), `by_status` ({status: n}) and `suites` ({suite: {"checks", "passed", "failed"}})."""
    by_status: dict[str, int] = {}
    suites: dict[str, dict[str, int]] = {}
    passed = 0
    for c in checks:
        ok = c.get("passed") is True
        status = c.get("status") or ("pass" if ok else "fail")
        by_status[status] = by_status.get(status, 0) + 1
        suite = suites.setdefault(str(c.get("suite")), {"checks": 0, "passed": 0, "failed": 0})
        suite["checks"] += 1
        suite["passed" if ok else "failed"] += 1
        passed += ok
    return {"checks": len(checks), "passed": passed, "failed": len(checks) - passed,
            "status": "pass" if checks and passed == len(checks) else "fail",
            "by_status": dict(sorted(by_status.items())), "suites": dict(sorted(suites.items()))}


def _verification_rules(doc: dict) -> list[str]:
    problems = []
    for i, c in enumerate(doc["checks"]):
        if "status" in c and c["passed"] != (c["status"] == "pass"):
            problems.append(f"checks[{i}] {c['name']!r}: passed={json.dumps(c['passed'])} contradicts "
                            f"status={c['status']!r}")
    counts = count_checks(doc["checks"])
    if doc["status"] != counts["status"]:
        problems.append(f"status {doc['status']!r} contradicts the checks: {counts['passed']} of "
                        f"{counts['checks']} passed, so the status is {counts['status']!r}")
    for key in ("checks", "passed", "failed"):
        if doc["summary"][key] != counts[key]:
            problems.append(f"summary.{key} = {doc['summary'][key]} contradicts the checks ({counts[key]})")
    if doc["privacy_release"] != doc["randomness"]["privacy_release"]:
        problems.append(f"privacy_release = {json.dumps(doc['privacy_release'])} contradicts "
                        f"randomness.privacy_release = {json.dumps(doc['randomness']['privacy_release'])}")
    problems += verdict_problems(doc["checks"])
    problems += _suite_problems(doc)
    problems += _claim_problems(doc["claims"])
    problems += _record_problems(doc["accounting_records"])
    if doc["finished_utc"] < doc["created_utc"]:        # RFC 3339 UTC with the same "Z" form: text order is time
        problems.append(f"finished_utc {doc['finished_utc']} is before created_utc {doc['created_utc']}")
    return problems


def _figures(c: dict) -> str:
    def short(x):
        text = json.dumps(x, sort_keys=True, ensure_ascii=False)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"observed {short(c['observed'])}, expected {short(c['expected'])}, tolerance {short(c['tolerance'])}"


def verdict_problems(checks: list[dict]) -> list[str]:
    """Each check that records a verdict rule (`privcheck.artifacts.verdicts`) is re-judged on its recorded figures:
    a malformed rule, or a pass/fail verdict the rule does not give, is a problem."""
    problems = []
    for i, c in enumerate(checks):
        rule = c.get("rule")
        if rule is None:
            continue
        bad = rule_problem(rule)
        if bad:
            problems.append(f"checks[{i}] {c['name']!r}: malformed verdict rule: {bad}")
            continue
        if c.get("status", "pass" if c["passed"] else "fail") not in ("pass", "fail"):
            continue                    # an error or a skip is not a comparison: nothing to re-derive
        derived = verdict(rule, c["observed"], c["expected"], c["tolerance"])
        if derived != c["passed"]:
            problems.append(f"checks[{i}] {c['name']!r}: recorded {'pass' if c['passed'] else 'fail'}, but its rule "
                            f"{rule['kind']!r} on its own figures gives {'pass' if derived else 'fail'} "
                            f"({_figures(c)})")
    return problems


def rederivable(checks: list[dict]) -> tuple[list[str], list[str]]:
    """(names of the checks whose verdict a report re-derives, names of those it cannot: no rule recorded, or an
    error or skip, which are not comparisons)."""
    done, not_done = [], []
    for c in checks:
        status = c.get("status") or ("pass" if c.get("passed") else "fail")
        ok = isinstance(c.get("rule"), dict) and rule_problem(c["rule"]) is None and status in ("pass", "fail")
        (done if ok else not_done).append(c.get("name"))
    return done, not_done


def _suite_problems(doc: dict) -> list[str]:
    problems = []
    listed = doc["suites"]
    if len(set(listed)) != len(listed):
        problems.append(f"suites {listed} lists a suite twice")
    seen: dict[tuple, int] = {}
    for i, c in enumerate(doc["checks"]):
        key = (c["suite"], c["name"])
        if key in seen:
            problems.append(f"checks[{i}] {c['name']!r} of suite {c['suite']!r} duplicates checks[{seen[key]}]")
        seen.setdefault(key, i)
        if c["suite"] not in listed:
            problems.append(f"checks[{i}] {c['name']!r} belongs to suite {c['suite']!r}, which is not among the "
                            f"suites run {listed}")
    ran = {c["suite"] for c in doc["checks"]}
    problems += [f"suite {s!r} is listed as run but has no check" for s in listed if s not in ran]
    return problems


def _epsilon_problem(eps) -> str | None:
    from privcheck.accounting.gaussian import EPS_MAX

    if eps == "inf":
        return None                     # "no finite guarantee" is a claim that can be made
    if isinstance(eps, str) or not 0 <= eps <= EPS_MAX:
        return f"outside [0, {EPS_MAX:g}] or +inf (the range of every epsilon privcheck states)"
    return None


def _claim_problems(claims: list[dict]) -> list[str]:
    problems = []
    for i, c in enumerate(claims):
        bad = _epsilon_problem(c["epsilon"])
        if bad:
            problems.append(f"claims[{i}] {c['mechanism']!r}: epsilon {c['epsilon']!r} is {bad}")
    return problems


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _certified_problems(where: str, value, cert) -> list[str]:
    if not isinstance(cert, dict) or not (_real(cert.get("lower")) and _real(cert.get("upper"))):
        return []
    problems = []
    if not cert["lower"] <= cert["upper"]:
        problems.append(f"{where}: certified enclosure [{cert['lower']}, {cert['upper']}] is empty")
    side = cert.get("side", "upper")
    end = cert["lower"] if side == "lower" else cert["upper"]
    if value != end:
        problems.append(f"{where}: value {value!r} is not the enclosure's {'lower' if side == 'lower' else 'upper'} "
                        f"end {end!r} (a reported privacy loss is the safe end of its enclosure)")
    return problems


def _record_problems(records: list[dict]) -> list[str]:
    """The ranges of the accounting records (the schema requires their fields, not their types)."""
    problems = []
    for i, rec in enumerate(records):
        where = f"accounting_records[{i}]"
        value = rec.get("value")
        if "quantity" in rec:
            problems += _certified_problems(where, value, rec.get("certified"))
            if rec.get("quantity") == "epsilon" and value != "inf" and not (_real(value) and value >= 0):
                problems.append(f"{where}: epsilon {value!r} is negative or not a number")
            continue
        bracket, achieved, target = rec.get("bracket"), rec.get("achieved"), rec.get("target_epsilon")
        if isinstance(bracket, list) and len(bracket) == 2 and all(map(_real, bracket)) and _real(value) \
                and not bracket[0] <= value <= bracket[1]:
            problems.append(f"{where}: calibrated {rec.get('parameter')} = {value!r} lies outside its bracket "
                            f"{bracket}")
        if isinstance(achieved, dict) and _real(achieved.get("value")) and _real(target) \
                and achieved["value"] > target:
            problems.append(f"{where}: calibrated {rec.get('parameter')} achieves epsilon {achieved['value']!r} "
                            f"above its target {target!r} (calibration must land on the safe side)")
    return problems


def _dpgrpo_run_rules(doc: dict) -> list[str]:
    from privcheck.artifacts.identity import binding_problems

    problems = []
    if doc["privacy_release"] and (doc["status"] != "complete" or doc["verification"].get("status") != "pass"):
        problems.append(f"privacy_release = true contradicts status {doc['status']!r} / verification status "
                        f"{doc['verification'].get('status')!r} (a release is complete and verified)")
    block = doc.get("identity")
    if block is None:                   # the schema requires it: only a partial document reaches here without
        return problems
    problems += binding_problems(block, verification_status=doc["verification"]["status"])
    # the trained identity is this artifact's run: its configuration and its plan's (q, σ, T, δ, C, n)
    trained = block["trained"]
    config = {k: v for k, v in doc["config"].items() if k != "sha256"}
    if trained["config"].get("dp") != config:
        problems.append("identity.trained.config.dp is not the artifact's config")
    privacy, plan = doc["privacy"], trained["plan"]
    if (privacy is None) != (plan is None):
        problems.append("identity.trained.plan contradicts the privacy entry (one is null)")
    elif plan is not None:
        for key, field in (("q", "sampling_rate"), ("sigma", "noise_multiplier"), ("T", "steps"),
                           ("delta", "delta"), ("C", "clip_norm"), ("n", "records")):
            if privacy.get(key) != plan.get(field):
                problems.append(f"identity.trained.plan.{field} = {plan.get(field)!r} contradicts privacy.{key} = "
                                f"{privacy.get(key)!r}")
    return problems


def _dpgrpo_compare_rules(doc: dict) -> list[str]:
    complete = "complete" if all(r["status"] == "complete" for r in doc["runs"]) else "incomplete"
    if doc["status"] != complete:
        return [f"status {doc['status']!r} contradicts the runs' statuses (so {complete!r})"]
    return []


def _release_rule(doc: dict) -> list[str]:
    """Every kind: a document marked as a privacy release has release randomness, where it records that."""
    randomness = doc.get("randomness")
    if doc.get("privacy_release") is True and isinstance(randomness, dict) \
            and randomness.get("privacy_release") is False:
        return ["privacy_release = true contradicts randomness.privacy_release = false"]
    return []


_RULES = {"verification": _verification_rules, "dpgrpo_run": _dpgrpo_run_rules,
          "dpgrpo_compare": _dpgrpo_compare_rules}


def consistency_problems(doc: dict, kind: str) -> list[str]:
    """The kind's consistency rules on a schema-valid document (module docstring)."""
    rule = _RULES.get(kind)
    return _release_rule(doc) + (rule(doc) if rule else [])


def check_artifact(doc, kind: str | None = None) -> list[str]:
    """Every problem of `doc` (empty: it checks out). `kind` defaults to the one its `schema` field names."""
    if not isinstance(doc, dict):
        return [f"not a JSON object (a {type(doc).__name__})"]
    problems = _seal_problems(doc)
    kind = kind or schema_kind(doc)
    if kind is None:
        return problems + [f"unknown schema {doc.get('schema')!r} (known: "
                           + ", ".join(sorted(_kinds_by_id())) + ")"]
    invalid = schema_problems(doc, kind)
    if invalid:
        return problems + invalid
    return problems + consistency_problems(doc, kind)
