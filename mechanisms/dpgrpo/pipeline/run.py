"""End-to-end DP-GRPO runs: the entry point of `privcheck run dp-grpo` (docs/dpgrpo.md, "End-to-end runs").

`run_dpgrpo(preset, out=DIR, ...)`: validate everything (`setup.setup_run`), run the float64 verification
suite once, then for each replicate (a seed, or one OS-entropy run) and each arm run the arm
(`arm.run_arm`), and write DIR: one run artifact per arm (`artifact`), its private telemetry, the LoRA
weights, the compare artifact, a report and plots (`compare`).

Guarantees:

* Bad input raises `InvalidParameter` before any model is built or any file is written.
* Every document is sealed and validated against its JSON Schema, and every file is written, by the one
  artifact writer (`privcheck.artifacts.ArtifactDirectory`): files are staged next to DIR and moved in only when
  all of them are written, so a failure leaves nothing behind. Private telemetry (batch sizes, rewards, norms,
  losses, lengths, per-round wall time) goes to `DIR/private/*.jsonl` (directory 0700, files 0600) and is
  referenced from the public artifact only by path and sha256.
* Public telemetry holds only functions of ĝ_t, the released weights and public inputs; evaluations use
  public prompts and a dedicated evaluation seed (`evaluation.Evaluator`).
* ε is never computed here: every private arm's privacy entry comes from its config's privacy plan.
* Under a launcher (`torchrun`, `accelerate launch`; `launch.detect_launch`) every rank runs the same program on
  the same inputs with `DistributedDPTrainer` (gloo on CPU, NCCL on CUDA; docs/scaling.md), and only rank 0
  writes DIR; rank 0 runs the verification suite once and hands its block to the others. A plain process
  runs as before.

Assumptions: torch, transformers and peft are installed (the `train` extra); matplotlib for the plots.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from mechanisms.dpgrpo.pipeline.arm import Clock, run_arm
from mechanisms.dpgrpo.pipeline.artifact import RUN_SCHEMA
from mechanisms.dpgrpo.pipeline.compare import COMPARE_SCHEMA, build_compare, plot_png, render_report
from mechanisms.dpgrpo.pipeline.inputs import eval_prompts, sha256_bytes, task_tokenizer
from mechanisms.dpgrpo.pipeline.setup import DEFAULT_ARMS, RunSetup, setup_run
from privcheck.serialization import jsonable

__all__ = ["COMPARE_NAME", "PRIVATE_DIR", "RunOutcome", "run_dpgrpo", "torch_threads", "verification_block"]

PRIVATE_DIR = "private"
COMPARE_NAME = "compare.json"


@dataclass
class RunOutcome:
    status: str
    artifacts: list            # (path, sealed run document); empty on the ranks that do not write
    compare_path: Path | None  # None on the ranks that do not write (every rank of a launched run but 0)
    compare: dict | None
    report_path: Path | None


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run with `n` torch CPU threads (a preset's public setting; tiny models gain nothing from more), restored
    after; `None` leaves the count unchanged."""
    import torch
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def verification_block(setup: RunSetup) -> dict:
    """Run the dpgrpo suite once per invocation (or record it as skipped): the float64 checks V1–V12, and the
    V13 preflight results grouped by their precision, never merged with the float64 ones."""
    if setup.skip_verification:
        return {"status": "skipped", "reason": "skipped by request (--skip-verification)", "float64": [],
                "preflight": {"float32": [], "bfloat16": []}}
    from mechanisms.dpgrpo.verify import run_suite
    suite = run_suite()
    checks = [c.to_json() for c in suite.checks]
    status = "pass" if checks and all(c["status"] == "pass" for c in checks) else "fail"
    by_precision = {"float64": [], "float32": [], "bfloat16": []}
    for c in checks:
        by_precision.setdefault(c.get("precision") or "float64", []).append(c)
    float64 = by_precision.pop("float64")
    # the identity the float64 catalogue verified (the reference fixture's trainer: `artifact.identity_block`
    # binds it to each arm); V13 runs on its own fixture and is listed, not bound
    subjects = {r.verified.identity.digest: r.verified.identity for r in suite.checks if r.verified is not None}
    verified = next(iter(subjects.values())).to_json() if len(subjects) == 1 else None
    return {"status": status, "suite": suite.name, "float64": jsonable(float64), "preflight": jsonable(by_precision),
            "identity": verified}


def _shared_verification(setup: RunSetup) -> dict:
    """`verification_block` in a plain process; under a launcher rank 0 runs it and every rank gets its block."""
    if setup.launch is None:
        return verification_block(setup)
    from mechanisms.dpgrpo.distributed import broadcast_object_from_rank0
    return broadcast_object_from_rank0(verification_block(setup) if setup.writer else None)


