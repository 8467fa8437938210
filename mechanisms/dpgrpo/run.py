"""End-to-end DP-GRPO runs: `privcheck run dp-grpo` (spec shared/spec/dpgrpo.md §9).

For each replicate (a seed, or one OS-entropy run) and each arm: build the public model, pretrain it on
public examples, evaluate it on the public prompts, then — and only then — build the slot universe of private
records and train T rounds with `DPTrainer`, evaluating the released checkpoint every `eval_every` rounds; then
write one run artifact per arm (`privcheck.dpgrpo.run/1`), its private telemetry, the LoRA weights, and finally
a compare artifact (`privcheck.dpgrpo.compare/1`), a report and plots.

Guarantees:

* Bad input raises `InvalidParameter` before any model is built or any file is written (`plan_run`).
* Every file is written atomically; artifacts are validated against their JSON Schema and sealed (sha256)
  before writing. Private telemetry (batch sizes, rewards, norms, losses, lengths, per-round wall time) goes to
  `DIR/private/*.jsonl` with mode 0600 and is referenced from the public artifact only by path and sha256.
* Public telemetry holds only functions of ĝ_t, the released weights and public inputs; evaluations use
  public prompts and a dedicated evaluation seed (`evaluation.Evaluator`).
* ε is never computed here: `privcheck.accounting` gives the PLD figure at the public (q, σ, T, δ), the RDP
  cross-check and the replace-one / group conversions; σ comes from the preset (calibrated or precomputed).
* `privacy_release` is true only for a complete OS-entropy run of a private arm whose verification suite ran
  and passed; otherwise `release_blockers` says why (seeded randomness, wall-clock stop, skipped or failing
  verification, non-private arm).

Assumptions: torch, transformers and peft are installed (the `train` extra); matplotlib for the plots.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import inspect
import io
import json
import math
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from privcheck import validation as val
from privcheck.errors import InvalidParameter

from mechanisms.dpgrpo.config import ARMS, NONPRIVATE_ARM
from mechanisms.dpgrpo.presets import Preset, config_for, get_preset

RUN_SCHEMA_ID = "privcheck.dpgrpo.run/1"
COMPARE_SCHEMA_ID = "privcheck.dpgrpo.compare/1"
RUN_SCHEMA_FILE = "dpgrpo_run.schema.json"
COMPARE_SCHEMA_FILE = "dpgrpo_compare.schema.json"
DEFAULT_ARMS = ("dp_grpo", "zero_advantage")
PRIVATE_DIR = "private"
COMPARE_NAME = "compare.json"
# Public knobs a caller may override (validated by `Preset`; σ is recalibrated when (q, T, δ, ε) change).
OVERRIDABLE = ("n", "m", "T", "G", "C", "lr", "tau", "L_max", "beta", "delta", "target_epsilon", "eval_prompts",
               "eval_samples", "eval_every", "pretrain_steps", "lora_dropout")
LOCAL_WEIGHTS_OVERRIDES = {"n": 64, "m": 16, "L_max": 16, "pretrain_steps": 0}   # spec §9.3
DEVICES = ("cpu", "cuda")
PUBLIC_EVAL_SEED = 31_337      # public seed of the random-id evaluation prompts (parity task)


# --------------------------------------------------------------------------------------------- the plan

@dataclass
class RunPlan:
    """Everything a run needs, validated; building it has no side effects besides σ calibration."""

    preset: Preset
    arms: tuple
    replicates: tuple              # (label, seed or None)
    out: Path
    device: str
    verifier: object
    public_examples: tuple
    model_path: Path | None
    deadline_s: float | None
    skip_verification: bool
    measure_timing: bool
    progress: bool
    configs: dict = field(default_factory=dict)   # (arm, label) -> DPGRPOConfig
    rollout_note: str | None = None
    verification: dict | None = None              # filled once per invocation by `_verification`
    tokenizer: object = None                      # loaded once per invocation by `task_tokenizer`


def _parse_arms(arms) -> tuple:
    items = [arms] if isinstance(arms, str) else list(arms) if arms is not None else list(DEFAULT_ARMS)
    names = [s.strip() for item in items for s in str(item).split(",") if s.strip()]
    bad = [a for a in names if a not in ARMS]
    if not names or bad or len(set(names)) != len(names):
        raise InvalidParameter("arms", arms, "a non-empty list of distinct arms from " + ", ".join(ARMS))
    return tuple(names)


def _parse_replicates(seeds, seed) -> tuple:
    if seeds is not None and seed is not None:
        raise InvalidParameter("seed", seed, "None when seeds is given (use one of --seeds / --seed)")
    if seed is not None:
        seeds = [seed]
    if seeds is None:
        return (("release", None),)
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise InvalidParameter("seeds", seeds, "a list of non-negative integer seeds")
    out = [val.count("seed", s, minimum=0) for s in seeds]
    if not out or len(set(out)) != len(out):
        raise InvalidParameter("seeds", seeds, "a non-empty list of distinct non-negative integers")
    return tuple((f"seed{s}", s) for s in out)


def _check_device(device: str) -> str:
    if device not in DEVICES:
        raise InvalidParameter("device", device, "'cpu' or 'cuda'")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InvalidParameter("device", device, "'cpu' here (torch.cuda.is_available() is False); "
                                   "use --reduced --device cpu for the CPU form of a GPU preset")
    return device


def _check_verifier(verifier, examples) -> None:
    """The verifier must return 0 or 1 on every public example, before any private record is read (§2.1)."""
    from mechanisms.dpgrpo.trainer import _reward_value
    if not callable(verifier):
        raise InvalidParameter("verifier", verifier, "a callable (record, completion) -> {0, 1}")
    name = getattr(verifier, "__qualname__", repr(verifier))
    for rec, completion in examples:
        try:
            r = verifier(rec, completion)
        except Exception as err:  # noqa: BLE001 — any failure on public data is bad input
            raise InvalidParameter("verifier", name, f"a verifier that returns 0 or 1 on the public examples (it "
                                   f"raised {type(err).__name__}: {err} on {rec.prompt!r} / {completion!r})") from err
        if _reward_value(r) is None:
            raise InvalidParameter("verifier", name, f"a verifier that returns 0 or 1 on the public examples "
                                   f"(it returned {r!r} on {rec.prompt!r} / {completion!r})")


def _task_defaults(preset: Preset):
    """(verifier, public examples) of the preset's task."""
    if preset.task == "addition":
        from mechanisms.dpgrpo.tasks import reward
        from mechanisms.dpgrpo.trainer import DEFAULT_PUBLIC_EXAMPLES
        return reward, tuple(DEFAULT_PUBLIC_EXAMPLES)
    from mechanisms.dpgrpo.presets import first_token_even, parity_public_examples
    return first_token_even, parity_public_examples()


