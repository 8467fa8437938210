"""Dominating pairs of one round of the Poisson-subsampled Gaussian mechanism, in floats and in Arb.

Each pair (P, Q) is a pair of Gaussian mixtures with a common standard deviation σ on the real line (sensitivity
1, noise σ), whose privacy loss ℓ(x) = log(p(x)/q(x)) is monotone in x:

| kind | P | Q | loss in x | loss range |
|---|---|---|---|---|
| `remove` | (1 − q)·N(0, σ²) + q·N(1, σ²) | N(0, σ²) | increasing | (log(1 − q), ∞) |
| `add` | N(0, σ²) | (1 − q)·N(0, σ²) + q·N(1, σ²) | decreasing | (−∞, −log(1 − q)) |
| `replace` | (1 − q)·N(0, σ²) + q·N(−1, σ²) | (1 − q)·N(0, σ²) + q·N(1, σ²) | decreasing | (−∞, ∞) |

`remove` and `add` are the two dominating pairs of add/remove neighbours (δ is the larger of their hockey-stick
divergences); `replace` is the replace-one pair (symmetric under x ↦ −x, so one direction suffices). Because the
loss is monotone, {ℓ > ε} is a half-line bounded by the crossing point x(ε), which has a closed form, and the
P- and Q-mass of any loss interval is a difference of Gaussian CDFs (docs/accounting.md, "Certified PLD").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flint import arb
from scipy.special import log_ndtr

__all__ = ["KINDS", "Pair", "log_excess", "pairs_for"]

KINDS = ("remove", "add", "replace")


@dataclass(frozen=True)
class Pair:
    """One round's dominating pair (module table). `means`, `p_weights`, `q_weights` describe the mixtures."""

    kind: str
    q: float
    sigma: float

    @property
    def means(self) -> tuple[int, ...]:
        return (0, -1, 1) if self.kind == "replace" else (0, 1)

    @property
    def p_weights(self) -> tuple[float, ...]:
        q = self.q
        return {"remove": (1 - q, q), "add": (1.0, 0.0), "replace": (1 - q, q, 0.0)}[self.kind]

    @property
    def q_weights(self) -> tuple[float, ...]:
        q = self.q
        return {"remove": (1.0, 0.0), "add": (1 - q, q), "replace": (1 - q, 0.0, q)}[self.kind]

    def arb_weights(self, which: str) -> tuple[arb, ...]:
        """Exact mixture weights as balls: 1 − q is formed in Arb from the exact float q."""
        q = arb(self.q)
        one_minus = 1 - q
        table = {"remove": {"p": (one_minus, q), "q": (arb(1), arb(0))},
                 "add": {"p": (arb(1), arb(0)), "q": (one_minus, q)},
                 "replace": {"p": (one_minus, q, arb(0)), "q": (one_minus, arb(0), q)}}
        return table[self.kind][which]

    @property
    def increasing(self) -> bool:
        return self.kind == "remove"

    def loss_range(self) -> tuple[float, float]:
        """(inf ℓ, sup ℓ) in floats (±inf where unbounded)."""
        if self.q == 1.0:
            return -math.inf, math.inf
        if self.kind == "remove":
            return math.log1p(-self.q), math.inf
        if self.kind == "add":
            return -math.inf, -math.log1p(-self.q)
        return -math.inf, math.inf

    # --- floats (choosing grids and tilts only; never a bound) -------------------------------------------

    def crossing_float(self, eps: np.ndarray) -> np.ndarray:
        """x(ε) with ℓ(x(ε)) = ε, elementwise; ±inf outside the loss range."""
        eps = np.asarray(eps, dtype=float)
        q, s2 = self.q, self.sigma ** 2
        lo, hi = self.loss_range()
        with np.errstate(all="ignore"):
            if self.kind in ("remove", "add"):
                e = eps if self.kind == "remove" else -eps
                # log(e^e − (1 − q)) as e + log1p(−(1 − q)e^{−e}) wherever that product is at most 1/2 (overflow-
                # free, and exact for q = 1, where expm1(e) + q cancels e^e below 2^-53 to 0 for e < −37 and put
                # the lattice top of the add pair at a loss of 37.4); log(expm1(e) + q) elsewhere (no cancellation)
                prod = (1 - q) * np.exp(-e)
                big = e + np.log1p(-np.minimum(prod, 0.5))
                small = np.log(np.expm1(np.minimum(e, 700.0)) + q)
                log_c = np.where(prod <= 0.5, big, small)
                x = s2 * (log_c - math.log(q)) + 0.5
            else:
                log_u = self._replace_log_u_float(eps)
                x = s2 * log_u
        below = eps <= lo
        above = eps >= hi
        inc = self.increasing
        x = np.where(below, -np.inf if inc else np.inf, x)
        x = np.where(above, np.inf if inc else -np.inf, x)
        return x

    def _replace_log_u_float(self, eps: np.ndarray) -> np.ndarray:
        q, s2 = self.q, self.sigma ** 2
        log_c = -1.0 / (2 * s2)
        # u solves e^ε q c u² + (e^ε − 1)(1 − q) u − q c = 0; log-space: u = 2qc / (B + sqrt(B² + 4e^ε q²c²))
        out = np.empty_like(eps)
        for i, e in enumerate(eps.flat):
            ee = min(e, 700.0)
            B = math.expm1(ee) * (1 - q)
            disc_log = 0.5 * np.logaddexp(2 * math.log(abs(B)) if B != 0 else -np.inf,
                                          math.log(4.0) + ee + 2 * (math.log(q) + log_c))
            if B >= 0:
                out.flat[i] = math.log(2.0) + math.log(q) + log_c - np.logaddexp(
                    math.log(B) if B > 0 else -np.inf, disc_log)
            else:
                num = math.exp(disc_log) - B
                out.flat[i] = math.log(num) - (math.log(2.0) + ee + math.log(q) + log_c)
        return out

    def log_sf_float(self, x: np.ndarray, which: str) -> np.ndarray:
        """log of the P- (which="p") or Q-mass of {y > x}, elementwise (floats)."""
        weights = self.p_weights if which == "p" else self.q_weights
        terms = [math.log(w) + log_ndtr(-(np.asarray(x, float) - m) / self.sigma)
                 for m, w in zip(self.means, weights) if w > 0]
        return np.logaddexp.reduce(np.stack(terms), axis=0)

    def log_mass_below_x_float(self, x: np.ndarray, which: str) -> np.ndarray:
        """log of the P- (which="p") or Q-mass of {y < x}, elementwise (floats)."""
        weights = self.p_weights if which == "p" else self.q_weights
        terms = [math.log(w) + log_ndtr((np.asarray(x, float) - m) / self.sigma)
                 for m, w in zip(self.means, weights) if w > 0]
        return np.logaddexp.reduce(np.stack(terms), axis=0)

    def log_loss_tail_float(self, eps: np.ndarray, side: str, which: str = "p") -> np.ndarray:
        """log of the P- (or Q-) mass of {ℓ > ε} (side "above") or {ℓ ≤ ε} ("below"), floats."""
        x = self.crossing_float(eps)
        if self.increasing == (side == "above"):
            return self.log_sf_float(x, which)
        return self.log_mass_below_x_float(x, which)

    # --- Arb (the certified path) -------------------------------------------------------------------------

    def crossing_arb(self, eps: arb) -> arb:
        """x(ε) as a ball, for ε strictly inside the loss range."""
        q, s = arb(self.q), arb(self.sigma)
        s2 = s * s
        if self.kind in ("remove", "add"):
            e = eps if self.kind == "remove" else -eps
            return s2 * (log_excess(e, q) - q.log()) + arb(1) / 2
        c = (-1 / (2 * s2)).exp()
        E = eps.exp()
        B = eps.expm1() * (1 - q)
        root = (B * B + 4 * E * q * q * c * c).sqrt()
        if B >= 0:
            u = 2 * q * c / (B + root)
        else:
            u = (root - B) / (2 * E * q * c)
        return s2 * u.log()


def log_excess(e: arb, q: arb) -> arb:
    """log(e^e − (1 − q)) in Arb (the crossing points of the mixture pairs): e + log1p(−(1 − q)e^{−e}) where that
    product is at most 1/2, log(expm1(e) + q) elsewhere. The second form alone cancels e^e against 1 − q: for q = 1
    and e = −88 the ball holds 0 at 128 bits, for e = −10⁴ at every precision up to 8192 bits. Both forms are
    exact enclosures, so the choice only decides how tight the ball is."""
    prod = (1 - q) * (-e).exp()
    return e + (-prod).log1p() if prod <= 0.5 else (e.expm1() + q).log()


def pairs_for(relation: str, q: float, sigma: float) -> tuple[Pair, ...]:
    """The pairs whose hockey-stick divergences give δ for `relation` ("add_remove" or "replace_one")."""
    if relation == "add_remove":
        return Pair("remove", q, sigma), Pair("add", q, sigma)
    return (Pair("replace", q, sigma),)
