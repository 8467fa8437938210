"""Canary slots and audit hooks: appended slots with (q, σ, T) unchanged, the divisor q·(n + m_c), the auditor's log.

Expected values are recomputed here, independently of the trainer: coins by `torch.rand(n + m_c, float64) < q`
on a replica of the seeded coins generator, the clip by its closed form v·min(1, C/‖v‖), the noise by
`torch.randn` on a replica of the seeded noise generator, and the divisor q·(n + m_c) from public numbers.
Parameters are chosen so that q·(n + m_c) = 4 (a power of two): division and the log's re-multiplication are
then exact, and the logged U_t[J] is compared with S_t[J] + z_t[J] bit for bit.
"""

from __future__ import annotations

import os
import stat

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.audit_hooks import AuditHooks, read_log
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.randomness import TorchRandomness
from mechanisms.dpgrpo.records import GradientRecord, Record, SlotUniverse, dirac_canary, random_direction_canary
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer, SlotItem
from mechanisms.dpgrpo.verify import reference_fixture
from privcheck.errors import InvalidParameter
from tests.bug_zoo.micro_batch_variants import CORRECT_VARIANTS

N, M_C, M, G, L_MAX = 6, 2, 3, 4, 6      # q = 1/2, q·(n + m_c) = 4
C = 0.3
COMMIT = "sha256:" + "0123456789abcdef" * 4


class Capture(DPTrainer):
    """Records the update handed to line 9 (production path otherwise unchanged)."""

    def apply_update(self, g_hat):
        self.last_g_hat = g_hat.detach().clone()
        return super().apply_update(g_hat)


@pytest.fixture(scope="module")
def fixture():
    model, tok, records, replay = reference_fixture(n_records=N + 1, G=G, L_max=L_MAX, seed=3)
    snapshot = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    return model, tok, records, replay, snapshot


@pytest.fixture()
def fx(fixture):
    model, tok, records, replay, snapshot = fixture
    with torch.no_grad():
        for k, p in model.named_parameters():
            if k in snapshot:
                p.copy_(snapshot[k])
            p.grad = None
    return model, tok, records, replay, core.ParamSpace(model).dim


def cfg(**kw):
    base = dict(n=N, m=M, T=3, sigma=0.7, C=C, G=G, L_max=L_MAX, optimizer="sgd", lr=0.05, randomness=5)
    base.update(kw)
    return DPGRPOConfig(**base)


def real_vectors(dim, seed=0):
    """Six fixed real gradient records: norms on both sides of C, nonzero on every coordinate."""
    g = torch.Generator().manual_seed(seed)
    scales = [0.1, 0.5, 2.0, 0.05, 1.0, 0.25]
    out = []
    for s in scales:
        v = torch.randn(dim, dtype=torch.float64, generator=g)
        out.append(v / v.norm() * s)
    return out


def hand_clip(v):
    norm = float(torch.linalg.vector_norm(v))
    return v * min(1.0, C / norm) if norm > 0 else v


def build(fx, config, canaries, presence, *, hooks=None, real=None, present=None, cls=Capture):
    model, tok, _, replay, dim = fx
    real = [GradientRecord(v) for v in real_vectors(dim)] if real is None else real
    present = torch.ones(N, dtype=torch.bool) if present is None else present
    uni = SlotUniverse(N, present, real)
    if canaries is not None:
        uni = uni.append_canaries(canaries, presence, COMMIT)
    return cls(model, tok, uni, config, reward, rollout_backend=replay, audit_hooks=hooks)


def replica_coins(seed, n_slots, q):
    return torch.rand(n_slots, dtype=torch.float64, generator=TorchRandomness.seeded(seed).coins) < q


def seed_with_canary_coins(n_slots=N + M_C):
    """A seed whose first-round coins are 1 on both canary slots (found deterministically)."""
    for s in range(200):
        c = replica_coins(s, n_slots, 0.5)
        if bool(c[N:].all()) and 1 <= int(c[:N].sum()) < N:
            return s
    raise AssertionError("no seed in 0..199 with both canary coins set")  # pragma: no cover


