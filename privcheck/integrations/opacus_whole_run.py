"""Whole-run checks of an Opacus user's whole script (docs/integrations/opacus.md, "Verify the whole run").

```python
bindings = whole_run_bindings(train, dataset, delta=1e-5)     # train(dataset): the user's script, unchanged
results = run_suite(bindings, checks=list(WHOLE_RUN_CHECKS))
```

`train(dataset)` is the user's script as a function: model construction, anything before the private phase,
`PrivacyEngine().make_private(...)` (or `make_private_with_epsilon`), their loop, schedules, logging, checkpoints.
privcheck runs it as it is and intercepts Opacus: for the duration of each run `PrivacyEngine.make_private` and
`make_private_with_epsilon` are patched on the class (restored afterwards, also on error). Opacus's own
`make_private` still builds the GradSampleModule, DPOptimizer and DPDataLoader; privcheck then

1. learns the REAL parameters by a dry run of `train(real dataset)` stopped at its first private step (q, σ, C,
   the divisor, loss_reduction, steps per epoch, epochs where visible; RNG state, directory, stdout restored);
2. runs the whole-run checks (`privcheck.checks.whole_run`) on a fixed universe of `records` + 1 slots of real
   records (n is public: every neighbour has the same length, an absent slot is a placeholder that the
   Poisson sampler never draws), at the real σ, C and divisor and a public check-mode q = max(q, 0.5); every
   difference from the real run is recorded in `WholeRunBindings.check_mode` and in every result;
3. in each check-mode run: seeds the DPOptimizer's noise generator, replaces the DPDataLoader's batch sampler by
   Opacus's Poisson sampler coupled across neighbours and rounds (coins of round r drawn from a generator seeded
   by (seed, r): the record in slot i gets the same coin on both neighbours whatever else the run draws), and
   attaches the session (model = the GradSampleModule, optimizer = `original_optimizer`, private parameters =
   `DPOptimizer.params`, sampled = the dataset indices fetched since the previous private step, public outputs =
   the DPOptimizer's noise_multiplier/max_grad_norm/expected_batch_size and the accountant's history); the
   DPDataLoader loads in this process (num_workers 0, recorded), where the fetches are observed.

Seeded check-mode runs are never a privacy release. Opacus and torch are imported inside the functions.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from privcheck import validation as v
from privcheck.errors import CannotObserve, InvalidParameter
from privcheck.interrupts import reraise_if_interrupted
from privcheck.randomness import derive_seed
from privcheck.rng_state import preserved_rng

__all__ = ["ABSENT", "CHECK_RECORDS", "CHECK_SAMPLING_RATE", "CheckDataset", "RealRun", "learn_real_run",
           "whole_run_bindings"]

SEED_NAMESPACE = "privcheck.integrations.opacus_whole_run"
CHECK_RECORDS = 8            # real records of the check universe (plus the addition's slot)
CHECK_SAMPLING_RATE = 0.5    # the least check-mode q (public): coverage of every neighbouring pair in few rounds
_EPSILON_ONLY = ("target_epsilon", "target_delta", "epochs", "epsilon_tolerance")


class _Absent:
    """The placeholder of an absent slot in the neighbouring universes (removal "absent")."""

    def __repr__(self):
        return "<absent>"


ABSENT = _Absent()


class _FirstStep(BaseException):
    """Raised in the dry run's step pre-hook: the real parameters are known, the rest of the script is not run
    (a BaseException, so that a script's `except Exception` does not swallow it)."""


@dataclass(frozen=True)
class RealRun:
    """What the dry run of the user's script on the real dataset learned (the values Opacus itself uses)."""

    q: float
    sigma: float
    C: float
    divisor: float
    expected_batch_size: Any
    loss_reduction: str
    n: int
    steps_per_epoch: int
    epochs: int | None
    poisson_sampling: bool
    num_workers: int
    entry: str                  # "make_private" or "make_private_with_epsilon"
    accountant: Any             # a copy of the engine's accountant (empty history)
    dtype: Any


class CheckDataset:
    """A map-style dataset over the slots of a check universe: slot i is the record there, or a placeholder
    (`placeholder`) when absent. Every index fetched in this process is recorded (`fetched`): the records a
    private step really used."""

    def __init__(self, slots: Sequence, placeholder):
        self.slots, self.placeholder = list(slots), placeholder
        self.fetched: list[int] = []

    def __len__(self):
        return len(self.slots)

    def __getitem__(self, i):
        i = int(i)
        x = self.slots[i]
        self.fetched.append(i)
        return self.placeholder if x is ABSENT else x


def _placeholder(record):
    """A record shaped like `record` with every floating-point tensor zeroed (integer fields kept)."""
    import torch

    def blank(f):
        return torch.zeros_like(f) if isinstance(f, torch.Tensor) and f.is_floating_point() else copy.deepcopy(f)

    if isinstance(record, (tuple, list)):
        return type(record)(blank(f) for f in record)
    return blank(record)


@contextlib.contextmanager
def _intercept(after_make_private: Callable, with_epsilon: Callable):
    """Patch `PrivacyEngine.make_private` and `make_private_with_epsilon` on the class for one run; restored on
    exit, also on error. `after_make_private(engine, kwargs, out)` sees what Opacus's own make_private built;
    `with_epsilon(engine, kwargs, original)` replaces make_private_with_epsilon (`original`: Opacus's)."""
    from opacus import PrivacyEngine

    original, original_eps = PrivacyEngine.make_private, PrivacyEngine.make_private_with_epsilon

    def make_private(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        after_make_private(self, kwargs, out)
        return out

    def make_private_with_epsilon(self, *args, **kwargs):
        if args:
            raise InvalidParameter("make_private_with_epsilon", f"{len(args)} positional argument(s)",
                                   "keyword arguments (Opacus's signature)")
        return with_epsilon(self, kwargs, original_eps)

    PrivacyEngine.make_private, PrivacyEngine.make_private_with_epsilon = make_private, make_private_with_epsilon
    try:
        yield
    finally:
        PrivacyEngine.make_private, PrivacyEngine.make_private_with_epsilon = original, original_eps


def _parts(out):
    """(GradSampleModule, DPOptimizer, data loader) of make_private's return value (3 or 4 items)."""
    return out[0], out[1], out[-1]


@contextlib.contextmanager
def _elsewhere():
    """The dry run: in a scratch directory, its standard output discarded, the global RNG state restored."""
    cwd, scratch = os.getcwd(), tempfile.mkdtemp(prefix="privcheck-dry-run-")
    try:
        with preserved_rng(), contextlib.redirect_stdout(io.StringIO()):
            os.chdir(scratch)
            yield
    finally:
        os.chdir(cwd)
        shutil.rmtree(scratch, ignore_errors=True)


def learn_real_run(train: Callable, dataset) -> RealRun:
    """Run `train(dataset)` up to its first private optimizer step and return the parameters Opacus uses
    (q, σ, C, divisor, ...). That step is not applied; RNG state, working directory and stdout are restored."""
    from privcheck.checks.common import DropoutEnabled, assert_no_dropout
    from privcheck.integrations.opacus_run import opacus_parameters

    seen: dict = {}

    def after(engine, kwargs, out):
        model, opt, loader = _parts(out)
        if "real" in seen:          # a second private phase (check mode reports it as not observable)
            return
        assert_no_dropout(model)       # DropoutEnabled: masks by batch position are not coupled between neighbours
        p = opacus_parameters(opt, loader)
        seen["real"] = dict(q=p["q"], sigma=p["sigma"], C=p["C"], divisor=p["divisor"],
                            expected_batch_size=p["expected_batch_size"], loss_reduction=p["loss_reduction"],
                            n=len(loader.dataset), steps_per_epoch=len(loader),
                            poisson_sampling=bool(kwargs.get("poisson_sampling", True)),
                            num_workers=int(getattr(loader, "num_workers", 0) or 0),
                            entry=seen.get("entry", "make_private"), epochs=seen.get("epochs"),
                            accountant=copy.deepcopy(engine.accountant), dtype=opt.params[0].dtype)

        def stop(_optimizer, _args, _kwargs):
            raise _FirstStep

        opt.original_optimizer.register_step_pre_hook(stop)

    def with_epsilon(engine, kwargs, original):
        seen.setdefault("entry", "make_private_with_epsilon")
        seen.setdefault("epochs", kwargs.get("epochs"))
        return original(engine, **kwargs)        # Opacus's: it calls the patched make_private

    try:
        with _elsewhere(), _intercept(after, with_epsilon):
            train(dataset)
    except _FirstStep:
        pass
    except (InvalidParameter, DropoutEnabled):
        raise
    except Exception as exc:  # noqa: BLE001 - the user's script failed before its first private step
        reraise_if_interrupted(exc)
        raise InvalidParameter("train", f"raised {type(exc).__name__}: {exc}",
                               "the user's script train(dataset); it must run on the real dataset up to its "
                               "first private step") from exc
    if "real" not in seen:
        raise InvalidParameter("train", "never called PrivacyEngine.make_private or make_private_with_epsilon",
                               "the user's script train(dataset), made private with Opacus's PrivacyEngine")
    return RealRun(**seen["real"])


@functools.cache
def _sampler_class():
    """Opacus's Poisson sampler with its coins coupled across neighbours and rounds."""
    import torch
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    class CoupledPoissonSampler(UniformWithReplacementSampler):
        """Round r: slot i is in the batch iff U_i < q, U = torch.rand(n) from a generator seeded by (seed, r);
        absent slots are never drawn. The same seed gives every slot the same coin on every neighbour (n is
        fixed), whatever else the run draws in between."""

        def __init__(self, *, num_samples, sample_rate, steps, seed, present):
            super().__init__(num_samples=num_samples, sample_rate=sample_rate, steps=steps)
            self.seed, self.present, self.round = seed, present, 0

        def __iter__(self):
            for _ in range(self.steps):
                g = torch.Generator().manual_seed(derive_seed(self.seed, f"coins/{self.round}", SEED_NAMESPACE))
                self.round += 1
                mask = (torch.rand(self.num_samples, generator=g) < self.sample_rate) & self.present
                yield mask.nonzero().reshape(-1).tolist()

    return CoupledPoissonSampler


def _present(ds) -> list[bool]:
    """For each index of `ds` (the check universe, or a `Subset` of it, nested): whether its slot is present."""
    from torch.utils.data import Subset

    if isinstance(ds, CheckDataset):
        return [x is not ABSENT for x in ds.slots]
    if isinstance(ds, Subset):
        inner = _present(ds.dataset)
        return [inner[int(i)] for i in ds.indices]
    return [True] * len(ds)


def _declared(public) -> dict:
    """{name: object} of the user's extra public outputs (`public=`), validated."""
    if public is None:
        return {}
    if callable(public) and not isinstance(public, Mapping):
        return {"public": public}
    if not isinstance(public, Mapping):
        raise InvalidParameter("public", type(public).__name__, "None, a mapping {name: object, callable or "
                                                                "logging.Logger} or a callable () -> mapping")
    for name in public:
        if not isinstance(name, str) or not name:
            raise InvalidParameter("public", name, "names that are non-empty strings")
    return dict(public)


def _resetter(declared: Mapping) -> Callable[[], None]:
    """Put every declared dict or list back to its content now (after the dry run)."""
    saved = [(obj, copy.deepcopy(obj)) for obj in declared.values() if isinstance(obj, (dict, list))]

    def reset():
        for obj, content in saved:
            obj.clear()
            (obj.update if isinstance(obj, dict) else obj.extend)(copy.deepcopy(content))

    return reset


def _count(name, value, least, what):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise InvalidParameter(name, value, f"None or an integer >= {least} ({what})")
    return value


def whole_run_bindings(train: Callable, dataset, *, delta: float, records: Sequence | None = None,
                       public=None, seeds: int | None = None, sampling_runs: int | None = None,
                       sampling_rate: float | None = None, steps_per_epoch: int | None = None,
                       steps: int | None = None):
    """`SuiteBindings` with `whole_run` for the user's whole Opacus script `train(dataset)` (module docstring).

    `dataset`: the REAL training dataset (map-style: len and indexing). `delta`: the δ of the user's claim.
    `records`: the check universe's real records, the last one the addition x (default: the first
    CHECK_RECORDS + 1 of `dataset`; at least 3). `public`: extra public outputs ({name: dict, list, callable or
    logging.Logger}, or one callable); declared dicts and lists are put back after the dry run and after
    every check run. `seeds`: runs per neighbouring pair (default 2); `sampling_runs`: runs of run_poisson_sampling
    (default 40). `sampling_rate`: the check-mode q (default max(q, CHECK_SAMPLING_RATE)); `steps_per_epoch`: of
    the check-mode DPDataLoader (default int(1/check q), Opacus's own rule). `steps`: the planned T for the
    accountant fields (default epochs × steps per epoch when make_private_with_epsilon names the epochs)."""
    import torch

    from privcheck.checks.common import SuiteBindings
    from privcheck.checks.whole_run import WholeRunBindings

    if not callable(train):
        raise InvalidParameter("train", train, "a callable train(dataset): the user's script")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise InvalidParameter("dataset", type(dataset).__name__, "a map-style dataset (len and indexing)")
    delta = v.open_unit("delta", delta)
    declared = _declared(public)
    seeds = _count("seeds", seeds, 1, "runs per neighbouring pair")
    sampling_runs = _count("sampling_runs", sampling_runs, 2, "runs of run_poisson_sampling")
    steps_per_epoch = _count("steps_per_epoch", steps_per_epoch, 1, "rounds per epoch in check mode")
    steps = _count("steps", steps, 1, "the planned number of private steps")
    if sampling_rate is not None:
        sampling_rate = v.sampling_rate("sampling_rate", sampling_rate)
    if records is None:
        if len(dataset) < CHECK_RECORDS + 1:
            raise InvalidParameter("dataset", f"{len(dataset)} records", f"at least {CHECK_RECORDS + 1} records, "
                                                                         "or records=")
        records = [dataset[i] for i in range(CHECK_RECORDS + 1)]
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or len(records) < 3:
        raise InvalidParameter("records", type(records).__name__, "None or a sequence of at least 3 records")
    records = list(records)

    reset = _resetter(declared)
    try:
        real = learn_real_run(train, dataset)
    finally:
        reset()                 # what the dry run put in declared dicts and lists is not kept
    q_check = sampling_rate if sampling_rate is not None else max(real.q, CHECK_SAMPLING_RATE)
    per_epoch = steps_per_epoch if steps_per_epoch is not None else max(1, int(1 / q_check))
    base, addition = records[:-1], records[-1]
    placeholder = _placeholder(base[0])

    def run(slots, session):        # declared dicts and lists: the engine restores them after every run
        data = CheckDataset(slots, placeholder)
        state = {"phases": 0}

        def after(engine, kwargs, out):
            from opacus.data_loader import DPDataLoader

            model, opt, loader = _parts(out)
            phase = state["phases"]
            state["phases"] += 1
            if phase:
                raise CannotObserve("a second private phase (make_private called again)", "its real parameters are "
                                    "not known (the dry run stops at the first private step)")
            # the real run's σ, C and divisor (Opacus derived its own from the check universe's length)
            opt.noise_multiplier, opt.max_grad_norm = real.sigma, real.C
            opt.expected_batch_size = real.expected_batch_size
            # on the parameters' device: Opacus draws the noise there with this generator
            opt.generator = torch.Generator(device=opt.params[0].device).manual_seed(
                derive_seed(session.seed, "noise", SEED_NAMESPACE))
            if isinstance(loader, DPDataLoader):
                ds = loader.dataset
                present = torch.tensor(_present(ds), dtype=torch.bool)
                sampler = _sampler_class()(num_samples=len(ds), sample_rate=q_check, steps=per_epoch,
                                           seed=derive_seed(session.seed, "coins", SEED_NAMESPACE),
                                           present=present)
                object.__setattr__(loader, "batch_sampler", sampler)    # DataLoader forbids setattr after init
                loader.sample_rate = q_check
                loader.num_workers = 0     # fetches in this process, where they are observed (check_mode)
            opt.step_hook = None
            opt.attach_step_hook(engine.accountant.get_optimizer_hook_fn(sample_rate=q_check))
            names = {id(p): k for k, p in model.named_parameters()}
            data.fetched.clear()

            def sampled():         # the indices fetched since the previous private step: what the step used
                return list(data.fetched)

            def public_outputs():
                out_ = {k: getattr(opt, k, None) for k in ("noise_multiplier", "max_grad_norm",
                                                           "expected_batch_size")}
                out_["sample_rate"] = getattr(loader, "sample_rate", None)
                out_["accountant_history"] = [list(h) for h in engine.accountant.history]
                return out_

            session.attach(model=model, optimizer=opt.original_optimizer,
                           private_parameters=[names[id(p)] for p in opt.params], sampled=sampled,
                           public_outputs=public_outputs)

            def next_step(_optimizer, _args, _kwargs):     # registered after the session's hook: runs after it
                data.fetched.clear()

            opt.original_optimizer.register_step_pre_hook(next_step)

        def with_epsilon(engine, kwargs, original):
            # check mode keeps the real σ (Opacus would calibrate it anew on the universe's length)
            rest = {k: x for k, x in kwargs.items() if k not in _EPSILON_ONLY}
            return engine.make_private(noise_multiplier=real.sigma, **rest)

        with _intercept(after, with_epsilon):
            return train(data)

    n_check = len(base) + 1
    check_mode = {
        "n": {"real": real.n, "checked": n_check},
        "records": {"real": f"the {real.n} records of the dataset",
                    "checked": f"{len(base)} real records and one addition slot (absent slots never sampled)"},
        "randomness": {"real": "the script's own generators (fresh)",
                       "checked": "seeded per run: torch/numpy/random global generators, the DPOptimizer's noise "
                                  "generator, Poisson coins per (seed, round); never a privacy release"},
    }
    if q_check != real.q:
        check_mode["sampling_rate"] = {"real": real.q, "checked": q_check}
    if per_epoch != real.steps_per_epoch:
        check_mode["steps_per_epoch"] = {"real": real.steps_per_epoch, "checked": per_epoch}
    if real.entry == "make_private_with_epsilon":
        check_mode["noise_multiplier"] = {"real": f"{real.sigma} (calibrated by make_private_with_epsilon)",
                                          "checked": f"{real.sigma} (the real one, not calibrated anew)"}
    if real.num_workers:
        check_mode["num_workers"] = {"real": real.num_workers, "checked": 0}
    if not real.poisson_sampling:
        check_mode["poisson_sampling"] = {"real": False, "checked": False}
    planned = steps if steps is not None else (real.epochs * real.steps_per_epoch if real.epochs else None)
    wr = WholeRunBindings(run=run, records=base, addition=addition, clip_norm=real.C, divisor=real.divisor,
                          noise_multiplier=real.sigma, sampling_rate=q_check, removal="absent", absent=ABSENT,
                          seeds=2 if seeds is None else seeds, public=declared or None, check_mode=check_mode,
                          sampling_runs=40 if sampling_runs is None else sampling_runs)
    event = user_epsilon = None
    if planned is not None:
        from privcheck.accounting.events import PoissonGaussianEvent

        event = PoissonGaussianEvent(real.q, real.sigma, planned)
        accountant = copy.deepcopy(real.accountant)
        accountant.history = [(real.sigma, real.q, planned)]

        def user_epsilon() -> float:
            return float(accountant.get_epsilon(delta))

    precision = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(real.dtype)
    return SuiteBindings(whole_run=wr, precision=precision, delta=delta, q=real.q, n=real.n, sigma=real.sigma,
                         C=real.C, accountant_event=event, user_epsilon=user_epsilon,
                         target=f"opacus-run:{getattr(train, '__name__', type(train).__name__)}")
