"""`mechanisms.dpgrpo.timing`: the non-private baseline and the measurement's side-effect freedom.

The non-private update (one left-padded batched forward, one backward of the mean loss) must equal the
private trainer's update at q = 1, σ = 0, C = ∞ (Σ_i g_i / n from per-record backwards on unpadded
sequences): two different computations of the same gradient, compared in float64. The measurement must
leave the trainer exactly as it was: checked bit for bit, and by a following round that must equal the
round of an identical trainer that was never measured.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.models import build_tiny_policy, perturb_lora_
from mechanisms.dpgrpo.records import RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.rollouts import IsolatedHF, Replay
from mechanisms.dpgrpo.tasks import CharTokenizer, addition_record, addition_records, reward
from mechanisms.dpgrpo.timing import measure_private_over_nonprivate, nonprivate_grpo_update, time_generation_modes
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import replay_groups
from privcheck.errors import InvalidParameter

G, L_MAX = 4, 6
KEYS = ("round", "gradient_phase", "private_round_s", "nonprivate_round_s", "private_gradient_s",
        "nonprivate_gradient_s")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer()


def policy(tok, seed=3):
    m = build_tiny_policy(seed, torch.float64, tokenizer=tok)
    perturb_lora_(m, 0.05, seed + 7)
    return m


# ------------------------------------------------------------------------------------ non-private update

@pytest.mark.parametrize("arm", ["grpo", "zero_advantage"])
def test_nonprivate_update_equals_private_update_at_q1_sigma0_Cinf(tok, arm):
    model = policy(tok)
    records = [addition_record(3, 4), addition_record(12, 7), addition_record(123, 45), addition_record(5, 0)]
    groups = replay_groups(tok, records, G, L_MAX, seed=17)
    n = len(records)
    cfg = DPGRPOConfig(n=n, m=n, T=1, sigma=0.0, C=math.inf, check_mode=True, G=G, L_max=L_MAX, randomness=0,
                       optimizer="sgd", record_gradient=arm, precision="float64")
    trainer = DPTrainer(model, tok, SlotUniverse(n, torch.ones(n, dtype=torch.bool), records), cfg, reward,
                        rollout_backend=Replay(list(zip(records, groups))))
    scored = trainer.score(records, groups)
    assert any(len(set(g.rewards.tolist())) > 1 for g in scored), "precondition: non-zero advantages"
    private = trainer.noisy_update(list(zip(records, scored)))  # Σ_i g_i / (q·n) with q·n = |B| = 4
    nonprivate = nonprivate_grpo_update(trainer, records, scored)
    assert nonprivate.dtype == torch.float64 and nonprivate.shape == private.shape
    assert float(torch.linalg.vector_norm(private)) > 1e-6
    torch.testing.assert_close(nonprivate, private, rtol=1e-9, atol=1e-13)
    assert all(p.grad is None for p in trainer.space.params)


def test_nonprivate_update_bad_input(tok):
    model = policy(tok)
    records = addition_records(2, 1)
    groups = replay_groups(tok, records, G, L_MAX, seed=2)
    cfg = DPGRPOConfig(n=2, m=2, T=1, sigma=1.0, C=1.0, G=G, L_max=L_MAX, randomness=0)
    trainer = DPTrainer(model, tok, SlotUniverse(2, torch.ones(2, dtype=torch.bool), records), cfg, reward,
                        rollout_backend=Replay(list(zip(records, groups))))
    scored = trainer.score(records, groups)
    with pytest.raises(InvalidParameter):
        nonprivate_grpo_update(trainer, records, groups)  # unscored
    with pytest.raises(InvalidParameter):
        nonprivate_grpo_update(trainer, records, scored[:1])
    with pytest.raises(InvalidParameter):
        nonprivate_grpo_update(trainer, [], [])
    short = RolloutGroup(scored[1].token_ids[:, :3], scored[1].mask[:, :3], scored[1].rewards, None)
    with pytest.raises(InvalidParameter):
        nonprivate_grpo_update(trainer, records, [scored[0], short])
    sft = DPTrainer(model, tok, SlotUniverse(2, torch.ones(2, dtype=torch.bool), records),
                    cfg.replace(record_gradient="sft_gold"), reward)
    with pytest.raises(InvalidParameter):
        nonprivate_grpo_update(sft, records, scored)


# ------------------------------------------------------------------------------------ measurement

class GuardedUniverse(SlotUniverse):
    """A universe whose private side (presence bits via `batch`, records via `record`) can be locked."""

    locked = False

    def batch(self, coins):
        assert not self.locked, "the timing read the private universe"
        return super().batch(coins)

    def record(self, i):
        assert not self.locked, "the timing read a private record"
        return super().record(i)


def _trainer(tok, model):
    n = 8
    cfg = DPGRPOConfig(n=n, m=4, T=5, sigma=0.9, C=0.5, G=G, L_max=L_MAX, randomness=5, optimizer="adamw",
                       lr=1e-2)
    universe = GuardedUniverse(n, torch.ones(n, dtype=torch.bool), addition_records(n, 4))
    return DPTrainer(model, tok, universe, cfg, reward, rollout_backend=IsolatedHF.from_config(tok, cfg))


def _state(tr):
    return {"params": [p.detach().clone() for p in tr.space.params],
            "grads": [p.grad for p in tr.space.params],
            "optimizer": copy.deepcopy(tr.optimizer.state_dict()),
            "generators": {k: g.get_state() for k, g in vars(tr.randomness).items()
                           if isinstance(g, torch.Generator)},
            "rng": torch.get_rng_state(), "t": tr.t, "scratch": tr.scratch,
            "telemetry": (copy.deepcopy(tr.public_telemetry), len(tr.private_telemetry))}


def _assert_same_state(a, b):
    assert all(torch.equal(x, y) for x, y in zip(a["params"], b["params"]))
    assert all(x is y for x, y in zip(a["grads"], b["grads"]))
    sa, sb = a["optimizer"], b["optimizer"]
    assert sa["param_groups"] == sb["param_groups"] and sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        for name, v in sa["state"][k].items():
            assert torch.equal(v, sb["state"][k][name]), (k, name)
    assert a["generators"].keys() == b["generators"].keys() and len(a["generators"]) == 3
    assert all(torch.equal(a["generators"][k], b["generators"][k]) for k in a["generators"])
    assert torch.equal(a["rng"], b["rng"])
    assert a["t"] == b["t"] and a["scratch"] is b["scratch"] and a["telemetry"] == b["telemetry"]


def test_measurement_leaves_trainer_unchanged_and_reads_only_public_records(tok):
    measured, control = _trainer(tok, policy(tok)), _trainer(tok, policy(tok))
    measured.step()
    control.step()  # the optimizer now has state (AdamW moments, step count)
    before = _state(measured)
    measured.universe.locked = True
    try:
        out = measure_private_over_nonprivate(measured, addition_records(3, 99), repeats=2)
    finally:
        measured.universe.locked = False
    _assert_same_state(before, _state(measured))
    for tr in (measured, control):
        tr.step()
    assert all(torch.equal(a, b) for a, b in zip(measured.space.params, control.space.params))
    assert measured.public_telemetry == control.public_telemetry
    for k in KEYS:
        assert math.isfinite(out[k]) and out[k] > 0, k
    assert out["records"] == 3 and out["repeats"] == 2 and out["generation_s"] > 0
    assert out["private_round_s"] > out["private_gradient_s"]
    assert out["round"] == pytest.approx(out["private_round_s"] / out["nonprivate_round_s"])
    assert out["gradient_phase"] == pytest.approx(out["private_gradient_s"] / out["nonprivate_gradient_s"])


def test_measurement_bad_input_raises_before_work(tok):
    tr = _trainer(tok, policy(tok))
    before = _state(tr)
    for records, repeats in (([], 1), (addition_records(2, 1), 0), ([None], 1), ("3+4=", 1),
                             (addition_records(2, 1), 1.5)):
        with pytest.raises(InvalidParameter):
            measure_private_over_nonprivate(tr, records, repeats=repeats)
    _assert_same_state(before, _state(tr))


def test_time_generation_modes(tok):
    model = policy(tok)
    cfg = DPGRPOConfig(n=4, m=2, T=1, sigma=1.0, C=1.0, G=G, L_max=L_MAX)
    rng = torch.get_rng_state()
    out = time_generation_modes(model, tok, addition_records(3, 5), cfg)
    assert torch.equal(torch.get_rng_state(), rng)
    assert out["isolated_s"] > 0 and out["batched_s"] > 0 and out["records"] == 3 and out["G"] == G
    assert out["batched_speedup"] == pytest.approx(out["isolated_s"] / out["batched_s"])
    with pytest.raises(InvalidParameter):
        time_generation_modes(model, tok, [], cfg)
