"""The user's Opacus run as the checks drive it: `OpacusRun` (docs/integrations/opacus.md, "Binding contract").

`OpacusRun` holds the objects the user's loop uses (the `GradSampleModule`, the `DPOptimizer`, the data loader
the loop iterates and the user's `train_step(batch)`) and a snapshot of their state taken at construction. Every
probe restores that snapshot, runs the user's `train_step` once on a batch it builds, observes it, and restores
the snapshot again, so running the checks never changes the user's model, optimizer, generators or accountant:

* ĝ (the update after Opacus's clip, noise and division, exactly what the wrapped optimizer applies) is read in a
  step pre-hook of `DPOptimizer.original_optimizer`, which then stops the step (no parameter moves);
* the per-sample gradients Opacus computed inside the batch, and synthetic `GradientRecord` rows (a record whose
  per-sample gradient is a given vector) appended to them, pass through the optimizer's own
  `clip_and_accumulate`, wrapped on the instance for the duration of the probe;
* the optimizer's public settings (noise multiplier, clip norm, divisor, generator) can be set for one probe:
  that is Opacus run with those settings, its own code doing the work. A divisor set under loss_reduction "sum"
  (where Opacus's `scale_grad` divides by nothing) runs `scale_grad` in "mean" mode for that probe, so that
  Opacus's own division by `expected_batch_size` applies it;
* with a `BatchMemoryManager` loader the logical batch is split into physical batches by Opacus's own
  `BatchSplittingSampler`, which signals the optimizer to skip the step until the last one; `train_step` is called
  once per physical batch, as the user's loop does, and synthetic rows enter once per logical batch.

Only the per-sample gradient rows are read or injected around Opacus's code; clipping, noise and division are
Opacus's. Flat vectors concatenate the private parameters in `DPOptimizer.params` order.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from privcheck import validation as v
from privcheck.errors import CannotObserve, InvalidParameter

__all__ = ["GradientRecord", "OpacusRandomness", "OpacusRun", "Probe", "forever", "logical_sampler",
           "opacus_parameters"]

_KEEP = object()
_MANY_STEPS = 2 ** 62        # a Poisson sampler that never runs out within one probe or build


@dataclass(frozen=True, eq=False)
class GradientRecord:
    """A synthetic record whose per-sample gradient is `v` (flat, private-parameter order). The checks' name for
    such records is `v` (privcheck.checks.training)."""

    v: Any


@dataclass(frozen=True, eq=False)
class Probe:
    """What one probe observed: ĝ (flat), the per-sample rows of the real records in batch order (or None) and
    the divisor the optimizer applied."""

    g_hat: Any
    rows: Any
    divisor: float


class _StepReached(Exception):
    """Raised in the original optimizer's step pre-hook: ĝ is captured and the update is not applied."""


def forever(batch_sampler):
    """The batches of `batch_sampler`, epoch after epoch; an epoch without batches gives one empty batch (the
    neutral step of an empty universe)."""
    while True:
        any_batch = False
        for batch in batch_sampler:
            any_batch = True
            yield [int(i) for i in batch]
        if not any_batch:
            yield []