def _effective_rollout_mode(preset: Preset) -> tuple[str, str | None]:
    if preset.rollout_mode != "batched":
        return preset.rollout_mode, None
    from mechanisms.dpgrpo import rollouts
    if getattr(rollouts, "BatchedHF", None) is None:
        return "isolated", "preset asks for batched rollouts; BatchedHF is not available, isolated rollouts used"
    return "batched", None


def plan_run(preset="tiny-cpu", *, out, arms=DEFAULT_ARMS, seeds=None, seed=None, model_path=None,
             time_limit_s=None, device=None, reduced=False, verifier=None, public_examples=None, overrides=None,
             q=None, skip_verification=False, measure_timing=True, progress=True) -> RunPlan:
    """Validate every input (raising `InvalidParameter` naming it) and calibrate σ; touches no file."""
    p = preset if isinstance(preset, Preset) else get_preset(preset, reduced=reduced)
    if isinstance(preset, Preset) and reduced:
        p = p.reduced()
    if out is None or (isinstance(out, str) and not out.strip()):
        raise InvalidParameter("out", out, "an output directory")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InvalidParameter("out", str(out), "a directory (an existing file is in the way)")
    changes = dict(overrides or {})
    unknown = sorted(set(changes) - set(OVERRIDABLE))
    if unknown:
        raise InvalidParameter("overrides", unknown, "keys among " + ", ".join(OVERRIDABLE))
    if model_path is not None:
        if p.task != "addition":
            raise InvalidParameter("model", str(model_path), "only with an addition-task preset (tiny-cpu)")
        path = Path(model_path)
        if not (path.is_dir() or (path.is_file() and path.suffix == ".gguf")):
            raise InvalidParameter("model", str(model_path), "an existing local weights directory or .gguf file")
        model_path = path
        changes = {**LOCAL_WEIGHTS_OVERRIDES, **changes}
    if q is not None:
        q = val.sampling_rate("q", q)
        m = q * changes.get("n", p.n)
        changes["m"] = int(round(m)) if abs(m - round(m)) < 1e-9 else m
    if "T" in changes:
        val.count("T", changes["T"])
    if changes:
        before = (p.q, p.T, p.delta, p.target_epsilon)
        try:
            p = p.replace(**changes)
        except TypeError as err:
            raise InvalidParameter("overrides", changes, "public preset fields with valid values") from err
        if p.sigma is not None and (p.q, p.T, p.delta, p.target_epsilon) != before:
            p = p.replace(sigma=None, calibration=None)         # σ belonged to the old (q, T, δ, ε): recalibrate
    caller = sorted(set(overrides or {}) | ({"q"} if q is not None else set()))
    if caller:                                                  # the library cannot know how these were chosen
        p = p.replace(tuning_on_private_data="unknown", tuning_note=f"public knobs overridden by the caller: {caller}")
    if time_limit_s is not None:
        time_limit_s = val.positive("time_limit_s", time_limit_s)
    elif p.time_limit_s is not None:
        time_limit_s = p.time_limit_s
    device = _check_device(p.device if device is None else device)
    arms = _parse_arms(arms)
    replicates = _parse_replicates(seeds, seed)
    default_verifier, default_examples = _task_defaults(p)
    verifier = default_verifier if verifier is None else verifier
    examples = default_examples if public_examples is None else tuple(public_examples)
    if not examples:
        raise InvalidParameter("public_examples", examples, "at least one (Record, completion) pair")
    _check_verifier(verifier, examples)
    for flag, value in (("skip_verification", skip_verification), ("measure_timing", measure_timing),
                        ("progress", progress)):
        if not isinstance(value, bool):
            raise InvalidParameter(flag, value, "a bool")
    mode, note = _effective_rollout_mode(p)
    plan = RunPlan(preset=p, arms=arms, replicates=replicates, out=out, device=device, verifier=verifier,
                   public_examples=examples, model_path=model_path, deadline_s=time_limit_s,
                   skip_verification=skip_verification, measure_timing=measure_timing, progress=progress,
                   rollout_note=note)
    for arm in arms:
        for label, s in replicates:
            plan.configs[(arm, label)] = _arm_config(p, arm, "os_entropy" if s is None else s, mode)
    return plan


