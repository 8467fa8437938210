"""A small reference binding for the dpgrpo checks, built from `mechanisms/dpgrpo/core.py`, plus broken variants.

The policy is a tiny float64 "LoRA bigram" model: logits(next | prev) = base[prev] + (E[prev] @ A) @ B, with the
base table and E frozen and (A, B) the trainable LoRA pair; π_ref is the model with the adapter disabled. Each item
is one prompt with G replayed completions and rewards, so every record's gradient is a deterministic function of
the record (as the float64 checks require). Gradient-space records are `mechanisms.dpgrpo.records.GradientRecord`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
from dataclasses import dataclass

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.records import GradientRecord
from mechanisms.dpgrpo.verify import plan_epsilon, plan_epsilon_rdp
from privcheck.checks.training import SuiteBindings
from tests.bug_zoo.dpgrpo_variants import sigma_rounded_down  # noqa: F401 - the zoo's accountant row, shared

V, R, BETA = 11, 3, 0.04


class LoraBigram(torch.nn.Module):
    def __init__(self, seed: int = 0, dropout: float = 0.0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.base = torch.nn.Parameter(torch.randn(V, V, generator=g, dtype=torch.float64), requires_grad=False)
        self.emb = torch.nn.Parameter(torch.randn(V, 4, generator=g, dtype=torch.float64), requires_grad=False)
        self.lora_A = torch.nn.Parameter(torch.randn(4, R, generator=g, dtype=torch.float64) * 0.5)
        self.lora_B = torch.nn.Parameter(torch.randn(R, V, generator=g, dtype=torch.float64) * 0.5)
        self.drop = torch.nn.Dropout(dropout)
        self.adapter = True

    def forward(self, input_ids):
        out = self.base[input_ids]
        if self.adapter:
            out = out + self.drop(self.emb[input_ids]) @ self.lora_A @ self.lora_B
        return out


@dataclass(frozen=True)
class Item:
    prompt_ids: torch.Tensor      # [P]
    completion_ids: torch.Tensor  # [G, L]
    mask: torch.Tensor            # [G, L]
    rewards: torch.Tensor         # [G]


def random_item(gen: torch.Generator, G: int = 4, L: int = 5, rewards=None) -> Item:
    prompt = torch.randint(2, V, (3,), generator=gen)
    comp = torch.randint(2, V, (G, L), generator=gen)
    lengths = torch.randint(1, L + 1, (G,), generator=gen)
    for g in range(G):
        if lengths[g] < L:
            comp[g, lengths[g] - 1] = 1          # EOS
            comp[g, lengths[g]:] = 0             # pad
    mask = core.completion_mask(comp, 1)
    if rewards is None:
        rewards = (torch.rand(G, generator=gen) < 0.5).to(torch.float64)
        rewards[0], rewards[1] = 1.0, 0.0        # non-constant group
        if float(rewards.sum()) * 2 == G:        # unbalanced, so flipping the rewards moves batch statistics
            rewards[-1] = 1.0 - rewards[-1]
    return Item(prompt, comp, mask, torch.as_tensor(rewards, dtype=torch.float64))


def flip_and_relength(item: Item) -> Item:
    """V6 perturbation: flip all rewards, replace completions with ones of different lengths."""
    gen = torch.Generator().manual_seed(int(item.completion_ids.sum()) + 99)
    G, L = item.completion_ids.shape
    new = random_item(gen, G=G, L=L + 2, rewards=1.0 - item.rewards)
    return Item(item.prompt_ids, new.completion_ids, new.mask, new.rewards)


class Reference:
    """Reference DP-GRPO pieces from `core`; subclasses override one method to become a bug-zoo variant."""

    def __init__(self, seed: int = 0, C: float = 1.0, dropout: float = 0.0):
        self.model = LoraBigram(seed, dropout)
        self.space = core.ParamSpace(self.model)
        self.C = C
        self.coins = torch.Generator().manual_seed(1000 + seed)
        self.noise = torch.Generator().manual_seed(2000 + seed)

    # --- log-probabilities and loss
    def token_logprobs(self, model, prompt_ids, completion_ids):
        G, L = completion_ids.shape
        P = prompt_ids.shape[0]
        ids = torch.cat([prompt_ids.expand(G, P), completion_ids], dim=1)
        logits = model(input_ids=ids)[:, P - 1:P - 1 + L]
        return torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)

    def advantages(self, rewards):
        return core.group_advantages(rewards)

    def prompt_loss(self, logp, ref_logp, adv, mask, beta, rollout_slice=None):
        return core.prompt_loss(logp, ref_logp, mask, adv, beta, rollout_slice)

    def _ref_logp(self, item):
        with torch.no_grad():
            self.model.adapter = False
            try:
                return self.token_logprobs(self.model, item.prompt_ids, item.completion_ids)
            finally:
                self.model.adapter = True

    def _adv(self, item, batch=None):
        return self.advantages(item.rewards)

    def loss_and_grad(self, item, chunk_size=None, batch=None):
        """(loss, raw grad, list of per-chunk grads)."""
        if isinstance(item, GradientRecord):
            return 0.0, item.v.clone(), [item.v.clone()]
        G = item.completion_ids.shape[0]
        adv = self._adv(item, batch)
        ref = self._ref_logp(item)
        size = chunk_size or G
        total, chunk_grads = 0.0, []
        self.space.zero_grad()
        for start in range(0, G, size):
            before = core.flatten_grads(self.space)
            S = slice(start, min(start + size, G))
            logp = self.token_logprobs(self.model, item.prompt_ids, item.completion_ids[S])
            loss = self.prompt_loss(logp, ref[S], adv, item.mask[S], BETA, S)
            loss.backward()
            total += float(loss.detach())
            chunk_grads.append(core.flatten_grads(self.space) - before)
        grad = core.flatten_grads(self.space)
        self.space.zero_grad()
        return total, grad, chunk_grads

    def record_gradient(self, item):
        return self.loss_and_grad(item)[1]

    def clip(self, v, C):
        return core.clip_flat(v, C, nonprivate=math.isinf(C))

    def contribution(self, item, C, chunk_size=None, batch=None):
        return self.clip(self.loss_and_grad(item, chunk_size, batch)[1], C)

    def record_loss_and_grad(self, item, chunk_size, C):
        loss, grad, _ = self.loss_and_grad(item, chunk_size)
        return loss, grad, self.contribution(item, C, chunk_size)

    def contributions(self, items, C=None):
        return [self.contribution(it, C or self.C, batch=items) for it in items]

    def clipped_sum(self, items, C):
        S = torch.zeros(self.space.dim, dtype=torch.float64)
        for c in self.contributions(items, C):
            S = S + c
        return S

    def divisor(self, items, q, n):
        return q * n

    def privatize(self, S, *, sigma, C, q, n, generator=None):
        return core.privatize(S, sigma, C, q, n, generator or self.noise, nonprivate=(sigma == 0))

    def noisy_update(self, items, *, sigma, C, q, n):
        S = self.clipped_sum(items, C)
        if sigma == 0:
            return S / self.divisor(items, q, n)
        return self.privatize(S, sigma=sigma, C=C, q=q, n=n)

    def sample(self, n, q):
        return core.poisson_coins(n, q, self.coins)

    def make_randomness(self, seed=None, release=False):
        if seed is not None and release:
            raise ValueError("a release-mode trainer refuses a seed")
        if seed is None:
            s1, s2 = (int.from_bytes(os.urandom(8), "little") for _ in range(2))
        else:
            s1, s2 = seed * 2 + 1, seed * 2 + 2
        coins, noise = torch.Generator().manual_seed(s1), torch.Generator().manual_seed(s2)
        return types.SimpleNamespace(
            sample_coins=lambda n, q: core.poisson_coins(n, q, coins),
            privatize=lambda S, *, sigma, C, q, n: core.privatize(S, sigma, C, q, n, noise),
            privacy_release=seed is None)

    # --- V4
    def _set(self, params):
        with torch.no_grad():
            off = 0
            for p in self.space.params:
                p.copy_(params[off:off + p.numel()].reshape(p.shape))
                off += p.numel()

    def _get(self):
        return torch.cat([p.detach().reshape(-1).clone() for p in self.space.params])

    def private_update(self, params, items, lr=0.5):
        self._set(params)
        coins = core.poisson_coins(len(items), 1.0, self.coins)
        batch = [it for it, c in zip(items, coins.tolist()) if c]
        g_hat = self.noisy_update(batch, sigma=0.0, C=math.inf, q=1.0, n=len(items))
        return self._get() - lr * g_hat

    @staticmethod
    def flat_update(model, space, params, items, lr=0.5):
        """Independent flat loss (1/(n·G))·Σ_i Σ_g token-mean loss, one backward, SGD step (test-local code)."""
        with torch.no_grad():
            off = 0
            for p in space.params:
                p.copy_(params[off:off + p.numel()].reshape(p.shape))
                off += p.numel()
        total = 0.0
        n = len(items)
        for it in items:
            G, L = it.completion_ids.shape
            P = it.prompt_ids.shape[0]
            ids = torch.cat([it.prompt_ids.expand(G, P), it.completion_ids], dim=1)
            with torch.no_grad():
                model.adapter = False
                ref = torch.log_softmax(model(ids)[:, P - 1:P - 1 + L], -1)
                model.adapter = True
            lp = torch.log_softmax(model(ids)[:, P - 1:P - 1 + L], -1)
            u = lp.gather(-1, it.completion_ids.unsqueeze(-1)).squeeze(-1)
            r = ref.gather(-1, it.completion_ids.unsqueeze(-1)).squeeze(-1)
            mu = it.rewards.mean()
            s = it.rewards.std(unbiased=True)
            A = (it.rewards - mu) / (s + 1e-4)
            d = r - u
            tok = torch.exp(u - u.detach()) * A[:, None] - BETA * (torch.exp(d) - d - 1)
            m = it.mask.to(torch.float64)
            total = total - ((tok * m).sum(1) / m.sum(1)).sum() / (n * G)
        for p in space.params:
            p.grad = None
        total.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in space.params])
        for p in space.params:
            p.grad = None
        return torch.cat([p.detach().reshape(-1) for p in space.params]) - lr * grad

    # --- bindings
    def bindings(self, *, with_accountant: bool = True) -> SuiteBindings:
        gen = torch.Generator().manual_seed(7)
        items = [random_item(gen) for _ in range(5)]
        additions = [random_item(gen) for _ in range(20)]
        const_c = random_item(gen, rewards=[1.0] * 4)
        const_w = dataclasses.replace(const_c, rewards=torch.zeros(4, dtype=torch.float64))
        chunk_item = random_item(gen, G=8, L=6)
        v4_items = [random_item(gen) for _ in range(4)]
        cases = [(it.prompt_ids, it.completion_ids) for it in items[:3]]
        params0 = self._get()

        def reference_record_gradient(item):
            saved = self._get()
            with torch.no_grad():
                self.model.lora_B.zero_()                    # B = 0: π_θ = π_ref
            try:
                return self.record_gradient(item)
            finally:
                self._set(saved)

        def flat_update(params):
            out = self.flat_update(self.model, self.space, params, v4_items)
            self._set(params0)
            return out

        def private_update(params):
            out = self.private_update(params, v4_items)
            self._set(params0)
            return out

        b = SuiteBindings(
            sample=self.sample, advantages=self.advantages, prompt_loss=self.prompt_loss,
            token_logprobs=self.token_logprobs, record_gradient=self.record_gradient,
            record_loss_and_grad=self.record_loss_and_grad, contributions=self.contributions,
            clipped_sum=self.clipped_sum, privatize=self.privatize, noisy_update=self.noisy_update,
            private_update=private_update, flat_update=flat_update, clip=self.clip,
            make_randomness=self.make_randomness,
            items=items, additions=additions, make_gradient_record=GradientRecord, perturb=flip_and_relength,
            constant_items=(const_c, const_w), reference_record_gradient=reference_record_gradient,
            chunk_item=chunk_item, initial_params=params0, model=self.model, logprob_cases=cases,
            C=self.C, q=0.25, n=16, sigma=0.8, dim=self.space.dim, G=4, beta=BETA, target="tests.reference")
        if with_accountant:      # the plan's accountant path, as mechanisms.dpgrpo.verify binds it
            b.epsilon_pld, b.epsilon_rdp = plan_epsilon, plan_epsilon_rdp
        return b


# ------------------------------------------------------------------------------------- bug zoo variants

class BatchAdvantageNorm(Reference):
    """Advantages normalised with mean/std over all prompts of the batch (→ V6 trainer level)."""

    def _adv(self, item, batch=None):
        if not batch:
            return super()._adv(item)
        allr = torch.cat([it.rewards for it in batch if isinstance(it, Item)])
        return (item.rewards - allr.mean()) / (allr.std() + 1e-4)


class PerCompletionClip(Reference):
    """Each completion's gradient clipped to C, then summed (→ V3)."""

    def contribution(self, item, C, chunk_size=None, batch=None):
        if isinstance(item, GradientRecord):
            return super().contribution(item, C)
        _, _, parts = self.loss_and_grad(item, 1)
        return sum(self.clip(g, C) for g in parts)