class OpacusRun:
    """The user's Opacus objects, their snapshot and the probes (module docstring). Built by
    `privcheck.integrations.opacus.bindings_for`, which validates its inputs first."""

    def __init__(self, *, model, optimizer, data_loader, train_step: Callable, dataset, accountant,
                 sample_rate: float, batch_sampler_factory: Callable | None = None):
        import torch

        if "clip_and_accumulate" in optimizer.__dict__:    # a hook (e.g. GradientCanaries) would log every probe
            raise InvalidParameter("optimizer", "a DPOptimizer with a clip hook installed (e.g. GradientCanaries)",
                                   "the DPOptimizer as make_private returned it: bind the checks before installing "
                                   "the canary hook")
        self.model, self.optimizer, self.loader, self.train_step = model, optimizer, data_loader, train_step
        self.dataset, self.accountant, self.q = dataset, accountant, sample_rate
        self.batch_sampler_factory = batch_sampler_factory
        self.logical, self.physical = logical_sampler(data_loader.batch_sampler, optimizer)
        self.params = list(optimizer.params)
        names = {id(p): name for name, p in model.named_parameters()}
        missing = [i for i, p in enumerate(self.params) if id(p) not in names]
        if missing:
            raise InvalidParameter("optimizer", f"{len(missing)} parameter(s) outside the model",
                                   "the DPOptimizer of the model make_private returned")
        self.private_names = tuple(names[id(p)] for p in self.params)
        self.shapes = [tuple(p.shape) for p in self.params]
        self.sizes = [p.numel() for p in self.params]
        self.dim = sum(self.sizes)
        self.dtype = self.params[0].dtype
        self.collate = _collate_with_empty(data_loader, dataset)
        self._torch = torch
        self._saved = self._snapshot()

    # ------------------------------------------------------------------------------------------ state

    def _snapshot(self) -> dict:
        opt = self.optimizer
        return {"model": copy.deepcopy(self.model.state_dict()),
                "optimizer": copy.deepcopy(opt.original_optimizer.state_dict()),
                "attrs": {k: getattr(opt, k) for k in ("noise_multiplier", "max_grad_norm", "expected_batch_size",
                                                        "generator", "step_hook", "loss_reduction",
                                                        "_is_last_step_skipped")},
                "skip_queue": list(getattr(opt, "_step_skip_queue", [])),
                "history": copy.deepcopy(getattr(self.accountant, "history", None)),
                "clip_wrapper": opt.__dict__.get("clip_and_accumulate")}

    def restore(self) -> None:
        """Put the user's model, optimizer (state, settings, generator, hook) and accountant history back."""
        opt, saved = self.optimizer, self._saved
        self.model.load_state_dict(saved["model"])
        opt.original_optimizer.load_state_dict(copy.deepcopy(saved["optimizer"]))
        for key, value in saved["attrs"].items():
            setattr(opt, key, value)
        opt._step_skip_queue = list(saved["skip_queue"])     # BatchMemoryManager's pending skip signals
        if saved["history"] is not None:
            self.accountant.history = copy.deepcopy(saved["history"])
        for p in self.params:
            p.grad, p.grad_sample, p.summed_grad = None, None, None
        if saved["clip_wrapper"] is None:
            opt.__dict__.pop("clip_and_accumulate", None)
        else:                                   # e.g. GradientCanaries installed before the bindings were made
            opt.clip_and_accumulate = saved["clip_wrapper"]

    def generators(self) -> list:
        """The user's own generator objects the checks may draw from: the optimizer's noise generator and the
        sampler's coin generator (None entries mean torch's global generator, restored separately)."""
        sampler = self.logical
        gens = [self.optimizer.generator, getattr(sampler, "generator", None),
                getattr(getattr(sampler, "sampler", None), "generator", None)]
        return [g for g in gens if g is not None]

    # -------------------------------------------------------------------------------- flat vectors

    def flat(self, tensors) -> Any:
        torch = self._torch
        return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.zeros(0)

    def unflat(self, v) -> list:
        v = v.detach().reshape(-1)
        if v.numel() != self.dim:
            raise InvalidParameter("gradient", f"{v.numel()} coordinates", f"{self.dim} (the private parameters)")
        out, start = [], 0
        for shape, size, p in zip(self.shapes, self.sizes, self.params):
            out.append(v[start:start + size].reshape(shape).to(device=p.device, dtype=p.dtype))
            start += size
        return out

    def rows_of(self, grad_samples) -> Any:
        """[B, dim] rows of per-sample gradients (one tensor per parameter, batch first)."""
        torch = self._torch
        return torch.cat([g.detach().flatten(1) for g in grad_samples], dim=1)

    # ------------------------------------------------------------------------------- Opacus's clip

    def clip(self, v, C: float):
        """Opacus's own per-sample clip of one gradient `v` at norm C: the optimizer's `clip_and_accumulate`
        (the class's, not a wrapper) on a one-row batch."""
        opt = self.optimizer
        saved = [(p.grad_sample, p.summed_grad) for p in self.params]
        saved_C = opt.max_grad_norm
        try:
            opt.max_grad_norm = C
            for p, piece in zip(self.params, self.unflat(v)):
                p.grad_sample, p.summed_grad = piece.unsqueeze(0).clone(), None
            type(opt).clip_and_accumulate(opt)
            return self.flat([p.summed_grad for p in self.params])
        finally:
            opt.max_grad_norm = saved_C
            for p, (gs, sg) in zip(self.params, saved):
                p.grad_sample, p.summed_grad = gs, sg

    # ------------------------------------------------------------------------------------- sampler

    def batch_sampler(self, n: int, q: float, generator=_KEEP):
        """The batch sampler of the user's loader, rebuilt over a universe of n records: a Poisson
        `UniformWithReplacementSampler` at rate q, or a `BatchSampler` of the user's kind and batch size (q does not
        enter a fixed-size sampler). `generator`: the user's (default) or a given one."""
        from opacus.utils.uniform_sampler import UniformWithReplacementSampler
        from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

        if self.batch_sampler_factory is not None:
            return self.batch_sampler_factory(n, q, None if generator is _KEEP else generator)
        if n == 0:            # no record: no batch (`forever` turns that into empty steps)
            return []
        bs = self.logical
        # exact types: a user's subclass is never swapped for the library class it derives from
        if type(bs) is UniformWithReplacementSampler:
            gen = bs.generator if generator is _KEEP else generator
            return UniformWithReplacementSampler(num_samples=n, sample_rate=q, generator=gen, steps=_MANY_STEPS)
        if type(bs) is BatchSampler:
            s = bs.sampler
            if type(s) is RandomSampler:
                gen = s.generator if generator is _KEEP else generator
                inner = RandomSampler(range(n), replacement=s.replacement, generator=gen)
            elif type(s) is SequentialSampler:
                inner = SequentialSampler(range(n))
            else:
                raise CannotObserve("the batches of data_loader", f"its BatchSampler draws from "
                                    f"{type(s).__name__}, which privcheck cannot rebuild over the checks' records "
                                    "(RandomSampler and SequentialSampler can be): pass batch_sampler_factory=")
            return BatchSampler(inner, bs.batch_size, bs.drop_last)
        raise CannotObserve("the batches of data_loader", f"its batch_sampler is a {type(bs).__name__}, which "
                            "privcheck cannot rebuild over the checks' records (a DPDataLoader's "
                            "UniformWithReplacementSampler, a torch BatchSampler and BatchMemoryManager's splitting "
                            "of either can be): pass batch_sampler_factory=(n, q, generator) -> batch sampler")

    # -------------------------------------------------------------------------------------- probes

    def wrap_clip(self, *, rows=None, extra_sum=None, capture: dict | None = None, mask=None):
        """Wrap the optimizer's `clip_and_accumulate` on the instance: mask (optional), capture the real rows,
        append synthetic rows, run the previous method, add `extra_sum` to the clipped sum."""
        opt = self.optimizer
        previous = opt.clip_and_accumulate
        torch = self._torch

        injected = {"done": False}

        def clip_and_accumulate():
            # once per physical batch; the real rows of a logical batch are their concatenation in batch order
            if capture is not None:
                got = self.rows_of(opt.grad_samples).clone()
                capture["rows"] = got if capture.get("rows") is None else torch.cat([capture["rows"], got])
            first, injected["done"] = not injected["done"], True
            if first and rows is not None and len(rows):
                pieces = [self.unflat(r) for r in rows]
                for k, (p, g) in enumerate(zip(self.params, opt.grad_samples)):
                    p.grad_sample = torch.cat([g.detach(), torch.stack([piece[k] for piece in pieces])])
            previous()
            if first and extra_sum is not None:
                for p, piece in zip(self.params, self.unflat(extra_sum)):
                    p.summed_grad = p.summed_grad + piece

        opt.clip_and_accumulate = clip_and_accumulate

    def probe(self, records: Sequence, *, rows: Sequence | None = None, extra_sum=None, sigma=None, C=None,
              divisor=None, generator=_KEEP, capture_rows: bool = False) -> Probe:
        """Restore the snapshot, run `train_step` once on `records` (dataset items; `rows` are appended as
        synthetic per-sample gradients), with the given Opacus settings, and return what it observed."""
        opt = self.optimizer
        self.restore()
        if sigma is not None:
            opt.noise_multiplier = float(sigma)
        if C is not None:
            opt.max_grad_norm = float(C)
        if divisor is not None:
            opt.expected_batch_size = divisor
            opt.loss_reduction = "mean"     # "sum" divides by nothing; "mean" is Opacus's division by the divisor
        if generator is not _KEEP:
            opt.generator = generator
        seen: dict = {}
        self.wrap_clip(rows=rows, extra_sum=extra_sum, capture=seen if capture_rows else None)

        def pre_hook(_optimizer, _args, _kwargs):
            seen["g_hat"] = self.flat([p.grad if p.grad is not None else self._torch.zeros_like(p)
                                       for p in self.params]).clone()
            seen["divisor"] = self.divisor_now()
            raise _StepReached

        handle = opt.original_optimizer.register_step_pre_hook(pre_hook)
        try:
            self.run_batch(list(records))
        except _StepReached:
            pass
        finally:
            handle.remove()
            self.restore()
        if "g_hat" not in seen:
            raise CannotObserve("the noisy update ĝ", "train_step(batch) returned without the optimizer applying an "
                                "update (optimizer.step() not called, or every step skipped)")
        return Probe(seen["g_hat"], seen.get("rows"), seen["divisor"])

    def run_batch(self, items: Sequence):
        """One logical step of the user's loop on `items`: `train_step(collate(items))`, or with a
        BatchMemoryManager loader one call per physical batch of Opacus's `BatchSplittingSampler` (it signals the
        optimizer to skip all but the last). Returns the return values: one, or a list with one per physical
        batch (None when every one is None)."""
        if self.physical is None:
            return self.train_step(self.collate(list(items)))
        from opacus.utils.batch_memory_manager import BatchSplittingSampler

        splitter = BatchSplittingSampler(sampler=[list(range(len(items)))], max_batch_size=self.physical,
                                         optimizer=self.optimizer)
        out = [self.train_step(self.collate([items[i] for i in chunk])) for chunk in splitter]
        return None if all(o is None for o in out) else out

    def divisor_now(self) -> float:
        opt = self.optimizer
        if opt.loss_reduction == "sum":
            return 1.0
        return float(opt.expected_batch_size) * float(opt.accumulated_iterations)

    def split(self, items: Sequence):
        """(real records, synthetic rows, positions) of a list mixing dataset items and GradientRecords."""
        real, synth, where = [], [], []
        for it in items:
            if isinstance(it, GradientRecord):
                where.append(("row", len(synth)))
                synth.append(it.v)
            else:
                where.append(("real", len(real)))
                real.append(it)
        return real, synth, where


