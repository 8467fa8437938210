"""Bindings of the verification suite to the trainer's own entry points (docs/dpgrpo.md, the checks V1–V13).

`bindings_for(trainer, items=..., perturb=..., ...)` returns a `privcheck.checks.training.SuiteBindings` whose
callables are the trainer's production methods (`sample_coins`, `record_gradient`, `record_loss_and_grad`,
`contributions`, `clipped_sum`, `privatize`, `noisy_update`, `step`/`apply_update`, `clip`); where a check varies
C, σ, q, n or the chunk size, a trainer of the same class is built with `config.replace(...)` (sharing the model,
arm, rollouts and randomness), so a subclass that overrides one method is checked through that method.

V1 checks the loss of the trainer's gradient path: `core.prompt_loss` (what the arms call), or the trainer's own
`prompt_loss` method where a (sub)class defines one.

`reference_fixture()` builds the float64 reference fixture: tiny GPT-2 (all dropouts 0, LayerNorm),
LoRA r = 4, α = 8, dropout 0, moved off the reference by N(0, 0.02²), and `Replay` rollouts of the addition task.
`reference_setup(seed, trainer_cls)` builds a trainer on it with its bindings. `preflight_fixture(precision)` /
`preflight_setup(precision, seed, trainer_cls)` do the same for V13 on the tiny Qwen2 (2 layers, hidden 64,
4 heads, 2 KV heads, dropout 0) with a float32 or bfloat16 base and float32 LoRA. `run_suite(seed)` runs the
catalogue (`privcheck.checks.training.CHECKS`) and the self-check V12 in float64, V13 at float32 and bfloat16,
and returns a `SuiteResult` (entry point `privcheck.suites: dpgrpo`) in which every result carries its precision.

`accountant_agreement` compares the ε the trainer reports (`trainer.privacy_claim["epsilon"]`) for its plan's
event and δ (`accountant_event`, `delta`, `user_epsilon`) with privcheck's PLD. The accountant bindings of the
self-check V12 (`epsilon_pld`, `epsilon_rdp`, `calibrate_sigma`) go through the privacy plan, the path every
configuration takes: `plan_epsilon` is `DPGRPOPlan(...).epsilon()`, `plan_epsilon_rdp` the plan's
event under `privcheck.accounting.epsilon(..., method="rdp")`, and `plan_calibration` is
`DPGRPOPlan.from_target(...).calibration`. The suite's privacy claim (`fixture_claim`) is the fixture
configuration's `plan.claim()`.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.fixtures import PREFLIGHT_BASE_DTYPES, preflight_fixture, reference_fixture, replay_groups
from mechanisms.dpgrpo.identity import dptrainer_subject
from mechanisms.dpgrpo.randomness import make_randomness
from mechanisms.dpgrpo.records import GradientRecord, RolloutGroup
from mechanisms.dpgrpo.rollouts import make_group, token_logprobs
from mechanisms.dpgrpo.whole_run import whole_run_bindings
from mechanisms.dpgrpo.whole_step import whole_step_bindings, whole_step_fixture
from privcheck.errors import InvalidParameter

__all__ = ["BINDING_NAMES", "PREFLIGHT", "PREFLIGHT_BASE_DTYPES", "PREFLIGHT_V3", "REFERENCE", "RandomnessHandle",
           "bindings_for", "fixture_claim", "perturb_group", "plan_calibration", "plan_epsilon", "plan_epsilon_rdp",
           "preflight_fixture", "preflight_setup", "reference_fixture", "reference_setup", "replay_groups",
           "run_preflight", "run_suite"]

BINDING_NAMES = ("sample", "advantages", "prompt_loss", "token_logprobs", "record_gradient", "record_loss_and_grad",
                 "contributions", "clipped_sum", "privatize", "noisy_update", "private_update", "flat_update", "clip",
                 "make_randomness", "epsilon_pld", "epsilon_rdp", "calibrate_sigma", "items", "perturb",
                 "gradient_record")


def perturb_group(tokenizer, group: RolloutGroup, L_max: int) -> RolloutGroup:
    """V6 perturbation: flip every reward and replace completions by ones of different lengths."""
    G = group.G
    texts = ["7" * (1 + (g % max(1, L_max - 1))) for g in range(G)]
    new = make_group(tokenizer, texts, L_max, eos=[g % 2 == 0 for g in range(G)])
    rewards = None if group.rewards is None else 1 - group.rewards.to(torch.int64)
    return RolloutGroup(new.token_ids, new.mask, rewards, new.texts)


def _m_for(q, n):
    """The config's expected batch m = q·n (an int when q·n is integral), so that config.q = m/n reproduces q."""
    m = q * n
    return int(round(m)) if abs(m - round(m)) < 1e-12 * max(1.0, abs(m)) and round(m) >= 1 else m


