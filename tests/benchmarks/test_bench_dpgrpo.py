"""DP-GRPO benchmarks (docs/dpgrpo.md, "Private versus non-private time") on the tiny Qwen2 policy of tiny-cpu
(float32, LoRA on the seven projections).

Shape: n = 64, q = 0.25 (16 public evaluation prompts as the batch), G = 4, L_max = 16, AdamW.

* private vs non-private round: `timing.measure_private_over_nonprivate` (same rollouts, same process;
  ratios "round" and "gradient_phase", project target for the round ≤ 1.15);
* per-prompt gradient: the trainer's `noisy_update` (per-record backward, clip, noise) against
  `timing.nonprivate_grpo_update` (one batched backward), per prompt;
* batched vs isolated generation: `timing.time_generation_modes`.

Figures go to `benchmark.extra_info` and are printed; nothing is asserted about time. Torch runs on one
thread here (restored afterwards): the CI machine's two cores are shared, and two OpenMP threads on a
loaded machine measure the contention, not the code. Without `--benchmark-enable` each test runs once
on 4 prompts as a smoke test.
    .venv/bin/python -m pytest tests/benchmarks/test_bench_dpgrpo.py --benchmark-enable -q
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

PUBLIC_PROMPTS = 16  # q·n with n = 64, q = 0.25


@pytest.fixture(scope="module")
def setup():
    from mechanisms.dpgrpo.config import DPGRPOConfig
    from mechanisms.dpgrpo.models import build_tiny_qwen2_policy
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.tasks import CharTokenizer, addition_records, reward
    from mechanisms.dpgrpo.trainer import DPTrainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tok = CharTokenizer()
    model = build_tiny_qwen2_policy(0, torch.float32, tokenizer=tok)
    n = 64
    cfg = DPGRPOConfig(n=n, m=16, T=60, sigma=1.1440413, C=1.0, G=4, L_max=16, tau=0.7, lr=1e-2,
                       optimizer="adamw", randomness=0, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj",
                                                                     "gate_proj", "up_proj", "down_proj"))
    universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), addition_records(n, 1))
    trainer = DPTrainer(model, tok, universe, cfg, reward)
    public = addition_records(PUBLIC_PROMPTS, 12345)  # public evaluation prompts: the timing batch
    yield trainer, public
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def batched(setup):
    """The same trainer with `gradient_batch = 16`: per-record gradients of equal-shape buckets from one forward
    and one backward (mechanisms/dpgrpo/batched_grads.py)."""
    from mechanisms.dpgrpo.trainer import DPTrainer

    trainer, public = setup
    cfg = trainer.config.replace(gradient_batch=PUBLIC_PROMPTS)
    return DPTrainer(trainer.model, trainer.tokenizer, trainer.universe, cfg, trainer.verifier), public


def _size(benchmark):
    """(records, repeats): the benchmark batch when benchmarking, a 4-prompt smoke run otherwise."""
    return (4, 1) if benchmark.disabled else (PUBLIC_PROMPTS, 5)


def _report(capsys, title, info):
    with capsys.disabled():
        print(f"\n[{title}] " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in info.items()))


def test_bench_private_over_nonprivate_round(benchmark, setup, capsys):
    from mechanisms.dpgrpo.timing import measure_private_over_nonprivate

    trainer, public = setup
    k, repeats = _size(benchmark)
    out = benchmark.pedantic(measure_private_over_nonprivate, args=(trainer, public[:k]),
                             kwargs={"repeats": repeats, "warmup": not benchmark.disabled}, rounds=1, iterations=1)
    assert out["round"] > 0 and out["gradient_phase"] > 0
    benchmark.extra_info.update(out)
    benchmark.extra_info["torch_threads"] = torch.get_num_threads()
    _report(capsys, "private/non-private", out)


@pytest.mark.parametrize("fixture", ["qwen2_float32", "gpt2_float64"])
def test_bench_batched_private_over_nonprivate(benchmark, batched, capsys, fixture):
    """Private gradient phase and round with batched per-record gradients / the non-private GRPO update, on the
    16-record float32 batch (tiny Qwen2) and on the float64 reference fixture (tiny GPT-2, Replay rollouts);
    project target ≤ 1.10 for the gradient phase. Before timing, the batched contributions are compared with the
    isolated ones (bit for bit)."""
    from mechanisms.dpgrpo.timing import measure_private_over_nonprivate
    from mechanisms.dpgrpo.trainer import DPTrainer
    from mechanisms.dpgrpo.verify import reference_setup

    if fixture == "qwen2_float32":
        trainer, public = batched
    else:
        trainer, _ = reference_setup(0, gradient_batch=PUBLIC_PROMPTS)
        public = [trainer.universe.record(i) for i in range(trainer.universe.n_real)]
    k, repeats = _size(benchmark)
    records = public[:k]
    groups = trainer.score(records, trainer.rollouts(trainer.model, records, "current"))
    items = list(zip(records, groups))
    isolated = trainer.config.replace(gradient_batch=1)
    reference = DPTrainer(trainer.model, trainer.tokenizer, trainer.universe, isolated, trainer.verifier,
                          rollout_backend=trainer.rollout_backend)
    assert all(torch.equal(a, b) for a, b in zip(trainer.contributions(items), reference.contributions(items)))
    out = benchmark.pedantic(measure_private_over_nonprivate, args=(trainer, records),
                             kwargs={"repeats": repeats, "warmup": not benchmark.disabled}, rounds=1, iterations=1)
    assert out["round"] > 0 and out["gradient_phase"] > 0
    out["fixture"] = fixture
    if fixture == "qwen2_float32":
        out.update(_opacus_peer(trainer, records, groups, 3 * repeats))   # interleaved: more, shorter samples
    benchmark.extra_info.update(out)
    benchmark.extra_info["torch_threads"] = torch.get_num_threads()
    _report(capsys, f"batched private/non-private, {fixture}", out)


def _opacus_peer(trainer, records, groups, repeats) -> dict:
    """The peer: Opacus per-sample gradients summed per record (tests/dpgrpo/opacus_peer.py), then the same clip,
    sum and noise, against the non-private update; medians over `repeats`, interleaved, after one warm-up, of the
    wall clock and of the process CPU time."""
    from mechanisms.dpgrpo.timing import nonprivate_grpo_update
    from tests.dpgrpo.opacus_peer import opacus_record_grads

    def peer():
        per = opacus_record_grads(trainer.ctx, trainer.arm, list(zip(records, groups)))
        return trainer.privatize(sum(trainer.clip(v) for v in per))

    def seconds(fn):
        """(wall, CPU) seconds of fn(): with one torch thread the process CPU time is that thread's, which other
        jobs on a shared machine inflate less than the wall clock."""
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - t0, time.process_time() - c0

    peer()
    ours, theirs, base = [], [], []
    for _ in range(repeats):
        theirs.append(seconds(peer))
        ours.append(seconds(lambda: trainer.noisy_update(list(zip(records, groups)))))
        base.append(seconds(lambda: nonprivate_grpo_update(trainer, records, groups)))

    def ratio(a, b, k):
        return statistics.median(x[k] for x in a) / statistics.median(x[k] for x in b)

    return {"opacus_gradient_phase": ratio(theirs, base, 0),
            "batched_gradient_phase_interleaved": ratio(ours, base, 0),
            "opacus_gradient_phase_cpu": ratio(theirs, base, 1),
            "batched_gradient_phase_interleaved_cpu": ratio(ours, base, 1)}


def test_bench_per_prompt_gradient(benchmark, setup, capsys):
    from mechanisms.dpgrpo.timing import nonprivate_grpo_update

    trainer, public = setup
    k, repeats = _size(benchmark)
    records = public[:k]
    groups = trainer.score(records, trainer.rollouts(trainer.model, records, "current"))
    items = list(zip(records, groups))
    update = benchmark.pedantic(trainer.noisy_update, args=(items,), rounds=repeats, iterations=1,
                                warmup_rounds=0 if benchmark.disabled else 1)
    assert update.shape == (trainer.space.dim,)
    baseline = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        nonprivate_grpo_update(trainer, records, groups)
        baseline.append(time.perf_counter() - t0)
    info = {"records": k, "G": trainer.config.G, "L_max": trainer.config.L_max,
            "nonprivate_gradient_per_prompt_s": statistics.median(baseline) / k}
    if benchmark.stats:
        private = benchmark.stats.stats.median
        info["private_gradient_per_prompt_s"] = private / k
        info["ratio_vs_nonprivate"] = private / statistics.median(baseline)
    benchmark.extra_info.update(info)
    _report(capsys, "per-prompt gradient", info)


def test_bench_batched_vs_isolated_generation(benchmark, setup, capsys):
    from mechanisms.dpgrpo.timing import time_generation_modes

    trainer, public = setup
    k, repeats = _size(benchmark)
    out = benchmark.pedantic(time_generation_modes, args=(trainer.model, trainer.tokenizer, public[:k],
                                                          trainer.config),
                             kwargs={"repeats": repeats}, rounds=1, iterations=1)
    assert out["isolated_s"] > 0 and out["batched_s"] > 0
    benchmark.extra_info.update(out)
    _report(capsys, "generation", out)
