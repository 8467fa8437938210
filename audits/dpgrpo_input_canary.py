"""One-run audit of DP-GRPO with input-space binary canaries, scored end to end (spec audits.md §7.4).

Spec audits.md §3.1 (protocol), §6 (power, `empirical` score model), §7.4 (input-space canaries), §7.5 (added
slots, pre-registration), §7.6 (diagnostics), §10 (report). The statistics, the sealed membership, the report and
the private-directory handling are those of the gradient-canary audit (`audits.dpgrpo_canary`); only the canaries,
the score and the power pilot differ.

What `run_input_canary_audit` guarantees, in protocol order:

1. **Public base policy.** The preset's public SFT pretraining, then a second public phase on *binary-choice*
   examples (a random digit string followed by "=", answer "0" or "1" drawn uniformly by the public pretraining
   generator) mixed with the preset's addition examples (`BinaryPretraining`). Both phases run before any record
   is read and the summary goes into the report. Without the second phase the tiny-cpu policy rarely answers
   "0"/"1" and almost every canary group has constant reward (zero advantage, spec §7.2 item 3).
2. **Canaries.** Canary i is an ordinary `Record`: a prompt of `prompt_digits` random digits plus "=" (distinct
   public strings from a generator independent of S), with a **secret** reference answer ℓ_i uniform on
   {"0", "1"}, drawn by `draw_labels` from its own generator (OS entropy; a derived seed in tests), never from S.
   The verifier is the preset's (reward 1 iff the completion is ℓ_i).
3. **Pre-registration.** S comes from `audits.canary.draw_membership`; S and the labels are committed with fresh
   salts (the label commitment uses the same byte layout, bit 1 ⇔ label "1"). σ is calibrated for the target ε at
   δ = 1/(10·(n + m)) (`dpgrpo_canary.calibrated_config`). A **pilot** trains the same mechanism on public data
   only: stand-in real records from a public seed apart from the audited ones, `pilot_canaries` public canary
   prompts with public labels and an exactly balanced random inclusion (its own generator, independent of S); its
   in/out scores form the `Empirical` score model of `audits.power.plan`, which fixes (k₊, k₋) before training.
4. **Training.** The m canary records are appended after the n real slots (`SlotUniverse.append_canaries`, real
   records never replaced); (q, σ, T, δ) are unchanged, the trainer's public divisor is q·(n + m), and ε from the
   PLD accountant is computed before and, from the trainer's privacy claim, after the canaries were added — the
   audit stops if they differ. `AuditHooks` (one reserved coordinate, nothing masked) write the per-round
   diagnostics to the auditor's private log.
5. **Score.** `LogOddsDelta`: Y_i = [log π_θ(ℓ_i⏎) − log π_θ(ℓ̄_i⏎)] − [log π_ref(ℓ_i⏎) − log π_ref(ℓ̄_i⏎)] on
   canary i's prompt, where ⏎ is EOS, ℓ̄_i the other option, π_θ the trained policy and π_ref the same model with
   its LoRA adapter disabled — the public pretrained base, since private training only moves LoRA tensors. The
   scorer receives the model view and the canary, never S; scores are frozen before S is revealed.
6. **Reveal, test, diagnostics.** S is revealed against the frozen scores and both commitments are verified;
   `audits.one_run.from_scores` applies the pre-registered rule. Diagnostics beside the test (§7.6): realised
   inclusion counts, present canaries never sampled, the fraction of constant-reward canary groups (from the
   hooks' log: the trainer's own view of the sampled canary groups), canary pre-clip norms, the base policy's
   mass on the two options, AUROC after the reveal. The statistic never reads them.

Scope: input-space canaries go through the whole mechanism (rollouts, verifier, advantages, loss, clipping, noise,
accounting). Their power at tiny-cpu scale is small (the pilot's plan says so and the report carries it); a zero
bound is "no evidence", never "private". Assumptions: the trainer honours the canary slots and the hooks; the claim
is the per-slot add/remove (ε, δ) of the PLD accountant. A seeded run (`seed=`) is a test, not an audit release.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from audits import canary as cn
from audits.dpgrpo_canary import (LOG_NAME, PLAN_SIMS, PRIVATE_DIR, REVEAL_NAME, AuditPreset, CanaryIds,
                                  _accounted_epsilon, _check_seed, _check_trainer_cls, _private_dir,
                                  _write_private_json, calibrated_config, membership_seed, reserved_coordinates,
                                  preregistered_report, resolve_preset, split_log)
from audits.one_run import check_open_unit
from audits.power import PowerReport, plan
from audits.report import AuditReport, audit_document, check_out_dir, write_audit
from audits.score_models import Empirical
from mechanisms.dpgrpo.run import torch_threads
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError

CANARY_TYPE = "input_space"
SCORE_NAME = "loss_delta_vs_base"
OPTIONS = ("0", "1")             # the two answers of a binary canary question
PROMPT_SUFFIX = "="
DIGITS = "0123456789"
DEFAULT_PROMPT_DIGITS = 6
MAX_PROMPT_DIGITS = 15
PILOT_LOG_NAME = "pilot_log.jsonl"
PILOT_RECORDS_SEED = 1_000_003  # public seed (added to the preset's) of the pilot's stand-in real records


# ---------------------------------------------------------------------------------------------------------------------
# Public prompts, secret labels and the public binary-choice pretraining.


def _derived_seed(seed: int, what: str) -> int:
    """A 63-bit seed for `what` derived from a test seed, apart from the membership and trainer seeds."""
    digest = hashlib.sha256(f"privcheck.audits.dpgrpo_input/{what}/{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def label_seed(seed: int) -> int:
    """The secret-label seed of a seeded (test) audit: derived from `seed`, distinct from `membership_seed(seed)`."""
    return _derived_seed(seed, "labels")


def draw_labels(m: int, seed: int | None = None) -> tuple[str, ...]:
    """m secret labels uniform on OPTIONS, i.i.d.: OS entropy (`secrets`), or numpy PCG64 under `seed` (tests).
    The draw takes no membership: labels are independent of S by construction."""
    m = val.count("canaries", m)
    if seed is None:
        bits = [secrets.randbits(1) for _ in range(m)]
    else:
        bits = np.random.default_rng(val.count("seed", seed, minimum=0)).integers(0, 2, size=m).tolist()
    return tuple(OPTIONS[b] for b in bits)


def label_bits(labels) -> np.ndarray:
    """The commitment bits of labels: 1 for OPTIONS[1], 0 for OPTIONS[0]."""
    return np.array([OPTIONS.index(x) for x in labels], dtype=np.int64)


def public_prompts(count: int, digits: int, rng: random.Random) -> tuple[str, ...]:
    """`count` distinct prompts "<digits random digits>=", sampled without replacement by `rng`."""
    return tuple(f"{v:0{digits}d}{PROMPT_SUFFIX}" for v in rng.sample(range(10 ** digits), count))


def binary_choice_prompt(rng: random.Random, digits: int) -> str:
    return "".join(rng.choice(DIGITS) for _ in range(digits)) + PROMPT_SUFFIX


@dataclass(frozen=True)
class BinaryPretraining:
    """The public binary-choice phase after the preset's SFT: `steps` AdamW steps on the base weights (adapter off)
    with batches of `batch` examples, a fraction `binary_fraction` of them binary-choice prompts (random digits +
    "=") with PUBLIC labels uniform on OPTIONS drawn by `random.Random(seed)`, the rest the preset's addition
    examples (so the addition task is kept). Measured on tiny-cpu (60 steps): the base then answers "0"/"1" on
    fresh canary prompts with probabilities ≈ 0.42/0.55 and ≈ 11% of G = 4 groups have constant reward, against
    ≈ 98% without this phase (docs: /work/notes/h8_docs.md)."""

    steps: int = 60
    lr: float = 3e-3
    batch: int = 64
    seed: int = 2718
    binary_fraction: float = 0.5

    def __post_init__(self):
        val.count("pretraining.steps", self.steps)
        val.positive("pretraining.lr", self.lr)
        val.count("pretraining.batch", self.batch)
        val.count("pretraining.seed", self.seed, minimum=0)
        fraction = val.positive("pretraining.binary_fraction", self.binary_fraction)
        if fraction > 1:
            raise InvalidParameter("pretraining.binary_fraction", fraction, "(0, 1]")

    def examples(self, digits: int):
        """The example generator `pretrain_public` calls as `examples(rng, count)`."""
        from mechanisms.dpgrpo.pretrain import addition_examples
        from mechanisms.dpgrpo.records import Record

        fraction = self.binary_fraction

        def binary_choice_and_addition_examples(rng: random.Random, count: int) -> list:
            out = []
            for _ in range(count):
                if rng.random() < fraction:
                    out.append(Record(prompt=binary_choice_prompt(rng, digits), answer=rng.choice(OPTIONS)))
                else:
                    out.extend(addition_examples(rng, 1))
            return out

        return binary_choice_and_addition_examples

    def apply(self, model, tokenizer, *, digits: int, seed: int, max_prompt_len: int, L_max: int) -> dict:
        """Run the phase on `model` (public data only) and return its public summary for the report."""
        from mechanisms.dpgrpo.pretrain import pretrain_public

        summary = pretrain_public(model, tokenizer, steps=self.steps, lr=self.lr, batch=self.batch,
                                  seed=self.seed + seed, max_prompt_len=max_prompt_len, L_max=L_max,
                                  examples=self.examples(digits))
        return {**summary, "binary_fraction": self.binary_fraction, "prompt": f"{digits} random digits + "
                f"{PROMPT_SUFFIX!r}", "labels": f"public, uniform on {list(OPTIONS)} from random.Random(seed), "
                "independent of the secret canary labels"}


# ---------------------------------------------------------------------------------------------------------------------
# Canaries, the model view and the score.


@dataclass(frozen=True)
class InputCanary:
    """Canary i: public id and prompt, and its secret reference answer `label` (one of OPTIONS)."""

    id: str
    prompt: str
    label: str = field(repr=False)

    def record(self):
        """The ordinary record the trainer sees: the prompt with the secret label as reference answer."""
        from mechanisms.dpgrpo.records import Record
        return Record(prompt=self.prompt, answer=self.label)


def input_canaries(prompts, labels) -> tuple[InputCanary, ...]:
    """One canary per prompt, with the public id "input:<prompt>" (the ids the commitments bind)."""
    return tuple(InputCanary(f"input:{p}", p, x) for p, x in zip(prompts, labels, strict=True))


@dataclass(frozen=True, eq=False)
class PolicyView:
    """The statistic's input: one trained model, read as π_θ (LoRA on) or π_ref (LoRA off: the public base)."""

    model: object
    tokenizer: object
    max_prompt_len: int

    def option_logprobs(self, prompt: str, policy: str) -> np.ndarray:
        """log π(o⏎ | prompt) for each option o of OPTIONS (the answer then EOS), in float64."""
        import torch

        from mechanisms.dpgrpo.rollouts import encode_prompt, encode_target, policy_scope, token_logprobs

        device = next(self.model.parameters()).device
        ids = encode_prompt(self.tokenizer, prompt, self.max_prompt_len, device)
        rows = torch.cat([encode_target(self.tokenizer, o, 2, device) for o in OPTIONS])   # one token + EOS each
        with torch.no_grad(), policy_scope(self.model, policy):
            lp = token_logprobs(self.model, ids, rows).sum(dim=1)
        return lp.double().cpu().numpy()


