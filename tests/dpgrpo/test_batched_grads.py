"""Batched per-record gradients (`mechanisms.dpgrpo.batched_grads`, config `gradient_batch`) against the isolated
path, which is the reference: one forward and one backward per record (`GRPOGradient`).

Equal-shape buckets must give every record the isolated path's gradient bit for bit, whatever its bucket-mates
(record isolation, A2, exactly), across chunking, bucket caps, canary GradientRecords and precisions; the trainer's
update and its checks V3/V6/V8 must not change; a sampler that mixes the records' rows must be caught by V6."""

from __future__ import annotations

import random

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.batched_grads import LoraGradSampler, batched_record_grads, buckets
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.fixtures import preflight_fixture, reference_fixture, replay_groups
from mechanisms.dpgrpo.record_grads import GoldSFT, GRPOGradient, StepContext, ZeroAdvantage
from mechanisms.dpgrpo.records import GradientRecord, RolloutGroup, SlotUniverse
from mechanisms.dpgrpo.rollouts import Replay
from mechanisms.dpgrpo.tasks import addition_records, reward
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import reference_setup
from privcheck.checks.training import check_chunk_identity, check_record_isolation, check_sensitivity_add_remove
from privcheck.errors import InvalidParameter
from tests.dpgrpo.opacus_peer import opacus_record_grads

pytestmark = pytest.mark.usefixtures("one_torch_thread")

G, L_MAX = 4, 6


def scored_pairs(tok, records, seed):
    """Replay groups of the records with rewards from a seeded coin (both values present in most groups)."""
    rng = random.Random(seed)
    groups = replay_groups(tok, records, G, L_MAX, seed)
    return [(r, RolloutGroup(g.token_ids, g.mask, torch.tensor([rng.randrange(2) for _ in range(G)]), g.texts))
            for r, g in zip(records, groups)]


@pytest.fixture(scope="module")
def f64():
    """Float64 tiny GPT-2 with records of several prompt lengths (operands up to 99: prompts of 4, 5 and 6
    characters, so several buckets), and two canary gradient records."""
    model, tok, _, _ = reference_fixture(n_records=1, G=G, L_max=L_MAX, seed=3)
    space = core.ParamSpace(model)
    ctx = StepContext(model=model, space=space, tokenizer=tok, L_max=L_MAX)
    records = addition_records(12, 4, max_operand=99)
    pairs = scored_pairs(tok, records, 5)
    gen = torch.Generator().manual_seed(9)
    canaries = [GradientRecord(torch.randn(space.dim, generator=gen, dtype=torch.float64)) for _ in range(2)]
    pairs = pairs[:3] + [(canaries[0], None)] + pairs[3:8] + [(canaries[1], None)] + pairs[8:]
    return model, tok, ctx, pairs


def isolated(ctx, arm, pairs, chunk_size=None):
    return [arm(ctx, r, g, chunk_size=chunk_size) for r, g in pairs]


def assert_bit_identical(iso, bat):
    assert len(iso) == len(bat)
    for a, b in zip(iso, bat, strict=True):
        assert a.grad.dtype == b.grad.dtype and torch.equal(a.grad, b.grad)
        assert a.private == b.private


def test_fixture_has_several_buckets(f64):
    _, _, ctx, pairs = f64
    shapes = {ctx.prompt_ids(r).numel() for r, g in pairs if g is not None}
    assert len(shapes) >= 2                        # otherwise the bucketing below would not be exercised
    assert len(buckets(ctx, pairs, 100)) == len(shapes)
    assert sum(len(b) for b in buckets(ctx, pairs, 3)) == 12 and max(len(b) for b in buckets(ctx, pairs, 3)) == 3


@pytest.mark.parametrize("arm_cls, max_records", [(GRPOGradient, 1), (GRPOGradient, 3), (ZeroAdvantage, 5)])
def test_float64_bit_identical_to_isolated(f64, arm_cls, max_records):
    """Whole groups per pass (the default chunking): the isolated path's bits, for every bucket width."""
    model, _, ctx, pairs = f64
    arm = arm_cls()
    bat = batched_record_grads(ctx, arm, LoraGradSampler(model, ctx.space), pairs, max_records=max_records)
    assert_bit_identical(isolated(ctx, arm, pairs), bat)
    assert all(p.grad is None for p in ctx.space.params)          # no parameter .grad is formed or left behind