# ------------------------------------------------------------------------------------------ slot universe

def test_append_keeps_real_records_order_and_is_new(fx):
    dim = fx[4]
    real = [GradientRecord(v) for v in real_vectors(dim)]
    present = torch.tensor([True, False, True, True, False, True])
    uni = SlotUniverse(N, present, real)
    canaries = [dirac_canary(0, C, dim), Record(prompt="0 or 1?", answer="1")]
    new = uni.append_canaries(canaries, torch.tensor([False, True]), COMMIT)
    assert new is not uni
    assert (uni.n, uni.n_real, uni.n_canary, uni.canary_commitment) == (N, N, 0, None)
    assert (new.n, new.n_real, new.n_canary, new.canary_commitment) == (N + 2, N, 2, COMMIT)
    assert all(new.record(i) is real[i] for i in range(N))
    assert new.record(N) is canaries[0] and new.record(N + 1) is canaries[1]
    assert [new.is_canary(i) for i in range(N + 2)] == [False] * N + [True, True]
    # presence bits are read like any presence bit (line 3)
    all_coins = torch.ones(N + 2, dtype=torch.bool)
    assert new.batch(all_coins) == [0, 2, 3, 5, N + 1]
    assert uni.batch(torch.ones(N, dtype=torch.bool)) == [0, 2, 3, 5]
    with pytest.raises(InvalidParameter):  # one commitment per universe
        new.append_canaries([dirac_canary(1, C, dim)], torch.tensor([True]), COMMIT)


def test_canary_helpers(fx):
    dim = fx[4]
    d = dirac_canary(3, C, dim)
    expected = torch.zeros(dim, dtype=torch.float64)
    expected[3] = C
    assert torch.equal(d.v, expected)
    u1 = random_direction_canary(C, dim, torch.Generator().manual_seed(9))
    u2 = random_direction_canary(C, dim, torch.Generator().manual_seed(9))
    u3 = random_direction_canary(C, dim, torch.Generator().manual_seed(10))
    assert abs(float(u1.v.norm()) - C) < 1e-12
    assert torch.equal(u1.v, u2.v) and not torch.equal(u1.v, u3.v)
    assert int((u1.v != 0).sum()) > dim // 2  # a spread direction, not a Dirac


# ------------------------------------------------------------------------------------------ divisor, presence

def test_divisor_and_absent_canary_sigma_zero(fx):
    dim = fx[4]
    seed = seed_with_canary_coins()
    config = cfg(sigma=0.0, check_mode=True, randomness=seed)
    big = torch.full((dim,), 5.0, dtype=torch.float64)  # an absent canary that would dominate if read
    canaries = [random_direction_canary(C, dim, torch.Generator().manual_seed(1)), GradientRecord(big)]
    tr = build(fx, config, canaries, torch.tensor([True, False]))
    assert tr.n_slots == N + M_C and tr.divisor == 0.5 * (N + M_C) == 4.0
    tr.step()
    coins = replica_coins(seed, N + M_C, 0.5)
    vectors = real_vectors(dim) + [canaries[0].v, big]
    present = [True] * N + [True, False]
    S = torch.zeros(dim, dtype=torch.float64)
    for i in range(N + M_C):
        if bool(coins[i]) and present[i]:
            S = S + hand_clip(vectors[i])
    expected = S / (0.5 * (N + M_C))
    assert torch.allclose(tr.last_g_hat, expected, rtol=1e-12, atol=1e-15)
    assert not torch.allclose(tr.last_g_hat, S / (0.5 * N), rtol=1e-3)  # not q·n
    # the present canary contributed: removing it changes the update by clip(canary)/4
    S_without = S - hand_clip(canaries[0].v)
    assert (tr.last_g_hat - S_without / 4.0).norm() > 0.5 * C / 4.0


def test_coins_drawn_for_all_slots(fx):
    tr = build(fx, cfg(), [dirac_canary(0, C, fx[4])] * M_C, torch.tensor([True, True]))
    coins = tr.sample_coins()
    assert tuple(coins.shape) == (N + M_C,)
    assert torch.equal(coins, replica_coins(5, N + M_C, 0.5))


