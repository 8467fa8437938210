"""A tiny real Opacus run (2-layer MLP classifier on synthetic data, float64) for the integration tests."""

from __future__ import annotations

import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset

N, FEATURES, CLASSES, HIDDEN = 16, 8, 3, 128


def tiny_run(*, sigma=1.0, C=1.0, batch_size=8, accountant="rdp", seed=0, plain_loader=False, realised=False,
             lr=0.05, records=N):
    """(engine, model, optimizer, loader the loop iterates, train_step) of a real `make_private` run.

    `plain_loader`: the loop iterates the user's own DataLoader(shuffle=True, batch_size) instead of the Poisson
    DPDataLoader make_private returned (bug i). `realised`: train_step makes Opacus divide by the realised batch
    size (`optimizer.expected_batch_size = len(x)`, bug ii). `records`: dataset size (q = batch_size/records)."""
    from opacus import PrivacyEngine

    warnings.filterwarnings("ignore", module="opacus")
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(records, FEATURES, dtype=torch.float64, generator=gen)
    Y = torch.randint(0, CLASSES, (records,), generator=gen)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                              torch.nn.Linear(HIDDEN, CLASSES)).double()
    user_loader = DataLoader(TensorDataset(X, Y), batch_size=batch_size, shuffle=True)
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, dp_loader = engine.make_private(
        module=net, optimizer=torch.optim.SGD(net.parameters(), lr=lr), data_loader=user_loader,
        noise_multiplier=sigma, max_grad_norm=C)

    def train_step(batch):
        x, y = batch
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if realised:
            optimizer.expected_batch_size = max(len(x), 1)
        optimizer.step()

    return engine, model, optimizer, (user_loader if plain_loader else dp_loader), train_step
