"""Power analysis of one-run canary audits, made before the run (docs/audits.md, "Power analysis" and "Proof notes").

`plan(m, delta=, confidence=, eps_nominal=, score_model=)` answers, for m randomised canaries at the claim's δ and
significance p = 1 − confidence:

* **ceiling** `ε_max(m) = max_r EPS_LB(m, r, r, δ, p)`: the best bound any attack can certify (all guesses correct).
  The maximum is taken over a log-spaced grid of r that always contains r = m (where it is reached in every case
  checked);
  `ceiling_guesses` reports the maximiser.
* **planned bound**: for each pre-declared guess rule (k₊ top-scored canaries guessed "in", k₋ bottom-scored guessed
  "out"), the precision of the rule on a large reference sample drawn from the score model (half in, half out), and
  `EPS_LB(m, k, ⌊precision·k⌋, δ, p)` with k = k₊ + k₋. The rule with the largest bound is k* (ties: first in grid
  order). The choice uses simulated scores only, never an audit's labels, so k* can be pre-registered.
* **Monte Carlo**: `sims` audits with S_i ~ uniform{±1} i.i.d., scores from the model, k* guesses, v correct,
  `EPS_LB(m, k*, v, δ, p)`; the median, 10% and 90% quantiles and the fraction of zero bounds.
* **nominal**: `min_correct_for_nominal`, the smallest v with `PVAL(m, k*, v, ε_nom, δ) < p` (the test that rejects
  ε_nom), null if even v = k* does not; whether any audit with m canaries can certify ε_nom at all, the
  number of canaries that would be needed, and a plain-language `message`.

Noiseless guard (default; `noiseless_guard=False` turns it off): when the score model describes a subsampled noisy
mechanism (`ScoreModel.never_sampled` = (1 − q)^T, e.g. `dpsgd_dirac`) and ε_nom is given, each rule also gets
`noiseless_miss`, an exact-tail upper bound on the probability that a run of the mechanism with its noise removed is
*not* rejected at ε_nom (`noiseless_miss`: sampled included canaries outscore the rest; never-sampled included
canaries tie with the excluded ones). k* is then the best planned bound among the rules whose bound is at most
NOISELESS_MISS; if there is none (e.g. the ceiling is below ε_nom), the best rule overall, and the report says so.
The guard uses public parameters only (m, q, T, ε_nom, δ), so k* stays pre-registrable.

Grid: the default grid (`default_k_grid`) has top-only rules (k, 0) and also balanced rules (⌈k/2⌉, ⌊k/2⌋), for k
up to m, so that a perfect score model plans the ceiling. The planned bound is the expected-count figure on an
exactly balanced reference; it ignores the realised imbalance of S, so for two-sided rules with k near m the Monte
Carlo median is lower (perfect model, m = 1000: 5.78 planned, ≈ 4.0 median). Read the Monte Carlo quantiles, not
only the planned figure.

Assumptions: PVAL is non-increasing in v (property-tested in tests/audits/test_one_run.py), used by the search for
the minimum correct count and the canaries search. p-values and bounds come from `audits.statistics.pvalue`. Cost: the
reference sample has about max(500,000, m) scores and the Monte Carlo `sims·m` scores (times T steps for
`dpsgd_dirac(llr)`, drawn in float32 blocks); EPS_LB is evaluated once per grid rule and once per distinct simulated
v. The reference sample uses a numpy Generator seeded with `seed` (reproducible; the report says so) or OS entropy
when `seed` is None (`privcheck.randomness.RandomnessPolicy`). The Monte Carlo audits are independent tasks of
about SIMS_BLOCK_SCORES scores each (⌊200,000/m⌋ audits, at least one), task j drawing from its own generator
seeded with `RandomnessPolicy.derive_seed(f"audits.power/monte_carlo/{j}")`; they run through `audits.backends`
(`backend="serial"` or `"ray"`, identical results for one seed). A task that fails on every attempt is listed in
`execution.failed`; the quantiles are taken over the `sims_finished` audits that finished (docs/scaling.md).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from audits.backends import DEFAULT_MAX_RETRIES, check_backend, run_tasks
from audits.statistics.pvalue import EPS_CAP, MAX_CANARIES, eps_lower, p_value
from audits.statistics.score_models import DPSGDDirac, ScoreModel, parse_score_model
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.randomness import RandomnessPolicy

__all__ = ["BoundCurve", "CANARIES_SEARCH_MAX", "CEILING_GRID_POINTS", "Ceiling", "DEFAULT_GRID_POINTS", "GridPoint",
           "GuessRule", "MAX_SIMULATED_DRAWS", "MC_SEED_LABEL", "NOISELESS_MISS", "POWER_BLOCK_KEYS", "PlanInputs",
           "PowerReport", "PowerVerdict", "REFERENCE_MIN_SCORES", "SIMS_BLOCK_SCORES", "UNDERPOWERED_FRACTION",
           "VERDICT_KEYS", "assess", "canaries_needed", "canaries_to_reach", "ceiling", "check_fraction",
           "default_k_grid", "guess_counts", "max_draws_per_score", "mc_tasks", "min_correct", "noiseless_miss",
           "nominal_epsilon", "plan", "planned_verdict", "plot_bound_vs_canaries", "reference_counts",
           "simulate_correct",
           "validate_plan_inputs"]

DEFAULT_GRID_POINTS = 40          # about 40 log-spaced guess counts per plan
CEILING_GRID_POINTS = 24          # r grid of the ceiling (plus r = m)
REFERENCE_MIN_SCORES = 500_000    # reference floor (half in, half out); plan spread ≈ ±0.07 in ε, DP-GRPO m = 1e4
SIMS_BLOCK_SCORES = 200_000       # Monte Carlo audits are drawn in tasks of about this many scores
# Task j's seed: RandomnessPolicy.derive_seed(label.format(j)); the label keeps the module's old path so seeds stay put.
MC_SEED_LABEL = "audits.power/monte_carlo/{}"
CANARIES_SEARCH_MAX = MAX_CANARIES   # the canaries search stops here (the ceiling property is verified up to 1e8)
MAX_SIMULATED_DRAWS = 2 * 10**9   # random numbers a plan draws (reference sample + sims·m scores): about a minute
NOISELESS_MISS = 1e-6             # the default plan misses a run without noise with at most this probability
UNDERPOWERED_FRACTION = 0.5       # a plan below this fraction of the claim's ε is UNDERPOWERED (docs/audits.md)
SEARCH_DOUBLINGS = 10             # `canaries_to_reach` tries m·2, m·4, …, m·2^10 …
SEARCH_MAX_CANARIES = 2_000_000   # … up to this many canaries
VERDICT_KEYS = ("underpowered", "underpowered_fraction", "canaries_needed", "plan_note")
POWER_BLOCK_KEYS = ("eps_ceiling", "min_correct_for_nominal", "planned_eps_lower", "mc_median", "mc_p10", "mc_p90",
                    "prob_zero", "score_model")


# ---------------------------------------------------------------------------------------------------------------------
# Guess rules and grids


@dataclass(frozen=True)
class GuessRule:
    """Guess "in" for the k_plus highest scores and "out" for the k_minus lowest; abstain otherwise."""
    k_plus: int
    k_minus: int

    @property
    def guesses(self) -> int:
        return self.k_plus + self.k_minus


def guess_counts(m: int, points: int = DEFAULT_GRID_POINTS) -> tuple[int, ...]:
    """About `points` log-spaced integers in [min(2, m), m], always including m."""
    m = val.count("m", m)
    low = min(2, m)
    counts = np.unique(np.round(np.geomspace(low, m, points)).astype(np.int64))
    return tuple(int(k) for k in np.union1d(counts, [m]))


def default_k_grid(m: int) -> tuple[GuessRule, ...]:
    """Top-only rules (k, 0) and balanced rules (⌈k/2⌉, ⌊k/2⌋) for k in `guess_counts(m)`.

    Top-only suits scores where only inclusion leaves a trace (a never-sampled included canary looks excluded);
    balanced rules reach the ceiling when both tails are informative (k = m, all correct).
    """
    rules: list[GuessRule] = []
    for k in guess_counts(m):
        for rule in (GuessRule(k, 0), GuessRule((k + 1) // 2, k // 2)):
            if rule not in rules:
                rules.append(rule)
    return tuple(rules)


def _parse_k_grid(k_grid, m: int) -> tuple[GuessRule, ...]:
    """An int k means the top-k rule (k, 0); a pair (k_plus, k_minus) is explicit. 1 ≤ k_plus + k_minus ≤ m."""
    allowed = f"a non-empty sequence of ints in [1, {m}] or (k_plus, k_minus) pairs with 1 <= k_plus + k_minus <= {m}"
    if k_grid is None:
        return default_k_grid(m)
    if isinstance(k_grid, (str, bytes)) or not hasattr(k_grid, "__iter__"):
        raise InvalidParameter("k_grid", k_grid, allowed)
    rules: list[GuessRule] = []
    for entry in k_grid:
        pair = (entry, 0) if isinstance(entry, numbers.Integral) and not isinstance(entry, bool) else entry
        try:
            kp, km = pair
            kp, km = val.count("k_grid", kp, minimum=0), val.count("k_grid", km, minimum=0)
        except (TypeError, ValueError):
            raise InvalidParameter("k_grid", k_grid, allowed) from None
        if not 1 <= kp + km <= m:
            raise InvalidParameter("k_grid", k_grid, allowed)
        if GuessRule(kp, km) not in rules:
            rules.append(GuessRule(kp, km))
    if not rules:
        raise InvalidParameter("k_grid", k_grid, allowed)
    return tuple(rules)


# ---------------------------------------------------------------------------------------------------------------------
# Statistical quantities (no simulation)


def _significance(confidence) -> float:
    # Plain float subtraction (not `val.significance`): every published plan figure was computed with this p.
    return 1.0 - val.open_unit("confidence", confidence)


def _delta(delta) -> float:
    """δ of the planned audit's claim, in [0, 1) (δ = 0 is a pure-DP claim)."""
    return val.half_open_unit("delta", delta)


