"""Opacus whole-script bug zoo (docs/integrations/opacus.md, "Verify the whole run"): user scripts `train(dataset)`
as an Opacus user writes them — model construction, `PrivacyEngine().make_private(...)`, the loop over epochs —
whose defect lies between steps or outside the step, and correct scripts in other shapes that must pass. Each is
written from the defect's description. Test code only.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
from opacus import PrivacyEngine
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["CORRECT_SCRIPTS", "METRICS", "SCRIPT_ZOO", "ScriptBug", "private_training", "real_dataset", "small_net",
           "train_epoch", "train_step"]

EPOCHS, BATCH, LR = 3, 4, 0.5
METRICS: dict = {"train_loss": []}          # a metrics dict kept by the script, declared public by the test
log = logging.getLogger("privcheck.tests.opacus_run")
log.setLevel(logging.INFO)


def real_dataset(n: int = 16, seed: int = 0) -> TensorDataset:
    """The user's real training set: n float64 records (4 features, 2 classes)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return TensorDataset(x, (x[:, 0] + 0.5 * x[:, 1] > 0).long())


def small_net():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()


def private_training(dataset, net, *, reduction="mean", lr=LR):
    engine = PrivacyEngine(accountant="rdp")
    return engine.make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=lr),
                               data_loader=DataLoader(dataset, batch_size=BATCH), noise_multiplier=1.0,
                               max_grad_norm=1.0, loss_reduction=reduction)


def train_step(model, optimizer, x, y, reduction="mean") -> float:
    """One training step; returns the batch's summed loss (a private figure)."""
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
    (loss if reduction == "sum" else loss / max(1, len(y))).backward()
    optimizer.step()
    return loss.item()


def train_epoch(model, optimizer, loader) -> float:
    """One epoch over `loader`; returns the mean training loss per record (private)."""
    total, count = 0.0, 0
    for x, y in loader:
        total += train_step(model, optimizer, x, y)
        count += len(y)
    return total / max(1, count)


# ------------------------------------------------------------------------------------------------- defects

def plateau_lr(dataset):
    """ReduceLROnPlateau on the epoch's training loss."""
    model, optimizer, loader = private_training(dataset, small_net())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    for _ in range(EPOCHS):
        scheduler.step(train_epoch(model, optimizer, loader))
    return model


def early_stopping(dataset):
    """Stops when the epoch's training loss no longer improves on the best so far."""
    model, optimizer, loader = private_training(dataset, small_net())
    best = float("inf")
    for _ in range(EPOCHS):
        loss = train_epoch(model, optimizer, loader)
        if loss >= best:
            break
        best = loss
    return model


def private_warm_up(dataset):
    """One non-private warm-up epoch with a plain optimizer on the training data, then make_private."""
    net = small_net()
    warm = torch.optim.SGD(net.parameters(), lr=LR)
    for x, y in DataLoader(dataset, batch_size=BATCH, shuffle=True):
        warm.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        warm.step()
    model, optimizer, loader = private_training(dataset, net)
    for _ in range(EPOCHS):
        train_epoch(model, optimizer, loader)
    return model


def metrics_dict(dataset):
    """Appends each epoch's mean training loss to a metrics dict kept outside the step."""
    model, optimizer, loader = private_training(dataset, small_net())
    for _ in range(EPOCHS):
        METRICS["train_loss"].append(train_epoch(model, optimizer, loader))
    return model


def prints_loss(dataset):
    """Prints each epoch's mean training loss."""
    model, optimizer, loader = private_training(dataset, small_net())
    for epoch in range(EPOCHS):
        print(f"epoch {epoch}: train loss {train_epoch(model, optimizer, loader):.4f}")
    return model


def logs_loss(dataset):
    """Logs each epoch's mean training loss (logging.INFO of a module logger)."""
    model, optimizer, loader = private_training(dataset, small_net())
    for epoch in range(EPOCHS):
        log.info("epoch %d: train loss %.4f", epoch, train_epoch(model, optimizer, loader))
    return model


def checkpoint_with_loss(dataset):
    """Writes a checkpoint per epoch holding the model AND the epoch's training loss."""
    model, optimizer, loader = private_training(dataset, small_net())
    for epoch in range(EPOCHS):
        loss = train_epoch(model, optimizer, loader)
        torch.save({"model": model.state_dict(), "loss": loss}, os.path.join(os.getcwd(), f"ckpt-{epoch}.pt"))
    return model


