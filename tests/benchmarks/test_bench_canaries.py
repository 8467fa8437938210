"""Gradient-canary training against plain training of the same run, in one process (issue 24 item 4; figures in
docs/audits.md, "Cost of gradient canaries").

* Opacus: the issue-24 setting of tests/audits/test_gradient_log.py (tiny MLP, q = 1/32 with batch 1 of 32 records,
  σ = 0.875, T = 96) with m = 1,000 Dirac canaries (`GradientCanaries`, log written) against the same loop without
  the hook;
* DP-GRPO: the tiny-cpu policy (2 public pretraining steps), n = 4 real records, q = 0.5, T = 10, with m = 300
  and m = 1,000 Dirac canary slots and the auditor's hooks (`audits.dpgrpo.gradient_canary`'s training step)
  against the same trainer without canary slots or hooks.

Only the training loops are timed (each round rebuilds the run first); plain and canary runs alternate. The best
of the rounds of each gives `ratio_canaries_over_plain`; the ratio of each alternated pair gives
`ratio_pair_median`, `ratio_pair_min` and `ratio_pair_max` (all in `benchmark.extra_info`, printed too). Nothing
is asserted about time. Without `--benchmark-enable` each runs once, shortened, as a smoke test.
    .venv/bin/python -m pytest tests/benchmarks/test_bench_canaries.py --benchmark-enable -q -s
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

ROUNDS = 5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _alternate(benchmark, plain, canaries, rounds):
    """Best-of-rounds seconds of `plain()` and `canaries()` (each returns its own loop time), alternated."""
    own: list[float] = []
    base: list[float] = []

    def timed():
        base.append(plain())
        own.append(canaries())

    benchmark.pedantic(timed, rounds=rounds, iterations=1)
    pairs = [c / p for c, p in zip(own, base)]
    info = {"plain_s": min(base), "canaries_s": min(own), "ratio_canaries_over_plain": min(own) / min(base),
            "ratio_pair_median": float(np.median(pairs)), "ratio_pair_min": min(pairs), "ratio_pair_max": max(pairs)}
    benchmark.extra_info.update(info)
    return info


def _report(capsys, title, info):
    with capsys.disabled():
        print(f"\n[{title}] " + ", ".join(f"{k}={v:.4g}" for k, v in info.items()))


def test_bench_opacus_gradient_canaries(benchmark, tmp_path, capsys):
    import opacus  # noqa: F401 - the integrations extra

    from audits.dpgrpo.gradient_canary import reserved_coordinates
    from privcheck.integrations.opacus import GradientCanaries, private_dimension
    from tests.integrations.opacus_fixture import tiny_run

    short = benchmark.disabled
    T, m = (8, 50) if short else (96, 1000)
    presence = np.random.default_rng(0).integers(0, 2, m)
    runs = iter(range(10**6))

    def loop(opt, loader, step):
        for _ in range(max(T // len(loader), 1)):
            for batch in loader:
                step(batch)

    def plain():
        _, _, opt, loader, step = tiny_run(sigma=0.875, batch_size=1, records=32)
        start = time.perf_counter()
        loop(opt, loader, step)
        return time.perf_counter() - start

    def canaries():
        _, _, opt, loader, step = tiny_run(sigma=0.875, batch_size=1, records=32)
        J = reserved_coordinates(private_dimension(opt), m, "last")
        start = time.perf_counter()
        with GradientCanaries(opt, coordinates=J, presence=presence, log_path=tmp_path / f"log{next(runs)}",
                              records=32, seed=5):
            loop(opt, loader, step)
        return time.perf_counter() - start

    info = _alternate(benchmark, plain, canaries, 1 if short else ROUNDS)
    _report(capsys, f"opacus gradient canaries m={m} T={T}", info)


@pytest.mark.parametrize("m_full", [300, 1000])
def test_bench_dpgrpo_gradient_canaries(benchmark, tmp_path, capsys, m_full):
    from audits import canary as cn
    from audits.dpgrpo import gradient_canary as dc
    from mechanisms.dpgrpo import presets
    from mechanisms.dpgrpo.audit_hooks import AuditHooks
    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.records import SlotUniverse, dirac_canary
    from mechanisms.dpgrpo.trainer import DPTrainer

    short = benchmark.disabled
    m, T, q, n = (m_full // 20, 2, 0.5, 4) if short else (m_full, 10, 0.5, 4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(presets.PRESETS, "tiny-cpu-light", dataclasses.replace(presets.TINY_CPU, name="tiny-cpu-light",
                                                                          pretrain_steps=2))
        spec = dc.audit_preset("tiny-cpu-light")
        model, tok = spec.build_policy(11)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    cans = dc.dirac_canaries(dc.reserved_coordinates(ParamSpace(model).dim, m, "last"))
    membership = cn.draw_membership(m, seed=1)
    design = dc.design_gradient_audit(spec, canaries=cans, q=q, T=T, n_real=n, confidence=0.95, target_epsilon=8.0,
                                      C=1.0, seed=11, reserved_rule="last", mask_real=True, interference=0.0,
                                      plan_sims=2, commitment=membership.commit([c.id for c in cans], cn.new_salt()))
    runs = iter(range(10**6))

    def plain():
        model.load_state_dict(state)
        universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), spec.records(n, 11))
        trainer = DPTrainer(model, tok, universe, design.config, spec.verifier)
        start = time.perf_counter()
        trainer.train()
        return time.perf_counter() - start

    # the audit's training step (audits.dpgrpo.gradient_canary.run_gradient_canary_audit)
    def canaries():
        model.load_state_dict(state)
        start = time.perf_counter()   # building the m canary slots is part of the canaries' cost
        universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), spec.records(n, 11))
        dim = ParamSpace(model).dim   # once, as the audit's training step does
        vectors = [dirac_canary(c.coordinate, design.plan.clip_norm, dim, dtype=torch.float32)
                   for c in design.canaries]
        universe = universe.append_canaries(vectors, torch.from_numpy(membership.presence_for_training().copy()),
                                            design.preregistration.commitment)
        hooks = AuditHooks(torch.tensor(design.reserved, dtype=torch.int64), tmp_path / f"log{next(runs)}",
                           mask_reserved_for_real_records=True)
        DPTrainer(model, tok, universe, design.config, spec.verifier, audit_hooks=hooks).train()
        return time.perf_counter() - start

    info = _alternate(benchmark, plain, canaries, 1 if short else 7)
    _report(capsys, f"dpgrpo gradient canaries m={m} T={T}", info)
