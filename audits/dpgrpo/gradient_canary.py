"""One-run canary audit of DP-GRPO with gradient-space Dirac canaries and white-box per-step LLR scores.

The protocol, its scope and the measured figures are in docs/audits.md ("Auditing DP-GRPO in one run"); the
one-run test itself is `audits.statistics.one_run`. What `run_gradient_canary_audit` guarantees, in protocol order:

1. **Before training** (`design_gradient_audit`): the configuration is public — an audit preset (model, task and
   mechanism constants of a `dpgrpo` preset, with the audit's q and T) and the privacy plan
   (`privcheck.accounting.DPSGDPlan`, `audit_plan`): n real records plus m canary slots, σ calibrated by
   `DPSGDPlan.from_target` for the target ε at δ = 1/(10·n′), n′ = n + m. The certified ε is the plan's
   (`plan.epsilon()`, the accountant applied to the plan's event) and nothing else. The power plan
   (`audits.statistics.power.plan` with `dpsgd_dirac(q, σ, T, llr, τ)`) fixes (k₊, k₋); reserved coordinates J come from
   a fixed public rule (the last or first m coordinates of the LoRA ParamSpace), never from S; S is drawn by
   `audits.canary.draw_membership` (OS entropy; seeded only in tests), committed with a fresh salt, and the
   `Preregistration` (m, canary type, score, k₊, k₋, tie-break key, δ, p, commitment) is made.
2. **Training**: m canary slots `C·e_{j_i}` are appended after the n real slots (`SlotUniverse.append_canaries`,
   real records never replaced); (q, σ, T, δ) are unchanged and the public divisor is the plan's q·(n + m). The
   trainer's privacy claim must report the audit's plan, canary slots and commitment, and the ε the plan gives
   without canaries must be the one it gives with them — the audit stops otherwise. `AuditHooks` writes
   U_t[J] = S_t[J] + z_t[J] to the auditor's private log (mode 0600).
3. **Scoring**: only the log's `round` lines are read; y_t = U_t[j_i]/(σC) and each canary's score is the
   Neyman–Pearson per-step LLR of `audits.statistics.score_models.DPSGDDirac`. The scorer receives the log view and the
   canary, never S; scores are frozen before S is revealed (`audits.canary.score_canaries`).
4. **Reveal and test**: S is revealed against the frozen scores, the commitment is verified, and
   `audits.statistics.one_run.from_scores` applies the pre-registered rule (Explicit, fixed tie-break key); the same
   counts are then tested against the plan's own curve (`audits.statistics.both_bounds`: `result.fdp_claim_curve`,
   the second bound, under its `claim_family` assumption; the Steinke bound stays the headline).
5. **Diagnostics** (realised inclusions, present canaries never sampled, absent canaries ever sampled, pre-clip
   norms, cross-talk on J, AUROC) come from the log's separate `diagnostics` lines and are only copied into the
   report; the statistic never reads them.

Scope: Dirac canaries audit Poisson sampling, clipping, noise and accounting, not record isolation or the
rollout/reward path. With `mask_real=True` (default) real records' gradients are zeroed on J before clipping (a
fixed per-record map, so it does not change any record's sensitivity), and the scores follow the power plan's
model with τ = 0.

Assumptions: the trainer honours the hooks (it writes ĝ_t[J]·q·n′ and reads canary presence like any presence
bit); the audit's claim is the per-slot add/remove (ε, δ) of the plan. A seeded run (`seed=`) is a test, not an
audit release, and its report says so.

The helpers the input-space audit shares (presets, plan and configuration, private files, the claim check, the
report) are public here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audits import canary as cn
from audits.statistics.both_bounds import with_claim_curve
from audits.statistics.one_run import from_scores
from audits.statistics.power import PowerReport, max_draws_per_score
from audits.statistics.power import plan as power_plan
from audits.statistics.pvalue import MAX_CANARIES
from audits.statistics.report import (
    ARTIFACT,
    SCHEMA_FILE,
    AuditReport,
    audit_document,
    check_out_dir,
)
from audits.statistics.score_models import MAX_STEPS, DPSGDDirac
from audits.statistics.strategies import Explicit
from audits.visibility import check_canaries_observed, read_auditor_log
from mechanisms.dpgrpo.pipeline.run import torch_threads
from mechanisms.dpgrpo.presets import MAX_RECORDS, MAX_ROUNDS
from privcheck import validation as val
from privcheck.errors import CalibrationMismatch, CanariesNotObserved, InvalidParameter, PrivcheckError
from privcheck.serialization import dump_json

__all__ = ["AUDIT_PRESETS", "AUDIT_Q", "CANARY_TYPE", "LOG_NAME", "MECHANISM_NAME", "MODEL_WEIGHT_SUFFIXES",
           "PLAN_SIMS", "PRIVATE_DIR", "REPORT_RELATION", "RESERVED_RULES", "REVEAL_NAME", "SCORE_NAME",
           "SEED_NAMESPACE", "TOKENIZER_FILES", "TRAINER_HINTS", "AuditPreset", "AuditorView", "CanaryIds",
           "DiracCanary", "GradientAuditDesign", "GradientAuditResult", "StepLLR", "analyse_log", "audit_config",
           "audit_plan",
           "audit_preset", "check_audit_size", "check_before_commit", "check_counts", "check_fresh_out", "check_seed",
           "check_trainer_cls",
           "checked_privacy_claim", "design_gradient_audit", "dirac_canaries", "epsilon_with_canaries",
           "final_private_path", "local_audit_preset", "membership_seed", "plan_params", "preregistered_report",
           "private_files",
           "reserved_coordinates", "resolve_preset", "run_gradient_canary_audit", "score_rounds", "split_log",
           "write_audit_files"]

CANARY_TYPE = "gradient_dirac"
SCORE_NAME = "whitebox_step_llr"
MECHANISM_NAME = "dpgrpo"   # the one spelling in artifacts (the CLI verb is dp-grpo)
RESERVED_RULES = ("last", "first")
PRIVATE_DIR = "private"
LOG_NAME = "auditor_log.jsonl"
REVEAL_NAME = "reveal.json"
PLAN_SIMS = 200
SEED_NAMESPACE = "privcheck.audits.dpgrpo"
PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600
REPORT_RELATION = {"add_remove": "add_remove", "replace_one": "replace"}     # plan relation → report spelling
# Why a DP-GRPO trainer's canaries can go unobserved (audits.visibility, docs/audits.md "When the audit cannot see").
TRAINER_HINTS = {
    "no_log": "the trainer never stepped with the audit's AuditHooks",
    "no_rounds": "the trainer never stepped with the audit's AuditHooks",
    "no_inclusions": "the trainer did not write the diagnostics AuditHooks expect for these rounds (an overridden "
                     "`_audit_log`?), so the audit cannot tell that the canary slots entered the step",
    "not_recognised": "the trainer's `contributions` did not treat these canary slots as canaries: their slots were "
                      "lost between `step` and `contributions` (e.g. matched to items by position or list length "
                      "while the sum is built from micro-batches), or the clipped sum bypasses `contributions`; a "
                      "canary taken for a real record is masked on the reserved coordinates and never reaches U_t[J]",
}


# ---------------------------------------------------------------------------------------------------------------------
# Audit presets: the public model, task and mechanism constants of a dpgrpo preset, with an audit-friendly q.


# Audit-friendly sampling rate: one-run audits have little power at small q (docs/audits.md, "The DP-GRPO planning
# figure"), so implementations are validated at large q; tiny-cpu itself trains at q = 0.25.
AUDIT_Q = 0.5


@dataclass(frozen=True)
class AuditPreset:
    """Public constants of an audit run, adapted from a `mechanisms.dpgrpo.presets` preset: the same model, task,
    pretraining and mechanism constants, with the audit's q. `build_policy(seed)` returns (model, tokenizer) with
    LoRA as the only trainable tensors; `records(n, seed)` the n real records; `verifier(record, completion)`."""

    name: str
    n: int
    q: float
    T: int
    target_epsilon: float
    C: float
    config_kwargs: dict
    build_policy: Callable
    records: Callable
    verifier: Callable
    source: dict = field(default_factory=dict)
    cpu_threads: int | None = None


def audit_preset(name: str, q: float = AUDIT_Q) -> AuditPreset:
    """The audit configuration of the dpgrpo preset `name` (addition task): its model (built from its ModelSpec
    and public init seed), public SFT pretraining, records and verifier; n, T, ε and C from the preset; q raised
    to `q`; δ is set per audit to 1/(10·(n + m)). The keyword arguments that define the mechanism (n, m, T, C, δ,
    ε) are left to the audit."""
    from mechanisms.dpgrpo import presets

    p = presets.get_preset(name)
    if p.task != "addition":
        raise InvalidParameter("preset", name, "a preset of the addition task (the audit builds its records)")
    kwargs = {k: v for k, v in p.config_kwargs().items()
              if k not in ("n", "m", "T", "C", "delta", "target_epsilon")}
    kwargs["optimizer"] = "adamw"

    def build_policy(seed: int):
        from mechanisms.dpgrpo.pretrain import pretrain_public
        from mechanisms.dpgrpo.tasks import CharTokenizer

        tok = CharTokenizer()
        model = p.model.build(tok, seed=p.init_seed + seed, lora_dropout=p.lora_dropout)
        pretrain_public(model, tok, steps=p.pretrain_steps, lr=p.pretrain_lr, batch=p.pretrain_batch,
                        seed=p.pretrain_seed + seed, max_prompt_len=p.max_prompt_len, L_max=p.L_max)
        return model, tok

    def records(n: int, seed: int):
        from mechanisms.dpgrpo.tasks import addition_records
        return addition_records(n, p.records_seed + seed, max_operand=9)

    from mechanisms.dpgrpo.tasks import reward
    return AuditPreset(p.name, n=p.n, q=q, T=p.T, target_epsilon=p.target_epsilon, C=p.C, config_kwargs=kwargs,
                       build_policy=build_policy, records=records, verifier=reward,
                       source={"preset": p.name, "preset_sha256": p.sha256(), "preset_q": p.q},
                       cpu_threads=p.cpu_threads)


AUDIT_PRESETS: dict[str, Callable[[], AuditPreset]] = {"tiny-cpu": lambda: audit_preset("tiny-cpu")}


def resolve_preset(preset) -> AuditPreset:
    """An AuditPreset, or one built from its registered name (InvalidParameter for an unknown name)."""
    if isinstance(preset, AuditPreset):
        return preset
    if not isinstance(preset, str) or preset not in AUDIT_PRESETS:
        raise InvalidParameter("preset", preset, "one of " + ", ".join(sorted(AUDIT_PRESETS)))
    return AUDIT_PRESETS[preset]()


MODEL_WEIGHT_SUFFIXES = (".safetensors", ".bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _model_dir(path) -> tuple[Path, dict]:
    """A local transformers model directory: config.json (a JSON object with a model_type) and weight files."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise InvalidParameter("model", path, "a local transformers model directory (save_pretrained)")
    directory = Path(path)
    config = directory / "config.json"
    if not directory.is_dir() or not config.is_file():
        raise InvalidParameter("model", str(path), "an existing local directory with config.json and weights "
                                                   "(model.save_pretrained(dir); nothing is downloaded)")
    if not any(f.suffix in MODEL_WEIGHT_SUFFIXES for f in directory.iterdir()):
        raise InvalidParameter("model", str(path), "a directory holding *.safetensors or *.bin weights")
    from privcheck.inputs import read_json

    cfg = read_json(config, "config", "model")     # a regular file, bounded, strict JSON (privcheck.inputs)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise InvalidParameter("model", str(config), "a config.json object with a model_type")
    return directory, cfg


