"""Rollout backends and the log-prob helper (Algorithm 1, line 4, and its rollout randomness)."""

from __future__ import annotations

import pytest
import torch

from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.randomness import TorchRandomness
from mechanisms.dpgrpo.records import Record
from mechanisms.dpgrpo.rollouts import IsolatedHF, make_group, token_logprobs
from mechanisms.dpgrpo.verify import reference_fixture
from privcheck.errors import InvalidParameter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fx():
    return reference_fixture(n_records=3, G=4, L_max=5, seed=2)


def test_token_logprobs_matches_full_log_softmax(fx):
    model, tok, records, replay = fx
    group = replay.group_for(records[0])
    prompt = torch.tensor(tok.encode(records[0].prompt))
    P, L = prompt.numel(), group.token_ids.shape[1]
    full = torch.cat([prompt[None].expand(group.G, -1), group.token_ids], 1)
    logits = model(input_ids=full).logits  # temperature 1, all positions
    expected = torch.stack([torch.stack([torch.log_softmax(logits[g, P - 1 + k], -1)[full[g, P + k]]
                                         for k in range(L)]) for g in range(group.G)])
    got = token_logprobs(model, prompt, group.token_ids)
    assert got.dtype == torch.float64 and got.shape == (group.G, L)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)


def test_isolated_generation_settings_and_shapes(fx):
    model, tok, records, _ = fx
    backend = IsolatedHF.from_config(tok, DPGRPOConfig(n=3, m=1, T=1, sigma=1.0, C=1.0, G=4, L_max=5, tau=0.7))
    gc = backend.generation_config()
    assert (gc.do_sample, gc.temperature, gc.top_k, gc.top_p, gc.max_new_tokens, gc.num_return_sequences) == \
        (True, 0.7, 0, 1.0, 5, 4)
    assert (gc.pad_token_id, gc.eos_token_id) == (tok.pad_id, tok.eos_id)
    state = torch.get_rng_state()
    r1, r2 = TorchRandomness.seeded(9), TorchRandomness.seeded(9)
    a = backend(model, records, "current", r1)
    b = backend(model, records, "current", r2)
    assert torch.equal(torch.get_rng_state(), state)  # framework RNG forked, caller state untouched
    for ga, gb in zip(a, b):
        assert ga.token_ids.shape == (4, 5) and torch.equal(ga.token_ids, gb.token_ids)
        assert ga.rewards is None and len(ga.texts) == 4
        eos_seen = (ga.token_ids == tok.eos_id).cumsum(1)
        expected_mask = ((eos_seen - (ga.token_ids == tok.eos_id).long()) == 0).long()
        assert torch.equal(ga.mask, expected_mask)
    c = backend(model, records, "current", r1)  # fresh draws on the next call
    assert any(not torch.equal(x.token_ids, y.token_ids) for x, y in zip(a, c))
    ref = backend(model, records[:1], "reference", TorchRandomness.seeded(9))
    assert ref[0].token_ids.shape == (4, 5)


def test_replay_returns_stored_groups_without_rewards(fx):
    _, tok, records, replay = fx
    out = replay(None, records, "current")
    for rec, g in zip(records, out):
        assert torch.equal(g.token_ids, replay.group_for(rec).token_ids) and g.rewards is None
    with pytest.raises(InvalidParameter):
        replay.group_for(Record(prompt="9+9=", answer="18"))
    grp = make_group(tok, ["12", "3"], 4, eos=[True, False])
    assert grp.mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]] and grp.texts == ("12", "3")


def test_reference_scope_matches_peft_disable_adapter_and_restores(fx):
    """`policy_scope(model, "reference")` (fast path) gives bit-identical log-probabilities to PEFT's own
    `model.disable_adapter()`, differs from the current policy (LoRA is off the reference), and leaves the
    adapters enabled with every `requires_grad` flag as it was, also when the scope exits by an exception."""
    from mechanisms.dpgrpo.rollouts import plain_lora_layers, policy_scope

    model, tok, records, replay = fx
    group = replay.group_for(records[1])
    prompt = torch.tensor(tok.encode(records[1].prompt))
    flags = {k: p.requires_grad for k, p in model.named_parameters()}
    assert plain_lora_layers(model) is not None  # the fast path is the one exercised here
    with torch.no_grad():
        current = token_logprobs(model, prompt, group.token_ids)
        with model.disable_adapter():
            peft_ref = token_logprobs(model, prompt, group.token_ids)
        with policy_scope(model, "reference"):
            fast_ref = token_logprobs(model, prompt, group.token_ids)
        assert torch.equal(fast_ref, peft_ref)
        assert float((current - peft_ref).abs().max()) > 1e-6
        with pytest.raises(RuntimeError):
            with policy_scope(model, "reference"):
                raise RuntimeError("inside the scope")
        assert torch.equal(token_logprobs(model, prompt, group.token_ids), current)
    assert {k: p.requires_grad for k, p in model.named_parameters()} == flags
    assert model.has_active_enabled_adapter
    # a model whose adapters are already disabled takes PEFT's own path (and stays disabled, as PEFT leaves it)
    model.base_model.disable_adapter_layers()
    try:
        assert plain_lora_layers(model) is None
        with torch.no_grad(), policy_scope(model, "reference"):
            assert torch.equal(token_logprobs(model, prompt, group.token_ids), peft_ref)
    finally:
        model.base_model.enable_adapter_layers()
    with pytest.raises(InvalidParameter):
        with policy_scope(model, "sideways"):
            pass
