"""The sampling scheme a training loop really iterates (docs/integrations/opacus.md, "Loaders that are not
Poisson"): `observe_scheme(data_loader, noise_multiplier=σ, steps=T)` → `ObservedScheme`.

The scheme is read from the loader's batch sampler (under a BatchMemoryManager loader, the logical sampler it
splits), never from flags such as `make_private(poisson_sampling=...)`, and confirmed by behaviour where that is
cheap: a rebuild of the sampler's exact torch/Opacus class over a small universe, with a seeded generator, draws
two epochs of batches.

=========================  ===================================================================================
scheme                     what was seen
=========================  ===================================================================================
poisson                    Opacus's `UniformWithReplacementSampler` (a DPDataLoader); its coins are tested by
                           the poisson_sampling check
shuffle                    `BatchSampler(RandomSampler(replacement=False))`: one permutation per epoch, fixed
                           batches (every index exactly once per epoch)
fixed-size-replacement     `BatchSampler(RandomSampler(replacement=True))`: every batch b uniform draws with
                           replacement
sequential                 `BatchSampler(SequentialSampler)`: the same batches every epoch
unknown                    anything else (a custom sampler): `seen` says what it was and what it did
=========================  ===================================================================================

`ObservedScheme.event()` is the scheme's own accounting event (or None with the reason, and whether it is the
whole run), for `privcheck.accounting.epsilon(event, δ)`: the checks put its figures beside the user's Poisson claim
(`privcheck.checks.scheme_report`). Torch and Opacus are imported inside the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from privcheck import validation as v
from privcheck.errors import InvalidParameter

__all__ = ["CONFIRM_RECORDS", "CONFIRM_SEED", "SCHEMES", "ObservedScheme", "observe_scheme"]

SCHEMES = ("poisson", "shuffle", "fixed-size-replacement", "sequential", "unknown")
CONFIRM_RECORDS = 64     # least universe of the behavioural confirmation (the behaviour is the class's, not n's;
                         # at least 2b + 1 records, so that two whole batches are drawn)
CONFIRM_SEED = 20261203  # public seed of the confirmation's generator (never the user's generator)

# Why the scheme's figures are what they are (reported with them).
SEQUENTIAL_ASSUMPTION = ("sequential batches: each record is in one known step per epoch, so the run is the "
                         "Gaussian mechanism composed over the ⌈T/t⌉ epochs a record can be in, no amplification; "
                         "this assumes the neighbouring dataset keeps every other record's position (a record "
                         "added or removed at the end of the order)")
SHUFFLE_NOTE = "shuffled fixed-size batches: one permutation per epoch"


@dataclass(frozen=True)
class ObservedScheme:
    """What `observe_scheme` saw: the scheme (one of `SCHEMES`), the sampler's description and its
    behavioural confirmation, n, b, drop_last, t (steps per epoch), T and E = T/t, σ, and Poisson's q."""

    scheme: str
    seen: str
    confirmed: str
    dataset_size: int
    noise_multiplier: float
    steps: int
    batch_size: int | None = None
    drop_last: bool | None = None
    steps_per_epoch: int | None = None
    sampling_rate: float | None = None
    extra: dict = field(default_factory=dict)
    refused: str | None = None     # why the scheme's figures cannot describe the run (e.g. σ changed over phases)

    @property
    def epochs(self) -> float | None:
        """E = T/t (fractional when T is not a whole number of epochs)."""
        return None if not self.steps_per_epoch else self.steps / self.steps_per_epoch

    def event(self) -> tuple[Any, str, bool]:
        """(the scheme's accounting event or None, what its figures mean or why there are none, whether the event
        is the whole run). An event of part of the run (its first whole epochs, its full-size batches) gives a
        lower bound for the run, whose releases include that part's, and no upper bound. The Poisson scheme has
        no event here: its figure is the user's own claim."""
        from privcheck import accounting

        n, b, sigma, T, t = (self.dataset_size, self.batch_size, self.noise_multiplier, self.steps,
                             self.steps_per_epoch)
        if self.scheme == "poisson":
            return None, "Poisson sampling: the user's claim describes this scheme", False
        if self.refused is not None:
            return None, self.refused, False
        if self.scheme == "unknown":
            return None, f"no accounting event for an unrecognised sampler ({self.seen})", False
        if self.scheme == "sequential":
            epochs = math.ceil(T / t)          # a record in the first batch is in ⌈T/t⌉ steps
            return accounting.GaussianEvent(sigma / math.sqrt(epochs)), SEQUENTIAL_ASSUMPTION, True
        name = "ShuffledGaussianEvent" if self.scheme == "shuffle" else "FixedSizeGaussianEvent"
        cls = getattr(accounting, name, None)
        if cls is None:
            return None, f"this privcheck has no {name} (privcheck.accounting): no figure for this scheme", False
        if self.scheme == "fixed-size-replacement":
            return self._replacement_event(cls)
        if self.drop_last and n % b:
            # the event has every record in one batch per epoch; here n mod b random records sit out each epoch
            return None, (f"{SHUFFLE_NOTE}, drop_last with n mod b = {n % b}: records left out at random each "
                          f"epoch, which {name} (every record once per epoch) does not describe"), False
        full = T // t                          # the first ⌊E⌋ epochs are a prefix of the run's releases
        if full == 0:
            return None, (f"{SHUFFLE_NOTE}; T = {T} steps is less than one epoch (t = {t}): no whole epoch to "
                          "bound"), False
        if full * t == T:
            return cls(dataset_size=n, batch_size=b, noise_multiplier=sigma, epochs=full), SHUFFLE_NOTE, True
        return cls(dataset_size=n, batch_size=b, noise_multiplier=sigma, epochs=full), (
            f"{SHUFFLE_NOTE}; the first {full} whole epoch(s) of the {T} steps (their lower bound is the run's)"), False

    def _replacement_event(self, cls) -> tuple[Any, str, bool]:
        """Every step b uniform draws; without drop_last the last batch of an epoch has m mod b draws (m: draws
        per epoch), which the event does not describe: then the event of the full-size steps alone."""
        n, b, T, t = self.dataset_size, self.batch_size, self.steps, self.steps_per_epoch
        m = int(self.extra.get("draws_per_epoch", n))
        note = "fixed-size batches drawn with replacement: every step b uniform draws from the n records"
        if self.drop_last or m % b == 0:
            return cls(dataset_size=n, batch_size=b, noise_multiplier=self.noise_multiplier, steps=T,
                       replacement=True), note, True
        per_epoch = m // b
        full = (T // t) * per_epoch + min(T % t, per_epoch)
        if full == 0:
            return None, f"{note}; no step of the run draws a full batch of {b}", False
        return cls(dataset_size=n, batch_size=b, noise_multiplier=self.noise_multiplier, steps=full,
                   replacement=True), (f"{note}; the {full} full-size steps of the {T} (the last batch of an "
                                       f"epoch has {m % b} draws): their lower bound is the run's"), False

    def to_json(self) -> dict:
        return {"scheme": self.scheme, "seen": self.seen, "confirmed": self.confirmed,
                "dataset_size": self.dataset_size, "batch_size": self.batch_size, "drop_last": self.drop_last,
                "steps_per_epoch": self.steps_per_epoch, "steps": self.steps, "epochs": self.epochs,
                "noise_multiplier": self.noise_multiplier, "sampling_rate": self.sampling_rate,
                "refused": self.refused, **self.extra}

    def line(self) -> str:
        """One line for messages: "shuffle (n = 16, b = 5, drop_last False, t = 4 steps/epoch, T = 8, E = 2)"."""
        if self.scheme == "poisson":
            return f"poisson (n = {self.dataset_size}, q = {self.sampling_rate:.6g}, T = {self.steps})"
        if self.steps_per_epoch is None:
            return f"{self.scheme} ({self.seen})"
        return (f"{self.scheme} (n = {self.dataset_size}, b = {self.batch_size}, drop_last {self.drop_last}, "
                f"t = {self.steps_per_epoch} steps/epoch, T = {self.steps}, E = {self.epochs:.6g})")


def observe_scheme(data_loader, *, noise_multiplier: float, steps: int) -> ObservedScheme:
    """The scheme `data_loader` iterates (module docstring), with T = `steps` and σ = `noise_multiplier` for its
    figures. Raises InvalidParameter before any work for a loader that is not a torch DataLoader."""
    import torch

    if not isinstance(data_loader, torch.utils.data.DataLoader):
        raise InvalidParameter("data_loader", type(data_loader).__name__, "the torch DataLoader the loop iterates")
    sigma = v.positive("noise_multiplier", noise_multiplier)
    steps = v.count("steps", steps)
    n = len(data_loader.dataset)
    bs = _logical(data_loader.batch_sampler)
    base = {"dataset_size": n, "noise_multiplier": sigma, "steps": steps}
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    # exact types: a subclass may change the behaviour the scheme's accounting relies on
    if type(bs) is UniformWithReplacementSampler:
        return ObservedScheme("poisson", "opacus UniformWithReplacementSampler", "coins tested by poisson_sampling",
                              sampling_rate=float(bs.sample_rate), **base)
    if type(bs) is not BatchSampler:
        return ObservedScheme("unknown", f"batch sampler {type(bs).__name__}", _behaviour(bs), **base)
    inner, b, drop_last = bs.sampler, int(bs.batch_size), bool(bs.drop_last)
    fixed = {"batch_size": b, "drop_last": drop_last, "steps_per_epoch": len(bs)}
    if fixed["steps_per_epoch"] == 0:
        return ObservedScheme("unknown", f"BatchSampler over {type(inner).__name__} with no batch per epoch "
                              f"(n = {n}, b = {b}, drop_last {drop_last})", "no batch drawn", **base)
    size = max(CONFIRM_RECORDS, 2 * b + 1)
    if type(inner) is RandomSampler:
        m = inner.num_samples
        gen = torch.Generator().manual_seed(CONFIRM_SEED)
        if inner.replacement:
            universe = RandomSampler(range(size), replacement=True, generator=gen)
            seen = f"BatchSampler(RandomSampler(replacement=True, num_samples={m}), batch_size={b})"
            return _confirmed("fixed-size-replacement", seen, _with_replacement, universe, b, drop_last, base,
                              fixed, {"draws_per_epoch": m})
        if m != n:
            return ObservedScheme("unknown", f"BatchSampler(RandomSampler(replacement=False, num_samples={m})) over "
                                  f"{n} records: not one permutation of the dataset per epoch",
                                  "not tested", **base, **fixed)
        universe = RandomSampler(range(size), replacement=False, generator=gen)
        return _confirmed("shuffle", f"BatchSampler(RandomSampler(replacement=False), batch_size={b})",
                          _permutations, universe, b, drop_last, base, fixed)
    if type(inner) is SequentialSampler:
        return _confirmed("sequential", f"BatchSampler(SequentialSampler, batch_size={b})", _sequential,
                          SequentialSampler(range(size)), b, drop_last, base, fixed)
    return ObservedScheme("unknown", f"BatchSampler over {type(inner).__name__}", _behaviour(bs), **base, **fixed)


def _logical(batch_sampler):
    """The sampler of logical batches (a BatchMemoryManager loader's `BatchSplittingSampler` wraps it)."""
    from opacus.utils.batch_memory_manager import BatchSplittingSampler

    return batch_sampler.sampler if type(batch_sampler) is BatchSplittingSampler else batch_sampler


def _epochs(batch_sampler, count: int = 2) -> list[list[list[int]]]:
    return [[[int(i) for i in batch] for batch in batch_sampler] for _ in range(count)]


def _sizes_ok(epoch, b: int, drop_last: bool, draws: int) -> bool:
    full, rest = divmod(draws, b)
    want = [b] * full + ([] if drop_last or rest == 0 else [rest])
    return [len(batch) for batch in epoch] == want


def _permutations(epochs, b, drop_last, m) -> str | None:
    for e in epochs:
        flat = [i for batch in e for i in batch]
        if not _sizes_ok(e, b, drop_last, m):
            return "batch sizes differ from a fixed-size split of one permutation"
        if not drop_last and sorted(flat) != list(range(m)):
            return "an epoch is not a permutation of the records"
        if len(set(flat)) != len(flat):
            return "a record repeats within an epoch"
    if epochs[0] == epochs[1]:
        return "two epochs drew the same order"
    return None


def _with_replacement(epochs, b, drop_last, m) -> str | None:
    if not all(_sizes_ok(e, b, drop_last, m) for e in epochs):
        return "batch sizes differ from a fixed-size split of the draws"
    flat = [i for batch in epochs[0] for i in batch]
    if len(set(flat)) == len(flat):       # m ≥ 64 draws from m records without a repeat: probability < 3e-27
        return "no record repeated within an epoch"
    return None


def _sequential(epochs, b, drop_last, m) -> str | None:
    want = [list(range(k, min(k + b, m))) for k in range(0, m, b)]
    if drop_last and m % b:
        want = want[:-1]
    return None if epochs[0] == epochs[1] == want else "the batches are not the records in order"


def _confirmed(scheme, seen, test, universe, b, drop_last, base, fixed, extra=None) -> ObservedScheme:
    """The scheme its types name if two epochs of the class rebuilt over `universe` (at least CONFIRM_RECORDS
    records) behave as that scheme must; "unknown" naming the deviation otherwise."""
    from torch.utils.data import BatchSampler

    m = len(universe)
    wrong = test(_epochs(BatchSampler(universe, b, drop_last)), b, drop_last, m)
    if wrong is not None:
        return ObservedScheme("unknown", f"{seen}: {wrong}", f"rebuilt over {m} records: {wrong}",
                              **base, **fixed, extra=extra or {})
    confirmed = {"shuffle": "every index exactly once per epoch, a new order each epoch",
                 "fixed-size-replacement": "fixed-size batches with repeated records within an epoch",
                 "sequential": "the same in-order batches every epoch"}[scheme]
    return ObservedScheme(scheme, seen, f"rebuilt over {m} records, two epochs: {confirmed}",
                          **base, **fixed, extra=extra or {})


def _behaviour(batch_sampler) -> str:
    """A short description of what a sampler privcheck cannot rebuild yields: its length, when it has one."""
    try:
        return f"{len(batch_sampler)} batches per epoch; not rebuilt (a custom sampler)"
    except TypeError:
        return "no length; not rebuilt (a custom sampler)"
