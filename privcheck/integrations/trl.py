"""privcheck for TRL: `bindings_for(trainer)` binds the checks to a `trl.GRPOTrainer` (docs/integrations/trl.md).

```python
bindings = bindings_for(trainer)          # or trainer.privcheck_bindings() on a DP trainer
results = run_suite(bindings)
```

Two kinds of trainer are recognised:

- a **DP GRPO trainer** (duck-typed: it has `dp_config`, `prompt_contribution`, `fresh_copy`, `add_update_hook`,
  `sample_coins`, `clip`, `privatize`, `step`, `last_sampled`, `last_contributions`, `private_parameters`,
  `privacy_claim` — the protocol of `DPGRPOTrainer` in `mechanisms.dpgrpo.trl`): record isolation through the
  trainer's own per-prompt path, the whole-step checks on fresh seeded copies driving `trainer.step` itself, the
  whole-run checks on fresh seeded copies driving the copy's `train()` (TRL's loop with the user's callbacks,
  logging and checkpoints, in the check's working directory), both in the check mode `check_mode_for` derives
  from the real trainer (every difference recorded as {field: {"real", "checked"}}), the
  sampler, clip and noise of the trainer, the accountant fields from its privacy plan, and V3, V9, V1 and V7
  through its `clipped_sum`, `noisy_update`, `advantages`, `prompt_loss` and `token_logprobs` (with
  `GradientItem` synthetic records); the checks that do not apply (chunk_identity, nonprivate_equivalence; V7 at
  β = 0) are declared in `SuiteBindings.not_applicable` and reported skipped with the reason;
- any other **plain `GRPOTrainer`**: record isolation through TRL's batched path (`_generate_and_score_completions`
  on the batch, then `compute_loss` with only one prompt's rows in the loss mask), so the coupling of prompts by
  padding and batch statistics is visible; nothing else is bound (it adds no noise and has no accountant).

A record is a `PromptItem`: a dataset row and the seed of its rollout randomness (so evaluating it twice is
bit-identical). TRL and torch are imported inside the functions; importing this module needs neither.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from privcheck.errors import InvalidParameter

__all__ = ["CHECK_Q", "CHECK_RECORDS", "CHECK_STEPS", "DP_PROTOCOL", "CheckMode", "GradientItem", "PromptItem",
           "bindings_for", "check_mode_for", "default_perturb", "is_dp_trainer", "precision_of"]

CHECK_RECORDS = 3        # default number of the dataset's rows the checks use (items, whole-step D)
CHECK_Q = 0.5            # check-mode q: max(q, CHECK_Q), so that every coverage case occurs in a few trials
CHECK_STEPS = 3          # steps of a check-mode whole run (the plan and the schedule keep the real dp_steps)
RUN_MISS = 1e-3          # whole runs per neighbouring pair: enough that the differing record is sampled in one
                         # of their steps but with probability < RUN_MISS ((1 − q)^(steps·runs) ≤ RUN_MISS)
SAMPLING_RUNS = 40       # whole runs of run_poisson_sampling (CHECK_STEPS rounds each)
ITEM_SEED = 7919         # rollout seed of the k-th check item: ITEM_SEED + k (public, check mode only)
DP_PROTOCOL = ("dp_config", "prompt_contribution", "fresh_copy", "add_update_hook", "sample_coins", "clip",
               "privatize", "step", "last_sampled", "last_contributions", "private_parameters", "privacy_claim")


@dataclass(frozen=True)
class PromptItem:
    """One privacy record of the checks: a dataset row (with its "prompt") and its rollout seed; `rewards`, when
    set, replaces the reward functions' G rewards (the constant-reward versions of a record)."""

    row: Mapping
    seed: int
    rewards: tuple | None = None


@dataclass(frozen=True)
class GradientItem:
    """A synthetic record whose unclipped gradient is the flat vector `v` (the checks' `make_gradient_record`
    contract): cast to the trainable parameters' dtype, it goes through the trainer's own clip, sum and
    privatize in place of a prompt's backward."""

    v: Any

    def __post_init__(self):
        object.__setattr__(self, "v", self.v.detach().clone())


def is_dp_trainer(trainer) -> bool:
    """True when `trainer` implements the DP GRPO trainer protocol (`DP_PROTOCOL`)."""
    return all(hasattr(trainer, name) for name in DP_PROTOCOL)