def _tokenizer_dir(path) -> Path:
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise InvalidParameter("tokenizer", path, "a local transformers tokenizer directory (save_pretrained)")
    directory = Path(path)
    if not directory.is_dir() or not any((directory / f).is_file() for f in TOKENIZER_FILES):
        raise InvalidParameter("tokenizer", str(path), "an existing local directory with one of "
                                                       + ", ".join(TOKENIZER_FILES) + " (tokenizer.save_pretrained)")
    return directory


def _lora_targets(lora_targets, model_type: str) -> tuple[str, ...]:
    if lora_targets is None:
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
        found = defaults.get(model_type)
        if not found:
            raise InvalidParameter("lora_targets", None, f"module names to adapt (PEFT has no default for "
                                                         f"model_type {model_type!r})")
        return tuple(found)
    if isinstance(lora_targets, str):
        lora_targets = [t for t in lora_targets.split(",") if t.strip()]
    targets = tuple(lora_targets) if isinstance(lora_targets, (list, tuple)) else ()
    if not targets or not all(isinstance(t, str) and t.strip() for t in targets):
        raise InvalidParameter("lora_targets", lora_targets, "a non-empty list of module names")
    return tuple(t.strip() for t in targets)


def local_audit_preset(model, tokenizer=None, *, base: str = "tiny-cpu", q: float = AUDIT_Q,
                       lora_targets=None) -> AuditPreset:
    """An AuditPreset for the user's own model: the causal LM saved in the local directory `model`
    (`save_pretrained`; loaded with `local_files_only=True`, float32, nothing downloaded) and the tokenizer in
    `tokenizer` (default: the same directory; PAD := EOS when it has none), with LoRA (the base preset's r, α and
    dropout) on `lora_targets` (default: PEFT's targets for the model type). Task, records, verifier and mechanism
    constants are those of `base`'s audit preset; there is no public pretraining (the model is audited as saved).
    The tokenizer must encode the task's prompts (digits, '+', '='; `mechanisms.dpgrpo.models.hf_char_tokenizer`
    saves one with the tiny model's ids). Paths and targets are checked here, before any work."""
    from mechanisms.dpgrpo.pipeline.inputs import file_sha256

    model_dir, cfg = _model_dir(model)
    tok_dir = model_dir if tokenizer is None else _tokenizer_dir(tokenizer)
    if tokenizer is None:
        _tokenizer_dir(model_dir)
    targets = _lora_targets(lora_targets, cfg["model_type"])
    ref = audit_preset(base, q=q)
    from mechanisms.dpgrpo import presets
    p = presets.get_preset(base)
    kwargs = dict(ref.config_kwargs, lora_targets=targets)
    weights = sorted(f for f in model_dir.iterdir() if f.suffix in MODEL_WEIGHT_SUFFIXES)
    name = f"local:{model_dir.name}"
    model_info = {"kind": "local", "model_type": cfg["model_type"], "files": [f.name for f in weights],
                  "sha256": {f.name: file_sha256(f) for f in weights}}
    source = {**ref.source, "preset": name, "base_preset": ref.name, "model": model_info,
              "lora_targets": list(targets)}

    def build_policy(seed: int):
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        if tok.eos_token_id is None:
            raise InvalidParameter("tokenizer", str(tok_dir), "a tokenizer with an EOS token")
        with torch.random.fork_rng(devices=[]):
            base_model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
            base_model = base_model.eval().requires_grad_(False)
            rows = base_model.get_input_embeddings().weight.shape[0]
            if len(tok) > rows:
                raise InvalidParameter("tokenizer", f"{len(tok)} tokens", f"at most the model's {rows} embedding rows")
            names = [n for n, _ in base_model.named_modules()]
            missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
            if missing:        # PEFT accepts a list of which only some names match; the audit does not
                raise InvalidParameter("lora_targets", missing, "module names of the model (e.g. "
                                       + ", ".join(sorted({n.rsplit(".", 1)[-1] for n in names if n})[:8]) + ")")
            torch.manual_seed(p.init_seed + seed + 1)
            lora = LoraConfig(r=p.model.lora_r, lora_alpha=p.model.lora_alpha, lora_dropout=p.lora_dropout,
                              target_modules=list(targets), bias="none", init_lora_weights=True,
                              fan_in_fan_out=cfg["model_type"] == "gpt2")       # GPT-2 stores Conv1D weights
            try:
                policy = get_peft_model(base_model, lora).eval()
            except ValueError as exc:                  # PEFT: a target module is not in the model
                raise InvalidParameter("lora_targets", list(targets), f"module names of the model ({exc})") from None
        return policy, tok

    return dataclasses.replace(ref, name=name, config_kwargs=kwargs, build_policy=build_policy,
                               source=source)


