"""Every public constant is validated with `InvalidParameter` naming it (the public configuration of Algorithm 1)."""

from __future__ import annotations

import math

import pytest
import torch

from mechanisms.dpgrpo.core import (
    ParamSpace,
    clip_flat,
    completion_mask,
    group_advantages,
    k3_kl,
    poisson_coins,
    privatize,
    prompt_loss,
    unflatten_into,
)
from mechanisms.dpgrpo.models import build_tiny_policy
from mechanisms.dpgrpo.records import Record, RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.tasks import CharTokenizer, addition_records
from privcheck.errors import InvalidParameter

NAN, INF = math.nan, math.inf
GEN = torch.Generator()
V = torch.ones(3, dtype=torch.float64)


def raises(name, fn, *args, **kw):
    with pytest.raises(InvalidParameter) as err:
        fn(*args, **kw)
    assert err.value.name == name, f"expected {name!r}, got {err.value.name!r}: {err.value}"
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("n", [0, -1, 1.5, NAN, True, "3"])
def test_coins_bad_n(n):
    raises("n", poisson_coins, n, 0.5, GEN)


@pytest.mark.parametrize("q", [0, -0.1, 1.01, NAN, INF])
def test_coins_bad_q(q):
    raises("q", poisson_coins, 5, q, GEN)


def test_coins_bad_generator():
    raises("generator", poisson_coins, 5, 0.5, 42)


def test_advantages_bad():
    raises("G", group_advantages, torch.tensor([1]))
    raises("G", group_advantages, torch.tensor([], dtype=torch.float64))
    raises("rewards", group_advantages, torch.tensor([1.0, NAN]))
    raises("rewards", group_advantages, torch.tensor([1.0, INF]))
    raises("rewards", group_advantages, [1, 0])
    raises("rewards", group_advantages, torch.tensor([[1, 0]]))
    for c in (0, -1e-4, NAN, INF):
        raises("c", group_advantages, torch.tensor([1, 0]), c=c)


def test_k3_bad_shapes():
    raises("ref_logp", k3_kl, torch.zeros(3), torch.zeros(4))


def test_prompt_loss_bad():
    u = torch.zeros(3, 2, dtype=torch.float64)
    m = torch.ones(3, 2)
    A = torch.zeros(3, dtype=torch.float64)
    for beta in (-0.1, NAN, INF):
        raises("beta", prompt_loss, u, u, m, A, beta)
    raises("G", prompt_loss, u[:1], u[:1], m[:1], A[:1], 0.04)
    raises("mask", prompt_loss, u, u, torch.tensor([[1, 0], [0, 0], [1, 1]]), A, 0.04)  # L_g = 0
    raises("mask", prompt_loss, u, u, torch.full((3, 2), 2), A, 0.04)
    raises("ref_logp", prompt_loss, u, torch.zeros(3, 3, dtype=torch.float64), m, A, 0.04)
    raises("logp", prompt_loss, torch.zeros(4, 2, dtype=torch.float64), u, m, A, 0.04)
    for s in (slice(0, 0), slice(2, 1), slice(0, 3, 2), [0, 1], slice(5, 7)):
        raises("rollout_slice", prompt_loss, u, u, m, A, 0.04, rollout_slice=s)


def test_completion_mask_bad():
    raises("token_ids", completion_mask, torch.zeros(2, 3), 1)
    raises("token_ids", completion_mask, torch.zeros(2, 0, dtype=torch.long), 1)
    raises("eos_id", completion_mask, torch.zeros(2, 3, dtype=torch.long), -1)


@pytest.mark.parametrize("C", [0, -1, NAN, INF, -INF])
def test_clip_bad_C(C):
    raises("C", clip_flat, V, C)


def test_clip_bad_v():
    raises("v", clip_flat, torch.ones(2, 2), 1.0)
    raises("v", clip_flat, torch.ones(3, dtype=torch.long), 1.0)


def test_privatize_bad():
    for sigma in (-1, NAN, INF, 0):
        raises("sigma", privatize, V, sigma, 1.0, 0.5, 10, GEN)
    for C in (0, -1, NAN, INF):
        raises("C", privatize, V, 1.0, C, 0.5, 10, GEN)
    raises("C", privatize, V, 1.0, INF, 0.5, 10, GEN, nonprivate=True)  # C = ∞ needs σ = 0
    for q in (0, 1.5, NAN):
        raises("q", privatize, V, 1.0, 1.0, q, 10, GEN)
    for n in (0, -3, 2.5):
        raises("n", privatize, V, 1.0, 1.0, 0.5, n, GEN)
    raises("generator", privatize, V, 1.0, 1.0, 0.5, 10, None)


def test_paramspace_bad():
    raises("params", ParamSpace, [])
    raises("params", ParamSpace, 3)
    p = torch.nn.Parameter(torch.zeros(2))
    raises("params", ParamSpace, [("a", p), ("a", p)])
    raises("vector", unflatten_into, torch.zeros(3), ParamSpace([("a", p)]))


def test_records_bad():
    raises("prompt", Record, 1, "2")
    raises("answer", Record, "1+1=", 2)
    raises("n", SlotUniverse, 0, torch.zeros(0, dtype=torch.bool), [])
    raises("present", SlotUniverse, 2, torch.zeros(2), [None, None])
    raises("records", SlotUniverse, 2, torch.zeros(2, dtype=torch.bool), [None])
    raises("records[0]", SlotUniverse, 1, torch.ones(1, dtype=torch.bool), [None])
    U = SlotUniverse(2, torch.zeros(2, dtype=torch.bool), [None, None])
    raises("coins", U.batch, torch.ones(3, dtype=torch.bool))
    raises("token_ids", RolloutGroup, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3))
    raises("mask", RolloutGroup, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 2))


def test_tasks_and_models_bad():
    tok = CharTokenizer()
    raises("text", tok.encode, "1-2")
    raises("chars", CharTokenizer, "aa")
    raises("max_operand", addition_records, 3, 0, max_operand=-1)
    raises("dtype", build_tiny_policy, 0, torch.float16)
    raises("r", build_tiny_policy, 0, torch.float32, r=0)
    raises("lora_dropout", build_tiny_policy, 0, torch.float32, lora_dropout=1.0)
