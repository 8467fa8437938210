"""privcheck for Opacus: `bindings_for` binds the DP-SGD checks to the user's own Opacus run, and
`GradientCanaries` injects Dirac gradient canaries for a one-run audit (docs/integrations/opacus.md).

```python
bindings = bindings_for(privacy_engine, model, optimizer, data_loader, train_step, delta=1e-5)
results = run_suite(bindings)
```

The default binding is what the user's loop runs: the data loader it iterates (its batch sampler, so a plain
shuffled fixed-size loader fails the Poisson checks), the `train_step(batch)` it calls (forward, backward and
`optimizer.step()`), and the update as the wrapped optimizer receives it (a step pre-hook of
`DPOptimizer.original_optimizer`, after Opacus's clip, noise and division). The public values are Opacus's own:
q = the DPDataLoader's sample rate (else the rate the engine's accountant hook records), the divisor = the
optimizer's `expected_batch_size` (loss_reduction "mean"; 1 for "sum"), σ = `noise_multiplier`, C =
`max_grad_norm`. The ε is the engine's: `accountant_event` is built from its accountant history (or the planned
`steps`), `user_epsilon` is what the engine's accountant reports for it at δ. `sampling_scheme` is the scheme
the loop's loader was observed to iterate (`observe_scheme`): poisson_sampling names it and, when it is not
Poisson, gives that scheme's own figures beside `user_epsilon`.

Opacus and torch are imported inside the functions; importing this module needs neither.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Callable, Sequence

from privcheck import validation as v
from privcheck.errors import InvalidParameter
from privcheck.integrations.opacus_canaries import GradientCanaries, canary_ids, private_dimension
from privcheck.integrations.opacus_run import (
    GradientRecord,
    OpacusRandomness,
    OpacusRun,
    forever,
    opacus_parameters,
)
from privcheck.integrations.opacus_whole_run import whole_run_bindings
from privcheck.integrations.sampling_scheme import ObservedScheme, observe_scheme
from privcheck.rng_state import preserved_rng

__all__ = ["GradientCanaries", "GradientRecord", "ObservedScheme", "OpacusRun", "bindings_for", "canary_ids",
           "observe_scheme", "opacus_parameters", "private_dimension", "whole_run_bindings"]

SEED_NAMESPACE = "privcheck.integrations.opacus"
CHECK_SAMPLING_RATE = 0.5   # the least q of whole-step builds (public; the divisor stays Opacus's)
CHECK_RECORDS = 8      # default number of the dataset's records the checks use (items, additions, whole-step D)


def _accounting(privacy_engine, q: float, sigma: float, delta: float, steps):
    """(accountant_event, user_epsilon): the run's event and the engine's accountant on that event at δ."""
    from privcheck.accounting.events import CompositionHistory, PoissonGaussianEvent

    accountant = getattr(privacy_engine, "accountant", None)
    if accountant is None or not hasattr(accountant, "history") or not hasattr(accountant, "get_epsilon"):
        raise InvalidParameter("privacy_engine", type(privacy_engine).__name__,
                               "an Opacus PrivacyEngine (with an accountant)")
    if steps is None:
        history = list(accountant.history)
        if not history:
            raise InvalidParameter("steps", None, "the planned number of steps T (the engine's accountant has no "
                                                  "history yet: bind after training, or pass steps=)")
        event = CompositionHistory.from_opacus(history)
        if len(event.phases) == 1:
            event = event.phases[0]
    else:
        event = PoissonGaussianEvent(q, sigma, v.count("steps", steps))
        history = [(sigma, q, event.steps)]
    own = copy.deepcopy(accountant)
    own.history = [tuple(h) for h in history]

    def user_epsilon() -> float:
        return float(own.get_epsilon(delta))

    return event, user_epsilon


def _default_perturb(item):
    """A record with every floating-point field shifted by 1 (labels and other integer fields kept)."""
    import torch

    fields = item if isinstance(item, (tuple, list)) else (item,)
    out = [f + 1 if isinstance(f, torch.Tensor) and f.is_floating_point() else f for f in fields]
    if all(a is b for a, b in zip(out, fields)):
        raise InvalidParameter("perturb", None, "a perturb(record) callable (the records have no floating-point "
                                                "field to shift)")
    return type(item)(out) if isinstance(item, (tuple, list)) else out[0]


def bindings_for(privacy_engine, model, optimizer, data_loader, train_step: Callable, *, delta: float,
                 steps: int | None = None, sample_rate: float | None = None, records: Sequence | None = None,
                 perturb: Callable | None = None, public_return: bool = True, whole_step: bool = True,
                 seeds: int | None = None, batch_sampler_factory: Callable | None = None):
    """`SuiteBindings` of the generic DP-SGD checks for the user's Opacus run (module docstring; the contract of
    each check is in docs/integrations/opacus.md).

    `model`, `optimizer`: what `PrivacyEngine.make_private` returned; `data_loader`: the loader the training loop
    iterates; `train_step(batch)`: the function the loop calls once per step (forward, backward,
    `optimizer.step()`); its return value is public telemetry unless `public_return=False`. `delta`: the δ of the
    user's claim. `steps`: the planned T (default: the engine's accountant history). `records`: dataset items the
    checks use (default: the first 8 of `data_loader.dataset`; at least 4). `perturb(record)`: for
    record_isolation (default: shift the floating-point fields by 1). `seeds`: whole-step trials per pair
    (default: enough that a record of the base set is sampled in some trial with probability ≥ 1 − 1e-6).
    `batch_sampler_factory(n, q, generator)`: for a loader whose batch sampler is not Opacus's Poisson sampler or
    a torch `BatchSampler` (the rebuild over the checks' universes).
    """
    import torch

    try:
        from privcheck.checks.common import SuiteBindings
    except ImportError:           # before the catalogue split
        from privcheck.checks.training import SuiteBindings

    delta = v.open_unit("delta", delta)
    if not callable(train_step):
        raise InvalidParameter("train_step", train_step, "a callable train_step(batch)")
    if not isinstance(model, torch.nn.Module):
        raise InvalidParameter("model", type(model).__name__, "the GradSampleModule make_private returned")
    if not isinstance(data_loader, torch.utils.data.DataLoader):
        raise InvalidParameter("data_loader", type(data_loader).__name__, "the torch DataLoader the loop iterates")
    for name, flag in (("public_return", public_return), ("whole_step", whole_step)):
        if not isinstance(flag, bool):
            raise InvalidParameter(name, flag, "a bool")
    if batch_sampler_factory is not None and not callable(batch_sampler_factory):
        raise InvalidParameter("batch_sampler_factory", batch_sampler_factory, "None or a callable (n, q, generator)")
    if perturb is not None and not callable(perturb):
        raise InvalidParameter("perturb", perturb, "None or a callable perturb(record)")
    params = opacus_parameters(optimizer, data_loader, sample_rate=sample_rate)
    q, sigma, C, divisor = params["q"], params["sigma"], params["C"], params["divisor"]
    dataset = data_loader.dataset
    if records is None:
        with preserved_rng():          # a dataset with random transforms draws from the global generators
            records = [dataset[i] for i in range(min(CHECK_RECORDS, len(dataset)))]
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
        raise InvalidParameter("records", type(records).__name__, "None or a sequence of dataset records")
    records = list(records)
    if len(records) < 4:
        raise InvalidParameter("records", f"{len(records)} records", "at least 4 dataset records")
    # Whole-step builds sample at a public check-mode rate: sensitivity and public outputs do not depend on q, and
    # at the user's q (often 0.01) the coverage cases (the full batch of a small dataset) would take ~q^-m steps.
    q_check = max(q, CHECK_SAMPLING_RATE)
    seeds = _seeds(q_check) if seeds is None else v.count("seeds", seeds)
    event, user_epsilon = _accounting(privacy_engine, q, sigma, delta, steps)
    # the scheme the loop iterates, from its sampler (not from make_private's flags), over the run's T steps
    scheme = observe_scheme(data_loader, noise_multiplier=sigma, steps=int(event.steps))
    sigmas = {p.noise_multiplier for p in getattr(event, "phases", (event,))}
    if sigmas != {sigma}:
        scheme = dataclasses.replace(scheme, refused=f"the accountant's history holds noise multipliers "
                                     f"{sorted(sigmas)}, the optimizer {sigma}: one σ over the run is needed")
    run = OpacusRun(model=model, optimizer=optimizer, data_loader=data_loader, train_step=train_step,
                    dataset=dataset, accountant=privacy_engine.accountant, sample_rate=q,
                    batch_sampler_factory=batch_sampler_factory)
    perturb = perturb or _default_perturb

    def record_gradient(item):
        if isinstance(item, GradientRecord):
            return item.v
        return run.probe([item], capture_rows=True).rows[0]

    def contributions(items):
        real, synth, where = run.split(items)
        got = run.probe(real, rows=synth, capture_rows=True).rows
        return [run.clip(got[k] if kind == "real" else synth[k], C) for kind, k in where]

    def clipped_sum(items, clip_norm):
        real, synth, _ = run.split(items)
        # S recovered with Opacus's public divisor: a step that divides by anything else shows here
        return run.probe(real, rows=synth, sigma=0.0, C=clip_norm, divisor=divisor).g_hat * divisor

    def noisy_update(items, *, sigma, C, q, n):
        real, synth, _ = run.split(items)
        return run.probe(real, rows=synth, sigma=sigma, C=C, divisor=q * n).g_hat

    def privatize(S, *, sigma, C, q, n):
        return run.probe([], extra_sum=S, sigma=sigma, C=C, divisor=q * n).g_hat

    iterators: dict = {}

    def sample(n, q_check):
        key = (int(n), float(q_check))
        if key not in iterators:
            iterators[key] = forever(run.batch_sampler(int(n), float(q_check)))
        coins = torch.zeros(int(n), dtype=torch.bool)
        coins[next(iterators[key])] = True
        return coins

    ws = _whole_step(run, records, C=C, divisor=divisor, sigma=sigma, q=q_check, seeds=seeds,
                     public_return=public_return) if whole_step else None
    precision = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(run.dtype)
    return SuiteBindings(
        sample=sample, record_gradient=record_gradient, contributions=contributions, clipped_sum=clipped_sum,
        privatize=privatize, noisy_update=noisy_update, clip=run.clip,
        make_randomness=lambda seed=None, release=False: OpacusRandomness(run, seed, release),
        items=records[:5], additions=records[5:], make_gradient_record=GradientRecord, perturb=perturb,
        model=model, C=C, q=q, n=len(dataset), sigma=sigma, dim=run.dim, target=f"opacus:{type(model).__name__}",
        whole_step=ws, accountant_event=event, delta=delta, user_epsilon=user_epsilon, precision=precision,
        generators=run.generators(), sampling_scheme=scheme)


def _seeds(q: float) -> int:
    """Trials so that a given record is sampled in at least one with probability ≥ 1 − 1e-6 (at least 16)."""
    if q >= 1:
        return 16
    return max(16, math.ceil(math.log(1e-6) / math.log1p(-q)))


def _whole_step(run: OpacusRun, records, *, C, divisor, sigma, q, seeds, public_return):
    """WholeStepBindings whose `build(dataset, seed)` rebuilds the user's run from the snapshot over `dataset`."""
    try:
        from privcheck.checks.whole_step import StepRun, WholeStepBindings
    except ImportError:      # the whole-step checks are not installed in this tree
        return None
    import torch

    from privcheck.randomness import derive_seed

    def build(dataset, seed):
        dataset = list(dataset)
        run.restore()
        opt = run.optimizer
        opt.generator = torch.Generator().manual_seed(derive_seed(seed, "noise", SEED_NAMESPACE))
        coins = torch.Generator().manual_seed(derive_seed(seed, "coins", SEED_NAMESPACE))
        batches = forever(run.batch_sampler(len(dataset), q, coins))
        seen: dict = {"idx": [], "rows": None}
        run.wrap_clip(capture=seen)

        def step():
            seen["idx"], seen["rows"] = next(batches), None
            out = run.run_batch([dataset[i] for i in seen["idx"]])
            return out if public_return else None

        def per_record():
            rows = seen["rows"]
            if rows is None:
                return {}
            return {i: {"clipped": run.clip(rows[k], C)} for k, i in enumerate(seen["idx"])}

        def public_outputs():
            # the DPOptimizer's own settings and the accountant's history are released with every step
            out = {k: getattr(opt, k, None) for k in ("noise_multiplier", "max_grad_norm", "expected_batch_size")}
            out["accountant_history"] = [list(h) for h in (getattr(run.accountant, "history", None) or [])]
            return out

        return StepRun(step=step, model=run.model, optimizer=opt.original_optimizer,
                       private_parameters=run.private_names, sampled=lambda: list(seen["idx"]),
                       per_record=per_record, public_outputs=public_outputs, close=run.restore)

    base = records[:-1][:4]
    return WholeStepBindings(build=build, records=base, addition=records[len(base)], clip_norm=C, divisor=divisor,
                             noise_multiplier=sigma, sampling_rate=q, removal="drop", seeds=seeds)