def _perturb_prompt(prompt):
    if isinstance(prompt, str):
        return prompt + prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        last = dict(prompt[-1])
        last["content"] = last.get("content", "") * 2
        return prompt[:-1] + [last]
    raise InvalidParameter("prompt", type(prompt).__name__, "a str or a list of chat messages (or pass perturb=)")


def default_perturb(item: PromptItem) -> PromptItem:
    """The same record with its prompt repeated twice (a longer prompt: other padding, other rollouts)."""
    row = dict(item.row)
    row["prompt"] = _perturb_prompt(row["prompt"])
    return PromptItem(row, item.seed)


def precision_of(model) -> str:
    """The precision the checks assume for `model`: "float64" when every trainable tensor is float64,
    "bfloat16" when the frozen floating tensors are bfloat16, else "float32"."""
    import torch

    params = list(model.parameters())
    trainable = {p.dtype for p in params if p.requires_grad}
    frozen = {p.dtype for p in params if not p.requires_grad and p.is_floating_point()}
    if trainable == {torch.float64} and frozen <= {torch.float64}:
        return "float64"
    if torch.bfloat16 in trainable | frozen or torch.float16 in trainable | frozen:
        return "bfloat16"
    return "float32"


@contextlib.contextmanager
def _seeded(seed: int):
    """The global torch RNG (which TRL's generation uses) forked and seeded; restored on exit."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _clip(v, C: float):
    """v·min(1, C/‖v‖) with the norm in float64; a non-finite vector → 0 (the plain trainer has no clip)."""
    import torch

    x = v.detach().to(torch.float64)
    norm = float(torch.linalg.vector_norm(x))
    if not math.isfinite(norm):
        return torch.zeros_like(v)
    return (x * (C / norm)).to(v.dtype) if norm > C else v.detach().clone()


def _rows(trainer, records) -> list[dict]:
    if records is not None:
        return [dict(r) for r in records]
    ds = trainer.train_dataset
    if ds is None or len(ds) < 1:
        raise InvalidParameter("records", None, "rows for the checks (the trainer has no train_dataset)")
    return [dict(ds[i]) for i in range(min(CHECK_RECORDS, len(ds)))]


# ------------------------------------------------------------------------------------- plain GRPOTrainer

def _plain_contributions(trainer, items: Sequence[PromptItem], C: float, clip: bool = True) -> list:
    """Each prompt's gradient as TRL's batched training path computes it: one `_generate_and_score_completions`
    of the whole batch (each row repeated num_generations times, as TRL's sampler does; the first item's seed
    for generation), then per prompt `compute_loss` on the batch with the other prompts' rows masked out."""
    import torch

    G = trainer.num_generations
    model = trainer.model
    params = [p for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]) if p.requires_grad]
    inputs = [dict(it.row) for it in items for _ in range(G)]
    was_training = model.training
    model.train()
    if not hasattr(trainer, "current_gradient_accumulation_steps"):
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    try:
        with _seeded(items[0].seed):
            batch = trainer._generate_and_score_completions(inputs)
            out = []
            for k in range(len(items)):
                rows = torch.zeros(len(inputs), dtype=batch["completion_mask"].dtype,
                                   device=batch["completion_mask"].device)
                rows[k * G:(k + 1) * G] = 1
                one = dict(batch)
                one["completion_mask"] = batch["completion_mask"] * rows[:, None]
                loss = trainer.compute_loss(model, one)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
                flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                                  for p, g in zip(params, grads)]).detach()
                out.append(_clip(flat, C) if clip else flat)
    finally:
        model.train(was_training)
    return out


# ------------------------------------------------------------------------------------- DP GRPO trainer

def _dp_contribution(trainer, item: PromptItem):
    with _seeded(item.seed):
        if item.rewards is None:
            return trainer.prompt_contribution(dict(item.row))
        return trainer.prompt_contribution(dict(item.row), rewards=list(item.rewards))


def _dp_clipped(clipper, contributor, item, C: float, C_run: float):
    """One record's clipped contribution at C: a prompt's is `prompt_contribution(row).clipped` (the trainer's
    clip at its own C, what `step()` sums) or, at another C, the trainer's clip of that prompt's gradient; a
    GradientItem's is the trainer's clip of v in the trainable parameters' dtype."""
    if isinstance(item, GradientItem):
        zero = clipper.clipped_sum([])
        return clipper.clip(item.v.to(dtype=zero.dtype, device=zero.device), C)
    c = _dp_contribution(contributor, item)
    return c.clipped if C == C_run else clipper.clip(c.gradient, C)


