"""CPU tests of the LLM selection pipeline (mechanisms/selection/pipeline/, docs/selection.md) with tiny models.

Expected values come from independent sources: closed-form parameter counts of the Qwen2 architecture
(checked against the published 494,032,768 of Qwen2.5-0.5B), the closed form of ε_BoN(n), the
softmax(logits/T) law computed from the model's own logits, and scores recomputed from the returned
candidates. The gpu-h200 preset cannot run here (no GPU; a 0.5B model on 2 CPU cores takes about a minute
even for one prompt), so its shapes are tested on the meta device and its work plan by arithmetic; the
CUDA-only lines (peak GPU memory, device name) are exercised by scripts/gpu_selection.sh on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch
from scipy import stats

from mechanisms.selection import FRESH_PI0, PrivITP
from mechanisms.selection.cli import add_run_parser, build_parser, main
from mechanisms.selection.pipeline import (
    ARTIFACT_NAME,
    PRESETS,
    SCHEMA,
    SELECTORS,
    CandidateSampler,
    RewardFunctionScorer,
    RewardModelScorer,
    SelectionConstants,
    build_policy,
    build_reward_model,
    build_tokenizer,
    check_device,
    parameter_count,
    run_pipeline,
    run_selection,
    synthetic_prompts,
    validate_artifact,
)
from privcheck.artifacts import load_schema, seal, verify_seal
from privcheck.errors import InvalidParameter

TINY = PRESETS["cpu-tiny"]
GPU = PRESETS["gpu-h200"]
CONST = SelectionConstants(r_max=1.0, sensitivity=0.05, sigma=0.2, beta=0.05, headroom=0.5, delta=1e-5)
N, T = TINY.n, TINY.max_new_tokens


def qwen2_params(vocab, hidden, layers, heads, kv_heads, inter, *, reward=False):
    """Closed form: tied embedding V·H; per layer q (H·H + H), k and v (H·kv·d + kv·d each, d = H/heads),
    o (H·H), gated MLP (3·H·I), two RMSNorms (2·H); final norm H; reward head H·1 (no bias) instead of an
    LM head (tied, so no extra parameters for the LM)."""
    d = hidden // heads
    per_layer = (hidden * hidden + hidden) + 2 * (hidden * kv_heads * d + kv_heads * d) + hidden * hidden \
        + 3 * hidden * inter + 2 * hidden
    return vocab * hidden + layers * per_layer + hidden + (hidden if reward else 0)


def raises(name, fn, *args, **kw):
    with pytest.raises(InvalidParameter) as err:
        fn(*args, **kw)
    assert err.value.name == name, f"expected {name!r}, got {err.value.name!r}: {err.value}"
    return err.value


@pytest.fixture(scope="module")
def tiny():
    return {"tokenizer": build_tokenizer(),
            "policy": build_policy(TINY.policy, seed=TINY.policy_seed),
            "rm": build_reward_model(TINY.reward, seed=TINY.reward_seed)}


@pytest.fixture(scope="module")
def prompts():
    return synthetic_prompts(3, TINY.prompt_tokens, TINY.prompt_token_range)


@pytest.fixture(scope="module")
def run_all(tiny, prompts):
    scorer = RewardModelScorer(tiny["rm"], CONST.r_max, batch_size=16)
    return run_pipeline(tiny["policy"], scorer, prompts, n=N, constants=CONST, max_new_tokens=T,
                        generation_batch=20, seed=0, tokenizer=tiny["tokenizer"])


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("sel")
    doc, path, result = run_selection("cpu-tiny", out=out, seed=3)
    return doc, path, result


# --- models -------------------------------------------------------------------------------------------

def test_tokenizer_needs_no_files(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = build_tokenizer()
    assert len(tok) == 256 + 3 + 125 == TINY.policy.vocab_size   # bytes + pad/eos/unk + 125 extra ids
    assert tok("hi")["input_ids"] == [ord("h") + 3, ord("i") + 3, 1]
    assert tok.decode([ord(c) + 3 for c in "Prompt"]) == "Prompt"
    lo, hi = TINY.prompt_token_range                               # printable ASCII
    assert tok.decode(list(range(lo, hi))) == "".join(chr(b) for b in range(32, 127))


def test_builders_are_deterministic_and_match_closed_form_sizes(tiny):
    s = TINY.policy
    expect = qwen2_params(s.vocab_size, s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads,
                          s.intermediate_size)
    assert expect == 98_880
    assert sum(p.numel() for p in tiny["policy"].parameters()) == expect == parameter_count(s, "policy")
    assert sum(p.numel() for p in tiny["rm"].parameters()) == expect + 64 == parameter_count(s, "reward")
    same = build_policy(s, seed=TINY.policy_seed)
    other = build_policy(s, seed=5)
    ref = tiny["policy"].state_dict()
    assert all(torch.equal(ref[k], val) for k, val in same.state_dict().items())
    assert not all(torch.equal(ref[k], val) for k, val in other.state_dict().items())
    rm2 = build_reward_model(s, seed=TINY.reward_seed)
    assert torch.equal(rm2.score.weight, tiny["rm"].score.weight)
    # score head N(0, 1/H): its empirical std is within 30% of H^-1/2 (64 draws)
    assert abs(float(rm2.score.weight.std()) * math.sqrt(s.hidden_size) - 1) < 0.3
    assert tiny["policy"].generation_config.eos_token_id is None


def test_gpu_h200_shapes_on_meta_device():
    s = GPU.policy
    assert (s.vocab_size, s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.intermediate_size) == \
        (151936, 896, 24, 14, 2, 4864)
    expect = qwen2_params(151936, 896, 24, 14, 2, 4864)
    assert expect == 494_032_768                     # Qwen2.5-0.5B's published parameter count
    assert parameter_count(s, "policy") == expect
    assert parameter_count(GPU.reward, "reward") == expect + 896
    assert GPU.dtype == "bfloat16" and 2 * expect / 2**30 < 1.0   # < 1 GiB of bf16 weights per model
    assert (GPU.prompts, GPU.n, GPU.max_new_tokens, GPU.tokenizer) == (64, 1024, 64, None)
    plan = GPU.plan()
    assert plan["candidates_per_prompt"] == 1024 + 1024 + 2
    assert plan["sequences"] == 64 * 2050 == 131_200
    assert plan["new_tokens"] == 131_200 * 64
    assert plan["scored_candidates"] == 64 * 2048
    assert plan["scored_tokens"] == 64 * 2048 * (32 + 64)
    assert plan["chunks"] == 16
    assert GPU.time_limit_s < 480                     # the guard stops inside the 8-minute budget
    assert GPU.plan(("bon", "privbon"))["sequences"] == 64 * 1024


def test_cuda_path_without_a_gpu(monkeypatch):
    assert check_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    raises("device", check_device, "cuda")
    raises("device", check_device, "tpu")


def test_cli_module_starts_without_torch():
    code = ("import sys; from mechanisms.selection.cli import build_parser; build_parser(); "
            "print(int('torch' in sys.modules), int('transformers' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["0", "0"]


# --- sampling -----------------------------------------------------------------------------------------

def test_sampling_shape_and_range(tiny, prompts, run_all):
    sampler = CandidateSampler(tiny["policy"], max_new_tokens=5, batch_size=4)
    assert sampler.generation_config.top_k == 0 and sampler.generation_config.top_p == 1.0
    out = sampler.sample(torch.as_tensor(prompts), 3)
    assert out.shape == (3, 3, 5) and out.dtype == torch.long
    assert int(out.min()) >= 0 and int(out.max()) < TINY.policy.vocab_size
    r = run_all
    assert r.candidates.shape == (3, N, T) and r.phase1_candidates.shape == (3, N, T)
    assert r.reserve.shape == (3, 2, T)
    assert r.counters["sequences"] == 3 * (2 * N + 2) and r.counters["new_tokens"] == 3 * (2 * N + 2) * T
    assert r.status == "complete" and r.prompts_completed == 3


def test_sampling_is_plain_tempered_softmax():
    """One-token samples follow softmax(logits/T) over the whole vocabulary (no top-k/top-p truncation)."""
    policy = build_policy(TINY.policy, seed=7)
    with torch.no_grad():
        policy.model.norm.weight.mul_(3.0)           # spread the logits so temperature and top-k matter
    prompt = torch.as_tensor(synthetic_prompts(1, 8, TINY.prompt_token_range))
    temperature, draws = 0.7, 6000
    with torch.inference_mode():
        logits = policy(input_ids=prompt).logits[0, -1].double()
    p = torch.softmax(logits / temperature, 0).numpy()
    p_wrong = torch.softmax(logits, 0).numpy()       # the untempered law, for the power check
    sampler = CandidateSampler(policy, max_new_tokens=1, temperature=temperature, batch_size=draws)
    with torch.random.fork_rng():
        torch.manual_seed(123)
        tokens = sampler.sample(prompt, draws).reshape(-1).numpy()
    counts = np.bincount(tokens, minlength=p.size)
    order = np.argsort(-p)
    outside_top50 = p[order[50:]].sum()
    assert outside_top50 > 0.05                      # HF's default top_k=50 would make this mass unreachable
    observed = counts[order[50:]].sum() / draws
    assert abs(observed - outside_top50) < 5 * math.sqrt(outside_top50 * (1 - outside_top50) / draws)

    def chi2(law):
        bins, acc, cur = [], 0.0, []
        for i in order:                              # consecutive tokens until ≥ 40 expected draws
            cur.append(i)
            acc += law[i] * draws
            if acc >= 40:
                bins.append(cur)
                cur, acc = [], 0.0
        if cur:
            bins[-1] += cur
        exp = np.array([law[b].sum() * draws for b in bins])
        obs = np.array([counts[b].sum() for b in bins])
        return float(((obs - exp) ** 2 / exp).sum()), len(bins) - 1

    stat, df = chi2(p)
    assert stat < stats.chi2.ppf(1 - 1e-6, df), (stat, df)
    wrong, df_w = chi2(p_wrong)
    assert wrong > stats.chi2.ppf(1 - 1e-6, df_w), (wrong, df_w)


# --- scoring ------------------------------------------------------------------------------------------

def test_reward_model_scores_are_squashed_and_clipped(tiny, run_all):
    rm = tiny["rm"]
    r = run_all
    for cands, scores in ((r.candidates, r.scores), (r.phase1_candidates, r.phase1_scores)):
        full = np.concatenate([np.repeat(r.prompt_ids[:, None, :], N, axis=1), cands], axis=2).reshape(3 * N, -1)
        old = rm.config.pad_token_id
        rm.config.pad_token_id = -1                  # no id equals -1: HF pools the last position
        try:
            with torch.inference_mode():
                logits = rm(input_ids=torch.as_tensor(full, dtype=torch.long)).logits[:, 0].double().numpy()
        finally:
            rm.config.pad_token_id = old
        expect = np.clip(CONST.r_max / (1 + np.exp(-logits)), 0, CONST.r_max).reshape(3, N)
        np.testing.assert_allclose(scores, expect, rtol=0, atol=1e-5)
        assert scores.min() >= 0 and scores.max() <= CONST.r_max
    assert r.scores.std() > 0.01                     # the N(0, 1/H) head spreads the scores


def test_reward_function_scores_are_clipped(tiny, prompts):
    tok = tiny["tokenizer"]
    seen = []

    def reward(prompt, completion):                  # values in [-1, 2]: clipping to [0, 1] is active
        seen.append(prompt)
        return (len(completion) % 7) / 2 - 1

    res = run_pipeline(tiny["policy"], RewardFunctionScorer(reward), prompts, n=N, constants=CONST,
                       max_new_tokens=T, seed=1, tokenizer=tok, selectors=["bon", "privitp"])
    assert set(seen) == {tok.decode(row.tolist(), skip_special_tokens=True) for row in prompts}
    for cands, scores in ((res.candidates, res.scores), (res.phase1_candidates, res.phase1_scores)):
        raw = np.array([[(len(tok.decode(c.tolist(), skip_special_tokens=True)) % 7) / 2 - 1 for c in row]
                        for row in cands])
        np.testing.assert_array_equal(scores, np.clip(raw, 0.0, 1.0))
    assert res.reserve.shape == (3, 1, T)            # only PrivITP falls back here


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_is_rejected(tiny, prompts, bad):
    err = raises("reward", run_pipeline, tiny["policy"], RewardFunctionScorer(lambda p, c: bad), prompts[:1], n=2,
                 constants=CONST, max_new_tokens=2, seed=0, tokenizer=tiny["tokenizer"])
    assert "finite" in str(err)


# --- selection ----------------------------------------------------------------------------------------

def test_all_selectors_end_to_end(run_all):
    r = run_all
    assert set(r.results) == set(SELECTORS)
    np.testing.assert_array_equal(r.results["bon"].indices, np.argmax(r.scores, axis=1))
    # PrivBoN: one record for 3 queries, ε = closed-form ε_BoN(n) (reported rounded up)
    rec = r.results["privbon"].record
    R, d, s = CONST.r_max, CONST.sensitivity, CONST.sigma
    eps = math.log1p((N - 1) * math.exp(R / s)) - math.log1p((N - 1) * math.exp((R - 2 * d) / s))
    assert eps <= rec.value <= eps * (1 + 1e-12) and rec.value < 2 * d / s
    assert rec.details["queries"] == 3 and rec.mechanism == "privbon"
    # PrivITP: one ex-post record per prompt, positive and finite, at the run's public constants
    recs = r.results["privitp"].records
    assert len(recs) == 3 and all(x.mechanism == "privitp" and 0 < x.value < math.inf for x in recs)
    assert all(x.inputs["candidates"] == N and x.inputs["sigma_z"] == CONST.sigma / 2 for x in recs)
    assert r.results["bon"].record is None and r.results["itp"].records is None
    assert r.records == {"bon": (), "privbon": (rec,), "itp": (), "privitp": tuple(recs)}
    for name in SELECTORS:
        idx = np.asarray(r.results[name].indices)
        for p in range(3):
            expect = r.reserve[p, ("itp", "privitp").index(name)] if idx[p] == FRESH_PI0 else r.candidates[p, idx[p]]
            np.testing.assert_array_equal(r.selected[name][p], expect)
        assert r.fallback[name].tolist() == (idx == FRESH_PI0).tolist()
    assert set(r.selection_s) == set(SELECTORS) and all(t >= 0 for t in r.selection_s.values())


def test_privitp_gets_two_independent_batches(tiny, prompts, monkeypatch):
    calls = []
    original = PrivITP.select

    def spy(self, phase1, phase2, rng=None, **kw):
        calls.append((phase1, phase2))
        return original(self, phase1, phase2, rng, **kw)

    monkeypatch.setattr(PrivITP, "select", spy)
    r = run_pipeline(tiny["policy"], RewardModelScorer(tiny["rm"], CONST.r_max), prompts, n=N, constants=CONST,
                     max_new_tokens=T, seed=2, selectors=["privitp"])
    (phase1, phase2), = calls
    assert phase1 is r.phase1_scores and phase2 is r.scores and not np.shares_memory(phase1, phase2)
    assert not np.shares_memory(r.candidates, r.phase1_candidates)
    for p in range(3):                               # no Phase-1 completion reappears in Phase 2
        a = {tuple(x) for x in r.candidates[p].tolist()}
        b = {tuple(x) for x in r.phase1_candidates[p].tolist()}
        assert len(a) == N and len(b) == N and not a & b
        assert tuple(r.reserve[p, 0].tolist()) not in a | b
    assert not np.array_equal(phase1, phase2)


def test_fallback_returns_the_fresh_reserve_sample(tiny, prompts):
    # Constant score 0 with a tiny β: ITP accepts each round w.p. β/(R_max + β) ≈ 1e-3, so it falls back.
    const = SelectionConstants(r_max=1.0, sensitivity=0.05, sigma=0.2, beta=1e-3)
    r = run_pipeline(tiny["policy"], RewardFunctionScorer(lambda p, c: 0.0), prompts, n=N, constants=const,
                     max_new_tokens=T, seed=4, tokenizer=tiny["tokenizer"], selectors=["itp", "privitp"])
    assert r.fallback["itp"].all()
    for name, slot in (("itp", 0), ("privitp", 1)):
        for p in np.flatnonzero(r.fallback[name]):
            np.testing.assert_array_equal(r.selected[name][p], r.reserve[p, slot])
    assert np.all(r.results["privitp"].halting_times[r.fallback["privitp"]] == 0)


def test_seeded_runs_reproduce(tiny, prompts):
    kw = dict(n=4, constants=CONST, max_new_tokens=6, selectors=SELECTORS)
    scorer = RewardModelScorer(tiny["rm"], CONST.r_max)
    a = run_pipeline(tiny["policy"], scorer, prompts[:2], seed=11, **kw)
    b = run_pipeline(tiny["policy"], scorer, prompts[:2], seed=11, **kw)
    c = run_pipeline(tiny["policy"], scorer, prompts[:2], seed=None, **kw)
    np.testing.assert_array_equal(a.candidates, b.candidates)
    for name in SELECTORS:
        np.testing.assert_array_equal(a.selected[name], b.selected[name])
    assert not a.randomness.privacy_release and c.randomness.privacy_release
    assert c.results["privbon"].privacy_release and not c.results["bon"].privacy_release
    assert not np.array_equal(a.candidates, c.candidates)


def test_wall_clock_guard_marks_incomplete(tiny, prompts):
    r = run_pipeline(tiny["policy"], RewardModelScorer(tiny["rm"], CONST.r_max), prompts, n=4, constants=CONST,
                     max_new_tokens=4, seed=0, prompts_per_chunk=1, time_limit_s=1e-9)
    assert r.status == "incomplete" and r.prompts_completed == 1 and r.prompts_requested == 3
    assert "wall-clock guard" in r.stop_reason
    assert len(r.results["privitp"].records) == 1 and r.candidates.shape == (1, 4, 4)


# --- artifact and CLI ---------------------------------------------------------------------------------

def test_artifact_is_sealed_and_complete(artifact):
    doc, path, result = artifact
    assert path.name == ARTIFACT_NAME
    on_disk = json.loads(path.read_text())
    assert on_disk == doc and verify_seal(on_disk)
    validate_artifact(on_disk)
    jsonschema.validate(on_disk, load_schema(SCHEMA))              # the packaged schema, directly
    assert on_disk["schema"] == "privcheck.selection_run/1" and "spec" not in on_disk
    assert doc["status"] == "complete" and doc["preset"] == "cpu-tiny" and doc["device"] == "cpu"
    assert doc["privacy_release"] is False and doc["randomness"]["mode"] == "seeded"
    assert doc["randomness"]["seed"] == 3 and doc["timing"]["covered_by_guarantee"] is False
    assert doc["n"] == 8 and doc["prompts"]["completed"] == doc["prompts"]["requested"] == 4
    assert doc["models"]["policy"]["parameters"] == 98_880 and doc["models"]["reward"]["parameters"] == 98_944
    assert doc["generation"]["top_k"] == 0 and doc["generation"]["top_p"] == 1.0
    assert doc["public_constants"]["sigma_x"] == doc["public_constants"]["sigma"] / 2
    g, s = doc["throughput"]["generation"], doc["throughput"]["scoring"]
    assert g["new_tokens"] == 4 * (2 * 8 + 2) * 16 and g["tokens_per_s"] > 0 and g["candidates_per_s"] > 0
    assert s["candidates"] == 4 * 16 and s["candidates_per_s"] > 0
    assert doc["peak_memory"]["rss_peak_bytes"] > 0
    assert doc["environment"]["torch"]["version"] == torch.__version__
    sel = doc["selection"]
    assert set(sel) == set(SELECTORS)
    assert len(sel["privbon"]["records"]) == 1 and len(sel["privitp"]["records"]) == 4
    assert sel["privbon"]["records"][0] == result.results["privbon"].record.to_json()
    assert sel["bon"]["records"] == [] and not sel["itp"]["private"]
    assert all(sel[k]["privacy_release"] is False for k in SELECTORS)
    assert "scores" not in json.dumps(sorted(doc))  # no private score arrays in the artifact


def test_artifact_validation_catches_tampering(artifact):
    doc = dict(artifact[0])
    tampered = {**doc, "n": 9}
    assert not verify_seal(tampered)
    raises("artifact", validate_artifact, tampered)
    missing = seal({k: val for k, val in doc.items() if k not in ("throughput", "sha256")})
    assert "throughput" in str(raises("artifact", validate_artifact, missing))
    # the schema's invariants, each on an otherwise valid, sealed document
    for path, value in ((("timing", "covered_by_guarantee"), True), (("status",), "stopped"),
                        (("privacy_release",), True), (("selection", "bon", "privacy_release"), True),
                        (("selection", "privbon", "records"), [])):
        bad = json.loads(json.dumps(doc))
        target = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        raises("artifact", validate_artifact, seal({k: val for k, val in bad.items() if k != "sha256"}))


def test_schema_is_a_valid_json_schema():
    schema = load_schema(SCHEMA)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "privcheck.selection_run/1"


def test_failed_write_leaves_no_artifact(tmp_path, monkeypatch):
    """The one writer validates before it writes: a document the schema refuses is never written."""
    import mechanisms.selection.pipeline.run as run_module

    real = run_module.build_artifact

    def broken(*args, **kw):
        doc = real(*args, **kw)
        doc["timing"] = dict(doc["timing"], covered_by_guarantee=True)
        return doc

    monkeypatch.setattr(run_module, "build_artifact", broken)
    with pytest.raises(jsonschema.ValidationError):
        run_selection("cpu-tiny", out=tmp_path, seed=0, selectors=["bon"], prompts=1)
    assert not (tmp_path / ARTIFACT_NAME).exists() and list(tmp_path.iterdir()) == []


def test_unseeded_artifact_may_be_released(tmp_path):
    doc, _, _ = run_selection("cpu-tiny", out=tmp_path, selectors=["bon", "privbon"], prompts=2)
    assert doc["privacy_release"] is True and doc["randomness"]["mode"] == "os_entropy"
    assert doc["selection"]["privbon"]["privacy_release"] is True
    assert doc["selection"]["bon"]["privacy_release"] is False
    assert "privitp" not in doc["selection"] and doc["generation"]["candidates_per_prompt"] == 8


@pytest.mark.parametrize("kw, name", [
    ({"preset": "cpu-huge"}, "preset"),
    ({"n": 0}, "n"),
    ({"r_max": 0.0}, "r_max"),
    ({"r_max": -1.0}, "r_max"),
    ({"r_max": math.nan}, "r_max"),
    ({"sensitivity": 1.5}, "sensitivity"),
    ({"r_max": 0.5, "sensitivity": 0.6}, "sensitivity"),
    ({"selectors": ["bon", "argmax"]}, "selectors"),
    ({"device": "tpu"}, "device"),
    ({"seed": -1}, "seed"),
    ({"prompts": 0}, "prompts"),
])
def test_bad_input_is_rejected_before_any_model_is_built(tmp_path, kw, name):
    kw = {"preset": "cpu-tiny", **kw}
    raises(name, run_selection, kw.pop("preset"), out=tmp_path, **kw)
    assert not (tmp_path / ARTIFACT_NAME).exists()


def test_bad_pipeline_input(tiny, prompts):
    scorer = RewardModelScorer(tiny["rm"], 1.0)
    raises("n", run_pipeline, tiny["policy"], scorer, prompts, n=0, constants=CONST)
    raises("prompt_ids", run_pipeline, tiny["policy"], scorer, prompts[0], n=2, constants=CONST)
    raises("max_new_tokens", run_pipeline, tiny["policy"], scorer, prompts, n=2, constants=CONST, max_new_tokens=0)
    raises("r_max", run_pipeline, tiny["policy"], RewardModelScorer(tiny["rm"], 2.0), prompts, n=2, constants=CONST)
    raises("time_limit_s", run_pipeline, tiny["policy"], scorer, prompts, n=2, constants=CONST, time_limit_s=0)
    raises("r_max", SelectionConstants, r_max=0.0)
    raises("sensitivity", SelectionConstants, r_max=1.0, sensitivity=1.01)


def _privcheck_like_parser():
    """privcheck's own layout (run → selection), built without the entry point that needs a reinstall."""
    parser = argparse.ArgumentParser(prog="privcheck")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true")
    run = sub.add_parser("run").add_subparsers(dest="what", required=True)
    add_run_parser({"run": run}, common)
    return parser