def _jsonl(lines) -> bytes:
    return "".join(json.dumps(jsonable(x), sort_keys=True, allow_nan=False) + "\n" for x in lines).encode()


def run_dpgrpo(preset="tiny-cpu", *, out, arms=DEFAULT_ARMS, seeds=None, seed=None, model_path=None,
               time_limit_s=None, device=None, reduced=False, verifier=None, public_examples=None, overrides=None,
               q=None, skip_verification=False, measure_timing=True, progress=True, launch="auto") -> RunOutcome:
    """Run `preset` end to end and write DIR (see the module docstring). Returns a `RunOutcome`.

    `seeds=[0, 1, 2]` or `seed=S`: seeded replicates (reproducible, never a privacy release); neither: one
    OS-entropy run. `overrides`: public preset knobs (`setup.OVERRIDABLE`), `q` sets m = q·n. `launch`:
    "auto" (the launcher's environment, if any), None (a plain process) or a `launch.Launch`."""
    from mechanisms.dpgrpo.evaluation import Evaluator
    from mechanisms.dpgrpo.pipeline.launch import process_group
    from privcheck.artifacts import ArtifactDirectory

    setup = setup_run(preset, out=out, arms=arms, seeds=seeds, seed=seed, model_path=model_path,
                      time_limit_s=time_limit_s, device=device, reduced=reduced, verifier=verifier,
                      public_examples=public_examples, overrides=overrides, q=q,
                      skip_verification=skip_verification, measure_timing=measure_timing, progress=progress,
                      launch=launch)
    p = setup.preset
    with process_group(setup.launch, setup.device), torch_threads(p.cpu_threads if setup.device == "cpu" else None):
        clock = Clock(setup.deadline_s)
        setup.verification = _shared_verification(setup)
        outcomes = []
        for label, s in setup.replicates:
            evaluator = Evaluator(task_tokenizer(setup), setup.verifier, eval_prompts(p), samples=p.eval_samples,
                                  tau=p.tau, L_max=p.L_max, max_prompt_len=p.max_prompt_len,
                                  seed=None if s is None else s + p.eval_seed_offset)
            for arm in setup.arms:
                outcomes.append((arm, label, run_arm(setup, arm, label, s, evaluator, clock)))
    if not setup.writer:                     # rank r > 0 of a launched run: rank 0 writes DIR
        done = all(oc.doc["status"] == "complete" for _, _, oc in outcomes)
        return RunOutcome(status="complete" if done else "incomplete", artifacts=[], compare_path=None,
                          compare=None, report_path=None)

    entries = []
    with ArtifactDirectory(setup.out) as staging:
        staging.mkdir(PRIVATE_DIR, mode=0o700)
        for arm, label, oc in outcomes:
            stem = f"run-{arm}-{label}"
            priv_bytes = _jsonl(oc.private_lines)
            priv_rel = f"{PRIVATE_DIR}/{stem}.jsonl"
            weights = f"lora-{arm}-{label}.safetensors"
            oc.doc["private_telemetry_ref"] = {"path": priv_rel, "sha256": sha256_bytes(priv_bytes), "mode": "0600"}
            oc.doc["released_weights"] = {"path": weights, "sha256": sha256_bytes(oc.lora_bytes),
                                          "format": "safetensors (LoRA only)"}
            staging.write_bytes(priv_rel, priv_bytes, mode=0o600)
            staging.write_bytes(weights, oc.lora_bytes)
            doc = staging.write_json(f"{stem}.json", jsonable(oc.doc), schema=RUN_SCHEMA)
            entries.append((setup.out / f"{stem}.json", doc))
        compare = staging.write_json(COMPARE_NAME, build_compare(setup, entries), schema=COMPARE_SCHEMA)
        acc_series = {f"{a} ({lab})": [(c["t"], c["accuracy"]) for c in oc.curve] for a, lab, oc in outcomes}
        rew_series = {f"{a} ({lab})": list(enumerate(oc.rewards, start=1)) for a, lab, oc in outcomes}
        acc_png = plot_png(acc_series, f"{p.name}: public evaluation accuracy", "sampled accuracy (public prompts)")
        plot_name = None
        if acc_png is not None:
            plot_name = "accuracy.png"
            staging.write_bytes(plot_name, acc_png)
        rew_png = plot_png(rew_series, f"{p.name}: mean reward per round (PRIVATE)", "mean reward of sampled groups")
        if rew_png is not None:
            staging.write_bytes(f"{PRIVATE_DIR}/reward.png", rew_png, mode=0o600)
        staging.write_text("report.md", render_report(setup, compare, [d for _, d in entries], plot_name))
    return RunOutcome(status=compare["status"], artifacts=entries, compare_path=setup.out / COMPARE_NAME,
                      compare=compare, report_path=setup.out / "report.md")