# why the GRPO checks that do not apply to DPGRPOTrainer are skipped (docs/integrations/trl.md, "Binding contract")
NOT_CHUNKED = ("DPGRPOTrainer does not chunk a prompt's rollouts: prompt_contribution runs one backward over the "
               "prompt's G completions and clips once, so there is no chunked path to compare")
NO_NONPRIVATE_STEP = ("it needs one step at q = 1, σ = 0, C = ∞, which DPGRPOTrainer refuses (dp_clip_norm finite, "
                      "σ > 0); the step's sum, clip and divisor are checked by sensitivity_add_remove, "
                      "public_normalisation and the whole-step checks")
ZERO_BETA = ("beta = 0: a constant-reward prompt has advantage 0 and no KL term, so its contribution is exactly 0 and "
             "there is nothing to retain (tests/integrations/test_trl.py checks that it is 0)")
NOT_EQ2 = ("scale_rewards='none' removes the group mean without dividing by the group's std, which is not eq. (2)")


def _empty_like(train_dataset, rows):
    from datasets import Dataset

    if rows:
        return Dataset.from_list([dict(r) for r in rows])
    return Dataset.from_dict({c: [] for c in train_dataset.column_names})


@dataclass(frozen=True)
class CheckMode:
    """The check mode derived from the real trainer (`check_mode_for`): `settings` (args fields every check run
    gets; the whole run adds its working directory), `run_steps` (steps of a whole run), `q` and `divisor` of the
    check runs, and `record` = every difference from the real run, {field: {"real": ..., "checked": ...}}."""

    settings: Mapping
    run_steps: int
    q: float
    divisor: float
    record: Mapping


def _interval(args, kind: str) -> tuple:
    strategy = getattr(args, f"{kind}_strategy", "no")
    return str(getattr(strategy, "value", strategy)), getattr(args, f"{kind}_steps", None)


def check_mode_for(trainer, *, rows: int = CHECK_RECORDS, q: float | None = None,
                   steps: int | None = None) -> CheckMode:
    """Derive the check mode of a DP GRPO trainer from its real settings: q_check = max(q, CHECK_Q) (public: the
    coverage cases of the checks need records sampled together), seeded randomness per check run, `steps`
    (default min(dp_steps, CHECK_STEPS)) steps per whole run, `rows` records plus one addition; when the run logs,
    saves or evaluates by steps: every step logged, a checkpoint and an evaluation within those steps; no
    external reporting or hub pushes. Every difference is recorded in `CheckMode.record`."""
    cfg, args = trainer.dp_config, trainer.args
    q_real = float(args.dp_sampling_rate)           # the declared q (the plan's m/n may round it down)
    q_check = max(q_real, CHECK_Q) if q is None else q
    if isinstance(q_check, bool) or not isinstance(q_check, (int, float)) or not 0 < q_check <= 1:
        raise InvalidParameter("q", q, "None or a number in (0, 1]")
    k = min(cfg.T, CHECK_STEPS) if steps is None else steps
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= cfg.T:
        raise InvalidParameter("steps", steps, f"None or an int in [1, {cfg.T}] (dp_steps)")
    settings, record = {}, {}
    if q_check != q_real:
        settings["dp_sampling_rate"] = q_check
        record["dp_sampling_rate"] = {"real": q_real, "checked": q_check}
    record["dp_seed"] = {"real": "os_entropy" if cfg.randomness == "os_entropy" else cfg.randomness,
                         "checked": "the check's seed of each run (seeded check mode, never a release)"}
    record["train_dataset"] = {"real": f"the whole train_dataset (public n = {cfg.n})",
                               "checked": f"the bindings' {rows} records and one added row"}
    if k < cfg.T:
        record["steps_run"] = {"real": cfg.T, "checked": k}
    if _interval(args, "logging")[0] == "steps" and _interval(args, "logging")[1] != 1:
        settings["logging_steps"] = 1      # every entry the real run would log, logged and compared at once
        record["logging_steps"] = {"real": _interval(args, "logging")[1], "checked": 1}
    for kind in ("save", "eval"):
        strategy, every = _interval(args, kind)
        if strategy == "steps" and every is not None and (every >= 1 and every > k or every < 1 and
                                                          math.ceil(every * cfg.T) > k):
            settings[f"{kind}_steps"] = k
            record[f"{kind}_steps"] = {"real": every, "checked": k}
    if getattr(args, "report_to", None):
        settings["report_to"] = []
        record["report_to"] = {"real": list(args.report_to), "checked": []}
    if getattr(args, "push_to_hub", False):
        settings["push_to_hub"] = False
        record["push_to_hub"] = {"real": True, "checked": False}
    m = q_check * cfg.n
    while m / cfg.n > q_check:       # as the trainer's plan: q·n rounded down until m/n ≤ q
        m = math.nextafter(m, 0.0)
    return CheckMode(settings=settings, run_steps=k, q=q_check, divisor=float(m), record=record)


