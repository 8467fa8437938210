"""Whole-run checks: drive the user's WHOLE training on coupled neighbouring datasets, with noise replay
(docs/whole_run.md).

The DP argument for a released run is that everything it makes public is a post-processing of the noisy updates
ĝ_1, ..., ĝ_T and of public constants. The whole-step checks (`privcheck.checks.whole_step`) show it for one
fresh step; decisions taken *between* steps (a schedule or a stopping rule read from private data), training on
private data *before* the private phase, metrics kept outside the step and files written by the run are outside
one step. These checks run the user's training from its first line to its last (`WholeRunBindings.run`) twice,
on neighbouring datasets D and D', with the same seed, and **replay the noise**: every noisy update the D' run
forms is replaced by the one the D run formed at the same step. Then:

* every public output of the D' run — parameters (private ones included), buffers, the optimizer's
  hyper-parameters and state before every private step and at the end, the number of private steps taken, the
  run's return value, declared public objects (`RunSession.public`), log records, standard output and the files
  written in the run's working directory — must equal the D run's; a difference is a leak named by field and
  step (`run_public_outputs`);
* at every step, before the replacement, ‖ĝ'_t − ĝ_t‖·divisor/C ≤ 1 + rounding (`run_sensitivity`): with the
  earlier updates replayed both runs are at the same θ_t, and coupled randomness (same coins for shared records,
  same noise) leaves the differing record's clipped contribution as the only difference;
* every noisy update of runs on the empty dataset is N(0, (σC/divisor)²) per coordinate, at every step
  (`run_noise`);
* over many rounds of the trainer's own loader, each record's inclusions are independent Bernoulli(q) draws:
  rate per record, independence between consecutive rounds and within a round, batch sizes; exact binomial
  tests, false failure below 1e-7 (`run_poisson_sampling`).

Fields that differ between two runs on the SAME dataset and seed (wall-clock times, unseeded randomness) cannot
be compared; they are reported as unobservable, never silently passed. The binding contract (what `run` must do
and what `RunSession.attach` observes) is in docs/whole_run.md.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import logging
import math
import os
import random
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.checks.common import NONE_FAILED, SkipCheck, evaluate
from privcheck.checks.neighbours import coverage
from privcheck.checks.neighbours import pairs as neighbour_pairs
from privcheck.checks.observation import (
    compare_public,
    flat_grads,
    grad_dtype,
    norm,
    public_leaves,
    training_state,
    write_grads,
)
from privcheck.checks.whole_step import ALPHA, WHOLE_STEP_TOLERANCES
from privcheck.errors import CannotObserve, InvalidParameter
from privcheck.interrupts import reraise_if_interrupted
from privcheck.randomness import derive_seed
from privcheck.rng_state import preserved_rng

__all__ = ["RUN_CASES", "WHOLE_RUN_CHECKS", "RunSession", "WholeRunBindings",
           "check_run_noise", "check_run_poisson_sampling", "check_run_public_outputs", "check_run_sensitivity",
           "seed_everything"]

RUN_CASES = ("add", "remove", "empty")
SEED_NAMESPACE = "privcheck.checks.whole_run"
SAMPLING_SEED0 = 1_000_000      # seeds of the sampling runs: SAMPLING_SEED0 + run (apart from the pairs' 0, 1, ...)
MAX_FILE_BYTES = 1 << 30         # a file of the run's working directory is hashed only below this size


# --------------------------------------------------------------------------------------------- session

@dataclass
class _Attached:
    model: Any
    optimizer: Any
    names: list
    params: list
    sampled: Callable | None
    public_outputs: Callable | None
    hook_handle: Any = None
    update_hook_remove: Any = None


class RunSession:
    """What the check hands to `WholeRunBindings.run(dataset, session)`.

    `seed`: the run's seed (same on both neighbours: the binding seeds every generator of the run from it, in
    check mode). `workdir`: the run's working directory (also the current directory while the run executes);
    every file written there is a public output. `attach(...)`: call it once the private optimizer exists (an
    integration does this for the user, e.g. from `make_private`): the check then observes every private
    step. `public(name, obj)`: declare an extra public output (a dict or list the run keeps metrics in, a
    callable returning one, or a `logging.Logger`), read before every private step and at the end."""

    def __init__(self, seed: int, workdir: str, replay: list | None):
        self.seed, self.workdir = seed, workdir
        self._replay = replay
        self._attached: list[_Attached] = []
        self._declared: dict[str, Any] = {}
        self._loggers: dict[str, Any] = {}
        self._log: list[str] = []
        self._stdout: io.StringIO | None = None
        self._stderr: io.StringIO | None = None
        self.steps: list[dict] = []       # per private step: ĝ (before replay), sampled, public snapshot
        self.pending_hats: list = []
        self._replaced_by_hook = False

    # -------------------------------------------------------------------------------- user-facing

    def attach(self, *, model, optimizer, private_parameters: Sequence[str], install_update_hook=None,
               sampled: Callable | None = None, public_outputs: Callable | None = None) -> None:
        """Observe `optimizer` (the optimizer that applies ĝ; for Opacus the DPOptimizer's original_optimizer)
        on `model`: ĝ is the `.grad` of `private_parameters` (names in model.named_parameters()) in a step
        pre-hook, or what `install_update_hook(hook)` passes to hook(ĝ) where the trainer forms ĝ. `sampled()`:
        the dataset indices of the current step's batch (private, used for coverage and sampling tests);
        `public_outputs()`: anything else the trainer releases."""
        dropout = [k for k, m in model.named_modules() if getattr(m, "p", 0) and "Dropout" in type(m).__name__
                   and m.training]
        if dropout:     # its masks depend on the batch, so neighbouring runs cannot be coupled
            raise CannotObserve("the coupling of neighbouring runs", f"dropout with p > 0 is active in {dropout[:3]}; "
                                "run the check mode with dropout 0 (or in eval mode)")
        named = dict(model.named_parameters())
        names = list(private_parameters)
        missing = [k for k in names if k not in named]
        if missing or not names:
            raise InvalidParameter("private_parameters", missing[:3] or names,
                                   "a non-empty list of names in model.named_parameters()")
        att = _Attached(model, optimizer, names, [named[k] for k in names], sampled, public_outputs)
        att.hook_handle = optimizer.register_step_pre_hook(lambda opt, args, kwargs: self._pre_step(att))
        if install_update_hook is not None:
            att.update_hook_remove = install_update_hook(lambda g: self._update_hook(att, g))
        self._attached.append(att)

    def public(self, name: str, obj) -> None:
        """Declare `obj` public under `name` (module docstring)."""
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name", name, "a non-empty string")
        if isinstance(obj, logging.Logger):
            self._watch_logger(name, obj)
        else:
            self._declared[name] = obj

    # -------------------------------------------------------------------------------- observation

    def _update_hook(self, att, g):
        import torch

        k = len(self.pending_hats) + len(self.steps)
        self.pending_hats.append(g.detach().reshape(-1).to(device="cpu", dtype=torch.float64).clone())
        if self._replay is not None and k < len(self._replay):
            self._replaced_by_hook = True
            return self._replay[k]["g_hat"].to(dtype=g.dtype, device=g.device).reshape(g.shape).clone()
        return g

    def _pre_step(self, att) -> None:
        k = len(self.steps)
        snapshot = self.snapshot()       # public state BEFORE this update is applied
        own = self.pending_hats[-1] if self.pending_hats else flat_grads(att.params)
        through = "update hook" if self.pending_hats else "optimizer pre-hook"
        self.pending_hats = []
        replaced = self._replaced_by_hook
        self._replaced_by_hook = False
        if self._replay is not None and k < len(self._replay) and not replaced:
            write_grads(att.params, self._replay[k]["g_hat"])
        sampled = None
        if att.sampled is not None:
            sampled = [int(i) for i in att.sampled()]
        self.steps.append({"g_hat": own, "dtype": grad_dtype(att.params), "sampled": sampled,
                           "public": snapshot, "through": through, "names": att.names,
                           "numels": [p.numel() for p in att.params]})

    def _watch_logger(self, name, logger) -> None:
        session = self

        class _Capture(logging.Handler):
            def emit(self, record):
                session._log.append(f"{record.name}:{record.levelname}:{record.getMessage()}")

        handler = _Capture(level=logging.NOTSET)
        logger.addHandler(handler)
        self._loggers[name] = (logger, handler)

    def snapshot(self) -> dict:
        """Every public output now, as {dotted name: leaf} (parameters, buffers, optimizer, declared objects, log
        records and standard output since the previous snapshot)."""
        out: dict = {}
        for a, att in enumerate(self._attached):
            pre = f"attached[{a}]." if a else ""
            training_state(att.model, att.optimizer, pre, out)
            if att.public_outputs is not None:
                public_leaves(f"{pre}trainer", att.public_outputs(), out)
        for name, obj in self._declared.items():
            public_leaves(f"public.{name}", obj() if callable(obj) else obj, out)
        for i, line in enumerate(self._log):
            out[f"log[{i}]"] = line
        self._log = []
        for stream, buffer in (("stdout", self._stdout), ("stderr", self._stderr)):
            if buffer is not None:
                text = buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
                for i, line in enumerate(text.splitlines()):
                    out[f"{stream}[{i}]"] = line
        return out

    def close(self) -> None:
        for att in self._attached:
            if att.hook_handle is not None:
                att.hook_handle.remove()
            if callable(att.update_hook_remove):
                att.update_hook_remove()
        for logger, handler in self._loggers.values():
            logger.removeHandler(handler)


# --------------------------------------------------------------------------------------------- bindings

@dataclass
class WholeRunBindings:
    """How to run the user's whole training (docs/whole_run.md).

    `run(dataset, session)`: the whole training on `dataset` (a list of records; "absent" slots hold `absent`),
    from its first line (model construction) to its last (checkpoints), in seeded check mode with
    `session.seed`; it calls `session.attach(...)` once the private optimizer exists. Its return value is public.
    `records` (D, >= 2), `addition` (x), `clip_norm` C, `divisor`, `noise_multiplier` σ and `sampling_rate` q
    are as in `WholeStepBindings`; `removal` "drop" or "absent" likewise. `seeds`: runs per neighbouring pair.
    `public`: extra public outputs declared once for every run ({name: object, callable or logging.Logger}).
    `check_mode`: the differences between these check-mode runs and the released run, {field: {"real": ...,
    "checked": ...}}, recorded in every result. `sampling_runs`: runs of `run_poisson_sampling`."""

    run: Callable[[Sequence, RunSession], Any]
    records: Sequence
    addition: Any
    clip_norm: float
    divisor: float
    noise_multiplier: float
    sampling_rate: float
    removal: str = "drop"
    absent: Any = None
    seeds: int = 2
    public: Mapping[str, Any] | None = None
    check_mode: Mapping[str, Any] | None = None
    sampling_runs: int = 40
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        from privcheck.checks.whole_step import WholeStepBindings

        if not callable(self.run):
            raise InvalidParameter("run", self.run, "a callable run(dataset, session)")
        # the shared fields are validated exactly as the whole-step bindings validate them
        WholeStepBindings(build=self.run, records=self.records, addition=self.addition, clip_norm=self.clip_norm,
                          divisor=self.divisor, noise_multiplier=self.noise_multiplier,
                          sampling_rate=self.sampling_rate, removal=self.removal, absent=self.absent,
                          seeds=self.seeds)
        if self.public is not None and not isinstance(self.public, Mapping):
            raise InvalidParameter("public", type(self.public).__name__, "None or a mapping {name: object}")
        if self.check_mode is not None and not isinstance(self.check_mode, Mapping):
            raise InvalidParameter("check_mode", type(self.check_mode).__name__, "None or a mapping")
        if isinstance(self.sampling_runs, bool) or not isinstance(self.sampling_runs, int) or self.sampling_runs < 2:
            raise InvalidParameter("sampling_runs", self.sampling_runs, "an integer >= 2")


# --------------------------------------------------------------------------------------------- driver

def seed_everything(seed: int) -> None:
    """Seed the global generators a script draws from implicitly (torch CPU/CUDA, numpy, `random`), so that
    model construction and anything else on them is the same on both neighbours."""
    import numpy as np
    import torch

    torch.manual_seed(derive_seed(seed, "torch", SEED_NAMESPACE))
    np.random.seed(derive_seed(seed, "numpy", SEED_NAMESPACE) % (2 ** 32))
    random.seed(derive_seed(seed, "random", SEED_NAMESPACE))


def _files(root: str) -> dict:
    """{relative path: sha256} of every regular file below `root` (symlinks are reported, never followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(filenames) + sorted(d for d in dirnames if os.path.islink(os.path.join(dirpath, d))):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[f"files.{rel}"] = "symlink -> " + os.readlink(path)
                continue
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                out[f"files.{rel}"] = f"{size} bytes (not hashed: above {MAX_FILE_BYTES})"
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[f"files.{rel}"] = f"sha256:{h.hexdigest()}"
    return out


def _execute(wr: WholeRunBindings, dataset, seed: int, replay: list | None = None) -> dict:
    """One whole run on `dataset` with `seed`, observed; `replay` = the reference run's steps (noise replay)."""
    root = wr._cache.get("root")
    if root is None:       # private (0700) and removed with the bindings
        root = wr._cache["root"] = tempfile.mkdtemp(prefix="privcheck-run-")
        weakref.finalize(wr, shutil.rmtree, root, True)
    workdir = os.path.join(root, "run")          # the same path on every run: paths in logs compare equal
    shutil.rmtree(workdir, ignore_errors=True)
    os.mkdir(workdir, 0o700)
    session = RunSession(seed, workdir, replay)
    session.public("root", logging.getLogger())     # every log record that reaches the root logger is public
    for name, obj in (wr.public or {}).items():
        session.public(name, obj)
    # a declared dict or list outlives the run (a module-level metrics dict): every run starts from its state now
    kept = {name: copy.deepcopy(obj) for name, obj in (wr.public or {}).items() if isinstance(obj, (dict, list))}
    cwd = os.getcwd()
    session._stdout, session._stderr = io.StringIO(), io.StringIO()
    error = None
    import numpy  # noqa: F401 - imported before the states are saved, so that they are restored
    import torch  # noqa: F401
    try:
        with preserved_rng(), contextlib.redirect_stdout(session._stdout), \
                contextlib.redirect_stderr(session._stderr):
            os.chdir(workdir)
            seed_everything(seed)
            try:
                ret = wr.run(list(dataset), session)
            except CannotObserve:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's run raised: reported, never a pass
                reraise_if_interrupted(exc)
                error, ret = f"{type(exc).__name__}: {exc}", None
            end = session.snapshot()
    finally:
        os.chdir(cwd)
        session.close()
        for name, saved in kept.items():
            obj = wr.public[name]
            if isinstance(obj, dict):
                obj.clear()
                obj.update(saved)
            else:
                obj[:] = saved
    public_leaves("returned", ret, end)
    end.update(_files(workdir))
    end["steps_taken"] = len(session.steps)
    if error is not None:
        end["run_error"] = error
    return {"steps": session.steps, "end": end, "attached": len(session._attached), "error": error}


def _trial(wr, dataset, seed, replay=None):
    key = (tuple(id(x) for x in dataset), seed, None if replay is None else id(replay))
    if replay is None and key in wr._cache:
        return wr._cache[key]
    out = _execute(wr, dataset, seed, replay)
    if replay is None:
        wr._cache[key] = out
    return out


def _bindings(b) -> WholeRunBindings:
    wr = getattr(b, "whole_run", None)
    if wr is None:
        raise SkipCheck("missing binding(s): whole_run")
    if not isinstance(wr, WholeRunBindings):
        raise InvalidParameter("whole_run", type(wr).__name__, "None or a privcheck.checks.whole_run."
                               "WholeRunBindings")
    return wr


def _nondeterministic(wr, dataset, seed) -> set:
    """Fields that differ between two runs on the same dataset and seed: not comparable between neighbours."""
    key = ("nondeterministic", seed)     # computed once per seed, on the first dataset asked for
    if key not in wr._cache:
        a = _trial(wr, dataset, seed)
        b = _execute(wr, dataset, seed)
        fields_ = set(compare_public(a["end"], b["end"], 0, 0.0))
        for k, (sa, sb) in enumerate(zip(a["steps"], b["steps"])):
            fields_ |= {f"step[{k}].{f}" for f in compare_public(sa["public"], sb["public"], 0, 0.0)}
            if not _same(sa["g_hat"], sb["g_hat"]):
                fields_.add(f"step[{k}].g_hat")
        if len(a["steps"]) != len(b["steps"]):
            fields_.add("steps_taken")
        # a text stream whose lines vary between identical runs (a progress bar with timings) shifts its later
        # lines too: the whole stream at that snapshot is unobservable ("step[k].stderr[", "stdout[")
        for f in list(fields_):
            m = _STREAM_LINE.match(f)
            if m:
                fields_.add(m.group(1))
        wr._cache[key] = fields_
    return wr._cache[key]


_STREAM_LINE = re.compile(r"^((?:step\[\d+\]\.)?(?:stdout|stderr|log)\[)\d+\]$")


def _unobservable(name: str, nondet: set) -> bool:
    """`name` differs between two runs on the same dataset and seed, or belongs to a stream that does."""
    if name in nondet:
        return True
    m = _STREAM_LINE.match(name)
    return bool(m) and m.group(1) in nondet


def _same(x, y) -> bool:
    return x.shape == y.shape and bool((x == y).all())


def _require_attached(out, label) -> None:
    if out["error"] is not None and not out["steps"]:
        raise CannotObserve(f"the private steps ({label})", f"the run raised before its first private step: "
                            f"{out['error']}")
    if not out["attached"]:
        raise CannotObserve(f"the private steps ({label})", "no private optimizer was attached during the run; "
                            "call session.attach(...) once it exists (an integration does this)")


def _replayed_pairs(b, cases, seeds):
    """For each neighbouring pair and seed: the reference run on D and the replayed run on D' (cached on the
    bindings, shared by `run_sensitivity` and `run_public_outputs`)."""
    wr = _bindings(b)
    key = ("pairs", tuple(cases), seeds)
    if key in wr._cache:
        return wr._cache[key]
    out = []
    for pair in neighbour_pairs(wr.records, wr.addition, removal=wr.removal, absent=wr.absent, cases=cases):
        for t in range(seeds):
            s = t
            ref = _trial(wr, pair.small, s)
            _require_attached(ref, f"{pair.label}, D")
            nb = _execute(wr, pair.big, s, replay=ref["steps"])
            _require_attached(nb, f"{pair.label}, D'")
            out.append((pair, s, ref, nb))
    wr._cache[key] = out
    return out


def _coverage(b, cases, seeds) -> dict:
    """What the replayed pairs covered: positions of the differing record, its kinds, dataset sizes."""
    wr = _bindings(b)
    pair_list = list({pair.label: pair for pair, *_ in _replayed_pairs(b, cases, seeds)}.values())
    return coverage(pair_list, removal=wr.removal, absent=wr.absent)


def _precision(b, precision) -> str:
    p = precision if precision is not None else (getattr(b, "precision", None) or "float64")
    if p not in WHOLE_STEP_TOLERANCES:
        raise InvalidParameter("precision", p, f"None or one of {tuple(WHOLE_STEP_TOLERANCES)}")
    return p


def _options(b, precision, cases, seeds):
    prec = _precision(b, precision)
    wr = getattr(b, "whole_run", None)
    cases = RUN_CASES if cases is None else tuple(cases)
    if not cases or not set(cases) <= {"add", "remove", "empty", "small"} or len(set(cases)) != len(cases):
        raise InvalidParameter("cases", cases, "a non-empty subset of ('add', 'remove', 'empty', 'small')")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise InvalidParameter("seeds", seeds, "None or an integer >= 1")
    n_seeds = seeds if seeds is not None else (wr.seeds if isinstance(wr, WholeRunBindings) else 1)
    inputs = {"cases": list(cases), "seeds": n_seeds}
    if isinstance(wr, WholeRunBindings) and wr.check_mode:
        inputs["check_mode"] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in wr.check_mode.items()}
    return prec, cases, n_seeds, inputs


# --------------------------------------------------------------------------------------------- checks

def check_run_sensitivity(b, precision: str | None = None, *, cases: Sequence[str] | None = None,
                          seeds: int | None = None) -> CheckResult:
    """`run_sensitivity`: at every private step of the whole run, ‖ĝ'_t − ĝ_t‖·divisor/C ≤ 1 + allowance on
    coupled neighbours with the earlier updates replayed (module docstring).

    Allowance as `step_sensitivity`: record_rel·(records summed) + hat_multiple·ε·(‖ĝ_t‖ + ‖ĝ'_t‖)·divisor/C.
    Required: for every pair a step in which the differing record changed ĝ (or was seen sampled); the two runs
    take the same number of private steps. Deterministic given the seeds: no false failures."""
    prec, cases, n_seeds, inputs = _options(b, precision, cases, seeds)
    tol = WHOLE_STEP_TOLERANCES[prec]

    def fn():
        import torch

        wr = _bindings(b)
        C, d = float(wr.clip_norm), float(wr.divisor)
        failures, per_pair, worst, worst_at, sizes = [], {}, 0.0, None, set()
        unobservable = set()
        for pair, s, ref, nb in _replayed_pairs(b, cases, n_seeds):
            nondet = _nondeterministic(wr, pair.small, s)
            stats = per_pair.setdefault(pair.label, {"runs": 0, "steps": 0, "nonzero_steps": 0, "max_ratio": 0.0})
            stats["runs"] += 1
            if len(ref["steps"]) != len(nb["steps"]):
                failures.append(f"{pair.label} seed {s}: private steps taken {len(ref['steps'])} on D vs "
                                f"{len(nb['steps'])} on D' (the number of steps depends on the data)")
            for k, (sa, sz) in enumerate(zip(ref["steps"], nb["steps"])):
                if f"step[{k}].g_hat" in nondet:
                    unobservable.add(f"g_hat at step {k}")
                    continue
                stats["steps"] += 1
                ga, gz = sa["g_hat"], sz["g_hat"]
                if ga.shape != gz.shape:
                    failures.append(f"{pair.label} seed {s} step {k}: ĝ has {ga.numel()} vs {gz.numel()} entries")
                    continue
                dtype = sz["dtype"] or sa["dtype"]
                eps = torch.finfo(dtype).eps if dtype is not None and dtype.is_floating_point else tol["eps"]
                diff = norm(gz - ga)
                ratio = diff * d / C if math.isfinite(diff) else math.inf
                summed = (len(sa["sampled"]) + len(sz["sampled"]) if sa["sampled"] is not None
                          and sz["sampled"] is not None else len(pair.small) + len(pair.big))
                if sz["sampled"] is not None:
                    sizes.add(len(sz["sampled"]))
                allowance = tol["record_rel"] * summed + tol["hat_multiple"] * eps * (norm(ga) + norm(gz)) * d / C
                stats["nonzero_steps"] += int(diff > 0)
                stats["max_ratio"] = max(stats["max_ratio"], ratio)
                if ratio > worst:
                    worst, worst_at = ratio, f"{pair.label} seed {s} step {k}"
                # the differing record not in D''s batch: same θ, coins, rollouts and noise, so ĝ is the same; a
                # difference is state carried from that record into other records or steps (e.g. a reward function)
                unsampled = sz["sampled"] is not None and pair.index not in sz["sampled"]
                if unsampled and ratio > allowance:
                    failures.append(f"{pair.label} seed {s} step {k}: ‖Δĝ‖·divisor/C = {ratio:.6g} although the "
                                    f"differing record was not sampled (bound {allowance:.3g}: rounding only; state "
                                    "carried across records or steps)")
                elif ratio > 1 + allowance:
                    failures.append(f"{pair.label} seed {s} step {k}: ‖Δĝ‖·divisor/C = {ratio:.6g} "
                                    f"(bound 1 + {allowance:.3g})")
        for label, st in per_pair.items():
            if st["nonzero_steps"] == 0 and st["steps"]:
                failures.append(f"{label}: inconclusive, the differing record never changed ĝ in {st['runs']} runs "
                                f"({st['steps']} steps)")
        if unobservable:
            failures.append("cannot observe " + ", ".join(sorted(unobservable)[:4]) + ": ĝ differs between two "
                            "runs on the same dataset and seed (the run is not reproducible in check mode)")
        observed = {"max_ratio": worst, "worst": worst_at, "pairs": per_pair, "batch_sizes_seen": sorted(sizes),
                    "neighbours": _coverage(b, cases, n_seeds), "failures": failures[:20]}
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed, "expected": {"max_ratio": 1.0},
                "tolerance": {"record_rel": tol["record_rel"], "hat_multiple": tol["hat_multiple"]},
                "message": "; ".join(failures[:6]) if failures else
                f"max ‖Δĝ‖·divisor/C = {worst:.6g} ≤ 1 at every step of {sum(p['runs'] for p in per_pair.values())} "
                f"replayed runs ({worst_at})"}

    return evaluate(b, "run_sensitivity", prec, "sensitivity of one record at every step of the whole run: "
                   "‖clip_C(g)‖ ≤ C over the public divisor, earlier noisy updates replayed", inputs, fn)


