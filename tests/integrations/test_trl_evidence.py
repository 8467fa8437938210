"""Verification evidence bound to the TRL run it is saved with (`DPGRPOTrainer.save_run_artifact`, docs/artifacts.md,
"Run identity"): another trainer's results are refused by name, stale ones too, a partial suite is no release, and
`privcheck report` refuses an artifact whose binding was edited."""

from __future__ import annotations

import json

import peft  # noqa: F401 - installed by `make test` (the train extra): never a silent skip
import pytest
import trl  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip

from privcheck.artifacts.identity import ForeignVerification, StaleVerification, UnboundVerification
from privcheck.artifacts.seal import seal
from privcheck.checks.catalogue import CHECKS, run_suite
from privcheck.cli import main
from tests.integrations.test_trl import FAST_CHECKS
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHEAP = ["clip_contract", "accountant_agreement"]          # enough to stamp results, in well under a second


def _dp_args(tmp_path, **overrides):
    """The settings of tests/integrations/test_trl.py: q 0.5, σ 1, T 2, δ 1/(10·6), seed 0."""
    from mechanisms.dpgrpo.trl import DPGRPOTrainerConfig

    kw = dict(output_dir=str(tmp_path), num_generations=4, max_completion_length=4, learning_rate=1e-2,
              bf16=False, report_to=[], gradient_checkpointing=False, dp_clip_norm=1.0, dp_noise_multiplier=1.0,
              dp_sampling_rate=0.5, dp_steps=2, dp_seed=0, dp_num_records=6)
    kw.update(overrides)
    return DPGRPOTrainerConfig(**kw)


def _lora():
    from peft import LoraConfig

    return LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True)


def _trainer(tmp_path, *, eval_dataset=None, **overrides):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    return DPGRPOTrainer(tiny_model(), digit_reward, args=_dp_args(tmp_path, **overrides),
                         train_dataset=addition_dataset(), eval_dataset=eval_dataset,
                         processing_class=tiny_tokenizer(), peft_config=_lora())


def test_check_mode_trainers_results_are_refused_for_the_real_run(tmp_path):
    """The reported misuse: a hand-built check-mode trainer (q = 0.5, σ = 1, T = 2, δ = 1/60, seeded) verified,
    its results offered for the real run (q = 0.25, σ = 1.5, T = 3, δ = 1e-3, OS entropy): refused, naming q, σ,
    T and δ with both values, and nothing written."""
    real = _trainer(tmp_path / "real", dp_sampling_rate=0.25, dp_noise_multiplier=1.5, dp_steps=3, dp_delta=1e-3,
                    dp_seed=None)
    check = _trainer(tmp_path / "check")                   # _dp_args: q 0.5, σ 1, T 2, δ 1/(10·6), seed 0
    results = run_suite(check.privcheck_bindings(seeds=2), checks=CHEAP)
    assert all(r.status == "pass" for r in results)
    with pytest.raises(ForeignVerification) as err:
        real.save_run_artifact(tmp_path / "out", verification=results)
    diffs = {d.field: (d.real, d.checked) for d in err.value.differences}
    assert diffs["plan.sampling_rate"] == (0.25, 0.5)
    assert diffs["plan.noise_multiplier"] == (1.5, 1.0)
    assert diffs["plan.steps"] == (3, 2)
    assert diffs["plan.delta"] == (1e-3, 1 / 60)
    assert err.value.name == "verification" and "(q)" in str(err.value) and "(δ)" in str(err.value)
    assert not (tmp_path / "out").exists()
    # a mapping of the results (what the docs example builds) is refused alike
    with pytest.raises(ForeignVerification):
        real.save_run_artifact(tmp_path / "out", verification={r.name: r for r in results})


def test_unbound_results_are_refused(tmp_path):
    from privcheck.integrations.trl import bindings_for

    trainer = _trainer(tmp_path)
    results = run_suite(bindings_for(trainer), checks=CHEAP)       # bindings without the trainer's identity
    with pytest.raises(UnboundVerification):
        trainer.save_run_artifact(tmp_path / "out", verification=results)
    assert not (tmp_path / "out").exists()


