"""The audit report: a frozen record, its JSON form, and the sealed artifact (layout: docs/audits.md, "The audit
report").

Guarantees:
* Every field of the `privcheck.audit/1` layout is present in `to_json()`; `null` where a field does not apply.
* GDP-family methods (`gdp_rates`, `fdp_one_run`) carry `result.mu_lower` and
  `result.eps_estimate_gdp_family`, list "gaussian_tradeoff" in `extra_assumptions`, have **no**
  `result.eps_lower` key and never set `rejects_nominal`: their ε is an (ε, δ) lower bound only under a Gaussian
  trade-off curve, so it must never be read as one. The constructor refuses any report that breaks these rules,
  so no code path can emit one.
* `power.eps_ceiling` and `power.planned_eps_lower` are always filled (from the power analysis when one is
  supplied, else from the ceiling: perfect guessing).
* A `steinke_one_run` report may carry a second bound, `result.fdp_claim_curve` (`FDP_BLOCK_KEYS`; built by
  `audits.statistics.both_bounds` from the same counts): its ε_lower holds only under the `claim_family:<event>`
  assumption the block names beside it, so the headline `result.eps_lower` stays the assumption-free one. The
  constructor refuses a block of another method, of other keys or without that assumption.
* `write_audit` validates the sealed document against `privcheck/schemas/audit.schema.json` before
  writing it atomically; nothing is written if any step fails.

Nested mappings are read-only views and lists are tuples, so a report cannot be edited after creation.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from privcheck.accounting.events import NeighboringRelation
from privcheck.environment import library_versions
from privcheck.errors import InvalidParameter
from privcheck.serialization import freeze, thaw, utc_now

__all__ = ["ARTIFACT", "AuditReport", "FDP_BLOCK", "FDP_BLOCK_KEYS", "GAUSSIAN_TRADEOFF", "GDP_METHODS", "HEADLINES",
           "METHODS", "MULTIRUN_ASSUMPTIONS", "ONE_RUN_ASSUMPTIONS", "POWER_KEYS", "RESULT_COMMON", "SCHEMA_FILE",
           "SCHEMA_ID", "SECTION_KEYS", "VERDICT_KEYS", "audit_document", "canaries_block", "check_out_dir",
           "claim_block", "diagnostics_block", "guessing_block", "power_block", "randomness_block", "software",
           "write_audit"]

SCHEMA_ID = "privcheck.audit/1"
SCHEMA_FILE = "audit.schema.json"
ARTIFACT = "audit.json"

METHODS = ("steinke_one_run", "clopper_pearson", "gdp_rates", "fdp_one_run", "blackbox_pair", "fdp_claim_curve")
GDP_METHODS = ("gdp_rates", "fdp_one_run")
GAUSSIAN_TRADEOFF = "gaussian_tradeoff"

ONE_RUN_ASSUMPTIONS = ("independent_canary_coins", "guess_rule_fixed_before_labels", "per_canary_add_remove_dp",
                       "scored_object_covered_by_guarantee")
MULTIRUN_ASSUMPTIONS = ("iid_runs", "test_fixed_before_evaluation_runs", "neighbouring_datasets_under_claim_relation")

POWER_KEYS = ("eps_ceiling", "min_correct_for_nominal", "planned_eps_lower", "mc_median", "mc_p10", "mc_p90",
              "prob_zero", "score_model")
# The plan's verdict (`audits.statistics.power.assess`): filled by the report from its own claim when the caller gave
# none.
VERDICT_KEYS = ("underpowered", "underpowered_fraction", "canaries_needed", "plan_note")
SECTION_KEYS = {
    "claim": ("epsilon", "delta", "neighboring", "accountant", "mechanism"),
    "canaries": ("m", "m_test", "n_in", "n_out", "inclusion", "type", "added_slots", "membership_commitment",
                 "score", "membership_sealed"),
    "guessing": ("k_plus", "k_minus", "selection", "n_hypotheses", "split_frac", "tie_break", "preregistration"),
    "power": POWER_KEYS,
    "diagnostics": ("realized_inclusions_logged", "never_sampled_in_canaries", "constant_reward_canary_groups_frac",
                    "auroc"),
    "randomness": ("membership", "audit_release", "note"),
}
RESULT_COMMON = ("guesses", "correct", "precision", "confidence", "significance", "p_value_at_nominal",
                 "rejects_nominal", "search_capped")
# The second bound of a Steinke one-run report (audits.statistics.both_bounds): result[FDP_BLOCK], these keys.
FDP_BLOCK = "fdp_claim_curve"
FDP_BLOCK_KEYS = ("method", "eps_lower", "assumption", "noise_scale", "rejects_nominal", "search_capped")
HEADLINES = {
    "steinke_one_run": ("eps_lower", "p_value_at_nominal", "rejects_nominal"),
    "clopper_pearson": ("eps_lower",),
    "blackbox_pair": ("eps_lower",),
    "gdp_rates": ("mu_lower", "eps_estimate_gdp_family", "extra_assumptions"),
    "fdp_one_run": ("mu_lower", "eps_estimate_gdp_family", "extra_assumptions"),
    "fdp_claim_curve": ("eps_lower", "eps_lower_steinke", "rejects_nominal", "extra_assumptions"),
}


@dataclass(frozen=True)
class AuditReport:
    """One audit's outcome in the `privcheck.audit/1` layout (see `to_json`)."""

    method: str
    claim: Mapping[str, Any]
    canaries: Mapping[str, Any]
    guessing: Mapping[str, Any]
    result: Mapping[str, Any]
    power: Mapping[str, Any]
    assumptions: tuple[str, ...]
    extra_assumptions: tuple[str, ...]
    diagnostics: Mapping[str, Any]
    software: Mapping[str, Any]
    randomness: Mapping[str, Any]

    def __post_init__(self):
        for name in ("claim", "canaries", "guessing", "result", "power", "diagnostics", "software", "randomness"):
            object.__setattr__(self, name, freeze(getattr(self, name), strict=True))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))
        object.__setattr__(self, "extra_assumptions", tuple(self.extra_assumptions))
        if self.method not in METHODS:
            raise ValueError(f"unknown audit method {self.method!r}")
        for section, keys in SECTION_KEYS.items():
            missing = [k for k in keys if k not in getattr(self, section)]
            if missing:
                raise ValueError(f"audit report section {section!r} lacks {missing}")
        missing = [k for k in RESULT_COMMON if k not in self.result]
        if missing:
            raise ValueError(f"audit report result lacks {missing}")
        for key in ("eps_ceiling", "planned_eps_lower"):
            if self.power[key] is None:
                raise ValueError(f"power.{key} must always be filled")
        if "underpowered" not in self.power:        # the one definition: audits.statistics.power.assess over the block
            object.__setattr__(self, "power", freeze({**thaw(self.power), **self._verdict()}, strict=True))
        if self.method in GDP_METHODS:   # never an (ε, δ) lower bound, never a rejection (module docstring)
            if "eps_lower" in self.result or GAUSSIAN_TRADEOFF not in self.extra_assumptions:
                raise ValueError("GDP-family reports carry mu_lower / eps_estimate_gdp_family and the "
                                 "gaussian_tradeoff assumption, never eps_lower")
            if self.result["rejects_nominal"] is not None or self.result["p_value_at_nominal"] is not None:
                raise ValueError("GDP-family reports never reject an (ε, δ) claim")
            if "mu_lower" not in self.result or "eps_estimate_gdp_family" not in self.result:
                raise ValueError("GDP-family reports carry mu_lower and eps_estimate_gdp_family")
        elif "eps_lower" not in self.result:
            raise ValueError(f"{self.method} reports carry result.eps_lower")
        if self.method == "fdp_claim_curve" and (
                "eps_lower_steinke" not in self.result
                or not any(a.startswith("claim_family:") for a in self.extra_assumptions)):
            raise ValueError("fdp_claim_curve reports carry eps_lower_steinke and a claim_family:<event> assumption")
        if FDP_BLOCK in self.result:
            self._check_fdp_block(self.result[FDP_BLOCK])

    def _check_fdp_block(self, block) -> None:
        """The second bound of a Steinke report (module docstring): its keys, method and assumption."""
        if self.method != "steinke_one_run" or not isinstance(block, Mapping) or set(block) != set(FDP_BLOCK_KEYS):
            raise ValueError(f"result.{FDP_BLOCK} belongs to steinke_one_run reports, with keys {FDP_BLOCK_KEYS}")
        if block["method"] != FDP_BLOCK or not (isinstance(block["assumption"], str)
                                                and block["assumption"].startswith("claim_family:")):
            raise ValueError(f"result.{FDP_BLOCK} is method {FDP_BLOCK} under a claim_family:<event> assumption")

    def _verdict(self) -> dict:
        from audits.statistics.power import assess
        eps = self.claim["epsilon"] if self.method not in GDP_METHODS else None
        one_run = self.method in ("steinke_one_run", "fdp_claim_curve")
        level = self.result["significance"] / self.guessing["n_hypotheses"]
        return assess(thaw(self.power), eps_claim=eps, delta=self.claim["delta"] if one_run else None,
                      confidence=1.0 - level, m=self.canaries["m_test"] if one_run else None).fields()

    @property
    def underpowered(self) -> bool | None:
        """The plan's verdict (`power.underpowered`): True when the plan cannot reach its fraction of the claim."""
        return self.power["underpowered"]

    @property
    def warning(self) -> str | None:
        """The "UNDERPOWERED: ..." line when underpowered (the first line of the CLI's table), else None."""
        return self.power["plan_note"] if self.power["underpowered"] else None

    def to_json(self) -> dict:
        """The `privcheck.audit/1` object (plain dicts and lists, JSON-ready; no NaN or infinity)."""
        return {"schema": SCHEMA_ID, "method": self.method, "claim": thaw(self.claim),
                "canaries": thaw(self.canaries), "guessing": thaw(self.guessing), "result": thaw(self.result),
                "power": thaw(self.power), "assumptions": list(self.assumptions),
                "extra_assumptions": list(self.extra_assumptions), "diagnostics": thaw(self.diagnostics),
                "software": thaw(self.software), "randomness": thaw(self.randomness)}

    def headline(self) -> dict:
        """The command's headline keys (`HEADLINES`), copied from the report for the CLI's top level."""
        out = {}
        for key in HEADLINES[self.method]:
            out[key] = list(self.extra_assumptions) if key == "extra_assumptions" else thaw(self.result[key])
        if FDP_BLOCK in self.result:            # the second bound travels with its assumption
            out[FDP_BLOCK] = thaw(self.result[FDP_BLOCK])
        return out

    @property
    def bound(self) -> float:
        """The method's headline number: eps_lower, or mu_lower for GDP-family methods."""
        return self.result["mu_lower" if self.method in GDP_METHODS else "eps_lower"]