@dataclass(frozen=True)
class LogOddsDelta:
    """Spec §7.4 score: the log-odds of the secret label under the trained policy minus the same log-odds under
    the public base, both on the canary's prompt (higher ⇒ training moved the policy towards the label)."""

    def __call__(self, view: PolicyView, canary: InputCanary) -> float:
        k = OPTIONS.index(canary.label)
        trained = view.option_logprobs(canary.prompt, "current")
        base = view.option_logprobs(canary.prompt, "reference")
        return float((trained[k] - trained[1 - k]) - (base[k] - base[1 - k]))


def score_model_view(view: PolicyView, canaries) -> cn.FrozenScores:
    """Frozen scores of `canaries` on `view` (the model in eval mode: no LoRA dropout); S is not an input."""
    view.model.eval()
    return cn.score_canaries(LogOddsDelta(), view, canaries)


# ---------------------------------------------------------------------------------------------------------------------
# Training with appended canary records (audit and pilot) and the hooks' diagnostics.


def _train(spec: AuditPreset, config, model, tokenizer, real, canaries, presence: np.ndarray, commitment: str,
           log_path: Path, trainer_cls):
    """Append the canary records after the real slots, train config.T rounds with diagnostics-only hooks."""
    import torch

    from mechanisms.dpgrpo.audit_hooks import AuditHooks
    from mechanisms.dpgrpo.core import ParamSpace
    from mechanisms.dpgrpo.records import SlotUniverse

    n = config.n
    universe = SlotUniverse(n, torch.ones(n, dtype=torch.bool), real)
    universe = universe.append_canaries([c.record() for c in canaries], torch.from_numpy(presence.copy()),
                                        commitment)
    # The hooks need a reserved coordinate; this audit reads only their diagnostics lines (nothing is masked).
    reserved = reserved_coordinates(ParamSpace(model).dim, 1, "last")
    hooks = AuditHooks(torch.tensor(reserved, dtype=torch.int64), log_path, mask_reserved_for_real_records=False)
    trainer = trainer_cls(model, tokenizer, universe, config, spec.verifier, audit_hooks=hooks)
    claim = trainer.privacy_claim
    if claim is None or claim["n_canary"] != len(canaries) or claim["canary_commitment"] != commitment:
        raise PrivcheckError("the trainer does not report the canary slots and the auditor's commitment")
    trainer.train()
    return trainer, claim