def _arm_config(p: Preset, arm: str, randomness, mode: str):
    if arm == NONPRIVATE_ARM:  # σ = 0 and no clipping: the non-private reference, no privacy claim
        from mechanisms.dpgrpo.config import DPGRPOConfig
        kwargs = {**p.config_kwargs(), "C": math.inf, "rollout_mode": mode}
        return DPGRPOConfig(sigma=0.0, arm=arm, randomness=randomness, **kwargs)
    return config_for(p, arm=arm, randomness=randomness, rollout_mode=mode)


# --------------------------------------------------------------------------------------------- building

@dataclass
class Built:
    model: object
    tokenizer: object
    base_model: dict
    tokenizer_sha256: str


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor_sha256(named) -> str:
    """sha256 over (name, dtype, shape, bytes) of tensors in sorted-name order."""
    import torch
    h = hashlib.sha256()
    for name, t in sorted(named, key=lambda kv: kv[0]):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tokenizer_sha256(tok) -> str:
    if hasattr(tok, "describe"):
        return _sha256_bytes(json.dumps(tok.describe(), sort_keys=True).encode())
    if hasattr(tok, "vocab") and isinstance(tok.vocab, tuple):
        return _sha256_bytes(json.dumps(list(tok.vocab)).encode())
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        return _sha256_bytes(backend.to_str().encode())
    return _sha256_bytes(json.dumps(sorted(tok.get_vocab().items())).encode())


def _local_source(path: Path) -> tuple[Path, dict]:
    """(directory, from_pretrained kwargs) of a weights directory or a GGUF file."""
    return (path.parent, {"gguf_file": path.name}) if path.is_file() else (path, {})


def task_tokenizer(plan: RunPlan):
    """The tokenizer of the run (loaded once): the local model's (PAD := EOS when unset), else the task's."""
    if plan.tokenizer is None:
        plan.tokenizer = _load_tokenizer(plan)
    return plan.tokenizer


def _load_tokenizer(plan: RunPlan):
    p = plan.preset
    if plan.model_path is not None:
        from transformers import AutoTokenizer
        directory, kwargs = _local_source(plan.model_path)
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True, **kwargs)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok
    if p.task == "addition":
        from mechanisms.dpgrpo.tasks import CharTokenizer
        return CharTokenizer()
    from mechanisms.dpgrpo.presets import IdTokenizer
    return IdTokenizer(p.model.vocab_size)


def _load_local(plan: RunPlan, tok, seed: int) -> Built:
    """Local weights (directory, or GGUF file dequantised to fp32) with LoRA on the seven projections (§9.3)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mechanisms.dpgrpo.presets import QWEN2_LORA_TARGETS

    path, p = plan.model_path, plan.preset
    directory, kwargs = _local_source(path)
    with torch.random.fork_rng(devices=[]):
        base = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32, **kwargs)
        base = base.to(plan.device).eval().requires_grad_(False)
        torch.manual_seed(p.init_seed + seed + 1)
        lora = LoraConfig(r=p.model.lora_r, lora_alpha=p.model.lora_alpha, lora_dropout=p.lora_dropout,
                          target_modules=list(QWEN2_LORA_TARGETS), bias="none", init_lora_weights=True)
        model = get_peft_model(base, lora).eval()
    if path.is_file():
        info = {"kind": "gguf", "sha256": _file_sha256(path), "file": path.name,
                "class": type(base).__name__}
    else:
        weights = sorted(f for f in path.iterdir() if f.suffix in (".safetensors", ".bin"))
        h = hashlib.sha256()
        for f in weights:
            h.update(f.name.encode() + b"|" + _file_sha256(f).encode())
        info = {"kind": "local", "sha256": h.hexdigest(), "files": [f.name for f in weights],
                "class": type(base).__name__}
    info["parameters"] = sum(t.numel() for t in base.parameters())
    return Built(model, tok, info, _tokenizer_sha256(tok))


def _build(plan: RunPlan, seed: int) -> Built:
    """The public model (init seed = preset.init_seed + replicate seed) and tokenizer of the preset's task."""
    p = plan.preset
    tok = task_tokenizer(plan)
    if plan.model_path is not None:
        return _load_local(plan, tok, seed)
    if tok.vocab_size != p.model.vocab_size:
        raise InvalidParameter("model.vocab_size", p.model.vocab_size, f"{tok.vocab_size} (the tokenizer's)")
    model = p.model.build(tok, seed=p.init_seed + seed, device=plan.device, lora_dropout=p.lora_dropout)
    base = [(k, t) for k, t in model.named_parameters() if "lora_" not in k]
    info = {"kind": "config", "class": "Qwen2ForCausalLM", "init_seed": p.init_seed + seed,
            "spec": p.model.to_json(), "parameters": sum(t.numel() for _, t in base)}
    return Built(model, tok, info, _tokenizer_sha256(tok))


