"""Whole-step bindings of the reference `DPTrainer` (docs/whole_step.md): the checks of
`privcheck.checks.whole_step` drive the real `DPTrainer.step` on fresh trainers built on neighbouring universes.

`whole_step_bindings(fixture=None, trainer_cls=DPTrainer, **config)` returns a `WholeStepBindings` with
removal = "absent": a fixed universe of n = n_records + 1 slots (slot n_records is the addition's), absent slots
hold None. Each `build(dataset, seed)` deep-copies the pristine float64 model of the fixture
(`fixtures.reference_fixture`: tiny GPT-2, LoRA off the reference, Replay rollouts of the addition task), builds a
`trainer_cls` with seeded randomness `seed` (so two builds with one seed draw the same coins for every slot and
the same noise; Replay rollouts are deterministic), and returns a `StepRun` whose `step` is the trainer's own
`step`. Observation only, never a change of what the step computes:

- `install_update_hook` = `trainer.add_update_hook` (ĝ right after privatize);
- `public_outputs` = the trainer's `public_telemetry` and round counter `t` (the step's return value is compared
  as well);
- `sampled` = the slots of the round's batch, captured by wrapping this universe instance's `batch` (line 3);
- `per_record` = slot -> {"scores": the record's rewards, "clipped": its clipped contribution, "loss", "kl"},
  captured by wrapping this trainer instance's `score` and `contributions` (lines 5 and 7). Every call counts:
  a trainer that calls `contributions` several times per step (micro-batches, any order) has each call's items
  mapped to their slots (`DPTrainer.item_slots`: the round's items carry them) and a slot's contributions summed
  over the calls; "loss" and "kl" are the private dicts the call appended for its items. A
  `DistributedDPTrainer` computes each record's contribution on one rank: `per_record` collects them from every
  rank (`gather_by_slot`, a collective; every rank runs the same checks in the same order, so every rank calls
  it).

Cheap by design: 2 base records + 1 addition, q = 2/3 (m = 2 of 3 slots, divisor 2), G = 4, L_max = 6, AdamW;
C = 0.2 is below every record's gradient norm on the fixture (0.3–0.7), so every contribution is clipped and
the sensitivity ratio sits at 1 (the bound is tight).

Two clip regimes: by default the bindings carry `regimes` = {"C=10": the same bindings at
C = `WHOLE_STEP_LAYOUT["C_unclipped"]` = 10, above every record's gradient norm (at most 0.72 on the fixture,
measured in tests/checks/test_whole_step.py), so no record is clipped}; a defect that only shows when ‖ḡ_i‖
varies (noise scaled by the batch's largest norm) is invisible at C = 0.2, where every ‖ḡ_i‖ = C.

Adversarial pool (`pool`, for neighbours="search"; `whole_step_pool`): records that collide with the fixture's
(the prompt of record 0 with another answer; an exact copy of record 1), extreme reward groups (all correct, all
wrong: zero advantage) and extreme gradients (a zero `GradientRecord`, one of norm 100, above both clip norms).
Their rollouts are replayed like the fixture's.
"""

from __future__ import annotations

import copy

import torch

from mechanisms.dpgrpo.trainer import DPTrainer
from privcheck.errors import InvalidParameter

__all__ = ["WHOLE_STEP_LAYOUT", "layout_config", "whole_step_bindings", "whole_step_fixture", "whole_step_pool"]

# C_unclipped: the second clip norm, above every record's gradient norm on the fixture (the unclipped regime)
WHOLE_STEP_LAYOUT = {"n_records": 2, "G": 4, "L_max": 6, "m": 2, "T": 10, "sigma": 1.0, "C": 0.2, "lr": 0.05,
                     "optimizer": "adamw", "seeds": 6, "C_unclipped": 10.0}
FAR_NORM = 100.0      # the "far above C" GradientRecord: above both clip norms