@dataclass(frozen=True)
class CanaryTelemetry:
    """Per-canary facts from the hooks' diagnostics lines (the trainer's view; never read by the statistic)."""

    inclusions: np.ndarray           # rounds in which each canary slot was in the batch
    groups: int                      # canary rollout groups scored over all rounds
    constant_groups: float           # of which had constant reward (a float: the log stores per-round fractions)
    pre_clip_norms: tuple[float, ...]
    rounds: int

    @classmethod
    def from_log(cls, log_path, m: int) -> "CanaryTelemetry":
        from mechanisms.dpgrpo.audit_hooks import read_log

        _, lines = split_log(read_log(log_path))
        counts = np.zeros(m, dtype=np.int64)
        groups, constant, norms = 0, 0.0, []
        for line in lines:
            d = line["diagnostics"]
            included = np.asarray(d["canary_included"], dtype=np.int64)
            counts += included
            k = int(included.sum())            # every sampled canary slot is a Record with a scored group
            if k and d.get("canary_constant_group_fraction") is not None:
                groups += k
                constant += float(d["canary_constant_group_fraction"]) * k
            norms.extend(float(v) for v in d["canary_pre_clip_norms"].values())
        counts.setflags(write=False)
        return cls(counts, groups, constant, tuple(norms), len(lines))

    @property
    def constant_fraction(self) -> float | None:
        return None if self.groups == 0 else min(1.0, max(0.0, self.constant_groups / self.groups))


