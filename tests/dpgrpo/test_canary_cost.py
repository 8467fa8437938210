"""The cheaper canary path changes no value and hides nothing (docs/audits.md, "Cost of the canaries in training").

* `core.flat_norm(v)` is, bit for bit, the float64 norm of an explicit float64 copy of v (the expression it
  replaced), and `clip_flat(v, C, norm=flat_norm(v))` is `clip_flat(v, C)`.
* `dirac_canary` builds C·e_j on each read (`DiracCanary`): every read equals the dense vector written by hand, in
  every dtype it is cast to, and no dense vector is stored.
* A seeded run of `DPTrainer` with Dirac canaries and the auditor's hooks equals, bit for bit (parameters, log
  bytes, private telemetry), a run of `PreChange`: a subclass that composes the step as the trainer did before
  (stored dense canary vectors, a float64 copy for each pre-clip norm, `clip_flat` computing its own norm,
  `S = S + v`). The pre-clip norm reaches `clip` only when `clip` is not overridden; an override that changes v
  before calling the base clip gets v's own norm.
"""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.audit_hooks import AuditHooks
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.fixtures import preflight_fixture, reference_fixture
from mechanisms.dpgrpo.records import DiracCanary, GradientRecord, SlotUniverse, dirac_canary
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer, SlotItem
from privcheck.errors import InvalidParameter

N, M_C, G, L_MAX = 4, 12, 4, 6
C = 0.3                                   # not a float32 number: a float32 canary rounds it once
COMMIT = "sha256:" + "0123456789abcdef" * 4


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def old_norm(v) -> float:
    """The pre-clip norm as the trainer computed it before: an explicit float64 copy, then its norm."""
    return float(torch.linalg.vector_norm(v.detach().double()))


def old_clip(v, C):
    """`clip_flat` before: the float64 copy x, its norm, then x·((1/‖x‖)·C) cast back, or v itself."""
    x = v.detach().to(torch.float64)
    norm = float(torch.linalg.vector_norm(x))
    if not math.isfinite(norm):
        return torch.zeros_like(v.detach())
    if norm > C:
        return (x * ((1.0 / norm) * C)).to(v.dtype)
    return v.detach().clone()


def vectors():
    g = torch.Generator().manual_seed(7)
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 7, 8192, 100_003):
            for scale in (1e-3, 0.05, 1.0, 40.0):
                yield (torch.randn(n, dtype=torch.float64, generator=g) * scale).to(dtype)
    for dtype in (torch.float64, torch.float32):
        big = torch.full((5,), 1e30 if dtype == torch.float32 else 1e300, dtype=dtype)   # squares overflow in dtype
        yield big
        yield torch.zeros(9, dtype=dtype)
        for bad in (math.nan, math.inf, -math.inf):
            v = torch.ones(9, dtype=dtype)
            v[4] = bad
            yield v
    dense = torch.zeros(8192, dtype=torch.float32)
    dense[8000] = C
    yield dense


def test_flat_norm_is_the_norm_of_the_float64_copy():
    count = 0
    for v in vectors():
        assert same_float(core.flat_norm(v), old_norm(v)), (v.dtype, v.numel())
        count += 1
    assert count == 75


def test_clip_with_the_callers_norm_is_the_clip():
    for C_ in (C, 1.0, 1e-6):
        for v in vectors():
            want = old_clip(v, C_)
            for got in (core.clip_flat(v, C_), core.clip_flat(v, C_, norm=core.flat_norm(v))):
                assert got.dtype == v.dtype and torch.equal(got, want), (v.dtype, v.numel(), C_)


DTYPES = [(torch.float64, torch.float64), (torch.float32, torch.float32), (torch.float32, torch.float64),
          (torch.float64, torch.float32), (torch.float64, torch.bfloat16), (torch.float16, torch.float64)]


