"""DP-GRPO inside TRL (`mechanisms.dpgrpo.trl`) and privcheck's TRL bindings (`privcheck.integrations.trl`) on a
tiny GPT-2 built from a config with an in-memory character tokenizer (docs/integrations/trl.md).

One module, one trl import (~10 s); the trainers are module-scoped. The full suite on the docs example runs in the
slow tier.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import peft  # noqa: F401 - installed by `make test` (the train extra): never a silent skip
import pytest
import torch
import trl  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip

from privcheck.errors import InvalidParameter
from tests.integrations.trl_tiny import (
    addition_dataset,
    answer_logprob,
    digit_reward,
    tiny_model,
    tiny_tokenizer,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "trl.md"
# the checks the fast tier runs on the docs example (the whole-step sensitivity, public-output and Poisson checks,
# tens of seconds each, run in the slow tier)
FAST_CHECKS = ("clip_contract", "poisson_sampling", "record_isolation", "noise_calibration", "fresh_randomness",
               "accountant_agreement", "step_noise", "step_record_isolation")


BOUND_CHECKS = FAST_CHECKS + ("step_sensitivity", "step_public_outputs", "step_poisson_sampling",
                              "sensitivity_add_remove", "public_normalisation", "loss_reference",
                              "run_sensitivity", "run_public_outputs", "run_noise", "run_poisson_sampling")
# the checks that do not apply to the docs example's DPGRPOTrainer (β = 0, no chunking, no σ = 0 / C = ∞ step):
# skipped with the reason (docs/integrations/trl.md, "Binding contract")
NOT_APPLICABLE = ("constant_reward_groups", "chunk_identity", "nonprivate_equivalence")


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _example() -> str:
    return _python_blocks(DOC.read_text())[0]


def _audit_block() -> str:
    return next(b for b in _python_blocks(DOC.read_text()) if "audit.analyse(" in b)


def _count(block: str) -> int:
    return sum(1 for ln in block.splitlines() if ln.strip())


def _lora():
    from peft import LoraConfig

    return LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True)


def _dp_args(tmp_path, **overrides):
    from mechanisms.dpgrpo.trl import DPGRPOTrainerConfig

    kw = dict(output_dir=str(tmp_path), num_generations=4, max_completion_length=4, learning_rate=1e-2,
              bf16=False, report_to=[], gradient_checkpointing=False, dp_clip_norm=1.0, dp_noise_multiplier=1.0,
              dp_sampling_rate=0.5, dp_steps=2, dp_seed=0,
              dp_num_records=6)
    kw.update(overrides)
    return DPGRPOTrainerConfig(**kw)


def _run_example(workdir, restrict_to=None) -> dict:
    """Execute the docs example as it is, with the user's objects, in `workdir` (its output_dir is relative);
    `restrict_to` limits `run_suite`'s checks."""
    import os

    from privcheck.checks import catalogue

    def run_suite(bindings, precision=None, checks=None):
        return catalogue.run_suite(bindings, precision, checks=list(restrict_to) if restrict_to else checks)

    ns = {"model": tiny_model(), "tokenizer": tiny_tokenizer(), "dataset": addition_dataset(),
          "reward": digit_reward}
    code = _example().replace("from privcheck.checks.catalogue import run_suite\n", "")
    ns["run_suite"] = run_suite
    here = os.getcwd()
    os.chdir(workdir)
    try:
        exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - the documented example, run as the user runs it
        # the example's output_dir is relative: anchor it, since later fresh copies (checks) create it again
        ns["args"].output_dir = os.path.abspath(ns["args"].output_dir)
    finally:
        os.chdir(here)
    return ns


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return _run_example(tmp_path_factory.mktemp("example"), FAST_CHECKS)


