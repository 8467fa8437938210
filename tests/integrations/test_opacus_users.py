"""Correct Opacus user code, written as a user writes it, passes privcheck's checks (docs/integrations/opacus.md).

The script: a small CNN with GroupNorm on 1×8×8 float64 images, `PrivacyEngine().make_private_with_epsilon`, Adam,
`StepLR` stepped once per epoch in the loop, the loop iterating a `BatchMemoryManager` loader (physical batches
smaller than the logical one), or the sum-reduction variant (`loss_reduction="sum"` with a sum loss). Every
check of `DPSGD_CHECKS` must pass except `clip_contract`, which fails on Opacus 1.5.4's NaN update for a
non-finite per-sample gradient (docs/integrations/opacus.md, "clip_contract and non-finite gradients").
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privcheck.checks.catalogue import DPSGD_CHECKS, WHOLE_RUN_CHECKS, run_suite
from privcheck.integrations.opacus import bindings_for

N, CLASSES, SIDE = 32, 3, 8
KNOWN_FAILURE = "clip_contract"      # Opacus 1.5.4: NaN per-sample gradient → NaN update (documented finding)


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny tensors: threads only add contention on a shared machine
    yield
    torch.set_num_threads(before)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 4)
        self.fc = torch.nn.Linear(4 * SIDE * SIDE, CLASSES)

    def forward(self, x):
        return self.fc(torch.relu(self.norm(self.conv(x))).flatten(1))


def user_script(*, reduction="mean", physical=None, lr_rule=None, seed=0, noise_generator=None):
    """The user's set-up, as in Opacus's tutorials. Returns (engine, model, optimizer, scheduler, the loader the
    loop iterates, train_step, the BatchMemoryManager or None). `lr_rule(loss, g_hat_norm)`: the loop sets Adam's
    lr from it after each step (None: no such rule)."""
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    warnings.filterwarnings("ignore", module="opacus")
    torch.manual_seed(seed)
    X = torch.randn(N, 1, SIDE, SIDE, dtype=torch.float64)
    Y = torch.randint(0, CLASSES, (N,))
    net = Net().double()
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=net, optimizer=torch.optim.Adam(net.parameters(), lr=1e-2),
        data_loader=DataLoader(TensorDataset(X, Y), batch_size=8), target_epsilon=3.0, target_delta=1e-5,
        epochs=2, max_grad_norm=1.0, loss_reduction=reduction, noise_generator=noise_generator)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    def train_step(batch):
        x, y = batch
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y, reduction=reduction)
        loss.backward()
        optimizer.step()
        if lr_rule is not None:     # after the step p.grad holds Opacus's noisy update ĝ
            g = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))
            for group in optimizer.param_groups:
                group["lr"] = lr_rule(loss, g)

    memory = None if physical is None else BatchMemoryManager(data_loader=loader, max_physical_batch_size=physical,
                                                              optimizer=optimizer)
    return engine, model, optimizer, scheduler, loader, train_step, memory


def train(model, scheduler, loader, train_step, epochs=2):
    for _ in range(epochs):
        for batch in loader:
            train_step(batch)
        scheduler.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# the checks of one step's bindings (`bindings_for`); the whole run has its own bindings (docs/whole_run.md)
ONE_STEP = [name for name in DPSGD_CHECKS if name not in WHOLE_RUN_CHECKS]


def _suite(engine, model, optimizer, loader, train_step, checks=None):
    b = bindings_for(engine, model, optimizer, loader, train_step, delta=1e-5, steps=8)
    return b, {r.name: r for r in run_suite(b, checks=list(checks or ONE_STEP))}


def _assert_all_pass_but_known(results):
    assert set(results) == set(ONE_STEP)
    bad = {k: (r.status, r.message[:300]) for k, r in results.items() if k != KNOWN_FAILURE and r.status != "pass"}
    assert not bad
    clip = results[KNOWN_FAILURE]
    assert clip.status == "fail" and clip.observed["nonfinite_cases_zeroed"] == 1


def test_cnn_with_batch_memory_manager_passes_every_check():
    """Logical batches of 8 expected records split into physical batches of at most 3: the checks drive the loop's
    own BatchMemoryManager loader (Opacus's BatchSplittingSampler, the optimizer skipping until the logical batch
    ends), and the logical batch is what they observe."""
    engine, model, opt, sched, loader, step, memory = user_script(physical=3)
    calls = []

    def counted(batch):
        calls.append(len(batch[0]))
        step(batch)

    with memory as physical_loader:
        b, results = _suite(engine, model, opt, physical_loader, counted)
    _assert_all_pass_but_known(results)
    assert b.q == loader.sample_rate == 0.25                  # the inner DPDataLoader's q, not the hook's guess
    assert max(calls) <= 3 and len(calls) > 0                 # the probes ran physical batches of at most 3
    assert results["public_normalisation"].observed["max_ulp_vs_public_divisor"] <= 2


@pytest.mark.slow
def test_cnn_with_the_dp_loader_passes_every_check():
    engine, model, opt, sched, loader, step, _ = user_script()
    _assert_all_pass_but_known(_suite(engine, model, opt, loader, step)[1])


def test_sum_reduction_passes_every_check():
    """make_private(loss_reduction="sum") with a sum loss: Opacus divides by nothing (its divisor is 1), and a
    probe that sets the check's divisor d gets ĝ = (S + z)/d from Opacus's own scale_grad."""
    engine, model, opt, sched, loader, step, _ = user_script(reduction="sum")
    b, results = _suite(engine, model, opt, loader, step)
    _assert_all_pass_but_known(results)
    assert b.whole_step.divisor == 1.0 and opt.loss_reduction == "sum"        # restored after the probes
    v9 = results["public_normalisation"].observed
    assert v9["identical_across_batch_sizes"] and v9["max_ulp_vs_public_divisor"] <= 2
    assert abs(results["noise_calibration"].observed["std_ratio"] - 1) <= 0.01


def test_sum_reduction_probe_divides_through_opacus():
    """The expected value is the closed form v/(q·n) with q·n = 4, exact in binary (v from a seeded generator)."""
    from privcheck.integrations.opacus import GradientRecord

    engine, model, opt, sched, loader, step, _ = user_script(reduction="sum")
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=8)
    v = torch.randn(b.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    v = v / torch.linalg.vector_norm(v) * 0.5                 # inside C = 1: Opacus's clip factor is exactly 1
    got = b.noisy_update([GradientRecord(v)], sigma=0.0, C=1.0, q=0.25, n=16)
    assert torch.equal(got, v / 4)
    assert torch.equal(b.clipped_sum([GradientRecord(v)], 1.0), v)          # the run's own divisor: 1


@pytest.mark.parametrize("physical", [pytest.param(None, marks=pytest.mark.slow), 3],
                         ids=["dp_loader", "batch_memory_manager"])
def test_checks_leave_a_seeded_run_bit_identical(physical):
    """Seed, build, run every check, train 2 epochs: the parameters equal, bit for bit, those of the same seeded
    script trained without the checks (Opacus draws the Poisson coins and the noise from torch's global generator;
    the checks restore it, numpy's, Python's and the optimizer's own)."""
    def script(with_checks):
        engine, model, opt, sched, loader, step, memory = user_script(physical=physical)
        random.seed(5)
        np.random.seed(5)
        ctx = memory if memory is not None else _Same(loader)
        with ctx as it:
            if with_checks:
                before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
                results = run_suite(bindings_for(engine, model, opt, it, step, delta=1e-5, steps=8),
                                    checks=ONE_STEP)
                assert all(r.status in ("pass", "fail") for r in results)
                after = (random.getstate(), np.random.get_state()[1], torch.get_rng_state())
                assert before[0] == after[0] and np.array_equal(before[1], after[1])
                assert torch.equal(before[2], after[2])
            return train(model, sched, it, step), engine.accountant.history

    plain, history = script(False)
    checked, history_checked = script(True)
    assert history == history_checked and len(history) >= 1
    assert torch.equal(plain, checked), float((plain - checked).abs().max())


def test_a_users_noise_generator_is_restored():
    """`make_private(noise_generator=g)`: the checks draw noise from g (it is the run's); they give it back as they
    found it."""
    g = torch.Generator().manual_seed(11)
    engine, model, opt, sched, loader, step, _ = user_script(noise_generator=g)
    state = g.get_state()
    run_suite(bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=8),
              checks=["noise_calibration", "fresh_randomness"])
    assert torch.equal(g.get_state(), state)


class _Same:
    def __init__(self, loader):
        self.loader = loader

    def __enter__(self):
        return self.loader

    def __exit__(self, *exc):
        return False


def test_lr_from_the_noisy_update_passes_lr_from_the_loss_leaks():
    """A learning rate set from ‖ĝ‖ read after optimizer.step() is post-processing of the noisy update; one set
    from the batch loss is a function of the private batch and shows as a leak of the optimizer's lr."""
    post = user_script(lr_rule=lambda loss, g: 1e-2 / (1 + float(g)))
    r = _suite(*post[:3], post[4], post[5], checks=["step_public_outputs"])[1]["step_public_outputs"]
    assert r.status == "pass", r.message
    leak = user_script(lr_rule=lambda loss, g: 1e-2 / (1 + float(loss)))
    r = _suite(*leak[:3], leak[4], leak[5], checks=["step_public_outputs"])[1]["step_public_outputs"]
    assert r.status == "fail"
    assert "optimizer.param_groups[0].lr" in r.observed["leak_fields"]