# ---------------------------------------------------------------------------------------------------------------------
# Canaries, reserved coordinates and the score.


@dataclass(frozen=True)
class DiracCanary:
    """Canary i: its public id and its reserved coordinate j_i (its gradient is C·e_{j_i})."""

    id: str
    coordinate: int


def reserved_coordinates(dim: int, m: int, rule: str = "last") -> tuple[int, ...]:
    """m distinct coordinates of a `dim`-dimensional ParamSpace by a fixed public rule (never from S)."""
    dim, m = val.count("dim", dim), val.count("canaries", m)
    if rule not in RESERVED_RULES:
        raise InvalidParameter("reserved_rule", rule, " or ".join(RESERVED_RULES))
    if m > dim:
        raise InvalidParameter("canaries", m, f"at most the ParamSpace dimension {dim} (one coordinate per canary)")
    return tuple(range(dim - m, dim)) if rule == "last" else tuple(range(m))


@dataclass(frozen=True)
class AuditorView:
    """The statistic's input: y[t, i] = U_t[J_i]/(σC) from the log's `round` lines (no diagnostics, no S)."""

    y: np.ndarray
    reserved: tuple[int, ...]
    column: dict = field(repr=False, compare=False)

    @classmethod
    def from_rounds(cls, rounds: list[dict], reserved: tuple[int, ...], rounds_expected: int,
                    sigma_C: float) -> AuditorView:
        if not rounds:
            raise CanariesNotObserved("a round line (U_t[J]) in the auditor log", "no step was logged")
        rounds = sorted(rounds, key=lambda r: r["t"])
        if [r["t"] for r in rounds] != list(range(1, rounds_expected + 1)):
            raise PrivcheckError(f"auditor log: expected rounds 1..{rounds_expected}, found "
                                 f"{[r['t'] for r in rounds][:5]}...")
        for r in rounds:
            if tuple(r["reserved"]) != tuple(reserved):
                raise PrivcheckError("auditor log: reserved coordinates differ from the pre-registered ones")
            if not math.isclose(float(r["sigma_C"]), sigma_C, rel_tol=1e-12):
                raise PrivcheckError(f"auditor log: σC = {r['sigma_C']} differs from the configuration's {sigma_C}")
        U = np.array([[float(u) for u in r["U"]] for r in rounds], dtype=np.float64)
        if not np.all(np.isfinite(U)):
            raise PrivcheckError("auditor log: non-finite U_t[J] (the mechanism released a non-finite update)")
        y = U / sigma_C
        y.setflags(write=False)
        return cls(y, tuple(reserved), {j: k for k, j in enumerate(reserved)})

    def steps(self, coordinate: int) -> np.ndarray:
        return self.y[:, self.column[coordinate]]