def test_examples_are_short_and_counted():
    text = DOC.read_text()
    train, audit = _count(_example()), _count(_audit_block())
    assert train <= 20 and audit <= 20
    assert f"## Train and verify ({train} lines)" in text
    assert f"The block has {audit} non-blank lines" in text
    # the audit's own lines: the block minus its training statements (the trainer's 2 lines and train())
    assert f"## How to audit ({audit - 3} more lines)" in text


def _weak_pilot():
    """A stand-in for the public pilot's scores: 200 normal quantiles, the in-scores shifted by μ = 0.1415
    (AUROC Φ(μ/√2) ≈ 0.54, a weak score as on the tiny model)."""
    import numpy as np
    from scipy.stats import norm

    base = norm.ppf((np.arange(200) + 0.5) / 200)
    return base + 0.1415, base


def test_example_audited(tmp_path, example, monkeypatch, capsys):
    """The docs' audit block, run after the training block: prepare (plan, coins, commitment), canaries in the
    data, scores, audit with the plan's verdict."""
    from datasets import Dataset

    from privcheck.accounting import PoissonGaussianEvent, epsilon

    monkeypatch.chdir(tmp_path)
    tok = tiny_tokenizer()
    canaries = Dataset.from_dict(addition_dataset(24, seed=5).to_dict())
    pilot_in, pilot_out = _weak_pilot()
    ns = dict(example)
    ns.update(model=tiny_model(), tokenizer=tok, canaries=canaries, pilot_in=pilot_in, pilot_out=pilot_out,
              score=lambda model, row: answer_logprob(model, tok, row))
    exec(compile(_audit_block(), str(DOC), "exec"), ns)  # noqa: S102 - the documented example
    report, trainer, audit = ns["report"], ns["trainer"], ns["audit"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == audit.verdict.line and printed[-1].startswith("UNDERPOWERED: ")
    assert trainer.dp_config.n == 6 + 24 and trainer.t == 2
    assert len(trainer.train_dataset) == 6 + int(ns["present"].sum())
    assert (tmp_path / "scores.csv").stat().st_mode & 0o777 == 0o600
    # the plan's claim is the trainer's: its δ, and its ε from the event (q = 0.5, σ = 1, T = 2) by the accountant
    assert audit.delta == trainer.plan.delta
    assert audit.epsilon == pytest.approx(trainer.privacy_claim["epsilon"], rel=1e-9)
    assert audit.epsilon == epsilon(PoissonGaussianEvent(0.5, 1.0, 2), 1 / 300).value
    assert report.canaries["membership_commitment"] == audit.commitment
    prereg = audit.preregistration
    assert (report.guessing["k_plus"], report.guessing["k_minus"]) == (prereg.k_plus, prereg.k_minus)
    assert report.result["guesses"] == prereg.k_plus + prereg.k_minus
    assert report.warning == audit.warning == audit.verdict.line and report.power["underpowered"] is True
    # a valid audit rejects a true claim with probability ≤ 1 − confidence = 5% over the coins; here every source
    # of randomness is seeded (coins seed=1, dp_seed=0, generation), so the outcome is fixed, not flaky, and the
    # weak score of the tiny model (guesses near chance) leaves the bound near 0, far below the claimed ε
    assert 0 <= report.result["eps_lower"] <= trainer.privacy_claim["epsilon"]
    assert report.result["rejects_nominal"] is False


def test_example_trains_and_passes_the_fast_checks(example):
    trainer, results = example["trainer"], example["results"]
    assert trainer.t == 2 and len(trainer.public_telemetry) == 2
    assert set(results) == set(FAST_CHECKS)
    bad = {k: (r.status, r.message[:300]) for k, r in results.items() if r.status != "pass"}
    assert not bad
    # float32 model: float32 tolerances, never float64's
    assert {r.precision for r in results.values()} == {"float32"}
    assert results["record_isolation"].observed["trainer_level_identical"] is True
    assert results["record_isolation"].observed["perturbation_changes_j"] is True


def test_privacy_claim_is_the_plans(example):
    from privcheck.accounting import PoissonGaussianEvent, epsilon

    trainer = example["trainer"]
    n = len(example["dataset"])
    # independent: the PLD of the event (q, σ, T) = (0.5, 1.0, 2), δ = 1/(10n), computed here from the settings
    expect = epsilon(PoissonGaussianEvent(0.5, 1.0, 2), 1 / (10 * n)).value
    assert example["epsilon"] == expect
    claim = trainer.privacy_claim
    assert (claim["q"], claim["sigma"], claim["T"], claim["C"], claim["n"]) == (0.5, 1.0, 2, 1.0, n)
    assert claim["divisor"] == 0.5 * n
    assert trainer.privacy_release is False          # dp_seed given: reproducible, not a release
    assert trainer.dp_config.plan.delta == 1 / (10 * n)


def test_step_is_clip_noise_divide(example, tmp_path):
    """One step on a fresh copy, recomputed by hand: ĝ = (Σ_i clip_C(g_i) + z)/(q·n), z with std σ·C."""
    trainer = example["trainer"]
    ds = addition_dataset(4, seed=3)
    run = trainer.fresh_copy(ds, 11)
    seen = {}
    run.add_update_hook(lambda g: seen.setdefault("g_hat", g.detach().clone()))
    run.step()
    S = sum((c.clipped for c in run.last_contributions.values()), torch.zeros(run.space.dim))
    for c in run.last_contributions.values():
        norm = float(torch.linalg.vector_norm(c.gradient.double()))
        assert float(torch.linalg.vector_norm(c.clipped.double())) <= 1.0 * (1 + 1e-6)
        if norm <= 1.0:
            assert torch.equal(c.clipped, c.gradient)
    # the noise alone: a copy with the same seed on the empty dataset draws the same z (separate generators)
    empty = trainer.fresh_copy(ds.select([]), 11)
    seen_empty = {}
    empty.add_update_hook(lambda g: seen_empty.setdefault("g_hat", g.detach().clone()))
    empty.step()
    divisor = 0.5 * trainer.dp_config.n
    assert trainer.dp_config.n == len(example["dataset"])          # the public n, not len(ds)
    diff = seen["g_hat"] * divisor - seen_empty["g_hat"] * divisor
    assert float((diff - S).abs().max()) <= 1e-5 * max(1.0, float(S.abs().max()))
    z = seen_empty["g_hat"].double() * divisor
    # std of z over 512 coordinates: σ·C = 1; the sample std of N(0, 1) at p = 512 is within 0.25 with
    # probability 1 − 2·Φ(−0.25·√(2·512)) ≈ 1 − 1e-15
    assert abs(float(z.std()) - 1.0) < 0.25


def test_sampled_batches_are_the_coins(example):
    trainer = example["trainer"]
    ds = addition_dataset(6, seed=4)
    sizes = set()
    for s in range(6):
        run = trainer.fresh_copy(ds, s)
        coins = torch.rand(len(ds), dtype=torch.float64, generator=run.randomness.policy.torch_generator("coins"))
        run.step()
        assert run.last_sampled == [i for i in range(len(ds)) if coins[i] < 0.5]
        sizes.add(len(run.last_sampled))
    assert len(sizes) > 1          # the batch size varies: Poisson, not a fixed batch


def test_plain_trl_batched_path_fails_isolation(tmp_path):
    """A plain TRL GRPOTrainer: perturbing prompt j (a longer prompt) changes prompt i's contribution in the batch."""
    from trl import GRPOConfig, GRPOTrainer

    from privcheck.checks.catalogue import run_suite
    from privcheck.integrations.trl import PromptItem, bindings_for

    results = {}
    for loss_type, scale in (("grpo", "group"), ("dapo", "group"), ("grpo", "batch")):
        args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=12,
                          max_completion_length=4, bf16=False, report_to=[], gradient_checkpointing=False,
                          loss_type=loss_type, scale_rewards=scale)
        trainer = GRPOTrainer(tiny_model(), digit_reward, args=args, train_dataset=addition_dataset(),
                              processing_class=tiny_tokenizer(), peft_config=_lora())
        b = bindings_for(trainer)
        assert b.precision == "float32" and b.whole_step is None and b.accountant_event is None
        assert b.whole_run is None          # no noise to replay: the whole-run checks are not bound
        (r,) = run_suite(b, checks=["record_isolation"])
        results[(loss_type, scale)] = r
        assert r.status == "fail", r.message
        assert r.observed["function_level_identical"] is True      # deterministic alone: the batch couples
        assert r.observed["perturbation_changes_j"] is True
        assert r.observed["trainer_level_identical"] is False
    # control: a perturbation that keeps j's prompt length (no padding change) leaves i bit-identical here
    same_length = lambda it: PromptItem({**it.row, "prompt": "9" + it.row["prompt"][1:]}, it.seed)  # noqa: E731
    (r,) = run_suite(bindings_for(trainer, perturb=same_length), checks=["record_isolation"])
    assert r.status == "pass", r.message