def test_cli_json_in_process(tmp_path, capsys):
    args = _privcheck_like_parser().parse_args(
        ["run", "selection", "--preset", "cpu-tiny", "--out", str(tmp_path), "--json", "--seed", "5",
         "--selectors", "bon,privitp"])
    assert args.func(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "complete" and set(payload["selection"]) == {"bon", "privitp"}
    assert payload["privacy_release"] is False and payload["prompts_completed"] == 4
    doc = json.loads((tmp_path / ARTIFACT_NAME).read_text())
    validate_artifact(doc)
    assert doc["sha256"] == payload["sha256"]


def test_cli_table_and_errors(tmp_path, capsys):
    run = ["run", "selection"]
    assert main(run + ["--out", str(tmp_path), "--seed", "1", "--prompts", "1", "--selectors", "privbon"]) == 0
    out = capsys.readouterr().out
    assert "status" in out and "complete" in out and "eps/prompt" in out
    assert main(run + ["--preset", "gpu-h100", "--out", str(tmp_path)]) == 2
    assert "invalid preset='gpu-h100'" in capsys.readouterr().err
    assert main(run + ["--n", "0", "--out", str(tmp_path)]) == 2
    assert "invalid n=0" in capsys.readouterr().err
    assert build_parser().parse_args(run + ["--out", "x"]).preset == "cpu-tiny"