class _Replicas:
    """Trainers of the same class as `base`, sharing its model, tokenizer, verifier, arm, rollout backend and
    randomness, with a config varied by `DPGRPOConfig.replace` (cached per change set). So a check that varies
    C, σ, q, n or the chunk size runs the production methods of `type(base)`, never a copy of the math."""

    def __init__(self, base):
        self.base = base
        self._cache = {}

    def __call__(self, **changes):
        from mechanisms.dpgrpo.records import SlotUniverse

        key = tuple(sorted(changes.items()))
        tr = self._cache.get(key)
        if tr is not None:
            return tr
        base = self.base
        cfg = base.config
        if not changes:
            return base
        C = changes.get("C", cfg.C)
        if C == math.inf:  # C = ∞ exists only without noise (non-private check configuration)
            changes.setdefault("sigma", 0.0)
        sigma = changes.get("sigma", cfg.sigma)
        if sigma == 0 or C == math.inf:
            changes.setdefault("check_mode", True)
        new_cfg = cfg.replace(**changes)
        universe = base.universe if new_cfg.n == cfg.n else SlotUniverse(
            new_cfg.n, torch.zeros(new_cfg.n, dtype=torch.bool), [None] * new_cfg.n)
        tr = type(base)(base.model, base.tokenizer, universe, new_cfg, base.verifier, record_gradient=base.arm,
                        rollout_backend=base.rollout_backend, randomness=base.randomness)
        self._cache[key] = tr
        return tr


class RandomnessHandle:
    """What V11's `make_randomness` returns: a fresh trainer of the same class with its own `TorchRandomness`;
    `sample_coins(n, q)` and `privatize(S, *, sigma, C, q, n)` are that trainer's production methods."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._replicas = _Replicas(trainer)

    @property
    def privacy_release(self) -> bool:
        return self.trainer.privacy_release

    def sample_coins(self, n, q):
        return self._replicas(n=n, m=_m_for(q, n)).sample_coins()

    def privatize(self, S, *, sigma, C, q, n):
        return self._replicas(sigma=sigma, C=C, n=n, m=_m_for(q, n)).privatize(S)


def _accounting_plan(q, sigma, T, delta):
    # ε depends on (q, σ, T, δ) only; records = 1 and C = 1 are placeholders of the plan's other fields.
    from privcheck.accounting import DPGRPOPlan
    return DPGRPOPlan(records=1, sampling_rate=q, noise_multiplier=sigma, clip_norm=1.0, steps=T, delta=delta)


def plan_epsilon(q, sigma, T, delta):
    """V12's `epsilon_pld`: the ε record of the plan at (q, σ, T, δ) (`plan.epsilon()`, PLD)."""
    return _accounting_plan(q, sigma, T, delta).epsilon()


def plan_epsilon_rdp(q, sigma, T, delta):
    """V12's `epsilon_rdp`: the RDP cross-check of the plan's event (`epsilon(plan.event, δ, method="rdp")`)."""
    from privcheck.accounting import epsilon
    plan = _accounting_plan(q, sigma, T, delta)
    return epsilon(plan.event, plan.delta, method="rdp")