def test_privacy_parameters_unchanged_by_canaries(fx):
    from privcheck.accounting import PoissonGaussianEvent, epsilon
    config = cfg()
    plain = build(fx, config, None, None)
    canary = build(fx, config, [dirac_canary(0, C, fx[4])] * M_C, torch.tensor([False, True]))
    a, b = plain.privacy_claim, canary.privacy_claim
    for key in ("n", "q", "sigma", "T", "delta", "C", "epsilon", "event"):
        assert a[key] == b[key], key
    eps = epsilon(PoissonGaussianEvent(0.5, 0.7, 3), config.delta).value     # canaries enter the divisor only
    assert (a["n"], a["q"], a["sigma"], a["T"], a["epsilon"]) == (N, 0.5, 0.7, 3, eps)
    assert canary.plan.canaries == M_C and canary.plan.divisor == 4.0 and plain.plan is config.plan
    assert a["n_canary"] == 0 and a["canary_commitment"] is None and a["divisor"] == 3.0
    assert b["n_canary"] == M_C and b["canary_commitment"] == COMMIT and b["divisor"] == 4.0
    assert canary.config is config


# ------------------------------------------------------------------------------------------ private log

def test_log_holds_reserved_noisy_sum_mode_0600(fx, tmp_path):
    dim = fx[4]
    seed = seed_with_canary_coins()
    J = torch.tensor([0, 7, dim - 1])
    log = tmp_path / "audit.jsonl"
    hooks = AuditHooks(J, log)
    config = cfg(randomness=seed)
    canaries = [dirac_canary(7, C, dim), random_direction_canary(C, dim, torch.Generator().manual_seed(2))]
    tr = build(fx, config, canaries, torch.tensor([True, True]), hooks=hooks)
    tr.step()
    tr.step()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    lines = read_log(log)
    rounds = [x for x in lines if x["kind"] == "round"]
    diags = [x for x in lines if x["kind"] == "diagnostics"]
    assert len(lines) == 4 and len(rounds) == 2 and len(diags) == 2
    coins_gen = TorchRandomness.seeded(seed).coins
    noise_gen = TorchRandomness.seeded(seed).noise
    vectors = real_vectors(dim) + [c.v for c in canaries]
    for t, rec in enumerate(rounds, start=1):
        assert set(rec) == {"kind", "t", "reserved", "U", "sigma_C", "divisor"}
        coins = torch.rand(N + M_C, dtype=torch.float64, generator=coins_gen) < 0.5
        S = torch.zeros(dim, dtype=torch.float64)
        for i in range(N + M_C):
            if bool(coins[i]):
                S = S + hand_clip(vectors[i])
        z = torch.randn(dim, generator=noise_gen, dtype=torch.float64) * (0.7 * C)
        assert rec["t"] == t and rec["reserved"] == J.tolist()
        assert rec["sigma_C"] == 0.7 * C and rec["divisor"] == 4.0
        expected_U = (S + z)[J]
        assert torch.equal(torch.tensor(rec["U"], dtype=torch.float64), expected_U)  # exact: divisor 4
        if t == 1:
            assert diags[0]["diagnostics"]["canary_included"] == [1, 1]
            norms = diags[0]["diagnostics"]["canary_pre_clip_norms"]
            assert set(norms) == {"0", "1"} and abs(norms["0"] - C) < 1e-12 and abs(norms["1"] - C) < 1e-12
    assert [d["t"] for d in diags] == [1, 2]


def test_log_appends_and_tightens_existing_file(fx, tmp_path):
    log = tmp_path / "audit.jsonl"
    log.write_text('{"kind":"earlier"}\n')
    os.chmod(log, 0o644)
    tr = build(fx, cfg(), [dirac_canary(0, C, fx[4])] * M_C, torch.tensor([True, False]),
               hooks=AuditHooks(torch.tensor([0]), log))
    tr.step()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    kinds = [x["kind"] for x in read_log(log)]
    assert kinds == ["earlier", "round", "diagnostics"]


# ------------------------------------------------------------------------------------------ masking