@pytest.mark.parametrize("chunk_size", [1, 3])
def test_float64_chunked_matches_isolated(f64, chunk_size):
    """Chunks of 1 or 3 rollouts: the isolated path's matrix products then have so few rows that the BLAS takes
    another code path than for a filled bucket, so the two agree to rounding (≤ 1e-12 relative, measured 9e-15),
    not bit for bit; the private dicts agree to the same rounding."""
    model, _, ctx, pairs = f64
    arm = GRPOGradient()
    bat = batched_record_grads(ctx, arm, LoraGradSampler(model, ctx.space), pairs, max_records=3,
                               chunk_size=chunk_size)
    for a, b in zip(isolated(ctx, arm, pairs, chunk_size), bat, strict=True):
        assert float((a.grad - b.grad).norm() / a.grad.norm()) <= 1e-12
        assert a.private.get("lengths") == b.private.get("lengths")
        loss_a, loss_b = a.private.get("loss", 0.0), b.private.get("loss", 0.0)
        assert abs(loss_a - loss_b) <= 1e-12 * max(1.0, abs(loss_a))


@pytest.mark.parametrize("chunk_size", [None, 1])
def test_record_isolation_exact_under_any_batch_composition(f64, chunk_size):
    """A2 exactly: a record's gradient has the same bits alone (its bucket filled with filler rows) as with any
    subset of batch-mates, in any order, because every pass has the shape of a full bucket."""
    model, _, ctx, pairs = f64
    arm = GRPOGradient()
    sampler = LoraGradSampler(model, ctx.space)
    pairs = pairs[:7]                                    # two canaries and five records of two prompt lengths
    alone = [batched_record_grads(ctx, arm, sampler, [p], max_records=3, chunk_size=chunk_size)[0].grad
             for p in pairs]
    rng = random.Random(11)
    for _ in range(3):
        idx = rng.sample(range(len(pairs)), rng.randrange(2, len(pairs) + 1))
        out = batched_record_grads(ctx, arm, sampler, [pairs[i] for i in idx], max_records=3, chunk_size=chunk_size)
        for i, rg in zip(idx, out):
            assert torch.equal(rg.grad, alone[i])


def test_float64_gradient_is_the_true_gradient(f64):
    """Independent of the isolated path: each record's batched gradient equals autograd's gradient of its own
    eq. (7) loss written out from the full logits (to 1e-12 relative)."""
    model, tok, ctx, pairs = f64
    arm = GRPOGradient()
    bat = batched_record_grads(ctx, arm, LoraGradSampler(model, ctx.space), pairs, max_records=4)
    for (rec, group), rg in zip(pairs, bat):
        if group is None:
            assert torch.equal(rg.grad, rec.v)
            continue
        prompt = torch.tensor(tok.encode(rec.prompt))
        P, comp = prompt.numel(), group.token_ids
        full = torch.cat([prompt[None].expand(G, -1), comp], 1)

        def logp():
            logits = model(input_ids=full).logits[:, P - 1:P - 1 + L_MAX]
            return torch.log_softmax(logits, -1).gather(-1, comp[..., None]).squeeze(-1)

        with torch.no_grad(), model.disable_adapter():
            ref = logp()
        u = logp()
        r = group.rewards.double()
        A = torch.zeros(G, dtype=torch.float64) if bool((r == r[0]).all()) else (r - r.mean()) / (r.std() + 1e-4)
        d = ref - u
        m = group.mask.double()
        loss = -(((torch.exp(u - u.detach()) * A[:, None] - 0.04 * (torch.exp(d) - d - 1)) * m).sum(1)
                 / m.sum(1)).sum() / G
        params = list(ctx.space.params)
        want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
        assert float((rg.grad - want).norm() / want.norm()) <= 1e-12


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_qwen2_bit_identical_to_isolated(precision):
    """Tiny Qwen2 (LoRA on the seven projections, float32 LoRA over a float32 or bfloat16 base)."""
    model, tok, _, _ = preflight_fixture(precision, n_records=1, G=G, L_max=L_MAX, seed=2)
    space = core.ParamSpace(model)
    ctx = StepContext(model=model, space=space, tokenizer=tok, L_max=L_MAX)
    pairs = scored_pairs(tok, addition_records(5, 6, max_operand=99), 7)
    arm = GRPOGradient()
    bat = batched_record_grads(ctx, arm, LoraGradSampler(model, space), pairs, max_records=3, chunk_size=2)
    assert_bit_identical(isolated(ctx, arm, pairs, 2), bat)


