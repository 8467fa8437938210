"""PrivITP under composition: the provable ex-post privacy filter, its replication mode, and the
basic-composition baselines (proofs in docs/selection.md, "Composition and the ex-post filter").

Guarantee.
* `FilteredPrivITP(params, E, δ_total)` (mode "provable", the default): the whole adaptive interaction —
  every query answered, truncated or refused — is (E, K_max·δ)-DP, K_max = ⌊δ_total/δ⌋ (each query is
  ex-post (ε1 + ε2(t; λ̃), δ)-DP, and the run-or-refuse rule is applied to Phase 1 and to Phase 2
  separately, before each runs). On EVERY transcript the certified realised spend Σ_k ε_k(o_k) is at most
  E: each charge is the upper end of an Arb ball (`privcheck.accounting.epsilon` of the query's event), and
  a phase runs only if the spend so far plus that phase's certified worst case fits in E.
* mode "replication_unsound": the published "run the full query, subtract its realised cost, stop once the
  budget goes negative, without counting the overshooting query" rule. NOT differentially private: whether
  a query is dropped depends on its private outcome, and the executed queries can spend more than E. Every
  output carries `provable: False`. Never the default.
* `BasicCompositionPrivITP(..., variant="heuristic")`: the paper's baseline, charging
  ε_max(λ̃) = ε1 + max((n−1)κ + κ_acc, n·κ) at the realised λ̃; labelled `heuristic`, `provable: False`
  (ε_max at a realised λ̃ is not an ex-ante bound: sup_λ̃ ε2 = ∞).
  `variant="clamped"`: the provable ex-ante variant: λ̃ is clamped to a public [λ_lo, λ_hi]
  (post-processing of Phase 1) and every query is charged ε1 + sup_{λ̃∈[λ_lo, λ_hi]} max((n−1)κ + κ_acc, nκ),
  the supremum bounded by certified per-cell bounds (`privitp_loss_batch` with `log2_step`); basic
  composition then gives (k·ε_max, k·δ)-DP for k answered queries.

Assumptions: those of PrivITP (docs/selection.md): scores clipped to the public range, Δ a public claim about
the reward model, all constants public and fixed in advance, Phase-1 and Phase-2 candidate lists drawn
independently from π0 (two different arrays per query), idealised real-valued noise. The queries may be
chosen adaptively from earlier public outputs.

    FILTERED_PRIVITP_QUERY(s1, s2):                                         # mode "provable"
      1  if k + 1 > K_max or not admits(ε1, δ): refuse  (public: depends on earlier outputs only)
      2  λ̃ ← λ̂(clip(s1)) + N(0, σ_X²);  charge(ε1, δ);  k ← k + 1
      3  worst(T) ← certified (T − 1)κ + max(κ_acc, κ) at λ̃  (PrivITPWorstCaseEvent, Phase-2 part)
      4  T ← largest T in [1, n] with admits(worst(T)), else 0                # binary search
      5  if T = 0: return fresh π0 sample (index FRESH_PI0), Phase 2 not run, cost 0
      6  run Phase 2 on s2[:T] (loop capped at T rounds; fallback after T rejections)
      7  charge((t − 1)κ + κ_acc if accepted at t else T·κ,  worst(T))

The truncated query of step 6 is a PrivITP query whose Phase 2 has T candidates (κ, κ_acc and ε1 do not
depend on n), so its realised Phase-2 loss is that of `PrivITPEvent` with `candidates = T`.
`admits`/`charge` are `privcheck.accounting.ExPostFilter`'s; its invariants (realised ≤ declared worst
case, admitted before charged) are enforced there and hold on every transcript.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np
from flint import arb

from mechanisms.selection.itp import lambda_hat_matrix
from mechanisms.selection.privitp import run_phase2
from mechanisms.selection.randomness import as_randomness
from mechanisms.selection.results import FRESH_PI0, HALT_FALLBACK
from mechanisms.selection.scores import check_independent, prepare_scores
from privcheck import validation as v
from privcheck.accounting import (
    ExPostFilter,
    PrivITPEvent,
    PrivITPParams,
    PrivITPPhase1Event,
    PrivITPWorstCaseEvent,
    basic_composition,
    epsilon,
    privitp_loss_batch,
)
from privcheck.errors import InvalidParameter
from privcheck.numerics.certified import float_up

__all__ = ["ANSWERED", "BASIC_VARIANTS", "DROPPED", "FILTER_MODES", "GUARANTEE_EX_ANTE", "GUARANTEE_FILTER",
           "GUARANTEE_HEURISTIC", "GUARANTEE_UNSOUND", "MAX_CELLS", "PHASE2_SKIPPED", "REFUSED",
           "BasicCompositionPrivITP",
           "FilteredPrivITP", "QueryOutcome"]

FILTER_MODES = ("provable", "replication_unsound")
BASIC_VARIANTS = ("heuristic", "clamped")

# Outcome statuses.
ANSWERED = "answered"              # Phase 2 ran (possibly truncated at T < n rounds)
PHASE2_SKIPPED = "phase2_skipped"  # T = 0: Phase 1 ran, the caller returns a fresh π0 sample
REFUSED = "refused"                # nothing ran (public decision)
DROPPED = "dropped"                # replication mode: ran, overshot the budget, not counted (not DP)

GUARANTEE_FILTER = "ex_post_filter"
GUARANTEE_UNSOUND = "not_dp_replication"
GUARANTEE_HEURISTIC = "heuristic"
GUARANTEE_EX_ANTE = "ex_ante_basic_composition"
# The clamped variant bounds the loss on every cell of its λ̃ range (about 0.1 ms per cell, measured): at most
# 2^18 cells, i.e. (λ_hi − λ_lo)/2^log2_step ≤ 2^18, which takes well under a minute.
MAX_CELLS = 2 ** 18


@dataclass(frozen=True)
class QueryOutcome:
    """One query of a composed PrivITP run.

    `index`: 0-based position in the Phase-2 list, `FRESH_PI0` (−1) when the caller must return a fresh π0
    sample (fallback, or Phase 2 skipped at T = 0), None when nothing is returned (refused / dropped).
    `halting_time`: 1-based acceptance round, `HALT_FALLBACK` (0) for the fallback, None when Phase 2 did
    not run. `rounds`: the cap T on the Phase-2 loop (n outside the filter). `epsilon` is the total charged
    for this query (certified upper bounds: phase1_epsilon + phase2_epsilon); `spent_after` the certified
    spend after it. For a dropped replication query, `epsilon` is what it really cost (not counted by the
    published rule).
    """

    query: int
    label: str
    status: str
    index: int | None
    halting_time: int | None
    lambda_tilde: float | None
    rounds: int | None
    phase1_epsilon: float
    phase2_epsilon: float
    worst_case_phase2: float | None
    epsilon: float
    delta: float
    spent_after: float
    provable: bool
    guarantee: str
    privacy_release: bool
    reason: str | None = None

    @property
    def answered(self) -> bool:
        return self.status == ANSWERED

    @property
    def refused(self) -> bool:
        return self.status == REFUSED

    def to_json(self) -> dict:
        return asdict(self)


def _exact_k_max(delta_total: float, delta: float) -> int:
    """K_max = ⌊δ_total/δ⌋ in exact rational arithmetic on the two floats (no rounding)."""
    return math.floor(Fraction(delta_total) / Fraction(delta))


def _release_lambda_tilde(s1: np.ndarray, params: PrivITPParams, gen: np.random.Generator) -> float:
    """Phase 1: λ̃ = λ̂(s1) + N(0, σ_X²) on already clipped scores [1, n] (the Gaussian mechanism)."""
    lam = float(lambda_hat_matrix(s1, params.beta)[0])
    return lam + float(gen.normal(0.0, params.sigma_x))


def _phase2(s2: np.ndarray, lambda_tilde: float, rounds: int, params: PrivITPParams,
            gen: np.random.Generator) -> int | None:
    """Phase 2 on the first `rounds` candidates of the clipped list [1, n]: the 1-based acceptance round,
    or None for the fallback after `rounds` rejections."""
    c = params.threshold_width(lambda_tilde)
    first, accepted = run_phase2(s2[:, :rounds], np.array([lambda_tilde]), np.array([c]), params.sigma_z, gen)
    return int(first[0]) + 1 if bool(accepted[0]) else None


# The certified losses below are pure functions of public values (the parameters, λ̃, t, T): cached, so that the
# filter's binary search over T and the repeated construction of equal rules do not recompute them.

@functools.lru_cache(maxsize=4096)
def _realised_phase2(params: PrivITPParams, lambda_tilde: float, halting_time: int | None, rounds: int) -> float:
    """Certified Phase-2 loss of a query whose loop was capped at `rounds` and halted at t (None: fallback):
    (t − 1)κ + κ_acc or rounds·κ, from the event of a PrivITP query with `rounds` Phase-2 candidates."""
    if rounds != params.candidates:
        params = dataclasses.replace(params, candidates=rounds)
    return epsilon(PrivITPEvent(params, lambda_tilde, halting_time)).details["eps2_post"]["value"]


@functools.lru_cache(maxsize=4096)
def _worst_phase2(params: PrivITPParams, lambda_tilde: float, rounds: int) -> float:
    """Certified worst Phase-2 loss (rounds − 1)κ + max(κ_acc, κ) with the loop capped at `rounds`."""
    return epsilon(PrivITPWorstCaseEvent(params, lambda_tilde, rounds)).details["phase2"]


@functools.lru_cache(maxsize=64)
def _clamped_sup(params: PrivITPParams, first: int, last: int, log2_step: int) -> float:
    """ε1 + max over the cells k·2^s, k = first..last, of the certified per-cell bounds on (n − 1)κ + κ_acc
    (acceptance at round n) and nκ (fallback): the largest realised loss of a query, over every λ̃ of the cells."""
    cells = np.arange(first, last + 1, dtype=np.float64) * 2.0 ** log2_step
    n = params.candidates
    records = privitp_loss_batch(params, np.concatenate([cells, cells]), [n] * cells.size + [None] * cells.size,
                                 log2_step=log2_step)
    return max(r.value for r in records)


class _Composed:
    """Shared plumbing: parameters, score validation, K_max, ε1, outcomes and the query loop."""

    def __init__(self, params: PrivITPParams, budget, delta_total, clip: bool):
        if not isinstance(params, PrivITPParams):
            raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
        if not isinstance(clip, (bool, np.bool_)):
            raise InvalidParameter("clip", clip, "True or False")
        self.params, self.clip = params, bool(clip)
        self.budget = v.positive("budget", budget)
        self.delta_total = v.open_unit("delta_total", delta_total)
        if self.delta_total < params.delta:
            raise InvalidParameter("delta_total", delta_total,
                                   f"[params.delta, 1) = [{params.delta}, 1) (at least one Phase-1 release)")
        self.k_max = _exact_k_max(self.delta_total, params.delta)
        self.eps1 = epsilon(PrivITPPhase1Event(params)).value   # certified (ε1, δ) of the λ̃ release
        self.phase1_runs = 0
        self.outcomes: list[QueryOutcome] = []

    def _scores(self, phase1_scores, phase2_scores) -> tuple[np.ndarray, np.ndarray]:
        check_independent(phase1_scores, phase2_scores)
        n = self.params.candidates
        out = []
        for name, raw in (("phase1_scores", phase1_scores), ("phase2_scores", phase2_scores)):
            s = prepare_scores(raw, self.params.r_lo, self.params.r_max, clip=self.clip, name=name)
            if s.shape != (1, n):
                raise InvalidParameter(name, f"array of shape {s.shape}",
                                       f"one prompt's {n} scores (n = params.candidates)")
            out.append(s)
        check_independent(out[0], out[1])
        return out[0], out[1]

    def _label(self, label) -> str:
        return f"query {len(self.outcomes)}" if label is None else str(label)

    def _record(self, **kw) -> QueryOutcome:
        out = QueryOutcome(query=len(self.outcomes), delta=self.params.delta, **kw)
        self.outcomes.append(out)
        return out

    def run(self, queries, rng=None, *, stop_at_refusal: bool = True) -> list[QueryOutcome]:
        """Answer a stream of queries, each a pair (phase1_scores, phase2_scores) for one prompt (two
        independent candidate lists of n). Returns this call's outcomes. With `stop_at_refusal` (default) the
        stream is not consumed past the first refusal: every PrivITP query has the same ε1 and δ, so once one
        is refused for budget or K_max, all later ones are too (the iterable may be infinite)."""
        rand = as_randomness(rng)
        start = len(self.outcomes)
        for phase1, phase2 in queries:
            out = self.query(phase1, phase2, rand)
            if stop_at_refusal and out.status in (REFUSED, DROPPED):
                break
        return self.outcomes[start:]

    def _counts(self) -> dict:
        statuses = [o.status for o in self.outcomes]
        return {s: statuses.count(s) for s in (ANSWERED, PHASE2_SKIPPED, REFUSED, DROPPED)}


class FilteredPrivITP(_Composed):
    """PrivITP queries under the pure ex-post privacy filter (see the module docstring).

    `budget` is E, `delta_total` the δ budget (K_max = ⌊δ_total/δ⌋ Phase-1 releases). `mode="provable"`
    (default) implements FILTERED_PRIVITP_QUERY; `mode="replication_unsound"` the published
    charge-after-run rule, NOT DP (`provable: False` on every output). The filter transcript is
    `self.filter` (`privcheck.accounting.ExPostFilter`); `transcript()` returns it with the outcomes.
    """

    def __init__(self, params: PrivITPParams, budget, delta_total, mode: str = "provable", *, clip: bool = True):
        if mode not in FILTER_MODES:
            raise InvalidParameter("mode", mode, " or ".join(repr(m) for m in FILTER_MODES))
        super().__init__(params, budget, delta_total, clip)
        self.mode = mode
        self.filter = ExPostFilter(self.budget, self.delta_total, mode)
        self._counted = arb(0)          # replication mode: the spend the published rule reports
        self._stopped = False           # replication mode: the budget went negative

    @property
    def provable(self) -> bool:
        return self.mode == "provable"

    @property
    def guarantee(self) -> str:
        return GUARANTEE_FILTER if self.provable else GUARANTEE_UNSOUND

    @property
    def spent(self) -> float:
        """Certified upper bound on the ε spent by every mechanism run so far (dropped queries included)."""
        return self.filter.spent

    @property
    def counted_spent(self) -> float:
        """Replication mode: the spend the published rule reports (overshooting query not counted)."""
        return self.filter.spent if self.provable else float_up(self._counted)

    def rounds_cap(self, lambda_tilde: float) -> int:
        """T of step 4 for the current spend: the largest T in [1, n] whose certified worst Phase-2
        loss (T − 1)κ + max(κ_acc, κ) the filter admits, or 0. The worst case increases with T: binary search."""
        n = self.params.candidates

        def fits(rounds: int) -> bool:
            return self.filter.admits(_worst_phase2(self.params, lambda_tilde, rounds))

        if fits(n):                     # the common case first: one evaluation
            return n
        if not fits(1):
            return 0
        lo, hi = 1, n                   # fits(lo), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def _refuse(self, label: str, reason: str) -> QueryOutcome:
        self.filter.refuse(f"{label}/phase1", self.eps1, self.params.delta)
        return self._record(label=label, status=REFUSED, index=None, halting_time=None, lambda_tilde=None,
                            rounds=None, phase1_epsilon=0.0, phase2_epsilon=0.0, worst_case_phase2=None,
                            epsilon=0.0, spent_after=self.spent, provable=self.provable,
                            guarantee=self.guarantee, privacy_release=False, reason=reason)

    def query(self, phase1_scores, phase2_scores, rng=None, label=None) -> QueryOutcome:
        """One PrivITP query (one prompt: two independent lists of n scores). See the module docstring.

        The refusal decision (step 1) is taken first, from public state only (spend, Phase-1 count): a
        refused query does not read its scores or draw any randomness.
        """
        label = self._label(label)
        p = self.params
        if self._stopped:
            return self._refuse(label, "replication rule: budget went negative earlier")
        if self.phase1_runs + 1 > self.k_max:
            return self._refuse(label, f"K_max = {self.k_max} Phase-1 releases reached (δ budget)")
        if self.provable and not self.filter.admits(self.eps1):
            return self._refuse(label, "budget: spent + ε1 > E")
        if self.provable and not self.filter.admits(self.eps1, p.delta):
            return self._refuse(label, "δ budget: certified δ_spent + δ > δ_total")
        s1, s2 = self._scores(phase1_scores, phase2_scores)
        rand = as_randomness(rng)
        gen = rand.generator
        release = rand.privacy_release and self.provable
        # Phase 1 (admitted above in provable mode).
        lt = _release_lambda_tilde(s1, p, gen)
        self.filter.charge(f"{label}/phase1", self.eps1, self.eps1, p.delta)
        self.phase1_runs += 1
        if not self.provable:
            return self._replication(label, s2, lt, gen)
        rounds = self.rounds_cap(lt)
        if rounds == 0:
            self.filter.refuse(f"{label}/phase2", _worst_phase2(p, lt, 1))
            return self._record(label=label, status=PHASE2_SKIPPED, index=FRESH_PI0, halting_time=None,
                                lambda_tilde=lt, rounds=0, phase1_epsilon=self.eps1, phase2_epsilon=0.0,
                                worst_case_phase2=None, epsilon=self.eps1, spent_after=self.spent,
                                provable=True, guarantee=self.guarantee, privacy_release=release,
                                reason="T = 0: no Phase-2 round fits the remaining budget")
        t = _phase2(s2, lt, rounds, p, gen)
        worst = _worst_phase2(p, lt, rounds)
        # Both are certified upper bounds on the realised loss ((t−1)κ + κ_acc or T·κ ≤ (T−1)κ + max(κ_acc, κ));
        # the minimum guards against a one-ulp difference between the two ball evaluations.
        realised = min(_realised_phase2(p, lt, t, rounds), worst)
        self.filter.charge(f"{label}/phase2", realised, worst)
        return self._record(label=label, status=ANSWERED, index=FRESH_PI0 if t is None else t - 1,
                            halting_time=HALT_FALLBACK if t is None else t, lambda_tilde=lt, rounds=rounds,
                            phase1_epsilon=self.eps1, phase2_epsilon=realised, worst_case_phase2=worst,
                            epsilon=basic_composition([self.eps1, realised])[0], spent_after=self.spent,
                            provable=True, guarantee=self.guarantee, privacy_release=release,
                            reason=None if rounds == p.candidates else f"truncated at T = {rounds} < n")

    def _replication(self, label, s2, lt, gen) -> QueryOutcome:
        """The published rule: full query, subtract the realised cost, drop the query that overshoots."""
        n = self.params.candidates
        t = _phase2(s2, lt, n, self.params, gen)
        realised = _realised_phase2(self.params, lt, t, n)
        worst = _worst_phase2(self.params, lt, n)
        self.filter.charge(f"{label}/phase2", realised, worst)   # unsound mode: no invariant enforced
        total = arb(self.eps1) + arb(realised)
        counted = self._counted + total
        dropped = float_up(counted) > self.budget
        if dropped:
            self._stopped = True
        else:
            self._counted = counted
        return self._record(label=label, status=DROPPED if dropped else ANSWERED,
                            index=None if dropped else (FRESH_PI0 if t is None else t - 1),
                            halting_time=HALT_FALLBACK if t is None else t, lambda_tilde=lt, rounds=n,
                            phase1_epsilon=self.eps1, phase2_epsilon=realised, worst_case_phase2=worst,
                            epsilon=float_up(total), spent_after=self.spent, provable=False,
                            guarantee=GUARANTEE_UNSOUND, privacy_release=False,
                            reason="overshot the budget: dropped, not counted (NOT DP)" if dropped else None)

    def transcript(self) -> dict:
        return {"mechanism": "privitp", "composition": "ex_post_filter", "mode": self.mode,
                "provable": self.provable, "guarantee": self.guarantee, "budget": self.budget,
                "delta": self.params.delta, "delta_total": self.delta_total, "k_max": self.k_max,
                "phase1_runs": self.phase1_runs, "eps1": self.eps1, "spent": self.spent,
                "counted_spent": self.counted_spent, "counts": self._counts(),
                "guarantee_statement": (f"({self.budget}, {self.k_max}·{self.params.delta})-DP over the whole "
                                        "interaction (ex-post filter)") if self.provable else
                "NOT differentially private: replication of the charge-after-run rule",
                "params": self.params.to_json(), "filter": self.filter.to_json(),
                "outcomes": [o.to_json() for o in self.outcomes]}


class BasicCompositionPrivITP(_Composed):
    """The basic-composition baselines for a stream of PrivITP queries (full n rounds each).

    * `variant="heuristic"` (the paper's baseline; `provable: False`, labelled "heuristic"): after Phase 1, the
      query is charged ε_max(λ̃) = ε1 + max((n−1)κ + κ_acc, n·κ) at the realised λ̃; queries are answered while
      the charges fit in E (⌊E/ε_max⌋ when ε_max is constant), the first one that does not fit is not
      answered (its Phase-1 release is not charged: a heuristic) and ends the run.
    * `variant="clamped"` (provable, ex ante): λ̃ is clamped to the public `lambda_range` = [λ_lo, λ_hi]
      (default [r_lo − β, r_max − β], the range of λ̂ for scores in range), and every query costs the
      constant ε_max = ε1 + sup_{[λ_lo, λ_hi]} max((n−1)κ + κ_acc, nκ) (certified per-cell bounds on a dyadic
      grid of step 2^log2_step). The run answers min(⌊E/ε_max⌋, K_max) queries, refusing the rest before
      anything runs. λ_hi must lie below the point where the clamp c = c_min starts to bind.
    """

    def __init__(self, params: PrivITPParams, budget, delta_total, variant: str = "heuristic", *,
                 lambda_range=None, log2_step: int = -10, clip: bool = True):
        if variant not in BASIC_VARIANTS:
            raise InvalidParameter("variant", variant, " or ".join(repr(m) for m in BASIC_VARIANTS))
        super().__init__(params, budget, delta_total, clip)
        self.variant = variant
        self._spent = arb(0)
        self._stopped = False
        self.lambda_range = None
        self.epsilon_max = None
        if variant == "clamped":
            self.lambda_range = self._lambda_range(lambda_range)
            self.log2_step = log2_step
            self.epsilon_max = self._clamped_epsilon_max(log2_step)
        elif lambda_range is not None:
            raise InvalidParameter("lambda_range", lambda_range, "None for the heuristic variant")

    @property
    def provable(self) -> bool:
        return self.variant == "clamped"

    @property
    def guarantee(self) -> str:
        return GUARANTEE_EX_ANTE if self.provable else GUARANTEE_HEURISTIC

    @property
    def spent(self) -> float:
        return float_up(self._spent)

    def _lambda_range(self, lambda_range) -> tuple[float, float]:
        p = self.params
        if lambda_range is None:
            lambda_range = (p.r_lo - p.beta, p.r_max - p.beta)
        try:
            lo, hi = (v.finite("lambda_range", x) for x in lambda_range)
        except TypeError:
            raise InvalidParameter("lambda_range", lambda_range, "a pair (lo, hi) of finite reals") from None
        if not lo < hi:
            raise InvalidParameter("lambda_range", lambda_range, "lo < hi")
        return lo, hi

    def _clamped_epsilon_max(self, log2_step: int) -> float:
        """ε1 + sup over [λ_lo, λ_hi] of max((n−1)κ + κ_acc, nκ), from certified per-cell upper bounds."""
        p = self.params
        if isinstance(log2_step, bool) or not isinstance(log2_step, int) or not -20 <= log2_step <= 0:
            raise InvalidParameter("log2_step", log2_step, "an integer in [-20, 0]")
        lo, hi = self.lambda_range
        step = 2.0 ** log2_step
        first, last = math.floor(lo / step), math.floor(hi / step)
        if last - first + 1 > MAX_CELLS:
            raise InvalidParameter("lambda_range", self.lambda_range, f"a range of at most {MAX_CELLS} cells of "
                                   f"width 2^{log2_step} (λ_hi − λ_lo <= {MAX_CELLS * step:g})")
        # Every cell must lie where c = r_max + σ_Z·L − λ̃ is unclamped (with a margin far above the float
        # rounding of c), so that the per-cell bounds of privitp_loss_batch hold over the WHOLE cell.
        top = (last + 1) * step
        scale = abs(p.r_max) + abs(p.sigma_z * p.headroom) + abs(top) + 1.0
        if not p.r_max + p.sigma_z * p.headroom - top > p.c_min + 2.0 ** -40 * scale:
            raise InvalidParameter("lambda_range", self.lambda_range,
                                   f"lambda_hi below the clamp point r_max + σ_Z·L − c_min ≈ "
                                   f"{p.r_max + p.sigma_z * p.headroom - p.c_min:.6g} (minus one grid cell)")
        return _clamped_sup(p, first, last, log2_step)

    def heuristic_epsilon_max(self, lambda_tilde: float) -> float:
        """ε1 + max((n−1)κ + κ_acc, n·κ) at the realised λ̃: the larger of the certified losses of the two
        worst outcomes (acceptance at round n, the fallback)."""
        n = self.params.candidates
        return max(epsilon(PrivITPEvent(self.params, lambda_tilde, n)).value,
                   epsilon(PrivITPEvent(self.params, lambda_tilde, None)).value)

    def _refuse(self, label: str, reason: str, lambda_tilde=None) -> QueryOutcome:
        return self._record(label=label, status=REFUSED, index=None, halting_time=None, lambda_tilde=lambda_tilde,
                            rounds=None, phase1_epsilon=0.0, phase2_epsilon=0.0, worst_case_phase2=None,
                            epsilon=0.0, spent_after=self.spent, provable=self.provable,
                            guarantee=self.guarantee, privacy_release=False, reason=reason)

    def query(self, phase1_scores, phase2_scores, rng=None, label=None) -> QueryOutcome:
        label = self._label(label)
        p = self.params
        if self._stopped:
            return self._refuse(label, "budget exhausted earlier")
        if self.phase1_runs + 1 > self.k_max:
            return self._refuse(label, f"K_max = {self.k_max} Phase-1 releases reached (δ budget)")
        if self.provable and float_up(self._spent + arb(self.epsilon_max)) > self.budget:
            return self._refuse(label, "budget: spent + ε_max > E")
        s1, s2 = self._scores(phase1_scores, phase2_scores)
        rand = as_randomness(rng)
        gen = rand.generator
        lt = _release_lambda_tilde(s1, p, gen)
        self.phase1_runs += 1
        if self.provable:
            lt = min(max(lt, self.lambda_range[0]), self.lambda_range[1])   # post-processing of Phase 1
            eps_max = self.epsilon_max
        else:
            eps_max = self.heuristic_epsilon_max(lt)
            if float_up(self._spent + arb(eps_max)) > self.budget:
                self._stopped = True
                return self._refuse(label, "heuristic: ε_max(λ̃) does not fit the remaining budget", lt)
        n = p.candidates
        t = _phase2(s2, lt, n, p, gen)
        self._spent = self._spent + arb(eps_max)
        return self._record(label=label, status=ANSWERED, index=FRESH_PI0 if t is None else t - 1,
                            halting_time=HALT_FALLBACK if t is None else t, lambda_tilde=lt, rounds=n,
                            phase1_epsilon=self.eps1, phase2_epsilon=float_up(arb(eps_max) - arb(self.eps1)),
                            worst_case_phase2=None, epsilon=eps_max, spent_after=self.spent,
                            provable=self.provable, guarantee=self.guarantee,
                            privacy_release=rand.privacy_release and self.provable, reason=None)

    def transcript(self) -> dict:
        return {"mechanism": "privitp", "composition": "basic", "variant": self.variant,
                "provable": self.provable, "guarantee": self.guarantee, "budget": self.budget,
                "delta": self.params.delta, "delta_total": self.delta_total, "k_max": self.k_max,
                "phase1_runs": self.phase1_runs, "eps1": self.eps1, "spent": self.spent,
                "epsilon_max": self.epsilon_max, "lambda_range": self.lambda_range, "counts": self._counts(),
                "guarantee_statement": (f"(k·{self.epsilon_max}, k·{self.params.delta})-DP for k answered queries "
                                        "(basic composition, λ̃ clamped)") if self.provable else
                "heuristic: ε_max evaluated at the realised λ̃ is not an ex-ante bound",
                "params": self.params.to_json(), "outcomes": [o.to_json() for o in self.outcomes]}