def test_stale_results_are_refused(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path)
    results = run_suite(trainer.privcheck_bindings(seeds=2), checks=CHEAP)
    with monkeypatch.context() as mp:              # a newer privcheck writes the artifact
        mp.setattr("privcheck.artifacts.identity.privcheck_version", lambda: "99.0")
        with pytest.raises(StaleVerification) as err:
            trainer.save_run_artifact(tmp_path / "out", verification=results)
    assert (err.value.field, err.value.trained, err.value.verified) == ("privcheck_version", "99.0", "0.1.0")
    trainer.args.learning_rate = 0.5               # the run's configuration changed after verification
    with pytest.raises(StaleVerification) as err:
        trainer.save_run_artifact(tmp_path / "out", verification=results)
    assert (err.value.field, err.value.trained, err.value.verified) == ("config.args.learning_rate", 0.5, 1e-2)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def partial_release(tmp_path_factory):
    """An OS-entropy run verified by the fast checks only: bound, but partial."""
    tmp = tmp_path_factory.mktemp("partial")
    trainer = _trainer(tmp / "tr", eval_dataset=addition_dataset(2, seed=9), dp_seed=None)
    trainer.train()
    results = run_suite(trainer.privcheck_bindings(seeds=2), checks=list(FAST_CHECKS))
    doc = trainer.save_run_artifact(tmp / "run", verification=results)
    return trainer, doc, tmp / "run"


def test_partial_verification_is_recorded_not_released(partial_release):
    trainer, doc, _ = partial_release
    ident = doc["identity"]
    assert doc["privacy_release"] is False and doc["verification"]["status"] == "pass"
    assert ident["bound"] is True and ident["verified"]["digest"] == ident["trained"]["digest"]
    missing = [n for n in CHECKS if n not in FAST_CHECKS]
    assert ident["missing_checks"] == missing
    assert any(b.startswith("verification partial") and "loss_reference" in b for b in doc["release_blockers"])
    assert ident["check_mode_differences"] == [{"field": "config.dp.randomness", "real": "os_entropy",
                                                "checked": "seeded per check (check items and fresh copies)"}]
    assert ident["trained"]["plan"]["sampling_rate"] == 0.5 and ident["trained"]["config"]["args"]["dp_seed"] is None


def _edit(run_dir, mutate):
    (path,) = run_dir.glob("run-*.json")
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(seal({k: v for k, v in doc.items() if k != "sha256"})))


def test_report_checks_the_binding(partial_release, tmp_path, capsys):
    import shutil

    _, _, run_dir = partial_release
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    capsys.readouterr()

    # the verified identity of another plan, its digest recomputed and the file re-sealed: still caught
    from privcheck.artifacts.identity import RunIdentity

    def foreign(doc):
        v = dict(doc["identity"]["verified"])
        v["plan"] = {**v["plan"], "sampling_rate": 0.9}
        doc["identity"]["verified"] = RunIdentity.from_json(v).to_json()

    for name, mutate in (("foreign", foreign),
                         ("missing", lambda d: d["identity"].update(verified=None)),
                         ("digest", lambda d: d["identity"]["trained"].update(digest="0" * 64))):
        edited = shutil.copytree(run_dir, tmp_path / name)
        _edit(edited, mutate)
        code = main(["report", str(edited)])
        out = capsys.readouterr().out
        assert code == 1, name
        assert out.splitlines()[0].startswith("WARNING: ") and "does not check out" in out.splitlines()[0], name
        if name == "foreign":
            assert "plan.sampling_rate (q): trained 0.5, verified 0.9" in out
        if name == "missing":
            assert "no verified identity" in out


@pytest.mark.slow   # the whole suite on the trainer (~1–2 min on 2 cores)
def test_matching_verification_is_a_release(tmp_path, capsys):
    trainer = _trainer(tmp_path / "tr", eval_dataset=addition_dataset(2, seed=9), dp_seed=None)
    trainer.train()
    results = run_suite(trainer.privcheck_bindings(seeds=2))
    doc = trainer.save_run_artifact(tmp_path / "run", verification=results)
    assert doc["release_blockers"] == [] and doc["privacy_release"] is True
    assert doc["identity"]["bound"] is True and doc["identity"]["missing_checks"] == []
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