# ---------------------------------------------------------------------------------------------------------------------
# The power pilot (public data only).


@dataclass(frozen=True, eq=False)
class Pilot:
    """Scores of a public pilot run: its in/out scores define the plan's `Empirical` score model."""

    prompts: tuple[str, ...] = field(repr=False)
    in_scores: np.ndarray = field(repr=False)
    out_scores: np.ndarray = field(repr=False)
    constant_reward_frac: float | None
    seeded: bool

    @property
    def m(self) -> int:
        return len(self.prompts)

    @property
    def score_model(self) -> Empirical:
        return Empirical(self.in_scores, self.out_scores)

    @property
    def auroc(self) -> float:
        from scipy.stats import mannwhitneyu
        return float(mannwhitneyu(self.in_scores, self.out_scores).statistic
                     / (self.in_scores.size * self.out_scores.size))

    def to_json(self) -> dict:
        return {"canaries": self.m, "n_in": int(self.in_scores.size), "n_out": int(self.out_scores.size),
                "inclusion": "exactly balanced, random (pilot generator, independent of S)",
                "data": "public only: stand-in real records (public seed), public prompts with public labels",
                "in_mean": float(self.in_scores.mean()), "out_mean": float(self.out_scores.mean()),
                "in_std": float(self.in_scores.std()), "out_std": float(self.out_scores.std()),
                "auroc": self.auroc, "constant_reward_canary_groups_frac": self.constant_reward_frac,
                "seeded": self.seeded}


