"""DP-GRPO on 2 CPU processes (gloo, spawned here) equals the single-process run with the same seeds.

The reference is `DPTrainer` in this process on the same fixture and config; the distributed run shares the
per-record gradients across ranks, all-reduces the clipped sum and draws the noise once on rank 0
(docs/scaling.md). The round with an empty batch is chosen from the coins stream itself.
"""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.randomness import TorchRandomness
from mechanisms.dpgrpo.trainer import DPTrainer
from tests.dpgrpo import distributed_worker as worker

T = 3


def _seed_with_an_empty_round() -> int:
    """The first seed whose 3 rounds hold an empty batch and a batch of at least 2 records."""
    cfg = worker.config(0, T)
    for seed in range(1000):
        gen = TorchRandomness.seeded(seed).coins
        sizes = [int(core.poisson_coins(cfg.n, cfg.q, gen).sum()) for _ in range(T)]
        if 0 in sizes and max(sizes) >= 2:
            return seed
    raise AssertionError("no seed below 1000 has an empty round")


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """One spawn of 2 gloo ranks: 3 training rounds, then V10 and V9 on the correct trainer and on planted bugs."""
    out = tmp_path_factory.mktemp("distributed")
    seed = _seed_with_an_empty_round()
    mp.spawn(worker.run, args=(2, str(out / "rendezvous"), str(out), seed, T), nprocs=2, join=True)
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    return seed, ranks, torch.load(out / "checks.pt", weights_only=False)


def test_two_gloo_processes_equal_one_process(spawned):
    seed, ranks, _ = spawned
    single = worker.build(seed, T, DPTrainer)
    single.train(T)
    expected = worker.lora_flat(single)
    assert 0 in [t["batch_size"] for t in single.private_telemetry]
    for out in ranks:
        assert out["world_size"] == 2 and out["backend"] == "gloo"
        assert torch.allclose(out["params"], expected, rtol=1e-12, atol=0.0), \
            float((out["params"] - expected).abs().max())
        # the gathered private telemetry reads as in one process: same batches, same norms in batch order
        for a, b in zip(out["private"], single.private_telemetry, strict=True):
            assert a["batch_size"] == b["batch_size"]
            torch.testing.assert_close(torch.tensor(a["pre_clip_norms"], dtype=torch.float64),
                                       torch.tensor(b["pre_clip_norms"], dtype=torch.float64), rtol=1e-12, atol=0)
        assert [e["t"] for e in out["public"]] == [e["t"] for e in single.public_telemetry]
    assert not (expected == worker.lora_flat(worker.build(seed, T, DPTrainer))).all(), "training moved nothing"


def test_noise_drawn_once_passes_and_noise_per_rank_is_caught_by_v10(spawned):
    checks = spawned[2]
    assert checks["v10_once"]["passed"], checks["v10_once"]["observed"]
    # seeded ranks draw the same noise, so the planted bug doubles the std (independent draws: √2)
    bad = checks["v10_per_rank"]
    assert not bad["passed"] and bad["observed"]["std_ratio"] > 1.3, bad


def test_public_divisor_passes_and_local_batch_divisor_is_caught_by_v9(spawned):
    checks = spawned[2]
    assert checks["v9_public"]["passed"], checks["v9_public"]["observed"]
    bad = checks["v9_local_batch"]
    assert not bad["passed"] and not bad["observed"]["identical_across_batch_sizes"], bad
