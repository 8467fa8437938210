"""Record-gradient arms (Algorithm 1, lines 6–7) against hand computations from `core` and full logits."""

from __future__ import annotations

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.record_grads import (
    FilteredSFT,
    GoldSFT,
    GRPOGradient,
    RecordGradient,
    StepContext,
    ZeroAdvantage,
)
from mechanisms.dpgrpo.records import GradientRecord, Record, RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.rollouts import make_group
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import reference_fixture

G, L_MAX = 8, 6


@pytest.fixture(scope="module")
def fx():
    model, tok, records, replay = reference_fixture(n_records=4, G=G, L_max=L_MAX, seed=5)
    space = core.ParamSpace(model)
    ctx = StepContext(model=model, space=space, tokenizer=tok, beta=0.04, c=1e-4, L_max=L_MAX)
    scored = []
    for r in records:
        g = replay.group_for(r)
        scored.append((r, RolloutGroup(g.token_ids, g.mask, torch.tensor([reward(r, t) for t in g.texts]), g.texts)))
    return model, tok, ctx, scored


def full_logprobs(model, prompt_ids, comp):
    P, L = prompt_ids.numel(), comp.shape[1]
    full = torch.cat([prompt_ids[None].expand(comp.shape[0], -1), comp], 1)
    logits = model(input_ids=full).logits[:, P - 1:P - 1 + L]
    return torch.log_softmax(logits, -1).gather(-1, comp[..., None]).squeeze(-1)


def grad_of(model, loss_fn):
    params = [p for _, p in sorted((k, p) for k, p in model.named_parameters() if p.requires_grad)]
    for p in params:
        p.grad = None
    loss_fn().backward()
    g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).clone() for p in params])
    for p in params:
        p.grad = None
    return g


def hand_grpo_grad(model, tok, record, group, advantages):
    prompt = torch.tensor(tok.encode(record.prompt))
    with torch.no_grad(), model.disable_adapter():
        ref = full_logprobs(model, prompt, group.token_ids)
    return grad_of(model, lambda: core.prompt_loss(full_logprobs(model, prompt, group.token_ids), ref, group.mask,
                                                   advantages, 0.04))


def test_protocol_membership():
    for cls in (GRPOGradient, ZeroAdvantage, GoldSFT, FilteredSFT):
        assert isinstance(cls(), RecordGradient)
    assert GoldSFT.rollout_policy == "none" and FilteredSFT.rollout_policy == "reference"


def test_grpo_gradient_matches_hand_eq7(fx):
    model, tok, ctx, scored = fx
    rec, group = scored[0]
    assert len(set(group.rewards.tolist())) == 2, "precondition: reward variance"
    out = GRPOGradient()(ctx, rec, group)
    expected = hand_grpo_grad(model, tok, rec, group, core.group_advantages(group.rewards))
    torch.testing.assert_close(out.grad, expected, rtol=1e-10, atol=1e-14)
    assert out.grad.dtype == torch.float64 and set(out.private) >= {"loss", "kl", "lengths"}
    assert all(p.grad is None for p in ctx.space.params)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 8])
def test_chunked_equals_unchunked(fx, chunk):
    model, tok, ctx, scored = fx
    rec, group = scored[1]
    full = GRPOGradient()(ctx, rec, group)
    part = GRPOGradient()(ctx, rec, group, chunk_size=chunk)
    rel = float(torch.linalg.vector_norm(part.grad - full.grad) / torch.linalg.vector_norm(full.grad))
    assert rel <= 1e-10
    assert abs(part.private["loss"] - full.private["loss"]) <= 1e-10 * max(1.0, abs(full.private["loss"]))


def test_clip_happens_after_all_chunks(fx):
    model, tok, ctx, scored = fx
    rec, group = scored[2]
    config = DPGRPOConfig(n=4, m=4, T=1, sigma=0.0, C=1.0, G=G, L_max=L_MAX, chunk_size=2, check_mode=True,
                          randomness=0)
    g_full = hand_grpo_grad(model, tok, rec, group, core.group_advantages(group.rewards))
    C = 0.5 * float(torch.linalg.vector_norm(g_full))
    tr = DPTrainer(model, tok, SlotUniverse(4, torch.zeros(4, dtype=torch.bool), [None] * 4),
                   config.replace(C=C), reward, rollout_backend=None)
    contrib = tr.contributions([(rec, group)])[0]
    torch.testing.assert_close(contrib, g_full * (C / float(torch.linalg.vector_norm(g_full))), rtol=1e-10,
                               atol=1e-14)
    # the wrong order (clip each chunk, then sum) gives a different vector at this binding C
    prompt = torch.tensor(tok.encode(rec.prompt))
    adv = core.group_advantages(group.rewards)
    with torch.no_grad(), model.disable_adapter():
        ref = full_logprobs(model, prompt, group.token_ids)
    per_chunk = []
    for s in range(0, G, 2):
        S = slice(s, s + 2)
        g = grad_of(model, lambda: core.prompt_loss(full_logprobs(model, prompt, group.token_ids), ref, group.mask,
                                                    adv, 0.04, rollout_slice=S))
        n = float(torch.linalg.vector_norm(g))
        per_chunk.append(g * min(1.0, C / n))
    assert float(torch.linalg.vector_norm(sum(per_chunk) - contrib)) > 1e-6