# ---------------------------------------------------------------------------------------------------------------------
# Building blocks used by the audit methods.


def software() -> dict:
    versions = library_versions()            # cached: reading package metadata costs milliseconds
    return {name: versions[name] for name in ("privcheck", "scipy", "numpy")}


def claim_block(eps_nominal: float | None, delta: float, claim: Mapping | None) -> dict:
    """Claim section; the caller's optional `claim` mapping may set neighboring, accountant, mechanism."""
    extra = _known("claim", claim, ("neighboring", "accountant", "mechanism"))
    neighboring = NeighboringRelation.coerce(extra.get("neighboring", "add_remove"), "claim.neighboring").value
    accountant = extra.get("accountant")
    if accountant is not None and accountant not in ("pld", "rdp", "analytic", "ex_post"):
        raise InvalidParameter("claim.accountant", accountant, "one of pld, rdp, analytic, ex_post, or None")
    mechanism = extra.get("mechanism") or {"name": None, "params": {}}
    if not isinstance(mechanism, Mapping):
        raise InvalidParameter("claim.mechanism", mechanism, "a mapping {'name': str, 'params': mapping}")
    mechanism = {"name": mechanism.get("name"), "params": dict(mechanism.get("params") or {})}
    return {"epsilon": eps_nominal, "delta": delta, "neighboring": neighboring, "accountant": accountant,
            "mechanism": mechanism}