class OpacusRandomness:
    """A randomness handle for `fresh_randomness`: the user's generators (default), or seeded ones for the coins
    and the noise (a check run, `privacy_release = False`)."""

    def __init__(self, run: OpacusRun, seed=None, release: bool = False):
        import torch

        from privcheck.randomness import derive_seed

        if seed is not None and release:
            raise InvalidParameter("seed", seed, "None in release mode (a privacy release uses fresh randomness)")
        self.run = run
        self.privacy_release = seed is None
        if seed is None:
            self.coins, self.noise = _KEEP, _KEEP
        else:
            ns = "privcheck.integrations.opacus"
            self.coins = torch.Generator().manual_seed(derive_seed(seed, "coins", ns))
            self.noise = torch.Generator().manual_seed(derive_seed(seed, "noise", ns))

    def sample_coins(self, n: int, q: float):
        import torch

        batch = next(forever(self.run.batch_sampler(n, q, self.coins)))
        coins = torch.zeros(n, dtype=torch.bool)
        coins[list(batch)] = True
        return coins

    def privatize(self, S, *, sigma, C, q, n):
        return self.run.probe([], extra_sum=S, sigma=sigma, C=C, divisor=q * n, generator=self.noise).g_hat


def logical_sampler(batch_sampler, optimizer):
    """(the sampler of logical batches, the physical batch size or None) of a loader's batch sampler: a
    BatchMemoryManager loader's `BatchSplittingSampler` wraps the logical sampler; it must signal `optimizer`."""
    from opacus.utils.batch_memory_manager import BatchSplittingSampler

    if type(batch_sampler) is not BatchSplittingSampler:
        return batch_sampler, None
    if batch_sampler.optimizer is not optimizer:
        raise InvalidParameter("data_loader", "a BatchMemoryManager loader of another optimizer",
                               "BatchMemoryManager(data_loader=..., optimizer=<the bound DPOptimizer>)")
    m = batch_sampler.max_batch_size
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise InvalidParameter("max_physical_batch_size", m, "an integer >= 1")
    return batch_sampler.sampler, m