def test_record_isolation_bit_identical(fx):
    model, tok, ctx, scored = fx
    a = GRPOGradient()(ctx, *scored[0]).grad
    rec_j, gj = scored[1]
    GRPOGradient()(ctx, rec_j, gj)
    flipped = make_group(tok, ["7", "77", "777", "7777", "1", "12", "123", "1234"], L_MAX,
                         eos=[True, False] * 4)
    GRPOGradient()(ctx, rec_j, RolloutGroup(flipped.token_ids, flipped.mask, 1 - gj.rewards, flipped.texts))
    assert torch.equal(GRPOGradient()(ctx, *scored[0]).grad, a)


def test_zero_advantage_is_kl_only_and_constant_groups_equal(fx):
    model, tok, ctx, scored = fx
    rec, group = scored[0]
    z = ZeroAdvantage()(ctx, rec, group).grad
    expected = hand_grpo_grad(model, tok, rec, group, torch.zeros(G, dtype=torch.float64))
    torch.testing.assert_close(z, expected, rtol=1e-10, atol=1e-14)
    assert float(torch.linalg.vector_norm(z)) > 0
    ones = GRPOGradient()(ctx, rec, RolloutGroup(group.token_ids, group.mask, torch.ones(G), group.texts)).grad
    zeros = GRPOGradient()(ctx, rec, RolloutGroup(group.token_ids, group.mask, torch.zeros(G), group.texts)).grad
    assert torch.equal(ones, zeros) and torch.isfinite(ones).all()
    torch.testing.assert_close(ones, z, rtol=1e-12, atol=1e-15)


def test_gold_sft_is_token_mean_nll_of_solution(fx):
    model, tok, ctx, _ = fx
    rec = Record(prompt="3+4=", answer="7", solution="7")
    out = GoldSFT()(ctx, rec, None)
    prompt = torch.tensor(tok.encode("3+4="))
    target = torch.tensor([tok.encode("7") + [tok.eos_id]])
    expected = grad_of(model, lambda: -full_logprobs(model, prompt, target).mean())
    torch.testing.assert_close(out.grad, expected, rtol=1e-10, atol=1e-14)
    missing = GoldSFT()(ctx, Record(prompt="3+4=", answer="7"), None)
    assert torch.equal(missing.grad, torch.zeros_like(missing.grad)) and missing.private["missing_solution"]


def test_filtered_sft_keeps_accepted_and_zero_if_none(fx):
    model, tok, ctx, scored = fx
    rec, group = scored[3]
    keep = [g for g in range(G) if group.rewards[g] == 1]
    assert keep, "precondition: at least one accepted completion"
    out = FilteredSFT()(ctx, rec, group, chunk_size=3)
    prompt = torch.tensor(tok.encode(rec.prompt))
    ids, m = group.token_ids[keep], group.mask[keep].double()

    def loss():
        u = full_logprobs(model, prompt, ids)
        return (-(u * m).sum(1) / m.sum(1)).mean()

    torch.testing.assert_close(out.grad, grad_of(model, loss), rtol=1e-10, atol=1e-14)
    none = FilteredSFT()(ctx, rec, RolloutGroup(group.token_ids, group.mask, torch.zeros(G), group.texts))
    assert torch.equal(none.grad, torch.zeros_like(none.grad)) and none.private["accepted"] == 0


def test_gradient_record_returns_fixed_vector(fx):
    _, _, ctx, _ = fx
    v = torch.linspace(-1, 1, ctx.space.dim, dtype=torch.float64)
    for arm in (GRPOGradient(), ZeroAdvantage(), GoldSFT(), FilteredSFT()):
        assert torch.equal(arm(ctx, GradientRecord(v), None).grad, v)