def _run_seeds(mode: CheckMode) -> int:
    """The fewest whole runs per pair in whose steps the differing record is missed with probability ≤ RUN_MISS."""
    if mode.q >= 1:
        return 1
    return max(1, math.ceil(math.log(RUN_MISS) / (mode.run_steps * math.log1p(-mode.q))))


def _public_state(obj) -> dict:
    """The plain attributes of a callback (numbers, strings, flags and containers of them): its observable state."""
    plain = (bool, int, float, str, type(None))

    def ok(v, depth=0):
        if isinstance(v, plain):
            return True
        if depth < 4 and isinstance(v, (list, tuple)):
            return all(ok(x, depth + 1) for x in v)
        if depth < 4 and isinstance(v, dict):
            return all(isinstance(a, str) and ok(x, depth + 1) for a, x in v.items())
        return False

    return {k: v for k, v in sorted(vars(obj).items()) if ok(v)} if hasattr(obj, "__dict__") else {}


def _trl_public(run) -> dict:
    """What a TRL trainer releases besides the model and the optimizer: its log history, TRL's metrics, the
    trainer state and control, the evaluation curve and every callback's plain state."""
    state = run.state
    return {"log_history": [dict(e) for e in state.log_history],
            "metrics": {k: list(v) for k, v in run._metrics["train"].items()},
            "global_step": state.global_step,
            "state": {k: getattr(state, k, None) for k in ("max_steps", "epoch", "best_metric",
                                                          "best_model_checkpoint", "total_flos")},
            "control": _public_state(run.control),
            "evaluation_curve": [dict(e) for e in getattr(run, "evaluation_curve", [])],
            "callbacks": {f"{i}:{type(cb).__name__}": _public_state(cb)
                          for i, cb in enumerate(run.callback_handler.callbacks)}}


def _whole_run(trainer, rows, addition, mode: CheckMode, seeds: int, sampling_runs: int, public=None):
    """`WholeRunBindings` driving a fresh copy's `train()`, TRL's loop with its callbacks, in check mode."""
    import os

    from privcheck.checks.whole_run import WholeRunBindings

    cfg = trainer.dp_config
    record = dict(mode.record)
    # no path recorded (results go into artifacts, which record no paths)
    record["output_dir"] = {"real": "args.output_dir", "checked": "output/ in the check's working directory "
                            "(every file written there is compared)"}

    def run(dataset, session):
        out = os.path.join(session.workdir, "output")
        copy = trainer.fresh_copy(_empty_like(trainer.train_dataset, list(dataset)), session.seed,
                                  run_steps=mode.run_steps, output_dir=out, **mode.settings)
        session.attach(model=copy.model, optimizer=copy.optimizer, private_parameters=list(copy.private_parameters),
                       install_update_hook=copy.add_update_hook, sampled=lambda: list(copy.last_sampled),
                       public_outputs=lambda: _trl_public(copy))
        return copy.train()

    return WholeRunBindings(run=run, records=rows, addition=addition, clip_norm=cfg.C, divisor=mode.divisor,
                            noise_multiplier=cfg.sigma, sampling_rate=mode.q, removal="drop", seeds=seeds,
                            check_mode=record, sampling_runs=sampling_runs, public=public)


def _whole_step(trainer, rows, addition, seeds, mode: CheckMode):
    from privcheck.checks.whole_step import StepRun, WholeStepBindings

    cfg = trainer.dp_config

    def build(dataset, seed):
        run = trainer.fresh_copy(_empty_like(trainer.train_dataset, list(dataset)), seed, **mode.settings)
        return StepRun(
            step=run.step, model=run.model, optimizer=run.optimizer,
            private_parameters=list(run.private_parameters), install_update_hook=run.add_update_hook,
            public_outputs=lambda: {"log_history": list(run.state.log_history),
                                    "metrics": {k: list(v) for k, v in run._metrics["train"].items()},
                                    "global_step": run.state.global_step},
            sampled=lambda: list(run.last_sampled),
            per_record=lambda: {i: {"scores": c.rewards, "clipped": c.clipped}
                                for i, c in run.last_contributions.items()})

    record = {k: v for k, v in mode.record.items() if k in ("dp_sampling_rate", "dp_seed", "train_dataset")}
    return WholeStepBindings(build=build, records=rows, addition=addition, clip_norm=cfg.C, divisor=mode.divisor,
                             noise_multiplier=cfg.sigma, sampling_rate=mode.q, removal="drop", seeds=seeds,
                             check_mode=record)


