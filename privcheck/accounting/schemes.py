"""Accounting records for the sampling schemes other than Poisson (called by the entry point `epsilon` only).

Every record says what is certified: `value` is a certified upper bound or inf with a `reason`; `certified` holds
the enclosure, whose upper end is inf (null in JSON) with the reason where no upper bound is proven. `details`
carries the certified PLD figure of Poisson sampling at the same rate and steps (add/remove), which is what an
accountant that assumes Poisson sampling would report, so that the gap is visible (docs/accounting.md,
"Sampling schemes").
"""

from __future__ import annotations

import math
import time

from privcheck.accounting import dpsgd, pld_certified, sampling
from privcheck.accounting.events import (
    BallsInBinsGaussianEvent,
    FixedSizeGaussianEvent,
    ShuffledGaussianEvent,
    TruncatedPoissonGaussianEvent,
)
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.certified import Certified

__all__ = ["NO_UPPER", "check_scheme", "scheme_record"]

_FAILURES = (CertificationError, ArithmeticError, ValueError, OverflowError, MemoryError)
NO_UPPER = {
    "shuffled_gaussian": "no upper bound is proven for shuffled fixed-size batches that privcheck can certify; "
                         "the Poisson figure at the same rate is not one (it can be far below the shuffled ε)",
    "balls_in_bins_gaussian": "no upper bound certified here: the published random-allocation bounds (Feldman & "
                              "Shenfeld 2025) are not implemented with proven error; the Poisson figure is not one",
    "fixed_size_gaussian_replacement": "no upper bound certified for batches drawn with replacement (the record can "
                                       "appear several times in a batch); the Poisson figure is not one",
    "truncated_poisson_gaussian": "no upper bound certified for truncated Poisson batches (a batch cut to the "
                                  "maximum); only max_batch_size > dataset_size (no truncation) is certified",
}
_EPOCHS_TIMES_STEPS_MAX = pld_certified.MAX_STEPS


def check_scheme(event) -> None:
    """The ranges the bounds can use, checked before any work."""
    if isinstance(event, FixedSizeGaussianEvent) and not event.replacement:
        # the lower end is the certified PLD at noise σ/2, which needs σ/2 in its noise range
        lo, hi = pld_certified.NOISE_RANGE
        if not 2 * lo <= event.noise_multiplier <= 2 * hi:
            raise InvalidParameter("noise_multiplier", event.noise_multiplier,
                                   f"[{2 * lo:g}, {2 * hi:g}] for fixed-size batches (σ/2 in the certified "
                                   "PLD's range)")
    elif isinstance(event, (ShuffledGaussianEvent, BallsInBinsGaussianEvent)):
        if event.steps > _EPOCHS_TIMES_STEPS_MAX:
            raise InvalidParameter("epochs", event.epochs, f"at most {_EPOCHS_TIMES_STEPS_MAX} steps in all "
                                                           f"(here {event.steps})")
        pld_certified.check_noise("noise_multiplier", event.noise_multiplier)
    else:
        pld_certified.check_noise("noise_multiplier", event.noise_multiplier)


def _poisson_figure(q: float, sigma: float, steps: int, delta: float) -> float | None:
    """The certified Poisson (add/remove) upper bound at the same rate and steps, for comparison only."""
    try:
        return pld_certified.certified_epsilon(((q, sigma, steps),), delta, "add_remove").upper
    except _FAILURES:
        return None


def _fixed_size(event: FixedSizeGaussianEvent, delta: float) -> AccountingRecord:
    n, b, sigma, T = event.dataset_size, event.batch_size, event.noise_multiplier, event.steps
    gamma = b / n
    reason = None
    try:
        upper, order = sampling.symmetrised_rdp_epsilon(b, n, sigma, T, delta)
    except _FAILURES as exc:
        upper, order, reason = math.inf, None, f"symmetrised RDP failed: {exc}"
    try:
        pld = pld_certified.certified_epsilon(((gamma, sigma / 2, T),), delta, "add_remove")
        lower, lower_details = pld.lower, {"interval": pld.interval, "gap": pld.gap}
        shifted = sampling.shifted_pld_upper(pld.upper, b, n, T)
        if shifted < upper:
            upper, order = shifted, None
    except _FAILURES as exc:
        lower, lower_details = 0.0, {"failed": str(exc)}
    if not math.isfinite(upper):
        reason = reason or f"symmetrised RDP gave {upper!r}"
    certified = Certified(value=upper, lower=max(min(lower, upper), 0.0), upper=upper,
                          method="symmetrised_rdp_upper+pld_lower", precision_bits=sampling.PREC,
                          reason=reason)
    return AccountingRecord(
        quantity="epsilon", value=upper, mechanism="fixed_size_subsampled_gaussian",
        method="symmetrised_rdp", inputs={"dataset_size": n, "batch_size": b, "noise_multiplier": sigma,
                                          "steps": T, "replacement": False, "delta": delta},
        neighboring="replace_one", certified=certified, reason=reason,
        details={"upper": "symmetrised f-DP subsampling pair C_γ(G_{2/σ}), losses below 0 raised to 0: the "
                          "smaller of its RDP bound (Canonne-Kamath-Steinke conversion) and the certified PLD "
                          "upper end at (γ, σ/2) plus T·log(1/(1 − γ)), in Arb",
                 "rdp_order": order, "upper_from": "rdp" if order else "shifted_pld",
                 "lower": "certified PLD lower end of the add/remove pairs at (γ, σ/2): a dataset realises them",
                 "lower_pld": lower_details,
                 "poisson_add_remove_epsilon": _poisson_figure(gamma, sigma, T, delta)})