@dataclass(frozen=True)
class StepLLR:
    """The per-step Neyman–Pearson score (the `DPSGDDirac` "llr" statistic) on observed y_t:
    Σ_t log(1 − q + q·exp((y_t/σ − 1/(2σ²))/s²)), s = sqrt(1 + τ²): the log-likelihood ratio of "included"
    (y_t ~ B_t/σ + s·Z_t, B_t ~ Bern(q)) against "excluded" (y_t ~ s·Z_t), summed over independent rounds
    (docs/audits.md, "Score models")."""

    model: DPSGDDirac

    def __call__(self, view: AuditorView, canary: DiracCanary) -> float:
        return self.model.llr(view.steps(canary.coordinate))


# ---------------------------------------------------------------------------------------------------------------------
# The privacy plan, the trainer's configuration and the checks of the trainer's claim (shared by both canary types).


def audit_plan(*, n_real: int, m: int, q: float, T: int, target_epsilon: float, C: float):
    """The audit's privacy plan: n_real real records and m canary slots sampled at rate q for T rounds, clip norm C,
    δ = 1/(10·(n_real + m)), σ calibrated for `target_epsilon` by `DPSGDPlan.from_target` (which never overshoots
    and caches the calibration, so a pilot, an audit and its tests at one configuration calibrate once)."""
    from privcheck.accounting import DPSGDPlan

    # DPGRPOConfig stores the expected batch q·n and derives q from it; plan at that rate, which can differ from q
    # in the last bit, so that the trainer's configuration represents the plan exactly.
    rate = val.sampling_rate("q", q) * n_real / n_real
    return DPSGDPlan.from_target(records=n_real, sampling_rate=rate, clip_norm=C, steps=T,
                                 delta=1.0 / (10 * (n_real + m)), target_epsilon=target_epsilon, canaries=m)


def audit_config(preset: AuditPreset, plan, *, seed: int | None):
    """The audit's public `DPGRPOConfig`: the plan's privacy parameters (its calibration included) with the preset's
    training settings; OS-entropy randomness, or `seed` for a test run. The configuration describes the n real
    records only; the trainer adds the canary slots of its universe to the plan. Refused (CalibrationMismatch)
    unless the configuration's plan is `plan` without its canaries."""
    from mechanisms.dpgrpo.config import DPGRPOConfig

    config = DPGRPOConfig(n=plan.records, m=plan.expected_batch_size, T=plan.steps, sigma=plan.noise_multiplier,
                          C=plan.clip_norm, delta=plan.delta, target_epsilon=plan.target_epsilon,
                          calibration=plan.calibration, randomness="os_entropy" if seed is None else seed,
                          **preset.config_kwargs)
    if config.plan != plan.replace(canaries=0):
        raise CalibrationMismatch(f"the DP-GRPO configuration's plan {config.plan.to_json()} is not the audit's "
                                  f"{plan.to_json()} without its canaries")
    return config


def plan_params(plan) -> dict:
    """The mechanism parameters a DP-GRPO audit report states, all from `plan.claim()`."""
    claim = plan.claim()
    return {"q": claim["sampling_rate"], "sigma": claim["noise_multiplier"], "steps": claim["steps"],
            "C": claim["clip_norm"], "n": claim["records"], "n_canary": claim["canaries"],
            "divisor": claim["divisor"], "target_epsilon": claim["target_epsilon"],
            "epsilon_without_canaries": plan.replace(canaries=0).epsilon().value}


