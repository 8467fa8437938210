"""The validated inputs of one `privcheck run dp-grpo` invocation (`RunSetup`), built before anything runs.

`setup_run(...)` checks every argument (raising `InvalidParameter` naming it) and builds one frozen
`DPGRPOConfig` per (arm, replicate); it reads no private record and writes no file. Its only side effect is the
calibration of σ (through `privcheck.accounting.calibrate`, cached per configuration) when the preset does not
carry a precomputed σ. The privacy parameters of every private arm are the plan of its config
(`config.plan`, docs/dpgrpo.md, "Privacy plan"); the non-private reference arm has no plan.

Under a launcher (`torchrun`, `accelerate launch`: `launch.detect_launch`) the setup carries the rank's `Launch`,
and `launch.check_launch` refuses what a distributed run cannot honour; the configs (and so the plans and ε) are
the same as in a single process (docs/scaling.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from mechanisms.dpgrpo.config import ARMS, NONPRIVATE_ARM, DPGRPOConfig
from mechanisms.dpgrpo.pipeline.launch import Launch, check_launch, detect_launch
from mechanisms.dpgrpo.presets import (
    MAX_ROUNDS,
    Preset,
    config_for,
    first_token_even,
    get_preset,
    parity_public_examples,
)
from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.interrupts import reraise_if_interrupted

__all__ = ["DEFAULT_ARMS", "DEVICES", "LOCAL_WEIGHTS_OVERRIDES", "OVERRIDABLE", "RunSetup", "arm_config",
           "check_model_path", "check_verifier", "setup_run"]

DEFAULT_ARMS = ("dp_grpo", "zero_advantage")
# Public knobs a caller may override (validated by `Preset`; σ is recalibrated when (q, T, δ, ε) change).
OVERRIDABLE = ("n", "m", "T", "G", "C", "lr", "tau", "L_max", "beta", "delta", "target_epsilon", "eval_prompts",
               "eval_samples", "eval_every", "pretrain_steps", "lora_dropout")
# The local-weights shape (docs/dpgrpo.md, End-to-end runs): n = 64, q = 0.25, L_max = 16, no pretraining.
LOCAL_WEIGHTS_OVERRIDES = {"n": 64, "m": 16, "L_max": 16, "pretrain_steps": 0}
DEVICES = ("cpu", "cuda")


@dataclass
class RunSetup:
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
    verification: dict | None = None              # filled once per invocation by `run.verification_block`
    tokenizer: object = None                      # loaded once per invocation by `inputs.task_tokenizer`
    launch: Launch | None = None                  # this rank of a launched run; None in a plain process

    @property
    def writer(self) -> bool:
        """Whether this process writes the run directory (a plain process, or rank 0 of a launched run)."""
        return self.launch is None or self.launch.writer


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
    out = [val.seed("seed", s) for s in seeds]
    if not out or len(set(out)) != len(out):
        raise InvalidParameter("seeds", seeds, "a non-empty list of distinct non-negative integers")
    return tuple((f"seed{s}", s) for s in out)


def check_model_path(model_path) -> Path:
    """Local weights, checked before any work: a directory with config.json (a JSON object, bounded and strict:
    `privcheck.inputs`) and *.safetensors / *.bin weights (save_pretrained), or a file that starts with the GGUF
    magic."""
    allowed = "an existing local weights directory (config.json and *.safetensors or *.bin) or .gguf file"
    if isinstance(model_path, bool) or not isinstance(model_path, (str, PathLike)) or not str(model_path).strip():
        raise InvalidParameter("model", model_path, allowed)            # Path("") would be the working directory
    path = Path(model_path)
    if path.is_file() and path.suffix == ".gguf":
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise InvalidParameter("model", str(model_path), "a GGUF file (it starts with b'GGUF')")
        return path
    if path.is_dir() and (path / "config.json").is_file() \
            and any(f.suffix in (".safetensors", ".bin") for f in path.iterdir()):
        from privcheck.inputs import read_json
        if not isinstance(read_json(path / "config.json", "config", "model"), dict):
            raise InvalidParameter("model", str(path / "config.json"), "a config.json holding a JSON object")
        return path
    raise InvalidParameter("model", str(model_path), allowed)


def _check_device(device: str) -> str:
    if device not in DEVICES:
        raise InvalidParameter("device", device, "'cpu' or 'cuda'")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise InvalidParameter("device", device, "'cpu' here (torch.cuda.is_available() is False); "
                                   "use --reduced --device cpu for the CPU form of a GPU preset")
    return device


def check_verifier(verifier, examples) -> None:
    """The verifier must return 0 or 1 on every public example, before any private record is read."""
    from mechanisms.dpgrpo.trainer import reward_value
    if not callable(verifier):
        raise InvalidParameter("verifier", verifier, "a callable (record, completion) -> {0, 1}")
    name = getattr(verifier, "__qualname__", repr(verifier))
    for rec, completion in examples:
        try:
            r = verifier(rec, completion)
        except Exception as err:  # noqa: BLE001 — any failure on public data is bad input
            reraise_if_interrupted(err)
            raise InvalidParameter("verifier", name, f"a verifier that returns 0 or 1 on the public examples (it "
                                   f"raised {type(err).__name__}: {err} on {rec.prompt!r} / {completion!r})") from err
        if reward_value(r) is None:
            raise InvalidParameter("verifier", name, f"a verifier that returns 0 or 1 on the public examples "
                                   f"(it returned {r!r} on {rec.prompt!r} / {completion!r})")


def _task_defaults(preset: Preset):
    """(verifier, public examples) of the preset's task."""
    if preset.task == "addition":
        from mechanisms.dpgrpo.tasks import reward
        from mechanisms.dpgrpo.trainer import DEFAULT_PUBLIC_EXAMPLES
        return reward, tuple(DEFAULT_PUBLIC_EXAMPLES)
    return first_token_even, parity_public_examples()


