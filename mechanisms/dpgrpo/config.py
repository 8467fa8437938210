"""Public configuration of Algorithm 1: `DPGRPOConfig`, and its privacy plan (docs/dpgrpo.md, "Privacy plan").

`DPGRPOConfig` is a frozen dataclass validated at construction: every invalid value raises `InvalidParameter`
naming the parameter, before anything is read or written. `sha256()` hashes its canonical JSON
(`privcheck.serialization.canonical_json`: sorted keys, floats at `repr` precision, ±inf as strings) and goes
into the run artifact before the run starts.

Privacy parameters and training settings are kept apart. The privacy parameters (`PRIVACY_FIELDS`: n, m with
q = m/n, T, σ, C, δ, the target ε and the calibration) are bound into `config.plan`, a
`privcheck.accounting.DPGRPOPlan`, whose ε is always computed from its own event
(`PoissonGaussianEvent(q, σ, T)`, add/remove one prompt group); everything else (group size, sampling
temperature, LoRA shape, optimizer, chunking, records per gradient pass (`gradient_batch`), rollout mode,
precision, randomness, arm) is a training or performance setting that the guarantee does not depend on
(`training_settings()`). The non-private arm and check mode (σ = 0) have no plan: `config.plan is None` and
nothing is claimed.

`calibration` is either None or the `privcheck.accounting.Calibration` of this very plan (same event and δ);
anything else (a mapping carrying an ε, a calibration for other parameters) is refused with
`privcheck.errors.CalibrationMismatch`. `DPGRPOConfig.from_target(...)` calibrates σ for a target ε through the
plan (`DPGRPOPlan.from_target`, which never overshoots). `replace()` of a privacy parameter drops a calibration
that no longer matches (or, with `recalibrate=True`, calibrates σ again for the target ε), so a config never
carries a stale ε. This module never computes ε itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
from dataclasses import dataclass, field

from privcheck import validation as val
from privcheck.errors import CalibrationMismatch, InvalidParameter
from privcheck.serialization import canonical_json, jsonable

__all__ = ["ARMS", "DEFAULT_RECORD_GRADIENTS", "DPGRPOConfig", "NONPRIVATE_ARM", "OPTIMIZERS", "PRECISIONS",
           "PRIVACY_FIELDS", "RECORD_GRADIENTS", "ROLLOUT_MODES"]

ARMS = ("dp_grpo", "zero_advantage", "dp_sft_filtered", "dp_sft_gold", "nonprivate_reference")
RECORD_GRADIENTS = ("grpo", "zero_advantage", "sft_filtered", "sft_gold")
ROLLOUT_MODES = ("isolated", "batched", "replay")
OPTIMIZERS = ("adamw", "sgd")
PRECISIONS = ("float32", "float64")
NONPRIVATE_ARM = "nonprivate_reference"
DEFAULT_RECORD_GRADIENTS = {"dp_grpo": "grpo", "zero_advantage": "zero_advantage", "dp_sft_filtered": "sft_filtered",
                            "dp_sft_gold": "sft_gold", "nonprivate_reference": "grpo"}
# The fields the privacy guarantee depends on; every other field is a training or performance setting.
PRIVACY_FIELDS = ("n", "m", "T", "sigma", "C", "delta", "target_epsilon", "calibration")


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _calibration_json(cal) -> dict:
    # The wall time of the calibration is not a public parameter and would make the hash differ between
    # processes that calibrate the same configuration.
    return {k: v for k, v in jsonable(cal.to_json()).items() if k != "wall_time_s"}


@dataclass(frozen=True)
class DPGRPOConfig:
    """Public inputs of Algorithm 1. q = m/n; δ defaults to 1/(10n); σ = 0 / C = ∞ only for the
    non-private arm (`arm="nonprivate_reference"`) or in check mode (`check_mode=True`)."""

    n: int
    m: float
    T: int
    sigma: float
    C: float
    delta: float | None = None
    target_epsilon: float | None = None
    G: int = 4
    tau: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    L_max: int = 6
    max_prompt_len: int = 32
    beta: float = 0.04
    c: float = 1e-4
    lora_r: int = 4
    lora_alpha: float = 8.0
    lora_dropout: float = 0.0
    lora_targets: tuple = ("attn.c_attn", "attn.c_proj")
    lora_init: str = "peft_default"
    optimizer: str = "adamw"
    lr: float = 1e-2
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    chunk_size: int | None = None
    gradient_batch: int = 1
    rollout_mode: str = "isolated"
    precision: str = "float32"
    randomness: str | int = "os_entropy"
    arm: str = "dp_grpo"
    record_gradient: str | None = None
    check_mode: bool = False
    calibration: object = field(default=None, compare=False)   # privcheck.accounting.Calibration | None

    def __post_init__(self):
        s = object.__setattr__
        s(self, "n", val.count("n", self.n))
        if not _is_real(self.m) or not math.isfinite(float(self.m)) or not 0 < float(self.m) <= self.n:
            raise InvalidParameter("m", self.m, f"(0, n] with n = {self.n} (expected batch; q = m/n in (0, 1])")
        s(self, "m", float(self.m) if not isinstance(self.m, numbers.Integral) else int(self.m))
        val.sampling_rate("q", self.m / self.n)
        s(self, "T", val.count("T", self.T))
        if self.arm not in ARMS:
            raise InvalidParameter("arm", self.arm, f"one of {ARMS}")
        relaxed = self.arm == NONPRIVATE_ARM or self.check_mode is True
        if not isinstance(self.check_mode, bool):
            raise InvalidParameter("check_mode", self.check_mode, "a bool")
        sigma = val.nonnegative("sigma", self.sigma)
        if sigma == 0 and not relaxed:
            raise InvalidParameter("sigma", self.sigma, "(0, inf); sigma = 0 only for arm 'nonprivate_reference' "
                                   "or check_mode")
        s(self, "sigma", sigma)
        if _is_real(self.C) and float(self.C) == math.inf:
            if not relaxed or sigma != 0:
                raise InvalidParameter("C", self.C, "(0, inf); C = inf only with sigma = 0 in the non-private arm "
                                       "or check_mode")
            s(self, "C", math.inf)
        else:
            s(self, "C", val.positive("C", self.C))
        s(self, "delta", 1.0 / (10 * self.n) if self.delta is None else val.open_unit("delta", self.delta))
        if self.target_epsilon is not None:
            s(self, "target_epsilon", val.positive("target_epsilon", self.target_epsilon))
        G = val.count("G", self.G, minimum=2)
        s(self, "G", G)
        s(self, "tau", val.positive("tau", self.tau))
        s(self, "top_k", val.count("top_k", self.top_k, minimum=0))
        top_p = val.positive("top_p", self.top_p)
        if top_p > 1:
            raise InvalidParameter("top_p", self.top_p, "(0, 1]")
        s(self, "top_p", top_p)
        s(self, "L_max", val.count("L_max", self.L_max))
        s(self, "max_prompt_len", val.count("max_prompt_len", self.max_prompt_len))
        s(self, "beta", val.nonnegative("beta", self.beta))
        s(self, "c", val.positive("c", self.c))
        s(self, "lora_r", val.count("lora_r", self.lora_r))
        s(self, "lora_alpha", val.positive("lora_alpha", self.lora_alpha))
        ld = val.nonnegative("lora_dropout", self.lora_dropout)
        if ld >= 1:
            raise InvalidParameter("lora_dropout", self.lora_dropout, "[0, 1)")
        s(self, "lora_dropout", ld)
        targets = self.lora_targets
        if isinstance(targets, str) or not all(isinstance(t, str) and t for t in targets) or not targets:
            raise InvalidParameter("lora_targets", targets, "a non-empty sequence of module-name strings")
        s(self, "lora_targets", tuple(targets))
        if not isinstance(self.lora_init, str):
            raise InvalidParameter("lora_init", self.lora_init, "a str")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidParameter("optimizer", self.optimizer, f"one of {OPTIMIZERS}")
        s(self, "lr", val.positive("lr", self.lr))
        betas = tuple(self.betas) if isinstance(self.betas, (tuple, list)) else None
        if betas is None or len(betas) != 2 or not all(_is_real(b) and 0 <= float(b) < 1 for b in betas):
            raise InvalidParameter("betas", self.betas, "a pair (beta1, beta2) in [0, 1)")
        s(self, "betas", tuple(float(b) for b in betas))
        s(self, "eps", val.positive("eps", self.eps))
        s(self, "weight_decay", val.nonnegative("weight_decay", self.weight_decay))
        if self.chunk_size is not None:
            s(self, "chunk_size", val.count("chunk_size", self.chunk_size))
        s(self, "gradient_batch", val.count("gradient_batch", self.gradient_batch))
        if self.rollout_mode not in ROLLOUT_MODES:
            raise InvalidParameter("rollout_mode", self.rollout_mode, f"one of {ROLLOUT_MODES}")
        if self.precision not in PRECISIONS:
            raise InvalidParameter("precision", self.precision, f"one of {PRECISIONS}")
        r = self.randomness
        if not (r == "os_entropy" or (isinstance(r, numbers.Integral) and not isinstance(r, bool) and r >= 0)):
            raise InvalidParameter("randomness", r, "'os_entropy' or a non-negative int seed (seeded mode)")
        rg = self.record_gradient if self.record_gradient is not None else DEFAULT_RECORD_GRADIENTS[self.arm]
        if rg not in RECORD_GRADIENTS:
            raise InvalidParameter("record_gradient", rg, f"one of {RECORD_GRADIENTS}")
        s(self, "record_gradient", rg)
        s(self, "_plan", self._build_plan())

    def _build_plan(self):
        """The privacy plan of the public privacy parameters (None without noise); checks the calibration."""
        from privcheck.accounting import Calibration, DPGRPOPlan

        cal = self.calibration
        if cal is not None and not isinstance(cal, Calibration):
            raise CalibrationMismatch(
                f"calibration must be the privcheck.accounting.Calibration of this configuration's plan (from "
                f"DPGRPOConfig.from_target), not {type(cal).__name__}: a stated epsilon cannot be checked")
        if self.sigma == 0:
            if cal is not None:
                raise CalibrationMismatch("a configuration without noise (sigma = 0) has no privacy plan, so it "
                                          "cannot carry a calibration")
            return None
        if cal is not None and self.target_epsilon is not None and cal.target_epsilon != self.target_epsilon:
            raise CalibrationMismatch(f"calibration was computed for target epsilon {cal.target_epsilon!r}, "
                                      f"but the configuration's target is {self.target_epsilon!r}")
        # The plan refuses a calibration whose event (q, σ, T) or δ differ from its own (CalibrationMismatch).
        return DPGRPOPlan(records=self.n, sampling_rate=self.q, noise_multiplier=self.sigma, clip_norm=self.C,
                          steps=self.T, delta=self.delta, calibration=cal)

    # ------------------------------------------------------------------ derived public values

    @property
    def plan(self):
        """The `privcheck.accounting.DPGRPOPlan` of the privacy parameters; None for σ = 0 (no privacy claim)."""
        return self._plan

    @property
    def q(self) -> float:
        """Sampling rate q = m/n (public)."""
        return self.m / self.n

    @property
    def divisor(self) -> float:
        """The public divisor q·n of line 8 (never the realised batch size)."""
        return self.q * self.n

    @property
    def nonprivate(self) -> bool:
        """True when σ = 0 (non-private arm or check mode): no privacy claim."""
        return self.sigma == 0

    @property
    def seeded(self) -> bool:
        return self.randomness != "os_entropy"

    def training_settings(self) -> dict:
        """The fields the privacy guarantee does not depend on (training and performance settings)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in PRIVACY_FIELDS}

    # ------------------------------------------------------------------ serialisation

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "calibration"}
        d["calibration"] = None if self.calibration is None else _calibration_json(self.calibration)
        return jsonable(d)

    def canonical_json(self) -> str:
        return canonical_json(self.to_json()).decode("utf-8")

    def sha256(self) -> str:
        """sha256 hex digest of the canonical JSON (stable across processes and dict orders)."""
        return hashlib.sha256(canonical_json(self.to_json())).hexdigest()

    # ------------------------------------------------------------------ construction

    def replace(self, *, recalibrate: bool = False, **changes) -> "DPGRPOConfig":
        """A new config with `changes`. A calibration is kept only while it still belongs to the new plan (same
        event and δ); otherwise it is dropped, so ε is recomputed from the new parameters, or, with
        `recalibrate=True`, σ is calibrated again for the (new) target ε. A `calibration` passed explicitly is
        checked like any other."""
        if "calibration" in changes:
            if recalibrate:
                raise InvalidParameter("recalibrate", recalibrate, "False when a calibration is passed")
            return dataclasses.replace(self, **changes)
        if recalibrate:
            if "sigma" in changes:
                raise InvalidParameter("recalibrate", recalibrate, "False when sigma is passed")
            new = dataclasses.replace(self, sigma=self.sigma or 1.0, calibration=None, **changes)
            return type(self).from_target(**{**{f.name: getattr(new, f.name) for f in dataclasses.fields(new)
                                                 if f.name not in ("sigma", "calibration")}})
        new = dataclasses.replace(self, calibration=None, **changes)
        cal = self.calibration
        if cal is not None and new.plan is not None and cal.event == new.plan.event and cal.delta == new.delta \
                and cal.target_epsilon == (new.target_epsilon or cal.target_epsilon):
            return dataclasses.replace(new, calibration=cal)
        return new

    @classmethod
    def from_target(cls, *, n, m, T, target_epsilon, C, delta=None, **kwargs) -> "DPGRPOConfig":
        """σ calibrated for `target_epsilon` at the public (q, T, δ) by `DPGRPOPlan.from_target` (the accountant's
        calibration, never overshooting, cached per configuration), stored at full precision together with its
        `Calibration`."""
        from privcheck.accounting import DPGRPOPlan

        if "sigma" in kwargs or "calibration" in kwargs:
            name = "sigma" if "sigma" in kwargs else "calibration"
            raise InvalidParameter(name, kwargs[name], "not given: from_target calibrates sigma")
        probe = cls(n=n, m=m, T=T, sigma=1.0, C=C, delta=delta, target_epsilon=target_epsilon, **kwargs)
        if probe.arm == NONPRIVATE_ARM:
            raise InvalidParameter("arm", probe.arm, "a private arm (from_target calibrates sigma)")
        if probe.target_epsilon is None:
            raise InvalidParameter("target_epsilon", target_epsilon, "(0, inf)")
        plan = DPGRPOPlan.from_target(records=probe.n, sampling_rate=probe.q, clip_norm=probe.C, steps=probe.T,
                                      delta=probe.delta, target_epsilon=probe.target_epsilon)
        return dataclasses.replace(probe, sigma=plan.noise_multiplier, calibration=plan.calibration)