def checked_privacy_claim(trainer, plan, *, commitment: str) -> dict:
    """The trainer's privacy claim before training, refused (PrivcheckError) unless it reports the canary slots of
    `plan` and the auditor's commitment, the trainer's plan is `plan` (same event, δ, records and canary slots, hence
    the same divisor) and its claimed ε is the plan's."""
    claim = trainer.privacy_claim
    if claim is None or claim["n_canary"] != plan.canaries or claim["canary_commitment"] != commitment:
        raise PrivcheckError("the trainer does not report the canary slots and the auditor's commitment")
    trained = trainer.plan
    if trained != plan:
        raise PrivcheckError(f"the trainer's privacy plan {None if trained is None else trained.to_json()} is not "
                             f"the audit's {plan.to_json()}")
    if claim["epsilon"] != plan.epsilon().value:
        raise PrivcheckError(f"the trainer claims ε = {claim['epsilon']!r}, its plan gives {plan.epsilon().value!r}")
    return claim


def epsilon_with_canaries(trainer, claim: dict, plan) -> float:
    """The certified ε of the trained run with its canary slots, checked again after training: the trainer's plan
    is still `plan` and its claim (`checked_privacy_claim`) the plan's ε; canaries enter only the divisor, so the
    plan without them gives the same ε. Raises PrivcheckError otherwise (the audit stops before scoring)."""
    if trainer.plan != plan:
        raise PrivcheckError("the trainer's privacy plan changed during training")
    certified = plan.epsilon().value
    without = plan.replace(canaries=0).epsilon().value
    if claim["epsilon"] != certified or without != certified:
        raise PrivcheckError(f"ε changed when canaries were added: {without!r} → {claim['epsilon']!r} "
                             f"(plan: {certified!r})")
    return certified


def preregistered_report(frozen, membership, design, params: dict, *, diagnostics: dict) -> AuditReport:
    """The one-run report of a DP-GRPO canary audit: the pre-registered explicit guess rule, the plan's certified
    ε as the nominal claim, the power plan, the added canary slots; diagnostics beside the test, never in it."""
    prereg, claim = design.preregistration, design.plan.claim()
    accountant = design.plan.epsilon().method
    return from_scores(frozen, membership, delta=claim["delta"], confidence=design.confidence,
                       k_plus=prereg.k_plus, k_minus=prereg.k_minus, strategy=Explicit(), eps_nominal=claim["epsilon"],
                       tie_break_seed=prereg.tie_break_seed, preregistration=prereg, power=design.power,
                       claim={"neighboring": REPORT_RELATION[claim["neighboring"]], "accountant": accountant,
                              "mechanism": {"name": MECHANISM_NAME, "params": params}},
                       canaries={"type": prereg.canary_type, "added_slots": True, "score": prereg.score},
                       diagnostics=diagnostics)


# ---------------------------------------------------------------------------------------------------------------------
# Input checks and the audit's files (shared by both canary types).


def check_seed(seed):
    """None (OS entropy: an audit release) or a seed in [0, SEED_MAX] (a test run)."""
    return None if seed is None else val.seed("seed", seed)


def check_counts(canaries, rounds, *, minimum: int = 1) -> tuple[int, int | None]:
    """m canaries (a one-run audit's range) and T rounds (a DP-GRPO run's range; None: the preset's)."""
    m = val.count("canaries", canaries, minimum, MAX_CANARIES)
    return m, None if rounds is None else val.count("rounds", rounds, 1, MAX_ROUNDS)


def check_audit_size(*, m: int, T: int, n_real: int, plan_sims: int, per_step_llr: bool) -> None:
    """Sizes an audit can run, before any work: n_real + m record slots (at most MAX_RECORDS) and, for the white-box
    per-step score, a power plan whose simulation draws T normals per canary score (`audits.statistics.power`)."""
    n_real = val.count("n_real", n_real, 1, MAX_RECORDS - 1)
    if n_real + m > MAX_RECORDS:
        raise InvalidParameter("canaries", m, f"an integer in [1, {MAX_RECORDS - n_real}] (n_real + canaries <= "
                                              f"{MAX_RECORDS} record slots)")
    if per_step_llr:
        most = min(MAX_STEPS, max_draws_per_score(m, plan_sims))
        if T > most:
            raise InvalidParameter("rounds", T, f"an integer in [1, {most}] (the power plan draws T normals per "
                                                f"simulated score of m = {m} canaries)")


def check_trainer_cls(trainer_cls):
    """`DPTrainer` or a subclass (the trainer to audit)."""
    from mechanisms.dpgrpo.trainer import DPTrainer
    if not (isinstance(trainer_cls, type) and issubclass(trainer_cls, DPTrainer)):
        raise InvalidParameter("trainer_cls", trainer_cls, "DPTrainer or a subclass")
    return trainer_cls


def check_fresh_out(out_dir) -> Path | None:
    """The output directory (None: no artifact), refused if it already holds an auditor log."""
    out = None if out_dir is None else check_out_dir(out_dir)
    if out is not None and (out / PRIVATE_DIR / LOG_NAME).exists():
        raise InvalidParameter("out", str(out), "a directory without a previous auditor log (one audit per directory)")
    return out


@contextlib.contextmanager
def private_files(out: Path | None):
    """Where an audit writes its private files while it runs; yields (staging, private directory).

    With an output directory: `staging` is an `ArtifactDirectory(out)` (holding out's lock for the whole audit)
    and the private directory is `private/` inside its staging directory, so the auditor's logs reach out/private
    together with the reveal and `audit.json` when the audit completes (`write_audit_files`), and never otherwise:
    an exception or Ctrl-C removes them, and what a killed audit leaves (the staging directory) is removed by the
    next writer of out, so an interrupted audit never blocks a rerun. Without one: (None, a fresh temporary
    directory mode 0700) whose files the caller keeps, removed if the audit fails."""
    if out is None:
        private = Path(tempfile.mkdtemp(prefix="privcheck-audit-"))
        try:
            yield None, private
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            raise
        return
    from privcheck.artifacts import ArtifactDirectory

    with ArtifactDirectory(out) as staging:
        yield staging, staging.mkdir(PRIVATE_DIR, mode=PRIVATE_DIR_MODE)