def canaries_block(*, m: int, m_test: int, n_in: int | None, n_out: int | None, inclusion: str,
                   overrides: Mapping | None, commitment: str | None = None, sealed: bool = False) -> dict:
    extra = _known("canaries", overrides, ("type", "added_slots", "membership_commitment", "score"))
    block = {"m": m, "m_test": m_test, "n_in": n_in, "n_out": n_out, "inclusion": inclusion,
             "type": extra.get("type"), "added_slots": extra.get("added_slots"),
             "membership_commitment": commitment or extra.get("membership_commitment"), "score": extra.get("score"),
             "membership_sealed": sealed}
    mc = block["membership_commitment"]
    if mc is not None and not (isinstance(mc, str) and mc.startswith("sha256:") and len(mc) == 71):
        raise InvalidParameter("canaries.membership_commitment", mc, "'sha256:<64 hex digits>' or None")
    return block


def guessing_block(*, k_plus=None, k_minus=None, selection=None, n_hypotheses=1, split_frac=None, tie_break=None,
                   preregistration=None) -> dict:
    return {"k_plus": k_plus, "k_minus": k_minus, "selection": selection, "n_hypotheses": n_hypotheses,
            "split_frac": split_frac, "tie_break": tie_break, "preregistration": preregistration}


def diagnostics_block(diagnostics: Mapping | None, **computed) -> dict:
    """Diagnostics: never used in the test. Extra keys (e.g. point estimates) are allowed here only."""
    block = {"realized_inclusions_logged": False, "never_sampled_in_canaries": None,
             "constant_reward_canary_groups_frac": None, "auroc": None}
    block.update(computed)
    if diagnostics is not None:
        if not isinstance(diagnostics, Mapping):
            raise InvalidParameter("diagnostics", diagnostics, "a mapping")
        block.update({str(k): val for k, val in diagnostics.items()})
    return block