def make_trainer(model, tok, records, pairs, gradient_batch, **overrides):
    n = len(records)
    cfg = DPGRPOConfig(n=n, m=n // 2, T=3, sigma=1.0, C=0.05, G=G, L_max=L_MAX, randomness=17,
                       gradient_batch=gradient_batch, **overrides)
    universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), records)
    return DPTrainer(model, tok, universe, cfg, reward, rollout_backend=Replay(list(pairs)))


def test_trainer_rounds_bit_identical(f64):
    """Three seeded rounds of `step()` (coins, Replay rollouts, verifier, clip, sum, noise, AdamW): the final LoRA
    parameters, the public telemetry and the per-record private telemetry equal the isolated trainer's."""
    model, tok, ctx, pairs = f64
    records = [r for r, g in pairs if g is not None]
    real = [(r, g) for r, g in pairs if g is not None]
    start = [p.detach().clone() for p in ctx.space.params]
    runs = []
    for gb in (1, 5):
        with torch.no_grad():
            for p, s in zip(ctx.space.params, start):
                p.copy_(s)
        tr = make_trainer(model, tok, records, real, gb)
        tr.train(3)
        runs.append(([p.detach().clone() for p in tr.space.params], tr.public_telemetry,
                     [t["pre_clip_norms"] for t in tr.private_telemetry], [t["records"] for t in tr.private_telemetry]))
    with torch.no_grad():
        for p, s in zip(ctx.space.params, start):
            p.copy_(s)
    (p1, pub1, n1, r1), (p2, pub2, n2, r2) = runs
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))
    assert pub1 == pub2 and n1 == n2 and r1 == r2
    assert any(not torch.equal(a, s) for a, s in zip(p1, start))        # the rounds did move the parameters


@pytest.fixture(scope="module")
def batched_setup():
    """The float64 reference trainer and bindings with gradient_batch = 4 (its contributions go through buckets)."""
    trainer, b = reference_setup(0, gradient_batch=4)
    assert trainer.grad_sampler is not None
    return trainer, b


@pytest.mark.parametrize("check", [check_record_isolation, check_chunk_identity, check_sensitivity_add_remove])
def test_checks_pass_on_the_batched_trainer(batched_setup, check):
    """V6, V8 and V3 through the bindings of a batched trainer (every contribution goes through the buckets)."""
    result = check(batched_setup[1])
    assert result.status == "pass", (check.__name__, result.message)


class RowMixingSampler(LoraGradSampler):
    """A planted defect: the rows of the bucket are regrouped in the wrong order (tokens-major instead of
    record-major), so each 'record' gradient mixes rows of several records."""

    def record_grads(self, loss, records):
        used = [m for m in self.modules if id(m) in self._seen]
        outputs = [self._seen[id(m)][1] for m in used]
        grads = torch.autograd.grad(loss, outputs, allow_unused=True)
        x = {id(m): self._seen[id(m)][0] for m in used}
        self._seen = {}
        out = []
        for m, go in zip(used, grads):
            go3 = go.reshape(-1, records, go.shape[-1]).transpose(0, 1)
            x3 = x[id(m)].reshape(-1, records, x[id(m)].shape[-1]).transpose(0, 1)
            out.append(torch.bmm(go3.transpose(1, 2), x3))
        return out


def test_row_mixing_sampler_fails_record_isolation(batched_setup):
    trainer, b = batched_setup
    good = trainer.grad_sampler
    trainer.grad_sampler = RowMixingSampler(trainer.model, trainer.space)
    try:
        result = check_record_isolation(b)
    finally:
        trainer.grad_sampler = good
    assert result.status == "fail" and result.observed["trainer_level_identical"] is False


