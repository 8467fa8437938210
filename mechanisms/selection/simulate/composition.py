"""The filter experiment: PrivITP queries answered under the provable ex-post filter, the basic-composition
baselines and the (not DP) replication rule, on the same query streams.

n = 16, β = 0.05, budget E = 50, 10 seeds (child seeds of the run's seed), a sweep over σ (σ_X = σ_Z = σ/2),
Δ = 0.01, δ = 1e-6, δ_total = 1e-3 (K_max = 1000), L = 0.5 by default. Each seed draws one stream of queries
(a random prompt, two independent lists of 16); the same stream is answered, with the real mechanism and
certified accounting, under the provable filter (`FilteredPrivITP`), the heuristic basic composition, the
clamped provable basic composition, and the replication rule; the number of answered queries and the halting
times are recorded.
"""

from __future__ import annotations

import numpy as np

from mechanisms.selection.filtered import ANSWERED, BasicCompositionPrivITP, FilteredPrivITP
from mechanisms.selection.randomness import NumpyRandomness
from mechanisms.selection.simulate.config import SimulationConfig
from mechanisms.selection.simulate.pools import Pools
from mechanisms.selection.simulate.scaling import as_floats
from privcheck.accounting import PrivITPParams, PrivITPPhase1Event, epsilon
from privcheck.randomness import RandomnessPolicy

__all__ = ["FILTER_RULES", "filter_experiment", "filter_summary"]

FILTER_RULES = ("filter", "basic_heuristic", "basic_clamped", "replication_unsound")


def _query_stream(pools: Pools, n: int, seed_seq: np.random.SeedSequence):
    """An infinite stream of queries: a uniform prompt and two independent lists of n from its pool."""
    gen = np.random.Generator(np.random.PCG64(seed_seq))
    while True:
        p = int(gen.integers(pools.prompts))
        i1 = gen.integers(0, pools.size, size=n)
        i2 = gen.integers(0, pools.size, size=n)
        yield pools.proxy[p, i1].copy(), pools.proxy[p, i2].copy()


def _rule(name: str, params: PrivITPParams, cfg: SimulationConfig):
    if name == "filter":
        return FilteredPrivITP(params, cfg.filter_budget, cfg.delta_total)
    if name == "replication_unsound":
        return FilteredPrivITP(params, cfg.filter_budget, cfg.delta_total, mode="replication_unsound")
    if name == "basic_heuristic":
        return BasicCompositionPrivITP(params, cfg.filter_budget, cfg.delta_total, variant="heuristic")
    return BasicCompositionPrivITP(params, cfg.filter_budget, cfg.delta_total, variant="clamped")


def filter_experiment(pools: Pools, cfg: SimulationConfig, root: np.random.SeedSequence) -> dict:
    """Answered queries and halting times per σ, seed and composition rule (the same query stream per seed)."""
    n = cfg.filter_n
    out = {"n": n, "budget": cfg.filter_budget, "delta": cfg.delta, "delta_total": cfg.delta_total,
           "seeds": list(range(cfg.filter_seeds)), "sigma": list(cfg.sigmas), "eps1": [], "k_max": None,
           "basic_clamped_epsilon_max": [], "rules": {r: {"answered": [], "mean_halting_time": [],
                                                          "fallback_fraction": [], "truncated": [],
                                                          "phase2_skipped": [], "spent": []}
                                                      for r in FILTER_RULES}}
    # Per seed: one query stream (shared by every rule and σ) and one noise stream per rule.
    seeds = []
    for child in root.spawn(cfg.filter_seeds):
        streams, noise = child.spawn(2)
        seeds.append((streams, noise.spawn(len(FILTER_RULES))))
    for sigma in cfg.sigmas:
        params = cfg.params(sigma, n)
        out["eps1"].append(epsilon(PrivITPPhase1Event(params)).value)
        per = {r: {k: [] for k in out["rules"][r]} for r in FILTER_RULES}
        for seed, (streams, noises) in enumerate(seeds):
            for ri, name in enumerate(FILTER_RULES):
                rule = _rule(name, params, cfg)
                gen = np.random.Generator(np.random.PCG64(noises[ri]))
                stream = _query_stream(pools, n, streams)     # identical stream for every rule
                queries = (q for _, q in zip(range(cfg.filter_max_queries), stream))
                outcomes = rule.run(queries, NumpyRandomness(gen, RandomnessPolicy.seeded(seed)))
                answered = [o for o in outcomes if o.status == ANSWERED]
                accepted = [o.halting_time for o in answered if o.halting_time]
                per[name]["answered"].append(len(answered))
                per[name]["mean_halting_time"].append(float(np.mean(accepted)) if accepted else None)
                per[name]["fallback_fraction"].append(
                    (len(answered) - len(accepted)) / len(answered) if answered else None)
                per[name]["truncated"].append(sum(o.rounds < n for o in answered))
                per[name]["phase2_skipped"].append(sum(o.status == "phase2_skipped" for o in outcomes))
                per[name]["spent"].append(rule.spent)
                out["k_max"] = rule.k_max
                if name == "basic_clamped" and seed == 0:
                    out["basic_clamped_epsilon_max"].append(rule.epsilon_max)
        for name in FILTER_RULES:
            for key, val in per[name].items():
                out["rules"][name][key].append(val)
    return out


def _mean(values) -> float | None:
    vals = [x for x in values if x is not None]
    return float(np.mean(vals)) if vals else None


def filter_summary(filt: dict) -> dict:
    """Means over seeds per σ and the filter/basic ratios."""
    summary = {}
    for name, rec in filt["rules"].items():
        answered = np.array(rec["answered"], dtype=np.float64)             # [σ, seeds]
        spent = np.array(rec["spent"], dtype=np.float64)
        summary[name] = {"answered_mean": as_floats(answered.mean(axis=1)),
                         "answered_sd": as_floats(answered.std(axis=1, ddof=1) if answered.shape[1] > 1
                                                else np.zeros(answered.shape[0])),
                         "mean_halting_time": [_mean(row) for row in rec["mean_halting_time"]],
                         "fallback_fraction": [_mean(row) for row in rec["fallback_fraction"]],
                         "epsilon_per_answered": [float(np.mean(s / np.maximum(a, 1.0)))
                                                  for s, a in zip(spent, answered)]}
    ratios = {}
    for base in ("basic_heuristic", "basic_clamped"):
        num = np.array(filt["rules"]["filter"]["answered"], dtype=np.float64).mean(axis=1)
        den = np.array(filt["rules"][base]["answered"], dtype=np.float64).mean(axis=1)
        ratios[base] = [float(a / b) if b > 0 else None for a, b in zip(num, den)]
    summary["ratio_filter_over"] = ratios
    return summary