def plain_shuffled_loader(dataset):
    """Makes the training private but iterates its own shuffled DataLoader, not the DPDataLoader."""
    model, optimizer, _ = private_training(dataset, small_net())
    for _ in range(EPOCHS):
        train_epoch(model, optimizer, DataLoader(dataset, batch_size=BATCH, shuffle=True))
    return model


# ------------------------------------------------------------------------------------------ correct shapes

def step_lr(dataset):
    """Correct: a StepLR schedule (public: the epoch counter)."""
    model, optimizer, loader = private_training(dataset, small_net())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(EPOCHS):
        train_epoch(model, optimizer, loader)
        scheduler.step()
    return model


def memory_manager(dataset):
    """Correct: physical batches of at most 2 records through Opacus's BatchMemoryManager."""
    model, optimizer, loader = private_training(dataset, small_net())
    for _ in range(EPOCHS):
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=2, optimizer=optimizer) as physical:
            for x, y in physical:
                train_step(model, optimizer, x, y)
    return model


def sum_reduction(dataset):
    """Correct: loss_reduction="sum" with a summed loss."""
    model, optimizer, loader = private_training(dataset, small_net(), reduction="sum", lr=LR / BATCH)
    for _ in range(EPOCHS):
        for x, y in loader:
            train_step(model, optimizer, x, y, reduction="sum")
    return model


def lr_from_noisy_update(dataset):
    """Correct: the next step's learning rate from the norm of the noisy update (post-processing)."""
    model, optimizer, loader = private_training(dataset, small_net())
    for _ in range(EPOCHS):
        for x, y in loader:
            train_step(model, optimizer, x, y)
            norm = torch.cat([p.grad.reshape(-1) for p in optimizer.params]).norm().item()
            for group in optimizer.param_groups:
                group["lr"] = LR / (1 + norm)
    return model


def model_checkpoints(dataset):
    """Correct: a checkpoint of the model's state per epoch, and the epoch counter printed."""
    model, optimizer, loader = private_training(dataset, small_net())
    for epoch in range(EPOCHS):
        train_epoch(model, optimizer, loader)
        print(f"epoch {epoch} done")
        torch.save({"model": model.state_dict(), "epoch": epoch}, os.path.join(os.getcwd(), f"ckpt-{epoch}.pt"))
    return model


def with_epsilon(dataset):
    """Correct: make_private_with_epsilon at a target ε over the planned epochs."""
    net = small_net()
    model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private_with_epsilon(
        module=net, optimizer=torch.optim.SGD(net.parameters(), lr=LR),
        data_loader=DataLoader(dataset, batch_size=BATCH), target_epsilon=8.0, target_delta=1e-5, epochs=EPOCHS,
        max_grad_norm=1.0)
    for _ in range(EPOCHS):
        for x, y in loader:
            train_step(model, optimizer, x, y)
    return model


def cnn_group_norm(dataset):
    """Correct: a tiny CNN with GroupNorm (each record's 4 features as a 1×2×2 image)."""
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 2, 2)), torch.nn.Conv2d(1, 4, 2), torch.nn.GroupNorm(2, 4),
                              torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(4, 2)).double()
    model, optimizer, loader = private_training(dataset, net)
    for _ in range(EPOCHS):
        train_epoch(model, optimizer, loader)
    return model


@dataclass(frozen=True)
class ScriptBug:
    name: str
    train: object
    check: str            # the whole-run check that must fail
    field: str            # a substring of the leak field (run_public_outputs) or of the message


SCRIPT_ZOO = (
    ScriptBug("plateau_lr", plateau_lr, "run_public_outputs", "optimizer.param_groups[0].lr"),
    ScriptBug("early_stopping", early_stopping, "run_sensitivity", "private steps taken"),
    ScriptBug("private_warm_up", private_warm_up, "run_public_outputs", "step[0].parameters."),
    ScriptBug("metrics_dict", metrics_dict, "run_public_outputs", "public.metrics.train_loss["),
    ScriptBug("prints_loss", prints_loss, "run_public_outputs", "stdout["),
    ScriptBug("logs_loss", logs_loss, "run_public_outputs", "log["),
    ScriptBug("checkpoint_with_loss", checkpoint_with_loss, "run_public_outputs", "files.ckpt-"),
    ScriptBug("plain_shuffled_loader", plain_shuffled_loader, "run_poisson_sampling", "present records"),
)
CORRECT_SCRIPTS = (step_lr, memory_manager, sum_reduction, lr_from_noisy_update, model_checkpoints, with_epsilon,
                   cnn_group_norm)
