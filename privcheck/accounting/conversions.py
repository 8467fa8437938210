"""Conversions between neighbouring relations and group sizes, certified in Arb.

- Group privacy for k records: (ε, δ) → (k·ε, k·e^{(k−1)ε}·δ)          (DP-GRPO paper, Proposition 1).
- Replace-one from add/remove:  (ε, δ) → (2ε, (1 + e^ε)·δ)             (DP-GRPO paper, Corollary 1).
μ-GDP ↔ (ε, δ) lives in `gaussian.py` (same closed form as the analytic Gaussian).
Each output is the upper end of an Arb ball rounded up to a float.
"""

from __future__ import annotations

import time

from flint import arb

from privcheck import validation as v
from privcheck.accounting.records import AccountingRecord
from privcheck.numerics.ball import evaluate
from privcheck.numerics.certified import Certified

__all__ = ["group_privacy", "replace_one"]


def _pair(mechanism: str, method: str, inputs: dict, eps_fn, delta_fn, reference: str, start: float):
    eps_ball, p1 = evaluate(eps_fn)
    delta_ball, p2 = evaluate(delta_fn)
    eps = Certified.from_ball(eps_ball, "arb", p1)
    delta = Certified.from_ball(delta_ball, "arb", p2)
    return AccountingRecord(
        quantity="epsilon", value=eps.value, mechanism=mechanism, method=method, inputs=inputs,
        neighboring=inputs.get("neighboring", "add_remove"), certified=eps,
        details={"delta": delta.value, "delta_certified": delta.to_json(), "reference": reference},
        wall_time_s=time.perf_counter() - start)


def group_privacy(epsilon, delta, k) -> AccountingRecord:
    """(k·ε, k·e^{(k−1)ε}·δ) for groups of k records; the record's `value` is ε, `details['delta']` is δ."""
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    k = v.count("k", k)
    start = time.perf_counter()
    return _pair("group", "group_privacy", {"epsilon": epsilon, "delta": delta, "k": k,
                                            "neighboring": f"add_remove_group_of_{k}"},
                 lambda: arb(k) * arb(epsilon),
                 lambda: arb(k) * (arb(k - 1) * arb(epsilon)).exp() * arb(delta),
                 "group privacy, DP-GRPO paper Proposition 1", start)


def replace_one(epsilon, delta) -> AccountingRecord:
    """(2ε, (1 + e^ε)·δ): replace-one neighbours from an add/remove guarantee."""
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    start = time.perf_counter()
    return _pair("replace_one", "replace_one", {"epsilon": epsilon, "delta": delta, "neighboring": "replace_one"},
                 lambda: 2 * arb(epsilon), lambda: (1 + arb(epsilon).exp()) * arb(delta),
                 "DP-GRPO paper Corollary 1", start)