def randomness_block(membership: str, audit_release: bool | None) -> dict:
    notes = {"os_entropy": "membership drawn from OS entropy by audits.canary.draw_membership",
             "seeded": "seeded membership: a test, not an audit release",
             "external": "membership supplied by the caller (counts or labels); its independence is an assumption",
             "not_applicable": "multi-run audit: runs with and without the canary are fixed in advance"}
    return {"membership": membership, "audit_release": audit_release, "note": notes[membership]}


def power_block(power, *, eps_ceiling: float, min_correct: int | None) -> dict:
    """Fill the power block from an optional power-analysis dict, or an object with `power_block()` (such as
    `audits.statistics.power.PowerReport`) or `to_json()`.

    Without one, the plan is the ceiling (score model "perfect"). A mapping may only use the keys of
    `POWER_KEYS` (typos are errors); from an object's `to_json()` the known keys are taken.
    """
    block = {"eps_ceiling": eps_ceiling, "min_correct_for_nominal": min_correct, "planned_eps_lower": eps_ceiling,
             "mc_median": None, "mc_p10": None, "mc_p90": None, "prob_zero": None, "score_model": "perfect"}
    if power is None:
        return block
    if not isinstance(power, Mapping) and callable(getattr(power, "power_block", None)):
        power = power.power_block()          # audits.statistics.power.PowerReport
    if isinstance(power, Mapping):
        unknown = sorted(set(power) - set(POWER_KEYS) - set(VERDICT_KEYS))
        if unknown:
            raise InvalidParameter("power", unknown, "keys among " + ", ".join(POWER_KEYS + VERDICT_KEYS))
        given = dict(power)
    elif callable(getattr(power, "to_json", None)):
        doc = power.to_json()
        given = {k: doc[k] for k in POWER_KEYS + VERDICT_KEYS if k in doc}
    else:
        raise InvalidParameter("power", type(power).__name__, "a mapping with the keys of POWER_KEYS, or None")
    block["score_model"] = None
    for key, value in given.items():
        if key in ("score_model", "plan_note"):
            if value is not None and not isinstance(value, str):
                raise InvalidParameter(f"power.{key}", value, "a string or None")
        elif key == "underpowered":
            if value is not None and not isinstance(value, bool):
                raise InvalidParameter("power.underpowered", value, "True, False or None")
        elif key == "canaries_needed":
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                      or value < 1):
                raise InvalidParameter("power.canaries_needed", value, "an integer >= 1 or None")
        elif key == "min_correct_for_nominal":
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                      or value < 0):
                raise InvalidParameter("power.min_correct_for_nominal", value, "an integer >= 0 or None")
        elif value is not None:
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
                raise InvalidParameter(f"power.{key}", value, "a finite real number or None")
            if key == "prob_zero" and not 0.0 <= float(value) <= 1.0:
                raise InvalidParameter("power.prob_zero", value, "[0, 1]")
        block[key] = value
    for key in ("eps_ceiling", "planned_eps_lower"):
        if block[key] is None:
            block[key] = eps_ceiling
    return block