def whole_step_pool(fixture) -> tuple[dict, object]:
    """({kind: record}, Replay of their rollouts): the adversarial candidates of the neighbour search
    (module docstring), built from the fixture's records (the last one is the addition)."""
    import dataclasses

    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.records import GradientRecord, Record
    from mechanisms.dpgrpo.rollouts import Replay, make_group

    model, tok, records, _ = fixture
    L = WHOLE_STEP_LAYOUT
    r0, r1 = records[0], records[1]
    other = str(int(r0.answer) + 1)
    texts = {
        "same_prompt_other_answer": (Record(prompt=r0.prompt, answer=other), (other, r0.answer, "7", other)),
        "all_correct": (Record(prompt="3+4=", answer="7"), ("7",) * L["G"]),
        "all_wrong": (Record(prompt="2+2=", answer="4"), ("5", "44", "3", "22")),
    }
    pool = {k: rec for k, (rec, _) in texts.items()}
    pairs = [(rec, make_group(tok, t, L["L_max"])) for rec, t in texts.values()]
    dim = ParamSpace(model).dim
    far = torch.randn(dim, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    pool.update(duplicate=dataclasses.replace(r1), zero_gradient=GradientRecord(torch.zeros(dim, dtype=torch.float64)),
                far_above_C=GradientRecord(far * (FAR_NORM / float(torch.linalg.vector_norm(far)))))
    return pool, Replay(pairs)


class _PoolReplay:
    """The fixture's Replay, then the pool's (a record is looked up in the fixture first)."""

    mode = "replay"

    def __init__(self, base, extra):
        self.base, self.extra = base, extra
        self.A2_ASSUMPTION, self.A2_CAVEAT = base.A2_ASSUMPTION, base.A2_CAVEAT

    def group_for(self, record):
        try:
            return self.base.group_for(record)
        except InvalidParameter:
            return self.extra.group_for(record)

    def __call__(self, model, records, policy="current", randomness=None):
        from mechanisms.dpgrpo.records import GradientRecord, RolloutGroup

        out = []
        for rec in records:
            g = None if isinstance(rec, GradientRecord) else self.group_for(rec)
            out.append(None if g is None else RolloutGroup(g.token_ids, g.mask, None, g.texts))
        return out


def whole_step_fixture(seed: int = 0, *, n_records: int = WHOLE_STEP_LAYOUT["n_records"]):
    """The float64 reference fixture (`fixtures.reference_fixture`) with n_records + 1 records (the last one is the
    addition), G and L_max of `WHOLE_STEP_LAYOUT`."""
    from mechanisms.dpgrpo.fixtures import reference_fixture

    L = WHOLE_STEP_LAYOUT
    return reference_fixture(n_records=n_records + 1, G=L["G"], L_max=L["L_max"], seed=seed)


def layout_config(fixture, trainer_cls, n_records, seed, config):
    """(n_records, fixture, the `DPGRPOConfig` of `WHOLE_STEP_LAYOUT` with `config`'s overrides) for bindings of
    `trainer_cls` on the float64 fixture (built with `whole_step_fixture(seed)` when None), validated before any
    run: n is fixed (n_records + 1 slots)."""
    from mechanisms.dpgrpo.config import DPGRPOConfig

    L = WHOLE_STEP_LAYOUT
    n_records = L["n_records"] if n_records is None else n_records
    if isinstance(n_records, bool) or not isinstance(n_records, int) or n_records < 2:
        raise InvalidParameter("n_records", n_records, "an integer >= 2")
    if not (isinstance(trainer_cls, type) and issubclass(trainer_cls, DPTrainer)):
        raise InvalidParameter("trainer_cls", trainer_cls, "DPTrainer or a subclass")
    if "n" in config:
        raise InvalidParameter("n", config["n"], f"not set: the universe has n_records + 1 = {n_records + 1} slots")
    if fixture is None:
        fixture = whole_step_fixture(seed, n_records=n_records)
    model, tok, records, replay = fixture
    records = list(records)
    if len(records) < n_records + 1:
        raise InvalidParameter("fixture", len(records), f"a fixture with at least {n_records + 1} records")
    kwargs = dict(n=n_records + 1, m=L["m"], T=L["T"], sigma=L["sigma"], C=L["C"], G=L["G"], L_max=L["L_max"],
                  optimizer=L["optimizer"], lr=L["lr"], randomness=0, rollout_mode="replay", precision="float64")
    kwargs.update(config)
    return n_records, (model, tok, records, replay), DPGRPOConfig(**kwargs)


def whole_step_bindings(fixture=None, trainer_cls=DPTrainer, *, n_records: int | None = None,
                        seeds: int | None = None, seed: int = 0, unclipped_C: float | None = WHOLE_STEP_LAYOUT[
                            "C_unclipped"], pool: bool = True, **config):
    """A `privcheck.checks.whole_step.WholeStepBindings` for `trainer_cls` (a DPTrainer or subclass) on the
    float64 fixture (built with `whole_step_fixture(seed)` when None). `config` overrides the `DPGRPOConfig`
    fields of `WHOLE_STEP_LAYOUT` (n is fixed: n_records + 1 slots). `unclipped_C`: a second clip norm whose
    bindings are attached as `regimes` {"C=<unclipped_C>"} (the regime is named "C=<C>"); None (or equal to C)
    attaches none. `pool`: attach the adversarial pool (`whole_step_pool`) for the neighbour search."""
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.tasks import reward
    from privcheck.checks.whole_step import StepRun, WholeStepBindings

    L = WHOLE_STEP_LAYOUT
    n_records, (model, tok, records, replay), base_config = layout_config(fixture, trainer_cls, n_records, seed, config)
    if unclipped_C is not None and (isinstance(unclipped_C, bool) or not isinstance(unclipped_C, (int, float))
                                    or not 0 < unclipped_C < float("inf")):
        raise InvalidParameter("unclipped_C", unclipped_C, "None or a finite number > 0")
    if not isinstance(pool, bool):
        raise InvalidParameter("pool", pool, "a bool")
    candidates, backend = None, replay
    if pool:
        candidates, extra = whole_step_pool((model, tok, records, replay))
        backend = _PoolReplay(replay, extra)
    n = n_records + 1
    pristine = copy.deepcopy(model)

    def build(dataset, run_seed):
        dataset = list(dataset)
        if len(dataset) != n:
            raise InvalidParameter("dataset", len(dataset), f"{n} slots (fixed universe, removal='absent')")
        present = torch.tensor([x is not None for x in dataset], dtype=torch.bool)
        universe = SlotUniverse(n, present, dataset)
        trainer = trainer_cls(copy.deepcopy(pristine), tok, universe, base_config.replace(randomness=int(run_seed)),
                              reward, rollout_backend=backend)
        seen = {"batch": None, "scores": {}, "clipped": {}, "private": {}}
        universe_batch, trainer_score, trainer_contributions = universe.batch, trainer.score, trainer.contributions

        def batch(coins):
            out = universe_batch(coins)
            seen.update(batch=list(out), scores={}, clipped={}, private={})
            return out

        def score(recs, groups):
            out = trainer_score(recs, groups)
            # record objects -> the round's slots (any subset, any order; a record in several slots takes them in turn)
            free = {}
            for i in seen["batch"] or []:
                free.setdefault(id(universe.record(i)), []).append(i)
            for rec, g in zip(recs, out):
                slots = free.get(id(rec))
                if slots:
                    seen["scores"][slots.pop(0)] = None if g is None or g.rewards is None else g.rewards.clone()
            return out

        def contributions(items, **kw):
            items = list(items)
            slots = trainer.item_slots(items, kw.get("slots"))
            first = len(trainer.scratch["records"])
            out = trainer_contributions(items, **kw)
            added = trainer.scratch["records"][first:]      # this call's private dicts, in item order
            if len(out) != len(items):                      # not one contribution per item: nothing to attribute
                return out
            for k, (slot, v) in enumerate(zip(slots, out)):
                if slot is None:                            # not an item of the round's batch
                    continue
                # summed over the calls of one step (micro-batches): the slot's total contribution to S
                v = v.detach().clone()
                seen["clipped"][slot] = v if slot not in seen["clipped"] else seen["clipped"][slot] + v
                if len(added) == len(items):
                    seen["private"][slot] = {key: added[k][key] for key in ("loss", "kl") if key in added[k]}
            return out

        universe.batch, trainer.score, trainer.contributions = batch, score, contributions

        def sampled():
            return list(seen["batch"] or [])

        def per_record():
            slots = seen["batch"] or []
            if not slots:
                return {}
            clipped, private = seen["clipped"], seen["private"]
            gather = getattr(trainer, "gather_by_slot", None)
            if gather is not None:             # each rank computed its share: collect every rank's (collectives)
                clipped, private = gather(clipped), gather(private)
            out = {}
            for slot in slots:
                entry = dict(private.get(slot, {}))
                if seen["scores"].get(slot) is not None:
                    entry["scores"] = seen["scores"][slot]
                if slot in clipped:
                    entry["clipped"] = clipped[slot]
                out[slot] = entry
            return out

        def public_outputs():
            return {"public_telemetry": [dict(e) for e in trainer.public_telemetry], "t": trainer.t}

        return StepRun(step=trainer.step, model=trainer.model, optimizer=trainer.optimizer,
                       private_parameters=list(trainer.space.names), install_update_hook=trainer.add_update_hook,
                       public_outputs=public_outputs, sampled=sampled, per_record=per_record)

    others = None
    if unclipped_C is not None and float(unclipped_C) != float(base_config.C):
        others = {f"C={float(unclipped_C):g}": whole_step_bindings(
            fixture, trainer_cls, n_records=n_records, seeds=seeds, seed=seed, unclipped_C=None, pool=pool,
            **{**config, "C": float(unclipped_C)})}
    return WholeStepBindings(build=build, records=records[:n_records], addition=records[n_records],
                             clip_norm=float(base_config.C), divisor=base_config.q * n,
                             noise_multiplier=float(base_config.sigma), sampling_rate=base_config.q, removal="absent",
                             absent=None, seeds=L["seeds"] if seeds is None else seeds, pool=candidates,
                             regime=f"C={float(base_config.C):g}", regimes=others)
