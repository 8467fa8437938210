"""Guess rules for one-run audits and how the threshold is chosen (docs/audits.md, "Choosing the threshold
without cheating").

Guarantees:
* Ranking: canaries are ordered by score, highest first; ties are broken by a fixed random key
  (`numpy` PCG64 with a public seed, default `TIE_BREAK_SEED`) drawn without looking at S.
  The top k₊ guess "present" (+1), the bottom k₋ guess "absent" (−1).
* `Explicit()`: one pre-registered (k₊, k₋), tested at level p against m canaries.
* `Bonferroni(family)`: K pairs declared at construction; each is tested at level p/K and the largest
  ε_lower is reported; the p-value at the nominal ε is K·min_k PVAL_k (capped at 1). The family must be
  a fixed list of integer pairs (a callable or any other label-dependent recipe is refused), and when the
  membership is a sealed `Membership` it must have been declared before S was revealed.
* `Split(frac, seed, candidates)`: a random subset (chosen by `seed`, independent of S) of ⌊frac·m⌉
  canaries is used only to choose (k₊, k₋) among `candidates` (sizes on the test part) by the planned
  bound `EPS_LB(m_test, r, ⌊precision·r⌋, δ, p)`; the test runs once on the remaining m_test canaries,
  and m in the δ term is m_test (the selection canaries become fixed, known records of the dataset).
Same-data selection (choosing k on the labels you test with) is not offered: it is invalid.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from audits.canary import TIE_BREAK_SEED, tick
from audits.statistics.pvalue import EpsSearch, p_value_unchecked, search_eps_lower
from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.randomness import RandomnessPolicy

__all__ = ["Bonferroni", "Explicit", "Outcome", "SPLIT_GRID_SIZE", "STRATEGIES", "Split", "TIE_BREAK_SEED",
           "check_strategy", "count", "guesses", "rank", "tie_break_key"]

SPLIT_GRID_SIZE = 24


# ---------------------------------------------------------------------------------------------------------------------
# Ranking and counting.


def tie_break_key(m: int, seed: int = TIE_BREAK_SEED) -> np.ndarray:
    """One uniform key per canary, independent of the scores and of S."""
    return RandomnessPolicy.seeded(seed).numpy_generator().random(m)


def rank(scores: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Indices ordered by score descending, ties by key descending."""
    return np.lexsort((-key, -scores))


def guesses(order: np.ndarray, k_plus: int, k_minus: int) -> np.ndarray:
    """γ ∈ {−1, 0, +1}^m: +1 for the first k₊ of `order`, −1 for the last k₋, 0 otherwise."""
    m = order.size
    gamma = np.zeros(m, dtype=np.int8)
    gamma[order[:k_plus]] = 1
    if k_minus:
        gamma[order[m - k_minus:]] = -1
    return gamma


def count(gamma: np.ndarray, signs: np.ndarray) -> tuple[int, int]:
    """(r, v): the number of guesses and of correct guesses."""
    made = gamma != 0
    return int(made.sum()), int(np.sum(made & (gamma == signs)))


def _check_pair(k_plus, k_minus, m: int, where: str) -> tuple[int, int]:
    kp = val.count(f"{where}k_plus", k_plus, 0)
    km = val.count(f"{where}k_minus", k_minus, 0)
    if kp + km < 1 or kp + km > m:
        raise InvalidParameter(f"{where}k_plus + k_minus", kp + km, f"an integer in [1, m={m}]")
    return kp, km


# ---------------------------------------------------------------------------------------------------------------------
# Strategies.


@dataclass(frozen=True)
class Outcome:
    """What a strategy tested: the chosen pair, the counts, the per-hypothesis level and the bound."""

    selection: str
    m_test: int
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    n_hypotheses: int
    split_frac: float | None
    search: EpsSearch
    p_value_at_nominal: float | None


@dataclass(frozen=True)
class Explicit:
    """One pre-registered (k₊, k₋), given to `from_scores`."""

    name = "explicit"

    def run(self, scores, signs, key, *, k_plus, k_minus, delta, p, eps_nominal) -> Outcome:
        m = scores.size
        if k_plus is None:
            raise InvalidParameter("k_plus", None, "an integer >= 0 (required with Explicit)")
        kp, km = _check_pair(k_plus, k_minus, m, "")
        r, v = count(guesses(rank(scores, key), kp, km), signs)
        search = search_eps_lower(m, r, v, delta, p)
        pnom = None if eps_nominal is None else p_value_unchecked(m, r, v, eps_nominal, delta)
        return Outcome("explicit", m, kp, km, r, v, 1, None, search, pnom)


