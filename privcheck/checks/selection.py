"""Model-agnostic checks for selection mechanisms (the bug zoo of docs/selection.md): exact-law pair checks,
the analytic-Gaussian release check, the public-constants probe and the filter-budget check.

Each returns a check dict (passed, observed, expected, tolerance, message) for `privcheck.checks.Recorder`.
`law(scores) -> probabilities over outcomes` is the mechanism's exact output law (callers supply it; this
module never imports `mechanisms`); `bounds` is one privacy-loss bound per outcome (or a scalar).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import numpy as np
from flint import arb

from privcheck.accounting.gaussian import delta_ball
from privcheck.checks import at_most, equal
from privcheck.numerics.ball import decide

__all__ = ["check_bound_attained", "check_bound_respected", "check_budget_respected", "check_gaussian_release",
           "check_public_constants"]


def _log_ratios(law, pair) -> np.ndarray:
    p, q = (np.asarray(law(np.asarray(s, dtype=np.float64)), dtype=np.float64) for s in pair)
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log(q)


def _bounds(bounds, size: int) -> np.ndarray:
    b = np.asarray(bounds, dtype=np.float64)
    return np.full(size, float(b)) if b.ndim == 0 else b


def check_bound_attained(law: Callable, extremal_pairs: Sequence, bounds, *, tol: float = 1e-10) -> dict:
    """Tightness: for each (D, D′, outcome) given, log P_D(o) − log P_D′(o) equals the bound to `tol`. A bound
    the mechanism does not attain (accountant and mechanism disagree in either direction) fails."""
    worst = 0.0
    details = []
    for (d, dp, outcome) in extremal_pairs:
        r = _log_ratios(law, (d, dp))
        b = _bounds(bounds, r.size)[outcome]
        gap = abs(float(r[outcome]) - float(b)) if math.isfinite(r[outcome]) else math.inf
        worst = max(worst, gap)
        details.append((outcome, float(r[outcome]), float(b)))
    return at_most(worst, 0.0, tol, "|log-ratio − bound| ≤ tol; "
                   + "; ".join(f"outcome {o}: ratio {r:.12g} vs bound {b:.12g}" for o, r, b in details))


def check_bound_respected(law: Callable, pairs: Iterable, bounds, *, tol: float = 1e-10) -> dict:
    """Soundness: for every neighbouring pair and every outcome, |log P_D(o) − log P_D′(o)| ≤ bound(o) + tol."""
    excess, count = -math.inf, 0
    for pair in pairs:
        r = np.abs(_log_ratios(law, pair))
        b = _bounds(bounds, r.size)
        excess = max(excess, float(np.max(np.where(np.isnan(r), math.inf, r - b))))
        count += 1
    return at_most(excess, 0.0, tol, f"max(|log-ratio| − bound) ≤ {tol}: {count} pairs; worst excess {excess:.3g}")


def check_gaussian_release(epsilon: float, delta: float, sensitivity: float, sigma: float) -> dict:
    """A Gaussian release N(0, σ²) at sensitivity Δ charged (ε, δ): certified δ(ε; Δ/σ) ≤ δ (Balle–Wang)."""
    ok, ball, _prec = decide(lambda: delta_ball(epsilon, arb(sensitivity) / arb(sigma)), delta)
    return {"passed": ok is True, "observed": float(ball.mid()) if ball.is_finite() else math.inf,
            "expected": f"<= {delta}", "tolerance": 0.0,
            "message": f"exact δ at the charged ε = {epsilon}: {ball}"}


def check_public_constants(constants: Callable, neighbouring_inputs: Sequence) -> dict:
    """The constants a mechanism uses (noise scales, ranges, thresholds) must not change between neighbouring
    (or any) private inputs: `constants(scores) -> dict` must return the same dict for all of them."""
    seen = [constants(np.asarray(x, dtype=np.float64)) for x in neighbouring_inputs]
    differing = sorted({k for c in seen[1:] for k in set(c) | set(seen[0]) if c.get(k) != seen[0].get(k)})
    return equal(differing, [], "no constant depends on the data: "
                 + (f"constants that changed: {differing}" if differing else "all identical"))


def check_budget_respected(spent: float, budget: float) -> dict:
    """A composition rule's certified total spend on a (possibly adversarial) transcript stays within E."""
    return at_most(spent, budget, 0.0, f"spent {spent} of {budget}")