def test_dropout_masks_come_from_the_rollout_stream(f64):
    """With LoRA dropout the bucket's forward runs in train mode on the private rollout generator: the caller's RNG
    is untouched, the gradient differs from the dropout-free one, and two seeded trainers agree."""
    from mechanisms.dpgrpo.models import build_tiny_policy, perturb_lora_

    _, tok, _, pairs = f64
    real = [(r, g) for r, g in pairs if g is not None][:6]
    records = [r for r, _ in real]
    grads = []
    for dropout in (0.0, 0.5, 0.5):
        model = build_tiny_policy(3, torch.float64, lora_dropout=dropout, tokenizer=tok)
        perturb_lora_(model, 0.02, 10)
        tr = make_trainer(model, tok, records, real, 6, lora_dropout=dropout)
        state = torch.get_rng_state()
        grads.append(tr.record_gradients(real))
        assert torch.equal(torch.get_rng_state(), state)
        assert not model.training
    assert all(torch.equal(a, b) for a, b in zip(grads[1], grads[2]))
    assert all(not torch.equal(a, b) for a, b in zip(grads[0], grads[1]))


def test_bad_input_is_refused_before_any_work(f64):
    model, tok, ctx, pairs = f64
    records = [r for r, g in pairs if g is not None]
    real = [(r, g) for r, g in pairs if g is not None]
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(InvalidParameter, match="gradient_batch"):
            DPGRPOConfig(n=4, m=2, T=1, sigma=1.0, C=1.0, gradient_batch=bad)
    with pytest.raises(InvalidParameter, match="gradient_batch"):        # an arm outside the GRPO family
        make_trainer(model, tok, records, real, 4, arm="dp_sft_gold")
    with pytest.raises(InvalidParameter, match="gradient_batch"):
        batched_record_grads(ctx, GoldSFT(), LoraGradSampler(model, ctx.space), real, max_records=4)
    with pytest.raises(InvalidParameter, match="chunk_size"):
        batched_record_grads(ctx, GRPOGradient(), LoraGradSampler(model, ctx.space), real, max_records=4,
                             chunk_size=0)
    with pytest.raises(InvalidParameter, match="group"):
        batched_record_grads(ctx, GRPOGradient(), LoraGradSampler(model, ctx.space), [(records[0], None)],
                             max_records=4)


def test_non_linear_trainable_tensor_is_refused(f64):
    """A trainable tensor that is not the weight of a bias-free nn.Linear has no per-row gradient here."""
    model, _, ctx, _ = f64
    extra = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    space = core.ParamSpace(list(zip(ctx.space.names, ctx.space.params)) + [("lora_extra.weight", extra)])
    with pytest.raises(InvalidParameter, match="gradient_batch"):
        LoraGradSampler(model, space)


def test_equals_opacus_per_sample_gradients(f64):
    """Cross-check against another library: equal-length records (one shape, so one padded-free forward for
    Opacus too), float64, to 1e-12 relative."""
    model, _, ctx, pairs = f64
    real = [(r, g) for r, g in pairs if g is not None]
    length = ctx.prompt_ids(real[0][0]).numel()
    same = [(r, g) for r, g in real if ctx.prompt_ids(r).numel() == length]
    assert len(same) >= 3
    arm = GRPOGradient()
    ours = batched_record_grads(ctx, arm, LoraGradSampler(model, ctx.space), same, max_records=len(same))
    theirs = opacus_record_grads(ctx, arm, same)
    for rg, want in zip(ours, theirs, strict=True):
        assert float((rg.grad - want).norm() / want.norm()) <= 1e-12


class RowMixingTrainer(DPTrainer):
    """The production trainer with the row-mixing sampler planted (gradient_batch > 1)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.grad_sampler = RowMixingSampler(self.model, self.space)


@pytest.mark.parametrize("trainer_cls, status", [(DPTrainer, "pass"), (RowMixingTrainer, "fail")])
def test_whole_step_record_isolation_on_the_batched_step(trainer_cls, status):
    """`step_record_isolation` drives the real `step()` of fresh batched trainers (each record alone, then inside
    the batch): the production trainer passes; the planted row mixing fails."""
    from mechanisms.dpgrpo.whole_step import whole_step_bindings
    from privcheck.checks.training import SuiteBindings
    from privcheck.checks.whole_step import check_step_record_isolation

    b = SuiteBindings(whole_step=whole_step_bindings(trainer_cls=trainer_cls, gradient_batch=4), precision="float64")
    result = check_step_record_isolation(b)
    assert result.status == status, result.message