def _canaries(m) -> int:
    return val.count("m", m, 1, MAX_CANARIES)


@dataclass(frozen=True)
class Ceiling:
    """ε_max(m) and the number of (all correct) guesses that reaches it."""
    eps: float
    guesses: int
    grid: tuple[int, ...]


def ceiling(m: int, delta: float, confidence: float = 0.95, r_grid=None) -> Ceiling:
    """ε_max(m) = max_r EPS_LB(m, r, r, δ, p) over `r_grid` ∪ {m} (default: 24 log-spaced r)."""
    m = _canaries(m)
    delta, p = _delta(delta), _significance(confidence)
    grid = guess_counts(m, CEILING_GRID_POINTS) if r_grid is None else tuple(
        sorted({val.count("r_grid", r) for r in r_grid} | {m}))
    if grid[-1] > m:
        raise InvalidParameter("r_grid", r_grid, f"integers in [1, m={m}]")
    best_eps, best_r = -1.0, m
    for r in grid:
        e = eps_lower(m, r, r, delta, p)
        if e > best_eps:
            best_eps, best_r = e, r
    return Ceiling(best_eps, best_r, grid)


def min_correct(m: int, r: int, eps_target: float, delta: float, confidence: float = 0.95) -> int | None:
    """Smallest v ≤ r with PVAL(m, r, v, ε_target, δ) < p (the test rejects ε_target), or None if v = r does not."""
    m, r = _canaries(m), val.count("r", r)
    if r > m:
        raise InvalidParameter("r", r, f"an integer in [1, m={m}]")
    eps_target = val.nonnegative("eps_nominal", eps_target)
    delta, p = _delta(delta), _significance(confidence)
    if not p_value(m, r, r, eps_target, delta) < p:
        return None
    lo, hi = 0, r                 # PVAL(lo) ≥ p (v = 0 has PVAL 1), PVAL(hi) < p
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if p_value(m, r, mid, eps_target, delta) < p:
            hi = mid
        else:
            lo = mid
    return hi