MICRO_BATCHED = [type(f"Capture{cls.__name__}", (cls, Capture), {}) for cls in CORRECT_VARIANTS]


@pytest.mark.parametrize("cls", [Capture] + MICRO_BATCHED, ids=lambda c: c.__name__)
@pytest.mark.parametrize("mask", [True, False])
def test_mask_reserved_for_real_records_not_canaries(fx, tmp_path, mask, cls):
    """Also for trainers that call `contributions` per micro-batch (tests/bug_zoo/micro_batch_variants.py): every
    item keeps its slot, so canaries are never masked and their pre-clip norms are reported."""
    dim = fx[4]
    seed = seed_with_canary_coins()
    J = torch.tensor([2, 5])
    hooks = AuditHooks(J, tmp_path / "a.jsonl", mask_reserved_for_real_records=mask)
    config = cfg(sigma=0.0, check_mode=True, randomness=seed)
    canaries = [dirac_canary(2, C, dim), dirac_canary(5, C, dim)]
    tr = build(fx, config, canaries, torch.tensor([True, True]), hooks=hooks, cls=cls)
    tr.step()
    coins = replica_coins(seed, N + M_C, 0.5)
    S = torch.zeros(dim, dtype=torch.float64)
    for i, v in enumerate(real_vectors(dim)):
        if bool(coins[i]):
            if mask:
                v = v.clone()
                v[J] = 0.0
            S = S + hand_clip(v)
    S[2] += C
    S[5] += C
    assert torch.allclose(tr.last_g_hat, S / 4.0, rtol=1e-12, atol=1e-15)
    on_J = tr.last_g_hat[J] * 4.0
    if mask:  # only the Dirac canaries remain on J
        assert torch.equal(on_J, torch.tensor([C, C], dtype=torch.float64))
    else:  # real records interfere on J
        assert float((on_J - C).abs().max()) > 1e-6
    diag = [x for x in read_log(tmp_path / "a.jsonl") if x["kind"] == "diagnostics"][0]["diagnostics"]
    cross = torch.tensor(diag["cross_talk_reserved"], dtype=torch.float64)
    assert torch.allclose(cross, S[J] - C, rtol=1e-12, atol=1e-15)
    assert diag["canary_included"] == [1, 1] and diag["canary_pre_clip_norms"] == {"0": C, "1": C}   # ‖C·e_j‖


def test_slots_travel_with_the_round_items(fx):
    """`step` hands `noisy_update` the round's items as SlotItems (equal to the plain pairs, each with its slot);
    `item_slots` reads them, refuses explicit slots that contradict them, and outside a round a plain item has
    no slot (a real record)."""
    dim = fx[4]
    seed = seed_with_canary_coins()
    seen = []

    class Spy(DPTrainer):
        def noisy_update(self, items):
            items = list(items)
            seen.append((items, self.item_slots(items), self.item_slots(list(reversed(items))[:2])))
            with pytest.raises(InvalidParameter) as err:
                self.contributions(items[:1], slots=[items[0].slot + 1])
            assert err.value.name == "slots"
            plain = [tuple(it) for it in items]              # rebuilt pairs: found by record identity
            assert self.item_slots(plain) == [it.slot for it in items]
            return super().noisy_update(items)

    tr = build(fx, cfg(randomness=seed), [dirac_canary(2, C, dim), dirac_canary(5, C, dim)],
               torch.tensor([True, True]), cls=Spy)
    tr.step()
    (items, slots, tail), = seen
    batch = [i for i, c in enumerate(replica_coins(seed, N + M_C, 0.5).tolist()) if c]
    assert slots == batch and tail == batch[::-1][:2] and batch[-2:] == [N, N + 1]
    assert all(isinstance(it, SlotItem) and it == (tr.universe.record(i), None) for it, i in zip(items, batch))
    assert tr.item_slots([(tr.universe.record(0), None)]) == [None]           # outside a round


