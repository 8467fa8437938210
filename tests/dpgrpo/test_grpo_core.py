"""GRPO pieces of mechanisms.dpgrpo.core (advantages, masks, eq. (7) loss) against independent oracles.

Oracles: eq. (2) by hand in numpy (ddof=1); the k3 closed form and its closed-form gradient; TRL 0.15.2's
per-token loss and completion-mask code transcribed below (an independent transcription, the V1 reference).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mechanisms.dpgrpo.core import completion_mask, group_advantages, k3_kl, prompt_loss

# ----------------------------------------------------------------------- oracles (transcribed, not imported)

def trl_0152_advantages(rewards: torch.Tensor, G: int) -> torch.Tensor:
    """TRL 0.15.2 GRPOTrainer: group mean and torch.std (unbiased) per group, + 1e-4."""
    mean_grouped = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    std_grouped = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    return (rewards - mean_grouped) / (std_grouped + 1e-4)


def trl_0152_loss(per_token_logps, ref_per_token_logps, completion_mask, advantages, beta):
    """TRL 0.15.2 GRPOTrainer.compute_loss, for the G rows of one prompt."""
    per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
    per_token_loss = torch.exp(per_token_logps - per_token_logps.detach()) * advantages.unsqueeze(1)
    per_token_loss = -(per_token_loss - beta * per_token_kl)
    return ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()


def trl_0152_completion_mask(completion_ids, eos_token_id):
    is_eos = completion_ids == eos_token_id
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    sequence_indices = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
    return (sequence_indices <= eos_idx.unsqueeze(1)).int()


def hand_advantages(r):
    r = np.asarray(r, dtype=np.float64)
    return (r - r.mean()) / (np.std(r, ddof=1) + 1e-4)


# ----------------------------------------------------------------------------------------- advantages

@pytest.mark.parametrize("rewards", [[1, 0, 0, 1], [1, 0, 0, 0], [0, 1, 1, 1, 1, 0, 1, 0], [1, 0], [0, 1, 0]])
def test_advantages_match_hand_formula(rewards):
    got = group_advantages(torch.tensor(rewards))
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), hand_advantages(rewards), rtol=1e-14, atol=0)
    trl = trl_0152_advantages(torch.tensor(rewards, dtype=torch.float64), len(rewards))
    np.testing.assert_allclose(got.numpy(), trl.numpy(), rtol=1e-14, atol=0)


def test_advantages_G2_closed_form():
    # r = (1, 0): μ = 1/2, s = sqrt((1/4 + 1/4)/1) = sqrt(1/2), A = ±(1/2)/(sqrt(1/2) + 1e-4)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    got = group_advantages(torch.tensor([1, 0]))
    assert got.tolist() == pytest.approx([a, -a], rel=1e-15)


@pytest.mark.parametrize("rewards", [[0, 0, 0, 0], [1, 1, 1, 1], [1, 1], [0.1, 0.1, 0.1], [7.3] * 5])
def test_constant_group_gives_exact_zero(rewards):
    got = group_advantages(torch.tensor(rewards))
    assert got.dtype == torch.float64
    assert torch.equal(got, torch.zeros(len(rewards), dtype=torch.float64))


def test_advantages_c_parameter():
    r = [1, 0, 0]
    got = group_advantages(torch.tensor(r), c=0.5)
    rr = np.array(r, dtype=np.float64)
    np.testing.assert_allclose(got.numpy(), (rr - rr.mean()) / (np.std(rr, ddof=1) + 0.5), rtol=1e-15)


# ------------------------------------------------------------------------------------------------- k3

def test_k3_nonnegative_and_zero_on_diagonal():
    gen = torch.Generator().manual_seed(1)
    u = torch.randn(1000, dtype=torch.float64, generator=gen) * 3
    ref = torch.randn(1000, dtype=torch.float64, generator=gen) * 3
    assert bool((k3_kl(u, ref) >= 0).all())
    assert torch.equal(k3_kl(u, u), torch.zeros_like(u))
    # closed form at a hand point: d = ref − u = 1 → e − 2
    assert k3_kl(torch.tensor([0.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)).item() == \
        pytest.approx(math.e - 2, rel=1e-15)


def test_k3_gradient_closed_form():
    gen = torch.Generator().manual_seed(2)
    u = (torch.randn(50, dtype=torch.float64, generator=gen) * 2).requires_grad_(True)
    ref = torch.randn(50, dtype=torch.float64, generator=gen) * 2
    k3_kl(u, ref).sum().backward()
    expected = 1 - torch.exp(ref - u.detach())
    torch.testing.assert_close(u.grad, expected, rtol=1e-13, atol=1e-15)


# ------------------------------------------------------------------------------------------ prompt loss

def _random_group(G=5, L=7, seed=3, eos_rows=True):
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(G, L, dtype=torch.float64, generator=gen) * 4)
    ref = (-torch.rand(G, L, dtype=torch.float64, generator=gen) * 4)
    lengths = torch.randint(1, L + 1, (G,), generator=gen)
    lengths[0], lengths[1] = 1, L  # extremes
    mask = (torch.arange(L)[None, :] < lengths[:, None]).to(torch.int64)
    rewards = torch.randint(0, 2, (G,), generator=gen)
    rewards[0], rewards[1] = 0, 1  # non-constant group
    return logp, ref, mask, rewards


@pytest.mark.parametrize("beta", [0.0, 0.04, 1.3])
def test_prompt_loss_matches_trl_0152(beta):
    logp, ref, mask, rewards = _random_group()
    A = group_advantages(rewards)
    u1 = logp.clone().requires_grad_(True)
    u2 = logp.clone().requires_grad_(True)
    ours = prompt_loss(u1, ref, mask, A, beta)
    trl = trl_0152_loss(u2, ref, mask.to(torch.float64), trl_0152_advantages(rewards.to(torch.float64), 5), beta)
    assert ours.dtype == torch.float64 and ours.dim() == 0
    assert ours.item() == pytest.approx(trl.item(), rel=1e-13, abs=1e-15)
    ours.backward()
    trl.backward()
    torch.testing.assert_close(u1.grad, u2.grad, rtol=1e-13, atol=1e-16)


def test_prompt_loss_gradient_closed_form():
    # ∂ℓ/∂u_{g,k} = −(1/G)(1/L_g) m_{g,k} [A_g − β(1 − exp(ref − u))]   (ρ has gradient ∇u, eq. (7))
    logp, ref, mask, rewards = _random_group(G=4, L=6, seed=5)
    A = group_advantages(rewards)
    beta = 0.04
    u = logp.clone().requires_grad_(True)
    prompt_loss(u, ref, mask, A, beta).backward()
    m = mask.to(torch.float64)
    L = m.sum(1, keepdim=True)
    expected = -(1 / 4) * m / L * (A[:, None] - beta * (1 - torch.exp(ref - logp)))
    torch.testing.assert_close(u.grad, expected, rtol=1e-13, atol=1e-16)


def test_prompt_loss_value_is_minus_mean_advantage_at_reference():
    # at u = ref: ρ = 1, K = 0 → ℓ = −(1/G) Σ_g A_g (= 0 for eq. (2) advantages up to rounding)
    logp, _, mask, _ = _random_group(G=3, L=4, seed=7)
    A = torch.tensor([0.5, -2.0, 4.0], dtype=torch.float64)
    assert prompt_loss(logp, logp, mask, A, 0.7).item() == pytest.approx(-(0.5 - 2.0 + 4.0) / 3, rel=1e-15)


@pytest.mark.parametrize("chunks", [[(0, 5)], [(0, 2), (2, 4), (4, 5)], [(0, 1), (1, 5)], [(0, 3), (3, 5)]])
@pytest.mark.parametrize("chunk_rows_only", [False, True])
def test_chunk_losses_sum_to_full_loss(chunks, chunk_rows_only):
    logp, ref, mask, rewards = _random_group()
    A = group_advantages(rewards)
    full = prompt_loss(logp, ref, mask, A, 0.04)
    parts = []
    for a, b in chunks:
        if chunk_rows_only:
            parts.append(prompt_loss(logp[a:b], ref[a:b], mask[a:b], A, 0.04, rollout_slice=slice(a, b)))
        else:
            parts.append(prompt_loss(logp, ref, mask, A, 0.04, rollout_slice=slice(a, b)))
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), rel=1e-13, abs=1e-15)
    # each chunk equals the TRL per-completion term restricted to its rows, divided by G (not by |S|)
    trl_rows = -((((torch.exp(logp - logp) * A[:, None]) - 0.04 * k3_kl(logp, ref)) * mask).sum(1) / mask.sum(1))
    for (a, b), p in zip(chunks, parts):
        assert p.item() == pytest.approx(trl_rows[a:b].sum().item() / 5, rel=1e-13, abs=1e-15)


def test_constant_group_loss_is_kl_only():
    logp, ref, mask, _ = _random_group(seed=11)
    A = group_advantages(torch.ones(5, dtype=torch.int64))
    expected = (0.04 * (k3_kl(logp, ref) * mask).sum(1) / mask.sum(1)).mean()
    assert prompt_loss(logp, ref, mask, A, 0.04).item() == pytest.approx(expected.item(), rel=1e-14)


# ------------------------------------------------------------------------------------------------ masks

EOS = 1


@pytest.mark.parametrize("ids, expected", [
    ([[5, 6, 1, 7, 8]], [[1, 1, 1, 0, 0]]),     # EOS in the middle: included, zeros after
    ([[1, 5, 6]], [[1, 0, 0]]),                 # EOS first: L = 1
    ([[5, 6, 7]], [[1, 1, 1]]),                 # no EOS: all L_max positions
    ([[5, 6, 1]], [[1, 1, 1]]),                 # EOS last
    ([[5, 1, 1, 1]], [[1, 1, 0, 0]]),           # only the first EOS counts
    ([[1, 0, 0], [4, 1, 0]], [[1, 0, 0], [1, 1, 0]]),  # PAD (0) after EOS
    ([[3]], [[1]]),
])
def test_completion_mask_cases(ids, expected):
    got = completion_mask(torch.tensor(ids), EOS)
    assert got.tolist() == expected


def test_completion_mask_matches_trl_transcription():
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 5, (64, 9), generator=gen)
    assert torch.equal(completion_mask(ids, EOS), trl_0152_completion_mask(ids, EOS).to(torch.int64))
