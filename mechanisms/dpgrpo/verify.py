"""Bindings of the verification suite to the trainer's own entry points (spec shared/spec/dpgrpo.md §8).

`bindings_for(trainer, items=..., perturb=...)` returns the trainer's callables under the names of §8, so the
checks exercise production code, not copies. When `privcheck.checks.dpsgd.SuiteBindings` exists, a
`SuiteBindings` is returned (fixture `gradient_record` maps to `make_gradient_record`, plus the public
metadata C, q, n, σ, dim, G, β); otherwise a plain dict with the keys of `BINDING_NAMES`.

`reference_fixture()` builds the float64 reference fixture of §7.1: tiny GPT-2 (all dropouts 0, LayerNorm),
LoRA r = 4, α = 8, dropout 0, moved off the reference by N(0, 0.02²), and `Replay` rollouts.
"""

from __future__ import annotations

import dataclasses
import random

import torch

from privcheck.errors import InvalidParameter

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.randomness import make_randomness
from mechanisms.dpgrpo.records import GradientRecord, RolloutGroup
from mechanisms.dpgrpo.rollouts import make_group, token_logprobs

BINDING_NAMES = ("sample", "advantages", "prompt_loss", "token_logprobs", "record_gradient", "record_loss_and_grad",
                 "contributions", "clipped_sum", "privatize", "noisy_update", "private_update", "flat_update", "clip",
                 "make_randomness", "epsilon_pld", "epsilon_rdp", "calibrate_sigma", "items", "perturb",
                 "gradient_record")


def _unpack(item):
    return (item, None) if isinstance(item, GradientRecord) else item


def perturb_group(tokenizer, group: RolloutGroup, L_max: int) -> RolloutGroup:
    """V6 perturbation: flip every reward and replace completions by ones of different lengths."""
    G = group.G
    texts = ["7" * (1 + (g % max(1, L_max - 1))) for g in range(G)]
    new = make_group(tokenizer, texts, L_max, eos=[g % 2 == 0 for g in range(G)])
    rewards = None if group.rewards is None else 1 - group.rewards.to(torch.int64)
    return RolloutGroup(new.token_ids, new.mask, rewards, new.texts)