@pytest.mark.parametrize("setting, value", [("loss_type", "dapo"), ("loss_type", "bnpo"), ("loss_type", "dr_grpo"),
                                            ("scale_rewards", "batch"), ("num_iterations", 2),
                                            ("gradient_accumulation_steps", 2), ("top_entropy_quantile", 0.5),
                                            ("multi_objective_aggregation", "normalize_then_sum"),
                                            ("mask_truncated_completions", True)])
def test_refuses_settings_that_couple_prompts(tmp_path, setting, value):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    args = _dp_args(tmp_path, **{setting: value})
    model = object()          # never touched: the refusal comes before any work
    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(model, digit_reward, args=args, train_dataset=addition_dataset(),
                      processing_class=tiny_tokenizer(), peft_config=_lora())
    assert err.value.name == setting


@pytest.mark.parametrize("overrides, name", [
    ({"dp_clip_norm": None}, "dp_clip_norm"), ({"dp_clip_norm": math.inf}, "dp_clip_norm"),
    ({"dp_sampling_rate": 1.5}, "dp_sampling_rate"), ({"dp_steps": 0}, "dp_steps"),
    ({"dp_target_epsilon": 2.0}, "dp_noise_multiplier"), ({"dp_noise_multiplier": None}, "dp_noise_multiplier"),
    ({"dp_delta": 1.0}, "dp_delta"), ({"dp_reward_range": (1.0, 0.0)}, "dp_reward_range"),
    ({"dp_seed": -1}, "dp_seed"), ({"max_steps": 5}, "max_steps"),
    ({"dp_num_records": None}, "dp_num_records"),      # never defaulted to the (private) dataset size
    ({"dp_num_records": 5}, "dp_num_records")])         # below the dataset's 6 prompts
