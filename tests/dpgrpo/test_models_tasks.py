"""Tiny policy + LoRA, ParamSpace flatten/unflatten, chunked backward on a real model, tokenizer, verifier,
records. Models are built once per module."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from mechanisms.dpgrpo.core import (
    ParamSpace,
    completion_mask,
    flatten_grads,
    group_advantages,
    prompt_loss,
    unflatten_into,
)
from mechanisms.dpgrpo.models import build_tiny_base, build_tiny_policy, perturb_lora_
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.tasks import CharTokenizer, addition_record, addition_records, reward

SEED = 7
TOK = CharTokenizer()


@pytest.fixture(scope="module")
def policy():
    model = build_tiny_policy(SEED, torch.float64)
    perturb_lora_(model, 0.05, seed=1)  # move LoRA off the reference (B = 0 at init)
    return model


@pytest.fixture(scope="module")
def base():
    return build_tiny_base(SEED, torch.float64)


def _inputs():
    prompt = TOK.encode("12+7=")
    return torch.tensor([prompt + TOK.encode("19", add_eos=True)])


# ----------------------------------------------------------------------------------------------- model

def test_only_lora_trainable(policy):
    trainable = [k for k, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in k or ".lora_B." in k for k in trainable)
    assert all(p.requires_grad for k, p in policy.named_parameters() if "lora_" in k)
    # r = 4 on attn.c_attn (64 → 192) and attn.c_proj (64 → 64), 2 layers:
    # per layer A: 4·64 + 4·64, B: 192·4 + 64·4 → 1536; total 3072
    assert sum(p.numel() for p in policy.parameters() if p.requires_grad) == 3072
    assert all(p.dtype == torch.float64 for p in policy.parameters())


@torch.no_grad()
def test_adapter_disabled_is_the_base_model(policy, base):
    x = _inputs()
    ref = base(x).logits
    with policy.disable_adapter():
        disabled = policy(x).logits
    enabled = policy(x).logits
    assert disabled.dtype == torch.float64
    torch.testing.assert_close(disabled, ref, rtol=0, atol=1e-13)
    assert (enabled - ref).abs().max().item() > 1e-6  # the perturbed adapter changes the policy


@torch.no_grad()
def test_fresh_policy_equals_reference(base):
    fresh = build_tiny_policy(SEED, torch.float64)
    torch.testing.assert_close(fresh(_inputs()).logits, base(_inputs()).logits, rtol=0, atol=1e-13)


def test_builds_are_deterministic_and_leave_global_rng_alone():
    state = torch.get_rng_state()
    a, b = build_tiny_base(3), build_tiny_base(3)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# --------------------------------------------------------------------------------------------- ParamSpace

def test_paramspace_sorted_names_and_hash(policy):
    space = ParamSpace(policy)
    named = sorted((k, tuple(p.shape)) for k, p in policy.named_parameters() if p.requires_grad)
    assert list(space.names) == [k for k, _ in named]
    # layout hash: sha256 of the compact JSON list of [name, shape] in sorted order (documented format)
    expected = hashlib.sha256(json.dumps([[k, list(s)] for k, s in named], separators=(",", ":")).encode()).hexdigest()
    assert space.layout_sha256 == expected
    shuffled = ParamSpace(list(reversed([(k, p) for k, p in policy.named_parameters() if p.requires_grad])))
    assert shuffled.names == space.names and shuffled.layout_sha256 == space.layout_sha256


def test_layout_hash_stable_across_processes(policy):
    code = ("import torch; from mechanisms.dpgrpo.models import build_tiny_policy; "
            "from mechanisms.dpgrpo.core import ParamSpace; "
            f"print(ParamSpace(build_tiny_policy({SEED}, torch.float32)).layout_sha256)")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == ParamSpace(policy).layout_sha256


def test_flatten_unflatten_round_trip(policy):
    space = ParamSpace(policy)
    gen = torch.Generator().manual_seed(0)
    vec = torch.randn(space.dim, dtype=torch.float64, generator=gen)
    unflatten_into(vec, space)
    assert torch.equal(flatten_grads(space), vec)
    # order: first tensor of the sorted list holds the first block
    first = space.params[0]
    assert torch.equal(first.grad.reshape(-1), vec[:first.numel()])
    space.zero_grad()
    assert torch.equal(flatten_grads(space), torch.zeros(space.dim, dtype=torch.float64))  # None grad → 0
    assert flatten_grads(space, dtype=torch.float32).dtype == torch.float32


# ------------------------------------------------------------------------------- chunked backward (line 6)

def _completion_logps(model, prompt_ids, completions):
    """log π(y_k | x, y_<k) at completion positions from unscaled logits (test's own transcription)."""
    G, L = completions.shape
    x = torch.cat([prompt_ids.expand(G, -1), completions], dim=1)
    P = prompt_ids.shape[1]
    logits = model(x).logits[:, P - 1:P - 1 + L, :]
    return torch.log_softmax(logits, dim=-1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)


def test_chunked_backward_equals_full_backward(policy):
    prompt = torch.tensor([TOK.encode("12+7=")])
    texts = ["19", "18", "1", "190", "9"]
    L = 4
    comp = torch.full((5, L), TOK.pad_id, dtype=torch.long)
    for g, t in enumerate(texts):
        ids = TOK.encode(t, add_eos=True)[:L]
        comp[g, :len(ids)] = torch.tensor(ids)
    mask = completion_mask(comp, TOK.eos_id)
    rec = Record("12+7=", "19")
    A = group_advantages(torch.tensor([reward(rec, t) for t in texts]))
    with torch.no_grad(), policy.disable_adapter():
        ref = _completion_logps(policy, prompt, comp)
    space = ParamSpace(policy)

    space.zero_grad()
    prompt_loss(_completion_logps(policy, prompt, comp), ref, mask, A, 0.04).backward()
    full = flatten_grads(space)

    space.zero_grad()
    for a, b in [(0, 2), (2, 4), (4, 5)]:  # chunk size 2, does not divide G = 5
        u = _completion_logps(policy, prompt, comp[a:b])
        prompt_loss(u, ref[a:b], mask[a:b], A, 0.04, rollout_slice=slice(a, b)).backward()
    chunked = flatten_grads(space)
    space.zero_grad()

    assert full.abs().max().item() > 0
    rel = (chunked - full).norm().item() / full.norm().item()
    assert rel <= 1e-12


# ----------------------------------------------------------------------------------- tokenizer, verifier

def test_tokenizer_round_trip():
    assert TOK.vocab_size == 14 and TOK.pad_id == 0 and TOK.eos_id == 1
    ids = TOK.encode("12+7=19")
    assert len(ids) == 7 and TOK.decode(ids) == "12+7=19"
    assert TOK.encode("3", add_eos=True) == [TOK.encode("3")[0], TOK.eos_id]
    assert TOK.decode(TOK.encode("19") + [TOK.eos_id] + TOK.encode("5")) == "19"  # stops at EOS
    assert TOK.decode([TOK.pad_id] + TOK.encode("4") + [TOK.pad_id]) == "4"


@pytest.mark.parametrize("completion, expected", [
    ("19", 1), (" 19\n", 1), ("019", 0), ("+19", 0), ("19.0", 0), ("1 9", 0), ("", 0), ("19a", 0),
    ("18", 0), ("191", 0), ("-19", 0), (None, 0), (19, 0), ("١٩", 0),
])
def test_verifier_strict(completion, expected):
    assert reward(Record("12+7=", "19"), completion) == expected


def test_verifier_zero_answer():
    rec = addition_record(0, 0)
    assert rec.prompt == "0+0=" and rec.answer == "0"
    assert reward(rec, "0") == 1 and reward(rec, "00") == 0 and reward(rec, "-0") == 0


def test_addition_records():
    recs = addition_records(200, seed=5, max_operand=9)
    assert recs == addition_records(200, seed=5, max_operand=9)
    for r in recs:
        a, b = r.prompt[:-1].split("+")
        assert r.answer == str(int(a) + int(b)) and 0 <= int(a) <= 9 and 0 <= int(b) <= 9
        assert reward(r, r.answer) == 1
    assert addition_record(12, 7) == Record("12+7=", "19", meta={"a": 12, "b": 7})


# ---------------------------------------------------------------------------------------------- records

def test_record_frozen_and_meta_read_only():
    r = Record("1+1=", "2", meta={"k": 1})
    with pytest.raises(AttributeError):
        r.prompt = "x"
    with pytest.raises(TypeError):
        r.meta["k"] = 2


def test_slot_universe_batch_reads_coins_and_presence():
    recs = [Record("1+1=", "2"), None, Record("2+2=", "4"), "anything"]
    U = SlotUniverse(4, torch.tensor([True, False, True, False]), recs)
    assert U.n == 4
    assert U.batch(torch.tensor([True, True, False, True])) == [0]
    assert U.batch(torch.tensor([True, True, True, True])) == [0, 2]
    assert U.batch(torch.zeros(4, dtype=torch.bool)) == []
    assert U.record(2) == recs[2]
    empty = SlotUniverse(3, torch.zeros(3, dtype=torch.bool), [None] * 3)  # all absent: allowed
    assert empty.batch(torch.ones(3, dtype=torch.bool)) == []


def test_rollout_group_and_gradient_record():
    ids = torch.tensor([[4, 1, 0], [5, 6, 1]])
    g = RolloutGroup(ids, completion_mask(ids, 1))
    assert g.G == 2 and g.rewards is None
    g2 = g.with_rewards([1, 0])
    assert g2.rewards.tolist() == [1, 0] and g.rewards is None
    v = torch.tensor([1.0, 2.0])
    gr = GradientRecord(v)
    v[0] = 5.0
    assert gr.v.tolist() == [1.0, 2.0]  # copied


def test_tiny_qwen2_policy_shapes():
    """The tiny-cpu policy: LoRA r=4 on the seven projections of a 2-layer hidden-64 Qwen2 → 8,192 trainable in 28
    tensors (2 layers × [q 64→64, k 64→32, v 64→32, o 64→64, gate 64→128, up 64→128, down 128→64] at rank 4)."""
    import torch

    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from privcheck.errors import InvalidParameter
    model = build_tiny_qwen2_policy(0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    per_layer = 4 * ((64 + 64) + (64 + 32) + (64 + 32) + (64 + 64) + (64 + 128) + (64 + 128) + (128 + 64))
    assert (len(trainable), sum(p.numel() for p in trainable)) == (28, 2 * per_layer)
    assert 2 * per_layer == 8192
    bf = build_tiny_qwen2_policy(0, torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in bf.parameters() if p.requires_grad)
    assert any(p.dtype == torch.bfloat16 for p in bf.parameters() if not p.requires_grad)
    with pytest.raises(InvalidParameter, match="dtype"):
        build_tiny_qwen2_policy(0, torch.float64)


def test_package_and_command_registration_do_not_import_torch():
    """`import mechanisms.dpgrpo` names its public API lazily, and building privcheck's parser (which registers
    `privcheck run dp-grpo`) imports neither torch, transformers nor peft (the command line starts fast); the
    names still resolve on use."""
    code = ("import sys; import mechanisms.dpgrpo as d; from privcheck.cli import build_parser; "
            "build_parser(); "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)); "
            "print(d.DPTrainer.__module__, d.core.__name__, sorted(d.__all__) == sorted(n for n in d.__all__ "
            "if hasattr(d, n)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "mechanisms.dpgrpo.trainer mechanisms.dpgrpo.core True"]
