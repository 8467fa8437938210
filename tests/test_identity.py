"""Run identity and the binding of verification evidence (privcheck/artifacts/identity.py, docs/artifacts.md)."""

from __future__ import annotations

import hashlib
import json

import pytest

from privcheck.artifacts.identity import (
    Difference,
    ForeignVerification,
    RunIdentity,
    StaleVerification,
    Subject,
    UnboundVerification,
    bind_verification,
    check_mode_differences,
)
from privcheck.checks.catalogue import run_suite
from privcheck.checks.common import SuiteBindings
from privcheck.errors import InvalidParameter

PLAN = {"records": 60, "sampling_rate": 0.25, "noise_multiplier": 1.5, "clip_norm": 1.0, "steps": 3, "delta": 1e-3,
        "canaries": 0, "relation": "add_remove", "target_epsilon": None}


def _identity(**changes) -> RunIdentity:
    parts = dict(trainer="pkg.Trainer", plan=PLAN, config={"dp": {"lr": 0.01, "randomness": "os_entropy"}},
                 model={"n_layer": 2}, peft={"default": {"r": 2}}, privcheck_version="0.1.0")
    parts.update(changes)
    return RunIdentity(**parts)


def test_digest_is_the_sha256_of_the_sorted_compact_json():
    ident = _identity()
    # written out by hand: sorted keys, compact separators, UTF-8
    text = ('{"config":{"dp":{"lr":0.01,"randomness":"os_entropy"}},"model":{"n_layer":2},'
            '"peft":{"default":{"r":2}},"plan":{"canaries":0,"clip_norm":1.0,"delta":0.001,"noise_multiplier":1.5,'
            '"records":60,"relation":"add_remove","sampling_rate":0.25,"steps":3,"target_epsilon":null},'
            '"privcheck_version":"0.1.0","trainer":"pkg.Trainer"}')
    assert ident.digest == hashlib.sha256(text.encode()).hexdigest()
    assert ident.to_json()["model_sha256"] == hashlib.sha256(b'{"n_layer":2}').hexdigest()
    assert RunIdentity.from_json(json.loads(json.dumps(ident.to_json()))) == ident


def test_sets_and_tuples_hash_like_sorted_lists():
    a = _identity(peft={"default": {"target_modules": {"c_proj", "c_attn"}}})
    b = _identity(peft={"default": {"target_modules": ["c_attn", "c_proj"]}})
    assert a.digest == b.digest


def test_check_mode_differences_are_listed_and_limited_to_the_allow_list():
    real = _identity()
    checked = _identity(config={"dp": {"lr": 0.01, "randomness": 0}}, plan={**PLAN, "steps": 1})
    diffs = check_mode_differences(real, checked, allowed=("config.dp.randomness", "plan.steps"))
    assert diffs == [Difference("plan.steps", 3, 1), Difference("config.dp.randomness", "os_entropy", 0)]
    with pytest.raises(ForeignVerification) as err:
        check_mode_differences(real, checked, allowed=("config.dp.randomness",))
    assert (err.value.field, err.value.trained, err.value.verified) == ("plan.steps", 3, 1)
    with pytest.raises(ForeignVerification) as err:     # another class is never a check mode
        check_mode_differences(real, _identity(trainer="pkg.Other"), allowed=("trainer",))
    assert err.value.field == "trainer"
    with pytest.raises(InvalidParameter) as err:
        check_mode_differences(real, checked, allowed="plan")
    assert err.value.name == "allowed"


def _results(subject, checks=("clip_contract", "poisson_sampling"), **bind):
    # nothing bound: the checks are skipped for their missing bindings, quickly, and stamped with the subject
    return run_suite(SuiteBindings(subject=subject, **bind), checks=list(checks))


def test_run_suite_stamps_every_result_with_the_subject():
    subject = Subject(_identity(), token="t1")
    results = _results(subject)
    assert [r.verified.identity for r in results] == [subject.identity] * 2
    assert all(r.verified.token == "t1" for r in results)
    assert all(r.verified is None for r in _results(None))
    with pytest.raises(InvalidParameter) as err:       # refused before any check runs
        run_suite(SuiteBindings(subject="not a subject"), checks=["clip_contract"])
    assert err.value.name == "subject"


def test_foreign_results_are_refused_naming_q_sigma_T_delta():
    trained = _identity()
    checked = _identity(plan={**PLAN, "sampling_rate": 0.5, "noise_multiplier": 1.0, "steps": 2, "delta": 1 / 60})
    with pytest.raises(ForeignVerification) as err:
        bind_verification(trained, _results(Subject(checked, token="other")), required=(), token="mine")
    fields = {d.field: (d.real, d.checked) for d in err.value.differences}
    assert fields == {"plan.sampling_rate": (0.25, 0.5), "plan.noise_multiplier": (1.5, 1.0), "plan.steps": (3, 2),
                      "plan.delta": (1e-3, 1 / 60)}
    for symbol in ("(q)", "(σ)", "(T)", "(δ)"):
        assert symbol in str(err.value)
    assert err.value.name == "verification"


def test_declared_check_mode_differences_bind_and_are_listed():
    trained = _identity()
    checked = _identity(config={"dp": {"lr": 0.01, "randomness": 3}})
    diffs = check_mode_differences(trained, checked, allowed=("config.dp.randomness",))
    binding = bind_verification(trained, _results(Subject(checked, diffs)), required=())
    assert binding.differences == (Difference("config.dp.randomness", "os_entropy", 3),)
    assert binding.to_json()["check_mode_differences"] == [
        {"field": "config.dp.randomness", "real": "os_entropy", "checked": 3}]
    # a declaration with another value does not cover the difference
    wrong = (Difference("config.dp.randomness", "os_entropy", 4),)
    with pytest.raises(ForeignVerification):
        bind_verification(trained, _results(Subject(checked, wrong)), required=())


def test_stale_results_are_refused():
    trained = _identity()
    with pytest.raises(StaleVerification) as err:
        bind_verification(trained, _results(Subject(_identity(privcheck_version="0.0.9"))), required=())
    assert (err.value.field, err.value.trained, err.value.verified) == ("privcheck_version", "0.1.0", "0.0.9")
    # the same trainer (token) verified under another configuration: it changed after verification
    before = _identity(config={"dp": {"lr": 0.5, "randomness": "os_entropy"}})
    with pytest.raises(StaleVerification) as err:
        bind_verification(trained, _results(Subject(before, token="t")), required=(), token="t")
    assert (err.value.field, err.value.trained, err.value.verified) == ("config.dp.lr", 0.01, 0.5)


def test_partial_and_unbound_results():
    trained = _identity()
    binding = bind_verification(trained, _results(Subject(trained), checks=("clip_contract",)),
                                required=("clip_contract", "noise_calibration"))
    # clip_contract ran but was skipped for its missing bindings; noise_calibration did not run
    assert binding.missing == ("clip_contract", "noise_calibration") and not binding.complete
    assert "verification partial" in binding.blockers()[0]
    declared = _results(Subject(trained), checks=("clip_contract",), not_applicable={"clip_contract": "no clip"})
    assert bind_verification(trained, declared, required=("clip_contract",)).complete
    with pytest.raises(UnboundVerification):
        bind_verification(trained, _results(None), required=())
    with pytest.raises(UnboundVerification):
        bind_verification(trained, [], required=())
    mixed = _results(Subject(trained)) + _results(Subject(_identity(model={"n_layer": 3})))
    with pytest.raises(ForeignVerification) as err:
        bind_verification(trained, mixed, required=())
    assert err.value.field == "model.n_layer"