def bindings_for(trainer, *, items=None, perturb=None):
    """The §8 bindings of `trainer` (a DPTrainer). `items`: (record, scored group) pairs or GradientRecords used
    as fixtures; `perturb(item) -> item` defaults to `perturb_group` on the group."""
    from privcheck import accounting

    cfg = trainer.config
    arm = trainer.arm

    def sample(n, q):
        return core.poisson_coins(n, q, trainer.randomness.coins)

    def advantages(rewards):
        fn = getattr(arm, "advantages", None)
        return fn(rewards, cfg.c) if fn is not None else core.group_advantages(rewards, cfg.c)

    def prompt_loss(logp, ref_logp, adv, mask, beta, rollout_slice=None):
        return core.prompt_loss(logp, ref_logp, mask, adv, beta, rollout_slice)

    def record_gradient(item):
        return trainer.record_gradient(*_unpack(item))

    def record_loss_and_grad(item, chunk_size=None):
        rec, group = _unpack(item)
        return trainer.record_loss_and_grad(rec, group, chunk_size)

    def _load(params):
        with torch.no_grad():
            off = 0
            for p, k in zip(trainer.space.params, trainer.space.numels):
                p.copy_(params[off:off + k].reshape(p.shape).to(p.dtype))
                off += k

    def _flat_params():
        return torch.cat([p.detach().reshape(-1).clone() for p in trainer.space.params])

    def private_update(params, batch=None):
        """One trainer update from `params` on `batch` (default: the fixture items); returns the new params.
        V4 requires the trainer to be configured with q = 1, σ = 0, C = ∞ and plain SGD."""
        _load(params)
        trainer.apply_update(trainer.noisy_update(list(batch if batch is not None else items or [])))
        return _flat_params()

    def flat_update(params, batch=None):
        """Non-private reference: (1/(n·G))·Σ_i Σ_g token-mean loss with ONE backward, same SGD step."""
        _load(params)
        batch = list(batch if batch is not None else items or [])
        trainer.space.zero_grad()
        total = None
        for rec, group in (_unpack(x) for x in batch):
            prompt = trainer.ctx.prompt_ids(rec)
            ids, mask = group.token_ids.to(trainer.device), group.mask.to(trainer.device)
            with torch.no_grad(), trainer.ctx.reference():
                ref = token_logprobs(trainer.model, prompt, ids)
            logp = token_logprobs(trainer.model, prompt, ids)
            adv = advantages(group.rewards)
            part = core.prompt_loss(logp, ref, mask, adv, cfg.beta) * group.G  # Σ_g token-mean losses
            total = part if total is None else total + part
        G = batch[0][1].G if batch else cfg.G
        if total is not None:
            (total / (cfg.n * G)).backward()
        with torch.no_grad():
            for p in trainer.space.params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-cfg.lr)
        trainer.space.zero_grad()
        return _flat_params()

    def default_perturb(item):
        rec, group = _unpack(item)
        if group is None:
            return item
        return (rec, perturb_group(trainer.tokenizer, group, cfg.L_max))

    bindings = {
        "sample": sample, "advantages": advantages, "prompt_loss": prompt_loss, "token_logprobs": token_logprobs,
        "record_gradient": record_gradient, "record_loss_and_grad": record_loss_and_grad,
        "contributions": trainer.contributions, "clipped_sum": trainer.clipped_sum, "privatize": trainer.privatize,
        "noisy_update": trainer.noisy_update, "private_update": private_update, "flat_update": flat_update,
        "clip": lambda v, C: core.clip_flat(v, C, nonprivate=trainer.nonprivate),
        "make_randomness": make_randomness, "epsilon_pld": accounting.epsilon_pld,
        "epsilon_rdp": accounting.epsilon_rdp, "calibrate_sigma": accounting.calibrate_sigma,
        "items": list(items) if items is not None else None,
        "perturb": perturb if perturb is not None else default_perturb,
        "gradient_record": GradientRecord,
    }
    try:
        from privcheck.checks.dpsgd import SuiteBindings  # written separately; adapt when present
    except ImportError:
        return bindings
    names = {f.name for f in dataclasses.fields(SuiteBindings)}
    extra = {"make_gradient_record": GradientRecord, "model": trainer.model, "C": cfg.C, "q": cfg.q, "n": cfg.n,
             "sigma": cfg.sigma, "dim": trainer.space.dim, "G": cfg.G, "beta": cfg.beta,
             "target": "mechanisms.dpgrpo.DPTrainer"}
    merged = {**bindings, **extra}
    return SuiteBindings(**{k: v for k, v in merged.items() if k in names})


# ------------------------------------------------------------------------------- reference fixture

def replay_groups(tokenizer, records, G, L_max, seed) -> list[RolloutGroup]:
    """Deterministic completions per record (a mix of correct answers, wrong answers and EOS-less digit
    runs, lengths varied), from `random.Random(seed)` — public fixture data for Replay."""
    rng = random.Random(seed)
    out = []
    for rec in records:
        texts, eos = [], []
        for g in range(G):
            kind = rng.randrange(3)
            if kind == 0:
                texts.append(rec.answer); eos.append(True)
            elif kind == 1:
                texts.append(str(rng.randrange(0, 99))); eos.append(True)
            else:
                texts.append("".join(rng.choice("0123456789+=") for _ in range(L_max))); eos.append(False)
        if not any(t == rec.answer for t in texts):
            texts[0], eos[0] = rec.answer, True  # groups have reward variance
        out.append(make_group(tokenizer, texts, L_max, eos=eos))
    return out


def reference_fixture(*, n_records=8, G=4, L_max=6, seed=0, lora_std=0.02):
    """(model, tokenizer, records, Replay backend) in float64, LoRA off the reference (§7.1)."""
    from mechanisms.dpgrpo.models import build_tiny_policy, perturb_lora_
    from mechanisms.dpgrpo.rollouts import Replay
    from mechanisms.dpgrpo.tasks import CharTokenizer, addition_records

    if n_records < 1:
        raise InvalidParameter("n_records", n_records, "an integer >= 1")
    tok = CharTokenizer()
    model = build_tiny_policy(seed, torch.float64, r=4, alpha=8, lora_dropout=0.0, tokenizer=tok)
    perturb_lora_(model, lora_std, seed + 7)
    records = addition_records(n_records, seed)
    groups = replay_groups(tok, records, G, L_max, seed + 11)
    return model, tok, records, Replay(list(zip(records, groups)))