def test_a_rebuilt_item_whose_record_fills_two_slots_is_refused(fx):
    dim = fx[4]
    shared = GradientRecord(real_vectors(dim)[0])

    class Rebuild(DPTrainer):
        def clipped_sum(self, items):
            return super().clipped_sum([tuple(it) for it in items])

    real = [shared, shared] + [GradientRecord(v) for v in real_vectors(dim)[2:]]
    tr = build(fx, cfg(sigma=0.0, check_mode=True, m=N), None, None, real=real, cls=Rebuild)   # q = 1
    with pytest.raises(InvalidParameter) as err:
        tr.step()
    assert err.value.name == "items" and "several slots" in str(err.value)


# ------------------------------------------------------------------------------------------ input-space canary

def test_record_canary_goes_through_grpo_path(fx, tmp_path):
    model, tok, records, replay, dim = fx
    seed = seed_with_canary_coins(N + 1)
    hooks = AuditHooks(torch.tensor([0, 1]), tmp_path / "r.jsonl")
    tr = build(fx, cfg(randomness=seed), [records[N]], torch.tensor([True]), hooks=hooks)
    assert tr.divisor == 0.5 * (N + 1)
    group = tr.score([records[N]], tr.rollouts(model, [records[N]], "current"))[0]  # at θ_1, before the step
    expected_norm = float(torch.linalg.vector_norm(tr.record_gradient(records[N], group).double()))
    entry = tr.step()
    assert entry["skipped_nonfinite_update"] is False
    diag = [x for x in read_log(tmp_path / "r.jsonl") if x["kind"] == "diagnostics"][0]["diagnostics"]
    assert diag["canary_included"] == [1]
    assert abs(diag["canary_pre_clip_norms"]["0"] - expected_norm) < 1e-9 * max(1.0, expected_norm)
    assert diag["canary_constant_group_fraction"] in (0.0, 1.0)


# ------------------------------------------------------------------------------------------ bad input

def test_bad_input(fx, tmp_path):
    dim = fx[4]
    uni = SlotUniverse(N, torch.ones(N, dtype=torch.bool), [GradientRecord(v) for v in real_vectors(dim)])
    can = [dirac_canary(0, C, dim), dirac_canary(1, C, dim)]
    for presence in (torch.tensor([True]), torch.tensor([True, False, True]), torch.tensor([1, 0]), [True, False]):
        with pytest.raises(InvalidParameter) as err:
            uni.append_canaries(can, presence, COMMIT)
        assert err.value.name == "presence"
    for commitment in ("sha256:abc", "0123456789abcdef" * 4, "md5:" + "0" * 64, "sha256:" + "g" * 64,
                       "sha256:" + "0" * 65, "sha256:" + "A" * 64, None, b"sha256:" + b"0" * 64):
        with pytest.raises(InvalidParameter) as err:
            uni.append_canaries(can, torch.tensor([True, False]), commitment)
        assert err.value.name == "commitment"
    with pytest.raises(InvalidParameter):
        uni.append_canaries([], torch.zeros(0, dtype=torch.bool), COMMIT)
    with pytest.raises(InvalidParameter):
        uni.append_canaries([None, None], torch.tensor([True, False]), COMMIT)
    for reserved in (torch.tensor([dim]), torch.tensor([0, dim + 3])):
        hooks = AuditHooks(reserved, tmp_path / "x.jsonl")
        with pytest.raises(InvalidParameter) as err:
            build(fx, cfg(), can, torch.tensor([True, False]), hooks=hooks)
        assert err.value.name == "reserved"
    for reserved in (torch.tensor([-1]), torch.tensor([1.0]), torch.tensor([[1]]), torch.tensor([], dtype=torch.long),
                     torch.tensor([3, 3]), [1, 2]):
        with pytest.raises(InvalidParameter) as err:
            AuditHooks(reserved, tmp_path / "x.jsonl")
        assert err.value.name == "reserved"
    with pytest.raises(InvalidParameter):  # a gradient canary of the wrong dimension
        build(fx, cfg(), [GradientRecord(torch.zeros(dim + 1, dtype=torch.float64))] * 2, torch.tensor([True, True]))
    with pytest.raises(InvalidParameter):
        dirac_canary(dim, C, dim)
    assert not (tmp_path / "x.jsonl").exists()  # nothing written before the trainer is built