def _eval_prompts(p: Preset):
    """The public evaluation prompts of the preset's task."""
    if p.task == "addition":
        import random
        from mechanisms.dpgrpo.tasks import addition_record
        pairs = [(a, b) for a in range(10) for b in range(10)]
        if p.eval_prompts < len(pairs):
            pairs = sorted(random.Random(PUBLIC_EVAL_SEED).sample(pairs, p.eval_prompts))
        return [addition_record(a, b) for a, b in pairs]
    from mechanisms.dpgrpo.presets import random_id_prompts
    return random_id_prompts(p.eval_prompts, p.prompt_tokens, p.model.vocab_size, PUBLIC_EVAL_SEED)


def _private_records(p: Preset):
    """The records behind the n slots (synthetic here; treated as private: never hashed or logged)."""
    if p.task == "addition":
        from mechanisms.dpgrpo.records import Record
        from mechanisms.dpgrpo.tasks import addition_records
        return [Record(prompt=r.prompt, answer=r.answer, solution=r.answer, meta=dict(r.meta))
                for r in addition_records(p.n, p.records_seed)]
    from mechanisms.dpgrpo.presets import random_id_prompts
    return random_id_prompts(p.n, p.prompt_tokens, p.model.vocab_size, p.records_seed)


# --------------------------------------------------------------------------------------------- accounting

def privacy_block(config, preset: Preset) -> dict | None:
    """The artifact's `privacy` entry from privcheck's accountant (None for the non-private arm)."""
    if config.nonprivate:
        return None
    from privcheck.accounting import epsilon_pld, epsilon_rdp, group_privacy, replace_one
    from privcheck.environment import package_version

    pld = epsilon_pld(config.q, config.sigma, config.T, config.delta)
    rdp = epsilon_rdp(config.q, config.sigma, config.T, config.delta)
    eps = pld.value
    cal = dict(config.calibration) if config.calibration is not None else None
    derived = {"replace_one": None, "group": []}
    if math.isfinite(eps) and eps > 0:
        r1 = replace_one(eps, config.delta)
        derived["replace_one"] = [r1.value, r1.details["delta"]]
        for k in (2,):
            g = group_privacy(eps, config.delta, k)
            derived["group"].append({"k": k, "epsilon": g.value, "delta": g.details["delta"]})
    derived["note"] = "certified conversions (Corollary 1, Proposition 1); a δ above 1 is vacuous"
    return {
        "unit": "prompt_group", "neighboring": "add_remove", "n": config.n, "n_canary": 0, "q": config.q,
        "sigma": config.sigma, "T": config.T, "delta": config.delta, "C": config.C, "epsilon": eps,
        "target_epsilon": config.target_epsilon, "covered_output": "lora_trajectory",
        "accountant": {"method": "pld", "library": "dp-accounting", "version": package_version("dp-accounting"),
                       "interval": pld.details["interval"], "pessimistic": True, "connect_dots": True,
                       "record": _jsonable(pld.to_json())},
        "rdp_cross_check": {"epsilon": _num(rdp.value), "order": _num(rdp.details.get("order")),
                            "library": "dp-accounting", "version": package_version("dp-accounting"),
                            "consistent": bool(rdp.value >= eps - 1e-6)},
        "calibration": None if cal is None else {
            "target": cal.get("target_epsilon"), "bracket": list(cal.get("bracket", [])),
            "epsilon": cal.get("epsilon"), "source": cal.get("source", "calibrated (DPGRPOConfig.from_target)")},
        "derived": derived,
        "tuning_on_private_data": preset.tuning_on_private_data, "tuning_note": preset.tuning_note,
        "assumptions": {}}