def _known(section: str, mapping: Mapping | None, keys: tuple[str, ...]) -> dict:
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise InvalidParameter(section, mapping, "a mapping or None")
    unknown = sorted(set(mapping) - set(keys))
    if unknown:
        raise InvalidParameter(section, unknown, "keys among " + ", ".join(keys))
    return dict(mapping)


# ---------------------------------------------------------------------------------------------------------------------
# Artifact.


def audit_document(report: AuditReport) -> dict:
    """The sealed, schema-valid artifact: the report plus `created_utc` and `sha256` (checked in memory, so a
    caller can print exactly what `write_audit` will write)."""
    from privcheck.artifacts import seal, validate

    if not isinstance(report, AuditReport):
        raise InvalidParameter("report", type(report).__name__, "an AuditReport")
    doc = report.to_json()
    doc["created_utc"] = utc_now("seconds")
    doc = seal(doc)
    validate(doc, name=SCHEMA_FILE)
    return doc


def check_out_dir(out) -> Path:
    """An output directory path (InvalidParameter for an empty path or an existing non-directory)."""
    if out is None or (isinstance(out, str) and not out.strip()):
        raise InvalidParameter("out", out, "a directory path")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InvalidParameter("out", str(out), "a directory (a file exists at this path)")
    return path


def write_audit(report: AuditReport, out_dir, *, document: dict | None = None) -> Path:
    """Write `out_dir/audit.json` through the one artifact writer (`privcheck.artifacts.write_artifact`: sealed,
    validated, atomic); returns its path.

    `document`: the already sealed `audit_document(report)` (so a caller can print exactly what was written).
    """
    from privcheck.artifacts import verify_seal, write_artifact

    path = check_out_dir(out_dir)
    if document is None:
        document = audit_document(report)
    elif not (isinstance(document, dict) and verify_seal(document)
              and {k: v for k, v in document.items() if k not in ("created_utc", "sha256")} == report.to_json()):
        raise InvalidParameter("document", "mismatch", "audit_document(report) for this report")
    write_artifact(path / ARTIFACT, document, schema=SCHEMA_FILE)
    return path / ARTIFACT