def plan_calibration(q, T, delta, target_epsilon):
    """V12's `calibrate_sigma`: the calibration `DPGRPOConfig.from_target` uses (`DPGRPOPlan.from_target`)."""
    from privcheck.accounting import DPGRPOPlan
    return DPGRPOPlan.from_target(records=1, sampling_rate=q, clip_norm=1.0, steps=T, delta=delta,
                                  target_epsilon=target_epsilon).calibration


def bindings_for(trainer, *, items=None, perturb=None, additions=None, constant_items=None, chunk_item=None,
                 update_items=None):
    """The bindings of `trainer` (a DPTrainer or subclass) as a `privcheck.checks.training.SuiteBindings`.

    Fixtures: `items` — (record, scored group) pairs or GradientRecords (V3 base, V6, V7 others); `additions`
    (V3), `constant_items` ((all-correct, all-wrong) versions of one record, V7), `chunk_item` (G = 8, V8),
    `update_items` ((record, group) pairs for V4; default: the record items of `items`). `perturb(item) -> item`
    defaults to `perturb_group` on the group.

    Every callable goes through the trainer's own entry points; where a check varies C, σ, q, n or the chunk
    size, a trainer of the same class with `config.replace(...)` is built (shared model, arm, randomness).
    `flat_update` (V4) is the one independent path: the flat GRPO loss written from eqs. (2) and (7).
    `subject` is the trainer's identity (`mechanisms.dpgrpo.identity`): the results of `run_suite` carry it."""
    from privcheck.checks.training import SuiteBindings

    cfg = trainer.config
    arm = trainer.arm
    replica = _Replicas(trainer)
    items = list(items) if items is not None else None

    def _item(x):
        return trainer.unpack(x)

    def sample(n, q):
        return replica(n=n, m=_m_for(q, n)).sample_coins()

    def advantages(rewards):
        fn = getattr(arm, "advantages", None)
        return fn(rewards, cfg.c) if fn is not None else core.group_advantages(rewards, cfg.c)

    # V1 checks the loss the trainer's gradient path uses: a trainer (subclass) that computes eq. (7) through
    # its own `prompt_loss(logp, ref_logp, mask, advantages, beta, rollout_slice)` method is checked through
    # that method; otherwise `core.prompt_loss`, the function the production arms call.
    own_loss = getattr(trainer, "prompt_loss", None)

    def prompt_loss(logp, ref_logp, adv, mask, beta, rollout_slice=None):
        fn = own_loss if callable(own_loss) else core.prompt_loss
        return fn(logp, ref_logp, mask, adv, beta, rollout_slice)

    def record_gradient(item):
        return trainer.record_gradient(*_item(item))

    def record_loss_and_grad(item, chunk_size=None, C=None):
        rec, group = _item(item)
        loss, grad = trainer.record_loss_and_grad(rec, group, chunk_size)
        if C is None:
            return loss, grad
        clipped = replica(C=C, chunk_size=chunk_size).contributions([item])[0]
        return loss, grad, clipped

    def clipped_sum(batch, C=None):
        return (trainer if C is None else replica(C=C)).clipped_sum(list(batch))

    def privatize(S, *, sigma, C, q, n):
        return replica(sigma=sigma, C=C, n=n, m=_m_for(q, n)).privatize(S)

    def noisy_update(batch, *, sigma, C, q, n):
        return replica(sigma=sigma, C=C, n=n, m=_m_for(q, n)).noisy_update(list(batch))

    def clip(v, C):
        return (replica(C=C) if C != cfg.C else trainer).clip(v)

    def make_randomness_(seed=None, release=False):
        from mechanisms.dpgrpo.records import SlotUniverse

        R = make_randomness(seed=seed) if (release or seed is None) else make_randomness("seeded", seed=seed)
        mode = "os_entropy" if R.privacy_release else int(seed)
        new_cfg = cfg.replace(randomness=mode)
        tr = type(trainer)(trainer.model, trainer.tokenizer,
                           SlotUniverse(new_cfg.n, torch.zeros(new_cfg.n, dtype=torch.bool), [None] * new_cfg.n),
                           new_cfg, trainer.verifier, record_gradient=arm, rollout_backend=trainer.rollout_backend,
                           randomness=R)
        return RandomnessHandle(tr)

    # ---------------------------------------------------------------- V4
    def _load(params):
        with torch.no_grad():
            off = 0
            for p, k in zip(trainer.space.params, trainer.space.numels):
                p.copy_(params[off:off + k].reshape(p.shape).to(p.dtype))
                off += k
            for p in trainer.space.params:
                p.grad = None

    def _flat_params():
        return torch.cat([p.detach().reshape(-1).clone() for p in trainer.space.params])

    initial = _flat_params()
    upd = [x for x in (update_items if update_items is not None else (items or []))
           if not isinstance(x, GradientRecord)]
    upd = [_item(x) for x in upd]
    v4_trainer = None
    if upd:
        from mechanisms.dpgrpo.records import SlotUniverse
        from mechanisms.dpgrpo.rollouts import Replay

        n4 = len(upd)
        v4_cfg = cfg.replace(n=n4, m=n4, sigma=0.0, C=math.inf, check_mode=True, optimizer="sgd",
                             randomness=cfg.randomness)
        v4_trainer = type(trainer)(trainer.model, trainer.tokenizer,
                                   SlotUniverse(n4, torch.ones(n4, dtype=torch.bool), [r for r, _ in upd]),
                                   v4_cfg, trainer.verifier, record_gradient=arm,
                                   rollout_backend=Replay([(r, g) for r, g in upd]), randomness=trainer.randomness)

    def private_update(params):
        """One production round (`step()`: coins, Replay rollouts, verifier, clip, sum, privatize, SGD step) of
        a trainer with q = 1, σ = 0, C = ∞ and plain SGD, from `params`; the model is restored afterwards."""
        if v4_trainer is None:
            raise InvalidParameter("items", None, "at least one (record, group) item for V4")
        _load(params)
        try:
            v4_trainer.step()
            return _flat_params()
        finally:
            _load(initial)

    def flat_update(params):
        """Independent non-private reference: one SGD step (lr of the config) on
        (1/(n·G))·Σ_i Σ_g (1/L_g)·Σ_k m·[−(ρ·A_g − β·K)] with ONE backward; log-probabilities from the full
        logits, A from eq. (2), K the k3 estimator, rewards from the verifier on the completion texts."""
        if not upd:
            raise InvalidParameter("items", None, "at least one (record, group) item for V4")
        _load(params)
        model, tok = trainer.model, trainer.tokenizer
        n = len(upd)
        try:
            total = 0.0
            for rec, group in upd:
                texts = group.texts if group.texts is not None else [tok.decode(r) for r in group.token_ids.tolist()]
                r = torch.tensor([float(trainer.verifier(rec, t)) for t in texts], dtype=torch.float64)
                G = r.numel()
                mu = r.mean()
                s = torch.sqrt(((r - mu) ** 2).sum() / (G - 1))
                A = torch.zeros(G, dtype=torch.float64) if bool((r == r[0]).all()) else (r - mu) / (s + cfg.c)
                prompt = torch.tensor(list(tok.encode(rec.prompt))[-cfg.max_prompt_len:], dtype=torch.long)
                comp = group.token_ids
                P, L = prompt.numel(), comp.shape[1]
                ids = torch.cat([prompt[None, :].expand(G, P), comp], dim=1)

                def logps():
                    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, P - 1:P - 1 + L]
                    return torch.log_softmax(logits.to(torch.float64), -1).gather(-1, comp[..., None]).squeeze(-1)

                with torch.no_grad(), model.disable_adapter():
                    ref = logps()
                u = logps()
                d = ref - u
                per_token = -(torch.exp(u - u.detach()) * A[:, None] - cfg.beta * (torch.exp(d) - d - 1))
                m = group.mask.to(torch.float64)
                total = total + ((per_token * m).sum(1) / m.sum(1)).sum() / (n * G)
            total.backward()
            with torch.no_grad():
                for p in trainer.space.params:
                    if p.grad is not None:
                        p.sub_(cfg.lr * p.grad)
            return _flat_params()
        finally:
            _load(initial)

    def reference_record_gradient(item):
        """The production record gradient with LoRA at the reference (every lora_B = 0, so π_θ = π_ref)."""
        saved = _flat_params()
        try:
            with torch.no_grad():
                for name, p in zip(trainer.space.names, trainer.space.params):
                    if "lora_B" in name:
                        p.zero_()
            return trainer.record_gradient(*_item(item))
        finally:
            _load(saved)

    def default_perturb(item):
        rec, group = _item(item)
        if group is None:
            return item
        return (rec, perturb_group(trainer.tokenizer, group, cfg.L_max))

    # accountant_agreement: the ε the trainer itself reports (its privacy claim, computed through its plan) for
    # the trainer's own event and δ; the non-private arm has no plan and leaves the check skipped.
    plan = trainer.plan
    accountant_event = plan.event if plan is not None else None
    accountant_delta = plan.delta if plan is not None else None

    def user_epsilon():
        return trainer.privacy_claim["epsilon"]

    logprob_cases = None
    if items:
        logprob_cases = [(trainer.ctx.prompt_ids(r), g.token_ids) for r, g in
                         (_item(x) for x in items[:3]) if g is not None]

    return SuiteBindings(
        sample=sample, advantages=advantages, prompt_loss=prompt_loss, token_logprobs=token_logprobs,
        record_gradient=record_gradient, record_loss_and_grad=record_loss_and_grad,
        contributions=trainer.contributions, clipped_sum=clipped_sum, privatize=privatize,
        noisy_update=noisy_update, private_update=private_update, flat_update=flat_update, clip=clip,
        make_randomness=make_randomness_, epsilon_pld=plan_epsilon, epsilon_rdp=plan_epsilon_rdp,
        calibrate_sigma=plan_calibration,
        items=items, additions=list(additions) if additions is not None else None,
        make_gradient_record=GradientRecord, perturb=perturb if perturb is not None else default_perturb,
        constant_items=list(constant_items) if constant_items is not None else None,
        reference_record_gradient=reference_record_gradient, chunk_item=chunk_item,
        initial_params=initial if upd else None, model=trainer.model, logprob_cases=logprob_cases,
        C=cfg.C, q=cfg.q, n=cfg.n, sigma=cfg.sigma, dim=trainer.space.dim, G=cfg.G, beta=cfg.beta,
        accountant_event=accountant_event, delta=accountant_delta,
        user_epsilon=user_epsilon if plan is not None else None,
        target=f"{type(trainer).__module__}.{type(trainer).__qualname__}", subject=dptrainer_subject(trainer))