def _effective_rollout_mode(preset: Preset) -> tuple[str, str | None]:
    if preset.rollout_mode != "batched":
        return preset.rollout_mode, None
    from mechanisms.dpgrpo import rollouts
    if getattr(rollouts, "BatchedHF", None) is None:
        return "isolated", "preset asks for batched rollouts; BatchedHF is not available, isolated rollouts used"
    return "batched", None


def setup_run(preset="tiny-cpu", *, out, arms=DEFAULT_ARMS, seeds=None, seed=None, model_path=None,
              time_limit_s=None, device=None, reduced=False, verifier=None, public_examples=None, overrides=None,
              q=None, skip_verification=False, measure_timing=True, progress=True, launch="auto") -> RunSetup:
    """Validate every input (raising `InvalidParameter` naming it) and calibrate σ; touches no file.

    `launch`: "auto" reads the launcher's environment (`detect_launch`), None forces a plain process, or a
    `Launch`."""
    launch = detect_launch() if isinstance(launch, str) and launch == "auto" else launch
    if launch is not None and not isinstance(launch, Launch):
        raise InvalidParameter("launch", launch, "'auto', None or a Launch")
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
        model_path = check_model_path(model_path)
        changes = {**LOCAL_WEIGHTS_OVERRIDES, **changes}
    if q is not None:
        q = val.sampling_rate("q", q)
        m = q * changes.get("n", p.n)
        changes["m"] = int(round(m)) if abs(m - round(m)) < 1e-9 else m
    if "T" in changes:
        val.count("T", changes["T"], 1, MAX_ROUNDS)
    if changes:
        try:
            p = p.replace(**changes)        # drops a precomputed σ when (q, T, δ, ε) change (Preset.replace)
        except TypeError as err:
            raise InvalidParameter("overrides", changes, "public preset fields with valid values") from err
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
    check_verifier(verifier, examples)
    for flag, value in (("skip_verification", skip_verification), ("measure_timing", measure_timing),
                        ("progress", progress)):
        if not isinstance(value, bool):
            raise InvalidParameter(flag, value, "a bool")
    check_launch(launch, device, [p])      # before σ is calibrated; every config takes the preset's lora_dropout
    mode, note = _effective_rollout_mode(p)
    setup = RunSetup(preset=p, arms=arms, replicates=replicates, out=out, device=device, verifier=verifier,
                     public_examples=examples, model_path=model_path, deadline_s=time_limit_s,
                     skip_verification=skip_verification, measure_timing=measure_timing,
                     progress=progress and (launch is None or launch.writer), rollout_note=note, launch=launch)
    for arm in arms:
        for label, s in replicates:
            setup.configs[(arm, label)] = arm_config(p, arm, "os_entropy" if s is None else s, mode)
    return setup


def arm_config(p: Preset, arm: str, randomness, mode: str) -> DPGRPOConfig:
    """The frozen config of one arm; the non-private reference has σ = 0, no clipping and so no plan."""
    if arm == NONPRIVATE_ARM:
        kwargs = {**p.config_kwargs(), "C": math.inf, "rollout_mode": mode}
        return DPGRPOConfig(sigma=0.0, arm=arm, randomness=randomness, **kwargs)
    return config_for(p, arm=arm, randomness=randomness, rollout_mode=mode)