LOGPROB_CASES = 2        # V1's log-probability cases: the first rows' prompts, fixed completions
LOGPROB_SEED = 104729    # public seed of those completions' token ids


def _logprob_cases(trainer, rows) -> list:
    """V1's (prompt_ids [P], completion_ids [G, L]) cases: the first rows' prompts through the trainer's own
    tokenisation (TRL's `_tokenize_prompts`: chat template included), and G completions of fixed token ids (drawn
    under the public `LOGPROB_SEED`, lengths 3 and 5: no generation, so the cases cost one forward each)."""
    import torch

    device = trainer.space.params[0].device if hasattr(trainer, "space") else next(trainer.model.parameters()).device
    vocab = int(getattr(trainer.model.config, "vocab_size", 0) or len(trainer.processing_class))
    gen = torch.Generator().manual_seed(LOGPROB_SEED)
    cases = []
    for k, row in enumerate(rows[:LOGPROB_CASES]):
        prompt = list(trainer._tokenize_prompts([row["prompt"]])[0][0])
        completion = torch.randint(0, vocab, (trainer.num_generations, 3 + 2 * k), generator=gen)
        pad = getattr(trainer.processing_class, "pad_token_id", None)
        if pad is not None:        # no pad token inside a completion: the reference forward has no attention mask
            completion = torch.where(completion == pad, (pad + 1) % vocab, completion)
        cases.append((torch.tensor(prompt, dtype=torch.long, device=device), completion.to(device)))
    return cases