def _step_of(name: str) -> int:
    return int(name[5:name.index("]")]) if name.startswith("step[") else -1


def check_run_public_outputs(b, precision: str | None = None, *, cases: Sequence[str] | None = None,
                             seeds: int | None = None) -> CheckResult:
    """`run_public_outputs`: with every noisy update replayed, every public output of the whole run is the same
    on neighbours (module docstring); a difference is a leak named by field and step ("step[k]." = the state
    before the k-th private update; no prefix = the end of the run). Fields that differ between two runs on the
    same dataset and seed are reported as unobservable. Tolerance: `public_ulps` of the precision (bit identity
    in float64). Deterministic: no false failures."""
    prec, cases, n_seeds, inputs = _options(b, precision, cases, seeds)
    tol = WHOLE_STEP_TOLERANCES[prec]
    ulps = int(tol["public_ulps"])

    def fn():
        wr = _bindings(b)
        leaks: dict[str, dict] = {}
        unobservable, through, n_fields, runs = set(), set(), 0, 0
        for pair, s, ref, nb in _replayed_pairs(b, cases, n_seeds):
            runs += 1
            nondet = _nondeterministic(wr, pair.small, s)
            # the steps both runs took (a different number of steps is the leak "steps_taken" of the end)
            compared = [(f"step[{k}].", sa["public"], sz["public"]) for k, (sa, sz) in
                        enumerate(zip(ref["steps"], nb["steps"]))]
            compared.append(("", ref["end"], nb["end"]))
            for sz in nb["steps"]:
                through.add(sz["through"])
            for prefix, a, z in compared:
                n_fields += len(a)
                for key, what in compare_public(a, z, ulps, tol["eps"]).items():
                    name = prefix + key
                    if _unobservable(name, nondet):
                        unobservable.add(name)
                        continue
                    entry = leaks.setdefault(name, {"runs": 0, "first": {"pair": pair.label, "seed": s,
                                                                         "difference": what}})
                    entry["runs"] += 1
        failures = []
        if leaks:   # the end of the run first (steps taken, files, returned value), then by step
            order = sorted(leaks, key=lambda k: (k.startswith("step["), _step_of(k), k))
            leaks = {k: leaks[k] for k in order}
            failures.append("leak: " + ", ".join(f"{k} ({v['first']['difference']}; {v['runs']}/{runs} runs)"
                                                 for k, v in list(leaks.items())[:8]))
        observed = {"leaks": leaks, "leak_fields": sorted(leaks), "fields_compared": n_fields, "runs": runs,
                    "neighbours": _coverage(b, cases, n_seeds),
                    "unobservable": sorted(unobservable), "g_hat_replayed_through": sorted(through)}
        note = (f"; not observable (differ between two runs on the same data and seed): "
                f"{', '.join(sorted(unobservable)[:5])}" if unobservable else "")
        return {"passed": not failures, "observed": observed, "expected": {"leak_fields": []},
                "tolerance": {"public_ulps": ulps},
                "message": ("; ".join(failures) if failures else
                            f"{n_fields} public fields identical on neighbours over {runs} replayed runs") + note}

    return evaluate(b, "run_public_outputs", prec, "post-processing over the whole run: with every noisy update "
                   "replayed, the run's public outputs are functions of public inputs only", inputs, fn)