def _num(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return x


# --------------------------------------------------------------------------------------------- one arm

@dataclass
class ArmOutcome:
    doc: dict
    private_lines: list
    lora_bytes: bytes
    curve: list
    rewards: list


def _verifier_sha256(verifier) -> str:
    try:
        src = inspect.getsource(verifier)
    except (OSError, TypeError):
        src = getattr(verifier, "__qualname__", repr(verifier))
    return _sha256_bytes(src.encode())


def _lora_safetensors(model) -> bytes:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save
    state = {k: v.detach().to("cpu").contiguous() for k, v in get_peft_model_state_dict(model).items()}
    return save(state)


def _measure_ratio(trainer, public_records) -> tuple[dict | None, str | None]:
    try:
        from mechanisms.dpgrpo import timing
    except ImportError:
        return None, "mechanisms.dpgrpo.timing is not available in this version"
    fn = getattr(timing, "measure_private_over_nonprivate", None)
    if fn is None:
        return None, "mechanisms.dpgrpo.timing has no measure_private_over_nonprivate"
    try:
        return dict(fn(trainer, public_records, repeats=3)), None
    except Exception as err:  # noqa: BLE001 — a timing measurement must not sink the run; recorded instead
        return None, f"measurement failed: {type(err).__name__}: {err}"


def _ratio_detail(ratio: dict) -> dict:
    """A timing module's figures; its count of (public) records is renamed so that no public key matches a
    private-telemetry key."""
    return _jsonable({("public_records_used" if k == "records" else k): v for k, v in ratio.items()})


def _progress(total: int, desc: str, enabled: bool):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled or not sys.stderr.isatty())