@pytest.mark.parametrize(("dtype", "target"), DTYPES)
def test_a_dirac_canary_reads_as_its_dense_vector(dtype, target):
    dim, j = 1000, 617
    dense = torch.zeros(dim, dtype=dtype)          # the stored representation, written by hand
    dense[j] = C
    rec = dirac_canary(j, C, dim, dtype=dtype)
    assert isinstance(rec, GradientRecord) and isinstance(rec, DiracCanary) and rec.dim == dim
    assert rec.v.dtype == dtype and torch.equal(rec.v, dense)
    got = rec.gradient("cpu", target)
    assert got.dtype == target and torch.equal(got, dense.to(target))
    assert torch.equal(GradientRecord(dense).gradient("cpu", target), got)
    got.add_(1.0)                                   # each read is a fresh tensor
    assert torch.equal(rec.gradient("cpu", target), dense.to(target)) and torch.equal(rec.v, dense)
    assert not any(isinstance(x, torch.Tensor) for x in vars(rec).values())   # no dense vector kept
    for twin in (pickle.loads(pickle.dumps(rec)), copy.deepcopy(rec)):
        assert type(twin) is DiracCanary and twin == rec and hash(twin) == hash(rec) and torch.equal(twin.v, dense)
    assert rec != dirac_canary(j - 1, C, dim, dtype=dtype) and rec != dirac_canary(j, 2 * C, dim, dtype=dtype)


def test_dirac_canary_bad_input():
    for dtype in (torch.int64, torch.bool, "float32", None):
        with pytest.raises(InvalidParameter) as err:
            dirac_canary(0, C, 10, dtype=dtype)
        assert err.value.name == "dtype"
    for args, name in (((10, C, 10), "j"), ((-1, C, 10), "j"), ((0, 0.0, 10), "C"), ((0, C, 0), "dim")):
        with pytest.raises(InvalidParameter) as err:
            dirac_canary(*args)
        assert err.value.name == name


# ------------------------------------------------------------------------------------------ the trainer

class PreChange(DPTrainer):
    """The step as composed before the cheaper canary path: each pre-clip norm from a float64 copy, `clip_flat`'s
    former body (its own float64 copy and norm), and a new vector for every partial sum."""

    def clip(self, v):
        return old_clip(v, self.config.C)

    def contributions(self, items, *, slots=None):
        items = list(items)
        slots = self.item_slots(items, slots)
        hooks = self.audit_hooks
        out = []
        for k, g in enumerate(self.record_gradients(items)):
            canary = slots[k] is not None and self.universe.is_canary(slots[k])
            if hooks is not None and hooks.mask_reserved_for_real_records and not canary:
                g = hooks.mask(g)
            norm = old_norm(g)
            self.scratch["pre_clip_norms"].append(norm)
            self.scratch["nonfinite"] += int(not math.isfinite(norm))
            self.scratch["clipped"] += int(math.isfinite(norm) and norm > self.config.C)
            clipped = self.clip(g)
            if hooks is not None:
                if canary:
                    self.scratch["canary_pre_clip_norms"][slots[k] - self.universe.n_real] = norm
                else:
                    ct = hooks.reserved_values(clipped)
                    prev = self.scratch["cross_talk"]
                    self.scratch["cross_talk"] = ct if prev is None else [a + b for a, b in zip(prev, ct)]
            out.append(clipped)
        return out

    def clipped_sum(self, items):
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for v in self.contributions(items):
            S = S + v
        return S


class SuperClip(DPTrainer):
    """Overrides `clip` without changing it: the base clip then computes the norm itself."""

    def clip(self, v):
        return super().clip(v)


class Doubling(DPTrainer):
    """Doubles v in place (through `.data`, which no version counter sees) before the base clip."""

    def clip(self, v):
        v.data.mul_(2.0)
        return super().clip(v)


@pytest.fixture(scope="module", params=["float64", "float32"])
def fixture(request):
    if request.param == "float64":
        model, tok, records, replay = reference_fixture(n_records=N, G=G, L_max=L_MAX, seed=3)
    else:
        model, tok, records, replay = preflight_fixture("float32", n_records=N, G=G, L_max=L_MAX, seed=3)
    snapshot = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    return model, tok, records, replay, snapshot


def restore(fixture):
    model, _, _, _, snapshot = fixture
    with torch.no_grad():
        for k, p in model.named_parameters():
            if k in snapshot:
                p.copy_(snapshot[k])
            p.grad = None