def opacus_parameters(optimizer, data_loader=None, *, sample_rate=None) -> dict:
    """The public values Opacus itself uses: {"q", "sigma", "C", "divisor", "expected_batch_size",
    "loss_reduction"}. Raises InvalidParameter for an optimizer Opacus's checks cannot read (not a DPOptimizer,
    per-layer or ghost clipping) or a missing or non-finite value (C = ∞ would make the noise std σ·C infinite)."""
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers.optimizer_fast_gradient_clipping import DPOptimizerFastGradientClipping
    from opacus.optimizers.perlayeroptimizer import DPPerLayerOptimizer

    if not isinstance(optimizer, DPOptimizer):
        raise InvalidParameter("optimizer", type(optimizer).__name__, "the DPOptimizer make_private returned")
    if isinstance(optimizer, (DPOptimizerFastGradientClipping, DPPerLayerOptimizer)):
        raise InvalidParameter("optimizer", type(optimizer).__name__,
                               "a DPOptimizer with flat per-sample clipping (grad_sample_mode 'hooks' or "
                               "'functorch', clipping='flat')")
    C = optimizer.max_grad_norm
    if not isinstance(C, (int, float)) or isinstance(C, bool) or not math.isfinite(C) or C <= 0:
        raise InvalidParameter("max_grad_norm", C, "a finite clip norm C > 0 (the noise std is σ·C)")
    sigma = optimizer.noise_multiplier
    if not isinstance(sigma, (int, float)) or isinstance(sigma, bool) or not math.isfinite(sigma) or sigma <= 0:
        raise InvalidParameter("noise_multiplier", sigma, "a finite noise multiplier σ > 0")
    reduction = optimizer.loss_reduction
    if reduction == "mean":
        B = optimizer.expected_batch_size
        if not isinstance(B, (int, float)) or isinstance(B, bool) or not math.isfinite(B) or B <= 0:
            raise InvalidParameter("expected_batch_size", B, "a finite expected batch size > 0 (Opacus's divisor)")
        divisor = float(B)
    else:
        B, divisor = optimizer.expected_batch_size, 1.0
    q = _sample_rate(optimizer, data_loader, sample_rate)
    return {"q": q, "sigma": float(sigma), "C": float(C), "divisor": divisor, "expected_batch_size": B,
            "loss_reduction": reduction}