def canaries_needed(eps_target: float, delta: float, confidence: float = 0.95,
                    m_max: int = CANARIES_SEARCH_MAX) -> int | None:
    """Smallest m with PVAL(m, m, m, ε_target, δ) < p: m canaries, all guessed, all correct; None if none ≤ m_max.

    δ = 0: closed form, the smallest m with ρ(ε)^m < p. δ > 0: the first point of a geometric grid (ratio 2^{1/16},
    plus m_max) that rejects, then bisection down to the previous grid point. The ceiling rises, peaks and falls in
    m (docs/audits.md, proof notes), so "None" means no grid point up to m_max rejects (ε = 8 at δ = 1/69880).
    """
    eps_target = val.nonnegative("eps_nominal", eps_target)
    delta, p = _delta(delta), _significance(confidence)
    m_max = val.count("m_max", m_max, 1, MAX_CANARIES)
    if delta == 0.0:
        log_rho = -math.log1p(math.exp(-eps_target))          # ln ρ(ε) = −ln(1 + e^{−ε}) < 0
        m = math.floor(math.log(p) / log_rho) + 1              # smallest m with m·ln ρ < ln p
        if m > m_max + 1:                                      # far beyond the search range (rounding is ±1)
            return None
        while m > 1 and p_value(m - 1, m - 1, m - 1, eps_target, 0.0) < p:   # guard the floor against rounding
            m -= 1
        while not p_value(m, m, m, eps_target, 0.0) < p:
            m += 1
        return m if m <= m_max else None

    def rejects(m: int) -> bool:
        return p_value(m, m, m, eps_target, delta) < p

    grid = sorted({int(round(2 ** (j / 16))) for j in range(int(16 * math.log2(m_max)) + 1)} | {m_max})
    previous = 0
    for m in grid:
        if m > m_max:
            break
        if rejects(m):
            lo, hi = previous, m            # rejects(hi); lo does not (or lo = 0)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if rejects(mid):
                    hi = mid
                else:
                    lo = mid
            return hi
        previous = m
    return None


def nominal_epsilon(score_model, delta: float) -> tuple[float, str] | None:
    """The nominal ε of a score model's mechanism at δ, with its source, or None when the model has none.

    The ε is `privcheck.accounting.epsilon` of the model's event (`ScoreModel.event`): for `dpsgd_dirac(q, σ, T)`
    the Poisson-subsampled Gaussian composed T times, by PLD (the DP-SGD / DP-GRPO accounting); for `gdp(μ)` the
    Gaussian mechanism of sensitivity μ and unit noise, whose ε is the exact μ-GDP curve (certified).
    Interference does not change the claim (it only adds noise to the auditor's view).
    """
    model = parse_score_model(score_model)
    delta = val.open_unit("delta", delta)
    event = model.event
    if event is None:
        return None
    from privcheck.accounting import epsilon
    try:
        eps = float(epsilon(event, delta).value)
    except InvalidParameter as exc:       # the accountant names its event's fields; the caller gave a score model
        raise InvalidParameter("score_model", model.name, f"a mechanism the accountant covers at delta={delta!r}: "
                                                          f"{exc.allowed} for its {exc.name}") from None
    if not math.isfinite(eps):
        raise InvalidParameter("score_model", model.name, f"a mechanism with a finite ε at delta={delta!r}")
    if isinstance(model, DPSGDDirac):
        return float(eps), f"pld(q={model.q!r}, sigma={model.sigma!r}, T={model.steps}, delta={delta!r})"
    return float(eps), f"gdp_to_dp(mu={model.mu!r}, delta={delta!r})"


# ---------------------------------------------------------------------------------------------------------------------
# The noiseless-run guard


def noiseless_miss(m: int, rule: GuessRule, need: int | None, never_sampled: float) -> float:
    """Upper bound on P[a run of the mechanism with its noise removed is *not* rejected] by `rule`, where `need` is
    `min_correct(m, k, ε_nom, δ, confidence)` (None: even k correct guesses do not reject) and `never_sampled` is
    u₀ = (1 − q)^T.

    Without noise, an included canary sampled at least once (probability a = (1 − u₀)/2 per canary, S_i ~ Bern(½))
    scores strictly above every other canary; the others (excluded, or included but never sampled) score exactly
    alike, and among them a canary is included with probability b = u₀/(1 + u₀), independently. With N₁ ~ Bin(m, a)
    sampled included canaries: if k₊ ≤ N₁ ≤ m − k₋, the k₊ top guesses are all right, and the k₋ bottom guesses fall
    on tied canaries chosen by the public tie-break key (independent of S), of which W ~ Bin(k₋, b) are wrong. The
    test rejects iff W ≤ k − need. Union bound: miss ≤ P[N₁ < k₊] + P[N₁ > m − k₋] + P[Bin(k₋, b) > k − need].
    """
    if need is None:
        return 1.0
    from scipy.stats import binom
    a, b = 0.5 * (1.0 - never_sampled), never_sampled / (1.0 + never_sampled)
    miss = float(binom.cdf(rule.k_plus - 1, m, a)) + float(binom.sf(m - rule.k_minus, m, a))
    if rule.k_minus:
        miss += float(binom.sf(rule.guesses - need, rule.k_minus, b))
    return min(1.0, miss)


def _noiseless_guard(grid, rules, m, eps_nominal, delta, confidence, never_sampled):
    """The grid with each rule's `noiseless_miss`, and the guard's summary: `guarded` is True when at least one
    rule rejects a run without noise except with probability ≤ NOISELESS_MISS (the plan then chooses among those
    rules only)."""
    from scipy.stats import binom
    a = 0.5 * (1.0 - never_sampled)
    out = []
    for rule, g in zip(rules, grid):
        sampling_miss = float(binom.cdf(rule.k_plus - 1, m, a)) + float(binom.sf(m - rule.k_minus, m, a))
        if sampling_miss > NOISELESS_MISS:             # already too likely to miss: skip the min_correct search
            miss = min(1.0, sampling_miss)
        else:
            miss = noiseless_miss(m, rule, min_correct(m, rule.guesses, eps_nominal, delta, confidence),
                                  never_sampled)
        out.append(GridPoint(g.k_plus, g.k_minus, g.precision, g.correct, g.eps_lower, miss))
    guarded = any(g.noiseless_miss <= NOISELESS_MISS for g in out)
    return out, {"never_sampled": never_sampled, "max_miss": NOISELESS_MISS, "guarded": guarded,
                 "miss_bound": None}


# ---------------------------------------------------------------------------------------------------------------------
# Simulation