def bindings_for(trainer, *, records: Sequence[Mapping] | None = None, addition: Mapping | None = None,
                 perturb: Callable | None = None, seeds: int = 16, clip_norm: float | None = None,
                 precision: str | None = None, check_q: float | None = None, check_steps: int | None = None,
                 run_seeds: int | None = None, sampling_runs: int = SAMPLING_RUNS, public: Mapping | None = None):
    """`SuiteBindings` for a TRL `GRPOTrainer` (module docstring).

    `records`: the dataset rows the checks use (default the first `CHECK_RECORDS` rows of train_dataset; at
    least 3); `addition`: the row added in the whole-step neighbours (default `perturb` of the last record's
    row); `perturb(item) -> item` for V6 (default `default_perturb`: the prompt repeated); `seeds`: trials per
    whole-step neighbouring pair; `clip_norm`: C of the plain trainer's contributions (default its
    max_grad_norm, else 1.0); `precision`: default `precision_of(trainer.model)`. DP trainer only: `check_q`
    and `check_steps` override the derived check mode (`check_mode_for`); `run_seeds`: whole runs per
    neighbouring pair (default: the fewest with a miss probability below `RUN_MISS`); `sampling_runs`: whole
    runs of run_poisson_sampling; `public`: what else your run releases, {name: a dict or list your code fills, a
    callable returning one, or a logging.Logger}, compared by the whole-run checks (`WholeRunBindings.public`)."""
    from privcheck.checks.common import SuiteBindings

    rows = _rows(trainer, records)
    if len(rows) < 3:
        raise InvalidParameter("records", len(rows), "at least 3 rows (record isolation uses three)")
    if not all("prompt" in r for r in rows):
        raise InvalidParameter("records", [sorted(r) for r in rows][:3], "rows with a 'prompt' field")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise InvalidParameter("seeds", seeds, "a positive int")
    if run_seeds is not None and (isinstance(run_seeds, bool) or not isinstance(run_seeds, int) or run_seeds < 1):
        raise InvalidParameter("run_seeds", run_seeds, "None or a positive int")
    if isinstance(sampling_runs, bool) or not isinstance(sampling_runs, int) or sampling_runs < 2:
        raise InvalidParameter("sampling_runs", sampling_runs, "an int >= 2")
    if public is not None and not isinstance(public, Mapping):
        raise InvalidParameter("public", type(public).__name__, "None or a mapping {name: object}")
    perturb = default_perturb if perturb is None else perturb
    if not callable(perturb):
        raise InvalidParameter("perturb", perturb, "a callable PromptItem -> PromptItem")
    items = [PromptItem(r, ITEM_SEED + k) for k, r in enumerate(rows)]
    if addition is None:
        addition = dict(perturb(PromptItem(rows[-1], ITEM_SEED)).row)
    if precision is None:
        mixed = bool(getattr(trainer.args, "bf16", False) or getattr(trainer.args, "fp16", False))
        precision = "bfloat16" if mixed else precision_of(trainer.model)   # TRL autocasts the forward passes
    common = dict(items=items, perturb=perturb, model=trainer.model, G=trainer.num_generations,
                  beta=float(trainer.beta), precision=precision)

    if not is_dp_trainer(trainer):
        C = clip_norm if clip_norm is not None else (getattr(trainer.args, "max_grad_norm", None) or 1.0)
        return SuiteBindings(
            record_gradient=lambda it: _plain_contributions(trainer, [it], C, clip=False)[0],
            contributions=lambda its: _plain_contributions(trainer, list(its), C), C=float(C),
            target=f"trl:{type(trainer).__name__} (batched path)", **common)

    cfg, plan = trainer.dp_config, trainer.dp_config.plan
    named = dict(trainer.model.named_parameters())
    dim = sum(named[k].numel() for k in trainer.private_parameters)
    mode = check_mode_for(trainer, rows=len(rows), q=check_q, steps=check_steps)

    sampler = trainer.fresh_copy(_empty_like(trainer.train_dataset, rows), 0, **mode.settings)

    def make_randomness(seed=None, release=False):
        # a fresh trainer is the randomness handle: its own coins (sample_coins), noise (privatize), release flag
        if release and seed is not None:
            raise InvalidParameter("seed", seed, "None: a release-mode trainer refuses a seed")
        return trainer.fresh_copy(_empty_like(trainer.train_dataset, rows), seed, **mode.settings)
    def clipped_sum(batch, C=None):
        C = cfg.C if C is None else C
        return trainer.clipped_sum([_dp_clipped(trainer, trainer, it, C, cfg.C) for it in batch])

    def noisy_update(batch, *, sigma, C, q, n):
        # the seeded copy: σ = 0 (public_normalisation) is refused by a release trainer
        return sampler.noisy_update([_dp_clipped(sampler, trainer, it, C, cfg.C) for it in batch],
                                    sigma=sigma, C=C, q=q, n=n)

    lo, hi = trainer.dp_reward_range
    G = trainer.num_generations
    const = [PromptItem(items[0].row, items[0].seed, rewards=(v,) * G) for v in (hi, lo)]
    grpo = {}
    not_applicable = {"chunk_identity": NOT_CHUNKED, "nonprivate_equivalence": NO_NONPRIVATE_STEP}
    if trainer.scale_rewards == "group":
        grpo.update(advantages=trainer.advantages,
                    prompt_loss=lambda logp, ref, adv, mask, beta: trainer.prompt_loss(logp, ref, mask, adv, beta))
        if callable(getattr(trainer, "token_logprobs", None)):
            grpo.update(token_logprobs=trainer.token_logprobs, logprob_cases=_logprob_cases(trainer, rows))
    else:
        not_applicable["loss_reference"] = NOT_EQ2
    if float(trainer.beta) == 0.0:
        not_applicable["constant_reward_groups"] = ZERO_BETA
    else:
        grpo["constant_items"] = const
    return SuiteBindings(
        record_gradient=lambda it: _dp_contribution(trainer, it).gradient,
        contributions=lambda its: [_dp_contribution(trainer, it).clipped for it in its],
        clipped_sum=clipped_sum, noisy_update=noisy_update, make_gradient_record=GradientItem,
        not_applicable=not_applicable,
        sample=lambda n, q: sampler.sample_coins(n, q),
        clip=lambda v, C: trainer.clip(v, C), make_randomness=make_randomness,
        privatize=lambda S, *, sigma, C, q, n: sampler.privatize(S, sigma=sigma, C=C, q=q, n=n),
        whole_step=_whole_step(trainer, rows, dict(addition), seeds, mode),
        whole_run=_whole_run(trainer, rows, dict(addition), mode, _run_seeds(mode) if run_seeds is None else run_seeds,
                             sampling_runs, public),
        accountant_event=plan.event, delta=plan.delta, user_epsilon=lambda: trainer.privacy_claim["epsilon"],
        C=cfg.C, q=cfg.q, n=cfg.n, sigma=cfg.sigma, dim=dim,
        target=f"trl:{type(trainer).__name__}", **grpo, **common)
