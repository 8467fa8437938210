"""DPTrainer (one round of Algorithm 1, its entry points, randomness and arms) against hand compositions of the core
functions.

Expected values are recomputed here: coins by `torch.rand(n, float64) < q`, log-probs from the full logits
(no `logits_to_keep`), the clip by its closed form v·min(1, C/‖v‖), the noise by `torch.randn` on a freshly
seeded generator, and the optimizer step by the SGD / first-AdamW-step closed forms.
"""

from __future__ import annotations

import math

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.randomness import TorchRandomness, make_randomness
from mechanisms.dpgrpo.records import GradientRecord, SlotUniverse
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer, VerifierError
from mechanisms.dpgrpo.verify import BINDING_NAMES, bindings_for, reference_fixture
from privcheck.errors import InvalidParameter

N_REC, G, L_MAX = 6, 4, 6


@pytest.fixture(scope="module")
def fixture():
    model, tok, records, replay = reference_fixture(n_records=N_REC, G=G, L_max=L_MAX, seed=3)
    snapshot = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    return model, tok, records, replay, snapshot


@pytest.fixture()
def fx(fixture):
    model, tok, records, replay, snapshot = fixture
    with torch.no_grad():  # every test starts from the same LoRA weights
        for k, p in model.named_parameters():
            if k in snapshot:
                p.copy_(snapshot[k])
            p.grad = None
    return model, tok, records, replay


def cfg(**kw):
    base = dict(n=N_REC, m=3, T=2, sigma=0.7, C=0.3, G=G, L_max=L_MAX, optimizer="sgd", lr=0.05, randomness=5)
    base.update(kw)
    return DPGRPOConfig(**base)


def trainer(fx, config, present=None, verifier=reward, records=None, **kw):
    model, tok, recs, replay = fx
    recs = records if records is not None else recs
    present = torch.ones(config.n, dtype=torch.bool) if present is None else present
    return DPTrainer(model, tok, SlotUniverse(config.n, present, recs), config, verifier,
                     rollout_backend=replay, **kw)


def lora(model):
    return [p for _, p in sorted((k, p) for k, p in model.named_parameters() if p.requires_grad)]


def flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in lora(model)])


def hand_logprobs(model, prompt_ids, comp):
    P, L = prompt_ids.numel(), comp.shape[1]
    full = torch.cat([prompt_ids[None].expand(comp.shape[0], -1), comp], 1)
    logits = model(input_ids=full).logits[:, P - 1:P - 1 + L]
    return torch.log_softmax(logits, -1).gather(-1, comp[..., None]).squeeze(-1)


def hand_record_grad(model, tok, record, group, beta=0.04):
    for p in lora(model):
        p.grad = None
    prompt = torch.tensor(tok.encode(record.prompt))
    rewards = torch.tensor([reward(record, t) for t in group.texts])
    adv = core.group_advantages(rewards, 1e-4)
    with torch.no_grad(), model.disable_adapter():
        ref = hand_logprobs(model, prompt, group.token_ids)
    logp = hand_logprobs(model, prompt, group.token_ids)
    core.prompt_loss(logp, ref, group.mask, adv, beta).backward()
    g = torch.cat([p.grad.reshape(-1).clone() for p in lora(model)])
    for p in lora(model):
        p.grad = None
    return g


def hand_clip(v, C):
    nrm = float(torch.linalg.vector_norm(v))
    return v * min(1.0, C / nrm) if nrm > 0 else v


# ------------------------------------------------------------------------------- one round = composition

def test_step_equals_hand_composition(fx):
    model, tok, records, replay = fx
    config = cfg(randomness=11)
    present = torch.tensor([1, 1, 0, 1, 1, 1], dtype=torch.bool)
    rng = TorchRandomness.seeded(11)
    coins = torch.rand(N_REC, dtype=torch.float64, generator=rng.coins) < config.m / N_REC
    batch = [i for i in range(N_REC) if coins[i] and present[i]]
    assert len(batch) >= 2, "precondition: the seeded batch has several records"
    grads = [hand_record_grad(model, tok, records[i], replay.group_for(records[i])) for i in batch]
    norms = [float(torch.linalg.vector_norm(g)) for g in grads]
    assert max(norms) > config.C, "precondition: the clip binds for at least one record"
    S = sum(hand_clip(g, config.C) for g in grads)
    z = torch.randn(S.numel(), generator=rng.noise, dtype=torch.float64) * (config.sigma * config.C)
    g_hat = (S + z) / (config.m / N_REC * N_REC)
    expected = flat(model) - config.lr * g_hat

    tr = trainer(fx, config, present)
    entry = tr.step()
    torch.testing.assert_close(flat(model), expected, rtol=1e-10, atol=1e-13)
    assert entry["skipped_nonfinite_update"] is False
    assert math.isclose(entry["update_norm"], float(torch.linalg.vector_norm(g_hat)), rel_tol=1e-10)
    priv = tr.private_telemetry[0]
    assert priv["batch_size"] == len(batch)
    assert priv["pre_clip_norms"] == pytest.approx(norms, rel=1e-10)
    assert set(entry) == {"t", "lr", "update_norm", "param_delta_norm", "skipped_nonfinite_update"}


