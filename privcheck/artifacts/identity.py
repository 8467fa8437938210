"""What was verified and what was trained, computed the same way for both (docs/artifacts.md, "Run identity").

* `RunIdentity` — a trainer's public identity: its class, privacy plan, public configuration, model architecture,
  LoRA/PEFT configuration and the privcheck version; `digest` is the sha256 of its canonical JSON. The
  trainer-specific extraction lives with the trainers (`mechanisms.dpgrpo.identity`, `DPGRPOTrainer`).
* `Subject` — what a set of bindings verifies (`SuiteBindings.subject`): the identity, the declared check-mode
  differences and the token of the trainer object. `stamp` gives it to every result `run_suite` returns
  (`CheckResult.verified`), so results carry the identity of the trainer they verified.
* `check_mode_differences(real, checked, allowed=...)` — the field-by-field differences of a check mode (a
  derived trainer with another q, seeded randomness, fewer steps, ...), refusing any field outside `allowed`.
* `VerificationEvidence.from_results(results)` and `bind_verification(trained, evidence, required=...)` — the
  binding a run artifact records: foreign, stale or unbound evidence is refused by name (`VerificationMismatch`);
  a partial or failing suite is recorded (`VerificationBinding.blockers`), never released.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from privcheck.errors import InvalidParameter
from privcheck.serialization import canonical_json

__all__ = ["IDENTITY_PARTS", "NEVER_CHECK_MODE", "Difference", "ForeignVerification", "RunIdentity",
           "StaleVerification", "Subject", "UnboundVerification", "VerificationBinding", "VerificationEvidence",
           "VerificationMismatch", "bind_verification", "binding_problems", "canonical", "check_mode_differences",
           "identity_differences", "privcheck_version", "stamp", "subject_token"]

IDENTITY_PARTS = ("trainer", "plan", "config", "model", "peft", "privcheck_version")
# A check mode runs the same code: another trainer class or privcheck version is another subject, never a mode.
NEVER_CHECK_MODE = ("trainer", "privcheck_version")
_PLAN_SYMBOLS = {"sampling_rate": "q", "noise_multiplier": "σ", "steps": "T", "delta": "δ", "clip_norm": "C",
                 "records": "n"}
_TOKEN_ATTR = "_privcheck_subject_token"


def privcheck_version() -> str:
    """The privcheck version an identity records (a different version makes verification stale)."""
    from privcheck import __version__

    return __version__


def canonical(x):
    """`x` as plain JSON values with a stable form: mappings with str keys, sets sorted, tuples as lists,
    non-finite floats as strings, anything else by its str (so two equal configurations hash equally)."""
    if x is None or isinstance(x, (bool, str, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, Mapping):
        return {str(k): canonical(v) for k, v in x.items()}
    if isinstance(x, (set, frozenset)):
        return sorted((canonical(v) for v in x), key=lambda v: canonical_json(v))
    if isinstance(x, (list, tuple)):
        return [canonical(v) for v in x]
    if hasattr(x, "to_json"):
        return canonical(x.to_json())
    value = getattr(x, "value", None)           # enums
    if isinstance(value, (str, int, float)):
        return canonical(value)
    return str(x)


def _sha(x) -> str:
    return hashlib.sha256(canonical_json(canonical(x))).hexdigest()


def _flatten(prefix: str, x, out: dict) -> None:
    if isinstance(x, dict) and x:
        for k in sorted(x):
            _flatten(f"{prefix}.{k}", x[k], out)
    else:
        out[prefix] = x


@dataclass(frozen=True)
class RunIdentity:
    """A trainer's public identity (module docstring). `plan` is the privacy plan's `to_json()` (None for a
    non-private arm), `config` the public configuration that affects the update, `model` the base model's
    architecture configuration, `peft` the LoRA/PEFT configuration (None without one); all plain JSON."""

    trainer: str
    plan: Any
    config: Any
    model: Any = None
    peft: Any = None
    # looked up when an identity is made (not bound once), so the version that computes it is the one recorded
    privcheck_version: str = dataclasses.field(default_factory=lambda: privcheck_version())

    def __post_init__(self):
        if not isinstance(self.trainer, str) or not self.trainer:
            raise InvalidParameter("trainer", self.trainer, "the trainer's qualified class name")
        for name in ("plan", "config", "model", "peft"):
            object.__setattr__(self, name, canonical(getattr(self, name)))

    def parts(self) -> dict:
        return {name: getattr(self, name) for name in IDENTITY_PARTS}

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of every part (`IDENTITY_PARTS`)."""
        return _sha(self.parts())

    def fields(self) -> dict:
        """Every leaf as `part.key.subkey` -> value (the names differences are reported by)."""
        out: dict = {}
        for name, value in self.parts().items():
            _flatten(name, value, out)
        return out

    def to_json(self) -> dict:
        return {**self.parts(), "config_sha256": _sha(self.config), "model_sha256": _sha(self.model),
                "peft_sha256": _sha(self.peft), "digest": self.digest}

    @classmethod
    def from_json(cls, doc) -> "RunIdentity":
        if not isinstance(doc, Mapping) or any(k not in doc for k in IDENTITY_PARTS):
            raise InvalidParameter("identity", type(doc).__name__, f"a mapping with the fields {IDENTITY_PARTS}")
        return cls(**{k: doc[k] for k in IDENTITY_PARTS})