def check_run_poisson_sampling(b, precision: str | None = None, *, runs: int | None = None) -> CheckResult:
    """`run_poisson_sampling`: over every round of `runs` whole runs on D + [x] ("absent": slot 1 made absent),
    through the trainer's own loader, each present record's inclusions are independent Bernoulli(q) draws.

    Exact two-sided binomial tests, Bonferroni at α = 1e-7 (false failure below 1e-7): per record, inclusion in
    N rounds ~ Bin(N, q); per record, inclusion in two consecutive rounds ~ Bin(N', q²) (N' consecutive pairs);
    per pair of records, joint inclusion ~ Bin(N, q²); batch size b ~ Bin(N, C(m, b) q^b (1 − q)^(m − b)).
    Deterministic: an absent slot, a duplicate or an out-of-range index never sampled; every run takes the same
    number of rounds. Skipped without `sampled` in `session.attach`."""
    prec = _precision(b, precision)
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 2):
        raise InvalidParameter("runs", runs, "None or an integer >= 2")
    wr0 = getattr(b, "whole_run", None)
    n_runs = runs if runs is not None else (wr0.sampling_runs if isinstance(wr0, WholeRunBindings) else 2)
    inputs = {"runs": n_runs, "alpha": ALPHA}
    if isinstance(wr0, WholeRunBindings) and wr0.check_mode:     # recorded in every result, as in _options
        inputs["check_mode"] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in wr0.check_mode.items()}

    def fn():
        import numpy as np

        from privcheck.checks.statistics import binomial_family

        wr = _bindings(b)
        dataset = list(wr.records) + [wr.addition]
        if wr.removal == "absent":
            dataset[1] = wr.absent
        present = [i for i, x in enumerate(dataset) if not (wr.removal == "absent" and x is wr.absent)]
        m, q = len(present), float(wr.sampling_rate)
        rounds, failures, lengths = [], [], set()
        for t in range(n_runs):
            out = _execute(wr, dataset, SAMPLING_SEED0 + t)
            _require_attached(out, "sampling")
            lengths.add(len(out["steps"]))
            rows = []
            for k, st in enumerate(out["steps"]):
                if st["sampled"] is None:
                    raise SkipCheck("missing binding: sampled (RunSession.attach(sampled=...))")
                bad = [i for i in st["sampled"] if i not in present]
                if bad or len(set(st["sampled"])) != len(st["sampled"]):
                    failures.append(f"run {t} round {k}: sampled {st['sampled']} (present records {present})")
                rows.append([i in st["sampled"] for i in present])
            rounds.append(np.array(rows, dtype=bool).reshape(-1, m))
        if len(lengths) > 1:
            failures.append(f"rounds per run differ between runs: {sorted(lengths)} (a data-dependent stopping rule)")
        allr = np.concatenate(rounds) if rounds else np.zeros((0, m), dtype=bool)
        N = allr.shape[0]
        cons = [(r[:-1] & r[1:]) for r in rounds if r.shape[0] > 1]
        N2 = sum(c.shape[0] for c in cons)
        tests = []
        for k, i in enumerate(present):
            tests.append((f"inclusion rate of record {i}", int(allr[:, k].sum()), N, q))
            if N2:
                tests.append((f"record {i} in two consecutive rounds", int(sum(c[:, k].sum() for c in cons)), N2,
                              q * q))
        for k in range(m):
            for k2 in range(k + 1, m):
                tests.append((f"joint inclusion of {present[k]} and {present[k2]}",
                              int((allr[:, k] & allr[:, k2]).sum()), N, q * q))
        sizes = allr.sum(axis=1)
        for size in range(m + 1):
            tests.append((f"batch size {size}", int((sizes == size).sum()), N,
                          math.comb(m, size) * q ** size * (1 - q) ** (m - size)))
        if N == 0:
            raise CannotObserve("the sampling", "no private round was taken in any run")
        fam = binomial_family(tests, ALPHA)
        report, worst, alpha_each = fam["report"], fam["worst"], fam["alpha_each"]
        failures += fam["failures"]
        observed = {"runs": n_runs, "rounds": N, "present": present, "q": q, "tests": report,
                    "worst_p_value": worst[0], "worst_test": worst[1], "failures": failures[:20]}
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                "expected": {"mean_batch_size": q * m},
                "tolerance": {"alpha": ALPHA, "alpha_per_test": alpha_each},
                "message": "; ".join(failures[:6]) if failures else
                f"{len(tests)} exact binomial tests passed over {N} rounds of {n_runs} runs (worst p-value "
                f"{worst[0]:.3g}: {worst[1]})"}

    return evaluate(b, "run_poisson_sampling", prec, "Poisson subsampling across rounds: independent Bernoulli(q) "
                   "inclusion per record and round (exact binomial tests)", inputs, fn)


