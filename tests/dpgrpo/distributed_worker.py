"""One rank of the 2-process DP-GRPO test (`test_distributed.py`), started by `torch.multiprocessing.spawn`."""

from __future__ import annotations

import torch
import torch.distributed as dist

from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.distributed import DistributedDPTrainer
from mechanisms.dpgrpo.records import SlotUniverse
from mechanisms.dpgrpo.tasks import reward
from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.verify import reference_fixture

N_REC, G, L_MAX = 6, 4, 6


def config(seed: int, T: int) -> DPGRPOConfig:
    return DPGRPOConfig(n=N_REC, m=2, T=T, sigma=0.7, C=0.3, G=G, L_max=L_MAX, optimizer="adamw", lr=0.05,
                        randomness=seed)


def build(seed: int, T: int, cls, **kwargs):
    model, tok, records, replay = reference_fixture(n_records=N_REC, G=G, L_max=L_MAX, seed=3)
    cfg = config(seed, T)
    universe = SlotUniverse(cfg.n, torch.ones(cfg.n, dtype=torch.bool), records)
    return cls(model, tok, universe, cfg, reward, rollout_backend=replay, **kwargs)


def lora_flat(trainer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in trainer.space.params])


def run(rank: int, world_size: int, init_file: str, out_dir: str, seed: int, T: int) -> None:
    """Train T rounds with DistributedDPTrainer, then run V10 (`noise_calibration`) and V9
    (`public_normalisation`) through the bindings of the correct trainer and of a planted bug each; every rank
    takes part, rank 0 saves the check results."""
    from mechanisms.dpgrpo.verify import bindings_for
    from privcheck.checks.dpsgd import check_noise_calibration, check_public_normalisation

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        tr = build(seed, T, DistributedDPTrainer)
        tr.train(T)
        torch.save({"params": lora_flat(tr), "private": tr.private_telemetry, "public": tr.public_telemetry,
                    "backend": tr.backend, "world_size": tr.world_size}, f"{out_dir}/rank{rank}.pt")
        results = {}
        for name, check, cls in (("v10_once", check_noise_calibration, DistributedDPTrainer),
                                 ("v10_per_rank", check_noise_calibration, NoisePerRank),
                                 ("v9_public", check_public_normalisation, DistributedDPTrainer),
                                 ("v9_local_batch", check_public_normalisation, LocalBatchDivisor)):
            result = check(bindings_for(build(7, 2, cls)))
            results[name] = {"passed": result.passed, "status": result.status, "observed": dict(result.observed)}
        if rank == 0:
            torch.save(results, f"{out_dir}/checks.pt")
    finally:
        dist.destroy_process_group()


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