def _run_arm(plan: RunPlan, arm: str, label: str, seed: int | None, evaluator, clock) -> ArmOutcome:
    import torch

    from mechanisms.dpgrpo.pretrain import pretrain_public
    from mechanisms.dpgrpo.records import SlotUniverse
    from mechanisms.dpgrpo.trainer import DPTrainer

    p = plan.preset
    config = plan.configs[(arm, label)]
    t_start = time.perf_counter()
    s = 0 if seed is None else seed
    built = _build(plan, s)
    lora_init_sha = _tensor_sha256([(k, t) for k, t in built.model.named_parameters() if "lora_" in k])
    t0 = time.perf_counter()
    pretrain = pretrain_public(built.model, built.tokenizer, steps=p.pretrain_steps, lr=p.pretrain_lr,
                               batch=p.pretrain_batch, seed=p.pretrain_seed + s, max_prompt_len=p.max_prompt_len,
                               L_max=p.L_max)
    pretrain_s = time.perf_counter() - t0
    base_sha = _tensor_sha256([(k, t) for k, t in built.model.named_parameters() if "lora_" not in k])
    if built.base_model["kind"] == "config":
        built.base_model["sha256"] = base_sha          # π_ref: the base after public pretraining
    elif pretrain["steps"] > 0:
        built.base_model["pretrained_weights_sha256"] = base_sha
    eval_s = 0.0
    t0 = time.perf_counter()
    before = evaluator(built.model)
    eval_s += time.perf_counter() - t0
    curve = [{"t": 0, "accuracy": before}]

    # Only now are private records read (after the public pretraining and the initial evaluation).
    universe = SlotUniverse(p.n, torch.ones(p.n, dtype=torch.bool), _private_records(p))
    trainer = DPTrainer(built.model, built.tokenizer, universe, config, plan.verifier,
                        public_examples=plan.public_examples)
    round_s: list[float] = []
    stop_reason = None
    bar = _progress(config.T, f"dp-grpo[{arm}, {label}]", plan.progress)
    for t in range(1, config.T + 1):
        if clock.would_overrun(max(round_s) if round_s else 0.0):
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
    lora_bytes = _lora_safetensors(built.model)
    peak = {}
    if plan.device == "cuda":
        peak = {"cuda_max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated())}
    ratio, ratio_note = (None, "not measured (measure_timing=False)")
    generation_modes = None
    if plan.measure_timing and rounds == config.T:
        ratio, ratio_note = _measure_ratio(trainer, _eval_prompts(p)[:max(1, round(config.m))])
        if config.rollout_mode == "batched":   # spec §9.2: isolated versus batched generation on 4 public prompts
            from mechanisms.dpgrpo.timing import time_generation_modes
            generation_modes = _ratio_detail(time_generation_modes(built.model, built.tokenizer,
                                                                   _eval_prompts(p)[:4], config))
    total_s = time.perf_counter() - t_start

    status = "complete" if rounds == config.T else "incomplete"
    doc = _artifact(plan, arm, label, config, built, trainer, pretrain, lora_init_sha, public_telemetry, curve,
                    evaluator, status, stop_reason, rounds,
                    timing={"covered_by_guarantee": False, "total_s": total_s,
                            "median_round_s": statistics.median(round_s) if round_s else None,
                            "rounds_completed": rounds, "pretrain_s": pretrain_s, "evaluation_s": eval_s,
                            "private_over_nonprivate": None if ratio is None else _num(ratio.get("round")),
                            "private_over_nonprivate_gradient_phase":
                                None if ratio is None else _num(ratio.get("gradient_phase")),
                            "private_over_nonprivate_detail": None if ratio is None else _ratio_detail(ratio),
                            "private_over_nonprivate_note": ratio_note, **peak,
                            "tokens_per_s": None if ratio is None else _num(ratio.get("tokens_per_s")),
                            "generation_modes": generation_modes,
                            "note": "wall-clock measurements are outside the guarantee; omit from a release"})
    rewards = [e.get("reward_mean") for e in private]
    return ArmOutcome(doc, private, lora_bytes, curve, rewards)


class _Clock:
    """The wall-clock guard of one invocation: stop before a round that would pass the limit."""

    def __init__(self, limit: float | None):
        self.limit = limit
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def would_overrun(self, next_round_s: float) -> bool:
        return self.limit is not None and self.elapsed() + next_round_s > self.limit


# --------------------------------------------------------------------------------------------- artifacts

def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _environment(plan: RunPlan, trainer, deterministic: bool) -> dict:
    import torch
    from privcheck.environment import environment, package_version
    env = environment()
    base_dtype = next(t.dtype for k, t in trainer.model.named_parameters() if "lora_" not in k)
    lora_dtype = trainer.space.params[0].dtype
    name = lambda dt: str(dt).removeprefix("torch.")  # noqa: E731
    env.update({"torch": torch.__version__, "transformers": package_version("transformers"),
                "peft": package_version("peft"), "dp_accounting": package_version("dp-accounting"),
                "device": plan.device, "cpu_threads": torch.get_num_threads(),
                "dtype_policy": {"base": name(base_dtype), "lora": name(lora_dtype), "gradients": name(lora_dtype),
                                 "clip_norm": "float64 accumulation", "noise": name(lora_dtype),
                                 "optimizer": name(lora_dtype)},
                "deterministic": deterministic, "library_commit": env.get("git_commit")})
    if plan.device == "cuda":
        env["device_name"] = torch.cuda.get_device_name(0)
    return env


def _assumptions(trainer, plan: RunPlan) -> dict:
    backend = trainer.rollout_backend
    isolated = getattr(backend, "mode", "isolated") == "isolated"
    out = {"A1": "enforced: public configuration frozen and hashed before the run; T fixed; divisor q·n",
           "A2": "isolated rollouts" if isolated else getattr(backend, "A2_ASSUMPTION", "batch-invariance not "
                                                                                         "guaranteed"),
           "A3": trainer.randomness.mode if trainer.randomness.privacy_release
           else "seeded randomness (not a privacy release)",
           "A4": "gap: floating point (the theorem certifies the real-valued mechanism)"}
    if not isolated:
        out["A2_caveat"] = getattr(backend, "A2_CAVEAT", "batched generation is not batch-invariant")
    return out


def _artifact(plan, arm, label, config, built, trainer, pretrain, lora_init_sha, public_telemetry, curve, evaluator,
              status, stop_reason, rounds, *, timing) -> dict:
    import torch
    p = plan.preset
    privacy = privacy_block(config, p)
    if privacy is not None:
        privacy["assumptions"] = _assumptions(trainer, plan)
    blockers = list(trainer.release_blockers)
    if status != "complete":
        blockers.append("incomplete: the wall-clock guard stopped the run, so the stopping round depends on "
                        "wall-clock time (accounting still covers the planned T)")
    ver = plan.verification
    if ver["status"] == "skipped":
        blockers.append("verification suite skipped")
    elif ver["status"] != "pass":
        blockers.append("verification suite did not pass")
    preset_public = {k: v for k, v in p.to_json().items() if k != "records_seed"}
    public_inputs = {
        "preset": preset_public, "preset_name": p.name, "reduced": p.is_reduced,
        "base_model": built.base_model, "tokenizer_sha256": built.tokenizer_sha256,
        "lora_init": "peft default (A kaiming-uniform under a public seed, B = 0: π_θ1 = π_ref)",
        "lora_init_sha256": lora_init_sha, "param_layout_sha256": trainer.space.layout_sha256,
        "trainable_parameters": trainer.space.dim, "trainable_tensors": len(trainer.space),
        "verifier": getattr(plan.verifier, "__qualname__", repr(plan.verifier)),
        "verifier_sha256": _verifier_sha256(plan.verifier), "public_pretraining": pretrain,
        "slot_universe": {"n": p.n, "content": "private (not recorded)"},
        "rollout_mode": {"requested": p.rollout_mode, "used": getattr(trainer.rollout_backend, "mode", None),
                         "note": plan.rollout_note}}
    evaluation = {**evaluator.describe(), "before": curve[0]["accuracy"], "after": curve[-1]["accuracy"],
                  "every": p.eval_every, "curve": curve}
    doc = {
        "schema": RUN_SCHEMA_ID, "run_id": uuid.uuid4().hex, "created_utc": _utc_now(), "status": status,
        "stop_reason": stop_reason, "arm": arm, "replicate": label,
        "privacy_release": bool(trainer.privacy_release and status == "complete" and ver["status"] == "pass"),
        "release_blockers": blockers,
        "config": {**config.to_json(), "sha256": config.sha256()},
        "public_inputs": public_inputs, "privacy": privacy, "public_telemetry": public_telemetry,
        "private_telemetry_ref": None, "released_weights": None, "evaluation": evaluation, "timing": timing,
        "environment": _environment(plan, trainer, torch.are_deterministic_algorithms_enabled()),
        "verification": ver, "randomness": trainer.randomness.to_json()}
    return doc


def _validate(doc: dict, schema_file: str) -> None:
    import jsonschema
    from privcheck.artifacts.schema import validate
    try:
        validate(doc, schema_file)
    except jsonschema.ValidationError as err:
        raise InvalidParameter("artifact", err.message, f"a document valid against {schema_file}") from err


def _dump_jsonl(lines) -> bytes:
    return "".join(json.dumps(_jsonable(x), sort_keys=True, allow_nan=False) + "\n" for x in lines).encode()


def shared_privacy_check(docs) -> dict:
    """Every private arm's (q, σ, T, δ) must be identical (the arms' claims are then the same ε)."""
    keys = ("q", "sigma", "T", "delta")
    private = [(d["arm"], d["replicate"], d["privacy"]) for d in docs if d.get("privacy") is not None]
    if not private:
        return {"passed": False, "reason": "no private arm", "values": None, "mismatches": [], "arms": []}
    ref = {k: private[0][2][k] for k in keys}
    mismatches = [{"arm": a, "replicate": r, **{k: pv[k] for k in keys}} for a, r, pv in private
                  if any(pv[k] != ref[k] for k in keys)]
    return {"passed": not mismatches, "values": ref, "mismatches": mismatches,
            "arms": sorted({a for a, _, _ in private})}


def build_compare(plan: RunPlan, entries) -> dict:
    """`privcheck.dpgrpo.compare/1` from (path, sealed run document) pairs."""
    docs = [d for _, d in entries]
    runs = [{"arm": d["arm"], "replicate": d["replicate"], "path": str(path.name), "sha256": d["sha256"],
             "status": d["status"], "privacy_release": d["privacy_release"],
             "before": d["evaluation"]["before"], "after": d["evaluation"]["after"]} for path, d in entries]
    accuracy: dict = {}
    for d in docs:
        accuracy.setdefault(d["arm"], {})[d["replicate"]] = {"before": d["evaluation"]["before"],
                                                             "after": d["evaluation"]["after"]}
    contrast = []
    if "dp_grpo" in accuracy:
        for control in (a for a in accuracy if a != "dp_grpo"):
            for label, acc in accuracy["dp_grpo"].items():
                if label in accuracy[control]:
                    contrast.append({"replicate": label, "control": control, "dp_grpo_after": acc["after"],
                                     "control_after": accuracy[control][label]["after"],
                                     "difference": acc["after"] - accuracy[control][label]["after"]})
    return {"schema": COMPARE_SCHEMA_ID, "created_utc": _utc_now(), "preset": plan.preset.name,
            "reduced": plan.preset.is_reduced, "arms": list(plan.arms), "replicates": [r for r, _ in plan.replicates],
            "status": "complete" if all(d["status"] == "complete" for d in docs) else "incomplete",
            "runs": runs, "accuracy": accuracy, "contrast": contrast, "shared_privacy": shared_privacy_check(docs)}


# --------------------------------------------------------------------------------------------- report

def _plot(series: dict, title: str, ylabel: str) -> bytes | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, pts in sorted(series.items()):
        pts = [(x, y) for x, y in pts if isinstance(y, (int, float))]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3, label=name)
    ax.set_xlabel("round t")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _report(plan: RunPlan, compare: dict, docs: list, plot_name: str | None) -> str:
    lines = [f"# DP-GRPO run: preset `{plan.preset.name}`" + (" (reduced)" if plan.preset.is_reduced else ""), ""]
    first = next((d["privacy"] for d in docs if d.get("privacy")), None)
    if first:
        lines += [f"Privacy (every private arm): prompt-level (ε = {first['epsilon']:.6g}, δ = {first['delta']:.6g}), "
                  f"q = {first['q']:.6g}, σ = {first['sigma']!r}, T = {first['T']}, add/remove one prompt group "
                  "(PLD, dp-accounting). Shared (q, σ, T, δ): "
                  f"{'yes' if compare['shared_privacy']['passed'] else 'NO'}.", ""]
    lines += ["| arm | replicate | status | privacy release | accuracy before | accuracy after |",
              "|---|---|---|---|---|---|"]
    for r in compare["runs"]:
        lines.append(f"| {r['arm']} | {r['replicate']} | {r['status']} | {r['privacy_release']} | "
                     f"{r['before']:.4f} | {r['after']:.4f} |")
    if compare["contrast"]:
        lines += ["", "| replicate | control | DP-GRPO after − control after |", "|---|---|---|"]
        lines += [f"| {c['replicate']} | {c['control']} | {c['difference']:+.4f} |" for c in compare["contrast"]]
    if plot_name:
        lines += ["", f"![public evaluation accuracy per round]({plot_name})", ""]
    lines += ["", "Accuracy is sampled accuracy (mean verifier reward at τ) of released checkpoints on public "
              "prompts. Rewards during training are private: their plot is in `private/` next to the private "
              "telemetry and is not part of a release. Timing is outside the guarantee.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- entry point

@dataclass
class RunOutcome:
    status: str
    artifacts: list            # (path, sealed run document)
    compare_path: Path
    compare: dict
    report_path: Path


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


def _verification(plan: RunPlan) -> dict:
    """Run the dpgrpo suite once per invocation (or record it as skipped): the float64 checks V1–V12, and the
    V13 preflight results grouped by their precision, never merged with the float64 ones (spec §7.2)."""
    if plan.skip_verification:
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
    return {"status": status, "suite": suite.name, "float64": _jsonable(float64),
            "preflight": _jsonable(by_precision)}


def run_dpgrpo(preset="tiny-cpu", *, out, arms=DEFAULT_ARMS, seeds=None, seed=None, model_path=None,
               time_limit_s=None, device=None, reduced=False, verifier=None, public_examples=None, overrides=None,
               q=None, skip_verification=False, measure_timing=True, progress=True) -> RunOutcome:
    """Run `preset` end to end and write DIR (see the module docstring). Returns a `RunOutcome`.

    `seeds=[0, 1, 2]` or `seed=S`: seeded replicates (reproducible, never a privacy release); neither: one
    OS-entropy run. `overrides`: public preset knobs (`OVERRIDABLE`), `q` sets m = q·n."""
    from privcheck.artifacts.writer import dump_json, seal, write_atomic

    plan = plan_run(preset, out=out, arms=arms, seeds=seeds, seed=seed, model_path=model_path,
                    time_limit_s=time_limit_s, device=device, reduced=reduced, verifier=verifier,
                    public_examples=public_examples, overrides=overrides, q=q, skip_verification=skip_verification,
                    measure_timing=measure_timing, progress=progress)
    p = plan.preset
    from mechanisms.dpgrpo.evaluation import Evaluator
    with torch_threads(p.cpu_threads if plan.device == "cpu" else None):
        clock = _Clock(plan.deadline_s)
        plan.verification = _verification(plan)
        outcomes = []
        for label, s in plan.replicates:
            evaluator = Evaluator(task_tokenizer(plan), plan.verifier,
                                  _eval_prompts(p), samples=p.eval_samples, tau=p.tau, L_max=p.L_max,
                                  max_prompt_len=p.max_prompt_len,
                                  seed=None if s is None else s + p.eval_seed_offset)
            for arm in plan.arms:
                outcomes.append((arm, label, _run_arm(plan, arm, label, s, evaluator, clock)))

    # Render, seal and validate every document before the first file is written.
    files: list[tuple[Path, bytes, int]] = []
    entries = []
    for arm, label, oc in outcomes:
        stem = f"run-{arm}-{label}"
        priv_bytes = _dump_jsonl(oc.private_lines)
        priv_rel = f"{PRIVATE_DIR}/{stem}.jsonl"
        oc.doc["private_telemetry_ref"] = {"path": priv_rel, "sha256": _sha256_bytes(priv_bytes), "mode": "0600"}
        oc.doc["released_weights"] = {"path": f"lora-{arm}-{label}.safetensors",
                                      "sha256": _sha256_bytes(oc.lora_bytes), "format": "safetensors (LoRA only)"}
        doc = seal(_jsonable(oc.doc))
        _validate(doc, RUN_SCHEMA_FILE)
        path = plan.out / f"{stem}.json"
        files += [(plan.out / priv_rel, priv_bytes, 0o600), (plan.out / oc.doc["released_weights"]["path"],
                                                            oc.lora_bytes, 0o644), (path, dump_json(doc), 0o644)]
        entries.append((path, doc))
    compare = seal(build_compare(plan, entries))
    _validate(compare, COMPARE_SCHEMA_FILE)
    compare_path = plan.out / COMPARE_NAME
    files.append((compare_path, dump_json(compare), 0o644))

    plan.out.mkdir(parents=True, exist_ok=True)
    private_dir = plan.out / PRIVATE_DIR
    private_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(private_dir, 0o700)
    for path, data, mode in files:
        write_atomic(path, data, mode=mode)

    acc_series = {f"{a} ({lab})": [(c["t"], c["accuracy"]) for c in oc.curve] for a, lab, oc in outcomes}
    rew_series = {f"{a} ({lab})": list(enumerate(oc.rewards, start=1)) for a, lab, oc in outcomes}
    acc_png = _plot(acc_series, f"{p.name}: public evaluation accuracy", "sampled accuracy (public prompts)")
    plot_name = None
    if acc_png is not None:
        plot_name = "accuracy.png"
        write_atomic(plan.out / plot_name, acc_png)
    rew_png = _plot(rew_series, f"{p.name}: mean reward per round (PRIVATE)", "mean reward of sampled groups")
    if rew_png is not None:
        write_atomic(private_dir / "reward.png", rew_png, mode=0o600)
    report_path = write_atomic(plan.out / "report.md",
                               _report(plan, compare, [d for _, d in entries], plot_name).encode("utf-8"))
    return RunOutcome(status=compare["status"], artifacts=entries, compare_path=compare_path, compare=compare,
                      report_path=report_path)

