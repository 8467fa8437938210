"""One-run canary audit of DP-GRPO with gradient-space Dirac canaries and white-box per-step LLR scores.

Spec audits.md §3.1 (protocol), §6 (power), §7.3 (Dirac canaries), §7.5 (added slots, pre-registration), §7.6
(diagnostics), §10 (report); dpgrpo.md §11 (the trainer's canary hooks).

What `run_gradient_canary_audit` guarantees, in protocol order:

1. **Before training** (`design_gradient_audit`): the configuration is public — an audit preset (model, task and
   mechanism constants of a `dpgrpo` preset, with the audit's q and T), σ calibrated by privcheck for the target ε
   at δ = 1/(10·n′), n′ = n + m. The power plan (`audits.power.plan` with `dpsgd_dirac(q, σ, T, llr, τ)`) fixes
   (k₊, k₋); reserved coordinates J come from a fixed public rule (the last or first m coordinates of the LoRA
   ParamSpace), never from S; S is drawn by `audits.canary.draw_membership` (OS entropy; seeded only in tests),
   committed with a fresh salt, and the `Preregistration` (m, canary type, score, k₊, k₋, tie-break key, δ, p,
   commitment) is made.
2. **Training**: m canary slots `C·e_{j_i}` are appended after the n real slots (`SlotUniverse.append_canaries`,
   real records never replaced); (q, σ, T, δ) are unchanged, and ε is computed by the PLD accountant for the
   configuration before and for the trainer's privacy claim after the canaries were added — the audit stops if
   they differ. `AuditHooks` writes U_t[J] = S_t[J] + z_t[J] to the auditor's private log (mode 0600).
3. **Scoring**: only the log's `round` lines are read; y_t = U_t[j_i]/(σC) and each canary's score is the
   Neyman–Pearson per-step LLR of `audits.score_models.DPSGDDirac` (§6.3). The scorer receives the log view and
   the canary, never S; scores are frozen before S is revealed (`audits.canary.score_canaries`).
4. **Reveal and test**: S is revealed against the frozen scores, the commitment is verified, and
   `audits.one_run.from_scores` applies the pre-registered rule (Explicit, fixed tie-break key).
5. **Diagnostics** (§7.6: realised inclusions, present canaries never sampled, absent canaries ever sampled,
   pre-clip norms, cross-talk on J, AUROC) come from the log's separate `diagnostics` lines and are only copied
   into the report; the statistic never reads them.

Scope (§7.3): Dirac canaries audit Poisson sampling, clipping, noise and accounting, not record isolation or
the rollout/reward path. With `mask_real=True` (default) real records' gradients are zeroed on J before
clipping (a fixed per-record map, dpgrpo.md §11), so the scores follow the plan's model with τ = 0.

Assumptions: the trainer honours the hooks (it writes ĝ_t[J]·q·n′ and reads canary presence like any presence
bit); the audit's claim is the per-slot add/remove (ε, δ) of the PLD accountant at (q, σ, T, δ). A seeded run
(`seed=`) is a test, not an audit release, and its report says so.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from audits import canary as cn
from audits.one_run import check_open_unit, from_scores
from audits.power import PowerReport, plan
from audits.report import AuditReport, audit_document, check_out_dir, write_audit
from audits.score_models import DPSGDDirac
from audits.strategies import Explicit
from mechanisms.dpgrpo.run import torch_threads
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError

CANARY_TYPE = "gradient_dirac"
SCORE_NAME = "whitebox_step_llr"
MECHANISM_NAME = "dp-grpo"
RESERVED_RULES = ("last", "first")
PRIVATE_DIR = "private"
LOG_NAME = "auditor_log.jsonl"
REVEAL_NAME = "reveal.json"
PLAN_SIMS = 200


# ---------------------------------------------------------------------------------------------------------------------
# Audit presets: the public model, task and mechanism constants of a dpgrpo preset, with an audit-friendly q.


AUDIT_Q = 0.5      # audit-friendly sampling rate (spec §7.2: validate at large q); tiny-cpu trains at q = 0.25


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
                    sigma_C: float) -> "AuditorView":
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
    """Per-step Neyman–Pearson score of spec §6.3 (the `DPSGDDirac` "llr" statistic) on observed y_t:
    Σ_t log(1 − q + q·exp((y_t/σ − 1/(2σ²))/s²)), s = sqrt(1 + τ²)."""

    model: DPSGDDirac

    def __call__(self, view: AuditorView, canary: DiracCanary) -> float:
        return self.model.llr(view.steps(canary.coordinate))


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
    """The public, pre-registered design of one audit (fixed before training; holds no membership bits)."""

    preset: str
    config: object                   # mechanisms.dpgrpo.config.DPGRPOConfig
    n_real: int
    canaries: tuple[DiracCanary, ...]
    reserved_rule: str
    mask_real: bool
    interference: float
    epsilon: float                   # PLD ε at (q, σ, T, δ) without canaries
    plan: PowerReport
    preregistration: cn.Preregistration
    score: StepLLR
    confidence: float

    @property
    def reserved(self) -> tuple[int, ...]:
        return tuple(c.coordinate for c in self.canaries)


def membership_seed(seed: int) -> int:
    """The membership seed of a seeded (test) audit, derived from `seed` apart from the trainer's seeds."""
    digest = hashlib.sha256(f"privcheck.audits.dpgrpo/membership/{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _accounted_epsilon(q: float, sigma: float, T: int, delta: float) -> float:
    from privcheck.accounting import epsilon_pld
    return float(epsilon_pld(q, sigma, T, delta).value)


def dirac_canaries(reserved) -> tuple[DiracCanary, ...]:
    """One canary per reserved coordinate, with the public id "dirac:<j>" (the ids the commitment binds)."""
    return tuple(DiracCanary(f"dirac:{j}", int(j)) for j in reserved)


def calibrated_config(preset: AuditPreset, *, n_real: int, m: int, q: float, T: int, target_epsilon: float,
                      C: float, seed: int | None):
    """The audit's public `DPGRPOConfig`: σ calibrated by privcheck for `target_epsilon` at (q, T) and
    δ = 1/(10·(n_real + m)); OS-entropy randomness, or `seed` for a test run. Shared by every canary type.

    Same result as `DPGRPOConfig.from_target`, with the calibration (seconds of PLD work) cached per (q, T, δ, ε)
    in this process, so that a pilot, an audit and its tests at one configuration calibrate once."""
    from mechanisms.dpgrpo.config import DPGRPOConfig

    probe = DPGRPOConfig(n=n_real, m=q * n_real, T=T, sigma=1.0, C=C, delta=1.0 / (10 * (n_real + m)),
                         target_epsilon=target_epsilon, randomness="os_entropy" if seed is None else seed,
                         **preset.config_kwargs)
    sigma, calibration = _calibration(probe.q, probe.T, probe.delta, probe.target_epsilon)
    return dataclasses.replace(probe, sigma=sigma, calibration=copy.deepcopy(calibration))


@functools.lru_cache(maxsize=32)
def _calibration(q: float, T: int, delta: float, target_epsilon: float) -> tuple[float, dict]:
    """(σ, calibration record) from `privcheck.accounting.calibrate_sigma`, as `DPGRPOConfig.from_target` stores
    them."""
    from privcheck.accounting import calibrate_sigma

    cal = calibrate_sigma(q, T, delta, target_epsilon)
    return float(cal.value), cal.to_json()


def design_gradient_audit(preset: AuditPreset, *, canaries: tuple[DiracCanary, ...], q: float, T: int, n_real: int,
                          confidence: float, target_epsilon: float, C: float, seed: int | None, reserved_rule: str,
                          mask_real: bool, interference: float, plan_sims: int,
                          commitment: str) -> GradientAuditDesign:
    """Calibrate σ, plan (k₊, k₋) and pre-register (inputs already validated; the membership is committed)."""
    m = len(canaries)
    config = calibrated_config(preset, n_real=n_real, m=m, q=q, T=T, target_epsilon=target_epsilon, C=C, seed=seed)
    epsilon = _accounted_epsilon(config.q, config.sigma, config.T, config.delta)
    model = DPSGDDirac(config.q, config.sigma, config.T, "llr", interference)
    power = plan(m, delta=config.delta, confidence=confidence, eps_nominal=epsilon, score_model=model,
                 sims=plan_sims, seed=seed)
    prereg = cn.Preregistration(m=m, delta=config.delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=SCORE_NAME, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    return GradientAuditDesign(preset.name, config, n_real, canaries, reserved_rule, mask_real, interference,
                               epsilon, power, prereg, StepLLR(model), confidence)


# ---------------------------------------------------------------------------------------------------------------------
# Analysis of the auditor's log (after training).


def _diagnostics(diag_lines: list[dict], signs: np.ndarray, design: GradientAuditDesign) -> dict:
    """Spec §7.6 diagnostics from the log's `diagnostics` lines and the revealed S (never used by the test)."""
    m, cfg = design.m, design.config
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
        "inclusions_expected": cfg.q * cfg.T,
        "canary_pre_clip_norm_min": min(norms) if norms else None,
        "canary_pre_clip_norm_max": max(norms) if norms else None,
        "clip_norm": cfg.C,
        "cross_talk_max_abs_over_sigma_C": cross / (cfg.sigma * cfg.C),
        "real_records_masked_on_reserved": design.mask_real,
    }


def split_log(entries: list[dict]) -> tuple[list[dict], list[dict]]:
    """(round lines, diagnostics lines) of the auditor's log."""
    rounds = [e for e in entries if e.get("kind") == "round"]
    diags = [e for e in entries if e.get("kind") == "diagnostics"]
    return rounds, diags


def score_rounds(rounds: list[dict], design: GradientAuditDesign) -> cn.FrozenScores:
    """Frozen per-canary scores from the `round` lines of the auditor log (S is not an input)."""
    cfg = design.config
    view = AuditorView.from_rounds(rounds, design.reserved, cfg.T, cfg.sigma * cfg.C)
    return cn.score_canaries(design.score, view, design.canaries)


def analyse_log(log_path, design: GradientAuditDesign, membership: cn.Membership, salt: bytes, *,
                mechanism_params: dict | None = None) -> tuple[AuditReport, cn.FrozenScores, np.ndarray]:
    """Score, freeze, reveal S, verify the commitment and test (spec §3.1 steps 4–8). Returns (report, scores, S)."""
    from mechanisms.dpgrpo.audit_hooks import read_log

    if not isinstance(membership, cn.Membership) or membership.m != design.m:
        raise InvalidParameter("membership", membership, f"the sealed Membership of the {design.m} canaries")
    rounds, diag_lines = split_log(read_log(log_path))
    frozen = score_rounds(rounds, design)
    signs = np.array(membership.reveal(frozen))
    if not cn.verify(design.preregistration.commitment, signs, list(design.canary_ids), salt):
        raise PrivcheckError("membership does not match the pre-registered commitment")
    cfg = design.config
    params = {"q": cfg.q, "sigma": cfg.sigma, "steps": cfg.T, "C": cfg.C, "n": design.n_real,
              "n_canary": design.m, "divisor": cfg.q * (design.n_real + design.m), "preset": design.preset,
              "epsilon_without_canaries": design.epsilon, "target_epsilon": cfg.target_epsilon,
              "reserved_rule": design.reserved_rule, "mask_reserved_for_real_records": design.mask_real,
              "config_sha256": cfg.sha256()}
    params.update(mechanism_params or {})
    rep = preregistered_report(frozen, membership, design, params, diagnostics=_diagnostics(diag_lines, signs, design))
    return rep, frozen, signs


def preregistered_report(frozen, membership, design, params: dict, *, diagnostics: dict) -> AuditReport:
    """The one-run report of a DP-GRPO canary audit: the pre-registered explicit guess rule, the accountant's ε as
    the nominal claim, the power plan, the added canary slots; diagnostics beside the test, never in it."""
    prereg = design.preregistration
    return from_scores(frozen, membership, delta=design.config.delta, confidence=design.confidence,
                       k_plus=prereg.k_plus, k_minus=prereg.k_minus, strategy=Explicit(), eps_nominal=design.epsilon,
                       tie_break_seed=prereg.tie_break_seed, preregistration=prereg, power=design.plan,
                       claim={"neighboring": "add_remove", "accountant": "pld",
                              "mechanism": {"name": MECHANISM_NAME, "params": params}},
                       canaries={"type": prereg.canary_type, "added_slots": True, "score": prereg.score},
                       diagnostics=diagnostics)


# ---------------------------------------------------------------------------------------------------------------------
# The end-to-end audit.


@dataclass(frozen=True, eq=False)
class GradientAuditResult:
    """Everything one audit produced: the report, its design and plan, the frozen scores and the revealed S."""

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
        """The CLI's top-level keys (spec §10): the one-run headline plus the planned bound."""
        return {**self.report.headline(), "planned_eps_lower": self.report.power["planned_eps_lower"]}


def _check_seed(seed):
    return None if seed is None else val.count("seed", seed, minimum=0)


def _check_trainer_cls(trainer_cls):
    from mechanisms.dpgrpo.trainer import DPTrainer
    if not (isinstance(trainer_cls, type) and issubclass(trainer_cls, DPTrainer)):
        raise InvalidParameter("trainer_cls", trainer_cls, "DPTrainer or a subclass")
    return trainer_cls


def _private_dir(out: Path) -> Path:
    """out/private with mode 0700 (refuses to reuse a directory that already holds an auditor log)."""
    private = out / PRIVATE_DIR
    if (private / LOG_NAME).exists():
        raise InvalidParameter("out", str(out), "a directory without a previous auditor log (one audit per directory)")
    private.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(private, 0o700)
    return private


def _write_private_json(path: Path, obj: dict) -> None:
    from privcheck.artifacts.writer import write_atomic
    write_atomic(path, (json.dumps(obj, sort_keys=True, indent=1) + "\n").encode(), mode=0o600)


def run_gradient_canary_audit(*, preset="tiny-cpu", canaries: int, out_dir=None, seed: int | None = None,
                              rounds: int | None = None, q: float | None = None, confidence: float = 0.95,
                              n_real: int | None = None, target_epsilon: float | None = None,
                              C: float | None = None, reserved_rule: str = "last", mask_real: bool = True,
                              interference: float = 0.0, plan_sims: int = PLAN_SIMS, trainer_cls=None,
                              ) -> GradientAuditResult:
    """Run the pre-registered one-run audit of DP-GRPO with `canaries` Dirac canaries (module docstring).

    `preset`: a registered name (`tiny-cpu`) or an `AuditPreset`; `rounds`, `q`, `n_real`, `target_epsilon`, `C`
    override its T, q, n, ε and C. `out_dir`: where `audit.json` (sealed, atomic) and `private/` (the auditor log
    and the reveal, mode 0600) go; None keeps the private files in a fresh temporary directory and writes no
    artifact. `seed`: a seeded test run (trainer, membership and plan), never an audit release. `trainer_cls`: a
    `DPTrainer` subclass to audit (default `DPTrainer`). Every input is validated before any work or file.
    """
    from mechanisms.dpgrpo.trainer import DPTrainer

    m = val.count("canaries", canaries)
    spec = resolve_preset(preset)
    q = spec.q if q is None else val.sampling_rate("q", q)
    T = spec.T if rounds is None else val.count("rounds", rounds)
    n_real = spec.n if n_real is None else val.count("n_real", n_real)
    confidence = check_open_unit("confidence", confidence)
    target_epsilon = spec.target_epsilon if target_epsilon is None else val.positive("target_epsilon",
                                                                                     target_epsilon)
    C = spec.C if C is None else val.positive("C", C)
    seed = _check_seed(seed)
    if reserved_rule not in RESERVED_RULES:
        raise InvalidParameter("reserved_rule", reserved_rule, " or ".join(RESERVED_RULES))
    if not isinstance(mask_real, bool):
        raise InvalidParameter("mask_real", mask_real, "a bool")
    interference = val.nonnegative("interference", interference)
    plan_sims = val.count("plan_sims", plan_sims)
    trainer_cls = _check_trainer_cls(DPTrainer if trainer_cls is None else trainer_cls)
    out = None if out_dir is None else check_out_dir(out_dir)
    if out is not None and (out / PRIVATE_DIR / LOG_NAME).exists():
        raise InvalidParameter("out", str(out), "a directory without a previous auditor log (one audit per directory)")

    with torch_threads(spec.cpu_threads):
        return _run(spec, m=m, q=q, T=T, n_real=n_real, confidence=confidence, target_epsilon=target_epsilon, C=C,
                    seed=seed, reserved_rule=reserved_rule, mask_real=mask_real, interference=interference,
                    plan_sims=plan_sims, trainer_cls=trainer_cls, out=out)


def _run(spec: AuditPreset, *, m, q, T, n_real, confidence, target_epsilon, C, seed, reserved_rule, mask_real,
         interference, plan_sims, trainer_cls, out) -> GradientAuditResult:
    """The audit after validation: design, train, analyse, write (see `run_gradient_canary_audit`)."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    model, tokenizer = spec.build_policy(0 if seed is None else seed)
    from mechanisms.dpgrpo.core import ParamSpace
    canaries = dirac_canaries(reserved_coordinates(ParamSpace(model).dim, m, reserved_rule))   # m ≤ dim checked

    # 1. Pre-registration: coins and commitment, then calibration, plan and the guess rule.
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
    private = _private_dir(out) if out is not None else Path(tempfile.mkdtemp(prefix="privcheck-audit-"))
    log_path = private / LOG_NAME
    trainer, claim = _train(spec, design, membership, model, tokenizer, log_path, trainer_cls, seed)
    epsilon_after = _accounted_epsilon(claim["q"], claim["sigma"], claim["T"], claim["delta"])
    if epsilon_after != design.epsilon:
        raise PrivcheckError(f"ε changed when canaries were added: {design.epsilon!r} → {epsilon_after!r}")
    timings["train_s"] = time.perf_counter() - clock

    # 3–5. Score from the log, freeze, reveal, verify, test; diagnostics beside the test.
    clock = time.perf_counter()
    report, frozen, signs = analyse_log(log_path, design, membership, salt, mechanism_params={
        "epsilon_with_canaries": epsilon_after, "trainer": type(trainer).__name__, **spec.source,
        "privacy_release": bool(trainer.privacy_release and membership.audit_release)})
    _write_private_json(private / REVEAL_NAME, {
        "commitment": commitment, "salt_hex": salt.hex(), "canary_ids": ids,
        "bits": "".join("1" if s == 1 else "0" for s in signs), "preregistration": design.preregistration.to_json(),
        "preregistration_digest": design.preregistration.digest})
    timings["analyse_s"] = time.perf_counter() - clock
    artifact = document = None
    if out is not None:
        document = audit_document(report)
        artifact = write_audit(report, out, document=document)
    return GradientAuditResult(report, design, frozen.values, signs, frozen.frozen_at, membership.revealed_at,
                               epsilon_after, claim, log_path, artifact, document, timings)


def _train(spec: AuditPreset, design: GradientAuditDesign, membership: cn.Membership, model, tokenizer, log_path,
           trainer_cls, seed):
    """Append the canary slots, train T rounds with the hooks; returns (trainer, privacy claim)."""
    import torch

    from mechanisms.dpgrpo.audit_hooks import AuditHooks
    from mechanisms.dpgrpo.records import SlotUniverse, dirac_canary

    from mechanisms.dpgrpo.core import ParamSpace

    cfg = design.config
    dim = ParamSpace(model).dim
    real = spec.records(design.n_real, 0 if seed is None else seed)
    universe = SlotUniverse(design.n_real, torch.ones(design.n_real, dtype=torch.bool), real)
    vectors = [dirac_canary(c.coordinate, cfg.C, dim, dtype=torch.float32) for c in design.canaries]
    universe = universe.append_canaries(vectors, torch.from_numpy(membership.presence_for_training().copy()),
                                        design.preregistration.commitment)
    hooks = AuditHooks(torch.tensor(design.reserved, dtype=torch.int64), log_path,
                       mask_reserved_for_real_records=design.mask_real)
    trainer = trainer_cls(model, tokenizer, universe, cfg, spec.verifier, audit_hooks=hooks)
    claim = trainer.privacy_claim
    commitment = design.preregistration.commitment
    if claim is None or claim["n_canary"] != design.m or claim["canary_commitment"] != commitment:
        raise PrivcheckError("the trainer does not report the canary slots and the auditor's commitment")
    trainer.train()
    return trainer, claim


__all__ = ["AUDIT_PRESETS", "AuditPreset", "AuditorView", "DiracCanary", "GradientAuditDesign",
           "GradientAuditResult", "StepLLR", "analyse_log", "calibrated_config", "design_gradient_audit",
           "membership_seed", "dirac_canaries", "reserved_coordinates", "resolve_preset", "run_gradient_canary_audit",
           "score_rounds", "split_log"]