@dataclass(frozen=True)
class Difference:
    """One field on which the checked (verified) identity differs from the real (trained) one."""

    field: str
    real: Any
    checked: Any

    def to_json(self) -> dict:
        return {"field": self.field, "real": canonical(self.real), "checked": canonical(self.checked)}

    def describe(self) -> str:
        key = self.field.removeprefix("plan.")
        symbol = f" ({_PLAN_SYMBOLS[key]})" if self.field.startswith("plan.") and key in _PLAN_SYMBOLS else ""
        return f"{self.field}{symbol}: trained {self.real!r}, verified {self.checked!r}"


def identity_differences(real: RunIdentity, checked: RunIdentity) -> list[Difference]:
    """Every field (`RunIdentity.fields`) on which `checked` differs from `real`, plan fields first."""
    a, b = real.fields(), checked.fields()
    order = {p: i for i, p in enumerate(("plan", "trainer", "privcheck_version", "config", "model", "peft"))}
    names = sorted(set(a) | set(b), key=lambda f: (order[f.split(".", 1)[0]], f))
    return [Difference(f, a.get(f), b.get(f)) for f in names if a.get(f) != b.get(f)]


def _allowed(field: str, allowed: Iterable[str]) -> bool:
    return any(field == p or field.startswith(p.rstrip(".") + ".") for p in allowed)


def check_mode_differences(real: RunIdentity, checked: RunIdentity, *, allowed: Sequence[str] = ()
                           ) -> list[Difference]:
    """The differences of a check mode from the real run, field by field (real value vs checked value), for the
    deriving code to declare (`Subject.differences`). `allowed`: the fields (or part prefixes such as "model")
    the check mode may change; any other difference, and any change of `NEVER_CHECK_MODE`, raises
    `ForeignVerification` naming the fields with both values."""
    if isinstance(allowed, str) or not all(isinstance(p, str) and p for p in allowed):
        raise InvalidParameter("allowed", allowed, "a sequence of identity field names or part prefixes")
    diffs = identity_differences(real, checked)
    bad = [d for d in diffs if d.field in NEVER_CHECK_MODE or not _allowed(d.field, allowed)]
    if bad:
        raise ForeignVerification(bad, "a check mode may change only the allowed fields "
                                       f"{tuple(allowed)}, never {NEVER_CHECK_MODE}")
    return diffs


def subject_token(trainer) -> str | None:
    """An opaque token of the trainer object (set on first use), telling 'this trainer changed after it was
    verified' (stale) from 'another trainer' (foreign); None for objects that take no attributes."""
    token = getattr(trainer, _TOKEN_ATTR, None)
    if token is None:
        token = uuid.uuid4().hex
        try:
            object.__setattr__(trainer, _TOKEN_ATTR, token)
        except (AttributeError, TypeError):
            return None
    return token


@dataclass(frozen=True)
class Subject:
    """What a set of bindings verifies (`SuiteBindings.subject`): `identity`, the declared check-mode
    `differences` (real vs checked, from `check_mode_differences`, or the bindings' own check mode such as
    seeded fresh copies), the trainer's `token` (`subject_token`) and, once stamped, the checks the bindings
    declare `not_applicable`."""

    identity: RunIdentity
    differences: tuple = ()
    token: str | None = None
    not_applicable: tuple = ()

    def __post_init__(self):
        if not isinstance(self.identity, RunIdentity):
            raise InvalidParameter("identity", type(self.identity).__name__, "a RunIdentity")
        diffs = tuple(self.differences)
        if not all(isinstance(d, Difference) for d in diffs):
            raise InvalidParameter("differences", diffs, "Difference records (check_mode_differences)")
        object.__setattr__(self, "differences", diffs)
        object.__setattr__(self, "not_applicable", tuple(sorted(self.not_applicable)))

    @classmethod
    def of(cls, trainer, identity: RunIdentity, differences: Sequence[Difference] = ()) -> "Subject":
        return cls(identity, tuple(differences), subject_token(trainer))


