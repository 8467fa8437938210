"""Powers r^i of a float r for i < n, with a proven rounding bound, without one long cumulative product (the
geometric weights of the certified PLD's segment sums, docs/accounting.md "Certified PLD", step 3)."""

from __future__ import annotations

import numpy as np

__all__ = ["POWER_BLOCK", "geometric_powers"]

POWER_BLOCK = 4096


def geometric_powers(r: float, n: int) -> np.ndarray:
    """r^i for i < n in floats, within a factor (1 + u)^{2i+1} of the exact powers of the float r (normal range):
    r^{aB+b} = fl(P_a·Q_b) with Q_b = r^b (b roundings) and P_a = R^a (a − 1 roundings) cumulative products,
    R = fl(Q_{B−1}·r) (B roundings), B = 4096: aB + (a − 1) + b + 1 = i + a ≤ 2i roundings. One cumulative
    product over n entries is a long dependency chain (slow in numpy); these two are short."""
    B = POWER_BLOCK
    with np.errstate(over="ignore", under="ignore"):
        if n <= 2 * B:
            ratio = np.full(n, r)
            ratio[0] = 1.0
            return np.cumprod(ratio)
        q = np.full(B, r)
        q[0] = 1.0
        Q = np.cumprod(q)                              # Q_b = r^b: b roundings
        blocks = -(-n // B)
        p = np.full(blocks, Q[-1] * r)                 # r^B: B roundings
        p[0] = 1.0
        P = np.cumprod(p)                              # (r^B)^a: a further roundings on a·B of them
        return np.multiply.outer(P, Q).ravel()[:n]     # one more
