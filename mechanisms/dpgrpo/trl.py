"""Prompt-level DP-GRPO inside TRL: `DPGRPOTrainer`, a `trl.GRPOTrainer` whose step is Algorithm 1
(docs/dpgrpo.md; user guide docs/integrations/trl.md).

One step (`DPGRPOTrainer.step`), with the functions of `mechanisms.dpgrpo.core`:

    coins = poisson_coins(n, q, coins_gen)[:len(train_dataset)]  # public n and q, private coins generator
    d = one draw of the private rollout generator
    for i with coins[i]:                                         # one prompt at a time, in index order
        with the RNG forked and seeded derive_seed(d, i):        # (A3), never the caller's RNG
            G completions of prompt i alone (TRL's generation)   # no padding against other prompts
            rewards = Σ_k w_k·reward_func_k, NaN → lo, clamp [lo, hi] (the declared public range)
            A = group_advantages(rewards)                        # eq. (2), this prompt's own group
            ℓ_i = prompt_loss(u, ref, mask, A, β)                # eq. (7): token mean, then mean over G
            S += clip_flat(∇ℓ_i, C)                              # one clip over the flat trainable vector
    ĝ = privatize(S, σ, C, q, n, noise_gen)                      # (S + N(0, σ²C²)) / (q·n), once per step
    ĝ → .grad of the trainable (PEFT) parameters; trainer.optimizer.step(); lr_scheduler.step()

`train()` runs the accounted steps as TRL's loop does: callbacks called, `TrainerControl` honoured (logging,
evaluation, checkpoints, stopping). The generators advance by public amounts per step (n coins, one rollout draw),
so runs on neighbouring datasets with one seed stay coupled at every step (the whole-run checks).

ε is never computed here: the dp_* settings become a `DPGRPOConfig` (`trainer.dp_config`) whose privacy plan
(`privcheck.accounting.DPGRPOPlan`) gives the claim. TRL settings that couple prompts (batch-level loss or reward
normalisation, batch generation servers, entropy masks over the batch, several updates per batch, tools) are
refused with `InvalidParameter` naming the setting, before any model is touched; so are the settings the checks
would refuse after training (dropout > 0, an evaluation without eval_dataset).

TRL is imported at module import: import this module only where the trainer is used.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import numbers
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.config import DPGRPOConfig
from mechanisms.dpgrpo.pipeline.inputs import tensor_sha256
from mechanisms.dpgrpo.randomness import TorchRandomness
from privcheck.artifacts.identity import subject_token
from privcheck.errors import InvalidParameter
from privcheck.interrupts import reraise_if_interrupted
from privcheck.randomness import derive_seed

__all__ = ["ALLOWED_LOSS_TYPES", "ALLOWED_SCALE_REWARDS", "DPGRPOTrainer", "DPGRPOTrainerConfig", "IDENTITY_ARGS",
           "PromptContribution", "dp_config_for", "identity_args"]

ALLOWED_LOSS_TYPES = ("grpo",)            # eq. (7): token mean per completion, mean over the prompt's G
ALLOWED_SCALE_REWARDS = ("group", "none")  # statistics of the prompt's own group only
_UNSUPPORTED_KWARGS = ("tools", "rollout_func", "environment_factory")
# The TRL arguments that change what a step computes (generation, loss, optimizer, schedule, steps, dtype), in
# the run's identity with every dp_* setting; paths, logging, saving and hub settings are left out
# (docs/artifacts.md, "Run identity").
IDENTITY_ARGS = ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "min_p",
                 "repetition_penalty", "generation_kwargs", "chat_template_kwargs", "beta", "loss_type",
                 "scale_rewards", "reward_weights", "multi_objective_aggregation", "num_iterations", "epsilon",
                 "epsilon_high", "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "optim",
                 "optim_args", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_steps", "seed", "bf16",
                 "fp16", "cast_lm_head_to_fp32", "disable_dropout")
ROLLOUT_NAMESPACE = "mechanisms.dpgrpo.trl"    # prompt i's rollout seed at a step: derive_seed(step draw, i)


@dataclass
class DPGRPOTrainerConfig(GRPOConfig):
    """`trl.GRPOConfig` plus the DP settings (`dp_*`: TRL's own `epsilon`/`delta` are PPO clipping ranges).

    `loss_type` defaults to "grpo" (TRL's default "dapo" normalises by the batch's token count and is refused).
    Exactly one of `dp_noise_multiplier` (σ) and `dp_target_epsilon` (σ calibrated by the accountant) is given;
    `dp_delta` defaults to 1/(10n); `dp_num_records` (the public n of the divisor q·n, at least the dataset's
    length) is required: it must not be read from the data; `dp_reward_range` is the declared public range
    rewards are clamped to; `dp_seed`: None for OS-entropy randomness (a privacy release), an int for a
    reproducible run that is not a release."""

    loss_type: str = field(default="grpo", metadata={"help": "only 'grpo' (per-prompt normalisation) is allowed"})
    dp_clip_norm: float | None = field(default=None, metadata={"help": "C: per-prompt clip norm"})
    dp_noise_multiplier: float | None = field(default=None, metadata={"help": "σ (noise std σ·C)"})
    dp_target_epsilon: float | None = field(default=None, metadata={"help": "calibrate σ for this ε"})
    dp_sampling_rate: float | None = field(default=None, metadata={"help": "q: Poisson rate per prompt"})
    dp_delta: float | None = field(default=None, metadata={"help": "δ (default 1/(10n))"})
    dp_steps: int | None = field(default=None, metadata={"help": "T: accounted number of steps"})
    dp_num_records: int | None = field(default=None, metadata={"help": "public n (required)"})
    dp_reward_range: tuple = field(default=(0.0, 1.0), metadata={"help": "public [lo, hi] rewards are clamped to"})
    dp_seed: int | None = field(default=None, metadata={"help": "None: OS entropy (release); int: seeded"})


@dataclass(frozen=True)
class PromptContribution:
    """One prompt's part of a step (private): its clamped rewards, advantages, eq. (7) loss, flat unclipped
    gradient and clipped contribution."""

    rewards: torch.Tensor
    advantages: torch.Tensor
    loss: float
    gradient: torch.Tensor
    clipped: torch.Tensor


def _refuse(name, value, allowed):
    raise InvalidParameter(name, value, allowed)


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _check_trl_settings(args) -> None:
    """Refuse every TRL setting that makes one prompt's contribution depend on other prompts, or that is not
    covered by the accounting (one noisy update per Poisson-sampled batch)."""
    if args.loss_type not in ALLOWED_LOSS_TYPES:
        _refuse("loss_type", args.loss_type, f"one of {ALLOWED_LOSS_TYPES}: 'dapo', 'bnpo', 'dr_grpo', 'cispo', ... "
                "normalise by token counts of the whole batch or differ from eq. (7), so a prompt's gradient would "
                "depend on the other prompts")
    if args.scale_rewards not in ALLOWED_SCALE_REWARDS:
        _refuse("scale_rewards", args.scale_rewards, f"one of {ALLOWED_SCALE_REWARDS}: 'batch' scales advantages "
                "by the standard deviation of the whole batch, coupling prompts")
    if args.multi_objective_aggregation != "sum_then_normalize":
        _refuse("multi_objective_aggregation", args.multi_objective_aggregation,
                "'sum_then_normalize' ('normalize_then_sum' normalises the summed rewards over the batch)")
    checks = (
        ("num_iterations", args.num_iterations, 1, "1 (several updates reuse one sampled batch, not accounted)"),
        ("gradient_accumulation_steps", args.gradient_accumulation_steps, 1,
         "1 (one DP step is one Poisson batch; per-prompt clipping replaces accumulation)"),
        ("use_vllm", args.use_vllm, False, "False (batched generation across prompts breaks record isolation)"),
        ("use_transformers_continuous_batching", args.use_transformers_continuous_batching, False,
         "False (batched generation across prompts breaks record isolation)"),
        ("mask_truncated_completions", args.mask_truncated_completions, False,
         "False (eq. (7) needs at least one token per completion)"),
        ("top_entropy_quantile", args.top_entropy_quantile, 1.0, "1.0 (an entropy quantile over the batch "
         "couples prompts)"),
        ("entropy_coef", args.entropy_coef, 0.0, "0.0 (not part of eq. (7))"),
        ("use_adaptive_entropy", args.use_adaptive_entropy, False, "False (adapts to batch statistics)"),
        ("off_policy_mask_threshold", args.off_policy_mask_threshold, None, "None"),
        ("importance_sampling_level", args.importance_sampling_level, "token", "'token'"),
    )
    for name, value, ok, allowed in checks:
        if value != ok:
            _refuse(name, value, allowed)
    if args.reward_weights is not None and not all(_real(w) for w in args.reward_weights):
        _refuse("reward_weights", args.reward_weights, "None or finite public weights")


def _lora_settings(peft_config) -> dict:
    if peft_config is None:
        return {}
    out = {}
    r, alpha = getattr(peft_config, "r", None), getattr(peft_config, "lora_alpha", None)
    if isinstance(r, int) and r > 0:
        out["lora_r"] = r
    if _real(alpha) and alpha > 0:
        out["lora_alpha"] = float(alpha)
    dropout = getattr(peft_config, "lora_dropout", None)
    if _real(dropout):
        out["lora_dropout"] = float(dropout)
    targets = getattr(peft_config, "target_modules", None)
    if isinstance(targets, str):
        out["lora_targets"] = (targets,)
    elif targets:
        out["lora_targets"] = tuple(sorted(str(t) for t in targets))
    return out


def _check_run_settings(args, model, peft_config, eval_dataset) -> None:
    """Refuse, before training, what the checks would refuse after it: a dropout probability > 0 (LoRA or the
    model's own: random masks break the checks' bit identity) and an evaluation that cannot run."""
    dropout = getattr(peft_config, "lora_dropout", None) if peft_config is not None else None
    if dropout is not None and (not _real(dropout) or dropout != 0):
        _refuse("peft_config.lora_dropout", dropout, "0 (a random dropout mask makes a prompt's gradient differ "
                "between two evaluations; the checks refuse it)")
    if isinstance(model, torch.nn.Module):
        from privcheck.checks.common import DropoutEnabled, assert_no_dropout

        try:
            assert_no_dropout(model)
        except DropoutEnabled as exc:
            _refuse("model", str(exc).rsplit("found: ", 1)[-1], "a model whose every dropout probability is 0 "
                    "(set the config's *dropout / *pdrop fields to 0; the checks refuse dropout)")
    strategy = str(getattr(getattr(args, "eval_strategy", "no"), "value", getattr(args, "eval_strategy", "no")))
    if strategy != "no" and eval_dataset is None:
        _refuse("eval_strategy", strategy, "'no' without an eval_dataset (an evaluation during training needs the "
                "public eval_dataset)")


def dp_config_for(args, train_dataset, peft_config=None) -> DPGRPOConfig:
    """Validate `args` (a `DPGRPOTrainerConfig`) and the dataset and return the public `DPGRPOConfig` of the run
    (its `plan` is the privacy plan). Raises `InvalidParameter` naming the setting on any problem."""
    if not isinstance(args, DPGRPOTrainerConfig):
        _refuse("args", type(args).__name__, "a DPGRPOTrainerConfig (trl.GRPOConfig with the dp_* settings)")
    _check_trl_settings(args)
    if train_dataset is None or not hasattr(train_dataset, "__len__") or not hasattr(train_dataset, "__getitem__"):
        _refuse("train_dataset", type(train_dataset).__name__, "a map-style datasets.Dataset with a 'prompt' column")
    names = getattr(train_dataset, "column_names", None)
    if names is not None and "prompt" not in names:
        _refuse("train_dataset", names, "a dataset with a 'prompt' column")
    # n enters the divisor q·n, δ = 1/(10n) and a calibrated σ: it is the public capacity, fixed before the data
    # is seen, never read from the dataset (whose size is private under add/remove neighbours)
    n = args.dp_num_records
    if isinstance(n, bool) or not isinstance(n, int) or n < max(1, len(train_dataset)):
        _refuse("dp_num_records", n, f"an int >= len(train_dataset) = {len(train_dataset)} (the public number of "
                "records n, fixed before seeing the data; required)")
    q = args.dp_sampling_rate
    if not _real(q) or not 0 < q <= 1:
        _refuse("dp_sampling_rate", q, "a float in (0, 1] (the public Poisson sampling rate q)")
    C = args.dp_clip_norm
    if not _real(C) or C <= 0:
        _refuse("dp_clip_norm", C, "a finite float > 0 (the per-prompt clip norm C)")
    T = args.dp_steps
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        _refuse("dp_steps", T, "a positive int (the accounted number of steps T)")
    if args.max_steps not in (-1, 0, None, T):
        _refuse("max_steps", args.max_steps, f"-1 or dp_steps = {T} (the accounted number of steps)")
    sigma, target = args.dp_noise_multiplier, args.dp_target_epsilon
    if (sigma is None) == (target is None):
        _refuse("dp_noise_multiplier", sigma, "exactly one of dp_noise_multiplier and dp_target_epsilon")
    if sigma is not None and (not _real(sigma) or sigma <= 0):
        _refuse("dp_noise_multiplier", sigma, "a finite float > 0")
    if target is not None and (not _real(target) or target <= 0):
        _refuse("dp_target_epsilon", target, "a finite float > 0")
    delta = args.dp_delta
    if delta is not None and (not _real(delta) or not 0 < delta < 1):
        _refuse("dp_delta", delta, "None or a float in (0, 1)")
    lo_hi = args.dp_reward_range
    if (not isinstance(lo_hi, (tuple, list)) or len(lo_hi) != 2 or not all(_real(x) for x in lo_hi)
            or not lo_hi[0] < lo_hi[1]):
        _refuse("dp_reward_range", lo_hi, "a pair (lo, hi) of finite floats with lo < hi")
    seed = args.dp_seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        _refuse("dp_seed", seed, "None (OS entropy) or a non-negative int")
    m = q * n
    while m / n > q:          # the plan's q = m/n must not exceed the declared q
        m = math.nextafter(m, 0.0)
    common = dict(n=n, m=m, T=T, C=float(C), delta=delta, G=args.num_generations, tau=float(args.temperature),
                  top_k=int(args.top_k or 0), top_p=float(args.top_p), L_max=args.max_completion_length,
                  beta=float(args.beta), lr=float(args.learning_rate),
                  optimizer="sgd" if str(args.optim).endswith("sgd") else "adamw",
                  betas=(float(args.adam_beta1), float(args.adam_beta2)), eps=float(args.adam_epsilon),
                  weight_decay=float(args.weight_decay), randomness="os_entropy" if seed is None else seed,
                  **_lora_settings(peft_config))
    if target is not None:
        return DPGRPOConfig.from_target(target_epsilon=float(target), **common)
    return DPGRPOConfig(sigma=float(sigma), **common)


def _public_args(args) -> dict:
    """The GRPOConfig / DP settings recorded in the artifact (public configuration; no paths or tokens)."""
    keep = ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "beta", "learning_rate",
            "lr_scheduler_type", "warmup_steps", "optim", "weight_decay", "adam_beta1", "adam_beta2",
            "adam_epsilon", "loss_type", "scale_rewards", "reward_weights", "seed", "bf16", "fp16")
    out = {k: getattr(args, k, None) for k in keep}
    out.update({f.name: getattr(args, f.name) for f in dataclasses.fields(DPGRPOTrainerConfig)
                if f.name.startswith("dp_")})
    return {k: (v if isinstance(v, (int, float, str, bool, list, tuple, type(None))) else str(v))
            for k, v in out.items()}


@contextlib.contextmanager
def _forked_rng(seed: int, device):
    """The framework RNG (CPU, and the trainer's CUDA device) forked and seeded with `seed`; restored on exit."""
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _pristine(obj, trainer):
    """A copy of `obj` (a reward function or a callback, or a list of them) as it is now, its references to
    `trainer` kept; `obj` itself when it cannot be copied (then check runs share its state)."""
    if isinstance(obj, (str, type)) or obj is None:
        return obj
    try:
        return copy.deepcopy(obj, {id(trainer): trainer})
    except Exception as exc:  # noqa: BLE001 - an object that refuses copying is shared, as the user passed it
        reraise_if_interrupted(exc)
        return obj


def _copy_for(obj, memo):
    try:
        return copy.deepcopy(obj, dict(memo))
    except Exception as exc:  # noqa: BLE001 - as in `_pristine`
        reraise_if_interrupted(exc)
        return obj


def identity_args(args) -> dict:
    """The arguments of `args` in the run's identity: `IDENTITY_ARGS` and every dp_* setting."""
    out = {k: getattr(args, k, None) for k in IDENTITY_ARGS}
    out.update({f.name: getattr(args, f.name) for f in dataclasses.fields(DPGRPOTrainerConfig)
                if f.name.startswith("dp_")})
    return out


def _verification_block(binding) -> dict:
    """The artifact's `verification` entry from the bound evidence: "pass" when at least one check ran and every
    check that ran passed (skipped checks are listed, never counted as passed), grouped by precision."""
    if binding.evidence is None:
        return {"status": "skipped", "reason": "no verification results given to save_run_artifact", "float64": [],
                "preflight": {"float32": [], "bfloat16": []}}
    from privcheck.serialization import jsonable

    checks = [r.to_json() for r in binding.evidence.results]
    ran = [c for c in checks if c["status"] != "skipped"]
    status = "pass" if ran and all(c["status"] == "pass" for c in ran) else "fail"
    groups = {"float64": [], "float32": [], "bfloat16": []}
    for c in checks:
        groups.setdefault(c.get("precision") or "float64", []).append(c)
    return {"status": status, "suite": "trl", "float64": jsonable(groups.pop("float64")),
            "preflight": jsonable(groups)}


class DPGRPOTrainer(GRPOTrainer):
    """A `trl.GRPOTrainer` running prompt-level DP-GRPO (module docstring). Same constructor as GRPOTrainer
    (args must be a `DPGRPOTrainerConfig`); `train()` runs the accounted `dp_steps` steps of `step()`.

    Public facts: `dp_config` (public configuration; `dp_config.plan` the privacy plan), `privacy_claim`,
    `privacy_release`, `public_telemetry` (per step: t, lr, ‖ĝ‖, ‖Δθ‖, skipped). Private, in memory only:
    `private_telemetry`, `last_sampled` (dataset indices of the last batch), `last_contributions`."""

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None, optimizers=(None, None),
                 peft_config=None, **kwargs):
        for name in _UNSUPPORTED_KWARGS:
            if kwargs.get(name) is not None:
                _refuse(name, kwargs[name], "None (tool calls, custom rollouts and environments are not covered "
                        "by the per-prompt isolation of this trainer)")
        unknown = sorted(k for k in kwargs if k not in _UNSUPPORTED_KWARGS + ("quantization_config",))
        if unknown:
            _refuse(unknown[0], kwargs[unknown[0]], "a trl.GRPOTrainer argument")
        if tuple(optimizers) != (None, None):
            _refuse("optimizers", optimizers, "(None, None): the optimizer and schedule come from args (optim, "
                    "learning_rate, lr_scheduler_type, ...), so the checks' fresh copies run the same update")
        self.dp_config = dp_config_for(args, train_dataset, peft_config)   # every refusal before any work
        _check_run_settings(args, model, peft_config, eval_dataset)
        lo, hi = args.dp_reward_range
        self.dp_reward_range = (float(lo), float(hi))
        # the initial (pre-TRL) model, reward functions and callbacks, for fresh seeded runs of the checks
        # (`fresh_copy`): copies of their state before training, so that every check run starts where this one did
        self._init_parts = dict(model=copy.deepcopy(model), reward_funcs=_pristine(reward_funcs, self), args=args,
                                eval_dataset=eval_dataset, processing_class=processing_class,
                                reward_processing_classes=reward_processing_classes,
                                peft_config=peft_config, **{k: v for k, v in kwargs.items() if v is not None})
        self._init_callbacks = [_pristine(cb, self) for cb in (callbacks or [])]    # given to the constructor
        self._added_callbacks: list = []                                          # add_callback afterwards
        self._stop_after: int | None = None      # check mode only (`fresh_copy(run_steps=...)`)
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, processing_class=processing_class,
                         reward_processing_classes=reward_processing_classes, callbacks=callbacks,
                         peft_config=peft_config,
                         **{k: v for k, v in kwargs.items() if v is not None})
        if not isinstance(model, torch.nn.Module):      # a model name: loaded by TRL, checked once loaded
            _check_run_settings(args, self.model, None, eval_dataset)
        self.space = core.ParamSpace(self.model)
        self.private_parameters = self.space.names
        trainable = set(self.space.names)
        named = list(self.model.named_parameters())
        self._init_hashes = {"lora": tensor_sha256([(k, t) for k, t in named if k in trainable]),
                             "base": tensor_sha256([(k, t) for k, t in named if k not in trainable])}
        self.evaluation_curve: list[dict] = []
        self.randomness = TorchRandomness.from_mode(self.dp_config.randomness, self.space.params[0].device)
        self.create_optimizer_and_scheduler(num_training_steps=self.dp_config.T)
        self.t = 0
        self.public_telemetry: list[dict] = []
        self.private_telemetry: list[dict] = []
        self.last_sampled: list[int] = []
        self.last_contributions: dict[int, PromptContribution] = {}
        self._update_hooks: list = []
        self._constructed = True

    # ------------------------------------------------------------------ public facts

    @property
    def plan(self):
        return self.dp_config.plan

    @property
    def divisor(self) -> float:
        """The public divisor q·n (never the realised batch size)."""
        return self.dp_config.divisor

    @property
    def privacy_release(self) -> bool:
        return self.randomness.privacy_release

    @property
    def release_blockers(self) -> list[str]:
        return [] if self.randomness.privacy_release else [self.randomness.reason]

    @property
    def privacy_claim(self) -> dict:
        """The plan's parameters and ε (`plan.claim()`, computed by privcheck's accountant from the plan's event)."""
        claim = self.plan.claim()
        return {"unit": "prompt_group", "neighboring": claim["neighboring"], "n": self.plan.records,
                "q": self.plan.sampling_rate, "sigma": self.plan.noise_multiplier, "T": self.plan.steps,
                "delta": self.plan.delta, "C": self.plan.clip_norm, "divisor": self.plan.divisor,
                "epsilon": claim["epsilon"], "accountant": claim["accountant"], "event": claim["event"],
                "target_epsilon": claim["target_epsilon"]}

    # ------------------------------------------------------------------ Algorithm 1 pieces

    def sample_coins(self, n: int | None = None, q: float | None = None) -> torch.Tensor:
        """Bernoulli(q) coins for every dataset index from the private coins generator (line 2). By default the
        coins of all public n slots are drawn and the dataset's prefix returned: the generator advances by the
        public n every step, whatever the dataset's size."""
        q = self.dp_config.q if q is None else q
        if n is None:
            return core.poisson_coins(self.dp_config.n, q, self.randomness.coins)[:len(self.train_dataset)]
        if n == 0:                # nothing to draw
            return torch.zeros(0, dtype=torch.bool)
        return core.poisson_coins(n, q, self.randomness.coins)

    def clip(self, v, C: float | None = None) -> torch.Tensor:
        return core.clip_flat(v, self.dp_config.C if C is None else C)

    def privatize(self, S, *, sigma=None, C=None, q=None, n=None) -> torch.Tensor:
        """(S + N(0, σ²C²)) / (q·n) with the private noise generator (line 8); defaults: the run's σ, C, q, n.
        An explicit `sigma=0` (no noise: S/(q·n)) is accepted only by a seeded trainer, for the checks; the run's
        own σ is always > 0."""
        cfg = self.dp_config
        sigma = cfg.sigma if sigma is None else sigma
        nonprivate = sigma == 0 and not self.privacy_release      # check mode only; a release refuses σ = 0
        return core.privatize(S, sigma, cfg.C if C is None else C, cfg.q if q is None else q,
                              cfg.n if n is None else n, self.randomness.noise, nonprivate=nonprivate)

    def clipped_sum(self, clipped) -> torch.Tensor:
        """Line 7's sum S = Σ_i clip_C(g_i) of the given clipped contributions, in order, in the dtype of the
        trainable parameters (what `step()` adds up)."""
        S = torch.zeros(self.space.dim, dtype=self.space.params[0].dtype, device=self.space.params[0].device)
        for c in clipped:
            S = S + c
        return S

    def noisy_update(self, clipped, **overrides) -> torch.Tensor:
        """ĝ = privatize(clipped_sum(clipped)) (lines 7–8, as `step()` forms it); `overrides` (sigma, C, q, n) are
        those of `privatize`."""
        return self.privatize(self.clipped_sum(clipped), **overrides)

    def add_update_hook(self, fn) -> None:
        """`fn(ĝ) -> ĝ'` applied to the noisy update right after `privatize` (used by the whole-step checks)."""
        if not callable(fn):
            _refuse("fn", fn, "a callable (g_hat) -> g_hat")
        self._update_hooks.append(fn)

    def _rewards(self, row, prompt, completions, completion_ids) -> torch.Tensor:
        G = len(completions)
        per_func = self._calculate_rewards([dict(row) for _ in range(G)], [prompt] * G, completions,
                                           completion_ids)
        w = self.reward_weights.to(per_func.device, per_func.dtype)
        r = (per_func * w.unsqueeze(0)).nansum(dim=1).to(torch.float64)
        lo, hi = self.dp_reward_range
        # fixed public rules: an unscorable or non-finite reward is lo; every reward is clamped to [lo, hi]
        bad = torch.isnan(per_func).all(dim=1) | ~torch.isfinite(r)
        r = torch.where(bad, torch.full_like(r, lo), r)
        self._pending_metrics.clear()      # reward functions' own logs are private: never released
        return r.clamp(lo, hi)

    def advantages(self, rewards) -> torch.Tensor:
        """Advantages of one prompt's group from its own G rewards: eq. (2) (`scale_rewards="group"`), or the
        group mean removed (`"none"`); a constant group gives exactly 0."""
        if self.scale_rewards == "group":
            return core.group_advantages(rewards)
        if bool((rewards == rewards[0]).all()):
            return torch.zeros_like(rewards)
        return rewards - rewards.mean()

    def prompt_loss(self, logp, ref_logp, mask, advantages, beta) -> torch.Tensor:
        """The per-prompt loss of eq. (7) (`core.prompt_loss`: token mean per completion, mean over the G)."""
        return core.prompt_loss(logp, ref_logp, mask, advantages, beta)

    def token_logprobs(self, model, prompt_ids, completion_ids, completion_mask=None) -> torch.Tensor:
        """The [G, L] log-probabilities of `completion_ids` (G × L) after `prompt_ids` ([P], or [G, P]) under
        `model`: the function `prompt_contribution` computes the policy's log-probabilities with for eq. (7)
        (TRL's `_get_per_token_logps_and_entropies`: the fused LM head, logits divided by `args.temperature`).
        `completion_mask` (G × L, default all ones) is the attention over the right-padded completions.
        Differentiable (V1 `loss_reference` compares it with log_softmax of the temperature-1 logits)."""
        G, L = completion_ids.shape
        if prompt_ids.dim() == 1:
            prompt_ids = prompt_ids.unsqueeze(0).expand(G, -1)
        mask = torch.ones_like(completion_ids) if completion_mask is None else completion_mask
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention = torch.cat([torch.ones_like(prompt_ids), mask.to(prompt_ids.dtype)], dim=1)
        return self._get_per_token_logps_and_entropies(model, input_ids, attention, L)[0]

    def prompt_contribution(self, row, *, rewards=None) -> PromptContribution:
        """Lines 4–7 for one dataset row alone: G completions, rewards, eq. (2) advantages, eq. (7) loss, one
        backward, one clip. Draws rollout randomness from the global torch RNG (the callers fork and seed it).
        `rewards` (checks only; `step()` never passes it): the G rewards to use instead of `reward_funcs`."""
        prompt = row["prompt"]
        G = self.num_generations
        prompt_ids = self._tokenize_prompts([prompt])[0][0]
        completion_ids, _ = self._generate_single_turn([prompt_ids] * G, None, {}, G)
        if self._is_vlm or isinstance(prompt, list):
            texts = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
            completions = [[{"role": "assistant", "content": t}] for t in texts]
        else:
            completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        if rewards is None:
            rewards = self._rewards(row, prompt, completions, completion_ids)
        else:
            rewards = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
            if rewards.numel() != G:
                _refuse("rewards", rewards.tolist(), f"None or {G} rewards (one per completion)")
        adv = self.advantages(rewards)
        device = self.space.params[0].device
        pad_id = self._tokenizer.pad_token_id
        L = max(len(c) for c in completion_ids)
        comp = torch.full((G, L), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((G, L), dtype=torch.long, device=device)
        for g, ids in enumerate(completion_ids):
            comp[g, :len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
            mask[g, :len(ids)] = 1
        prompt_t = torch.tensor(prompt_ids, dtype=torch.long, device=device).unsqueeze(0).expand(G, -1)
        input_ids = torch.cat([prompt_t, comp], dim=1)
        attention = torch.cat([torch.ones_like(prompt_t), mask], dim=1)
        ref = torch.zeros((G, L), dtype=torch.float32, device=device)
        if self.beta != 0.0:
            with torch.no_grad():
                ref = self._reference_logps(input_ids, attention, L)
        self.space.zero_grad()
        logp = self.token_logprobs(self.model, prompt_t, comp, mask)
        loss = self.prompt_loss(logp, ref.to(logp.dtype), mask, adv, self.beta)
        loss.backward()
        grad = core.flatten_grads(self.space)
        self.space.zero_grad()
        return PromptContribution(rewards=rewards, advantages=adv, loss=float(loss.detach()), gradient=grad,
                                  clipped=self.clip(grad))

    def _reference_logps(self, input_ids, attention, L):
        if self.ref_model is not None:
            return self._get_per_token_logps_and_entropies(self.ref_model, input_ids, attention, L)[0]
        from trl.trainer.utils import use_adapter

        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self._get_per_token_logps_and_entropies(self.model, input_ids, attention, L)[0]

    def step(self) -> dict:
        """One DP-GRPO step (module docstring); returns its public telemetry entry."""
        cfg = self.dp_config
        if self.t >= cfg.T:
            _refuse("dp_steps", cfg.T, f"more than the {self.t} steps run (never more steps than accounted)")
        # coins for all n public slots, the dataset's prefix used, and one rollout draw per step with a seed per
        # dataset index: the generators advance by public amounts, so that two runs on neighbouring datasets stay
        # coupled at every step (the whole-run checks), and a prompt's rollouts depend on (step, index) only
        coins = self.sample_coins()
        batch = [i for i in range(len(coins)) if bool(coins[i])]
        self.last_sampled = batch          # from here on: an optimizer hook of this step sees this step's batch
        base = self.randomness.rollout_draw()
        contribs: dict[int, PromptContribution] = {}
        for i in batch:
            with _forked_rng(derive_seed(base, f"prompt/{i}", ROLLOUT_NAMESPACE), self.space.params[0].device):
                contribs[i] = self.prompt_contribution(self.train_dataset[i])
        g_hat = self.noisy_update([c.clipped for c in contribs.values()])
        for hook in self._update_hooks:
            g_hat = hook(g_hat)
        before = [p.detach().clone() for p in self.space.params]
        applied = bool(torch.isfinite(g_hat).all())
        if applied:                       # a non-finite ĝ skips the step (fixed rule, public)
            core.unflatten_into(g_hat, self.space)
            if self.is_in_train:
                self.control = self.callback_handler.on_pre_optimizer_step(self.args, self.state, self.control)
            self.optimizer.step()
            if self.is_in_train:
                self.control = self.callback_handler.on_optimizer_step(self.args, self.state, self.control)
        self.lr_scheduler.step()
        self.space.zero_grad()
        self.t += 1
        self.state.global_step = self.t
        entry = core.public_step_entry(self.t, self.optimizer, self.space.params, before, g_hat, applied)
        self.public_telemetry.append(entry)
        self.last_contributions = contribs
        rewards = [float(x) for c in contribs.values() for x in c.rewards]
        self.private_telemetry.append({
            "t": self.t, "batch_size": len(batch), "reward_mean": sum(rewards) / len(rewards) if rewards else None,
            "pre_clip_norms": [float(torch.linalg.vector_norm(c.gradient.double())) for c in contribs.values()],
            "losses": [c.loss for c in contribs.values()]})
        return entry

    def add_callback(self, callback):
        """TRL's `add_callback`; the callback's state now is also what the checks' fresh copies start from."""
        if getattr(self, "_constructed", False):     # TRL's own callbacks (added in __init__) are TRL's to add
            self._added_callbacks.append(_pristine(callback, self))
        return super().add_callback(callback)

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """Run the remaining accounted steps (`dp_steps` in all) as TRL's loop runs its steps: the callbacks'
        on_train_begin, on_epoch_begin/end (one epoch), on_step_begin, on_pre_optimizer_step/on_optimizer_step,
        on_step_end, on_log, on_evaluate, on_save and on_train_end, with their
        `TrainerControl` honoured (should_log: `log()` of the step's public telemetry; should_evaluate:
        `evaluate_public()`; should_save: TRL's checkpoint; should_training_stop: stop). Returns the public
        telemetry of this call."""
        if resume_from_checkpoint is not None or trial is not None:
            _refuse("resume_from_checkpoint", resume_from_checkpoint, "None (resuming is not supported)")
        start, T = self.t, self.dp_config.T
        last = T if self._stop_after is None else min(T, self._stop_after)
        if self.eval_dataset is not None and not self.evaluation_curve:
            self.evaluation_curve.append({"t": self.t, "accuracy": self.evaluate_public()})
        self.state.max_steps = T
        self.state.compute_steps(self.args, T)
        self.state.is_world_process_zero = self.is_world_process_zero()
        handler = self.callback_handler
        handler.model, handler.optimizer, handler.lr_scheduler = self.model, self.optimizer, self.lr_scheduler
        self.is_in_train = True
        try:
            self.control = handler.on_train_begin(self.args, self.state, self.control)
            self.control = handler.on_epoch_begin(self.args, self.state, self.control)   # the run is one "epoch"
            entry = self.public_telemetry[-1] if self.public_telemetry else None
            while self.t < last and not self.control.should_training_stop:
                self.control = handler.on_step_begin(self.args, self.state, self.control)
                entry = self.step()
                self.control = handler.on_step_end(self.args, self.state, self.control)
                self._log_evaluate_save(entry)
            self.control = handler.on_epoch_end(self.args, self.state, self.control)
            self._log_evaluate_save(entry)
            if self.eval_dataset is not None and self.evaluation_curve[-1]["t"] != self.t:
                self._evaluate_point()
            self.control = handler.on_train_end(self.args, self.state, self.control)
        finally:
            self.is_in_train = False
        return self.public_telemetry[start:]

    def _log_evaluate_save(self, entry) -> None:
        """What TRL's `_maybe_log_save_evaluate` does on the control's flags, with this trainer's public values."""
        handler = self.callback_handler
        if self.control.should_log and entry is not None and (not self.state.log_history or
                                                              self.state.log_history[-1].get("t") != entry["t"]):
            self.log(dict(entry))
        self.control.should_log = False
        if self.control.should_evaluate:
            metrics = {"eval_public_accuracy": self._evaluate_point()}
            self.log(dict(metrics))
            self.control = handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        if self.control.should_save:
            self._save_checkpoint(self.model, None)
            self.control = handler.on_save(self.args, self.state, self.control)

    def _evaluate_point(self) -> float:
        if self.evaluation_curve and self.evaluation_curve[-1]["t"] == self.t:
            return self.evaluation_curve[-1]["accuracy"]
        self.evaluation_curve.append({"t": self.t, "accuracy": self.evaluate_public()})
        return self.evaluation_curve[-1]["accuracy"]

    def evaluate_public(self) -> float:
        """Mean reward on the public `eval_dataset`, normalised to [0, 1] by `dp_reward_range` (the sampled
        accuracy for 0/1 rewards): num_generations samples per prompt under the public seed `args.seed`."""
        if self.eval_dataset is None or len(self.eval_dataset) == 0:
            _refuse("eval_dataset", self.eval_dataset, "a non-empty dataset of public prompts")
        lo, hi = self.dp_reward_range
        total, count = 0.0, 0
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(self.args.seed)
            for k in range(len(self.eval_dataset)):
                row = self.eval_dataset[k]
                prompt_ids = self._tokenize_prompts([row["prompt"]])[0][0]
                ids, _ = self._generate_single_turn([prompt_ids] * self.num_generations, None, {},
                                                    self.num_generations)
                texts = self.processing_class.batch_decode(ids, skip_special_tokens=True)
                if isinstance(row["prompt"], list):
                    texts = [[{"role": "assistant", "content": t}] for t in texts]
                r = self._rewards(row, row["prompt"], texts, ids)
                total += float(((r - lo) / (hi - lo)).sum())
                count += r.numel()
        return min(1.0, max(0.0, total / count))

    def save_run_artifact(self, out, *, verification=None) -> dict:
        """Write the run artifact of `privcheck run dp-grpo` (`privcheck.dpgrpo.run/1`, docs/dpgrpo.md) to the
        directory `out`: run-dp_grpo-REPLICATE.json, the private telemetry (private/, 0700/0600) and the trainable
        weights (safetensors). Needs `eval_dataset` (public prompts, evaluated by `train()` before and after).

        `verification`: the results of `run_suite(self.privcheck_bindings(...))` (a list, a name -> result
        mapping or a `VerificationEvidence`), else recorded as skipped. Results of another trainer, configuration
        or plan (`ForeignVerification`), of another privcheck version or of this trainer before a change
        (`StaleVerification`), or without an identity (`UnboundVerification`) are refused, naming each mismatched
        field with both values, before anything is written; a partial or failing suite is recorded with
        `privacy_release: false` and the reason (docs/artifacts.md, "Run identity")."""
        import json
        import types
        import uuid

        from safetensors.torch import save

        from mechanisms.dpgrpo.pipeline.artifact import (
            RUN_SCHEMA,
            RUN_SCHEMA_ID,
            assumptions_block,
            environment_block,
            privacy_block,
        )
        from mechanisms.dpgrpo.pipeline.inputs import sha256_bytes, verifier_sha256
        from privcheck.artifacts import ArtifactDirectory
        from privcheck.artifacts.identity import bind_verification
        from privcheck.checks.catalogue import CHECKS
        from privcheck.serialization import jsonable, utc_now

        # refused before anything is written: evidence that is not this run's
        binding = bind_verification(self.privcheck_identity(), verification, required=tuple(CHECKS),
                                    token=subject_token(self))
        if len(self.evaluation_curve) < 2:
            _refuse("eval_dataset", self.eval_dataset, "public prompts, evaluated by train() before and after "
                    "training (the artifact's evaluation)")
        cfg = self.dp_config
        label = "release" if cfg.randomness == "os_entropy" else f"seed{cfg.randomness}"
        status = "complete" if self.t == cfg.T else "incomplete"
        ver = _verification_block(binding)
        blockers = list(self.release_blockers)
        if status != "complete":
            blockers.append(f"incomplete: {self.t} of {cfg.T} steps")
        blockers += binding.blockers()
        if binding.evidence is not None and ver["status"] != "pass" and not binding.failed:
            blockers.append("verification suite did not pass: no check ran")
        shim = types.SimpleNamespace(sigma_bracket=None, sigma_source=None, tuning_on_private_data="unknown",
                                     tuning_note="settings chosen by the TRL user; privcheck cannot tell whether "
                                                 "they were tuned on private data")
        privacy = privacy_block(self.plan, shim, target_epsilon=cfg.target_epsilon)
        privacy["assumptions"] = assumptions_block(types.SimpleNamespace(rollout_backend=None,
                                                                         randomness=self.randomness))
        tok = getattr(self._tokenizer, "backend_tokenizer", None)
        tok_text = tok.to_str() if tok is not None else repr(sorted(self._tokenizer.get_vocab().items()))
        funcs = [f for f in self.reward_funcs if callable(f) and not isinstance(f, torch.nn.Module)]
        name = getattr(self.model.config, "_name_or_path", "") or ""
        public_inputs = {
            "preset": {"source": "trl", "trainer": type(self).__name__, "trl_args": _public_args(self.args)},
            "preset_name": "trl", "reduced": False,
            "base_model": {"kind": "local" if name else "config", "name_or_path": name,
                           "sha256": self._init_hashes["base"]},
            "tokenizer_sha256": sha256_bytes(tok_text.encode()),
            "lora_init": "the trainable parameters at construction (TRL/PEFT initialisation under args.seed)",
            "lora_init_sha256": self._init_hashes["lora"], "param_layout_sha256": self.space.layout_sha256,
            "trainable_parameters": self.space.dim, "trainable_tensors": len(self.space),
            "verifier": ", ".join(self.reward_func_names),
            "verifier_sha256": sha256_bytes("".join(verifier_sha256(f) for f in funcs).encode()),
            "public_pretraining": {"steps": 0}, "slot_universe": {"n": cfg.n, "content": "private (not recorded)"},
            "rollout_mode": {"requested": "isolated", "used": "isolated",
                             "note": "TRL generation of one prompt at a time (no cross-prompt padding)"}}
        evaluation = {"set": "public", "metric": "sampled_accuracy", "prompts": len(self.eval_dataset),
                      "samples_per_prompt": self.num_generations, "tau": cfg.tau,
                      "note": "mean reward normalised to [0, 1] by dp_reward_range (the accuracy for 0/1 rewards)",
                      "before": self.evaluation_curve[0]["accuracy"], "after": self.evaluation_curve[-1]["accuracy"],
                      "curve": list(self.evaluation_curve)}
        private_bytes = "".join(json.dumps(jsonable(e), sort_keys=True, allow_nan=False) + "\n"
                                for e in self.private_telemetry).encode()
        weights = save({k: t.detach().to("cpu").contiguous()
                        for k, t in zip(self.space.names, self.space.params)})
        stem, priv_rel, weights_rel = f"run-dp_grpo-{label}", f"private/run-dp_grpo-{label}.jsonl", \
            f"lora-dp_grpo-{label}.safetensors"
        doc = {"schema": RUN_SCHEMA_ID, "run_id": uuid.uuid4().hex, "created_utc": utc_now(), "status": status,
               "stop_reason": None if status == "complete" else f"stopped after {self.t} of {cfg.T} steps",
               "arm": "dp_grpo", "replicate": label,
               "privacy_release": bool(self.privacy_release and status == "complete" and ver["status"] == "pass"
                                       and binding.complete),
               "release_blockers": blockers, "config": {**cfg.to_json(), "sha256": cfg.sha256()},
               "public_inputs": public_inputs, "privacy": privacy, "public_telemetry": list(self.public_telemetry),
               "private_telemetry_ref": {"path": priv_rel, "sha256": sha256_bytes(private_bytes), "mode": "0600"},
               "released_weights": {"path": weights_rel, "sha256": sha256_bytes(weights),
                                    "format": "safetensors (trainable parameters only)"},
               "evaluation": evaluation,
               "timing": {"covered_by_guarantee": False, "total_s": 0.0, "median_round_s": None,
                          "private_over_nonprivate": None, "note": "not measured by the TRL trainer"},
               "environment": environment_block(types.SimpleNamespace(device=self.space.params[0].device.type),
                                                self, torch.are_deterministic_algorithms_enabled()),
               "verification": ver, "identity": binding.to_json(), "randomness": self.randomness.to_json()}
        with ArtifactDirectory(out) as staging:
            staging.mkdir("private", mode=0o700)
            staging.write_bytes(priv_rel, private_bytes, mode=0o600)
            staging.write_bytes(weights_rel, weights)
            return staging.write_json(f"{stem}.json", jsonable(doc), schema=RUN_SCHEMA)

    # ------------------------------------------------------------------ checks

    def fresh_copy(self, train_dataset, seed: int | None, *, run_steps: int | None = None,
                   **settings) -> "DPGRPOTrainer":
        """A new trainer of this class from the same initial model, reward functions, callbacks (copies of their
        state at construction, or when added) and settings on `train_dataset`, with the same public n and σ,
        seeded with `seed` (not a privacy release; None: OS entropy); used by the checks. `settings`: args
        fields to change (check mode: dp_sampling_rate, output_dir, logging_steps, save_steps, report_to, ...);
        `run_steps`: its `train()` stops after that many steps (the plan and the schedule keep dp_steps)."""
        parts = dict(self._init_parts)
        memo = {id(self): self}
        parts["model"] = copy.deepcopy(parts["model"])
        parts["reward_funcs"] = _pristine(parts["reward_funcs"], self)
        args = copy.copy(parts["args"])     # not dataclasses.replace: GRPOConfig's post-init is not idempotent
        unknown = sorted(k for k in settings if not hasattr(args, k))
        if unknown:
            _refuse(unknown[0], settings[unknown[0]], "a DPGRPOTrainerConfig field")
        for k, v in settings.items():
            setattr(args, k, v)
        args.dp_seed, args.dp_num_records = seed, self.dp_config.n
        args.dp_noise_multiplier, args.dp_target_epsilon = self.dp_config.sigma, None
        parts["args"] = args
        if run_steps is not None and (isinstance(run_steps, bool) or not isinstance(run_steps, int) or run_steps < 1):
            _refuse("run_steps", run_steps, "None or a positive int")
        parts["callbacks"] = [cb if isinstance(cb, type) else _copy_for(cb, memo) for cb in self._init_callbacks]
        out = type(self)(train_dataset=train_dataset, **parts)
        memo[id(self)] = out          # a callback holding this trainer holds the copy in the copy
        for cb in self._added_callbacks:
            out.add_callback(cb if isinstance(cb, type) else _copy_for(cb, memo))
        out._stop_after = run_steps
        return out

    def privcheck_identity(self):
        """The run's `RunIdentity` (docs/artifacts.md, "Run identity"): this class, the plan, the public
        configuration (`{"dp": dp_config.to_json(), "args": identity_args(args)}`), the initial model's
        architecture and the PEFT configuration."""
        from mechanisms.dpgrpo.identity import model_json, peft_json, qualified_name
        from privcheck.artifacts.identity import RunIdentity

        return RunIdentity(trainer=qualified_name(self), plan=self.plan.to_json(),
                           config={"dp": self.dp_config.to_json(), "args": identity_args(self.args)},
                           model=model_json(self._init_parts["model"]), peft=peft_json(self.model))

    def privcheck_bindings(self, **options):
        """`privcheck.integrations.trl.bindings_for(self, **options)`: the checks' bindings for this trainer, whose
        `subject` is this trainer's identity, so the results of `run_suite` carry it. Declared check mode: the
        checks draw their randomness from seeds (each check item's, and the fresh copies' `dp_seed`)."""
        import dataclasses as dc

        from privcheck.artifacts.identity import Difference, Subject
        from privcheck.integrations.trl import bindings_for

        seeded = Difference("config.dp.randomness", self.dp_config.randomness,
                            "seeded per check (check items and fresh copies)")
        subject = Subject(self.privcheck_identity(), (seeded,), subject_token(self))
        return dc.replace(bindings_for(self, **options), subject=subject)