def stamp(results, bindings) -> list:
    """`results` of `run_suite` on `bindings`, each carrying the bindings' `Subject` (with the checks they
    declare not applicable) in `CheckResult.verified`; unchanged when the bindings name no subject."""
    subject = getattr(bindings, "subject", None)
    if subject is None:
        return list(results)
    if not isinstance(subject, Subject):
        raise InvalidParameter("subject", type(subject).__name__, "None or a privcheck.artifacts.identity.Subject")
    subject = dataclasses.replace(subject, not_applicable=tuple(getattr(bindings, "not_applicable", None) or ()))
    return [dataclasses.replace(r, verified=subject) for r in results]


class VerificationMismatch(InvalidParameter):
    """Verification results that cannot stand for the run: names the first mismatched field with both values
    (`field`, `trained`, `verified`) and lists every one (`differences`)."""

    kind = "mismatched"

    def __init__(self, differences: Sequence[Difference], why: str):
        self.differences = list(differences)
        first = self.differences[0] if self.differences else None
        self.field = None if first is None else first.field
        self.trained = None if first is None else first.real
        self.verified = None if first is None else first.checked
        what = "; ".join(d.describe() for d in self.differences) or why
        super().__init__("verification", f"{self.kind} verification", why)
        # every difference is named in full (the value cut of InvalidParameter is for values a user typed)
        self.args = (f"invalid verification={self.kind} verification ({what}): allowed range is {why}",)


class ForeignVerification(VerificationMismatch):
    """The results verified another trainer, configuration or plan than the one trained."""

    kind = "foreign"


class StaleVerification(VerificationMismatch):
    """The results verified this trainer under another privcheck version, or before its configuration changed."""

    kind = "stale"


class UnboundVerification(VerificationMismatch):
    """Results that carry no identity (not produced by `run_suite` on a trainer's bindings)."""

    kind = "unbound"


@dataclass(frozen=True)
class VerificationEvidence:
    """Results of one `run_suite` subject: the `CheckResult`s and the `Subject` they carry."""

    results: tuple
    subject: Subject

    @property
    def identity(self) -> RunIdentity:
        return self.subject.identity

    @classmethod
    def from_results(cls, results) -> "VerificationEvidence":
        """Collect stamped results (a `VerificationEvidence`, a sequence of `CheckResult`s, or a mapping name ->
        `CheckResult`). Raises `UnboundVerification` for a result without a subject or for no results, and
        `ForeignVerification` for results of several subjects."""
        if isinstance(results, VerificationEvidence):
            return results
        from privcheck.artifacts.records import CheckResult

        items = list(results.values()) if isinstance(results, Mapping) else list(results)
        if not items or not all(isinstance(r, CheckResult) for r in items):
            raise UnboundVerification([], "CheckResults returned by run_suite on a trainer's bindings "
                                          "(trainer.privcheck_bindings())")
        unbound = [r.name for r in items if r.verified is None]
        if unbound:
            raise UnboundVerification([Difference("identity", "the trained run", None)],
                                      f"results that carry the identity of the trainer they verified; {unbound[0]!r} "
                                      "carries none (run run_suite on trainer.privcheck_bindings())")
        first = items[0].verified
        for r in items[1:]:
            s = r.verified
            if s.identity != first.identity or s.token != first.token or s.differences != first.differences:
                diffs = identity_differences(first.identity, s.identity) or [
                    Difference("token", first.token, s.token)]
                raise ForeignVerification(diffs, f"results of one trainer; {r.name!r} verified another")
        not_applicable = tuple(sorted(set().union(*(r.verified.not_applicable for r in items))))
        return cls(tuple(items), dataclasses.replace(first, not_applicable=not_applicable))

    def to_json(self) -> dict:
        return {"identity": self.identity.to_json(), "differences": [d.to_json() for d in self.subject.differences],
                "checks": [r.name for r in self.results]}


