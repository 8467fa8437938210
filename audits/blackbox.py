"""Black-box pair audit with a selection/test split (docs/audits.md, "Black-box pair audits of the selection
mechanisms").

Guarantee. `pair_audit` draws n outputs of 𝓜(D) and n of 𝓜(D′), splits each side at random into a
selection half A and a test half B, chooses a direction and an event E on A only, and tests that one
(direction, event) once on B with one-sided Clopper–Pearson bounds at level p/2 each (p = 1 − confidence):

    p₁_lo = CP_lo(k₁, n₁, p/2),  p₂_up = CP_up(k₂, n₂, p/2)
    ε_lower = max(0, ln((p₁_lo − δ)/p₂_up)) if p₁_lo > δ else 0

If 𝓜 satisfies P[𝓜(D) ∈ E] ≤ e^ε·P[𝓜(D′) ∈ E] + δ (and the same with D, D′ swapped) for this pair, then
P[ε_lower > ε] ≤ p: given A, the event and direction are fixed, and both CP bounds hold together with
probability ≥ 1 − p, in which case (p₁_lo − δ)/p₂_up ≤ (P₁(E) − δ)/P₂(E) ≤ e^ε. No multiplicity correction
is needed because B is looked at once. For an ex-post claim the value to compare with is the largest
ex-post loss over the outputs in E; pass it as a callable `eps_nominal(event, direction)`.

Why the split: choosing E on the data it is tested on picks the luckiest of many events, so even a
mechanism with identical laws on D and D′ gets a positive "bound" far more often than p. The library
implements only the split form; `select_event` and `bound_from_counts` are exposed so that tests can show
the same-data failure.

Event families (all evaluated on A only):
* `Singletons()`: {o} for each output seen on A;
* `TopPrefixes(max_j)`: outputs ranked by their plug-in ratio on A, the events are the top-j prefix sets;
* `Thresholds(summary)`: {s(o) ≥ τ} and {s(o) ≤ τ} for τ among A's values of a scalar summary s;
* `Fixed(events)`: events declared in advance (pre-registration).
Criterion (default "plugin_ratio"): maximise ln(P̂₁(E)/P̂₂(E)) with P̂ = (k + ½)/(n_A + 1).
"predicted_bound" instead maximises the bound B would give if its frequencies equalled A's plug-in ones;
it is equally valid (it reads only A) and has more power for rare tail events such as thresholds.
Ties: larger numerator count on A, then a random key drawn from the audit's own generator.

Assumptions: the two samplers return i.i.d. draws of 𝓜 on a neighbouring pair fixed before sampling;
outputs are 1-D arrays (numbers or strings; encode structured outputs as one value per draw). The bound
covers this pair only; a search over pairs needs its own correction. Sampler calls:
`sample(size, generator) -> array[size]`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.stats import beta

from audits.statistics import report as rep
from privcheck import validation as val
from privcheck.errors import InvalidParameter

PSEUDO_COUNT = 0.5
D_OVER_DPRIME = "D_over_Dprime"
DPRIME_OVER_D = "Dprime_over_D"
DIRECTIONS = (D_OVER_DPRIME, DPRIME_OVER_D)
CRITERIA = ("plugin_ratio", "predicted_bound")
MAX_SAMPLES = 10**7      # draws per side: both samples are held in memory and shuffled
ASSUMPTIONS = ("iid_runs", "pair_fixed_before_sampling", "event_and_direction_chosen_on_selection_half_only",
               "neighbouring_datasets_under_claim_relation")

Sampler = Callable[[int, np.random.Generator], np.ndarray]


# --- events and event families ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """A set of outputs (`outputs`) or a threshold event {summary(o) op threshold} with op in {">=", "<="}."""

    family: str
    outputs: tuple = ()
    op: str | None = None
    threshold: float | None = None
    summary: Callable | None = field(default=None, compare=False, repr=False)

    def contains(self, outputs: np.ndarray) -> np.ndarray:
        """Boolean membership of each draw."""
        if self.op is None:
            return np.isin(outputs, np.asarray(self.outputs, dtype=outputs.dtype))
        values = _summary_values(self.summary, outputs)
        return values >= self.threshold if self.op == ">=" else values <= self.threshold

    def count(self, outputs: np.ndarray) -> int:
        return int(np.count_nonzero(self.contains(outputs)))

    def to_json(self) -> dict:
        return {"family": self.family, "outputs": [_plain(o) for o in self.outputs] if self.op is None else None,
                "op": self.op, "threshold": self.threshold}


@dataclass(frozen=True)
class Singletons:
    """{o} for every output o observed on the selection half."""

    name: str = "singletons"


@dataclass(frozen=True)
class TopPrefixes:
    """Top-j prefix sets of the outputs ranked by their plug-in ratio on A (j ≤ max_j, all when None)."""

    max_j: int | None = None
    name: str = "top_prefixes"


@dataclass(frozen=True)
class Thresholds:
    """{s(o) ≥ τ} and {s(o) ≤ τ}, τ among A's values of s (evenly spaced A-quantiles above `max_thresholds`)."""

    summary: Callable | None = None
    max_thresholds: int = 2048
    name: str = "thresholds"


