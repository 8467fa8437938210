"""Whole-run bindings of the reference `DPTrainer` (docs/whole_run.md): the checks of `privcheck.checks.whole_run`
run the trainer's own loop — construction, `train()` with whatever a subclass does between rounds, and the public
telemetry it keeps — on neighbouring universes with noise replay.

`whole_run_bindings(fixture=None, trainer_cls=DPTrainer, *, steps=3, **config)` returns a `WholeRunBindings` on
the float64 fixture of the whole-step bindings (`whole_step.whole_step_fixture`): removal = "absent", a universe
of n_records + 1 slots (the last one the addition's), absent slots None. Each `run(dataset, session)` builds a
`trainer_cls` from a copy of the pristine model with seeded randomness `session.seed` (two runs with one seed
draw the same coins for every slot and the same noise; Replay rollouts are deterministic), attaches it to the
session (`optimizer` = the trainer's optimizer, ĝ through `add_update_hook`, `sampled` = the slots of the
round's batch, read by wrapping this universe's `batch`, `public_outputs` = `public_telemetry` and `t`) and
calls `trainer.train(steps)`.
"""

from __future__ import annotations

import copy

import torch

from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.whole_step import WHOLE_STEP_LAYOUT, layout_config
from privcheck.errors import InvalidParameter

__all__ = ["WHOLE_RUN_LAYOUT", "whole_run_bindings"]

# Three rounds per run (T = 10 accounted, so `train(3)` never exceeds the plan); 40 runs for the sampling tests
# (120 rounds); 2 runs per neighbouring pair.
WHOLE_RUN_LAYOUT = {**WHOLE_STEP_LAYOUT, "steps": 3, "seeds": 2, "sampling_runs": 40}


def whole_run_bindings(fixture=None, trainer_cls=DPTrainer, *, steps: int | None = None, n_records: int | None = None,
                       seeds: int | None = None, sampling_runs: int | None = None, seed: int = 0, **config):
    """A `privcheck.checks.whole_run.WholeRunBindings` for `trainer_cls` (DPTrainer or a subclass) on the float64
    fixture (`whole_step_fixture(seed)` when None). `config` overrides the `DPGRPOConfig` fields of
    `WHOLE_RUN_LAYOUT` (n is fixed: n_records + 1 slots); `steps` rounds per run (≤ the accounted T)."""
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.tasks import reward
    from privcheck.checks.whole_run import WholeRunBindings

    L = WHOLE_RUN_LAYOUT
    n_records, (model, tok, records, replay), base_config = layout_config(fixture, trainer_cls, n_records, seed, config)
    n = n_records + 1
    steps = L["steps"] if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= base_config.T:
        raise InvalidParameter("steps", steps, f"an integer in [1, {base_config.T}] (the accounted T)")
    pristine = copy.deepcopy(model)

    def run(dataset, session):
        dataset = list(dataset)
        if len(dataset) != n:
            raise InvalidParameter("dataset", len(dataset), f"{n} slots (fixed universe, removal='absent')")
        present = torch.tensor([x is not None for x in dataset], dtype=torch.bool)
        universe = SlotUniverse(n, present, dataset)
        trainer = trainer_cls(copy.deepcopy(pristine), tok, universe, base_config.replace(randomness=session.seed),
                              reward, rollout_backend=replay)
        seen = {"batch": []}
        universe_batch = universe.batch

        def batch(coins):                      # observation only: the slots of this round's batch
            out = universe_batch(coins)
            seen["batch"] = list(out)
            return out

        universe.batch = batch
        session.attach(model=trainer.model, optimizer=trainer.optimizer, private_parameters=list(trainer.space.names),
                       install_update_hook=trainer.add_update_hook, sampled=lambda: list(seen["batch"]),
                       public_outputs=lambda: {"public_telemetry": [dict(e) for e in trainer.public_telemetry],
                                               "t": trainer.t})
        trainer.train(steps)

    return WholeRunBindings(run=run, records=records[:n_records], addition=records[n_records],
                            clip_norm=float(base_config.C), divisor=base_config.q * n,
                            noise_multiplier=float(base_config.sigma), sampling_rate=base_config.q, removal="absent",
                            absent=None, seeds=L["seeds"] if seeds is None else seeds,
                            sampling_runs=L["sampling_runs"] if sampling_runs is None else sampling_runs)