def test_empty_batch_update_is_noise_over_qn_sgd_and_adamw(fx):
    model, *_ = fx
    config = cfg(randomness=21)
    absent = torch.zeros(N_REC, dtype=torch.bool)
    z = torch.randn(flat(model).numel(), generator=TorchRandomness.seeded(21).noise, dtype=torch.float64)
    g_hat = z * (config.sigma * config.C) / 3.0
    theta0 = flat(model)
    tr = trainer(fx, config, absent)
    tr.step()
    torch.testing.assert_close(flat(model), theta0 - config.lr * g_hat, rtol=1e-12, atol=1e-15)

    # AdamW's first step (weight decay 0) in closed form: θ − lr·ĝ/(|ĝ| + eps)
    with torch.no_grad():
        for p, x in zip(lora(model), torch.split(theta0, [p.numel() for p in lora(model)])):
            p.copy_(x.reshape(p.shape))
    tr = trainer(fx, cfg(randomness=21, optimizer="adamw", lr=0.01), absent)
    tr.step()
    torch.testing.assert_close(flat(model), theta0 - 0.01 * g_hat / (g_hat.abs() + 1e-8), rtol=1e-12, atol=1e-15)
    assert tr.private_telemetry[0]["batch_size"] == 0


def test_all_absent_universe_runs_T_rounds(fx):
    model, *_ = fx
    config = cfg(T=4, randomness="os_entropy")
    tr = trainer(fx, config, torch.zeros(N_REC, dtype=torch.bool), records=[None] * N_REC)
    theta0 = flat(model)
    public = tr.train()
    assert [e["t"] for e in public] == [1, 2, 3, 4]
    assert [e["batch_size"] for e in tr.private_telemetry] == [0, 0, 0, 0]
    assert all(e["param_delta_norm"] > 0 and not e["skipped_nonfinite_update"] for e in public)
    assert not torch.equal(flat(model), theta0)
    with pytest.raises(InvalidParameter, match="T"):
        tr.train(1)  # no rounds beyond the accounted T


# ------------------------------------------------------------------------------------------- verifier

def test_verifier_failing_on_public_examples_raises_at_construction(fx):
    def raises(record, completion):
        raise RuntimeError("boom")

    with pytest.raises(VerifierError, match="boom"):
        trainer(fx, cfg(), verifier=raises)
    with pytest.raises(VerifierError, match="not in"):
        trainer(fx, cfg(), verifier=lambda r, y: 2)


def test_verifier_failing_during_run_maps_to_zero_and_is_counted(fx):
    def private_only_failure(record, completion):
        if "a" in record.meta:  # private addition records carry meta; public examples do not
            raise RuntimeError("private failure")
        return reward(record, completion)

    config = cfg(m=N_REC, randomness=3)  # q = 1: every present record is sampled
    tr = trainer(fx, config, verifier=private_only_failure)
    items = tr.score(fx[2], tr.rollouts(tr.model, fx[2], "current"))
    assert all(torch.equal(g.rewards, torch.zeros(G, dtype=torch.int64)) for g in items)
    assert tr.scratch["verifier_failures"] == N_REC * G
    tr.step()
    priv = tr.private_telemetry[-1]
    assert priv["verifier_failures"] == N_REC * G and priv["reward_mean"] == 0
    assert priv["constant_group_fraction"] == 1.0
    assert "verifier_failures" not in tr.public_telemetry[-1]

    tr2 = trainer(fx, config, verifier=lambda r, y: 0.5 if "a" in r.meta else reward(r, y))
    groups = tr2.score(fx[2][:1], tr2.rollouts(tr2.model, fx[2][:1], "current"))
    assert groups[0].rewards.tolist() == [0] * G and tr2.scratch["verifier_failures"] == G