def test_refuses_bad_dp_settings(tmp_path, overrides, name):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=_dp_args(tmp_path, **overrides),
                      train_dataset=addition_dataset(), processing_class=tiny_tokenizer())
    assert err.value.name == name


def test_refuses_plain_grpo_config_and_tools(tmp_path):
    from trl import GRPOConfig

    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=GRPOConfig(output_dir=str(tmp_path), bf16=False, report_to=[]),
                      train_dataset=addition_dataset())
    assert err.value.name == "args"
    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=_dp_args(tmp_path), train_dataset=addition_dataset(),
                      tools=[len])
    assert err.value.name == "tools"
    with pytest.raises(InvalidParameter) as err:
        DPGRPOTrainer(object(), digit_reward, args=_dp_args(tmp_path), train_dataset=addition_dataset(),
                      optimizers=(object(), None))
    assert err.value.name == "optimizers"


def test_run_artifact(tmp_path, example):
    """The same run artifact as `privcheck run dp-grpo`: sealed, schema-valid, ε from the plan, private files 0600."""
    import hashlib
    import json

    from mechanisms.dpgrpo.trl import DPGRPOTrainer
    from privcheck.artifacts import verify_seal

    trainer = DPGRPOTrainer(tiny_model(), digit_reward, args=_dp_args(tmp_path / "tr"),
                            train_dataset=addition_dataset(), eval_dataset=addition_dataset(2, seed=9),
                            processing_class=tiny_tokenizer(), peft_config=_lora())
    with pytest.raises(InvalidParameter):           # no evaluation before train(): nothing is written
        trainer.save_run_artifact(tmp_path / "early")
    assert not (tmp_path / "early").exists()
    trainer.train()
    results = list(example["results"].values())
    doc = trainer.save_run_artifact(tmp_path / "run", verification=results)
    path = tmp_path / "run" / "run-dp_grpo-seed0.json"
    on_disk = json.loads(path.read_text())
    assert on_disk == doc and verify_seal(on_disk)
    assert doc["schema"] == "privcheck.dpgrpo.run/1" and doc["status"] == "complete"
    assert doc["privacy"]["epsilon"] == trainer.plan.epsilon().value
    assert (doc["privacy"]["q"], doc["privacy"]["sigma"], doc["privacy"]["T"]) == (0.5, 1.0, 2)
    assert doc["privacy_release"] is False and "seeded randomness" in " ".join(doc["release_blockers"])
    assert doc["verification"]["status"] == "pass"
    assert doc["public_telemetry"] == trainer.public_telemetry
    assert [c["t"] for c in doc["evaluation"]["curve"]] == [0, 2]
    private = tmp_path / "run" / doc["private_telemetry_ref"]["path"]
    assert private.stat().st_mode & 0o777 == 0o600
    assert hashlib.sha256(private.read_bytes()).hexdigest() == doc["private_telemetry_ref"]["sha256"]
    weights = tmp_path / "run" / doc["released_weights"]["path"]
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == doc["released_weights"]["sha256"]