class RealisedBatchDivisor(Reference):
    """Divides by the realised batch size instead of q·n (→ V9)."""

    def divisor(self, items, q, n):
        return max(len(items), 1)


class ShuffledFixedBatches(Reference):
    """Shuffle and take a fixed-size batch of round(q·n) (→ V5)."""

    def sample(self, n, q):
        perm = torch.randperm(n, generator=self.coins)
        out = torch.zeros(n, dtype=torch.bool)
        out[perm[:max(1, round(q * n))]] = True
        return out


class NoiseSigmaOnly(Reference):
    """z ~ N(0, σ²) instead of N(0, σ²C²) (→ V10)."""

    def privatize(self, S, *, sigma, C, q, n, generator=None):
        z = torch.randn(S.shape, generator=self.noise, dtype=S.dtype) * sigma
        return (S + z) / (q * n)


class ClipPerChunk(Reference):
    """Clips each rollout chunk before accumulating (→ V8)."""

    def contribution(self, item, C, chunk_size=None, batch=None):
        _, _, parts = self.loss_and_grad(item, chunk_size)
        return sum(self.clip(g, C) for g in parts)


class SkipConstantGroups(Reference):
    """Drops records whose rewards are constant (→ V7 retention)."""

    def contributions(self, items, C=None):
        keep = [it for it in items if not (isinstance(it, Item) and bool((it.rewards == it.rewards[0]).all()))]
        return super().contributions(keep, C)


class ReusedSeededNoise(Reference):
    """Re-seeds the noise generator with a fixed seed at every draw (→ V11)."""

    def make_randomness(self, seed=None, release=False):
        h = super().make_randomness(seed, release)
        h.privatize = lambda S, *, sigma, C, q, n: core.privatize(S, sigma, C, q, n,
                                                                   torch.Generator().manual_seed(42))
        return h


class NonfinitePassthrough(Reference):
    """A NaN record gradient enters the sum (→ V2)."""

    def clip(self, v, C):
        if not bool(torch.isfinite(v).all()) or not math.isfinite(float(torch.linalg.vector_norm(v))):
            return v.clone()
        return super().clip(v, C)


class GroupSumLoss(Reference):
    """Sums the completion losses instead of averaging over G (→ V1, V4)."""

    def prompt_loss(self, logp, ref_logp, adv, mask, beta, rollout_slice=None):
        return super().prompt_loss(logp, ref_logp, adv, mask, beta, rollout_slice) * adv.shape[0]
