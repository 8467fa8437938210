"""Whole-step checks: drive the user's real training step on coupled neighbouring datasets (docs/whole_step.md).

The record-level checks of `privcheck.checks.training` see only what their bindings route through. These checks
take the callable the user's loop calls once per step (`StepRun.step`), the model and the optimizer that applies
the update, and observe everything themselves: the check registers an optimizer step pre-hook (ĝ = the `.grad`
of the declared private parameters at that moment, one flat float64 vector in the order of
`StepRun.private_parameters`), and after the step it snapshots every named parameter and buffer, the optimizer's
param_groups (everything but 'params') and state, the step's return value and `public_outputs()`. Every run is a
fresh `WholeStepBindings.build(dataset, seed)`; two builds with the same seed on neighbouring datasets are coupled
(same coins, rollout randomness and noise for the records at the same index), so the difference of the two
updates is the contribution of the one differing record. The checks are generic: DP-SGD at example level
(Opacus-style) and DP-GRPO at prompt level alike.

=========================  ===================================================================================
check                      what it asserts
=========================  ===================================================================================
step_sensitivity           ‖ĝ(D) − ĝ(D')‖·divisor/C ≤ 1 + rounding allowance on every trial, for add, for the
                           removal of each record, on an empty base and on a small base; an empty-batch case
                           and a full-batch case covered; a nonzero difference seen for every pair
step_public_outputs        with ĝ fixed (the D' run's ĝ replaced by the D run's), every public output is the
                           same on neighbours; any difference is a leak, named by its dotted field
step_noise                 ĝ on the empty dataset across seeds: mean 0, std σ·C/divisor, overall and per
                           private tensor; no coordinate without noise; fresh draws per seed
step_record_isolation      each record's per-record observation (scores, clipped gradient, ...) alone equals
                           the same record inside a batch
step_poisson_sampling      inclusion through the trainer's own loader on a partially populated dataset:
                           per-record frequency q, pairwise independence, batch size Binomial(m, q)
=========================  ===================================================================================

Results are `CheckResult`s of suite "dpgrpo" with `precision` set: "skipped" when `b.whole_step` (or an optional
binding a check needs) is missing, "error" when a bound callable raises, else "pass"/"fail". Tolerances are per
precision in `WHOLE_STEP_TOLERANCES` (see its comment); the statistical checks have a pre-declared false-failure
probability below 1e-7 each. torch is imported lazily.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.checks.common import NONE_FAILED, SkipCheck, evaluate
from privcheck.checks.neighbours import (
    CASES,
    COUPLINGS,
    POSITIONS,
    REMOVALS,
    Pair,
    coverage,
    pairs,
    search_pairs,
    supported_positions,
)
from privcheck.checks.observation import compare_public as _compare_public
from privcheck.checks.observation import flat_grads as _flat_grads
from privcheck.checks.observation import grad_dtype as _grad_dtype
from privcheck.checks.observation import norm as _norm
from privcheck.checks.observation import public_leaves, training_state
from privcheck.checks.observation import write_grads as _write_grads
from privcheck.errors import InvalidParameter

__all__ = ["CASES", "StepRun", "WHOLE_STEP_CHECKS", "WHOLE_STEP_TOLERANCES", "WholeStepBindings",
           "check_step_noise", "check_step_poisson_sampling", "check_step_public_outputs",
           "check_step_record_isolation", "check_step_sensitivity", "public_leaves"]

SUITE = "dpgrpo"
NEIGHBOURS = ("positions", "search")
ALPHA = 1e-7          # false-failure budget of each statistical check (Bonferroni over its tests)
MISS = 1e-6           # accepted probability of missing a required coverage case when it cannot be observed

# Per precision (the precision the trainer computes in):
# - record_rel: relative deviation allowed between one record's clipped contribution computed in two batch
#   compositions (the isolation tolerance, and per shared record in the sensitivity allowance). A batched kernel
#   (per-sample gradients of a batch, a GEMM blocked by batch size) reorders reductions; the reordered sum of m
#   terms is within m·u·Σ|terms| (u the unit roundoff), and for the models these checks run on that stays below
#   ~1e4·u: 1e-12 in float64 (u = 1.1e-16), 1e-5 in float32 (u = 6e-8, ~170 u), 2e-2 in bfloat16 (u = 3.9e-3,
#   ~5 u: bfloat16 forward passes). A leak through batch composition (padding, batch statistics) of O(1e-3) or
#   more is seen at float64 and float32; at bfloat16 a leak below 2e-2 relative is not (run the step checks of a
#   bfloat16 trainer at float32 for that).
# - public_ulps: ulps (of the leaf's own dtype; Python floats at the precision's dtype) by which a public output
#   may differ between neighbours once ĝ is fixed. 0 in float64: a deterministic step on the same ĝ is
#   bit-identical. 8 at lower precision: nondeterministic accelerator reductions. A leak below that is not
#   seen at that precision (run at float64 for bit-level assurance).
# - hat_multiple: rounding of ĝ itself (one addition and one division of vectors of size ‖S + z‖) allows
#   hat_multiple·ε·(‖ĝ_D‖ + ‖ĝ_D'‖) in ‖Δĝ‖, ε the machine epsilon of ĝ's observed dtype.
WHOLE_STEP_TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"record_rel": 1e-12, "public_ulps": 0, "hat_multiple": 8, "eps": 2.0 ** -52},
    "float32": {"record_rel": 1e-5, "public_ulps": 8, "hat_multiple": 8, "eps": 2.0 ** -23},
    "bfloat16": {"record_rel": 2e-2, "public_ulps": 8, "hat_multiple": 8, "eps": 2.0 ** -7},
}


# --------------------------------------------------------------------------------------------- bindings

@dataclass
class StepRun:
    """One fresh run on one dataset, as the user's loop drives it (docs/whole_step.md, "The binding contract").

    `step()` is THE callable the loop calls once per step; its return value is public telemetry (a mapping or
    None). `model`: all named parameters and buffers are observed after the step. `optimizer`: applies the
    update; observed with `register_step_pre_hook` (ĝ = .grad of `private_parameters`) and through its
    param_groups and state. `install_update_hook(hook)`: optional, installs hook(ĝ_flat) -> Tensor | None at the
    point where the trainer forms ĝ (after noise and division, before anything reads it). `public_outputs()`:
    anything else the step releases. `sampled()`: private, dataset indices of the last step's batch.
    `per_record()`: dataset index -> {"scores": ..., "clipped": Tensor[p], ...} for the last step's records.
    `close()`: clean-up."""

    step: Callable[[], Any]
    model: Any
    optimizer: Any
    private_parameters: Sequence[str]
    install_update_hook: Callable[[Callable], Any] | None = None
    public_outputs: Callable[[], Mapping[str, Any]] | None = None
    sampled: Callable[[], Sequence[int]] | None = None
    per_record: Callable[[], Mapping[int, Mapping[str, Any]]] | None = None
    close: Callable[[], None] | None = None


@dataclass
class WholeStepBindings:
    """How to build fresh coupled runs of the user's step (docs/whole_step.md).

    `build(dataset, seed)` -> a FRESH `StepRun` (same initial model, optimizer and state every time) on
    `dataset`, in seeded check mode; same seed on neighbouring datasets = same coins, rollout randomness and
    noise for the records at the same index. `records`: base dataset D (>= 2 records); `addition`: x;
    `clip_norm` C; `divisor` the public divisor (q·n); `noise_multiplier` σ (noise std σ·C before division);
    `sampling_rate` q. `removal`: "drop" (datasets of varying length; removing record i is tested as D with i
    moved last vs that minus its last record) or "absent" (a fixed universe of len(records) + 1 slots, the last
    one the addition's; removal puts `absent` in the slot). `seeds`: minimum trials per neighbouring pair.
    `coupling`: how `build` keys the coins for "drop" ("index": per dataset index, so the differing record can
    only be last; "record": per stable record identity, any position; `privcheck.checks.neighbours`). `pool`:
    {kind: record}, adversarial candidates for the neighbour search (records colliding with others on a prompt,
    extreme rewards or gradient norms). `regime` names this configuration; `regimes`: {name: WholeStepBindings}
    of the same step under other public configurations (a clip norm above every record's gradient norm), run
    after this one by the neighbouring-pair checks. `check_mode`: how these check-mode runs differ from the
    released run, {field: {"real": ..., "checked": ...}} (a derived check-mode q, seeds, a subset of records),
    recorded in every result's inputs."""

    build: Callable[[Sequence, int], StepRun]
    records: Sequence
    addition: Any
    clip_norm: float
    divisor: float
    noise_multiplier: float
    sampling_rate: float
    removal: str = "drop"
    absent: Any = None
    seeds: int = 16
    coupling: str = "index"
    pool: Mapping[str, Any] | None = None
    regime: str = "default"
    regimes: Mapping[str, "WholeStepBindings"] | None = None
    check_mode: Mapping[str, Any] | None = None

    def __post_init__(self):
        if self.check_mode is not None and not isinstance(self.check_mode, Mapping):
            raise InvalidParameter("check_mode", type(self.check_mode).__name__, "None or a mapping")
        if not callable(self.build):
            raise InvalidParameter("build", self.build, "a callable (dataset, seed) -> StepRun")
        if isinstance(self.records, (str, bytes)) or not isinstance(self.records, Sequence) or len(self.records) < 2:
            raise InvalidParameter("records", type(self.records).__name__, "a sequence of at least 2 records")
        if self.removal not in REMOVALS:
            raise InvalidParameter("removal", self.removal, f"one of {REMOVALS}")
        for name in ("clip_norm", "divisor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise InvalidParameter(name, v, "a finite number > 0")
        s = self.noise_multiplier
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
            raise InvalidParameter("noise_multiplier", s, "a finite number >= 0")
        q = self.sampling_rate
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
            raise InvalidParameter("sampling_rate", q, "a number in (0, 1]")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise InvalidParameter("seeds", self.seeds, "an integer >= 1")
        if self.removal == "absent" and self.addition is self.absent:
            raise InvalidParameter("addition", self.addition, "a record (not the `absent` placeholder)")
        if self.coupling not in COUPLINGS:
            raise InvalidParameter("coupling", self.coupling, f"one of {COUPLINGS}")
        if self.pool is not None and (not isinstance(self.pool, Mapping) or any(
                not isinstance(k, str) or (self.removal == "absent" and v is self.absent)
                for k, v in self.pool.items())):
            raise InvalidParameter("pool", type(self.pool).__name__, "None or a mapping {kind (str): record}")
        if not isinstance(self.regime, str) or not self.regime:
            raise InvalidParameter("regime", self.regime, "a non-empty name")
        if self.regimes is not None and (not isinstance(self.regimes, Mapping) or any(
                not isinstance(k, str) or not isinstance(v, WholeStepBindings) or v.regimes
                or k == self.regime for k, v in self.regimes.items())):
            raise InvalidParameter("regimes", type(self.regimes).__name__, "None or {name: WholeStepBindings} "
                                   "(names other than `regime`, without regimes of their own)")


# --------------------------------------------------------------------------------------------- runner

def _precision(b, precision) -> str:
    p = precision if precision is not None else (getattr(b, "precision", None) or "float64")
    if p not in WHOLE_STEP_TOLERANCES:
        raise InvalidParameter("precision", p, f"None or one of {tuple(WHOLE_STEP_TOLERANCES)}")
    return p


def _bindings(b) -> WholeStepBindings:
    ws = getattr(b, "whole_step", None)
    if ws is None:
        raise SkipCheck("missing binding(s): whole_step")
    return ws


def _validate(b):
    ws = getattr(b, "whole_step", None)
    if ws is not None and not isinstance(ws, WholeStepBindings):
        raise InvalidParameter("whole_step", type(ws).__name__, "None or a privcheck.checks.whole_step."
                               "WholeStepBindings")


def _check_small_base(b, small_base: int, cases) -> None:
    """`small_base` must leave at least one record out of the "small" pair (checked before any run)."""
    ws = getattr(b, "whole_step", None)
    if ws is not None and "small" in cases and small_base >= len(ws.records):
        raise InvalidParameter("small_base", small_base, f"an integer in [1, {len(ws.records) - 1}]")


def _pair_options(b, precision, cases, seeds, max_seeds, small_base, seed0, positions=None, neighbours="positions",
                  examples=32, search_seed=0):
    """The options of the neighbouring-pair checks, validated before any run: (precision, cases, inputs)."""
    prec = _precision(b, precision)
    _validate(b)
    cases = _cases(cases)
    _count("max_seeds", max_seeds)
    _count("small_base", small_base)
    _count("seed0", seed0, 0)
    if seeds is not None:
        _count("seeds", seeds)
    _check_small_base(b, small_base, cases)
    positions = POSITIONS if positions is None else tuple(positions) if isinstance(positions, (list, tuple)) else None
    if not positions or not set(positions) <= set(POSITIONS) or len(set(positions)) != len(positions):
        raise InvalidParameter("positions", positions, f"a non-empty subset of {POSITIONS}")
    if neighbours not in NEIGHBOURS:
        raise InvalidParameter("neighbours", neighbours, f"one of {NEIGHBOURS}")
    _count("examples", examples)
    _count("search_seed", search_seed, 0)
    inputs = {"cases": list(cases), "seeds": seeds, "max_seeds": max_seeds, "small_base": small_base,
              "seed0": seed0, "positions": list(positions), "neighbours": neighbours}
    if neighbours == "search":
        inputs.update(examples=examples, search_seed=search_seed)
    return prec, cases, _declared(b, inputs)


def _declared(b, inputs: dict) -> dict:
    """`inputs` with the bindings' check-mode differences (`WholeStepBindings.check_mode`) recorded."""
    ws = getattr(b, "whole_step", None)
    if isinstance(ws, WholeStepBindings) and ws.check_mode:
        inputs["check_mode"] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in ws.check_mode.items()}
    return inputs


def _at_q(ws) -> str:
    """The inconclusive messages' hint: the q the trials ran at and what to do about a small one."""
    q = float(ws.sampling_rate)
    hint = "" if q >= 0.3 else "; bind a check-mode q of 0.3 or more (the TRL bindings derive one from the " \
                               "real trainer and record it in check_mode)"
    return f" at q = {q:g}{hint}"


def _count(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameter(name, value, f"an integer >= {minimum}")
    return value


# --------------------------------------------------------------------------------------------- observation

def _is_absent(ws, x) -> bool:
    return ws.removal == "absent" and x is ws.absent


def _present(ws, dataset) -> list[int]:
    return [i for i, x in enumerate(dataset) if not _is_absent(ws, x)]






def _snapshot(run, ret, n_steps, applied) -> dict:
    """Every public output of a run after its step, as {dotted name: leaf}."""
    out = training_state(run.model, run.optimizer)
    public_leaves("telemetry", ret, out)
    if run.public_outputs is not None:
        public_leaves("public", run.public_outputs(), out)
    out["update.optimizer_steps"] = n_steps
    for k, g in enumerate(applied):
        out[f"update.applied[{k}]"] = g
    return out


def _drive(ws: WholeStepBindings, dataset, seed: int, *, fix: dict | None = None, snapshot: bool = False,
           per_record: bool = False) -> dict:
    """One fresh run of the user's step on `dataset`, observed: the applied update(s) (optimizer pre-hook), the
    ĝ seen by the update hook, sampled indices, per-record observations and (optionally) the public snapshot.
    `fix` = {"hats": [...], "grads": [...]} replaces this run's ĝ by another run's: through the update hook when
    it is installed and called, else by overwriting the private .grad in the optimizer pre-hook."""
    run = ws.build(list(dataset), seed)
    if not isinstance(run, StepRun):
        raise InvalidParameter("build", type(run).__name__, "a callable returning a StepRun")
    handle = None
    try:
        named = dict(run.model.named_parameters())
        private_names = list(run.private_parameters)
        missing = [k for k in private_names if k not in named]
        if missing or not private_names:
            raise InvalidParameter("private_parameters", missing[:3] or private_names,
                                   "a non-empty list of names in model.named_parameters()")
        private = [named[k] for k in private_names]
        rec = {"grads": [], "orig_grads": [], "hats": [], "pending": False, "fallback": 0, "dtype": None}

        def update_hook(g):
            import torch

            k = len(rec["hats"])
            rec["hats"].append(g.detach().reshape(-1).to(device="cpu", dtype=torch.float64).clone())
            if fix is not None and k < len(fix["hats"]):
                rec["pending"] = True
                return fix["hats"][k].to(dtype=g.dtype, device=g.device).reshape(g.shape).clone()
            return g

        def pre_hook(optimizer, args, kwargs):
            k = len(rec["grads"])
            rec["orig_grads"].append(_flat_grads(private))
            if fix is not None and not rec["pending"] and k < len(fix["grads"]):
                _write_grads(private, fix["grads"][k])
                rec["fallback"] += 1
            rec["pending"] = False
            rec["dtype"] = _grad_dtype(private)
            rec["grads"].append(_flat_grads(private))

        handle = run.optimizer.register_step_pre_hook(pre_hook)
        if run.install_update_hook is not None:
            run.install_update_hook(update_hook)
        ret = run.step()
        out = {"grads": rec["grads"], "orig_grads": rec["orig_grads"], "hats": rec["hats"],
               "fallback": rec["fallback"], "dtype": rec["dtype"], "numels": [p.numel() for p in private],
               "names": private_names, "sampled": None, "per_record": None, "public": None}
        if run.sampled is not None:
            out["sampled"] = [int(i) for i in run.sampled()]
        if per_record and run.per_record is not None:
            out["per_record"] = {int(k): dict(v) for k, v in run.per_record().items()}
        if snapshot:
            out["public"] = _snapshot(run, ret, len(rec["grads"]), rec["grads"])
        return out
    finally:
        if handle is not None:
            handle.remove()
        if run.close is not None:
            run.close()


# --------------------------------------------------------------------------------------------- neighbours

def _pairs(ws: WholeStepBindings, cases: Sequence[str], small_base: int, inputs: dict | None = None) -> list[Pair]:
    """The pairs a neighbouring-pair check runs (`privcheck.checks.neighbours`): the deterministic ones at the
    requested positions, then, with neighbours="search", the searched ones."""
    inputs = inputs or {}
    kw = dict(removal=ws.removal, absent=ws.absent, coupling=ws.coupling, positions=inputs.get("positions"))
    out = pairs(ws.records, ws.addition, cases=cases, small_base=small_base, **kw)
    if inputs.get("neighbours") == "search":
        out += search_pairs(ws.records, ws.addition, pool=ws.pool, examples=inputs["examples"],
                            seed=inputs["search_seed"], **kw)
    return out


def _neighbour_coverage(ws: WholeStepBindings, pair_list: Sequence[Pair], inputs: dict) -> dict:
    """What the pairs covered, for `observed`: positions, kinds, sizes, and the requested positions the
    coupling cannot reach (drop removal with index coupling: only "last")."""
    requested = inputs.get("positions") or list(POSITIONS)
    reachable = supported_positions(ws.removal, ws.coupling)
    out = {"removal": ws.removal, "coupling": ws.coupling, "neighbours": inputs.get("neighbours", "positions"),
           "deterministic": coverage([p for p in pair_list if not p.searched], removal=ws.removal, absent=ws.absent),
           "positions_not_covered": {p: f"removal {ws.removal!r} with {ws.coupling!r} coupling keeps the shared "
                                        "records coupled only with the differing record last"
                                     for p in requested if p not in reachable}}
    if inputs.get("neighbours") == "search":
        out["search"] = coverage([p for p in pair_list if p.searched], removal=ws.removal, absent=ws.absent)
        out["search"]["pool_kinds"] = sorted(ws.pool or {})
    return out


def _across_regimes(ws: WholeStepBindings, one: Callable[[WholeStepBindings], dict]) -> dict:
    """Run `one` on the bindings and on each of `ws.regimes`; one result, failing when any regime fails, with
    each regime's observation under observed["regimes"] (the first regime's fields stay at the top level)."""
    if not ws.regimes:
        out = one(ws)
        out["observed"]["regime"] = ws.regime
        return out
    runs = {ws.regime: one(ws)}
    for name, other in ws.regimes.items():
        runs[name] = one(other)
    first = runs[ws.regime]
    observed = dict(first["observed"])
    observed["regime"] = ws.regime
    observed["regimes"] = {name: r["observed"] for name, r in runs.items()}
    if "worst_ratio" in observed:      # the summary fields cover every regime
        observed["worst_ratio"] = max((r["observed"]["worst_ratio"] for r in runs.values()
                                       if r["observed"].get("worst_ratio") is not None), default=None)
    if "leak_fields" in observed:
        observed["leak_fields"] = sorted({k for r in runs.values() for k in r["observed"]["leak_fields"]})
    passed = all(r["passed"] for r in runs.values())
    message = "; ".join(f"[{name}] {r['message']}" for name, r in runs.items() if not r["passed"] or passed)
    return {"passed": passed, "observed": observed, "expected": first["expected"], "tolerance": first["tolerance"],
            "message": message}


def _cases(cases) -> tuple[str, ...]:
    cases = CASES if cases is None else tuple(cases)
    if not cases or not set(cases) <= set(CASES) or len(set(cases)) != len(cases):
        raise InvalidParameter("cases", cases, f"a non-empty subset of {CASES}")
    return cases


def _seeds_for(p: float) -> int:
    """Trials after which an event of probability p per trial is missed with probability < MISS."""
    if p >= 1:
        return 1
    if p <= 0:
        return math.inf
    return math.ceil(math.log(MISS) / math.log1p(-p))



def _sampling_anomalies(ws, dataset, sampled) -> list[str]:
    if sampled is None:
        return []
    bad = []
    pres = set(_present(ws, dataset))
    if len(set(sampled)) != len(sampled):
        bad.append(f"duplicate indices {sorted(sampled)}")
    for i in sampled:
        if i not in pres:
            bad.append(f"index {i} sampled but not a present record of a dataset of {len(dataset)}")
    return bad


def _clip_regime(run: dict, pair: Pair, C: float, counts: dict, differing: dict, stats: dict) -> None:
    """Record the clip regime of one trial from `per_record` "clipped" (a record whose clipped contribution has
    norm C, to 1e-9 relative, was clipped): "clipped" / "unclipped" when every sampled record of the big run
    was / was not, "mixed", "empty", "unknown" without the observation."""
    per = run.get("per_record")
    sampled = run.get("sampled")
    if per is None or sampled is None:
        counts["unknown"] += 1
        return
    if not sampled:
        counts["empty"] += 1
        return
    flags = {}
    for i in sampled:
        v = (per.get(i) or {}).get("clipped")
        if v is None:
            counts["unknown"] += 1
            return
        flags[i] = _norm(_as_f64(v)) >= C * (1 - 1e-9)
    kind = "clipped" if all(flags.values()) else ("unclipped" if not any(flags.values()) else "mixed")
    counts[kind] += 1
    stats[kind] = stats.get(kind, 0) + 1
    if pair.index in flags:
        differing["clipped" if flags[pair.index] else "unclipped"] += 1


def _as_f64(v):
    import torch

    return torch.as_tensor(v).detach().to("cpu", torch.float64).reshape(-1)


# --------------------------------------------------------------------------------------------- sensitivity

def check_step_sensitivity(b, precision: str | None = None, *, cases: Sequence[str] | None = None,
                           seeds: int | None = None, max_seeds: int = 400, small_base: int = 1, seed0: int = 0,
                           positions: Sequence[str] | None = None, neighbours: str = "positions", examples: int = 32,
                           search_seed: int = 0) -> CheckResult:
    """`step_sensitivity`: on coupled neighbours, ‖ĝ(D') − ĝ(D)‖·divisor/C ≤ 1 + allowance on every trial.

    Pairs (`cases`): "add" (D, D + x), "remove" (each record), "empty" (no record vs x alone: the empty batch) and
    "small" (the first `small_base` records vs those + x: a small dataset that is sometimes fully sampled). Each
    pair runs `seeds` trials (default `whole_step.seeds`) of two fresh builds with the same seed, then more, up to
    `max_seeds`, until the pair saw a nonzero difference (the differing record was sampled) and, for "small",
    the full batch. With `sampled` bound, the coupling is verified (the shared records sampled in D' are those
    sampled in D) and the batch sizes are reported; an empty-batch case (D's batch empty, D' = the differing
    record only) and a full-batch case (every record of D' sampled, >= 2 records) must be seen. Without
    `sampled`, the empty-batch case is the "empty" pair's nonzero trial and the full-batch case is covered by
    running the "small" pair for ⌈ln 1e-6 / ln(1 − q^m)⌉ trials (m records), a miss probability below 1e-6;
    when that exceeds `max_seeds` the check fails as inconclusive.

    Neighbours (`privcheck.checks.neighbours`): "add" puts the addition at each of `positions` (first, middle,
    last among the records; what the coupling supports, the rest reported under observed["neighbours"]);
    neighbours="search" adds `examples` pairs drawn from the records and `whole_step.pool` (a sweep of every
    pool kind, then hypothesis at `search_seed`), each run for `seeds` trials (no per-pair coverage demand).
    With `per_record` bound, each trial's clip regime is recorded (records whose clipped norm reached C are
    "clipped"). `whole_step.regimes` are run after the bindings themselves (observed["regimes"]).

    Tolerance: allowance = record_rel·(|D| + |D'|) + hat_multiple·ε·(‖ĝ_D‖ + ‖ĝ_D'‖)·divisor/C
    (`WHOLE_STEP_TOLERANCES`; ε of ĝ's dtype). Deterministic given the seeds: no false failures.
    Reference: the sensitivity bound ‖clip_C(g)‖ ≤ C of one record, divided by the public divisor."""
    prec, cases, inputs = _pair_options(b, precision, cases, seeds, max_seeds, small_base, seed0, positions,
                                        neighbours, examples, search_seed)
    tol = WHOLE_STEP_TOLERANCES[prec]

    def one(ws):
        n_min = min(seeds if seeds is not None else ws.seeds, max_seeds)
        C, d, q = float(ws.clip_norm), float(ws.divisor), float(ws.sampling_rate)
        clip_regimes = {"clipped": 0, "unclipped": 0, "mixed": 0, "empty": 0, "unknown": 0}
        differing = {"clipped": 0, "unclipped": 0}
        searched = {"trials": 0, "differing_sampled": 0, "positions_sampled": {}}
        worst, worst_at = -math.inf, None
        per_pair, violations, failures = {}, [], []
        sizes_small, sizes_big = set(), set()
        empty_seen = full_seen = False
        full_by_design = None
        observable = None
        pair_list = _pairs(ws, cases, small_base, inputs)
        for pair in pair_list:
            m_big = len(_present(ws, pair.big))
            need_full = pair.label == "small"
            n_full = _seeds_for(q ** m_big) if need_full else 0
            informative = full = 0
            t = 0
            stats = {"trials": 0, "nonzero": 0, "max_ratio": 0.0, "full_batch": 0}
            n_failures = len(failures) + len(violations)
            while True:
                pair_failed = len(failures) + len(violations) > n_failures
                if t >= n_min:
                    done = informative > 0 or pair.searched    # a searched pair runs its trials, no more
                    if need_full:
                        done &= (full > 0) if observable else t >= n_full
                    if done or t >= max_seeds or pair_failed:   # a failed pair needs no more coverage
                        break
                s = seed0 + t
                a = _drive(ws, pair.small, s)
                z = _drive(ws, pair.big, s, per_record=True)
                t += 1
                _clip_regime(z, pair, C, clip_regimes, differing, stats)
                observable = a["sampled"] is not None and z["sampled"] is not None
                if len(a["grads"]) != len(z["grads"]):
                    ratio, allowance = math.inf, 0.0
                    failures.append(f"{pair.label} seed {s}: {len(a['grads'])} vs {len(z['grads'])} optimizer "
                                    "steps (an update applied on one neighbour only)")
                elif not a["grads"]:
                    ratio, allowance = 0.0, 0.0
                else:
                    import torch

                    ga, gz = torch.cat(a["grads"]), torch.cat(z["grads"])
                    dtype = z["dtype"] or a["dtype"]
                    eps = torch.finfo(dtype).eps if dtype is not None and dtype.is_floating_point else tol["eps"]
                    diff = _norm(gz - ga)
                    ratio = diff * d / C if math.isfinite(diff) else math.inf
                    # rounding grows with the records actually summed: the sampled ones when they are observed
                    summed = (len(a["sampled"]) + len(z["sampled"]) if a["sampled"] is not None
                              and z["sampled"] is not None else len(_present(ws, pair.small)) + m_big)
                    allowance = (tol["record_rel"] * summed
                                 + tol["hat_multiple"] * eps * (_norm(ga) + _norm(gz)) * d / C)
                    if ratio > allowance:
                        informative += 1
                        stats["nonzero"] += 1
                excess = ratio - 1 - allowance
                stats["max_ratio"] = max(stats["max_ratio"], ratio)
                if excess > worst:
                    worst, worst_at = excess, {"pair": pair.label, "seed": s, "ratio": ratio,
                                               "allowance": allowance}
                if excess > 0:
                    failures.append(f"{pair.label} seed {s}: ‖Δĝ‖·divisor/C = {ratio:.6g} > 1 + {allowance:.3g} "
                                    f"(bound: ≤ 1 + {allowance:.3g})")
                if observable:
                    sa, sz = a["sampled"], z["sampled"]
                    for msg in _sampling_anomalies(ws, pair.small, sa) + _sampling_anomalies(ws, pair.big, sz):
                        violations.append(f"{pair.label} seed {s}: {msg}")
                    if pair.searched:
                        searched["trials"] += 1
                        if pair.index in sz:
                            searched["differing_sampled"] += 1
                            at = searched["positions_sampled"]
                            at[pair.position] = at.get(pair.position, 0) + 1
                    if set(sz) - {pair.index} != {pair.shared_index(i) for i in sa}:
                        violations.append(f"{pair.label} seed {s}: shared records sampled differ between "
                                          f"neighbours ({sorted(sa)} vs {sorted(sz)}; coins not coupled, or "
                                          "batch membership depends on the other records)")
                    sizes_small.add(len(sa))
                    sizes_big.add(len(sz))
                    if not sa and list(sz) == [pair.index]:
                        empty_seen = True
                    if m_big >= 2 and set(sz) == set(_present(ws, pair.big)):
                        full_seen = True
                        full += 1
                        stats["full_batch"] += 1
                elif pair.label == "empty" and ratio > allowance:
                    empty_seen = True
            stats["trials"] = t
            stats["position"] = pair.position
            per_pair[pair.label] = stats
            if informative == 0 and not pair.searched:
                failures.append(f"{pair.label}: inconclusive, nonzero-difference trials: 0 of {t} (bound: ≥ 1; the "
                                f"differing record was never sampled, or its update is lost){_at_q(ws)}")
            if need_full and not observable:
                full_by_design = t >= n_full
                if not full_by_design:
                    failures.append(f"small: inconclusive, the full batch (q^{m_big} = {q ** m_big:.3g} per trial) "
                                    f"needs {n_full} trials for a miss probability < 1e-6; max_seeds = {max_seeds}"
                                    f"{_at_q(ws)}")
        if observable and not empty_seen:
            failures.append("inconclusive: no empty-batch case (D's batch empty, D' = the differing record) was seen")
        if observable and not full_seen:
            failures.append("inconclusive: no full-batch case (every record of D' sampled) was seen")
        if observable is False and "empty" in cases and not empty_seen:
            failures.append("inconclusive: the empty pair never showed the differing record")
        if observable is False and "small" not in cases:
            failures.append("inconclusive: the full-batch case needs the 'small' pair or a bound `sampled`")
        if observable is False and "empty" not in cases:
            failures.append("inconclusive: the empty-batch case needs the 'empty' pair or a bound `sampled`")
        if inputs["neighbours"] == "search" and observable and searched["differing_sampled"] == 0:
            failures.append("inconclusive: no searched pair had its differing record sampled")
        failures += violations
        observed = {"worst_ratio": max((p["max_ratio"] for p in per_pair.values()), default=None),
                    "trials": sum(p["trials"] for p in per_pair.values()),
                    "nonzero_trials": sum(p["nonzero"] for p in per_pair.values()),
                    "worst_excess_over_bound": worst, "worst_case": worst_at, "pairs": per_pair,
                    "batch_sizes_small": sorted(sizes_small) if observable else None,
                    "batch_sizes_big": sorted(sizes_big) if observable else None,
                    "empty_batch_case": empty_seen, "full_batch_case": full_seen if observable else full_by_design,
                    "coverage_observed": bool(observable), "coupling_violations": violations[:10],
                    "clip_regimes": clip_regimes, "differing_record_regime": differing,
                    "neighbours": _neighbour_coverage(ws, pair_list, inputs), "failures": failures[:20]}
        if inputs["neighbours"] == "search":
            observed["neighbours"]["search"].update(searched)
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                "expected": {"ratio": "<= 1", "empty_batch_case": True, "full_batch_case": True,
                             "nonzero_difference_per_pair": True},
                "tolerance": {"record_rel": tol["record_rel"], "hat_multiple": tol["hat_multiple"],
                              "allowance": "record_rel·(|D| + |D'|) + hat_multiple·ε·(‖ĝ_D‖ + ‖ĝ_D'‖)·divisor/C"},
                "message": ("; ".join(failures[:6]) if failures else
                            f"worst ‖Δĝ‖·divisor/C = {observed['worst_ratio']:.6g} over "
                            f"{sum(p['trials'] for p in per_pair.values())} trials")}

    return evaluate(b, "step_sensitivity", prec, "sensitivity of one record: ‖clip_C(g)‖ ≤ C, divided by the public "
                   "divisor, on coupled neighbouring runs of the real step", inputs,
                    lambda: _across_regimes(_bindings(b), one))


# --------------------------------------------------------------------------------------------- public outputs



def check_step_public_outputs(b, precision: str | None = None, *, cases: Sequence[str] | None = None,
                              seeds: int | None = None, max_seeds: int = 400, small_base: int = 1,
                              seed0: int = 0, positions: Sequence[str] | None = None, neighbours: str = "positions",
                              examples: int = 32, search_seed: int = 0) -> CheckResult:
    """`step_public_outputs`: with ĝ fixed, every public output of a step is the same on neighbours.

    For each pair (as `step_sensitivity`) and seed: run D (capture ĝ_D), then run D' with its ĝ replaced by
    ĝ_D (through `install_update_hook`, or by overwriting the private .grad in the optimizer pre-hook when no
    update hook is bound or it was not called). Compared (dotted names): every named parameter
    ("parameters.<name>", the private ones included: with ĝ fixed they are post-processing of it), buffers,
    "optimizer.param_groups[i].<key>" (lr, betas, ...), "optimizer.state[<param>].<key>", the step's return
    value ("telemetry.<key>"), `public_outputs()` ("public.<key>"), the number of optimizer steps and the
    update applied ("update.*"). Any difference is a leak, reported by field name. Each pair runs until the
    differing record was sampled in at least one trial (seen through `sampled`, or as a ĝ that changed), up to
    `max_seeds`; never sampled = inconclusive = fail.

    Tolerance: bit identity in float64; `public_ulps` ulps of the leaf's dtype at lower precision
    (`WHOLE_STEP_TOLERANCES`). Deterministic: no false failures. Reference: post-processing, a public output
    of a DP step is a function of ĝ and public inputs only."""
    prec, cases, inputs = _pair_options(b, precision, cases, seeds, max_seeds, small_base, seed0, positions,
                                        neighbours, examples, search_seed)
    tol = WHOLE_STEP_TOLERANCES[prec]
    ulps = int(tol["public_ulps"])

    def one(ws):
        n_min = min(seeds if seeds is not None else ws.seeds, max_seeds)
        leaks: dict[str, dict] = {}
        per_pair, failures, fix_paths = {}, [], set()
        n_fields = 0
        pair_list = _pairs(ws, cases, small_base, inputs)
        for pair in pair_list:
            informative, t = 0, 0
            while t < n_min or (informative == 0 and t < max_seeds and not pair.searched):
                s = seed0 + t
                t += 1
                a = _drive(ws, pair.small, s, snapshot=True)
                z = _drive(ws, pair.big, s, snapshot=True, fix={"hats": a["hats"], "grads": a["grads"]})
                fix_paths.add("optimizer pre-hook" if z["fallback"] else
                              ("update hook" if z["hats"] else "none (no update)"))
                if z["sampled"] is not None:
                    sampled_in = pair.index in z["sampled"]
                else:
                    orig = z["hats"] if z["hats"] and z["fallback"] == 0 else z["orig_grads"]
                    ref = a["hats"] if z["hats"] and z["fallback"] == 0 else a["grads"]
                    sampled_in = len(orig) != len(ref) or any(
                        x.shape != y.shape or not bool((x == y).all()) for x, y in zip(orig, ref))
                informative += int(sampled_in)
                diffs = _compare_public(a["public"], z["public"], ulps, tol["eps"])
                n_fields = max(n_fields, len(a["public"]))
                for key, what in diffs.items():
                    entry = leaks.setdefault(key, {"trials": 0, "first": {"pair": pair.label, "seed": s,
                                                                          "difference": what}})
                    entry["trials"] += 1
            per_pair[pair.label] = {"trials": t, "record_sampled": informative, "position": pair.position}
            if informative == 0 and not pair.searched:
                failures.append(f"{pair.label}: inconclusive, trials with the differing record sampled: 0 of {t} "
                                f"(bound: ≥ 1){_at_q(ws)}")
        total = sum(p["trials"] for p in per_pair.values())
        if leaks:
            failures.insert(0, "leak: " + ", ".join(f"{k}: {v['first']['difference']} in {v['trials']}/{total} trials"
                                                    for k, v in leaks.items())
                            + " (bound: identical on neighbours once ĝ is fixed)")
        observed = {"leaks": leaks, "leak_fields": sorted(leaks), "pairs": per_pair, "fields_compared": n_fields,
                    "g_hat_fixed_through": sorted(fix_paths), "neighbours": _neighbour_coverage(ws, pair_list, inputs)}
        return {"passed": not failures, "observed": observed, "expected": {"leak_fields": []},
                "tolerance": {"public_ulps": ulps},
                "message": "; ".join(failures) if failures else
                f"{n_fields} public fields identical on neighbours over {total} trials (ĝ fixed through "
                f"{', '.join(sorted(fix_paths))})"}

    return evaluate(b, "step_public_outputs", prec, "post-processing: with the noisy update fixed, a step's public "
                   "outputs are functions of public inputs only", inputs, lambda: _across_regimes(_bindings(b), one))


# --------------------------------------------------------------------------------------------- noise

def _wilson_hilferty(x: float, n: int) -> float:
    """z-score of a χ²_n value (Wilson–Hilferty; accurate to ~1e-3 in z for n >= 100)."""
    c = 2.0 / (9.0 * n)
    return ((x / n) ** (1.0 / 3.0) - (1.0 - c)) / math.sqrt(c)


def check_step_noise(b, precision: str | None = None, *, seeds: int = 16, seed0: int = 0,
                     min_tensor_samples: int = 100) -> CheckResult:
    """`step_noise`: ĝ of the real step on the empty dataset ([] for "drop", every slot `absent` for "absent")
    over `seeds` seeds is N(0, (σ·C/divisor)²) per coordinate.

    Tests (N = coordinates × seeds samples; α = 1e-7 shared by Bonferroni over 2 + m tests, m = private tensors
    with at least `min_tensor_samples` samples): mean — Σĝ/(s·√N) ~ N(0, 1); scale — Σĝ²/s² ~ χ²_N,
    Wilson–Hilferty z-score, overall and per private tensor; |z| ≤ z_{α/(2(2 + m))}. Deterministic requirements:
    an update is applied on every seed (skipping the step when the batch is empty reveals it), `sampled` (if
    bound) is empty, no coordinate is exactly 0 on every seed (a coordinate without noise), no two seeds give
    the same ĝ (fresh noise per seed). With σ = 0 every ĝ must be exactly 0. False failure < 1e-7.
    Reference: Gaussian mechanism, noise std σ·C before division by the public divisor."""
    prec = _precision(b, precision)
    _validate(b)
    seeds = _count("seeds", seeds, 2)
    seed0 = _count("seed0", seed0, 0)
    min_tensor_samples = _count("min_tensor_samples", min_tensor_samples, 100)
    inputs = _declared(b, {"seeds": seeds, "seed0": seed0, "min_tensor_samples": min_tensor_samples,
                           "alpha": ALPHA})

    def fn():
        from statistics import NormalDist

        import torch

        ws = _bindings(b)
        empty = [] if ws.removal == "drop" else [ws.absent] * (len(ws.records) + 1)
        target = float(ws.noise_multiplier) * float(ws.clip_norm) / float(ws.divisor)
        rows, failures, names, numels = [], [], None, None
        for t in range(seeds):
            r = _drive(ws, empty, seed0 + t)
            if not r["grads"]:
                failures.append(f"seed {seed0 + t}: no update applied on the empty dataset (a skipped step reveals "
                                "that the batch was empty)")
                continue
            if r["sampled"]:
                failures.append(f"seed {seed0 + t}: sampled {r['sampled']} from the empty dataset")
            rows.append(torch.cat(r["grads"]))
            names, numels = r["names"], r["numels"] * len(r["grads"])
        observed = {"seeds": seeds, "target_std": target, "failures": failures}
        if not rows:
            return {"passed": False, "observed": observed, "expected": {"std": target}, "tolerance": None,
                    "message": "; ".join(failures[:3])}
        Z = torch.stack(rows)
        N = Z.numel()
        if target == 0:
            zero = bool((Z == 0).all())
            if not zero:
                failures.append("σ = 0 declared but ĝ on the empty dataset is not 0")
            observed.update(max_abs=float(Z.abs().max()))
            return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                    "expected": {"g_hat": 0.0}, "tolerance": 0.0,
                    "message": "; ".join(failures) or "σ = 0: ĝ exactly 0 on the empty dataset"}
        per_tensor, off, tested = {}, 0, []
        labels = [n for n in names] * (len(numels) // max(1, len(names)))
        for name, k in zip(labels, numels):
            block = Z[:, off:off + k]
            off += k
            if block.numel() >= min_tensor_samples:
                tested.append((name, block))
        z_crit = NormalDist().inv_cdf(1 - ALPHA / (2 * (2 + len(tested))))
        mean_z = float(Z.sum()) / (target * math.sqrt(N))
        scale_z = _wilson_hilferty(float((Z / target).pow(2).sum()), N)
        std_ratio = float(Z.pow(2).mean().sqrt()) / target
        if abs(mean_z) > z_crit:
            failures.append(f"mean of ĝ is {mean_z:.3g} standard errors from 0 (bound: |z| ≤ {z_crit:.3g})")
        if abs(scale_z) > z_crit:
            failures.append(f"std of ĝ is {std_ratio:.5g}·σC/divisor (z = {scale_z:.3g}; bound: |z| ≤ {z_crit:.3g})")
        for name, block in tested:
            zt = _wilson_hilferty(float((block / target).pow(2).sum()), block.numel())
            ratio = float(block.pow(2).mean().sqrt()) / target
            per_tensor[name] = {"std_ratio": ratio, "scale_z": zt}
            if abs(zt) > z_crit:
                failures.append(f"{name}: std {ratio:.4g}·σC/divisor (z = {zt:.3g}; bound: |z| ≤ {z_crit:.3g})")
        dead = (Z == 0).all(dim=0)
        if bool(dead.any()):
            idx = dead.nonzero().flatten().tolist()
            where, off = [], 0
            for name, k in zip(labels, numels):
                hit = [i for i in idx if off <= i < off + k]
                if hit:
                    where.append(f"{name} ({len(hit)} of {k})")
                off += k
            failures.append("coordinates without noise on every seed: " + ", ".join(where[:6]) + " (bound: none)")
        if Z.shape[0] > 1 and len({tuple(row.tolist()[:64]) + (float(row.sum()),) for row in Z}) < Z.shape[0]:
            failures.append("two seeds gave the same ĝ (the seed does not reach the noise)")
        observed.update(n_samples=N, std_ratio=std_ratio, mean_z=mean_z, scale_z=scale_z, z_critical=z_crit,
                        per_tensor=per_tensor, untested_tensors=len(numels) - len(tested))
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                "expected": {"std_ratio": 1.0, "mean_z": 0.0, "scale_z": 0.0},
                "tolerance": {"z_critical": z_crit, "alpha": ALPHA},
                "message": "; ".join(failures[:6]) if failures else
                f"std {std_ratio:.5g}·σC/divisor, mean {mean_z:.3g} s.e. over {N} coordinates"}

    return evaluate(b, "step_noise", prec, "Gaussian mechanism: N(0, σ²C²) before division by the public divisor "
                   "(exact normal mean test, χ² scale test)", inputs, fn)


# --------------------------------------------------------------------------------------------- isolation

def _rel(a, b) -> float:
    import torch

    x = torch.as_tensor(a).detach().to("cpu", torch.float64).reshape(-1)
    y = torch.as_tensor(b).detach().to("cpu", torch.float64).reshape(-1)
    if x.shape != y.shape:
        return math.inf
    if not torch.equal(torch.isnan(x), torch.isnan(y)):
        return math.inf
    keep = ~torch.isnan(x)
    x, y = x[keep], y[keep]
    num, den = _norm(x - y), max(_norm(x), _norm(y))
    if num == 0:
        return 0.0
    return num / den if den > 0 and math.isfinite(num) else math.inf


def check_step_record_isolation(b, precision: str | None = None, *, max_seeds: int = 64, seed0: int = 0
                                ) -> CheckResult:
    """`step_record_isolation`: each record's observation inside the real step (`per_record`: "scores",
    "clipped", any other key) is the same computed alone and inside a batch.

    For every record j of D + [x]: "drop" — the batch run is D + [x] with j moved to index 0 and the alone run
    [j]; "absent" — the batch run is the full universe D + [x] and the alone run every other slot absent. Seeds
    from `seed0` until one trial has j sampled in both runs with at least one other record in the batch, up to
    `max_seeds` (else inconclusive = fail). Every common key is compared: relative ℓ2 difference ≤ record_rel
    (`WHOLE_STEP_TOLERANCES`: 1e-12 in float64), bit identity reported. Deterministic: no false failures.
    Skipped when `per_record` is not bound. Reference: (A2) record isolation."""
    prec = _precision(b, precision)
    _validate(b)
    max_seeds = _count("max_seeds", max_seeds)
    seed0 = _count("seed0", seed0, 0)
    tol = WHOLE_STEP_TOLERANCES[prec]
    inputs = _declared(b, {"max_seeds": max_seeds, "seed0": seed0})

    def fn():
        ws = _bindings(b)
        probe = ws.build([] if ws.removal == "drop" else [ws.absent] * (len(ws.records) + 1), seed0)
        try:
            if probe.per_record is None:
                raise SkipCheck("missing binding(s): whole_step per_record (StepRun.per_record)")
        finally:
            if probe.close is not None:
                probe.close()
        full = list(ws.records) + [ws.addition]
        per, failures, worst, bit = {}, [], 0.0, True
        for j, item in enumerate(full):
            if _is_absent(ws, item):
                continue
            if ws.removal == "drop":
                batch_ds, alone_ds, idx = [item] + full[:j] + full[j + 1:], [item], 0
            else:
                batch_ds, alone_ds, idx = full, [item if i == j else ws.absent for i in range(len(full))], j
            covered, t, keys = False, 0, []
            while not covered and t < max_seeds:
                s = seed0 + t
                t += 1
                zb = _drive(ws, batch_ds, s, per_record=True)
                pb = zb["per_record"] or {}
                in_batch = zb["sampled"] if zb["sampled"] is not None else list(pb)
                if idx not in in_batch or len(in_batch) < 2:
                    continue
                za = _drive(ws, alone_ds, s, per_record=True)
                pa = za["per_record"] or {}
                if idx not in pa or idx not in pb:
                    if idx in (za["sampled"] if za["sampled"] is not None else list(pa)):
                        failures.append(f"record {j}: sampled but no per_record entry")
                        covered = True
                    continue
                covered = True
                ea, eb = pa[idx], pb[idx]
                keys = sorted(set(ea) | set(eb))
                if not keys:
                    failures.append(f"record {j}: per_record entry has no fields")
                for key in keys:
                    if key not in ea or key not in eb:
                        failures.append(f"record {j}: field {key!r} only {'alone' if key in ea else 'in the batch'}")
                        continue
                    r = _rel(ea[key], eb[key])
                    worst = max(worst, r)
                    bit &= r == 0
                    if r > tol["record_rel"]:
                        failures.append(f"record {j}: {key} differs alone vs in a batch of {len(in_batch)} "
                                        f"(relative {r:.3g}; bound: ≤ {tol['record_rel']:.3g})")
            per[j] = {"trials": t, "covered": covered, "fields": keys}
            if not covered:
                failures.append(f"record {j}: inconclusive, never sampled together with another record in {t} "
                                f"trials{_at_q(ws)}")
        observed = {"records": per, "max_rel_diff": worst, "bit_identical": bit, "failures": failures[:20]}
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed, "expected": {"max_rel_diff": 0.0},
                "tolerance": {"record_rel": tol["record_rel"]},
                "message": "; ".join(failures[:6]) if failures else
                f"{len(per)} records identical alone and in a batch (max relative difference {worst:.3g})"}

    return evaluate(b, "step_record_isolation", prec, "(A2) record isolation: a record's scores and clipped "
                   "gradient depend only on (θ_t, x_i)", inputs, fn)