def check_before_commit(before_commit):
    """`before_commit(result, staging)`, or None: called with the finished audit's result while its files are still
    staged in `out` (`private_files`), so that what it stages there (the command line's plots) is published in the
    same commit as `audit.json`, the reveal and the logs: all of them or none, the commit being the audit's last act
    (docs/artifacts.md, "Interrupted audits"). Not called without an output directory."""
    if before_commit is not None and not callable(before_commit):
        raise InvalidParameter("before_commit", before_commit, "a callable (result, staging) or None")
    return before_commit


def final_private_path(staging, private: Path, name: str) -> Path:
    """Where the private file `name` is once the audit is written (`private_files`)."""
    return private / name if staging is None else staging.target / PRIVATE_DIR / name


def write_audit_files(staging, private: Path, reveal: dict, report: AuditReport) -> tuple[Path | None, dict | None]:
    """Stage `private/reveal.json` (mode 0600) and, with an output directory, the sealed, schema-valid `audit.json`
    in the `private_files` staging (moved into out with the logs when the block ends: all or none); without one,
    write the reveal into the temporary private directory. Returns (artifact path, document)."""
    if staging is None:
        from privcheck.artifacts import write_atomic
        write_atomic(private / REVEAL_NAME, dump_json(reveal), mode=PRIVATE_FILE_MODE)
        return None, None
    staging.write_json(f"{PRIVATE_DIR}/{REVEAL_NAME}", reveal, mode=PRIVATE_FILE_MODE)
    document = staging.write_json(ARTIFACT, audit_document(report), schema=SCHEMA_FILE)
    return staging.target / ARTIFACT, document


def membership_seed(seed: int) -> int:
    """The membership seed of a seeded (test) audit, derived from `seed` apart from the trainer's seeds."""
    from privcheck.randomness import derive_seed
    return derive_seed(seed, "membership", namespace=SEED_NAMESPACE)


# ---------------------------------------------------------------------------------------------------------------------
# Pre-registration (everything fixed before training).


class CanaryIds:
    """`m` and the canary ids of a design whose `canaries` each carry an `id`."""

    @property
    def m(self) -> int:
        return len(self.canaries)

    @property
    def canary_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.canaries)


@dataclass(frozen=True, eq=False)
class GradientAuditDesign(CanaryIds):
    """The public, pre-registered design of one audit (fixed before training; holds no membership bits). `plan` is
    the privacy plan of the audited run: the certified ε is its ε and nothing else."""

    preset: str
    plan: object                     # privcheck.accounting.DPSGDPlan: n real records + m canary slots
    config: object                   # mechanisms.dpgrpo.config.DPGRPOConfig (its plan: `plan` without canaries)
    n_real: int
    canaries: tuple[DiracCanary, ...]
    reserved_rule: str
    mask_real: bool
    interference: float
    power: PowerReport
    preregistration: cn.Preregistration
    score: StepLLR
    confidence: float

    @property
    def epsilon(self) -> float:
        """The certified ε: the plan's, from its event by the accountant."""
        return self.plan.epsilon().value

    @property
    def reserved(self) -> tuple[int, ...]:
        return tuple(c.coordinate for c in self.canaries)


def dirac_canaries(reserved) -> tuple[DiracCanary, ...]:
    """One canary per reserved coordinate, with the public id "dirac:<j>" (the ids the commitment binds)."""
    return tuple(DiracCanary(f"dirac:{j}", int(j)) for j in reserved)