def run(fixture, cls, canaries, log_path, *, T=3, mask=True):
    restore(fixture)
    model, tok, records, replay, _ = fixture
    dim = core.ParamSpace(model).dim
    reserved = [dim - 1 - k for k in range(M_C)]
    config = DPGRPOConfig(n=N, m=2, T=T, sigma=0.7, C=C, G=G, L_max=L_MAX, optimizer="sgd", lr=0.05, randomness=11)
    presence = torch.tensor([k % 3 != 0 for k in range(M_C)])
    uni = SlotUniverse(N, torch.ones(N, dtype=torch.bool), records[:N]).append_canaries(
        canaries(reserved, dim), presence, COMMIT)
    hooks = AuditHooks(torch.tensor(reserved, dtype=torch.int64), log_path, mask_reserved_for_real_records=mask)
    tr = cls(model, tok, uni, config, reward, rollout_backend=replay, audit_hooks=hooks)
    tr.train()
    params = [p.detach().clone() for p in tr.space.params]
    return tr, params, open(log_path, "rb").read()


def lazy(dtype):
    return lambda reserved, dim: [dirac_canary(j, C, dim, dtype=dtype) for j in reserved]


def stored(dtype):
    def build(reserved, dim):
        out = []
        for j in reserved:
            v = torch.zeros(dim, dtype=dtype)
            v[j] = C
            out.append(GradientRecord(v))
        return out
    return build


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", [True, False])
def test_a_seeded_run_equals_the_pre_change_composition(fixture, tmp_path, dtype, mask):
    new, p_new, log_new = run(fixture, DPTrainer, lazy(dtype), tmp_path / "new.jsonl", mask=mask)
    old, p_old, log_old = run(fixture, PreChange, stored(dtype), tmp_path / "old.jsonl", mask=mask)
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(p_new, p_old))
    assert any(not torch.equal(a, fixture[4][k]) for a, k in zip(p_new, new.space.names))   # it trained
    assert log_new == log_old and b'"canary_included"' in log_new
    assert repr(new.private_telemetry) == repr(old.private_telemetry)
    assert new.public_telemetry == old.public_telemetry
    assert sum(len(e["pre_clip_norms"]) for e in new.private_telemetry) > N   # canaries were included


def test_the_norm_reaches_clip_only_without_an_override(fixture, tmp_path, monkeypatch):
    calls = []
    real = core.flat_norm
    monkeypatch.setattr(core, "flat_norm", lambda v: calls.append(1) or real(v))
    base, p_base, log_base = run(fixture, DPTrainer, lazy(torch.float64), tmp_path / "base.jsonl", T=1)
    records = len(base.private_telemetry[0]["pre_clip_norms"])
    assert len(calls) == records                 # one norm per record: the clip took the pre-clip norm
    calls.clear()
    over, p_over, log_over = run(fixture, SuperClip, lazy(torch.float64), tmp_path / "over.jsonl", T=1)
    assert len(calls) == 2 * records             # an override of clip: the base clip computes its own
    assert log_base == log_over and all(torch.equal(a, b) for a, b in zip(p_base, p_over))


def test_an_override_that_changes_v_gets_its_own_norm(fixture):
    restore(fixture)
    model, tok, records, replay, _ = fixture
    dim = core.ParamSpace(model).dim
    config = DPGRPOConfig(n=N, m=2, T=1, sigma=0.7, C=C, G=G, L_max=L_MAX, optimizer="sgd", lr=0.05, randomness=1)
    uni = SlotUniverse(N, torch.ones(N, dtype=torch.bool), records[:N]).append_canaries(
        [dirac_canary(5, C, dim)], torch.tensor([True]), COMMIT)
    for cls in (Doubling, DPTrainer):
        tr = cls(model, tok, uni, config, reward, rollout_backend=replay)
        (out,) = tr.contributions([SlotItem(uni.record(N), None, N)])
        want = torch.zeros(dim, dtype=out.dtype)
        want[5] = C      # Doubling: ‖2C·e_5‖ > C, clipped back to C·e_5 (a stale norm C would leave 2C·e_5)
        assert torch.equal(out, want) and tr.scratch["pre_clip_norms"] == [float(torch.tensor(C, dtype=out.dtype))]