def test_never_more_steps_than_accounted(example):
    with pytest.raises(InvalidParameter) as err:
        example["trainer"].step()
    assert err.value.name == "dp_steps"


@pytest.mark.slow
def test_example_passes_every_check(tmp_path):
    ns = _run_example(tmp_path)
    results = ns["results"]
    ran = {k: r for k, r in results.items() if r.status != "skipped"}
    bad = {k: (r.status, r.message[:300]) for k, r in ran.items() if r.status != "pass"}
    assert not bad
    assert set(ran) == set(BOUND_CHECKS)
    assert set(results) - set(ran) == set(NOT_APPLICABLE)
    for name in NOT_APPLICABLE:
        assert results[name].message.startswith(f"skipped: {name} does not apply: "), results[name].message


# ------------------------------------------------------------------ V3, V9, V1, V7, V8, V4 on the DP trainer

class RealisedBatchNoisyUpdate:
    """Planted: ĝ divided by the realised number of sampled prompts instead of the public q·n."""

    def noisy_update(self, clipped, **overrides):
        clipped = list(clipped)
        q, n = overrides.get("q", self.dp_config.q), overrides.get("n", self.dp_config.n)
        return super().noisy_update(clipped, **overrides) * (q * n) / max(1, len(clipped))


class TokenPooledLoss:
    """Planted: the loss normalised by the group's total completion tokens (DAPO-style pooling) instead of the
    token mean within each completion."""

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta):
        m = mask.to(logp.dtype)
        per_token = torch.exp(logp - logp.detach()) * advantages.to(logp.dtype)[:, None]
        d = ref_logp.detach() - logp
        per_token = per_token - beta * (torch.exp(d) - d - 1)
        return -(per_token * m).sum() / m.sum()