@dataclass(frozen=True)
class Fixed:
    """Events declared before sampling; each is an `Event` or a collection of outputs."""

    events: tuple
    name: str = "fixed"


FAMILIES = (Singletons, TopPrefixes, Thresholds, Fixed)
_FAMILY_NAMES = {"singletons": Singletons, "top_prefixes": TopPrefixes, "thresholds": Thresholds}


@dataclass(frozen=True)
class EventChoice:
    """The (direction, event) chosen on the selection half, with its criterion value and A counts."""

    event: Event
    direction: str
    criterion: float
    plugin_log_ratio: float
    k1_select: int
    k2_select: int
    candidates: int


# --- Clopper–Pearson and the bound --------------------------------------------------------------------------------

def cp_lower(k, n, a):
    """One-sided CP lower bound Beta⁻¹(a; k, n−k+1); 0 where k = 0 (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = beta.ppf(a, np.maximum(k, 1.0), n - k + 1.0)
    return np.where(k <= 0, 0.0, out)


def cp_upper(k, n, a):
    """One-sided CP upper bound Beta⁻¹(1 − a; k+1, n−k) (via the survival side); 1 where k = n (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = beta.isf(a, k + 1.0, np.maximum(n - k, 1.0))
    return np.where(k >= n, 1.0, out)


def _bound(p1_lo, p2_up, delta):
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log((p1_lo - delta) / p2_up)
    return np.where(p1_lo > delta, np.maximum(eps, 0.0), 0.0)


def bound_from_counts(k1: int, n1: int, k2: int, n2: int, *, delta: float, confidence: float
                      ) -> tuple[float, float, float]:
    """(ε_lower, p₁_lo, p₂_up) for k₁ of n₁ draws of side 1 and k₂ of n₂ of side 2 in E."""
    a = (1.0 - confidence) / 2.0
    p1_lo, p2_up = float(cp_lower(k1, n1, a)), float(cp_upper(k2, n2, a))
    return float(_bound(p1_lo, p2_up, delta)), p1_lo, p2_up


# --- selection on A -----------------------------------------------------------------------------------------------

def _plain(x):
    return x.item() if hasattr(x, "item") else x


def _summary_values(summary, outputs: np.ndarray) -> np.ndarray:
    try:
        values = np.asarray(outputs if summary is None else summary(outputs), dtype=np.float64)
    except (TypeError, ValueError):
        values = np.full(1, np.nan)
    if values.shape != outputs.shape[:1] or not np.all(np.isfinite(values)):
        raise InvalidParameter("event_family.summary", "summary output",
                               "one finite real value per draw (a scalar summary)")
    return values


def _log_plugin(k, n):
    return np.log((np.asarray(k, dtype=np.float64) + PSEUDO_COUNT) / (n + 2.0 * PSEUDO_COUNT))


class _Scorer:
    """Criterion values of candidate events from their A counts (k1 numerator, k2 denominator)."""

    def __init__(self, criterion: str, n1_sel: int, n2_sel: int, n1_test: int, n2_test: int, delta: float,
                 confidence: float):
        self.criterion, self.n1, self.n2 = criterion, n1_sel, n2_sel
        self.m1, self.m2, self.delta, self.a = n1_test, n2_test, delta, (1.0 - confidence) / 2.0

    def plugin(self, k1, k2):
        return _log_plugin(k1, self.n1) - _log_plugin(k2, self.n2)

    def predicted(self, k1, k2):
        """The bound B would give if its counts matched A's plug-in frequencies (rounded)."""
        p1 = np.exp(_log_plugin(k1, self.n1))
        p2 = np.exp(_log_plugin(k2, self.n2))
        e1, e2 = np.minimum(np.rint(p1 * self.m1), self.m1), np.minimum(np.rint(p2 * self.m2), self.m2)
        return _bound(cp_lower(e1, self.m1, self.a), cp_upper(e2, self.m2, self.a), self.delta)

    def __call__(self, k1, k2):
        return self.plugin(k1, k2) if self.criterion == "plugin_ratio" else self.predicted(k1, k2)


def _set_candidates(family, num: np.ndarray, den: np.ndarray, scorer: _Scorer, rng: np.random.Generator):
    """Candidate events of a set family for one direction: (k1, k2, make_event(i)) with events built lazily."""
    values, inverse = np.unique(np.concatenate([num, den]), return_inverse=True)
    c1 = np.bincount(inverse[:num.size], minlength=values.size)
    c2 = np.bincount(inverse[num.size:], minlength=values.size)
    if isinstance(family, Singletons):
        return c1, c2, lambda i: Event(family.name, (_plain(values[i]),))
    # Top-j prefixes: rank by the per-output plug-in ratio, ties by larger c1, then a random key.
    order = np.lexsort((rng.random(values.size), -c1, -scorer.plugin(c1, c2)))
    j_max = values.size if family.max_j is None else min(family.max_j, values.size)
    k1, k2 = np.cumsum(c1[order])[:j_max], np.cumsum(c2[order])[:j_max]
    return k1, k2, lambda j: Event(family.name, tuple(_plain(x) for x in values[order[:j + 1]]))


def _threshold_candidates(family: Thresholds, num: np.ndarray, den: np.ndarray):
    s1 = np.sort(_summary_values(family.summary, num))
    s2 = np.sort(_summary_values(family.summary, den))
    taus = np.unique(np.concatenate([s1, s2]))
    if taus.size > family.max_thresholds:
        taus = np.unique(np.quantile(np.concatenate([s1, s2]), np.linspace(0.0, 1.0, family.max_thresholds)))
    up1, up2 = s1.size - np.searchsorted(s1, taus, "left"), s2.size - np.searchsorted(s2, taus, "left")
    lo1, lo2 = np.searchsorted(s1, taus, "right"), np.searchsorted(s2, taus, "right")
    m = taus.size

    def make(i):
        op = ">=" if i < m else "<="
        return Event(family.name, op=op, threshold=float(taus[i % m]), summary=family.summary)
    return np.concatenate([up1, lo1]), np.concatenate([up2, lo2]), make


def _fixed_event(family: Fixed, item) -> Event:
    if isinstance(item, Event):
        return item
    outputs = tuple(_plain(o) for o in np.atleast_1d(np.asarray(item)))
    return Event(family.name, outputs)


def _candidates(family, num, den, scorer, rng):
    """(k1, k2, make_event) for one family and one direction (numerator draws `num`)."""
    if isinstance(family, (Singletons, TopPrefixes)):
        return _set_candidates(family, num, den, scorer, rng)
    if isinstance(family, Thresholds):
        return _threshold_candidates(family, num, den)
    events = [_fixed_event(family, item) for item in family.events]
    return (np.array([e.count(num) for e in events]), np.array([e.count(den) for e in events]),
            lambda i: events[i])


def select_event(select_D: np.ndarray, select_Dprime: np.ndarray, event_family, *, criterion: str = "plugin_ratio",
                 n_test: tuple[int, int] | None = None, delta: float = 0.0, confidence: float = 0.95,
                 rng: np.random.Generator | None = None) -> EventChoice:
    """Choose (direction, event) on selection draws only. `n_test` (sizes of the test parts of
    D and D′) is used by the "predicted_bound" criterion. Ties: larger numerator count, then a random key."""
    families = _families(event_family)
    if criterion not in CRITERIA:
        raise InvalidParameter("criterion", criterion, " or ".join(repr(c) for c in CRITERIA))
    rng = np.random.default_rng() if rng is None else rng
    m_d, m_dp = n_test if n_test is not None else (select_D.size, select_Dprime.size)
    sides = {D_OVER_DPRIME: (select_D, select_Dprime, m_d, m_dp), DPRIME_OVER_D: (select_Dprime, select_D, m_dp, m_d)}
    blocks = []   # (direction, k1, k2, criterion, plug-in, make_event)
    for direction, (num, den, m_num, m_den) in sides.items():
        scorer = _Scorer(criterion, num.size, den.size, m_num, m_den, delta, confidence)
        for family in families:
            k1, k2, make = _candidates(family, num, den, scorer, rng)
            if k1.size:
                blocks.append((direction, k1, k2, scorer(k1, k2), scorer.plugin(k1, k2), make))
    if not blocks:
        raise InvalidParameter("event_family", event_family, "families proposing at least one event on A")
    k1 = np.concatenate([b[1] for b in blocks])
    crit = np.concatenate([b[3] for b in blocks])
    best = int(np.lexsort((rng.random(k1.size), -k1, -crit))[0])
    offset = 0
    for direction, bk1, bk2, bcrit, bplug, make in blocks:
        if best < offset + bk1.size:
            i = best - offset
            return EventChoice(make(i), direction, float(bcrit[i]), float(bplug[i]), int(bk1[i]), int(bk2[i]),
                               int(k1.size))
        offset += bk1.size
    raise AssertionError("unreachable")


# --- validation ---------------------------------------------------------------------------------------------------

def _families(event_family) -> tuple:
    items = event_family if isinstance(event_family, (list, tuple)) else (event_family,)
    out = []
    for item in items:
        if isinstance(item, str) and item in _FAMILY_NAMES:
            item = _FAMILY_NAMES[item]()
        if not isinstance(item, FAMILIES):
            raise InvalidParameter("event_family", item, "Singletons(), TopPrefixes(), Thresholds(), Fixed(events) "
                                   "or one of " + ", ".join(repr(k) for k in _FAMILY_NAMES))
        if isinstance(item, Fixed) and not item.events:
            raise InvalidParameter("event_family", item, "Fixed(events) with at least one event")
        if isinstance(item, TopPrefixes) and item.max_j is not None:
            val.count("event_family.max_j", item.max_j, 1)
        if isinstance(item, Thresholds):
            val.count("event_family.max_thresholds", item.max_thresholds, 2)
        out.append(item)
    if not out:
        raise InvalidParameter("event_family", event_family, "a non-empty family or sequence of families")
    return tuple(out)


def _seed(value):
    if value is None:
        return None
    return val.seed("seed", value)


def _draws(name: str, sampler: Sampler, n: int, gen: np.random.Generator) -> np.ndarray:
    out = np.asarray(sampler(n, gen))
    if out.ndim != 1 or out.shape[0] != n:
        raise InvalidParameter(name, f"array of shape {out.shape}", f"a 1-D array of {n} outputs (one per draw)")
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        raise InvalidParameter(name, "outputs containing NaN or inf", "finite outputs")
    if out.dtype.kind not in "biufUS":
        raise InvalidParameter(name, f"array of dtype {out.dtype}", "numbers or strings (one per draw)")
    return out


# --- the audit ----------------------------------------------------------------------------------------------------

def _nominal(eps_nominal, event: Event, direction: str) -> float | None:
    if eps_nominal is None:
        return None
    value = float(eps_nominal(event, direction)) if callable(eps_nominal) else float(eps_nominal)
    if not (math.isfinite(value) and value >= 0.0):
        raise InvalidParameter("eps_nominal", value, "a finite ε >= 0 for the chosen event")
    return value


def _check_nominal(eps_nominal):
    if eps_nominal is None or callable(eps_nominal):
        return
    if isinstance(eps_nominal, bool) or not isinstance(eps_nominal, numbers.Real) or not float(eps_nominal) >= 0 \
            or not math.isfinite(float(eps_nominal)):
        raise InvalidParameter("eps_nominal", eps_nominal, "None, a finite ε >= 0, or a callable (event, direction)")


def pair_audit(sample_D: Sampler, sample_Dprime: Sampler, *, n: int, split_frac: float = 0.5, event_family,
               delta: float, confidence: float, seed: int | None, criterion: str = "plugin_ratio",
               eps_nominal=None, claim: dict | None = None, pair_id: str | None = None,
               diagnostics: dict | None = None) -> rep.AuditReport:
    """Black-box pair audit (module docstring); returns an `AuditReport` with method "blackbox_pair".

    `n` draws per side (n ≥ 2), of which round(n·split_frac) (at least 1, at most n − 1) select the event.
    `eps_nominal`: the certified ε of the claim (a float), or for ex-post mechanisms a callable
    `(event, direction) -> float` giving the largest certified loss over the outputs in E; it is reported
    as `claim.epsilon` beside `result.eps_lower`, and `rejects_nominal = eps_lower > eps_nominal`.
    `claim`: optional mapping with neighboring / accountant / mechanism (see `audits.statistics.report.claim_block`).
    `seed`: None draws the split, tie-breaks and sampler generators from OS entropy; an integer makes the
    audit reproducible (three independent child streams: D, D′, audit coins).
    """
    if not callable(sample_D):
        raise InvalidParameter("sample_D", type(sample_D).__name__, "a callable (size, generator) -> array")
    if not callable(sample_Dprime):
        raise InvalidParameter("sample_Dprime", type(sample_Dprime).__name__, "a callable (size, generator) -> array")
    n = val.count("n", n, 2, MAX_SAMPLES)
    split_frac = val.open_unit("split_frac", split_frac)
    confidence = val.open_unit("confidence", confidence)
    delta = val.half_open_unit("delta", delta)
    seed = _seed(seed)
    families = _families(event_family)
    if criterion not in CRITERIA:
        raise InvalidParameter("criterion", criterion, " or ".join(repr(c) for c in CRITERIA))
    _check_nominal(eps_nominal)
    if pair_id is not None and not isinstance(pair_id, str):
        raise InvalidParameter("pair_id", pair_id, "a string or None")
    claim_meta = rep.claim_block(None, delta, claim)          # validates `claim` before any sampling

    gen_d, gen_dp, coins = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    x1 = _draws("sample_D", sample_D, n, gen_d)
    x2 = _draws("sample_Dprime", sample_Dprime, n, gen_dp)
    n_sel = min(n - 1, max(1, int(round(n * split_frac))))
    x1, x2 = x1[coins.permutation(n)], x2[coins.permutation(n)]   # shuffle, then split each side
    a1, b1, a2, b2 = x1[:n_sel], x1[n_sel:], x2[:n_sel], x2[n_sel:]

    choice = select_event(a1, a2, families, criterion=criterion, n_test=(b1.size, b2.size), delta=delta,
                          confidence=confidence, rng=coins)
    num_b, den_b = (b1, b2) if choice.direction == D_OVER_DPRIME else (b2, b1)
    k1, k2 = choice.event.count(num_b), choice.event.count(den_b)
    eps_lower, p1_lo, p2_up = bound_from_counts(k1, num_b.size, k2, den_b.size, delta=delta, confidence=confidence)
    nominal = _nominal(eps_nominal, choice.event, choice.direction)
    ceiling, _, _ = bound_from_counts(num_b.size, num_b.size, 0, den_b.size, delta=delta, confidence=confidence)
    planned = _Scorer("predicted_bound", n_sel, n_sel, num_b.size, den_b.size, delta, confidence).predicted(
        choice.k1_select, choice.k2_select)

    result = {"guesses": None, "correct": None, "precision": None, "eps_lower": eps_lower,
              "confidence": confidence, "significance": 1.0 - confidence, "p_value_at_nominal": None,
              "rejects_nominal": None if nominal is None else bool(eps_lower > nominal), "search_capped": False,
              "n_per_side": n, "split_frac": split_frac, "event": choice.event.to_json(), "k1": k1, "k2": k2,
              "n1_test": int(num_b.size), "n2_test": int(den_b.size), "p1_lo": p1_lo, "p2_up": p2_up,
              "direction": choice.direction, "pair_id": pair_id, "eps_certified": nominal}
    diag = rep.diagnostics_block(diagnostics, event_family=[f.name for f in families], criterion=criterion,
                                 criterion_value=choice.criterion, plugin_log_ratio_select=choice.plugin_log_ratio,
                                 k1_select=choice.k1_select, k2_select=choice.k2_select, n_select=n_sel,
                                 candidate_events=choice.candidates,
                                 log_ratio_point_estimate_test=float(_log_plugin(k1, num_b.size)
                                                                     - _log_plugin(k2, den_b.size)))
    return rep.AuditReport(
        method="blackbox_pair",
        claim={**claim_meta, "epsilon": nominal},
        canaries=rep.canaries_block(m=2 * n, m_test=int(b1.size + b2.size), n_in=n, n_out=n, inclusion="fixed_runs",
                                    overrides=None),
        guessing=rep.guessing_block(selection="split", n_hypotheses=1, split_frac=split_frac,
                                    tie_break="fixed_random_key"),
        result=result,
        power=rep.power_block({"planned_eps_lower": float(planned), "score_model": "selection_half_plugin"},
                              eps_ceiling=ceiling, min_correct=None),
        assumptions=ASSUMPTIONS, extra_assumptions=(), diagnostics=diag, software=rep.software(),
        randomness=rep.randomness_block("not_applicable", None))


__all__ = ["ASSUMPTIONS", "CRITERIA", "DIRECTIONS", "DPRIME_OVER_D", "D_OVER_DPRIME", "Event", "EventChoice", "Fixed",
           "MAX_SAMPLES", "PSEUDO_COUNT", "Singletons", "Thresholds", "TopPrefixes", "bound_from_counts",
           "cp_lower", "cp_upper", "pair_audit", "select_event"]
