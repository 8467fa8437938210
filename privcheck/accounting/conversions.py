"""Conversions between neighbouring relations and group sizes, certified in Arb.

- Group privacy for k records: (ε, δ) → (k·ε, k·e^{(k−1)ε}·δ)          (DP-GRPO paper, Proposition 1).
- Replace-one from add/remove:  (ε, δ) → (2ε, (1 + e^ε)·δ)             (DP-GRPO paper, Corollary 1).
μ-GDP ↔ (ε, δ) lives in `gaussian.py` (same closed form as the analytic Gaussian).
Each output is the upper end of an Arb ball rounded up to a float.

Legal ranges (docs/accounting.md, "Conversions"): ε ≥ 0 finite, 0 ≤ δ < 1 (δ = 0 is pure DP, and the outputs
are then pure DP too), k an integer in [1, MAX_GROUP_SIZE]; and the converted δ' must be below 1. A δ' ≥ 1 is
refused with InvalidParameter naming the reachable range (the largest k, or the largest δ) instead of being capped
at 1: (ε', 1)-DP holds for every mechanism whatsoever, so a capped figure would print a number that looks like a
guarantee and states none. δ' < 1 is decided in Arb on log δ' = log k + (k − 1)ε + log δ, so no e^{(k−1)ε} is
ever formed beyond the range where δ' < 1.
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction

from flint import arb, ctx

from privcheck import validation as v
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import InvalidParameter
from privcheck.numerics.ball import MAX_PREC, START_PREC, evaluate
from privcheck.numerics.certified import Certified, float_down

__all__ = ["MAX_GROUP_SIZE", "group_privacy", "replace_one"]

# The largest group size: 2^53, the integers a float64 holds exactly (k is written into JSON records next to floats,
# and k·ε is formed from it); the certified arithmetic itself takes any k in microseconds.
MAX_GROUP_SIZE = 2 ** 53
_MAX_FLOAT = sys.float_info.max


def _epsilon(value) -> float:
    return v.nonnegative("epsilon", value)


def _below_one(log_value) -> bool:
    """True when the ball `log_value()` (a log δ') is certainly < 0; False when not (undecided counts as not:
    fail closed)."""
    prec = START_PREC
    while prec <= MAX_PREC:
        with ctx.workprec(prec):
            ball = log_value()
            if ball.is_finite():
                if ball < 0:
                    return True
                if ball >= 0:
                    return False
        prec *= 2
    return False


def _record(mechanism: str, method: str, inputs: dict, eps_fn, delta_fn, reference: str,
            start: float) -> AccountingRecord:
    eps_ball, p1 = evaluate(eps_fn)
    delta_ball, p2 = evaluate(delta_fn)
    eps = Certified.from_ball(eps_ball, "arb", p1)
    delta = Certified.from_ball(delta_ball, "arb", p2)
    return AccountingRecord(
        quantity="epsilon", value=eps.value, mechanism=mechanism, method=method, inputs=inputs,
        neighboring=inputs.get("neighboring", "add_remove"), certified=eps,
        details={"delta": delta.value, "delta_certified": delta.to_json(), "reference": reference},
        wall_time_s=time.perf_counter() - start)


def _group_log_delta(k: int, epsilon: float, delta: float):
    return lambda: arb(k).log() + arb(k - 1) * arb(epsilon) + arb(delta).log()


def _largest_group(epsilon: float, delta: float, limit: int) -> int:
    """The largest k in [1, limit] with k·e^{(k−1)ε}·δ < 1 (certified; increasing in k, and k = 1 gives δ < 1)."""
    good, bad = 1, limit + 1
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if _below_one(_group_log_delta(mid, epsilon, delta)) else (good, mid)
    return good


def group_privacy(epsilon, delta, k) -> AccountingRecord:
    """(k·ε, k·e^{(k−1)ε}·δ) for groups of k records; the record's `value` is ε, `details['delta']` is δ.

    Legal range: ε ≥ 0, 0 ≤ δ < 1, k in [1, MAX_GROUP_SIZE] with k·e^{(k−1)ε}·δ < 1 and k·ε ≤ the largest float;
    otherwise InvalidParameter names k and the largest k that converts (see the module docstring for why δ' ≥ 1 is
    refused, not capped). δ = 0 gives (k·ε, 0).
    """
    epsilon = _epsilon(epsilon)
    delta = v.half_open_unit("delta", delta)
    k = v.count("k", k, maximum=MAX_GROUP_SIZE)
    limit = MAX_GROUP_SIZE
    if epsilon > 0:     # k·ε must be a finite float
        limit = min(limit, int(Fraction(_MAX_FLOAT) / Fraction(epsilon)))
    if k > limit or (delta > 0 and not _below_one(_group_log_delta(k, epsilon, delta))):
        top = _largest_group(epsilon, delta, limit) if delta > 0 else limit
        raise InvalidParameter("k", k, f"an integer in [1, {top}] at epsilon={epsilon!r}, delta={delta!r} (the "
                                       "largest k whose group δ' = k·e^((k−1)ε)·δ is below 1 and k·ε a float)")
    start = time.perf_counter()    # δ' < 1 is decided: e^{(k−1)ε} < 1/δ ≤ 2^1074 below, no huge exponential
    inputs = {"epsilon": epsilon, "delta": delta, "k": k, "neighboring": f"add_remove_group_of_{k}"}
    return _record("group", "group_privacy", inputs,
                   lambda: arb(k) * arb(epsilon),
                   lambda: arb(k) * (arb(k - 1) * arb(epsilon)).exp() * arb(delta) if delta > 0 else arb(0),
                   "group privacy, DP-GRPO paper Proposition 1", start)


def replace_one(epsilon, delta) -> AccountingRecord:
    """(2ε, (1 + e^ε)·δ): replace-one neighbours from an add/remove guarantee.

    Legal range: 0 ≤ ε ≤ (largest float)/2, 0 ≤ δ < 1 with (1 + e^ε)·δ < 1, i.e. δ < 1/(1 + e^ε); otherwise
    InvalidParameter names delta and that bound (δ' ≥ 1 is refused, not capped: module docstring).
    """
    epsilon = _epsilon(epsilon)
    if epsilon > _MAX_FLOAT / 2:    # 2ε must be a finite float (halving the largest float is exact)
        raise InvalidParameter("epsilon", epsilon, f"[0, {_MAX_FLOAT / 2!r}] (2ε must be a finite float)")
    delta = v.half_open_unit("delta", delta)
    # log((1 + e^ε)·δ) = ε + log1p(e^−ε) + log δ: no e^ε is formed, so a huge ε costs nothing
    log_delta = lambda: arb(epsilon) + (-arb(epsilon)).exp().log1p() + arb(delta).log()  # noqa: E731
    if delta > 0 and not _below_one(log_delta):
        with ctx.workprec(128):
            tail = (-arb(epsilon)).exp()
            top = float_down(tail / (1 + tail))
        reach = f"[0, {top!r})" if top > 0 else "0 only (pure DP)"
        raise InvalidParameter("delta", delta, f"δ < 1/(1 + e^ε): {reach} at epsilon={epsilon!r} (the replace-one "
                                               "δ' = (1 + e^ε)·δ must be below 1)")
    start = time.perf_counter()
    return _record("replace_one", "replace_one", {"epsilon": epsilon, "delta": delta, "neighboring": "replace_one"},
                   lambda: 2 * arb(epsilon),
                   lambda: (1 + arb(epsilon).exp()) * arb(delta) if delta > 0 else arb(0),
                   "DP-GRPO paper Corollary 1", start)