def _sample_rate(optimizer, data_loader, sample_rate) -> float:
    """Opacus's q: given, else the DPDataLoader's sample rate, else the rate the accountant's step hook uses."""
    import inspect

    from opacus.data_loader import DPDataLoader

    if sample_rate is not None:
        return v.sampling_rate("sample_rate", sample_rate)
    if isinstance(data_loader, DPDataLoader):
        return v.sampling_rate("data_loader.sample_rate", data_loader.sample_rate)
    from opacus.utils.batch_memory_manager import BatchSplittingSampler
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    bs = getattr(data_loader, "batch_sampler", None)
    if type(bs) is BatchSplittingSampler and type(bs.sampler) is UniformWithReplacementSampler:
        return v.sampling_rate("data_loader.batch_sampler.sampler.sample_rate", bs.sampler.sample_rate)
    hook = getattr(optimizer, "step_hook", None)
    if hook is not None:
        try:
            q = inspect.getclosurevars(hook).nonlocals.get("sample_rate")
        except TypeError:
            q = None
        if q is not None:
            return v.sampling_rate("sample_rate", q)
    raise InvalidParameter("sample_rate", None, "Opacus's q: pass sample_rate=, or the DPDataLoader make_private "
                                                "returned")


def _collate_with_empty(loader, dataset) -> Callable:
    """The loader's collate function, able to collate an empty batch (Opacus's own wrapper, with the shapes and
    dtypes of the dataset's first record)."""
    from opacus.data_loader import DPDataLoader, dtype_safe, shape_safe, wrap_collate_with_empty
    from torch.utils.data._utils.collate import default_collate

    if isinstance(loader, DPDataLoader):
        return loader.collate_fn
    first = dataset[0]
    fields = first if isinstance(first, (tuple, list)) else (first,)
    return wrap_collate_with_empty(collate_fn=loader.collate_fn or default_collate,
                                   sample_empty_shapes=[(0, *shape_safe(x)) for x in fields],
                                   dtypes=[dtype_safe(x) for x in fields])
