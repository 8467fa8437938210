"""The audit report and its artifact (docs/audits.md, "The audit report"): fields, immutability, power block,
schema, writing."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from audits.statistics.clopper_pearson import clopper_pearson
from audits.statistics.gdp import fdp_one_run, from_rates
from audits.statistics.one_run import from_counts
from audits.statistics.report import ARTIFACT, AuditReport, audit_document, power_block, write_audit
from privcheck.artifacts.schema import load_schema, validate
from privcheck.artifacts.writer import verify_seal
from privcheck.errors import InvalidParameter

SPEC_FIELDS = {
    "claim": {"epsilon", "delta", "neighboring", "accountant", "mechanism"},
    "canaries": {"m", "m_test", "n_in", "n_out", "inclusion", "type", "added_slots", "membership_commitment", "score"},
    "guessing": {"k_plus", "k_minus", "selection", "n_hypotheses", "split_frac", "tie_break"},
    "result": {"guesses", "correct", "precision", "confidence", "significance", "p_value_at_nominal",
               "rejects_nominal", "search_capped"},
    "power": {"eps_ceiling", "min_correct_for_nominal", "planned_eps_lower", "mc_median", "mc_p10", "mc_p90",
              "prob_zero", "score_model"},
    "diagnostics": {"realized_inclusions_logged", "never_sampled_in_canaries", "constant_reward_canary_groups_frac",
                    "auroc"},
}
TOP = {"schema", "method", "claim", "canaries", "guessing", "result", "power", "assumptions", "extra_assumptions",
       "diagnostics", "software"}

REPORTS = {
    "one_run": lambda: from_counts(1000, 100, 90, delta=1e-5, eps_nominal=1.0),
    "clopper_pearson": lambda: clopper_pearson(3, 800, 9, 800, delta=1e-5),
    "gdp_rates": lambda: from_rates(3, 800, 9, 800, delta=1e-5),
    "fdp_one_run": lambda: fdp_one_run(1000, 100, 95, delta=1e-5),
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_spec_field_is_present_and_schema_valid(name):
    doc = REPORTS[name]().to_json()
    assert TOP <= set(doc) and doc["schema"] == "privcheck.audit/1"
    for section, fields in SPEC_FIELDS.items():
        assert fields <= set(doc[section]), (section, fields - set(doc[section]))
    assert {"privcheck", "scipy"} <= set(doc["software"])
    assert doc["power"]["eps_ceiling"] is not None and doc["power"]["planned_eps_lower"] is not None
    validate(doc, name="audit.schema.json")
    json.dumps(doc, allow_nan=False)


def test_clopper_pearson_extras():
    res = REPORTS["clopper_pearson"]().to_json()["result"]
    assert {"fp", "fn", "n_in", "n_out", "fpr_up", "fnr_up", "direction", "eps_lower"} <= set(res)


def test_schema_rejects_gdp_document_with_eps_lower_and_one_run_without():
    gdp_doc = REPORTS["fdp_one_run"]().to_json()
    gdp_doc["result"]["eps_lower"] = 1.0
    with pytest.raises(jsonschema.ValidationError):
        validate(gdp_doc, name="audit.schema.json")
    gdp_doc = REPORTS["fdp_one_run"]().to_json()
    gdp_doc["eps_lower"] = 1.0                                 # not even as a headline key
    with pytest.raises(jsonschema.ValidationError):
        validate(gdp_doc, name="audit.schema.json")
    one = REPORTS["one_run"]().to_json()
    del one["result"]["eps_lower"]
    with pytest.raises(jsonschema.ValidationError):
        validate(one, name="audit.schema.json")
    seeded = REPORTS["one_run"]().to_json()
    seeded["randomness"].update(membership="seeded", audit_release=True)
    with pytest.raises(jsonschema.ValidationError):
        validate(seeded, name="audit.schema.json")


def test_schema_is_draft_2020_12_and_self_valid():
    schema = load_schema("audit.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "privcheck.audit/1"


def test_report_is_frozen():
    rep = REPORTS["one_run"]()
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.method = "clopper_pearson"
    with pytest.raises(TypeError):
        rep.result["eps_lower"] = 99.0
    with pytest.raises(TypeError):
        rep.claim["mechanism"]["name"] = "x"
    assert isinstance(rep.assumptions, tuple)


def test_power_block_defaults_and_supplied_plan():
    block = power_block(None, eps_ceiling=5.0, min_correct=80)
    assert block["planned_eps_lower"] == 5.0 == block["eps_ceiling"] and block["score_model"] == "perfect"
    assert block["mc_median"] is None
    plan = {"eps_ceiling": 5.77, "min_correct_for_nominal": None, "planned_eps_lower": 1.2, "mc_median": 1.1,
            "mc_p10": 0.4, "mc_p90": 1.6, "prob_zero": 0.03, "score_model": "gdp(2.0)"}
    rep = from_counts(1000, 100, 90, delta=1e-5, power=plan)
    verdict = {"underpowered": None, "underpowered_fraction": 0.5, "canaries_needed": None,
               "plan_note": "no plan verdict: no ε claim to compare with"}      # no claim ε: nothing to compare
    assert dict(rep.power) == {**plan, **verdict}
    partial = from_counts(1000, 100, 90, delta=1e-5, power={"mc_median": 0.7, "score_model": "empirical"})
    assert partial.power["eps_ceiling"] == pytest.approx(5.7823, abs=1e-4)
    assert partial.power["planned_eps_lower"] == partial.power["eps_ceiling"] and partial.power["mc_median"] == 0.7


def test_power_from_object_with_to_json():
    class PowerReport:
        def to_json(self):
            return {"eps_ceiling": 5.0, "planned_eps_lower": 1.0, "guesses": 120, "score_model": "perfect"}

    rep = from_counts(1000, 100, 90, delta=1e-5, power=PowerReport())
    assert rep.power["planned_eps_lower"] == 1.0 and "guesses" not in rep.power


@pytest.mark.parametrize("power", [{"eps_celing": 1.0}, {"prob_zero": 1.5}, {"mc_median": float("nan")},
                                   {"min_correct_for_nominal": 2.5}, [1, 2]])
def test_bad_power_dict(power):
    with pytest.raises(InvalidParameter):
        from_counts(1000, 100, 90, delta=1e-5, power=power)


def test_claim_and_canary_context():
    rep = from_counts(1000, 100, 90, delta=1 / 69880, eps_nominal=5.04,
                      claim={"accountant": "pld", "mechanism": {"name": "dp_grpo", "params": {"q": 128 / 6988}}},
                      canaries={"type": "gradient_dirac", "added_slots": True, "score": "whitebox_step_llr"})
    assert rep.claim["accountant"] == "pld" and rep.claim["mechanism"]["name"] == "dp_grpo"
    assert rep.canaries["type"] == "gradient_dirac" and rep.canaries["added_slots"] is True
    for bad in ({"accountant": "moments"}, {"neighboring": "swap"}, {"epsilon": 3.0}):
        with pytest.raises(InvalidParameter):
            from_counts(1000, 100, 90, delta=1e-5, claim=bad)
    with pytest.raises(InvalidParameter):
        from_counts(1000, 100, 90, delta=1e-5, canaries={"membership_commitment": "md5:abc"})


def test_write_audit_is_sealed_valid_and_atomic(tmp_path):
    rep = REPORTS["one_run"]()
    path = write_audit(rep, tmp_path / "out")
    assert path.name == ARTIFACT
    doc = json.loads(path.read_text())
    assert verify_seal(doc)
    validate(doc, name="audit.schema.json")
    assert {k: v for k, v in doc.items() if k not in ("created_utc", "sha256")} == rep.to_json()
    assert [p.name for p in path.parent.iterdir()] == [ARTIFACT]            # no temporary files left


def test_write_audit_refuses_a_file_path_and_a_foreign_document(tmp_path):
    rep = REPORTS["one_run"]()
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(InvalidParameter):
        write_audit(rep, target)
    other = audit_document(REPORTS["clopper_pearson"]())
    with pytest.raises(InvalidParameter):
        write_audit(rep, tmp_path / "d", document=other)
    assert not (tmp_path / "d").exists()


def test_audit_report_constructor_requires_every_section():
    doc = REPORTS["one_run"]().to_json()
    fields = {k: doc[k] for k in ("method", "claim", "canaries", "guessing", "result", "power", "assumptions",
                                  "extra_assumptions", "diagnostics", "software", "randomness")}
    AuditReport(**fields)
    broken = dict(fields, power={k: v for k, v in doc["power"].items() if k != "mc_p10"})
    with pytest.raises(ValueError):
        AuditReport(**broken)
    with pytest.raises(ValueError):
        AuditReport(**dict(fields, power=dict(doc["power"], eps_ceiling=None)))
    with pytest.raises(ValueError):
        AuditReport(**dict(fields, method="bootstrap"))