@dataclass(frozen=True, init=False)
class Bonferroni:
    """A family of (k₊, k₋) pairs declared before the labels are seen."""

    family: tuple[tuple[int, int], ...]
    declared_at: int = field(compare=False)
    name = "bonferroni"

    def __init__(self, family):
        if callable(family) or isinstance(family, (str, bytes)) or not hasattr(family, "__iter__"):
            raise InvalidParameter("family", type(family).__name__,
                                   "a fixed list of (k_plus, k_minus) pairs declared before labels "
                                   "(label-dependent families are not families; use Split)")
        pairs = []
        for pair in list(family):
            if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
                raise InvalidParameter("family", pair, "(k_plus, k_minus) integer pairs")
            kp = val.count("family.k_plus", pair[0], 0)
            km = val.count("family.k_minus", pair[1], 0)
            if kp + km < 1:
                raise InvalidParameter("family", pair, "pairs with k_plus + k_minus >= 1")
            pairs.append((kp, km))
        if not pairs:
            raise InvalidParameter("family", [], "a non-empty list of (k_plus, k_minus) pairs")
        if len(set(pairs)) != len(pairs):
            raise InvalidParameter("family", "duplicate pairs", "distinct (k_plus, k_minus) pairs")
        object.__setattr__(self, "family", tuple(pairs))
        object.__setattr__(self, "declared_at", tick())

    def run(self, scores, signs, key, *, k_plus, k_minus, delta, p, eps_nominal) -> Outcome:
        m = scores.size
        if k_plus is not None or k_minus not in (None, 0):
            raise InvalidParameter("k_plus", k_plus, "omitted with Bonferroni (the family declares the pairs)")
        K = len(self.family)
        order = rank(scores, key)
        best = None
        p_nominal = math.inf
        for kp, km in self.family:
            _check_pair(kp, km, m, "family.")
            r, v = count(guesses(order, kp, km), signs)
            search = search_eps_lower(m, r, v, delta, p / K)
            if best is None or search.eps_lower > best[4].eps_lower:
                best = (kp, km, r, v, search)
            if eps_nominal is not None:
                p_nominal = min(p_nominal, p_value_unchecked(m, r, v, eps_nominal, delta))
        kp, km, r, v, search = best
        pnom = None if eps_nominal is None else min(1.0, K * p_nominal)
        return Outcome("bonferroni", m, kp, km, r, v, K, None, search, pnom)


@dataclass(frozen=True)
class Split:
    """Choose (k₊, k₋) on a random `frac` of the canaries, test once on the rest.

    `candidates`: (k₊, k₋) sizes on the test part; default: ~24 log-spaced k₊ with k₋ = 0, and the same
    sizes split evenly between top and bottom guesses.
    """

    frac: float = 0.5
    seed: int | None = None
    candidates: tuple | None = None
    name = "split"

    def __post_init__(self):
        object.__setattr__(self, "frac", val.open_unit("frac", self.frac))
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral)
                                      or self.seed < 0):
            raise InvalidParameter("seed", self.seed, "an integer >= 0 or None (OS entropy)")
        if self.candidates is not None:
            object.__setattr__(self, "candidates", tuple((val.count("candidates.k_plus", a, 0),
                                                          val.count("candidates.k_minus", b, 0))
                                                         for a, b in self.candidates))
            if not self.candidates:
                raise InvalidParameter("candidates", [], "a non-empty list of (k_plus, k_minus) pairs or None")

    def parts(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(selection indices, test indices): a uniformly random subset, independent of S."""
        n_sel = int(round(self.frac * m))
        if not 1 <= n_sel <= m - 1:
            raise InvalidParameter("frac", self.frac, f"a fraction leaving canaries on both sides of the split (m={m})")
        perm = RandomnessPolicy.from_setting(self.seed).numpy_generator().permutation(m)
        return np.sort(perm[:n_sel]), np.sort(perm[n_sel:])

    def grid(self, m_test: int) -> tuple[tuple[int, int], ...]:
        if self.candidates is not None:
            return self.candidates
        sizes = np.unique(np.round(np.geomspace(1, m_test, SPLIT_GRID_SIZE)).astype(int))
        pairs = [(int(k), 0) for k in sizes] + [(int(k - k // 2), int(k // 2)) for k in sizes if k >= 2]
        return tuple(dict.fromkeys(pairs))

    def run(self, scores, signs, key, *, k_plus, k_minus, delta, p, eps_nominal) -> Outcome:
        m = scores.size
        if k_plus is not None or k_minus not in (None, 0):
            raise InvalidParameter("k_plus", k_plus, "omitted with Split (the selection part chooses the pair)")
        sel, test = self.parts(m)
        m_sel, m_test = sel.size, test.size
        order_sel = rank(scores[sel], key[sel])
        best, best_plan = None, -1.0
        for kp, km in self.grid(m_test):
            _check_pair(kp, km, m_test, "candidates.")
            # the same guessing fractions on the selection part
            kp_s, km_s = int(round(kp * m_sel / m_test)), int(round(km * m_sel / m_test))
            if kp_s + km_s < 1:
                continue
            r_s, v_s = count(guesses(order_sel, kp_s, km_s), signs[sel])
            r = kp + km
            plan = search_eps_lower(m_test, r, int(math.floor(v_s / r_s * r)), delta, p).eps_lower
            if plan > best_plan:
                best, best_plan = (kp, km), plan
        if best is None:
            raise InvalidParameter("frac", self.frac, "a selection part large enough to evaluate a candidate")
        kp, km = best
        r, v = count(guesses(rank(scores[test], key[test]), kp, km), signs[test])
        search = search_eps_lower(m_test, r, v, delta, p)
        pnom = None if eps_nominal is None else p_value_unchecked(m_test, r, v, eps_nominal, delta)
        return Outcome("split", m_test, kp, km, r, v, 1, float(self.frac), search, pnom)


STRATEGIES = (Explicit, Bonferroni, Split)


def check_strategy(strategy):
    """The strategy itself, or InvalidParameter when it is not one of `STRATEGIES`."""
    if not isinstance(strategy, STRATEGIES):
        raise InvalidParameter("strategy", type(strategy).__name__,
                               "Explicit(), Bonferroni(family) declared before labels, or Split(frac, seed)")
    return strategy