def _lower_only(event, delta: float, mechanism: str, key: str, lower: float, test: dict, inputs: dict,
                poisson: float | None) -> AccountingRecord:
    reason = NO_UPPER[key]
    certified = Certified(value=math.inf, lower=lower, upper=math.inf, method="count_test_lower_bound",
                          precision_bits=sampling.PREC, reason=reason)
    return AccountingRecord(
        quantity="epsilon", value=math.inf, mechanism=mechanism, method="lower_bound_only",
        inputs={**inputs, "delta": delta}, neighboring=event.relation.value, certified=certified, reason=reason,
        details={"lower": "certified: a count test on a post-processing of a worst-case dataset pair", **test,
                 "poisson_add_remove_epsilon": poisson})


def _epochs(event, delta: float) -> AccountingRecord:
    t, sigma, E = event.steps_per_epoch, event.noise_multiplier, event.epochs
    centre = sampling.max_coordinate_centre(sigma, t)
    grid = sampling.threshold_grid(centre, sigma)
    try:
        lower, test = sampling.count_test_lower_bound(
            lambda x0: sampling.max_coordinate_probabilities(x0, sigma, t), E, delta, grid)
    except _FAILURES as exc:
        lower, test = 0.0, {"test": None, "failed": str(exc)}
    if isinstance(event, ShuffledGaussianEvent):
        inputs = {"dataset_size": event.dataset_size, "batch_size": event.batch_size, "noise_multiplier": sigma,
                  "epochs": E, "steps_per_epoch": t}
        q, mech, key = event.batch_size / event.dataset_size, "shuffled_gaussian", "shuffled_gaussian"
    else:
        inputs = {"steps_per_epoch": t, "noise_multiplier": sigma, "epochs": E}
        q, mech, key = 1 / t, "balls_in_bins_gaussian", "balls_in_bins_gaussian"
    return _lower_only(event, delta, mech, key, lower, test, inputs, _poisson_figure(q, sigma, t * E, delta))


def _replacement(event: FixedSizeGaussianEvent, delta: float) -> AccountingRecord:
    n, b, sigma, T = event.dataset_size, event.batch_size, event.noise_multiplier, event.steps
    mean_shift = 2 * b / n
    grid = sampling.threshold_grid(mean_shift, sigma)
    try:
        lower, test = sampling.count_test_lower_bound(
            lambda x0: sampling.replacement_probabilities(x0, sigma, b, n), T, delta, grid)
    except _FAILURES as exc:
        lower, test = 0.0, {"test": None, "failed": str(exc)}
    inputs = {"dataset_size": n, "batch_size": b, "noise_multiplier": sigma, "steps": T, "replacement": True}
    return _lower_only(event, delta, "fixed_size_with_replacement_gaussian", "fixed_size_gaussian_replacement",
                       lower, test, inputs, _poisson_figure(b / n, sigma, T, delta))


def _truncated(event: TruncatedPoissonGaussianEvent, delta: float) -> AccountingRecord:
    inputs = {"dataset_size": event.dataset_size, "sampling_rate": event.sampling_rate,
              "max_batch_size": event.max_batch_size, "noise_multiplier": event.noise_multiplier,
              "steps": event.steps}
    if event.max_batch_size > event.dataset_size:   # never truncated, even with a record added: Poisson itself
        record = dpsgd.epsilon_pld_certified(((event.sampling_rate, event.noise_multiplier, event.steps),), delta)
        return AccountingRecord(
            quantity="epsilon", value=record.value, mechanism="truncated_poisson_gaussian", method=record.method,
            inputs={**inputs, "delta": delta}, neighboring="add_remove", certified=record.certified,
            reason=record.reason, details={**record.details, "truncation": "never (max_batch_size > dataset_size)"})
    reason = NO_UPPER["truncated_poisson_gaussian"]
    return AccountingRecord(
        quantity="epsilon", value=math.inf, mechanism="truncated_poisson_gaussian", method="none",
        inputs={**inputs, "delta": delta}, neighboring="add_remove", certified=None, reason=reason,
        details={"poisson_add_remove_epsilon": _poisson_figure(event.sampling_rate, event.noise_multiplier,
                                                               event.steps, delta)})


def scheme_record(event, delta: float) -> AccountingRecord:
    start = time.perf_counter()
    if isinstance(event, FixedSizeGaussianEvent):
        record = _replacement(event, delta) if event.replacement else _fixed_size(event, delta)
    elif isinstance(event, (ShuffledGaussianEvent, BallsInBinsGaussianEvent)):
        record = _epochs(event, delta)
    else:
        record = _truncated(event, delta)
    object.__setattr__(record, "wall_time_s", time.perf_counter() - start)
    return record