# --------------------------------------------------------------------------------------------- Poisson

def check_step_poisson_sampling(b, precision: str | None = None, *, runs: int = 100, seed0: int = 0
                                ) -> CheckResult:
    """`step_poisson_sampling`: the batches of the real step (`sampled`, through the trainer's own loader) on a
    partially populated dataset are independent Bernoulli(q) draws per record.

    Dataset: D + [x] ("drop"), or the universe D + [x] with slot 1 made absent ("absent": a partially populated
    universe). `runs` fresh runs with seeds seed0, seed0 + 1, ... Exact two-sided binomial tests at α = 1e-7
    (Bonferroni over all tests, so false failure < 1e-7): each present record's inclusion count ~ Bin(N, q);
    each pair's joint inclusion ~ Bin(N, q²); each batch size b's count ~ Bin(N, C(m, b)·q^b·(1 − q)^(m − b)).
    Deterministic requirements: no absent slot, duplicate or out-of-range index is ever sampled. Skipped when
    `sampled` is not bound. Reference: Poisson subsampling, Algorithm 1 line 2 / DP-SGD's sampler."""
    prec = _precision(b, precision)
    _validate(b)
    runs = _count("runs", runs, 2)
    seed0 = _count("seed0", seed0, 0)
    inputs = _declared(b, {"runs": runs, "seed0": seed0, "alpha": ALPHA})

    def fn():
        ws = _bindings(b)
        import numpy as np

        from privcheck.checks.statistics import binomial_family

        full = list(ws.records) + [ws.addition]
        dataset = list(full)
        if ws.removal == "absent":
            dataset[1] = ws.absent
        present = _present(ws, dataset)
        m, q = len(present), float(ws.sampling_rate)
        rows = np.zeros((runs, m), dtype=bool)
        failures = []
        for t in range(runs):
            r = _drive(ws, dataset, seed0 + t)
            if r["sampled"] is None:
                raise SkipCheck("missing binding(s): whole_step sampled (StepRun.sampled)")
            failures += [f"seed {seed0 + t}: {msg}" for msg in _sampling_anomalies(ws, dataset, r["sampled"])]
            for i in r["sampled"]:
                if i in present:
                    rows[t, present.index(i)] = True
        tests = []   # (label, count, p)
        for k, i in enumerate(present):
            tests.append((f"inclusion of record {i}", int(rows[:, k].sum()), q))
        for k in range(m):
            for k2 in range(k + 1, m):
                tests.append((f"joint inclusion of {present[k]} and {present[k2]}",
                              int((rows[:, k] & rows[:, k2]).sum()), q * q))
        sizes = rows.sum(axis=1)
        for size in range(m + 1):
            tests.append((f"batch size {size}", int((sizes == size).sum()),
                          math.comb(m, size) * q ** size * (1 - q) ** (m - size)))
        fam = binomial_family([(label, count, runs, p) for label, count, p in tests], ALPHA)
        report, worst, alpha_each = fam["report"], fam["worst"], fam["alpha_each"]
        failures += fam["failures"]
        observed = {"runs": runs, "present": present, "q": q, "tests": report,
                    "mean_batch_size": float(sizes.mean()), "worst_p_value": worst[0], "worst_test": worst[1],
                    "failures": failures[:20]}
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                "expected": {"mean_batch_size": q * m},
                "tolerance": {"alpha": ALPHA, "alpha_per_test": alpha_each},
                "message": "; ".join(failures[:6]) if failures else
                f"{len(tests)} exact binomial tests passed over {runs} runs (worst p-value {worst[0]:.3g})"}

    return evaluate(b, "step_poisson_sampling", prec, "Poisson subsampling: independent Bernoulli(q) inclusion "
                   "(exact binomial tests)", inputs, fn)


WHOLE_STEP_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "step_sensitivity": check_step_sensitivity,
    "step_public_outputs": check_step_public_outputs,
    "step_noise": check_step_noise,
    "step_record_isolation": check_step_record_isolation,
    "step_poisson_sampling": check_step_poisson_sampling,
}
