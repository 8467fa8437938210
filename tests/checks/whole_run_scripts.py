"""Tiny DP-SGD training scripts written the way a user writes them (plain torch, own loop), for the whole-run
checks (docs/whole_run.md). `script(**defect)` returns `run(dataset, session)`: the whole script, from model
construction to the last checkpoint. Records are (x, y) float64 pairs; absent slots are None ("absent" removal).

The coupling is the script's own: its Poisson coins for step t are `torch.rand(len(dataset))` from a generator
seeded from (session.seed, t), so a slot keeps its coin on both neighbours, and its noise generator is seeded
from session.seed. Test code only.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import torch

from privcheck.checks.whole_run import WholeRunBindings

__all__ = ["C", "N", "Q", "SIGMA", "STEPS", "bindings", "records", "script"]

N, Q, SIGMA, C, STEPS = 4, 0.5, 1.0, 1.0, 4       # slots, rate, noise multiplier, clip norm, steps
log = logging.getLogger("privcheck.tests.whole_run_scripts")


def records(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, generator=g, dtype=torch.float64), torch.randn(1, generator=g, dtype=torch.float64))
            for _ in range(N + 1)]


def script(*, noise_scale="public", prints=None, checkpoint=None, stop_below=None, attach=True, unseeded=False,
           metrics=None, clip=C, dropout=0.0):
    """A user's whole script. Defects: `noise_scale="batch"` (σ·max per-sample norm instead of σ·C), `prints`
    ("loss": the private loss, "time": the wall clock, "lr": a public value), `checkpoint` ("model" or "loss"),
    `stop_below` (stop when the private loss drops below it), `attach=False` (no session.attach), `unseeded`
    (noise from OS entropy), `metrics` (a dict the loop appends the private loss to)."""

    def run(dataset, session):
        model = torch.nn.Linear(3, 1).double()
        if dropout:
            model = torch.nn.Sequential(torch.nn.Dropout(dropout), model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        batch = []
        if attach:
            session.attach(model=model, optimizer=opt, private_parameters=[k for k, _ in model.named_parameters()],
                           sampled=lambda: list(batch))
        noise = torch.Generator().manual_seed(10_000 + session.seed)
        if unseeded:
            noise.manual_seed(int.from_bytes(os.urandom(7), "little"))
        for t in range(STEPS):
            coins = torch.rand(len(dataset), generator=torch.Generator().manual_seed(1000 * session.seed + t)) < Q
            batch[:] = [i for i in coins.nonzero().flatten().tolist() if dataset[i] is not None]
            S = [torch.zeros_like(p) for p in model.parameters()]
            loss_sum, biggest = 0.0, 0.0
            for i in batch:
                x, y = dataset[i]
                model.zero_grad()
                loss = ((model(x) - y) ** 2).sum()
                loss.backward()
                loss_sum += float(loss)
                norm = float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())))
                biggest = max(biggest, min(norm, clip))
                for s, p in zip(S, model.parameters()):
                    s += p.grad * min(1.0, clip / (norm + 1e-12))
            scale = SIGMA * (biggest if noise_scale == "batch" else clip)
            for s, p in zip(S, model.parameters()):
                p.grad = (s + scale * torch.randn(s.shape, generator=noise, dtype=s.dtype)) / (Q * len(dataset))
            opt.step()
            sched.step()
            private_loss = loss_sum / max(1, len(batch))
            if prints == "loss":
                print(f"step {t}: loss {private_loss:.4f}")
            elif prints == "time":
                print(f"step {t} at {time.time():.6f}")
            elif prints == "lr":
                print(f"step {t}: lr {sched.get_last_lr()[0]}")
            elif prints == "stderr":
                print(f"step {t}: loss {private_loss:.4f}", file=sys.stderr)
            elif prints == "log":
                log.warning("step %d: %d records", t, len(batch))
            if metrics is not None:
                metrics.setdefault("loss", []).append(private_loss)
            if checkpoint is not None:
                state = {"model": model.state_dict()}
                if checkpoint == "loss":
                    state["loss"] = private_loss
                torch.save(state, f"ckpt-{t}.pt")
            if stop_below is not None and batch and private_loss < stop_below:
                break
        return {"final_lr": sched.get_last_lr()[0]}

    return run


def bindings(run, clip=C, **kw):
    recs = records()
    return WholeRunBindings(run=run, records=recs[:N], addition=recs[N], clip_norm=clip, divisor=Q * (N + 1),
                            noise_multiplier=SIGMA, sampling_rate=Q, removal="absent", absent=None, **kw)