# ------------------------------------------------------------------------------- fixtures

# ------------------------------------------------------------------------------- setups and suite

REFERENCE = {"n_base": 5, "n_additions": 8, "G": 4, "L_max": 6, "n": 16, "m": 4, "T": 100, "sigma": 1.0,
             "C": 1.0, "lr": 0.05}
# V13 reruns V3 on fewer records than the float64 suite: at lower precision it looks for rounding beyond 1e-6,
# which would show on any record; the wide search for a coupling between records is the float64 V3.
PREFLIGHT = dict(REFERENCE, n_base=3, n_additions=2)
PREFLIGHT_V3 = {"n_gradient_records": 4}


def _with_variance(tokenizer, rec, group, L_max):
    """Replace one completion so that the group's rewards are not constant (keeps V6/V3 items informative)."""
    texts = list(group.texts)
    if all(t == rec.answer for t in texts):
        texts[-1] = str((int(rec.answer) + 1) % 100)
    elif not any(t == rec.answer for t in texts):
        texts[0] = rec.answer
    else:
        return group
    return make_group(tokenizer, texts, L_max, eos=[True] * len(texts))


def _setup(fixture, layout, seed, trainer_cls, config_overrides, *, with_update_items=True):
    """A `trainer_cls` over the fixture's records (Replay rollouts, seeded randomness) and its bindings, with
    items scored by the trainer's own verifier step (line 5). `layout` gives n_base, n_additions, G, L_max and
    the configuration (n, m, T, σ, C, lr)."""
    from mechanisms.dpgrpo.config import DPGRPOConfig
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.rollouts import Replay
    from mechanisms.dpgrpo.tasks import reward
    from mechanisms.dpgrpo.trainer import DPTrainer

    trainer_cls = DPTrainer if trainer_cls is None else trainer_cls
    R = layout
    model, tok, records, replay = fixture
    records = list(records)
    need = R["n_base"] + R["n_additions"] + 1
    if len(records) < need:
        raise InvalidParameter("fixture", len(records), f"a fixture with at least {need} records")
    records = records[:need]
    groups = [_with_variance(tok, r, replay.group_for(r), R["L_max"]) for r in records]
    chunk_rec = records[-1]
    chunk_group = _with_variance(tok, chunk_rec, replay_groups(tok, [chunk_rec], 8, R["L_max"], seed + 13)[0],
                                 R["L_max"])
    n = R["n"]
    universe_records = (records * (n // len(records) + 1))[:n]
    cfg_kwargs = dict(n=n, m=R["m"], T=R["T"], sigma=R["sigma"], C=R["C"], G=R["G"], L_max=R["L_max"],
                      optimizer="sgd", lr=R["lr"], randomness=seed, rollout_mode="replay", precision="float64")
    cfg_kwargs.update(config_overrides)
    config = DPGRPOConfig(**cfg_kwargs)
    trainer = trainer_cls(model, tok, SlotUniverse(n, torch.ones(n, dtype=torch.bool), universe_records), config,
                          reward, rollout_backend=Replay(list(zip(records, groups))))
    scored = trainer.score(records + [chunk_rec], groups + [chunk_group])  # line 5 of the trainer itself
    pairs = list(zip(records + [chunk_rec], scored))
    base = pairs[:R["n_base"]]
    additions = pairs[R["n_base"]:R["n_base"] + R["n_additions"]]
    const_rec, const_group = pairs[R["n_base"] + R["n_additions"]]
    G = const_group.G
    constant = [(const_rec, RolloutGroup(const_group.token_ids, const_group.mask,
                                         torch.full((G,), v, dtype=torch.int64), const_group.texts)) for v in (1, 0)]
    bindings = bindings_for(trainer, items=base, additions=additions, constant_items=constant,
                            chunk_item=pairs[-1], update_items=base[:4] if with_update_items else ())
    return trainer, bindings


def reference_setup(seed: int = 0, trainer_cls=None, *, fixture=None, **config_overrides):
    """(trainer, bindings) on the float64 reference fixture: a `trainer_cls` (default `DPTrainer`) over the
    fixture's records with Replay rollouts, seeded randomness, and the bindings with items scored by the
    trainer's own verifier step. `fixture` (from `reference_fixture`) can be shared between calls."""
    R = REFERENCE
    if fixture is None:
        fixture = reference_fixture(n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"], L_max=R["L_max"],
                                    seed=seed)
    return _setup(fixture, R, seed, trainer_cls, config_overrides)


def preflight_setup(precision: str, seed: int = 0, trainer_cls=None, *, fixture=None, **config_overrides):
    """(trainer, bindings) for V13 at `precision` ("float32" or "bfloat16" base; LoRA, gradients, clip and noise
    float32) on the tiny Qwen2 fixture, laid out like the float64 reference (fewer V3 records). The bindings
    carry no V4 items (V13 does not rerun V4). `fixture` (from `preflight_fixture`) can be shared."""
    from mechanisms.dpgrpo.models import QWEN2_LORA_TARGETS

    if precision not in PREFLIGHT_BASE_DTYPES:
        raise InvalidParameter("precision", precision, f"one of {tuple(PREFLIGHT_BASE_DTYPES)}")
    R = PREFLIGHT
    if fixture is None:
        fixture = preflight_fixture(precision, n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"],
                                    L_max=R["L_max"], seed=seed)
    overrides = dict(precision="float32", lora_targets=QWEN2_LORA_TARGETS)
    overrides.update(config_overrides)
    return _setup(fixture, R, seed, trainer_cls, overrides, with_update_items=False)


def fixture_claim(config):
    """The privacy claim of the fixture configuration: its plan's parameters and ε (`plan.claim()`)."""
    from privcheck.artifacts.records import Claim

    plan = config.plan
    claim = plan.claim()
    return Claim(mechanism="dpgrpo (Poisson-subsampled Gaussian, add/remove one prompt group)",
                 epsilon=float(claim["epsilon"]), delta=plan.delta, neighboring=claim["neighboring"],
                 assumptions=("A1 Poisson sampling with public q", "A2 record isolation",
                              "A3 fresh hidden randomness", "reference fixture configuration (seeded, not a release)"),
                 parameters={"q": plan.sampling_rate, "sigma": plan.noise_multiplier, "T": plan.steps,
                             "delta": plan.delta, "C": plan.clip_norm, "n": plan.records},
                 accountant=claim["accountant"])


def run_preflight(seed: int = 0, precisions=("float32", "bfloat16"), trainer_cls=None):
    """V13 on the tiny Qwen2: `privcheck.checks.training.precision_preflight` at each precision, the results carrying
    their precision (never merged with float64). Call under deterministic algorithms (as `run_suite` does)."""
    from privcheck.checks.training import precision_preflight

    out = []
    for precision in precisions:
        _, bindings = preflight_setup(precision, seed, trainer_cls)
        out += precision_preflight(bindings, precision, v3_options=PREFLIGHT_V3)
    return out


def run_suite(seed: int | None = None):
    """Build the float64 reference fixture (seed 0 by default), bind the production `DPTrainer` (with the
    whole-step bindings of `mechanisms.dpgrpo.whole_step`), run the catalogue `CHECKS` and then the self-check
    V12 `accountant_reference` (`privcheck.checks.training.run_suite`, precision float64), then V13
    (`run_preflight`: float32 and bfloat16 CheckResults, named `precision_preflight.<precision>.<check>`) and
    return a `SuiteResult` named "dpgrpo"."""
    from privcheck.artifacts.records import SuiteResult
    from privcheck.checks.training import CHECKS, SELF_CHECKS
    from privcheck.checks.training import run_suite as run_checks

    seed = 0 if seed is None else seed
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        trainer, bindings = reference_setup(seed)
        # the whole-step checks drive the real `DPTrainer.step` on fresh trainers (mechanisms/dpgrpo/whole_step.py);
        # the default bindings carry both clip regimes (C = 0.2 below every record's norm, C = 10 above) and the
        # pair checks put the addition first, in the middle and last; the whole-run checks run its whole `train()`
        # with noise replay (mechanisms/dpgrpo/whole_run.py)
        fixture = whole_step_fixture(seed)
        bindings = dataclasses.replace(bindings, whole_step=whole_step_bindings(fixture, seed=seed),
                                       whole_run=whole_run_bindings(fixture, seed=seed), precision="float64")
        # the user-facing catalogue, then privcheck's self-check of its own accountant (V12, Table VI)
        checks = run_checks(bindings, precision="float64", checks=[*CHECKS, *SELF_CHECKS])
        checks += run_preflight(seed)
        claims = [fixture_claim(trainer.config)]
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return SuiteResult(name="dpgrpo", checks=checks, claims=claims, randomness="seeded")