def reference_counts(model: ScoreModel, m: int, rules, rng) -> tuple[int, list[int]]:
    """Correct guesses of each rule on a reference sample of R·m scores (R·m/2 in, R·m/2 out), in units where the
    top-k₊/m fraction of the pool is exactly R·k₊ scores. Returns (R, correct counts)."""
    ratio = _reference_scores(m) // m                               # even, so R·m/2 is an integer
    half = ratio * m // 2
    labels = np.concatenate([np.ones(half, dtype=bool), np.zeros(half, dtype=bool)])
    scores = model.draw(labels, rng)
    shuffle = rng.permutation(labels.size)                          # ties then break by a key independent of labels
    order = shuffle[np.argsort(-scores[shuffle], kind="stable")]
    ranked = labels[order]
    in_from_top = np.concatenate([[0], np.cumsum(ranked)])
    out_from_bottom = np.concatenate([[0], np.cumsum(~ranked[::-1])])
    return ratio, [int(in_from_top[ratio * r.k_plus] + out_from_bottom[ratio * r.k_minus]) for r in rules]


def simulate_correct(model: ScoreModel, m: int, rule: GuessRule, sims: int, rng) -> np.ndarray:
    """Correct guesses of `rule` in `sims` simulated audits (S_i ~ Bern(1/2) i.i.d.; canary order = position).

    Scores are i.i.d. given each canary's own bit, so breaking ties by position is as good as a random key.
    """
    included = rng.random((sims, m)) < 0.5
    scores = model.draw(included, rng)
    if rule.k_plus and rule.k_minus:     # one ordering, so tied scores never land in both sets
        order = np.argsort(scores, axis=1, kind="stable")
        top, bottom = order[:, m - rule.k_plus:], order[:, :rule.k_minus]
    else:
        top = np.argpartition(-scores, rule.k_plus - 1, axis=1)[:, :rule.k_plus] if rule.k_plus else None
        bottom = np.argpartition(scores, rule.k_minus - 1, axis=1)[:, :rule.k_minus] if rule.k_minus else None
    v = np.zeros(sims, dtype=np.int64)
    if top is not None:
        v += np.take_along_axis(included, top, axis=1).sum(axis=1)
    if bottom is not None:
        v += (~np.take_along_axis(included, bottom, axis=1)).sum(axis=1)
    return v


