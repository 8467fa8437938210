"""One rank of the 2-process DP-GRPO test (`test_distributed.py`), started by `torch.multiprocessing.spawn`."""

from __future__ import annotations

import dataclasses
import datetime

import torch
import torch.distributed as dist

from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.distributed import DistributedDPTrainer
from mechanisms.dpgrpo.records import SlotUniverse
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import reference_fixture

N_REC, G, L_MAX = 6, 4, 6
# V3 on the distributed trainer: the float64 suite's check with fewer records and GradientRecords (the cost is
# per-record gradients; the sharded sum is what is new here, and every C exercises it)
V3_OPTIONS = {"n_base": 3, "n_gradient_records": 4, "clip_norms": ("C_bind", "C_mix")}
V3_ADDITIONS = 2
# the sampler is rank 0's `sample_coins` (broadcast); its exact binomial tests keep false failures below 1e-7 at
# any run count, 50 runs instead of the suite's 100 halve the cost. step_public_outputs: 2 seeds per pair instead
# of the fixture's 6 (each pair still runs until its differing record was sampled; the check is deterministic, and
# what is new on 2 ranks, the broadcast ĝ applied by every rank, shows in every trial)
WHOLE_STEP_OPTIONS = {"step_poisson_sampling": {"runs": 50}, "step_public_outputs": {"seeds": 2}}
COLLECTIVE_TIMEOUT_S = 180


def config(seed: int, T: int, gradient_batch: int = 1) -> DPGRPOConfig:
    return DPGRPOConfig(n=N_REC, m=2, T=T, sigma=0.7, C=0.3, G=G, L_max=L_MAX, optimizer="adamw", lr=0.05,
                        randomness=seed, gradient_batch=gradient_batch)


def build(seed: int, T: int, cls, gradient_batch: int = 1, **kwargs):
    model, tok, records, replay = reference_fixture(n_records=N_REC, G=G, L_max=L_MAX, seed=3)
    cfg = config(seed, T, gradient_batch)
    universe = SlotUniverse(cfg.n, torch.ones(cfg.n, dtype=torch.bool), records)
    return cls(model, tok, universe, cfg, reward, rollout_backend=replay, **kwargs)


def lora_flat(trainer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in trainer.space.params])


def _result(r) -> dict:
    observed = dict(r.observed) if hasattr(r.observed, "keys") else r.observed
    return {"passed": r.passed, "status": r.status, "observed": observed, "message": r.message, "seconds": r.seconds}


def run(rank: int, world_size: int, init_file: str, out_dir: str, seed: int, T: int) -> None:
    """Train T rounds with DistributedDPTrainer; run V10 (`noise_calibration`) and V9 (`public_normalisation`)
    through the bindings of the correct trainer and of a planted bug each, then V3 (`sensitivity_add_remove`),
    V6 (`record_isolation`) and the five whole-step checks on the correct distributed trainer. Every rank takes
    part in every check; rank 0 saves the results, then (process group destroyed) trains the single-process
    `DPTrainer` reference on the same fixture and seeds."""
    from mechanisms.dpgrpo.verify import bindings_for, reference_setup
    from mechanisms.dpgrpo.whole_step import whole_step_bindings
    from privcheck.checks.dpsgd import (
        check_noise_calibration,
        check_public_normalisation,
        check_record_isolation,
        check_sensitivity_add_remove,
    )
    from privcheck.checks.whole_step import WHOLE_STEP_CHECKS

    torch.set_num_threads(1)
    # a collective that one rank skips fails in minutes, not after gloo's default 30
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        tr = build(seed, T, DistributedDPTrainer)
        tr.train(T)
        batched = build(seed, T, DistributedDPTrainer, gradient_batch=2)   # each rank buckets its own share
        batched.train(T)
        torch.save({"params": lora_flat(tr), "private": tr.private_telemetry, "public": tr.public_telemetry,
                    "backend": tr.backend, "world_size": tr.world_size, "batched_params": lora_flat(batched)},
                   f"{out_dir}/rank{rank}.pt")
        results = {}
        for name, check, cls in (("v10_once", check_noise_calibration, DistributedDPTrainer),
                                 ("v10_per_rank", check_noise_calibration, NoisePerRank),
                                 ("v9_public", check_public_normalisation, DistributedDPTrainer),
                                 ("v9_local_batch", check_public_normalisation, LocalBatchDivisor)):
            results[name] = _result(check(bindings_for(build(7, 2, cls))))
        _, b = reference_setup(0, DistributedDPTrainer)
        b = dataclasses.replace(b, additions=list(b.additions)[:V3_ADDITIONS])
        results["v3"] = _result(check_sensitivity_add_remove(b, **V3_OPTIONS))
        results["v6"] = _result(check_record_isolation(b))
        wb = dataclasses.replace(b, whole_step=whole_step_bindings(trainer_cls=DistributedDPTrainer),
                                 precision="float64")
        for name, check in WHOLE_STEP_CHECKS.items():
            results[name] = _result(check(wb, **WHOLE_STEP_OPTIONS.get(name, {})))
        if rank == 0:
            torch.save(results, f"{out_dir}/checks.pt")
    finally:
        dist.destroy_process_group()
    if rank == 0:
        single = build(seed, T, DPTrainer)
        initial = lora_flat(single)
        single.train(T)
        torch.save({"params": lora_flat(single), "initial": initial, "private": single.private_telemetry,
                    "public": single.public_telemetry}, f"{out_dir}/single.pt")


class NoisePerRank(DistributedDPTrainer):
    """A planted bug: every rank adds its own N(0, σ²C²I) and the noisy parts are summed (W draws, not one)."""

    def privatize(self, S):
        z = DPTrainer.privatize(self, torch.zeros_like(S)) * self.divisor        # this rank's own noise draw
        dist.all_reduce(z, op=dist.ReduceOp.SUM, group=self.group)
        return (S + z) / self.divisor


class LocalBatchDivisor(DistributedDPTrainer):
    """A planted bug: every rank divides its own clipped sum by its local batch size, and the ranks average."""

    def noisy_update(self, items):
        items = list(items)
        mine = items[self.rank::self.world_size]
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.device)
        for v in self.contributions(mine):
            S = S + v
        if self.rank == 0 and self.config.sigma > 0:
            S = S + DPTrainer.privatize(self, torch.zeros_like(S)) * self.divisor
        g = S / max(len(mine), 1)
        dist.all_reduce(g, op=dist.ReduceOp.SUM, group=self.group)
        return g / self.world_size
