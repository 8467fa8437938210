"""One arm of one replicate, end to end: build the public model, pretrain it on public examples, evaluate it
on public prompts, then (and only then) build the slot universe of private records and train T rounds with
`DPTrainer`, evaluating the released checkpoint every `eval_every` rounds; measure the private/non-private
round time on public prompts; return the unsealed run document with its private telemetry and LoRA weights.

The wall-clock guard (`Clock`) stops before a round that would pass the invocation's time limit; the run is
then `incomplete` (and never a privacy release), while the accounting still covers the planned T.

Under a launcher (`setup.launch`) the trainer is `DistributedDPTrainer` (docs/scaling.md): rank 0's weights are
broadcast after the public pretraining, so every rank starts from the same π_ref and LoRA, and rank 0's
guard decides for all ranks, so they stop at the same round.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass

from mechanisms.dpgrpo.pipeline.artifact import finite_or_none, run_document
from mechanisms.dpgrpo.pipeline.inputs import build_model, eval_prompts, private_records, tensor_sha256
from mechanisms.dpgrpo.pipeline.setup import RunSetup
from privcheck.interrupts import reraise_if_interrupted
from privcheck.serialization import jsonable

__all__ = ["ArmOutcome", "Clock", "run_arm"]


@dataclass
class ArmOutcome:
    doc: dict
    private_lines: list
    lora_bytes: bytes
    curve: list
    rewards: list


class Clock:
    """The wall-clock guard of one invocation: stop before a round that would pass the limit."""

    def __init__(self, limit: float | None):
        self.limit = limit
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def would_overrun(self, next_round_s: float) -> bool:
        return self.limit is not None and self.elapsed() + next_round_s > self.limit


def _lora_safetensors(model) -> bytes:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save
    state = {k: v.detach().to("cpu").contiguous() for k, v in get_peft_model_state_dict(model).items()}
    return save(state)


def _measure_ratio(trainer, public_records) -> tuple[dict | None, str | None]:
    from mechanisms.dpgrpo.timing import measure_private_over_nonprivate
    try:
        return dict(measure_private_over_nonprivate(trainer, public_records, repeats=3)), None
    except Exception as err:  # noqa: BLE001 — a timing measurement must not sink the run; recorded instead
        reraise_if_interrupted(err)
        return None, f"measurement failed: {type(err).__name__}: {err}"


def _ratio_detail(ratio: dict) -> dict:
    """A timing module's figures; its count of (public) records is renamed so that no public key matches a
    private-telemetry key."""
    return jsonable({("public_records_used" if k == "records" else k): v for k, v in ratio.items()})


def _progress(total: int, desc: str, enabled: bool):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled or not sys.stderr.isatty())


def _not_evaluated(model) -> None:
    return None


def run_arm(setup: RunSetup, arm: str, label: str, seed: int | None, evaluator, clock: Clock) -> ArmOutcome:
    import torch

    from mechanisms.dpgrpo.pretrain import pretrain_public
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.trainer import DPTrainer

    trainer_cls, agree = DPTrainer, bool
    if setup.launch is not None:
        from mechanisms.dpgrpo.distributed import DistributedDPTrainer, broadcast_module, rank0_decides
        trainer_cls, agree = DistributedDPTrainer, rank0_decides
    p = setup.preset
    config = setup.configs[(arm, label)]
    t_start = time.perf_counter()
    s = 0 if seed is None else seed
    built = build_model(setup, s)
    lora_init_sha = tensor_sha256([(k, t) for k, t in built.model.named_parameters() if "lora_" in k])
    t0 = time.perf_counter()
    pretrain = pretrain_public(built.model, built.tokenizer, steps=p.pretrain_steps, lr=p.pretrain_lr,
                               batch=p.pretrain_batch, seed=p.pretrain_seed + s, max_prompt_len=p.max_prompt_len,
                               L_max=p.L_max)
    pretrain_s = time.perf_counter() - t0
    if setup.launch is not None:
        broadcast_module(built.model)          # one π_ref and one LoRA initialisation on every rank
    base_sha = tensor_sha256([(k, t) for k, t in built.model.named_parameters() if "lora_" not in k])
    if built.base_model["kind"] == "config":
        built.base_model["sha256"] = base_sha          # π_ref: the base after public pretraining
    elif pretrain["steps"] > 0:
        built.base_model["pretrained_weights_sha256"] = base_sha
    if not setup.writer:       # rank r > 0 of a launched run: rank 0 evaluates and records the released weights
        evaluator = _not_evaluated
    eval_s = 0.0
    t0 = time.perf_counter()
    before = evaluator(built.model)
    eval_s += time.perf_counter() - t0
    curve = [{"t": 0, "accuracy": before}]

    # Only now are private records read (after the public pretraining and the initial evaluation).
    universe = SlotUniverse(p.n, torch.ones(p.n, dtype=torch.bool), private_records(p))
    trainer = trainer_cls(built.model, built.tokenizer, universe, config, setup.verifier,
                          public_examples=setup.public_examples)
    round_s: list[float] = []
    stop_reason = None
    bar = _progress(config.T, f"dp-grpo[{arm}, {label}]", setup.progress)
    for t in range(1, config.T + 1):
        if agree(clock.would_overrun(max(round_s) if round_s else 0.0)):
            stop_reason = (f"wall-clock guard: {clock.elapsed():.1f} s spent (+ {max(round_s or [0]):.1f} s for a "
                           f"round) would pass time_limit_s = {clock.limit:g}; {t - 1}/{config.T} rounds done")
            break
        t0 = time.perf_counter()
        trainer.step()
        round_s.append(time.perf_counter() - t0)
        if bar is not None:
            bar.update(1)
        if t % p.eval_every == 0 or t == config.T:
            t0 = time.perf_counter()
            curve.append({"t": t, "accuracy": evaluator(built.model)})
            eval_s += time.perf_counter() - t0
    if bar is not None:
        bar.close()
    rounds = len(round_s)
    if curve[-1]["t"] != rounds:          # stopped early: evaluate the last released checkpoint
        t0 = time.perf_counter()
        curve.append({"t": rounds, "accuracy": evaluator(built.model)})
        eval_s += time.perf_counter() - t0
    public_telemetry = [dict(e) for e in trainer.public_telemetry]
    private = [dict(e, wall_s=w) for e, w in zip(trainer.private_telemetry, round_s)]
    lora_bytes = _lora_safetensors(built.model) if setup.writer else b""
    peak = {}
    if setup.device == "cuda":
        peak = {"cuda_max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated())}
    ratio, ratio_note = (None, "not measured (measure_timing=False)")
    generation_modes = None
    if setup.measure_timing and rounds == config.T:
        ratio, ratio_note = _measure_ratio(trainer, eval_prompts(p)[:max(1, round(config.m))])
        if ratio is not None and setup.launch is not None:
            ratio_note = (f"private path on {trainer.world_size} ranks ({trainer.backend}), measured on rank 0; "
                          "non-private path on one rank")
        if config.rollout_mode == "batched" and setup.writer:   # isolated vs batched generation, 4 public prompts
            from mechanisms.dpgrpo.timing import time_generation_modes
            generation_modes = _ratio_detail(time_generation_modes(built.model, built.tokenizer,
                                                                   eval_prompts(p)[:4], config))
    total_s = time.perf_counter() - t_start

    status = "complete" if rounds == config.T else "incomplete"
    if not setup.writer:
        return ArmOutcome({"status": status}, private, b"", curve, [])
    doc = run_document(setup, arm, label, config, built, trainer, pretrain, lora_init_sha, public_telemetry, curve,
                       evaluator, status, stop_reason,
                       timing={"covered_by_guarantee": False, "total_s": total_s,
                               "median_round_s": statistics.median(round_s) if round_s else None,
                               "rounds_completed": rounds, "pretrain_s": pretrain_s, "evaluation_s": eval_s,
                               "private_over_nonprivate": None if ratio is None else finite_or_none(ratio.get("round")),
                               "private_over_nonprivate_gradient_phase":
                                   None if ratio is None else finite_or_none(ratio.get("gradient_phase")),
                               "private_over_nonprivate_detail": None if ratio is None else _ratio_detail(ratio),
                               "private_over_nonprivate_note": ratio_note, **peak,
                               "tokens_per_s": None if ratio is None else finite_or_none(ratio.get("tokens_per_s")),
                               "generation_modes": generation_modes,
                               "note": "wall-clock measurements are outside the guarantee; omit from a release"})
    rewards = [e.get("reward_mean") for e in private]
    return ArmOutcome(doc, private, lora_bytes, curve, rewards)
