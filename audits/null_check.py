"""Type-I error of every audit on null data (issue 24 item 5; docs/audits.md, "Soundness on null scores").

Null data carry no membership signal: included and excluded canaries (or runs on D and D′) draw their scores from
the same law, so the true ε is 0 and every claim holds. An audit is then "positive" when it reports evidence of
leakage: ε_lower > 0 for the (ε, δ) methods (P[ε_lower > ε_true] ≤ α with ε_true = 0), μ_lower > 0 for the GDP-family
methods, and for the claim-curve f-DP method a rejected member of the claim's family (every member holds on null
data, the claim itself included). `run(trials, seed)` counts the positives of every method × threshold strategy ×
planner choice that applies, on shared seeded draws; `binomial_tail` is the exact test of a count against α.

What is enumerated from the code (a new entry fails `check_coverage` until it has a constructor here):
* threshold strategies: `audits.statistics.strategies.STRATEGIES` (one-run) and the same names for multi-run thresholds;
* planner choices: every `ScoreModel` subclass × `noiseless_guard` in (True, False), each through `power.plan`;
* black-box event families: `audits.blackbox.FAMILIES` × `audits.blackbox.CRITERIA`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from audits import blackbox as bb
from audits.statistics import clopper_pearson as multirun
from audits.statistics import fdp_claim as fc
from audits.statistics import gdp, one_run, power
from audits.statistics import score_models as sm
from audits.statistics import strategies as st
from privcheck.accounting import GaussianEvent

__all__ = ["CONFIDENCE", "DELTA", "LEVEL", "Row", "binomial_tail", "check_coverage", "one_run_rules", "planner_rules",
           "run"]

CONFIDENCE = 0.95
LEVEL = 0.05
DELTA = 1e-5
CLAIM_EVENT = GaussianEvent(1.0)       # the f-DP claim tested: the Gaussian mechanism, σ = sensitivity = 1
_BONFERRONI = ((5, 0), (20, 0), (10, 10), (50, 50))


@dataclass(frozen=True)
class Row:
    """One method under one threshold strategy or planner choice: `positives` of `trials` null audits."""

    method: str
    rule: str
    positives: int
    trials: int
    level: float = LEVEL

    @property
    def rate(self) -> float:
        return self.positives / self.trials

    @property
    def tail(self) -> float:
        return binomial_tail(self.positives, self.trials, self.level)

    def to_json(self) -> dict:
        return {"method": self.method, "rule": self.rule, "positives": self.positives, "trials": self.trials,
                "rate": self.rate, "level": self.level, "binomial_tail": self.tail}


def binomial_tail(count: int, trials: int, level: float) -> float:
    """P[Bin(trials, level) ≥ count]: small values mean the count is implausible for a valid level-α test."""
    return float(binom.sf(count - 1, trials, level))


# ---------------------------------------------------------------------------------------------------------------------
# What is enumerated.

def _one_run_strategies(m: int) -> dict:
    """name -> (strategy, from_scores keyword arguments) for every class of `strategies.STRATEGIES`."""
    k = max(1, m // 10)
    makers = {st.Explicit: lambda: (st.Explicit(), {"k_plus": k, "k_minus": k}),
              st.Bonferroni: lambda: (st.Bonferroni([p for p in _BONFERRONI if sum(p) <= m]), {}),
              st.Split: lambda: (st.Split(0.5, seed=0), {})}
    return {cls.name: makers[cls] for cls in st.STRATEGIES if cls in makers}


def _score_models() -> dict:
    """One example of every ScoreModel subclass (planner inputs; never the audited data)."""
    pilot = np.random.default_rng(7)
    makers = {sm.Perfect: lambda: sm.Perfect(), sm.GDP: lambda: sm.GDP(1.0),
              sm.DPSGDDirac: lambda: sm.DPSGDDirac(0.5, 1.0, 4, "llr"),
              sm.Empirical: lambda: sm.Empirical(pilot.normal(1.0, 1.0, 200), pilot.normal(0.0, 1.0, 200))}
    return {cls: makers[cls] for cls in sm.ScoreModel.__subclasses__() if cls in makers}


def _families() -> dict:
    makers = {bb.Singletons: bb.Singletons, bb.TopPrefixes: bb.TopPrefixes, bb.Thresholds: bb.Thresholds,
              bb.Fixed: lambda: bb.Fixed(((0, 1, 2), (3,)))}
    return {cls: makers[cls] for cls in bb.FAMILIES if cls in makers}


def check_coverage() -> list[str]:
    """Names of strategies, score models and event families that exist in the code but have no example here."""
    missing = [f"strategy {c.__name__}" for c in st.STRATEGIES if c.name not in _one_run_strategies(100)]
    missing += [f"score model {c.__name__}" for c in sm.ScoreModel.__subclasses__() if c not in _score_models()]
    missing += [f"event family {c.__name__}" for c in bb.FAMILIES if c not in _families()]
    return missing


@functools.lru_cache(maxsize=8)
def planner_rules(m: int, seed: int = 0) -> dict:
    """`plan[model,guard]` -> (k₊, k₋) chosen by `power.plan` before any audited data exist (ε_nom = 2)."""
    rules = {}
    for cls, make in _score_models().items():
        for guard in (True, False):
            p = power.plan(m, delta=DELTA, confidence=CONFIDENCE, eps_nominal=2.0, score_model=make(), sims=20,
                           seed=seed, noiseless_guard=guard)
            rules[f"plan[{cls.__name__},guard={guard}]"] = (p.k_plus, p.k_minus)
    return rules


def one_run_rules(m: int) -> list[str]:
    return list(_one_run_strategies(m)) + list(planner_rules(m))


# ---------------------------------------------------------------------------------------------------------------------
# Count-based decisions (memoised: null counts repeat across trials).

@functools.lru_cache(maxsize=None)
def _fdp_positive(m: int, r: int, v: int, level: float) -> bool:
    return gdp.fdp_one_run(m, r, v, delta=DELTA, confidence=1.0 - level).result["mu_lower"] > 0


@functools.lru_cache(maxsize=None)
def _claim_positive(m: int, r: int, v: int, level: float) -> bool:
    res = fc.fdp_claim_curve(m, r, v, event=CLAIM_EVENT, delta=DELTA, confidence=1.0 - level,
                             power={"planned_eps_lower": 0.0}).result
    return bool(res["noise_scale"] is not None or res["rejects_nominal"])


def _hypotheses(name, strategy, kwargs, scores, signs, key) -> list[tuple[int, int, int, float]]:
    """(m_test, r, v, level) of each test the rule makes (Bonferroni: one per pair at α/K)."""
    m = scores.size
    order = st.rank(scores, key)
    if name == "bonferroni":
        K = len(strategy.family)
        return [(m, *st.count(st.guesses(order, kp, km), signs), LEVEL / K) for kp, km in strategy.family]
    if name == "split":
        out = strategy.run(scores, signs, key, k_plus=None, k_minus=0, delta=DELTA, p=LEVEL, eps_nominal=None)
        return [(out.m_test, out.guesses, out.correct, LEVEL)]
    return [(m, *st.count(st.guesses(order, kwargs["k_plus"], kwargs["k_minus"]), signs), LEVEL)]


# ---------------------------------------------------------------------------------------------------------------------
# The Monte Carlo.

def _one_run_trial(rng, m: int, shift: float, counts: dict, claim: bool) -> None:
    signs = np.where(rng.random(m) < 0.5, 1, -1)
    if np.all(signs == signs[0]):
        signs[0] = -signs[0]
    scores = rng.normal(size=m) + shift * (signs == 1)
    key = st.tie_break_key(m)
    rules = {name: make() for name, make in _one_run_strategies(m).items()}
    rules.update({name: (st.Explicit(), {"k_plus": kp, "k_minus": km}) for name, (kp, km) in planner_rules(m).items()})
    for name, (strategy, kwargs) in rules.items():
        rep = one_run.from_scores(scores, signs, delta=DELTA, confidence=CONFIDENCE, strategy=strategy, **kwargs)
        counts[("steinke_one_run", name)] += rep.result["eps_lower"] > 0
        tests = _hypotheses(strategy.name, strategy, kwargs, scores, signs, key)
        counts[("fdp_one_run", name)] += any(_fdp_positive(*t) for t in tests)
        if claim:
            counts[("fdp_claim_curve", name)] += any(_claim_positive(*t) for t in tests)


def _multirun_trial(rng, runs: int, shift: float, counts: dict) -> None:
    inside, outside = rng.normal(shift, 1.0, runs), rng.normal(0.0, 1.0, runs)

    def rates(t, a, b):
        return int(np.sum(b >= t)), b.size, int(np.sum(a < t)), a.size      # fp, n_out, fn, n_in

    half = runs // 2
    grid = np.quantile(np.concatenate([inside[:half], outside[:half]]), np.linspace(0.05, 0.95, 19))
    best = max(grid, key=lambda t: multirun.cp_bound(*rates(t, inside[:half], outside[:half]), DELTA, LEVEL, True,
                                                     1)["eps_lower"])
    rules = {"explicit": ([0.5], inside, outside), "bonferroni": ([-0.5, 0.0, 0.5, 1.0], inside, outside),
             "split": ([best], inside[half:], outside[half:])}
    for name, (thresholds, a, b) in rules.items():
        K = len(thresholds)
        cp = any(multirun.clopper_pearson(*rates(t, a, b), delta=DELTA, confidence=CONFIDENCE,
                                          n_thresholds=K).result["eps_lower"] > 0 for t in thresholds)
        g = any(gdp.from_rates(*rates(t, a, b), delta=DELTA, confidence=CONFIDENCE,
                               n_hypotheses=K).result["mu_lower"] > 0 for t in thresholds)
        counts[("clopper_pearson", name)] += cp
        counts[("gdp_rates", name)] += g


def _blackbox_trial(seed: int, draws: int, shift: float, counts: dict) -> None:
    def null(size, gen):
        return gen.integers(0, 20, size)

    def tilted(size, gen):                          # output 0 with extra mass min(1, shift/4) on D
        return np.where(gen.random(size) < min(1.0, shift / 4), 0, gen.integers(0, 20, size))

    for cls, make in _families().items():
        for criterion in bb.CRITERIA:
            rep = bb.pair_audit(tilted if shift else null, null, n=draws, event_family=(make(),), delta=DELTA,
                                confidence=CONFIDENCE, seed=seed, criterion=criterion)
            counts[("blackbox_pair", f"{cls().name if cls is not bb.Fixed else 'fixed'}/{criterion}")] += \
                rep.result["eps_lower"] > 0


def run(trials: int, seed: int, *, m: int = 200, runs: int = 100, draws: int = 200, blackbox_trials: int | None = None,
        shift: float = 0.0, claim: bool = True) -> list[Row]:
    """Positives of every method × rule in `trials` seeded audits (true ε = 0 when shift = 0).

    One-run audits: m canaries, coins i.i.d. Bern(½), scores N(shift·[in], 1). Multi-run: `runs` runs per side,
    scores N(shift, 1) on D and N(0, 1) on D′. Black-box pairs: `draws` outputs per side from 20 values
    (`blackbox_trials` repetitions, default `trials`). `claim=False` leaves out the f-DP claim-curve method."""
    counts: dict = {}
    keys = [(meth, rule) for rule in one_run_rules(m)
            for meth in ("steinke_one_run", "fdp_one_run") + (("fdp_claim_curve",) if claim else ())]
    keys += [(meth, rule) for rule in ("explicit", "bonferroni", "split") for meth in ("clopper_pearson", "gdp_rates")]
    keys += [("blackbox_pair", f"{cls().name if cls is not bb.Fixed else 'fixed'}/{c}")
             for cls in _families() for c in bb.CRITERIA]
    counts = dict.fromkeys(keys, 0)
    bb_trials = trials if blackbox_trials is None else blackbox_trials
    for t, child in enumerate(np.random.SeedSequence(seed).spawn(trials)):
        rng = np.random.default_rng(child)
        _one_run_trial(rng, m, shift, counts, claim)
        _multirun_trial(rng, runs, shift, counts)
        if t < bb_trials:
            _blackbox_trial(int(rng.integers(2**31)), draws, shift, counts)
    return [Row(meth, rule, int(c), bb_trials if meth == "blackbox_pair" else trials) for (meth, rule), c in
            counts.items()]