# ------------------------------------------------------------------------------ non-finite handling

def test_nonfinite_record_gradient_is_zeroed(fx):
    model, *_ = fx
    config = cfg(sigma=0.0, check_mode=True)
    tr = trainer(fx, config)
    p = flat(model).numel()
    bad = torch.zeros(p, dtype=torch.float64)
    bad[3] = float("nan")
    inf = torch.ones(p, dtype=torch.float64)
    inf[0] = float("inf")
    good = torch.arange(p, dtype=torch.float64) / p
    contribs = tr.contributions([GradientRecord(bad), GradientRecord(inf), GradientRecord(good)])
    assert torch.equal(contribs[0], torch.zeros(p, dtype=torch.float64))
    assert torch.equal(contribs[1], torch.zeros(p, dtype=torch.float64))
    torch.testing.assert_close(contribs[2], good * (config.C / float(torch.linalg.vector_norm(good))), rtol=1e-14,
                               atol=0)
    assert tr.scratch["nonfinite"] == 2
    S = tr.clipped_sum([GradientRecord(bad), GradientRecord(good)])
    assert torch.isfinite(S).all()


def test_nonfinite_update_skips_step_and_keeps_optimizer_state(fx):
    model, *_ = fx
    tr = trainer(fx, cfg(optimizer="adamw", randomness=8))
    tr.step()  # populate AdamW state
    theta = flat(model)
    state = {k: {kk: (vv.clone() if torch.is_tensor(vv) else vv) for kk, vv in v.items()}
             for k, v in tr.optimizer.state_dict()["state"].items()}
    g = torch.zeros(theta.numel(), dtype=torch.float64)
    g[5] = float("inf")
    assert tr.apply_update(g) is False
    assert torch.equal(flat(model), theta)
    after = tr.optimizer.state_dict()["state"]
    for k, v in state.items():
        for kk, vv in v.items():
            assert torch.equal(torch.as_tensor(after[k][kk]), torch.as_tensor(vv))
    assert all(p.grad is None for p in lora(model))

    # through step(): σ·C overflows, so ĝ is non-finite; the round still counts in T
    tr2 = trainer(fx, cfg(optimizer="adamw", sigma=1e300, C=1e10, T=1, randomness=9))
    theta = flat(model)
    entry = tr2.step()
    assert entry["skipped_nonfinite_update"] is True and entry["t"] == 1
    assert torch.equal(flat(model), theta)
    assert tr2.optimizer.state_dict()["state"] == {}


# ------------------------------------------------------------------------------------ public divisor

def test_divisor_is_public_qn(fx):
    model, tok, records, replay = fx
    config = DPGRPOConfig(n=16, m=4, T=1, sigma=0.0, C=0.3, G=G, L_max=L_MAX, check_mode=True, randomness=1)
    tr = DPTrainer(model, tok, SlotUniverse(16, torch.zeros(16, dtype=torch.bool), [None] * 16), config, reward,
                   rollout_backend=replay)
    group = tr.score(records[:1], tr.rollouts(model, records[:1], "current"))[0]
    x = (records[0], group)
    p = flat(model).numel()
    zeros = [GradientRecord(torch.zeros(p, dtype=torch.float64)) for _ in range(3)]
    g_a = tr.noisy_update([x])
    g_b = tr.noisy_update([x, *zeros])
    assert torch.equal(g_a, g_b)
    v = hand_clip(hand_record_grad(model, tok, records[0], replay.group_for(records[0])), config.C)
    assert float(torch.linalg.vector_norm(v)) > 0
    torch.testing.assert_close(g_a, v / 4.0, rtol=1e-10, atol=1e-15)


def test_constant_reward_group_is_retained(fx):
    model, tok, records, replay = fx
    tr = trainer(fx, cfg(sigma=0.0, check_mode=True))
    rec = records[1]
    group = replay.group_for(rec)
    const = (rec, type(group)(group.token_ids, group.mask, torch.ones(G, dtype=torch.int64), group.texts))
    other = (records[2], tr.score([records[2]], [replay.group_for(records[2])])[0])
    diff = tr.clipped_sum([other, const]) - tr.clipped_sum([other])
    assert float(torch.linalg.vector_norm(diff)) > 0  # KL gradient, LoRA off the reference