@dataclass(frozen=True)
class VerificationBinding:
    """How a run's verification binds to it (`bind_verification`): the `trained` identity, the `evidence` (None
    when no verification was given), the declared check-mode differences, the required checks that did not
    run (`missing`: absent, or skipped without being declared not applicable) and those that did not pass."""

    trained: RunIdentity
    evidence: VerificationEvidence | None
    missing: tuple = ()
    failed: tuple = ()

    @property
    def differences(self) -> tuple:
        return () if self.evidence is None else self.evidence.subject.differences

    @property
    def check_mode_runs(self) -> dict:
        """How the checks' own runs differed from the released run ({field: {"real", "checked"}}: a check-mode q,
        seeds, a subset of the records, fewer steps), as every result's `inputs["check_mode"]` records it."""
        out: dict = {}
        for r in () if self.evidence is None else self.evidence.results:
            for k, v in dict(r.inputs.get("check_mode") or {}).items():
                out.setdefault(str(k), v)
        return out

    @property
    def complete(self) -> bool:
        """Verification of this run, every required check run and passed (or declared not applicable)."""
        return self.evidence is not None and not self.missing and not self.failed

    def blockers(self) -> list[str]:
        if self.evidence is None:
            return ["verification suite skipped"]
        out = []
        if self.missing:
            out.append("verification partial: required checks not run: " + ", ".join(self.missing))
        if self.failed:
            out.append("verification suite did not pass: " + ", ".join(self.failed))
        return out

    def to_json(self) -> dict:
        return {"trained": self.trained.to_json(),
                "verified": None if self.evidence is None else self.evidence.identity.to_json(),
                "check_mode_differences": [d.to_json() for d in self.differences],
                "check_mode_runs": canonical(self.check_mode_runs),
                "missing_checks": list(self.missing), "bound": self.evidence is not None,
                "reason": "; ".join(self.blockers()) or None}


def binding_problems(block: Mapping, *, verification_status: str) -> list[str]:
    """What `privcheck report` finds wrong with a run artifact's `identity` entry (schema-valid): a digest that
    is not its identity's, verification without a verified identity, a difference between the verified and the
    trained identity that is not a declared check-mode difference (named with both values), or a `bound` flag
    the identities contradict."""
    problems = []
    identities = {}
    for side in ("trained", "verified"):
        doc = block[side]
        if doc is None:
            continue
        ident = RunIdentity.from_json(doc)
        identities[side] = ident
        recomputed = ident.to_json()
        for key in ("digest", "config_sha256", "model_sha256", "peft_sha256"):
            if doc[key] != recomputed[key]:
                problems.append(f"identity.{side}.{key} {doc[key]} is not the identity's ({recomputed[key]})")
    if "verified" not in identities:
        if verification_status != "skipped":
            problems.append(f"verification status {verification_status!r} with no verified identity: the results "
                            "are not bound to a trainer")
        if block["bound"]:
            problems.append("identity.bound = true with no verified identity")
        return problems
    declared = [Difference(d["field"], d["real"], d["checked"]) for d in block["check_mode_differences"]]
    undeclared = [d for d in identity_differences(identities["trained"], identities["verified"])
                  if d not in declared]
    if undeclared:
        problems.append("verified identity does not match the trained identity: "
                        + "; ".join(d.describe() for d in undeclared))
    if block["bound"] and undeclared:
        problems.append("identity.bound = true contradicts the identities")
    return problems


def bind_verification(trained: RunIdentity, verification, *, required: Sequence[str], token: str | None = None
                      ) -> VerificationBinding:
    """Bind `verification` (None, a `VerificationEvidence`, or stamped results) to the `trained` identity.

    Refused (raised, naming every mismatched field with both values): unbound results (`UnboundVerification`);
    another privcheck version, or this trainer (`token`) changed after it was verified (`StaleVerification`);
    another trainer, configuration or plan (`ForeignVerification`). Every difference between the identities
    must be a declared check-mode difference with the same two values. Recorded, not raised: `required` checks
    that did not run (`missing`) and checks that did not pass (`failed`)."""
    if not isinstance(trained, RunIdentity):
        raise InvalidParameter("trained", type(trained).__name__, "a RunIdentity")
    if verification is None:
        return VerificationBinding(trained, None)
    evidence = VerificationEvidence.from_results(verification)
    declared = evidence.subject.differences
    diffs = identity_differences(trained, evidence.identity)
    stale = [d for d in diffs if d.field == "privcheck_version"]
    if stale:
        raise StaleVerification(stale, "results of this privcheck version (verify again)")
    undeclared = [d for d in diffs if d not in declared]
    if undeclared:
        if token is not None and token == evidence.subject.token:
            raise StaleVerification(undeclared, "results of the trained run as it is now: it changed after it "
                                                "was verified (verify again)")
        raise ForeignVerification(undeclared, "results of the trained run (trainer.privcheck_bindings() of this "
                                              "trainer), differing from it only by declared check-mode differences")
    by_name = {r.name: r for r in evidence.results}
    na = set(evidence.subject.not_applicable)
    missing = tuple(n for n in required if n not in by_name or (by_name[n].status == "skipped" and n not in na))
    failed = tuple(r.name for r in evidence.results if r.status in ("fail", "error"))
    return VerificationBinding(trained, evidence, missing, failed)
