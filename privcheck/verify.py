"""`privcheck verify`: run registered suites, assemble, validate and seal the artifact, write it atomically.

Suites are found through the `privcheck.suites` entry-point group (so `mechanisms` and `audits` can
register theirs without `privcheck` importing them) plus the built-in `accounting` suite. A suite is a
callable `run_suite(seed: int | None) -> SuiteResult`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
import uuid
from pathlib import Path
from typing import Callable

from privcheck.artifacts.integrity import ArtifactInconsistent, check_artifact
from privcheck.artifacts.records import SuiteResult
from privcheck.artifacts.report import ARTIFACT, write_report
from privcheck.artifacts.schema import validate
from privcheck.artifacts.writer import ArtifactDirectory, seal
from privcheck.environment import environment
from privcheck.errors import InvalidParameter
from privcheck.randomness import SEEDED_REASON
from privcheck.serialization import utc_now

__all__ = ["ARTIFACT", "BUILTIN_SUITES", "SCHEMA", "SCHEMA_ID", "SCHEMA_VERSION", "available_suites",
           "run_verification", "write_verification"]

SCHEMA_ID = "privcheck.verification/1"
SCHEMA_VERSION = "1.2.0"
SCHEMA = "verification"
BUILTIN_SUITES = {"accounting": "privcheck.checks.accounting:run_suite"}


def available_suites() -> dict[str, str]:
    suites = dict(BUILTIN_SUITES)
    for ep in importlib.metadata.entry_points(group="privcheck.suites"):
        suites.setdefault(ep.name, ep.value)
    return suites


def _load(target: str) -> Callable[[int | None], SuiteResult]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def run_verification(suites: list[str] | None = None, seed: int | None = None) -> dict:
    """Run the suites and return the sealed, schema-valid artifact (nothing is written)."""
    registry = available_suites()
    names = list(suites) if suites else sorted(registry)
    for name in names:
        if name not in registry:
            raise InvalidParameter("suite", name, "one of " + ", ".join(sorted(registry)))
    created = utc_now()
    start = time.perf_counter()
    results = [_load(registry[name])(seed) for name in names]
    checks = [c.to_json() for r in results for c in r.checks]
    failed = sum(not c["passed"] for c in checks)
    modes = {r.randomness for r in results}
    mode = "seeded" if "seeded" in modes else ("os_entropy" if "os_entropy" in modes else "deterministic")
    randomness = {"mode": mode, "seed": seed if mode == "seeded" else None,
                  "privacy_release": mode == "os_entropy"}
    if mode != "os_entropy":
        randomness["note"] = "not a privacy release: " + (
            SEEDED_REASON if mode == "seeded" else "verification of fixed reference values")
    doc = {
        "schema": SCHEMA_ID, "schema_version": SCHEMA_VERSION, "run_id": uuid.uuid4().hex,
        "created_utc": created, "finished_utc": utc_now(), "status": "fail" if failed else "pass",
        "suites": names,
        "claims": [c.to_json() for r in results for c in r.claims],
        "checks": checks,
        "accounting_records": [rec.to_json() for r in results for rec in r.records],
        "environment": environment(), "randomness": randomness,
        "privacy_release": randomness["privacy_release"],
        "summary": {"checks": len(checks), "passed": len(checks) - failed, "failed": failed,
                    "seconds": time.perf_counter() - start},
        "figures": {k: v for r in results for k, v in r.figures.items()},
    }
    doc = seal(doc)
    validate(doc, SCHEMA)
    return doc


def write_verification(doc: dict, out: str | Path, signing_key=None) -> Path:
    """Write verification.json, report.md and the plots into `out` together (one ArtifactDirectory: all of
    them or none; plots of an earlier run that this one does not make are removed); returns the path of
    verification.json. The document is checked as `privcheck report` checks it (seal, schema, summaries against
    the checks, verdicts against their rules) before anything is staged: ArtifactInconsistent if it does not
    check out. With `signing_key` (an ed25519 private key, `privcheck.artifacts.signature.load_private_key`) the
    detached signature is written in the same commit; without it, a signature of an earlier run is removed."""
    problems = check_artifact(doc, SCHEMA)
    if problems:
        raise ArtifactInconsistent("; ".join(problems))
    with ArtifactDirectory(out) as staging:
        signature = None
        if signing_key is not None:
            from privcheck.artifacts.signature import SIGNATURE, sign_document
            signed = staging.write_json(SIGNATURE, sign_document(doc, signing_key, ARTIFACT))
            signature = f"{signed['algorithm']} by {signed['fingerprint']}, written to {SIGNATURE}"
        write_report(doc, staging, problems, signature=signature)
        staging.write_json(ARTIFACT, doc, schema=SCHEMA)
    return Path(out) / ARTIFACT