# -------------------------------------------------------------------------------------- randomness

def test_seeded_runs_are_not_releases_and_release_refuses_seed(fx):
    tr = trainer(fx, cfg(randomness=4))
    assert tr.privacy_release is False and "seeded randomness" in tr.release_blockers
    assert tr.randomness.to_json() == {"mode": "seeded", "seed": 4, "reason": "seeded randomness"}
    a, b = trainer(fx, cfg(randomness=4)), trainer(fx, cfg(randomness=4))
    assert torch.equal(a.sample_coins(), b.sample_coins())
    with pytest.raises(InvalidParameter, match="seed"):
        TorchRandomness.release(seed=4)
    with pytest.raises(InvalidParameter, match="seed"):
        make_randomness(seed=4)
    rel = trainer(fx, cfg(randomness="os_entropy"))
    assert rel.privacy_release is True and rel.randomness.to_json() == {"mode": "os_entropy"}
    from privcheck.accounting import PoissonGaussianEvent, epsilon
    claim = rel.privacy_claim          # ε is the plan's, from the event (no calibration needed)
    assert claim["sigma"] == 0.7
    assert claim["epsilon"] == epsilon(PoissonGaussianEvent(0.5, 0.7, 2), 1 / (10 * N_REC)).value
    with pytest.raises(InvalidParameter, match="randomness"):
        trainer(fx, cfg(randomness="os_entropy"), randomness=TorchRandomness.seeded(1))
    r1, r2 = TorchRandomness.os_entropy(), TorchRandomness.os_entropy()
    assert not torch.equal(torch.rand(64, generator=r1.coins), torch.rand(64, generator=r2.coins))
    assert not torch.equal(torch.randn(64, generator=r1.noise), torch.randn(64, generator=r2.noise))


def test_nonprivate_arm_has_no_claim(fx):
    import math as m
    tr = trainer(fx, cfg(arm="nonprivate_reference", sigma=0.0, C=m.inf, randomness="os_entropy"))
    assert tr.privacy_claim is None and tr.privacy_release is False
    tr.step()
    assert not tr.public_telemetry[0]["skipped_nonfinite_update"]


# ------------------------------------------------------------------------------------------- config

@pytest.mark.parametrize("field,value", [
    ("G", 1), ("C", 0.0), ("C", -1.0), ("C", float("nan")), ("m", 0), ("m", 7), ("T", 0), ("n", 0),
    ("sigma", -0.1), ("sigma", float("nan")), ("sigma", 0.0), ("C", float("inf")), ("delta", 1.0),
    ("tau", float("nan")), ("beta", float("nan")), ("top_p", 1.5), ("optimizer", "adam"), ("arm", "x"),
    ("rollout_mode", "magic"), ("randomness", "urandom"), ("chunk_size", 0), ("lr", float("nan")),
])
def test_bad_config_raises_naming_parameter(field, value):
    kw = dict(n=N_REC, m=3, T=2, sigma=0.7, C=0.3)
    kw[field] = value
    with pytest.raises(InvalidParameter) as err:
        DPGRPOConfig(**kw)
    assert err.value.name in (field, "q")


def test_config_defaults_hash_and_nonprivate_relaxation():
    c = DPGRPOConfig(n=100, m=25, T=60, sigma=1.1440412666574, C=1.0)
    assert c.q == 0.25 and c.delta == 1 / 1000 and c.top_k == 0 and c.top_p == 1.0 and c.beta == 0.04
    assert c.sha256() == DPGRPOConfig(n=100, m=25, T=60, sigma=1.1440412666574, C=1.0).sha256()
    assert c.sha256() != c.replace(sigma=1.144).sha256()
    assert '"sigma":1.1440412666574' in c.canonical_json()
    np_ = DPGRPOConfig(n=4, m=4, T=1, sigma=0.0, C=float("inf"), arm="nonprivate_reference")
    assert np_.nonprivate and '"C":"inf"' in np_.canonical_json()
    with pytest.raises(Exception):
        c.sigma = 2.0  # frozen