def check_run_noise(b, precision: str | None = None, *, runs: int = 8) -> CheckResult:
    """`run_noise`: every noisy update of `runs` whole runs on the EMPTY dataset ([] for "drop", every slot
    absent) is N(0, s²) per coordinate, s = σ·C/divisor — the noise the accountant assumes, at every step,
    whatever the batch (a scale read from the records, zero for an empty batch, shows here).

    Exact tests (scipy), Bonferroni at α = 1e-7 over 2·(1 + T) tests (false failure below 1e-7): mean
    Σĝ/(s√N) ~ N(0, 1) and scale Σĝ²/s² ~ χ²_N, overall and per step index. Deterministic: every run takes the
    same number of private steps, at least one (a skipped step reveals an empty batch); nothing is sampled; no
    coordinate is 0 on every draw; no two draws are equal. With σ = 0 every ĝ must be exactly 0."""
    prec = _precision(b, precision)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise InvalidParameter("runs", runs, "an integer >= 2")
    inputs = {"runs": runs, "alpha": ALPHA}
    wr0 = getattr(b, "whole_run", None)
    if isinstance(wr0, WholeRunBindings) and wr0.check_mode:     # recorded in every result, as in _options
        inputs["check_mode"] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in wr0.check_mode.items()}

    def fn():
        import torch
        from scipy import stats

        wr = _bindings(b)
        empty = [] if wr.removal == "drop" else [wr.absent] * (len(wr.records) + 1)
        s = float(wr.noise_multiplier) * float(wr.clip_norm) / float(wr.divisor)
        failures, per_run = [], []
        for t in range(runs):
            out = _execute(wr, empty, SAMPLING_SEED0 + 500_000 + t)
            _require_attached(out, "noise, empty dataset")
            if not out["steps"]:
                failures.append(f"run {t}: no private step on the empty dataset (a skipped step reveals that the "
                                "batch was empty)")
                continue
            for k, st in enumerate(out["steps"]):
                if st["sampled"]:
                    failures.append(f"run {t} step {k}: sampled {st['sampled']} from the empty dataset")
            per_run.append(torch.stack([st["g_hat"] for st in out["steps"]]))
        lengths = sorted({r.shape[0] for r in per_run})
        if len(lengths) > 1:
            failures.append(f"private steps on the empty dataset differ between runs: {lengths}")
        observed = {"runs": runs, "target_std": s, "failures": failures}
        if not per_run or len(lengths) > 1:
            return {"passed": False, "observed": observed, "expected": {"std": s}, "tolerance": None,
                    "message": "; ".join(failures[:3])}
        Z = torch.stack(per_run)                 # runs × steps × coordinates
        if s == 0:
            zero = bool((Z == 0).all())
            return {"passed": zero and not failures, "observed": {**observed, "max_abs": float(Z.abs().max())},
                    "expected": {"g_hat": 0.0}, "tolerance": 0.0,
                    "message": "; ".join(failures) or ("σ = 0: ĝ exactly 0" if zero else
                                                        "σ = 0 declared but ĝ on the empty dataset is not 0")}
        T = Z.shape[1]
        z_mean_crit = stats.norm.isf(ALPHA / (4 * (1 + T)))
        groups = [("all steps", Z.reshape(-1))] + [(f"step {k}", Z[:, k, :].reshape(-1)) for k in range(T)]
        report = {}
        for label, x in groups:
            N = x.numel()
            mean_z = float(x.sum()) / (s * math.sqrt(N))
            chi = float((x / s).pow(2).sum())
            p_scale = 2 * min(float(stats.chi2.cdf(chi, N)), float(stats.chi2.sf(chi, N)))
            ratio = math.sqrt(chi / N)
            report[label] = {"n": N, "std_ratio": ratio, "mean_z": mean_z, "scale_p_value": p_scale}
            if abs(mean_z) > z_mean_crit:
                failures.append(f"{label}: mean of ĝ {mean_z:.3g} standard errors from 0 (bound {z_mean_crit:.3g})")
            if p_scale < ALPHA / (2 * (1 + T)):
                failures.append(f"{label}: std of ĝ = {ratio:.5g}·σC/divisor (expected 1, p-value {p_scale:.3g})")
        flat = Z.reshape(-1, Z.shape[-1])
        dead = (flat == 0).all(dim=0)
        if bool(dead.any()):
            failures.append(f"{int(dead.sum())} coordinates of ĝ are 0 on every draw (no noise there)")
        if len({tuple(row[:32].tolist()) + (float(row.sum()),) for row in flat}) < flat.shape[0]:
            failures.append("two steps gave the same ĝ (the noise is not drawn afresh)")
        observed.update(tests=report, steps=T, std_ratio=report["all steps"]["std_ratio"])
        return {"passed": not failures, "rule": NONE_FAILED, "observed": observed,
                "expected": {"std_ratio": 1.0, "mean_z": 0.0},
                "tolerance": {"alpha": ALPHA, "z_mean_critical": z_mean_crit},
                "message": "; ".join(failures[:6]) if failures else
                f"ĝ ~ N(0, (σC/divisor)²) over {flat.numel()} coordinates of {runs} runs × {T} steps "
                f"(std {report['all steps']['std_ratio']:.5g}·σC/divisor)"}

    return evaluate(b, "run_noise", prec, "Gaussian mechanism at every step of the whole run: N(0, σ²C²) before "
                   "division by the public divisor (exact normal mean and χ² scale tests)", inputs, fn)


WHOLE_RUN_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "run_sensitivity": check_run_sensitivity,
    "run_public_outputs": check_run_public_outputs,
    "run_noise": check_run_noise,
    "run_poisson_sampling": check_run_poisson_sampling,
}