class TemperatureScaledLogprobs:
    """Planted: the policy's log-probabilities from logits divided by τ = 0.7 (plain forward, no fused head), where
    eq. (7) and V1's reference use the temperature-1 logits."""

    def token_logprobs(self, model, prompt_ids, completion_ids, completion_mask=None):
        G, L = completion_ids.shape
        prompt = prompt_ids.unsqueeze(0).expand(G, -1) if prompt_ids.dim() == 1 else prompt_ids
        logits = model(input_ids=torch.cat([prompt, completion_ids], dim=1)).logits[:, prompt.shape[1] - 1:-1]
        return torch.log_softmax(logits / 0.7, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def _dp_trainer(tmp_path, cls=None, **overrides):
    from mechanisms.dpgrpo.trl import DPGRPOTrainer

    cls = DPGRPOTrainer if cls is None else type(cls.__name__, (cls, DPGRPOTrainer), {})
    return cls(tiny_model(), digit_reward, args=_dp_args(tmp_path, **overrides), train_dataset=addition_dataset(),
               processing_class=tiny_tokenizer(), peft_config=_lora())


def test_newly_bound_checks_pass_on_the_dp_trainer(example):
    """V3 (reduced: 4 gradient records, C = 0.7 and C_mix; the default runs in the slow tier), V9 and V1 through
    the trainer's prompt_contribution, clip, clipped_sum, noisy_update, advantages and prompt_loss; float32."""
    from privcheck.checks import dpsgd
    from privcheck.checks.catalogue import run_suite

    b = example["trainer"].privcheck_bindings(seeds=2)
    r3 = dpsgd.check_sensitivity_add_remove(b, n_gradient_records=4, clip_norms=("C=0.7", "C_mix"))
    results = [r3] + run_suite(b, checks=["public_normalisation", "loss_reference"])
    for r in results:
        assert (r.status, r.precision) == ("pass", "float32"), (r.name, r.message[:300])
    assert set(r3.observed["per_C"]) == {"C=0.7", "C_mix"} and r3.observed["n_trials"] == 2 * (5 + 3)
    assert results[1].observed["identical_across_batch_sizes"] is True
    v1 = next(r for r in results if r.name == "loss_reference")
    assert "not compared" not in v1.message    # V1 compared the trainer's token_logprobs too
    assert len(b.logprob_cases) == 2 and b.token_logprobs == example["trainer"].token_logprobs
    for r in run_suite(b, checks=list(NOT_APPLICABLE)):
        assert r.status == "skipped" and r.message.startswith(f"skipped: {r.name} does not apply: "), r.message


def test_prompt_contribution_uses_token_logprobs(example, monkeypatch):
    """The log-probabilities V1 compares are those of the loss: prompt_contribution calls token_logprobs once, on
    the policy, with its G padded completions and their mask."""
    trainer = example["trainer"]
    calls = []

    def spy(model, prompt_ids, completion_ids, completion_mask=None):
        calls.append((model, completion_ids.shape, completion_mask))
        return type(trainer).token_logprobs(trainer, model, prompt_ids, completion_ids, completion_mask)

    monkeypatch.setattr(trainer, "token_logprobs", spy)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        trainer.prompt_contribution(dict(trainer.train_dataset[0]), rewards=[0.0, 1.0, 0.0, 1.0])
    assert len(calls) == 1
    model, shape, mask = calls[0]
    assert model is trainer.model and shape[0] == 4 and mask is not None and tuple(mask.shape) == tuple(shape)


def test_loss_reference_fails_at_another_temperature(tmp_path):
    """TRL divides the logits by args.temperature in the loss's log-probabilities; V1's reference is the
    temperature-1 log_softmax, so a trainer at τ = 0.7 fails V1 (docs/integrations/trl.md)."""
    from privcheck.checks.catalogue import run_suite

    (r,) = run_suite(_dp_trainer(tmp_path, temperature=0.7).privcheck_bindings(seeds=2), checks=["loss_reference"])
    assert r.status == "fail", (r.status, r.message[:300])
    assert r.observed["max_abs_diff_logprobs"] > 1e-3


def test_constant_reward_prompt_is_exactly_zero_at_beta_zero(example):
    """β = 0 (why constant_reward_groups does not apply): a constant group has advantage 0 (eq. (2): s = 0) and,
    with no KL term, a contribution that is exactly 0 — through the trainer's own per-prompt path."""
    trainer = example["trainer"]
    assert trainer.beta == 0.0
    row = dict(trainer.train_dataset[0])

    def contribution(rewards):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            return trainer.prompt_contribution(row, rewards=rewards)

    for v in (0.0, 1.0):
        c = contribution([v] * 4)
        assert torch.equal(c.advantages, torch.zeros(4, dtype=torch.float64))
        assert not bool(c.gradient.any()) and not bool(c.clipped.any())
    varied = contribution([0.0, 1.0, 0.0, 1.0])
    assert bool(varied.gradient.any())         # control: the same prompt with varied rewards moves the policy


def test_constant_reward_groups_with_kl(tmp_path):
    """β > 0: after one step (LoRA off the reference) a constant-reward prompt keeps its KL gradient (V7)."""
    from privcheck.checks.catalogue import run_suite

    trainer = _dp_trainer(tmp_path, beta=0.04, dp_steps=1)
    trainer.train()
    (r,) = run_suite(trainer.privcheck_bindings(seeds=2), checks=["constant_reward_groups"])
    assert (r.status, r.precision) == ("pass", "float32"), r.message[:300]
    assert r.observed["grad_norm"] > 0 and r.observed["retained"] is True


@pytest.mark.parametrize("defect, check, field", [
    (RealisedBatchNoisyUpdate, "public_normalisation", "identical_across_batch_sizes"),
    (TokenPooledLoss, "loss_reference", "max_rel_diff"),
    (TemperatureScaledLogprobs, "loss_reference", "max_abs_diff_logprobs")])
def test_planted_defect_fails_the_bound_check(tmp_path, defect, check, field):
    from privcheck.checks.catalogue import run_suite

    (r,) = run_suite(_dp_trainer(tmp_path, defect).privcheck_bindings(seeds=2), checks=[check])
    assert r.status == "fail", (r.status, r.message[:300])
    if field.startswith("identical"):
        assert r.observed[field] is False
    else:        # pooled over 4–8 completions of unequal lengths, or logits / 0.7: far off the float32 rtol 1e-5
        assert r.observed[field] > 1e-3


CONFTEST = """
import pytest
import torch
from peft import LoraConfig
from mechanisms.dpgrpo.trl import DPGRPOTrainer, DPGRPOTrainerConfig
from tests.integrations.trl_tiny import addition_dataset, digit_reward, tiny_model, tiny_tokenizer


@pytest.fixture(scope="session")
def trainer(tmp_path_factory):
    torch.set_num_threads(1)
    args = DPGRPOTrainerConfig(output_dir=str(tmp_path_factory.mktemp("out")), num_generations=4,
                               max_completion_length=4, bf16=False, report_to=[], gradient_checkpointing=False,
                               dp_clip_norm=1.0, dp_noise_multiplier=1.0, dp_sampling_rate=0.5, dp_steps=2, dp_seed=0,
                               dp_num_records=6)
    t = DPGRPOTrainer(tiny_model(), digit_reward, args=args, train_dataset=addition_dataset(),
                      processing_class=tiny_tokenizer(),
                      peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True))
    t.train()
    return t


@pytest.fixture
def privcheck_bindings(trainer):
    return trainer.privcheck_bindings(seeds=2)
"""


@pytest.mark.slow
def test_pytest_privcheck_on_the_trainer(pytester):
    """`pytest --privcheck` with the bindings fixture returning `trainer.privcheck_bindings()`: no check fails."""
    from privcheck.checks.catalogue import check_names

    pytester.syspathinsert(str(ROOT))
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("--privcheck", "-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()[-3000:]
    assert outcomes["passed"] + outcomes.get("skipped", 0) == len(check_names())
    # the checks the DP trainer binds (docs/integrations/trl.md, "Binding contract"); the rest are skipped
    assert outcomes["passed"] == len(BOUND_CHECKS)