def test_seeded_streams_follow_the_dpgrpo_seed_derivation():
    """Seeded generators are seeded with sha256("privcheck.dpgrpo/<label>/<seed>") (first 8 bytes, little-endian,
    63 bits): the derivation of every seeded result in this package, recomputed here with hashlib."""
    import hashlib

    def seed_of(label, seed):
        digest = hashlib.sha256(f"privcheck.dpgrpo/{label}/{seed}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    r = TorchRandomness.seeded(17)
    for label, gen in (("coins", r.coins), ("noise", r.noise)):
        expected = torch.Generator().manual_seed(seed_of(label, 17))
        assert torch.equal(torch.rand(32, generator=gen), torch.rand(32, generator=expected)), label
    ref_rollout = torch.Generator().manual_seed(seed_of("rollouts", 17))
    draw = int(torch.randint(0, (1 << 63) - 1, (1,), generator=ref_rollout, dtype=torch.int64).item())
    with r.rollout_scope():
        got = torch.rand(8)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(draw)
        assert torch.equal(got, torch.rand(8))


@pytest.mark.slow
def test_from_target_calibrates_sigma_at_full_precision():
    from privcheck.accounting import PoissonGaussianEvent, epsilon

    c = DPGRPOConfig.from_target(n=100, m=25, T=60, target_epsilon=8.0, C=1.0)
    assert abs(c.sigma - 1.1440413) < 1e-5
    assert epsilon(PoissonGaussianEvent(c.q, c.sigma, c.T), c.delta).value <= 8.0
    assert c.calibration.epsilon <= 8.0 and c.plan.epsilon().value == c.calibration.epsilon


# ------------------------------------------------------------------------------------------ bindings

def test_bindings_expose_trainer_callables(fx):
    tr = trainer(fx, cfg())
    b = bindings_for(tr, items=[GradientRecord(torch.ones(flat(fx[0]).numel(), dtype=torch.float64))])
    get = (lambda k: b[k]) if isinstance(b, dict) else (lambda k: getattr(b, k))
    if isinstance(b, dict):
        assert set(b) == set(BINDING_NAMES)
    else:
        assert b.make_gradient_record is GradientRecord and b.n == N_REC and b.C == 0.3 and b.model is fx[0]
    assert get("contributions") == tr.contributions
    S = torch.linspace(-1.0, 1.0, flat(fx[0]).numel(), dtype=torch.float64)
    c = tr.config                           # with σ = 0 the bound privatize is exactly S/(q·n) (public divisor)
    out = get("privatize")(S, sigma=0.0, C=c.C, q=c.q, n=c.n)
    assert torch.equal(out, S / (c.q * c.n))
    assert get("sample")(256, 0.5).dtype == torch.bool
    rewards = torch.tensor([1, 0, 0, 1])
    torch.testing.assert_close(get("advantages")(rewards), core.group_advantages(rewards))


def test_fixed_vector_record_with_dropout_takes_one_rollout_draw_and_no_model_pass(fx, monkeypatch):
    """With LoRA dropout on, a GradientRecord's pass returns its vector without switching the model to train
    mode, and advances the rollout generator by exactly the one draw a real record's pass takes (so seeded
    streams do not depend on how canaries are handled): its next draws equal a copy advanced by one draw."""
    tr = trainer(fx, cfg(lora_dropout=0.05))
    v = torch.linspace(-1.0, 1.0, tr.space.dim, dtype=torch.float64)
    reference = TorchRandomness.seeded(5)
    reference.rollout_draw()
    modes, switches = [], []
    hook = tr.model.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    tr.model.eval()
    monkeypatch.setattr(tr.model, "train", lambda mode=True: switches.append(mode))
    try:
        got = tr.record_gradient(GradientRecord(v))
    finally:
        hook.remove()
        monkeypatch.undo()
    assert torch.equal(got, v.to(got.dtype)) and modes == [] and switches == [] and not tr.model.training
    assert [tr.randomness.rollout_draw() for _ in range(3)] == [reference.rollout_draw() for _ in range(3)]
    # a real record's pass takes the same single draw (its dropout seed), in train mode
    tr2 = trainer(fx, cfg(lora_dropout=0.05))
    records = fx[2][:1]
    group = tr2.score(records, tr2.rollouts(tr2.model, records, "current"))[0]
    reference = TorchRandomness.seeded(5)
    reference.rollout_draw()
    hook = tr2.model.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    try:
        tr2.randomness.set_rollout_state(TorchRandomness.seeded(5).rollout_state())
        tr2.record_gradient(records[0], group)
    finally:
        hook.remove()
    assert modes and all(modes) and not tr2.model.training
    assert [tr2.randomness.rollout_draw() for _ in range(3)] == [reference.rollout_draw() for _ in range(3)]