def design_gradient_audit(preset: AuditPreset, *, canaries: tuple[DiracCanary, ...], q: float, T: int, n_real: int,
                          confidence: float, target_epsilon: float, C: float, seed: int | None, reserved_rule: str,
                          mask_real: bool, interference: float, plan_sims: int,
                          commitment: str) -> GradientAuditDesign:
    """Calibrate the plan, plan (k₊, k₋) and pre-register (inputs already validated; the membership is
    committed)."""
    m = len(canaries)
    plan = audit_plan(n_real=n_real, m=m, q=q, T=T, target_epsilon=target_epsilon, C=C)
    config = audit_config(preset, plan, seed=seed)
    model = DPSGDDirac(plan.sampling_rate, plan.noise_multiplier, plan.steps, "llr", interference)
    power = power_plan(m, delta=plan.delta, confidence=confidence, eps_nominal=plan.epsilon().value,
                       score_model=model, sims=plan_sims, seed=seed)
    prereg = cn.Preregistration(m=m, delta=plan.delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=SCORE_NAME, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    return GradientAuditDesign(preset=preset.name, plan=plan, config=config, n_real=n_real, canaries=canaries,
                               reserved_rule=reserved_rule, mask_real=mask_real, interference=interference,
                               power=power, preregistration=prereg, score=StepLLR(model), confidence=confidence)


# ---------------------------------------------------------------------------------------------------------------------
# Analysis of the auditor's log (after training).


def _diagnostics(diag_lines: list[dict], signs: np.ndarray, design: GradientAuditDesign) -> dict:
    """Diagnostics from the log's `diagnostics` lines and the revealed S (never used by the test)."""
    m, plan = design.m, design.plan
    counts = np.zeros(m, dtype=np.int64)
    norms: list[float] = []
    cross = 0.0
    for line in diag_lines:
        d = line["diagnostics"]
        counts += np.asarray(d["canary_included"], dtype=np.int64)
        norms.extend(float(v) for v in d["canary_pre_clip_norms"].values())
        if d.get("cross_talk_reserved") is not None:
            cross = max(cross, max(abs(float(v)) for v in d["cross_talk_reserved"]))
    present = signs == 1
    return {
        "realized_inclusions_logged": bool(diag_lines),
        "never_sampled_in_canaries": int(np.sum(present & (counts == 0))),
        "constant_reward_canary_groups_frac": None,          # Dirac canaries have no rollout groups
        "absent_canaries_ever_sampled": int(np.sum(~present & (counts > 0))),
        "inclusions_present_mean": float(counts[present].mean()) if present.any() else None,
        "inclusions_present_min": int(counts[present].min()) if present.any() else None,
        "inclusions_expected": plan.sampling_rate * plan.steps,
        "canary_pre_clip_norm_min": min(norms) if norms else None,
        "canary_pre_clip_norm_max": max(norms) if norms else None,
        "clip_norm": plan.clip_norm,
        "cross_talk_max_abs_over_sigma_C": cross / plan.noise_std,
        "real_records_masked_on_reserved": design.mask_real,
    }


def split_log(entries: list[dict]) -> tuple[list[dict], list[dict]]:
    """(round lines, diagnostics lines) of the auditor's log."""
    rounds = [e for e in entries if e.get("kind") == "round"]
    diags = [e for e in entries if e.get("kind") == "diagnostics"]
    return rounds, diags


def score_rounds(rounds: list[dict], design: GradientAuditDesign) -> cn.FrozenScores:
    """Frozen per-canary scores from the `round` lines of the auditor log (S is not an input)."""
    plan = design.plan
    view = AuditorView.from_rounds(rounds, design.reserved, plan.steps, plan.noise_std)
    return cn.score_canaries(design.score, view, design.canaries)


def analyse_log(log_path, design: GradientAuditDesign, membership: cn.Membership, salt: bytes, *,
                mechanism_params: dict | None = None) -> tuple[AuditReport, cn.FrozenScores, np.ndarray]:
    """Score, freeze, reveal S, verify the commitment and test (docs/audits.md, "Protocol, as the code runs it",
    steps 4–5). Returns (report, scores, S). Refuses (CanariesNotObserved) a log in which the canaries were never
    observed (`audits.visibility`), before any score is frozen."""
    if not isinstance(membership, cn.Membership) or membership.m != design.m:
        raise InvalidParameter("membership", membership, f"the sealed Membership of the {design.m} canaries")
    rounds, diag_lines = split_log(read_auditor_log(log_path, TRAINER_HINTS["no_log"]))
    check_canaries_observed(rounds, diag_lines, m=design.m, require_norms=True, hints=TRAINER_HINTS)
    frozen = score_rounds(rounds, design)
    signs = np.array(membership.reveal(frozen))
    if not cn.verify(design.preregistration.commitment, signs, list(design.canary_ids), salt):
        raise PrivcheckError("membership does not match the pre-registered commitment")
    params = {**plan_params(design.plan), "preset": design.preset, "reserved_rule": design.reserved_rule,
              "mask_reserved_for_real_records": design.mask_real, "config_sha256": design.config.sha256()}
    params.update(mechanism_params or {})
    rep = preregistered_report(frozen, membership, design, params, diagnostics=_diagnostics(diag_lines, signs, design))
    # the second bound: the same counts against the audited plan's own curve (audits.statistics.both_bounds)
    return with_claim_curve(rep, design.plan.event), frozen, signs


# ---------------------------------------------------------------------------------------------------------------------
# The end-to-end audit.


@dataclass(frozen=True, eq=False)
class GradientAuditResult:
    """Everything one audit produced: the report, its design and plans, the frozen scores and the revealed S."""

    report: AuditReport
    design: GradientAuditDesign
    scores: np.ndarray
    membership: np.ndarray
    scores_frozen_at: int
    membership_revealed_at: int
    epsilon_with_canaries: float
    privacy_claim: dict
    log_path: Path
    artifact: Path | None
    document: dict | None
    timings: dict

    @property
    def eps_lower(self) -> float:
        return self.report.result["eps_lower"]

    def headline(self) -> dict:
        """The CLI's top-level keys: the one-run headline plus the planned bound."""
        return {**self.report.headline(), "planned_eps_lower": self.report.power["planned_eps_lower"]}


def run_gradient_canary_audit(*, preset="tiny-cpu", canaries: int, out_dir=None, seed: int | None = None,
                              rounds: int | None = None, q: float | None = None, confidence: float = 0.95,
                              n_real: int | None = None, target_epsilon: float | None = None,
                              C: float | None = None, reserved_rule: str = "last", mask_real: bool = True,
                              interference: float = 0.0, plan_sims: int = PLAN_SIMS, trainer_cls=None,
                              before_commit=None) -> GradientAuditResult:
    """Run the pre-registered one-run audit of DP-GRPO with `canaries` Dirac canaries (module docstring).

    `preset`: a registered name (`tiny-cpu`) or an `AuditPreset`; `rounds`, `q`, `n_real`, `target_epsilon`, `C`
    override its T, q, n, ε and C. `out_dir`: where `audit.json` (sealed, atomic) and `private/` (the auditor log
    and the reveal, mode 0600) go; None keeps the private files in a fresh temporary directory and writes no
    artifact. `seed`: a seeded test run (trainer, membership and plan), never an audit release. `trainer_cls`: a
    `DPTrainer` subclass to audit (default `DPTrainer`). `before_commit`: see `check_before_commit`. Every input is
    validated before any work or file.
    """
    from mechanisms.dpgrpo.trainer import DPTrainer

    m, rounds = check_counts(canaries, rounds)
    spec = resolve_preset(preset)
    q = spec.q if q is None else val.sampling_rate("q", q)
    T = spec.T if rounds is None else rounds
    n_real = spec.n if n_real is None else val.count("n_real", n_real)
    confidence = val.open_unit("confidence", confidence)
    target_epsilon = spec.target_epsilon if target_epsilon is None else val.positive("target_epsilon",
                                                                                     target_epsilon)
    C = spec.C if C is None else val.positive("C", C)
    seed = check_seed(seed)
    if reserved_rule not in RESERVED_RULES:
        raise InvalidParameter("reserved_rule", reserved_rule, " or ".join(RESERVED_RULES))
    if not isinstance(mask_real, bool):
        raise InvalidParameter("mask_real", mask_real, "a bool")
    interference = val.nonnegative("interference", interference)
    plan_sims = val.count("plan_sims", plan_sims)
    check_audit_size(m=m, T=T, n_real=n_real, plan_sims=plan_sims, per_step_llr=True)
    trainer_cls = check_trainer_cls(DPTrainer if trainer_cls is None else trainer_cls)
    before_commit = check_before_commit(before_commit)
    out = check_fresh_out(out_dir)

    with torch_threads(spec.cpu_threads):
        return _run(spec, m=m, q=q, T=T, n_real=n_real, confidence=confidence, target_epsilon=target_epsilon, C=C,
                    seed=seed, reserved_rule=reserved_rule, mask_real=mask_real, interference=interference,
                    plan_sims=plan_sims, trainer_cls=trainer_cls, out=out, before_commit=before_commit)


def _run(spec: AuditPreset, *, m, q, T, n_real, confidence, target_epsilon, C, seed, reserved_rule, mask_real,
         interference, plan_sims, trainer_cls, out, before_commit) -> GradientAuditResult:
    """The audit after validation: design, train, analyse, write (see `run_gradient_canary_audit`)."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    model, tokenizer = spec.build_policy(0 if seed is None else seed)
    from mechanisms.dpgrpo.core import ParamSpace
    canaries = dirac_canaries(reserved_coordinates(ParamSpace(model).dim, m, reserved_rule))   # m ≤ dim checked

    # 1. Pre-registration: coins and commitment, then the privacy plan, the power plan and the guess rule.
    membership = cn.draw_membership(m, seed=None if seed is None else membership_seed(seed))
    salt = cn.new_salt()
    ids = [c.id for c in canaries]
    commitment = membership.commit(ids, salt)
    design = design_gradient_audit(spec, canaries=canaries, q=q, T=T, n_real=n_real, confidence=confidence,
                                   target_epsilon=target_epsilon, C=C, seed=seed, reserved_rule=reserved_rule,
                                   mask_real=mask_real, interference=interference, plan_sims=plan_sims,
                                   commitment=commitment)
    timings["design_s"] = time.perf_counter() - clock

    # 2. Training with m added canary slots and the auditor's hooks.
    clock = time.perf_counter()
    with private_files(out) as (staging, private):
        log_path = private / LOG_NAME
        trainer, claim = _train(spec, design, membership, model, tokenizer, log_path, trainer_cls, seed)
        epsilon_after = epsilon_with_canaries(trainer, claim, design.plan)
        timings["train_s"] = time.perf_counter() - clock

        # 3–5. Score from the log, freeze, reveal, verify, test; diagnostics beside the test.
        clock = time.perf_counter()
        report, frozen, signs = analyse_log(log_path, design, membership, salt, mechanism_params={
            "epsilon_with_canaries": epsilon_after, "trainer": type(trainer).__name__, **spec.source,
            "privacy_release": bool(trainer.privacy_release and membership.audit_release)})
        reveal = {"commitment": commitment, "salt_hex": salt.hex(), "canary_ids": ids,
                  "bits": "".join("1" if s == 1 else "0" for s in signs),
                  "preregistration": design.preregistration.to_json(),
                  "preregistration_digest": design.preregistration.digest}
        artifact, document = write_audit_files(staging, private, reveal, report)
        timings["analyse_s"] = time.perf_counter() - clock
        result = GradientAuditResult(report, design, frozen.values, signs, frozen.frozen_at, membership.revealed_at,
                                     epsilon_after, claim, final_private_path(staging, private, LOG_NAME), artifact,
                                     document, timings)
        if staging is not None and before_commit is not None:
            before_commit(result, staging)
    return result


def _train(spec: AuditPreset, design: GradientAuditDesign, membership: cn.Membership, model, tokenizer, log_path,
           trainer_cls, seed):
    """Append the canary slots, train T rounds with the hooks; returns (trainer, privacy claim)."""
    import torch

    from mechanisms.dpgrpo.audit_hooks import AuditHooks
    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.records import SlotUniverse, dirac_canary

    plan = design.plan
    dim = ParamSpace(model).dim
    real = spec.records(design.n_real, 0 if seed is None else seed)
    universe = SlotUniverse(design.n_real, torch.ones(design.n_real, dtype=torch.bool), real)
    vectors = [dirac_canary(c.coordinate, plan.clip_norm, dim, dtype=torch.float32) for c in design.canaries]
    universe = universe.append_canaries(vectors, torch.from_numpy(membership.presence_for_training().copy()),
                                        design.preregistration.commitment)
    hooks = AuditHooks(torch.tensor(design.reserved, dtype=torch.int64), log_path,
                       mask_reserved_for_real_records=design.mask_real)
    trainer = trainer_cls(model, tokenizer, universe, design.config, spec.verifier, audit_hooks=hooks)
    claim = checked_privacy_claim(trainer, design.plan, commitment=design.preregistration.commitment)
    trainer.train()
    return trainer, claim