def mc_tasks(m: int, sims: int, policy: RandomnessPolicy) -> tuple[tuple[int, int], ...]:
    """(audits, seed) of each Monte Carlo task: ⌊SIMS_BLOCK_SCORES/m⌋ audits per task (at least 1), the last one
    shorter; task j's seed is `policy.derive_seed(MC_SEED_LABEL.format(j))` (fresh OS entropy when unseeded)."""
    block = max(1, SIMS_BLOCK_SCORES // m)
    return tuple((min(block, sims - start), policy.derive_seed(MC_SEED_LABEL.format(j)))
                 for j, start in enumerate(range(0, sims, block)))


def _mc_task(item) -> np.ndarray:
    """One Monte Carlo task (run by `audits.backends.run_tasks`): correct counts of `n` audits from `seed`."""
    model, m, rule, n, seed = item
    return simulate_correct(model, m, rule, n, np.random.default_rng(seed))


# ---------------------------------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class GridPoint:
    """One pre-declared guess rule, its reference precision, expected correct count and planned bound."""
    k_plus: int
    k_minus: int
    precision: float
    correct: int
    eps_lower: float
    noiseless_miss: float | None = None    # bound on P[a run without noise is not rejected] (`noiseless_miss`)

    def to_json(self) -> dict:
        return {"k_plus": self.k_plus, "k_minus": self.k_minus, "guesses": self.k_plus + self.k_minus,
                "precision": self.precision, "correct": self.correct, "eps_lower": self.eps_lower,
                "noiseless_miss": self.noiseless_miss}


@dataclass(frozen=True)
class PowerReport:
    """A power analysis. `power_block()` is the audit report's `power` object; `to_json()` adds the details."""
    m: int
    delta: float
    confidence: float
    eps_nominal: float | None
    score_model: str
    score_model_params: dict
    eps_ceiling: float
    ceiling_guesses: int
    k_plus: int
    k_minus: int
    planned_eps_lower: float
    planned_correct: int
    planned_precision: float
    min_correct_for_nominal: int | None
    nominal_certifiable: bool | None
    canaries_needed_for_nominal: int | None
    plan_reaches_nominal: bool | None
    mc_median: float
    mc_p10: float
    mc_p90: float
    prob_zero: float
    mc_prob_reject_nominal: float | None
    search_capped: bool
    sims: int
    seed: int | None
    reference_scores: int
    grid: tuple[GridPoint, ...]
    message: str
    sims_finished: int = 0
    execution: dict | None = None      # `audits.backends.TaskRun.to_json()` of the Monte Carlo tasks
    noiseless: dict | None = None      # the noiseless-run guard (`_noiseless_guard`), None when not applicable

    @property
    def guesses(self) -> int:
        """k*, the planned number of guesses (k₊ + k₋)."""
        return self.k_plus + self.k_minus

    def power_block(self) -> dict:
        """Exactly the keys of the audit report's `power` block (`POWER_BLOCK_KEYS`)."""
        full = self.to_json()
        return {key: full[key] for key in POWER_BLOCK_KEYS}

    def to_json(self) -> dict:
        seeded = self.seed is not None
        return {
            "eps_ceiling": self.eps_ceiling, "ceiling_guesses": self.ceiling_guesses,
            "min_correct_for_nominal": self.min_correct_for_nominal,
            "planned_eps_lower": self.planned_eps_lower, "planned_correct": self.planned_correct,
            "planned_precision": self.planned_precision,
            "guesses": self.guesses, "k_plus": self.k_plus, "k_minus": self.k_minus,
            "mc_median": self.mc_median, "mc_p10": self.mc_p10, "mc_p90": self.mc_p90, "prob_zero": self.prob_zero,
            "mc_prob_reject_nominal": self.mc_prob_reject_nominal,
            "score_model": self.score_model, "score_model_params": dict(self.score_model_params),
            "m": self.m, "delta": self.delta, "confidence": self.confidence, "significance": 1.0 - self.confidence,
            "eps_nominal": self.eps_nominal, "nominal_certifiable": self.nominal_certifiable,
            "canaries_needed_for_nominal": self.canaries_needed_for_nominal,
            "plan_reaches_nominal": self.plan_reaches_nominal, "search_capped": self.search_capped,
            "sims": self.sims, "sims_finished": self.sims_finished, "execution": self.execution,
            "reference_scores": self.reference_scores,
            "randomness": {"seed": self.seed, "seeded": seeded,
                           "note": (f"seeded plan (seed {self.seed}): reproducible" if seeded
                                    else "unseeded plan (OS entropy): not reproducible")},
            "grid": [g.to_json() for g in self.grid],
            "noiseless": None if self.noiseless is None else dict(self.noiseless),
            "message": self.message,
        }


def _seed(seed) -> int | None:
    return None if seed is None else val.seed("seed", seed)


def _reference_scores(m: int) -> int:
    """Scores of the reference sample (R·m with R even and R·m ≥ REFERENCE_MIN_SCORES; `_reference_counts`)."""
    return 2 * math.ceil(REFERENCE_MIN_SCORES / (2 * m)) * m


def max_draws_per_score(m: int, sims: int) -> int:
    """The most random numbers per simulated score that a plan of m canaries and `sims` audits may draw."""
    return MAX_SIMULATED_DRAWS // (_reference_scores(m) + sims * m)


def _check_cost(m: int, sims: int, model: ScoreModel) -> None:
    """The reference sample and `sims` simulated audits of m canaries draw at most MAX_SIMULATED_DRAWS numbers."""
    per_score = model.draws_per_score
    room = MAX_SIMULATED_DRAWS // per_score - _reference_scores(m)
    if room < m:
        raise InvalidParameter("score_model", model.name, f"a model whose reference sample ({_reference_scores(m)} "
                               f"scores) and one simulated audit of m = {m} canaries take at most "
                               f"{MAX_SIMULATED_DRAWS} draws (it draws {per_score} per score)")
    if sims > room // m:
        raise InvalidParameter("sims", sims, f"an integer in [1, {room // m}] (reference sample + sims × m = {m} "
                               f"scores × {per_score} draws per score <= {MAX_SIMULATED_DRAWS})")


@dataclass(frozen=True)
class PlanInputs:
    """Validated inputs of `plan` (InvalidParameter names the first bad one)."""
    m: int
    delta: float
    confidence: float
    eps_nominal: float | None
    model: ScoreModel
    rules: tuple[GuessRule, ...]
    sims: int
    seed: int | None
    backend: str = "serial"
    address: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    noiseless_guard: bool = True


def validate_plan_inputs(m, *, delta, confidence, eps_nominal, score_model, k_grid=None, sims=200,
                         seed=None, backend="serial", address=None,
                         max_retries=DEFAULT_MAX_RETRIES, noiseless_guard=True) -> PlanInputs:
    """Check every input of `plan` without doing any work (the CLI calls it before deriving a nominal ε)."""
    m = _canaries(m)
    delta = _delta(delta)
    _significance(confidence)
    eps_nominal = None if eps_nominal is None else val.nonnegative("eps_nominal", eps_nominal)
    model = parse_score_model(score_model)
    rules = _parse_k_grid(k_grid, m)
    sims, seed = val.count("sims", sims), _seed(seed)
    _check_cost(m, sims, model)
    backend, address, max_retries = check_backend(backend, address, max_retries)
    if not isinstance(noiseless_guard, bool):
        raise InvalidParameter("noiseless_guard", noiseless_guard, "True or False")
    return PlanInputs(m, delta, float(confidence), eps_nominal, model, rules, sims, seed, backend, address,
                      max_retries, noiseless_guard)


def plan(m, *, delta, confidence, eps_nominal, score_model, k_grid=None, sims=200, seed=None, backend="serial",
         address=None, max_retries=DEFAULT_MAX_RETRIES, noiseless_guard=True) -> PowerReport:
    """Plan a one-run audit with m canaries (module docstring). All inputs are validated before any work.

    `backend`, `address`, `max_retries`: where the Monte Carlo tasks run (`audits.backends.run_tasks`).
    `noiseless_guard=False` plans the idealised attacker's best rule on an honest run only (module docstring).
    """
    inputs = validate_plan_inputs(m, delta=delta, confidence=confidence, eps_nominal=eps_nominal,
                                  score_model=score_model, k_grid=k_grid, sims=sims, seed=seed, backend=backend,
                                  address=address, max_retries=max_retries, noiseless_guard=noiseless_guard)
    m, delta, eps_nominal, model, rules, sims, seed = (inputs.m, inputs.delta, inputs.eps_nominal, inputs.model,
                                                        inputs.rules, inputs.sims, inputs.seed)
    p = _significance(confidence)
    policy = RandomnessPolicy.from_setting(seed)
    rng = policy.numpy_generator()

    ceil = ceiling(m, delta, confidence)
    ratio, correct = reference_counts(model, m, rules, rng)
    grid = []
    for rule, c in zip(rules, correct):
        k = rule.guesses
        v = c // ratio                                   # ⌊precision·k⌋ with precision = c/(R·k), in integers
        grid.append(GridPoint(rule.k_plus, rule.k_minus, c / (ratio * k), v, eps_lower(m, k, v, delta, p)))
    guard = None
    if inputs.noiseless_guard and eps_nominal is not None and model.never_sampled is not None:
        grid, guard = _noiseless_guard(grid, rules, m, eps_nominal, delta, confidence, model.never_sampled)
    eligible = [i for i, g in enumerate(grid) if guard is None or not guard["guarded"]
                or g.noiseless_miss <= NOISELESS_MISS]
    best = max(eligible, key=lambda i: (grid[i].eps_lower, -i))
    chosen, point = rules[best], grid[best]
    if guard is not None:
        guard["miss_bound"] = point.noiseless_miss

    tasks = [(model, m, chosen, n, task_seed) for n, task_seed in mc_tasks(m, sims, policy)]
    run = run_tasks(_mc_task, tasks, backend=inputs.backend, address=inputs.address,
                    max_retries=inputs.max_retries, desc="power Monte Carlo")
    if not run.finished:
        raise PrivcheckError(f"no Monte Carlo task finished ({len(tasks)} failed; first: {run.failures[0].error})")
    v_sim = np.concatenate([run.results[i] for i in run.finished])
    distinct = {int(v): eps_lower(m, chosen.guesses, int(v), delta, p) for v in np.unique(v_sim)}
    eps_sim = np.array([distinct[int(v)] for v in v_sim])
    p10, median, p90 = (float(x) for x in np.quantile(eps_sim, [0.1, 0.5, 0.9]))

    need = certifiable = needed = reaches = reject_rate = None
    if eps_nominal is not None:
        need = min_correct(m, chosen.guesses, eps_nominal, delta, confidence)
        certifiable = p_value(m, ceil.guesses, ceil.guesses, eps_nominal, delta) < p
        needed = canaries_needed(eps_nominal, delta, confidence)
        reaches = point.eps_lower > eps_nominal
        reject_rate = 0.0 if need is None else float(np.mean(v_sim >= need))
    capped = any(g.eps_lower >= EPS_CAP for g in grid) or ceil.eps >= EPS_CAP
    report = dict(
        m=m, delta=delta, confidence=float(confidence), eps_nominal=eps_nominal, score_model=model.name,
        score_model_params=model.params(), eps_ceiling=ceil.eps, ceiling_guesses=ceil.guesses,
        k_plus=chosen.k_plus, k_minus=chosen.k_minus, planned_eps_lower=point.eps_lower,
        planned_correct=point.correct, planned_precision=point.precision, min_correct_for_nominal=need,
        nominal_certifiable=certifiable, canaries_needed_for_nominal=needed, plan_reaches_nominal=reaches,
        mc_median=median, mc_p10=p10, mc_p90=p90, prob_zero=float(np.mean(eps_sim == 0.0)),
        mc_prob_reject_nominal=reject_rate, search_capped=capped, sims=sims, seed=seed,
        reference_scores=ratio * m, grid=tuple(grid), sims_finished=int(v_sim.size), execution=run.to_json(),
        noiseless=guard)
    return PowerReport(**report, message=_message(report, p))


def _message(r: dict, p: float) -> str:
    """A plain statement of what the plan says about the nominal claim, and about a run without noise."""
    guard = r.get("noiseless")
    if guard is None:
        return _verdict(r, p)
    share = f"never-sampled share of included canaries (1 - q)^T = {guard['never_sampled']:.3g}"
    if not r["nominal_certifiable"]:
        return _verdict(r, p) + (" NO NOISELESS GUARD: no run, with or without noise, can be rejected at this "
                                 "ceiling.")
    if guard["guarded"]:
        tail = (f" NOISELESS GUARD: with k+ = {r['k_plus']}, k- = {r['k_minus']}, a run with its noise removed is "
                f"rejected except with probability <= {guard['miss_bound']:.2g} ({share}).")
    else:
        tail = (f" NO NOISELESS GUARD: no rule of the grid rejects a run with its noise removed except with "
                f"probability <= {guard['max_miss']:.0e} ({share}; included canaries that are never sampled tie "
                f"with the excluded ones, so such a run cannot get every guess right).")
    return _verdict(r, p) + tail


def _verdict(r: dict, p: float) -> str:
    head = (f"m = {r['m']} canaries, δ = {r['delta']:.6g}, confidence {1 - p:.6g}: ceiling {r['eps_ceiling']:.4f} "
            f"(all {r['ceiling_guesses']} guesses correct); planned bound {r['planned_eps_lower']:.4f} with "
            f"k* = {r['k_plus'] + r['k_minus']} guesses (k+ = {r['k_plus']}, k- = {r['k_minus']}) under "
            f"{r['score_model']}.")
    if r["sims_finished"] < r["sims"]:        # failed tasks are reported, never silently dropped
        head += (f" Monte Carlo over the {r['sims_finished']} of {r['sims']} simulated audits that finished "
                 f"({len(r['execution']['failed'])} tasks failed).")
    eps = r["eps_nominal"]
    if eps is None:
        return head + " No nominal ε given."
    if not r["nominal_certifiable"]:
        needed = r["canaries_needed_for_nominal"]
        tail = (f" No number of canaries up to {CANARIES_SEARCH_MAX:.0e} can certify it at this δ "
                "(the ceiling peaks in m)."
                if needed is None else f" Certifying it needs at least {needed} canaries, all guessed correctly.")
        return head + (f" CANNOT CERTIFY: ε_nominal = {eps:.4g} cannot be certified by any one-run audit with "
                       f"{r['m']} canaries at this δ and confidence." + tail)
    if not r["plan_reaches_nominal"]:
        need = r["min_correct_for_nominal"]
        need_text = ("even all k* correct would not reject it" if need is None
                     else f"rejecting it needs {need} of {r['k_plus'] + r['k_minus']} guesses correct")
        return head + (f" UNDERPOWERED: the ceiling allows ε_nominal = {eps:.4g} but the planned attack does not "
                       f"reach it ({need_text}; simulated rejection rate {r['mc_prob_reject_nominal']:.3g}). "
                       f"A bound below ε_nominal will say nothing about how tight the accounting is.")
    return head + (f" POWERED: the planned bound exceeds ε_nominal = {eps:.4g} (simulated rejection rate "
                   f"{r['mc_prob_reject_nominal']:.3g}); if the mechanism met its claim, the audit would not reject "
                   f"it except with probability ≤ {p:.3g}.")


# ---------------------------------------------------------------------------------------------------------------------
# The verdict that travels with an audit: UNDERPOWERED or not (docs/audits.md, "Underpowered audits")


@dataclass(frozen=True)
class PowerVerdict:
    """Whether a plan can reach `fraction` of the claim's ε, with the canary count that would (`assess`).

    `underpowered`: True, False, or None when it cannot be told (no ε claim; no score-model plan and a ceiling
    above the target). `canaries_needed`: a canary count whose plan reaches fraction·ε (`canaries_basis` says how
    it was found: "score_model" by `canaries_to_reach`, "ceiling" by `canaries_needed`, a lower bound: all guesses
    correct); None when no count up to the search limit does, or when none was searched. `line`: one line,
    "UNDERPOWERED: ..." when underpowered (the first line of every audit command's output), else "powered: ..." or
    "no plan: ...". `report`: the PowerReport assessed, when there is one."""
    underpowered: bool | None
    fraction: float
    eps_claim: float | None
    eps_planned: float | None
    eps_ceiling: float
    m: int | None
    canaries_needed: int | None
    canaries_basis: str | None
    planned: bool
    line: str
    report: PowerReport | None = None

    @property
    def warning(self) -> str | None:
        """The UNDERPOWERED line, or None."""
        return self.line if self.underpowered else None

    def fields(self) -> dict:
        """The verdict's keys of the audit report's `power` block (`VERDICT_KEYS`)."""
        return {"underpowered": self.underpowered, "underpowered_fraction": self.fraction,
                "canaries_needed": self.canaries_needed, "plan_note": self.line}

    def power_block(self) -> dict:
        """The plan's `power` block (when there is a plan) with the verdict's keys."""
        return {**(self.report.power_block() if self.report is not None else {}), **self.fields()}

    def to_json(self) -> dict:
        return {**(self.report.to_json() if self.report is not None else {}), **self.fields(),
                "eps_claim": self.eps_claim, "eps_planned": self.eps_planned, "canaries_basis": self.canaries_basis}


def canaries_to_reach(target: float, *, m: int, delta: float, confidence: float, score_model, seed=None,
                      doublings: int = SEARCH_DOUBLINGS) -> tuple[int | None, int]:
    """(count, searched): the first of m·2, m·4, …, m·2^doublings (at most SEARCH_MAX_CANARIES) whose `plan` under
    `score_model` has a planned bound ≥ target — within a factor 2 of the least such count on that grid — or None;
    `searched` is the largest count tried. Each try is one `plan(..., sims=1)`, whose reference sample (about
    500,000 scores; 1–3 s for `dpsgd_dirac` with T ≈ 100) dominates the cost; a count whose plan would exceed
    MAX_SIMULATED_DRAWS ends the search."""
    target = val.nonnegative("target", target)
    m = _canaries(m)
    model = parse_score_model(score_model)
    searched = m
    for _ in range(val.count("doublings", doublings)):
        if 2 * m > SEARCH_MAX_CANARIES:
            break
        m = 2 * m
        try:
            trial = plan(m, delta=delta, confidence=confidence, eps_nominal=None, score_model=model, sims=1, seed=seed)
        except InvalidParameter:                   # beyond the simulation budget
            break
        searched = m
        if trial.planned_eps_lower >= target:
            return m, searched
    return None, searched


def check_fraction(fraction) -> float:
    """A fraction of the claim in (0, 1]: the UNDERPOWERED threshold (InvalidParameter naming `fraction`)."""
    f = val.positive("fraction", fraction)
    if f > 1.0:
        raise InvalidParameter("fraction", fraction, "a number in (0, 1]")
    return float(f)


def assess(power, *, eps_claim=None, delta=None, confidence=None, m=None, fraction=UNDERPOWERED_FRACTION,
           score_model=None, seed=None) -> PowerVerdict:
    """The one definition of UNDERPOWERED (docs/audits.md, "Underpowered audits").

    `power`: a PowerReport (its ε_nominal, δ, confidence and m are the defaults of the keywords) or an audit report's
    `power` block (a mapping with `eps_ceiling`, `planned_eps_lower`, `mc_median`, `score_model`). The plan is
    UNDERPOWERED when its planned bound — the smaller of `planned_eps_lower` and the Monte Carlo median — is below
    `fraction` × ε_claim, or its ceiling is below ε_claim (no outcome could reject the claim). A block with no
    score-model plan (score model "perfect" and no Monte Carlo: only the ceiling is known) is UNDERPOWERED when its
    ceiling is below fraction × ε_claim, and undecided (None, "no plan: ...") otherwise. With `score_model` (the
    plan's model) the canary count is searched by `canaries_to_reach`; without one it is the ceiling's count
    `canaries_needed(fraction·ε)` (a lower bound), given only when it exceeds m. Nothing here changes a plan.
    """
    report = power if isinstance(power, PowerReport) else None
    if report is not None:
        block = report.power_block()
        eps_claim = report.eps_nominal if eps_claim is None else eps_claim
        delta = report.delta if delta is None else delta
        confidence = report.confidence if confidence is None else confidence
        m = report.m if m is None else m
    elif isinstance(power, dict) or hasattr(power, "keys"):
        block = dict(power)
    else:
        raise InvalidParameter("power", type(power).__name__, "a PowerReport or a power block mapping")
    fraction = check_fraction(fraction)
    ceil, planned_b, median = block["eps_ceiling"], block["planned_eps_lower"], block.get("mc_median")
    has_plan = not (block.get("score_model") == "perfect" and median is None and report is None)
    achieved = None if not has_plan else (planned_b if median is None else min(planned_b, median))
    common = dict(fraction=fraction, eps_planned=achieved, eps_ceiling=ceil, m=m, planned=has_plan, report=report)
    if eps_claim is None:
        return PowerVerdict(None, eps_claim=None, canaries_needed=None, canaries_basis=None,
                            line="no plan verdict: no ε claim to compare with", **common)
    eps_claim = val.nonnegative("eps_claim", eps_claim)
    target = fraction * eps_claim
    share = f"{fraction:g} × the claim's ε = {eps_claim:.4g}"
    goal = target                      # what the canary count must reach: fraction·ε, or ε when the ceiling fails
    if not has_plan:
        if ceil >= eps_claim:
            return PowerVerdict(None, eps_claim=eps_claim, canaries_needed=None, canaries_basis=None, line=(
                f"no plan: no score model, only the ceiling {ceil:.4g} (perfect guessing) is known; plan the "
                f"audit (privcheck audit power) to know whether it reaches {share}"), **common)
        if ceil < target:
            planned_text = f"even perfect guessing certifies at most {ceil:.4g} (the ceiling)"
        else:
            goal = eps_claim
            planned_text = (f"the ceiling {ceil:.4g} (perfect guessing) is below the claim's ε = {eps_claim:.4g}: "
                            "no outcome can reject it")
    elif achieved < target:
        planned_text = f"planned ε_lower {planned_b:.4g}" + ("" if median is None else
                                                             f" (Monte Carlo median {median:.4g})")
    elif ceil < eps_claim:
        goal = eps_claim
        planned_text = f"the ceiling {ceil:.4g} is below the claim's ε = {eps_claim:.4g} (no outcome can reject it); "
        planned_text += f"planned ε_lower {planned_b:.4g}"
    else:
        return PowerVerdict(False, eps_claim=eps_claim, canaries_needed=None, canaries_basis=None, line=(
            f"powered: planned ε_lower {planned_b:.4g}" + ("" if median is None else f" (Monte Carlo median "
                                                                                      f"{median:.4g})")
            + f" reaches {share} with {m if m is not None else '?'} canaries; ceiling {ceil:.4g}"), **common)
    needed = basis = None
    searched = m
    if delta is not None and confidence is not None:
        if score_model is not None and m is not None and achieved is not None and achieved < target:
            (needed, searched), basis = canaries_to_reach(target, m=m, delta=delta, confidence=confidence,
                                                          score_model=score_model, seed=seed), "score_model"
        else:
            needed, basis = canaries_needed(goal, delta, confidence), "ceiling"
            if needed is not None and m is not None and needed <= m:
                needed = None
    with_m = "" if m is None else f" with m = {m} canaries"
    if needed is None:
        if basis == "score_model":
            tail = (f"no count up to {searched} canaries plans it under this score model: a stronger score is "
                    "needed, or more canaries than that")
        elif basis == "ceiling":
            tail = ("the ceiling allows it with these canaries, so more canaries or a stronger score are needed "
                    "(assess(plan, score_model=...) searches the count)"
                    if has_plan else f"no number of canaries up to {CANARIES_SEARCH_MAX:.0e} reaches it")
        else:
            tail = "this test's ceiling is the limit: more runs (or a one-run audit with more canaries) are needed"
    elif basis == "score_model":
        tail = f"about {needed} canaries would plan ≥ {target:.4g} under the same score model"
    else:
        tail = (f"at least {needed} canaries would be needed to reach {goal:.4g} (the ceiling's count: every "
                "guess correct)")
    line = (f"UNDERPOWERED: {planned_text}{with_m}, below {share}" if goal == target
            else f"UNDERPOWERED: {planned_text}{with_m}")
    return PowerVerdict(True, eps_claim=eps_claim, canaries_needed=needed, canaries_basis=basis,
                        line=f"{line}; {tail}", **common)


def planned_verdict(m, *, delta, confidence, eps_nominal, score_model, rules=None, sims=200, seed=None,
                    fraction=UNDERPOWERED_FRACTION, search_canaries=True) -> PowerVerdict:
    """The plan of one audit and its verdict, as the audit's report carries them: `plan` of m canaries over its
    default grid, or over `rules` (the audit's own (k₊, k₋), or the shapes its guess count allows) when given, then
    `assess` at `fraction` of `eps_nominal`, searching the canary count under the same score model when
    underpowered (`search_canaries`). Used by `audit one-run --score-model` and
    `audits.scores_file.audit_scores_file(score_model=...)`."""
    report = plan(m, delta=delta, confidence=confidence, eps_nominal=eps_nominal, score_model=score_model,
                  k_grid=None if rules is None else [tuple(rule) for rule in rules], sims=sims, seed=seed)
    model = parse_score_model(score_model)
    return assess(report, fraction=fraction, score_model=model if search_canaries else None, seed=seed)


# ---------------------------------------------------------------------------------------------------------------------
# Plot for the docs


@dataclass(frozen=True)
class BoundCurve:
    """Planned bound, ceiling and Monte Carlo band against the number of canaries, and the PNG rendering."""
    canaries: tuple[int, ...]
    eps_ceiling: tuple[float, ...]
    planned_eps_lower: tuple[float, ...]
    mc_p10: tuple[float, ...]
    mc_median: tuple[float, ...]
    mc_p90: tuple[float, ...]
    eps_nominal: float | None
    score_model: str
    png: bytes


def plot_bound_vs_canaries(score_model, canaries, *, delta, confidence=0.95, eps_nominal=None, sims=50, seed=0,
                           path=None, noiseless_guard=True) -> BoundCurve:
    """Planned bound vs number of canaries for a score model (matplotlib Agg); writes `path` atomically if given."""
    model = parse_score_model(score_model)
    if isinstance(canaries, (str, bytes)) or not hasattr(canaries, "__iter__"):
        raise InvalidParameter("canaries", canaries, "a non-empty sequence of integers >= 1")
    ms = tuple(sorted({val.count("canaries", m, 1, MAX_CANARIES) for m in canaries}))
    if not ms:
        raise InvalidParameter("canaries", canaries, "a non-empty sequence of integers >= 1")
    _delta(delta), _significance(confidence), val.count("sims", sims), _seed(seed)
    for m in ms:
        _check_cost(m, sims, model)
    eps_nominal = None if eps_nominal is None else val.nonnegative("eps_nominal", eps_nominal)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:      # optional dependency (extra "plots")
        from privcheck.errors import PrivcheckError
        raise PrivcheckError(f"matplotlib is required for the plot (pip install 'privcheck[plots]'): {exc}") from exc

    reports = [plan(m, delta=delta, confidence=confidence, eps_nominal=eps_nominal, score_model=model, sims=sims,
                    seed=None if seed is None else seed + i, noiseless_guard=noiseless_guard)
               for i, m in enumerate(ms)]
    column = {key: tuple(getattr(r, key) for r in reports)
              for key in ("eps_ceiling", "planned_eps_lower", "mc_p10", "mc_median", "mc_p90")}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(ms, column["eps_ceiling"], "k--", label="ceiling (all guesses correct)")
    ax.plot(ms, column["planned_eps_lower"], "o-", color="tab:blue", label="planned bound (best k)")
    ax.fill_between(ms, column["mc_p10"], column["mc_p90"], color="tab:blue", alpha=0.2, lw=0,
                    label=f"Monte Carlo 10–90% ({sims} audits)")
    if eps_nominal is not None:
        ax.axhline(eps_nominal, color="tab:red", lw=1, label=f"nominal ε = {eps_nominal:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("number of canaries m")
    ax.set_ylabel(f"ε lower bound (δ = {delta:.3g}, confidence {confidence})")
    ax.set_title(model.name, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    png = buffer.getvalue()
    if path is not None:
        from privcheck.artifacts import write_atomic
        write_atomic(path, png)
    return BoundCurve(ms, column["eps_ceiling"], column["planned_eps_lower"], column["mc_p10"], column["mc_median"],
                      column["mc_p90"], eps_nominal, model.name, png)