def run_pilot(spec: AuditPreset, base_model, tokenizer, config, *, prompts, seed: int | None, log_path: Path,
              trainer_cls) -> Pilot:
    """Train a copy of the public base with public canaries on public stand-in records and score them."""
    m = len(prompts)
    rng = np.random.default_rng(None if seed is None else _derived_seed(seed, "pilot"))
    labels = tuple(OPTIONS[b] for b in rng.integers(0, 2, size=m))
    present = np.zeros(m, dtype=bool)
    present[rng.permutation(m)[: m // 2]] = True            # both classes, independent of S
    canaries = input_canaries(prompts, labels)
    commitment = cn.commit(present, [c.id for c in canaries], cn.new_salt())
    trainer_seed = int(rng.integers(0, 2 ** 62)) if seed is not None else "os_entropy"
    pilot_config = dataclasses.replace(config, randomness=trainer_seed)
    model = copy.deepcopy(base_model)
    real = spec.records(config.n, PILOT_RECORDS_SEED)
    _train(spec, pilot_config, model, tokenizer, real, canaries, present, commitment, log_path, trainer_cls)
    scores = score_model_view(PolicyView(model, tokenizer, config.max_prompt_len), canaries).values
    telemetry = CanaryTelemetry.from_log(log_path, m)
    return Pilot(tuple(prompts), scores[present].copy(), scores[~present].copy(), telemetry.constant_fraction,
                 seed is not None)


# ---------------------------------------------------------------------------------------------------------------------
# Design (pre-registration) and result.


@dataclass(frozen=True, eq=False)
class InputAuditDesign(CanaryIds):
    """The pre-registered design of one audit (fixed before training; holds no membership bits). `canaries`
    carry the secret labels, which stay with the auditor until the reveal."""

    preset: str
    config: object                   # mechanisms.dpgrpo.config.DPGRPOConfig
    n_real: int
    canaries: tuple[InputCanary, ...] = field(repr=False)
    prompt_digits: int
    epsilon: float                   # PLD ε at (q, σ, T, δ) without canaries
    pilot: Pilot
    plan: PowerReport
    preregistration: cn.Preregistration
    label_commitment: str
    pretraining: dict
    confidence: float
    score: LogOddsDelta = LogOddsDelta()

    @property
    def score_model(self) -> Empirical:
        """The plan's score model (the pilot's empirical in/out scores)."""
        return self.pilot.score_model


@dataclass(frozen=True, eq=False)
class InputAuditResult:
    """Everything one audit produced: the report, its design and plan, the frozen scores, the revealed S and
    labels, and the trained policy (`model`, the audited mechanism's output) with its tokenizer."""

    report: AuditReport
    design: InputAuditDesign
    scores: np.ndarray
    membership: np.ndarray
    labels: tuple[str, ...]
    scores_frozen_at: int
    membership_revealed_at: int
    epsilon_with_canaries: float
    privacy_claim: dict
    log_path: Path
    artifact: Path | None
    document: dict | None
    timings: dict
    model: object = field(repr=False, default=None)
    tokenizer: object = field(repr=False, default=None)

    @property
    def eps_lower(self) -> float:
        return self.report.result["eps_lower"]

    def headline(self) -> dict:
        """The CLI's top-level keys (spec §10): the one-run headline plus the planned bound."""
        return {**self.report.headline(), "planned_eps_lower": self.report.power["planned_eps_lower"]}


# ---------------------------------------------------------------------------------------------------------------------
# Analysis after training.


def _base_option_mass(view: PolicyView, canaries) -> tuple[float, float]:
    """(mean of π_ref("0"⏎) + π_ref("1"⏎), mean share of "0" between the two) over the canary prompts."""
    probs = np.exp([view.option_logprobs(c.prompt, "reference") for c in canaries])
    return float(probs.sum(axis=1).mean()), float((probs[:, 0] / probs.sum(axis=1)).mean())


def _diagnostics(telemetry: CanaryTelemetry, signs: np.ndarray, design: InputAuditDesign, view: PolicyView) -> dict:
    """Spec §7.6 diagnostics (never used by the test)."""
    cfg = design.config
    counts, norms = telemetry.inclusions, np.array(telemetry.pre_clip_norms)
    present = signs == 1
    mass, share0 = _base_option_mass(view, design.canaries)
    return {
        "realized_inclusions_logged": telemetry.rounds > 0,
        "never_sampled_in_canaries": int(np.sum(present & (counts == 0))),
        "constant_reward_canary_groups_frac": telemetry.constant_fraction,
        "canary_groups_sampled": telemetry.groups,
        "absent_canaries_ever_sampled": int(np.sum(~present & (counts > 0))),
        "inclusions_present_mean": float(counts[present].mean()) if present.any() else None,
        "inclusions_present_min": int(counts[present].min()) if present.any() else None,
        "inclusions_expected": cfg.q * cfg.T,
        "canary_pre_clip_norm_min": float(norms.min()) if norms.size else None,
        "canary_pre_clip_norm_median": float(np.median(norms)) if norms.size else None,
        "canary_pre_clip_norm_max": float(norms.max()) if norms.size else None,
        "canary_clipped_frac": float(np.mean(norms > cfg.C)) if norms.size else None,
        "clip_norm": cfg.C,
        "base_option_mass_mean": mass,
        "base_share_of_option_0_mean": share0,
    }


def analyse(model, tokenizer, log_path, design: InputAuditDesign, membership: cn.Membership, salt: bytes,
            label_salt: bytes, *, mechanism_params: dict | None = None
            ) -> tuple[AuditReport, cn.FrozenScores, np.ndarray]:
    """Score, freeze, reveal S, verify both commitments and test (spec §3.1 steps 4–8). Returns (report, scores,
    S)."""
    if not isinstance(membership, cn.Membership) or membership.m != design.m:
        raise InvalidParameter("membership", membership, f"the sealed Membership of the {design.m} canaries")
    cfg = design.config
    view = PolicyView(model, tokenizer, cfg.max_prompt_len)
    frozen = score_model_view(view, design.canaries)
    signs = np.array(membership.reveal(frozen))
    ids = list(design.canary_ids)
    if not cn.verify(design.preregistration.commitment, signs, ids, salt):
        raise PrivcheckError("membership does not match the pre-registered commitment")
    if not cn.verify(design.label_commitment, label_bits(c.label for c in design.canaries), ids, label_salt):
        raise PrivcheckError("canary labels do not match the pre-registered label commitment")
    params = {"q": cfg.q, "sigma": cfg.sigma, "steps": cfg.T, "C": cfg.C, "n": design.n_real,
              "n_canary": design.m, "divisor": cfg.q * (design.n_real + design.m), "preset": design.preset,
              "epsilon_without_canaries": design.epsilon, "target_epsilon": cfg.target_epsilon,
              "G": cfg.G, "tau": cfg.tau, "config_sha256": cfg.sha256(),
              "canary_prompt": {"digits": design.prompt_digits, "suffix": PROMPT_SUFFIX, "options": list(OPTIONS)},
              "canary_labels": "secret, uniform on the options, own generator (independent of S)",
              "canary_labels_commitment": design.label_commitment,
              "public_pretraining": design.pretraining, "pilot": design.pilot.to_json()}
    params.update(mechanism_params or {})
    telemetry = CanaryTelemetry.from_log(log_path, design.m)
    rep = preregistered_report(frozen, membership, design, params,
                               diagnostics=_diagnostics(telemetry, signs, design, view))
    return rep, frozen, signs


# ---------------------------------------------------------------------------------------------------------------------
# The end-to-end audit.


def run_input_canary_audit(*, preset="tiny-cpu", canaries: int, out_dir=None, seed: int | None = None,
                           rounds: int | None = None, q: float | None = None, confidence: float = 0.95,
                           n_real: int | None = None, target_epsilon: float | None = None, C: float | None = None,
                           pilot_canaries: int | None = None, prompt_digits: int = DEFAULT_PROMPT_DIGITS,
                           pretraining: BinaryPretraining | None = BinaryPretraining(), plan_sims: int = PLAN_SIMS,
                           trainer_cls=None) -> InputAuditResult:
    """Run the pre-registered one-run audit of DP-GRPO with `canaries` input-space binary canaries (module
    docstring).

    `preset`: a registered name (`tiny-cpu`) or an `AuditPreset`; `rounds`, `q`, `n_real`, `target_epsilon`, `C`
    override its T, q, n, ε and C. `pilot_canaries`: public canaries of the power pilot (default `canaries`).
    `prompt_digits`: random digits per canary prompt. `pretraining`: the public binary-choice phase, or None to
    skip it (then most canary groups have constant reward). `out_dir`: where `audit.json` (sealed, atomic) and
    `private/` (auditor and pilot logs, the reveal; mode 0600) go; None keeps the private files in a fresh
    temporary directory and writes no artifact. `seed`: a seeded test run (trainers, membership, labels, prompts,
    pilot, plan), never an audit release. `trainer_cls`: the `DPTrainer` subclass to audit (pilot included). Every
    input is validated before any work or file.
    """
    from mechanisms.dpgrpo.trainer import DPTrainer

    m = val.count("canaries", canaries, minimum=2)
    spec = resolve_preset(preset)
    q = spec.q if q is None else val.sampling_rate("q", q)
    T = spec.T if rounds is None else val.count("rounds", rounds)
    n_real = spec.n if n_real is None else val.count("n_real", n_real)
    confidence = check_open_unit("confidence", confidence)
    target_epsilon = spec.target_epsilon if target_epsilon is None else val.positive("target_epsilon",
                                                                                     target_epsilon)
    C = spec.C if C is None else val.positive("C", C)
    m_pilot = m if pilot_canaries is None else val.count("pilot_canaries", pilot_canaries, minimum=2)
    digits = val.count("prompt_digits", prompt_digits)
    if digits > MAX_PROMPT_DIGITS or 10 ** digits < m + m_pilot:
        raise InvalidParameter("prompt_digits", prompt_digits, f"an integer in [1, {MAX_PROMPT_DIGITS}] with "
                               f"10**digits >= canaries + pilot_canaries = {m + m_pilot} (distinct prompts)")
    if pretraining is not None and not isinstance(pretraining, BinaryPretraining):
        raise InvalidParameter("pretraining", pretraining, "a BinaryPretraining or None")
    seed = _check_seed(seed)
    plan_sims = val.count("plan_sims", plan_sims)
    trainer_cls = _check_trainer_cls(DPTrainer if trainer_cls is None else trainer_cls)
    out = None if out_dir is None else check_out_dir(out_dir)
    if out is not None and (out / PRIVATE_DIR / LOG_NAME).exists():
        raise InvalidParameter("out", str(out), "a directory without a previous auditor log (one audit per directory)")

    with torch_threads(spec.cpu_threads):
        return _run(spec, m=m, m_pilot=m_pilot, digits=digits, q=q, T=T, n_real=n_real, confidence=confidence,
                    target_epsilon=target_epsilon, C=C, seed=seed, pretraining=pretraining, plan_sims=plan_sims,
                    trainer_cls=trainer_cls, out=out)


def _build_base(spec: AuditPreset, pretraining: BinaryPretraining | None, digits: int, seed: int | None):
    """The public base policy: the preset's SFT, then the binary-choice phase; returns (model, tokenizer, summary)."""
    model, tokenizer = spec.build_policy(0 if seed is None else seed)
    tokenizer.encode(binary_choice_prompt(random.Random(0), digits))     # the prompt alphabet must be encodable
    if any(len(tokenizer.encode(o)) != 1 for o in OPTIONS):             # PolicyView scores one token + EOS
        raise InvalidParameter("preset", spec.name, f"a tokenizer with one token for each option {OPTIONS}")
    summary = {"base": f"the {spec.name} preset's public SFT pretraining", "binary_choice": None}
    if pretraining is not None:
        kw = spec.config_kwargs
        summary["binary_choice"] = pretraining.apply(model, tokenizer, digits=digits,
                                                     seed=0 if seed is None else seed,
                                                     max_prompt_len=kw["max_prompt_len"], L_max=kw["L_max"])
    return model, tokenizer, summary


def _run(spec: AuditPreset, *, m, m_pilot, digits, q, T, n_real, confidence, target_epsilon, C, seed, pretraining,
         plan_sims, trainer_cls, out) -> InputAuditResult:
    """The audit after validation: base, pre-registration (pilot and plan), train, analyse, write."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    model, tokenizer, pretrain_summary = _build_base(spec, pretraining, digits, seed)
    timings["base_policy_s"] = time.perf_counter() - clock

    # 1. Coins, secret labels and their commitments; public prompts (audit and pilot) apart from both.
    clock = time.perf_counter()
    prompt_rng = random.Random(secrets.randbits(64) if seed is None else _derived_seed(seed, "prompts"))
    prompts = public_prompts(m + m_pilot, digits, prompt_rng)
    membership = cn.draw_membership(m, seed=None if seed is None else membership_seed(seed))
    labels = draw_labels(m, seed=None if seed is None else label_seed(seed))
    canaries = input_canaries(prompts[:m], labels)
    ids = [c.id for c in canaries]
    salt, label_salt = cn.new_salt(), cn.new_salt()
    commitment = membership.commit(ids, salt)
    label_commitment = cn.commit(label_bits(labels), ids, label_salt)

    # 2. Calibration, the public pilot, the plan and the pre-registered guess rule.
    config = calibrated_config(spec, n_real=n_real, m=m, q=q, T=T, target_epsilon=target_epsilon, C=C, seed=seed)
    epsilon = _accounted_epsilon(config.q, config.sigma, config.T, config.delta)
    private = _private_dir(out) if out is not None else Path(tempfile.mkdtemp(prefix="privcheck-audit-"))
    pilot = run_pilot(spec, model, tokenizer, config, prompts=prompts[m:], seed=seed,
                      log_path=private / PILOT_LOG_NAME, trainer_cls=trainer_cls)
    power = plan(m, delta=config.delta, confidence=confidence, eps_nominal=epsilon, score_model=pilot.score_model,
                 sims=plan_sims, seed=seed)
    prereg = cn.Preregistration(m=m, delta=config.delta, confidence=confidence, selection="explicit",
                                k_plus=power.k_plus, k_minus=power.k_minus, canary_type=CANARY_TYPE,
                                score=SCORE_NAME, tie_break_seed=cn.TIE_BREAK_SEED, commitment=commitment)
    design = InputAuditDesign(spec.name, config, n_real, canaries, digits, epsilon, pilot, power, prereg,
                              label_commitment, pretrain_summary, confidence)
    timings["design_s"] = time.perf_counter() - clock

    # 3. Training with m added canary records.
    clock = time.perf_counter()
    log_path = private / LOG_NAME
    real = spec.records(n_real, 0 if seed is None else seed)
    trainer, claim = _train(spec, config, model, tokenizer, real, canaries, membership.presence_for_training(),
                            commitment, log_path, trainer_cls)
    epsilon_after = _accounted_epsilon(claim["q"], claim["sigma"], claim["T"], claim["delta"])
    if epsilon_after != epsilon:
        raise PrivcheckError(f"ε changed when canaries were added: {epsilon!r} → {epsilon_after!r}")
    timings["train_s"] = time.perf_counter() - clock

    # 4–6. Score, freeze, reveal, verify, test; diagnostics beside the test.
    clock = time.perf_counter()
    report, frozen, signs = analyse(model, tokenizer, log_path, design, membership, salt, label_salt,
                                    mechanism_params={
                                        "epsilon_with_canaries": epsilon_after, "trainer": type(trainer).__name__,
                                        "trainer_divisor": claim["divisor"], **spec.source,
                                        "privacy_release": bool(trainer.privacy_release and membership.audit_release
                                                                and seed is None)})
    _write_private_json(private / REVEAL_NAME, {
        "commitment": commitment, "salt_hex": salt.hex(), "canary_ids": ids,
        "bits": "".join("1" if s == 1 else "0" for s in signs),
        "label_commitment": label_commitment, "label_salt_hex": label_salt.hex(), "labels": list(labels),
        "preregistration": prereg.to_json(), "preregistration_digest": prereg.digest})
    timings["analyse_s"] = time.perf_counter() - clock
    artifact = document = None
    if out is not None:
        document = audit_document(report)
        artifact = write_audit(report, out, document=document)
    return InputAuditResult(report, design, frozen.values, signs, labels, frozen.frozen_at, membership.revealed_at,
                            epsilon_after, claim, log_path, artifact, document, timings, model, tokenizer)


__all__ = ["CANARY_TYPE", "OPTIONS", "SCORE_NAME", "BinaryPretraining", "CanaryTelemetry", "InputAuditDesign",
           "InputAuditResult", "InputCanary", "LogOddsDelta", "Pilot", "PolicyView", "analyse", "draw_labels",
           "input_canaries", "label_bits", "label_seed", "public_prompts", "run_input_canary_audit", "run_pilot",
           "score_model_view"]
