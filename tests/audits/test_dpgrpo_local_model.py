"""`privcheck audit dp-grpo --model DIR --tokenizer DIR`: the gradient-canary audit of the user's own model
(audits/dpgrpo/gradient_canary.py `local_audit_preset`, audits/cli/dpgrpo.py; docs/audit_your_model.md).

The user's model is a GPT-2 built from `tiny_config()` and written with `save_pretrained` to tmp_path, with the
character tokenizer written by `hf_char_tokenizer().save_pretrained` (nothing is downloaded). Expected values are
computed here from public facts: the LoRA ParamSpace of that GPT-2 (2 layers, c_attn 64 → 192, rank 4:
2·(4·64 + 192·4) = 2,048 coordinates, so the last 20 are 2028..2047 — not the tiny-cpu Qwen2's 8,192), the
sha256 of the saved weight files, the commitment by hand from reveal.json. The fast end-to-end run calibrates
σ for ε = 1 (q = 1, T = 2), which costs seconds; the command line at the preset's ε = 8 is in the slow tier.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from audits.dpgrpo import gradient_canary as dc
from privcheck.cli import build_parser, main
from privcheck.errors import InvalidParameter
from tests.conftest import steinke_only_audits

M, T, N_REAL, SEED = 20, 2, 4, 0
LORA_DIM = 2 * (4 * 64 + 192 * 4)


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    from transformers import GPT2LMHeadModel

    from mechanisms.dpgrpo.models import hf_char_tokenizer, tiny_config

    root = tmp_path_factory.mktemp("user_model")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        GPT2LMHeadModel(tiny_config()).save_pretrained(root / "model")
    hf_char_tokenizer().save_pretrained(root / "tokenizer")
    return root / "model", root / "tokenizer"


@pytest.fixture(scope="module")
def local_audit(user_model, tmp_path_factory):
    model_dir, tok_dir = user_model
    out = tmp_path_factory.mktemp("local_audit") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spec = dc.local_audit_preset(model_dir, tok_dir)
        with steinke_only_audits():       # the local preset is tested here; the second bound elsewhere
            yield dc.run_gradient_canary_audit(preset=spec, canaries=M, out_dir=out, seed=SEED, rounds=T, q=1.0,
                                               n_real=N_REAL, target_epsilon=1.0, plan_sims=2)
    finally:
        torch.set_num_threads(threads)


def test_the_saved_tokenizer_has_the_char_tokenizer_ids(user_model):
    from transformers import AutoTokenizer

    from mechanisms.dpgrpo.tasks import CharTokenizer
    tok = AutoTokenizer.from_pretrained(user_model[1], local_files_only=True)
    char = CharTokenizer()
    assert tok.encode("3+4=", add_special_tokens=False) == char.encode("3+4=") == [5, 12, 6, 13]
    assert (tok.pad_token_id, tok.eos_token_id, len(tok)) == (char.pad_id, char.eos_id, char.vocab_size)
    assert tok.decode([5, 12, 6], skip_special_tokens=True) == "3+4"


def test_the_user_model_is_the_one_trained_and_audited(local_audit, user_model):
    res = local_audit
    design = res.design
    assert design.reserved == tuple(range(LORA_DIM - M, LORA_DIM))     # the GPT-2's LoRA space, not tiny-cpu's
    assert design.config.lora_targets == ("c_attn",)                     # PEFT's default for GPT-2
    params = res.report.claim["mechanism"]["params"]
    files = sorted(p for p in user_model[0].iterdir() if p.suffix in (".safetensors", ".bin"))
    assert params["model"]["model_type"] == "gpt2"
    assert dict(params["model"]["sha256"]) == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert params["preset"] == "local:model" and params["steps"] == T and params["n_canary"] == M
    assert params["q"] == 1.0 and params["base_preset"] == "tiny-cpu"
    rounds = [json.loads(line) for line in res.log_path.read_text().splitlines()]
    assert sorted(r["t"] for r in rounds if r.get("kind") == "round") == list(range(1, T + 1))


def test_local_audit_artifact_and_commitment(local_audit):
    res = local_audit
    doc = json.loads(res.artifact.read_text())
    assert doc["method"] == "steinke_one_run" and doc["canaries"]["m"] == M
    assert 0.0 <= doc["result"]["eps_lower"] <= doc["claim"]["epsilon"] <= 1.0
    reveal = json.loads((res.artifact.parent / "private" / "reveal.json").read_text())
    payload = (bytes.fromhex(reveal["salt_hex"]) + json.dumps(reveal["canary_ids"], separators=(",", ":")).encode()
               + reveal["bits"].encode())
    assert doc["canaries"]["membership_commitment"] == "sha256:" + hashlib.sha256(payload).hexdigest()


# ------------------------------------------------------------------------------------------ bad input, before work

@pytest.fixture
def no_work(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before validation")
    monkeypatch.setattr(dc, "design_gradient_audit", forbidden)


def _bad_dirs(tmp_path, user_model):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((user_model[0] / "config.json").read_text())
    bad_config = tmp_path / "bad_config"
    bad_config.mkdir()
    (bad_config / "config.json").write_text("[1, 2]")
    (bad_config / "model.safetensors").write_bytes(b"")
    unknown = tmp_path / "unknown_type"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "not-a-model"}))
    (unknown / "model.safetensors").write_bytes(b"")
    return empty, no_weights, bad_config, unknown


def test_bad_paths_are_refused_before_any_work(no_work, tmp_path, user_model):
    model_dir, tok_dir = user_model
    empty, no_weights, bad_config, unknown = _bad_dirs(tmp_path, user_model)
    cases = [((tmp_path / "absent", tok_dir), {}, "model"), ((empty, tok_dir), {}, "model"),
             ((no_weights, tok_dir), {}, "model"), ((bad_config, tok_dir), {}, "model"),
             ((model_dir, empty), {}, "tokenizer"), ((model_dir, tmp_path / "absent"), {}, "tokenizer"),
             ((model_dir, None), {}, "tokenizer"),                 # the model directory holds no tokenizer
             ((unknown, tok_dir), {}, "lora_targets"), ((model_dir, tok_dir), {"lora_targets": []}, "lora_targets"),
             ((model_dir, tok_dir), {"base": "gpu-h200"}, "preset")]
    for (model, tok), kwargs, name in cases:
        with pytest.raises(InvalidParameter) as err:
            dc.local_audit_preset(model, tok, **kwargs)
        assert err.value.name == name, (model, tok, kwargs)


def test_a_lora_target_missing_from_the_model_is_refused(user_model):
    spec = dc.local_audit_preset(*user_model, lora_targets="c_attn,no_such_module")
    with pytest.raises(InvalidParameter) as err:
        spec.build_policy(0)
    assert err.value.name == "lora_targets"


def test_cli_builds_the_local_preset(user_model):
    from audits.cli.dpgrpo import preset_from_args
    args = build_parser().parse_args(["audit", "dp-grpo", "--model", str(user_model[0]), "--tokenizer",
                                      str(user_model[1]), "--canaries", "10", "--out", "x"])
    spec = preset_from_args(args)
    assert isinstance(spec, dc.AuditPreset) and spec.name == "local:model"
    assert spec.config_kwargs["lora_targets"] == ("c_attn",)


@pytest.mark.parametrize("argv, name", [
    (["--model", "/nonexistent/model"], "model"),
    (["--tokenizer", "/tmp"], "tokenizer"),
    (["--lora-targets", "c_attn"], "lora_targets"),
])
def test_cli_bad_model_arguments_exit_2_and_write_nothing(no_work, tmp_path, capsys, argv, name):
    out = tmp_path / "run"
    code = main(["audit", "dp-grpo", *argv, "--canaries", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"invalid {name}=" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.slow
def test_cli_audits_the_user_model_end_to_end(user_model, tmp_path, capsys):
    out = tmp_path / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["audit", "dp-grpo", "--model", str(user_model[0]), "--tokenizer", str(user_model[1]),
                     "--canaries", "20", "--rounds", "2", "--seed", "1", "--out", str(out), "--json"])
    finally:
        torch.set_num_threads(threads)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    saved = json.loads((out / "audit.json").read_text())
    assert saved == {k: v for k, v in doc.items() if k in saved}
    assert doc["claim"]["mechanism"]["params"]["model"]["model_type"] == "gpt2"
    assert doc["claim"]["mechanism"]["params"]["n_canary"] == 20


def test_cli_help_lists_the_registered_presets(capsys, monkeypatch):
    """`audit dp-grpo --help` lists the presets registered when the help is printed (the parser is built without
    importing audits.dpgrpo.gradient_canary; tests/test_cli.py checks that)."""
    monkeypatch.setitem(dc.AUDIT_PRESETS, "zzregisteredlater", dc.AUDIT_PRESETS["tiny-cpu"])
    with pytest.raises(SystemExit) as exc:
        main(["audit", "dp-grpo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0
    assert "audit preset (task, records and mechanism constants; with --model, the model is yours): " \
           + ", ".join(sorted(dc.AUDIT_PRESETS)) + " (default tiny-cpu)" in help_text
