"""`privcheck simulate selection`: the synthetic benchmark of spec shared/spec/selection.md §15.

Reproduces the SETTINGS and QUALITATIVE CLAIMS of Bhattad & Ray Chowdhury's experiments on synthetic
data (no reward model or LLM is shipped). Nothing here is a privacy release: the data are synthetic and
every run is seeded (`privacy_release: false` in the artifact). The qualitative outcomes are computed and
reported as observations of the run, never asserted by the library.

Data (`generate_pools`). P prompts, each with a response pool of K responses (π0 = uniform over the pool).
A fraction h of the responses are "hacking" (true reward r* ~ U(0, 0.2), proxy r̂ ~ U(0.95, 1)); for the
others r* ~ Beta(m·κ, (1 − m)·κ) with a per-prompt mean m ~ U(m_lo, m_hi) and r̂ = r* + N(0, τ²). Proxies
are clipped to [0, R_max] = [0, 1] and recorded at a public resolution of 1/Q (a reward model's output
grid), so that the exact laws can be evaluated per distinct score value. Δ, δ, L, β, σ are public
constants of the configuration, never derived from the scores (§16.1).

Scaling experiment (`scaling_experiment`): for n ∈ ns, R candidate lists per prompt (nested prefixes of
one list of length max(ns), so the curves are paired across n), and E[r*(output)] / E[r̂(output)] from
EXACT output laws (§14), no Monte Carlo over the mechanisms' noise:

    BoN      argmax of the list (ties to the lowest index)                    — per list
    PrivBoN  softmax(s/σ) over the list (§4.2)                                — per list
    ITP      itp_law(s, β, λ̂(s), M = (R_max − λ̂)/β), fallback = fresh π0 draw  — per list (λ̂ from the same list)
    PrivITP  Phase 1: λ̂ from the list (a Phase-1 batch); Phase 2: a fresh independent list of n, integrated
             out EXACTLY given λ̃: with p(r; λ̃) = P_acc (laws.acceptance_rejection, c = threshold_width(λ̃)),
             p̄ = E_π0[p], a = E_π0[p·r*], q = 1 − p̄, the i.i.d. list gives
                 E[r* | λ̃] = a·(1 − qⁿ)/p̄ + qⁿ·E_π0[r*]     (Σ_i q^{i−1}·a, plus the fresh-π0 fallback)
             and the average over λ̃ ~ N(λ̂, σ_X²) is taken AFTER forming the products qⁱ (§14, §16.7), by
             the trapezoid rule on a public λ̃ grid of step σ_X/16 over [r_lo − β − 10σ_X, r_max − β + 10σ_X]
             (λ̂ always lies in [r_lo − β, r_max − β]); the quadrature error is O(step²) from the kink of the
             clamp c = max(·, c_min), a few 1e-6 at σ_X/16 (the tests compare with `laws.privitp_law`
             averaged over every Phase-2 list of a small pool, to 1e-6 at step σ_X/64).

The fallback is scored as E_π0[r*] because the mechanisms return a fresh π0 draw (§16.10). Error bars: a
bootstrap over prompts (each prompt's mean over its R lists), shared by every curve, so differences
(across n, methods, σ) are paired.

Filter experiment (`filter_experiment`): n = 16, β = 0.05, budget E = 50, 10 seeds (child seeds of the
run's seed), a sweep over σ (σ_X = σ_Z = σ/2), Δ = 0.01, δ = 1e-6, δ_total = 1e-3 (K_max = 1000), L = 0.5.
Each seed draws one stream of queries (a random prompt, two independent lists of 16); the same stream is
answered, with the real mechanism and certified accounting, under the provable filter (`FilteredPrivITP`,
§12.3), the heuristic basic composition, the clamped provable basic composition, and the (not DP)
replication rule; the number of answered queries and the halting times are recorded.

Observations: (a) BoN's true reward rises then falls in n while its proxy keeps rising; PrivBoN and
PrivITP are monotone in n within the bootstrap error (no pair n < n′ with a decrease larger than z = 3
bootstrap standard errors of the paired difference) at the headline σ, with every σ of the sweep reported;
(b) PrivITP ≥ PrivBoN at matched σ (within error; at n_max for every σ, and the n from which it holds);
(c) the filter/basic ratio of answered queries per σ ([1] reports ≈ 3×) and the mean halting time;
(d) PrivITP's gap to ITP shrinks as σ decreases.

    run_simulation(out, seed, quick):
        pools ← generate_pools(seeded);  scaling ← scaling_experiment;  filt ← filter_experiment
        body ← {config, curves, observations, environment, randomness, created_utc}
        figures ← render_plots(body);  body.figures ← {file, sha256} per PNG      (all in memory)
        doc ← seal(body);  validate(doc, simulation.schema.json)
        write the PNGs, then DIR/selection_simulation.json (atomic writes; nothing is written if a step
        fails, and the files a failed write created are removed)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import io
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from privcheck import validation as v
from privcheck.accounting.selection import PrivITPParams, privbon_epsilon, privitp_phase1_epsilon
from privcheck.errors import InvalidParameter, PrivcheckError

from mechanisms.selection.filtered import (ANSWERED, BasicCompositionPrivITP, FilteredPrivITP)
from mechanisms.selection.itp import _lambda_hat_matrix
from mechanisms.selection.laws import acceptance_rejection, itp_law, privbon_law
from mechanisms.selection.randomness import SEEDED, Randomness

SCHEMA_ID = "privcheck.simulation/1"
SCHEMA_FILE = "simulation.schema.json"
ARTIFACT = "selection_simulation.json"
FIGURES = {"scaling": "selection_scaling.png", "sigma": "selection_sigma.png", "filter": "selection_filter.png"}
DEFAULT_SEED = 20240917
Z_SCORE = 3.0
METHODS = ("bon", "privbon", "itp", "privitp")
FILTER_RULES = ("filter", "basic_heuristic", "basic_clamped", "replication_unsound")


# --- configuration -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DataConfig:
    """Synthetic prompts and response pools (see the module docstring)."""

    prompts: int = 128
    pool_size: int = 10_000
    hack_fraction: float = 0.003
    hack_true: tuple[float, float] = (0.0, 0.2)
    hack_proxy: tuple[float, float] = (0.95, 1.0)
    mean_range: tuple[float, float] = (0.15, 0.5)
    concentration: float = 8.0
    proxy_noise: float = 0.05
    resolution: int = 1024

    def validate(self) -> "DataConfig":
        v.count("prompts", self.prompts, minimum=2)
        v.count("pool_size", self.pool_size, minimum=2)
        if not 0.0 <= v.nonnegative("hack_fraction", self.hack_fraction) < 1.0:
            raise InvalidParameter("hack_fraction", self.hack_fraction, "[0, 1)")
        for name in ("hack_true", "hack_proxy", "mean_range"):
            lo, hi = _pair(name, getattr(self, name))
            if not 0.0 <= lo <= hi <= 1.0 or (name == "mean_range" and not 0.0 < lo <= hi < 1.0):
                raise InvalidParameter(name, getattr(self, name), "0 <= lo <= hi <= 1 (mean_range: 0 < lo <= hi < 1)")
        v.positive("concentration", self.concentration)
        v.nonnegative("proxy_noise", self.proxy_noise)
        v.count("resolution", self.resolution, minimum=2)
        return self


@dataclass(frozen=True)
class SimulationConfig:
    """Every public constant of one benchmark run (recorded verbatim in the artifact)."""

    data: DataConfig = field(default_factory=DataConfig)
    ns: tuple[int, ...] = tuple(2 ** k for k in range(13))
    replicates: int = 32
    bootstrap: int = 1000
    beta: float = 0.05
    sigma: float = 0.4                                     # the σ of the headline scaling plot
    sigmas: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4, 0.8)  # σ sweep (scaling curves and filter)
    headroom: float = 0.5
    sensitivity: float = 0.01
    delta: float = 1e-6
    delta_total: float = 1e-3
    grid_step: float = 1.0 / 16                           # λ̃ grid step in units of σ_X
    grid_halfwidth: float = 10.0                          # λ̃ grid margin in units of σ_X
    filter_n: int = 16
    filter_budget: float = 50.0
    filter_seeds: int = 10
    filter_max_queries: int = 100_000
    quick: bool = False

    @classmethod
    def full(cls) -> "SimulationConfig":
        return cls().validate()

    @classmethod
    def reduced(cls) -> "SimulationConfig":
        """`--quick`: the same settings at reduced sizes (for tests and smoke runs)."""
        return cls(data=DataConfig(prompts=16, pool_size=2000), ns=tuple(2 ** k for k in range(9)),
                   replicates=8, bootstrap=200, sigmas=(0.1, 0.4), filter_seeds=2, quick=True).validate()

    def validate(self) -> "SimulationConfig":
        self.data.validate()
        if not isinstance(self.ns, tuple) or not self.ns:
            raise InvalidParameter("ns", self.ns, "a non-empty tuple of increasing integers in [1, 65536]")
        ns = [v.count("ns", n) for n in self.ns]
        if any(b <= a for a, b in zip(ns, ns[1:])) or ns[-1] > 65536:
            raise InvalidParameter("ns", self.ns, "a non-empty tuple of increasing integers in [1, 65536]")
        v.count("replicates", self.replicates)
        v.count("bootstrap", self.bootstrap, minimum=20)
        v.positive("beta", self.beta)
        if not isinstance(self.sigmas, tuple) or not self.sigmas:
            raise InvalidParameter("sigmas", self.sigmas, "a non-empty tuple of increasing positive reals")
        sig = [v.positive("sigmas", s) for s in self.sigmas]
        if any(b <= a for a, b in zip(sig, sig[1:])):
            raise InvalidParameter("sigmas", self.sigmas, "a non-empty tuple of increasing positive reals")
        if v.positive("sigma", self.sigma) not in sig:
            raise InvalidParameter("sigma", self.sigma, f"one of sigmas {self.sigmas}")
        v.nonnegative("headroom", self.headroom)
        if not 0 < v.positive("sensitivity", self.sensitivity) <= 1.0:
            raise InvalidParameter("sensitivity", self.sensitivity, "(0, 1] (at most the score range [0, 1])")
        v.open_unit("delta", self.delta)
        if v.open_unit("delta_total", self.delta_total) < self.delta:
            raise InvalidParameter("delta_total", self.delta_total, f"[delta, 1) = [{self.delta}, 1)")
        if not 0 < v.positive("grid_step", self.grid_step) <= 0.25:
            raise InvalidParameter("grid_step", self.grid_step, "(0, 0.25] (units of σ_X)")
        if v.positive("grid_halfwidth", self.grid_halfwidth) < 8.0:
            raise InvalidParameter("grid_halfwidth", self.grid_halfwidth, "[8, inf) (units of σ_X)")
        v.count("filter_n", self.filter_n)
        v.positive("filter_budget", self.filter_budget)
        v.count("filter_seeds", self.filter_seeds)
        v.count("filter_max_queries", self.filter_max_queries)
        return self

    def params(self, sigma: float, candidates: int) -> PrivITPParams:
        """PrivITP's public constants at PrivBoN scale σ: σ_X = σ_Z = σ/2 ([1]'s setting)."""
        return PrivITPParams(candidates=candidates, beta=self.beta, sigma_x=sigma / 2, sigma_z=sigma / 2,
                             headroom=self.headroom, sensitivity=self.sensitivity, delta=self.delta)

    def to_json(self) -> dict:
        """JSON types only (tuples become lists)."""
        return json.loads(json.dumps(asdict(self)))


def _pair(name, value) -> tuple[float, float]:
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise InvalidParameter(name, value, "a pair (lo, hi) of finite reals") from None
    return v.finite(name, lo), v.finite(name, hi)


# --- data ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pools:
    """Per prompt: true rewards and (clipped, quantised) proxies of the K pool responses, [P, K]."""

    true: np.ndarray
    proxy: np.ndarray
    hacking: np.ndarray
    resolution: int

    @property
    def prompts(self) -> int:
        return self.true.shape[0]

    @property
    def size(self) -> int:
        return self.true.shape[1]

    @property
    def base_true(self) -> np.ndarray:
        """E_π0[r*] per prompt (the value of the fresh-π0 fallback)."""
        return self.true.mean(axis=1)

    @property
    def base_proxy(self) -> np.ndarray:
        return self.proxy.mean(axis=1)


def generate_pools(data: DataConfig, gen: np.random.Generator) -> Pools:
    """The synthetic pools of the module docstring (proxy misspecified in its upper tail)."""
    data.validate()
    p, k = data.prompts, data.pool_size
    mean = gen.uniform(*data.mean_range, size=p)[:, None]
    true = gen.beta(mean * data.concentration, (1.0 - mean) * data.concentration, size=(p, k))
    proxy = true + data.proxy_noise * gen.standard_normal((p, k))
    hacking = gen.random((p, k)) < data.hack_fraction
    true = np.where(hacking, gen.uniform(*data.hack_true, size=(p, k)), true)
    proxy = np.where(hacking, gen.uniform(*data.hack_proxy, size=(p, k)), proxy)
    q = data.resolution
    proxy = np.rint(np.clip(proxy, 0.0, 1.0) * q) / q      # clip to [0, R_max], public output grid 1/Q
    return Pools(true=true, proxy=proxy, hacking=hacking, resolution=q)


# --- exact expected rewards ----------------------------------------------------------------------------

def lambda_grid(params: PrivITPParams, step: float, halfwidth: float) -> np.ndarray:
    """The public λ̃ grid: step·σ_X spacing over [r_lo − β − halfwidth·σ_X, r_max − β + halfwidth·σ_X]."""
    sx = params.sigma_x
    lo = params.r_lo - params.beta - halfwidth * sx
    hi = params.r_max - params.beta + halfwidth * sx
    count = int(math.ceil((hi - lo) / (step * sx))) + 1
    return lo + step * sx * np.arange(count)


@dataclass(frozen=True)
class PoolAcceptance:
    """E_π0[p(·; λ̃)], E_π0[p·r*], E_π0[p·r̂] per prompt on the λ̃ grid, [P, G]."""

    grid: np.ndarray
    mean_acc: np.ndarray
    acc_true: np.ndarray
    acc_proxy: np.ndarray


def pool_acceptance(pools: Pools, params: PrivITPParams, grid: np.ndarray) -> PoolAcceptance:
    """One Phase-2 round's acceptance probability averaged over π0, for every λ̃ of the grid.

    P_acc is evaluated once per distinct proxy value j/Q (the library's exact `acceptance_rejection`, with
    c = `params.threshold_width(λ̃)`), then averaged with the pool's counts per value."""
    q = pools.resolution
    values = np.arange(q + 1) / q
    c = np.array([params.threshold_width(x) for x in grid.tolist()])
    acc, _ = acceptance_rejection(values[:, None], grid[None, :], c[None, :], params.sigma_z)   # [Q+1, G]
    bins = np.rint(pools.proxy * q).astype(np.int64)
    counts = np.zeros((pools.prompts, q + 1))
    true_sums = np.zeros((pools.prompts, q + 1))
    for p in range(pools.prompts):
        counts[p] = np.bincount(bins[p], minlength=q + 1)
        true_sums[p] = np.bincount(bins[p], weights=pools.true[p], minlength=q + 1)
    k = pools.size
    return PoolAcceptance(grid, counts @ acc / k, true_sums @ acc / k, (counts * values) @ acc / k)


def privitp_expected(acc: PoolAcceptance, prompt_of_row: np.ndarray, lambda_hats: np.ndarray, n: int,
                     sigma_x: float, base_true: np.ndarray, base_proxy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[r*] and E[r̂] of PrivITP's output per row, given the row's Phase-1 λ̂ (Phase 2 integrated out).

    Given λ̃: E = a·Σ_{i≤n} q^{i−1} + qⁿ·E_π0[·] with q = 1 − p̄ (a fresh i.i.d. list; fallback = fresh π0
    draw); then averaged over λ̃ ~ N(λ̂, σ_X²) with normalised trapezoid weights on the grid — the λ̃
    average is taken after the products, never over the per-round probabilities (§16.7)."""
    pbar = np.clip(acc.mean_acc, 0.0, 1.0)
    log_q = np.log1p(-np.minimum(pbar, 1.0 - 1e-300))
    qn = np.exp(n * log_q)
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = np.where(pbar > 0.0, -np.expm1(n * log_q) / pbar, float(n))       # Σ_{i<n} q^i
    f_true = acc.acc_true * geo + qn * base_true[:, None]
    f_proxy = acc.acc_proxy * geo + qn * base_proxy[:, None]
    z = (acc.grid[None, :] - lambda_hats[:, None]) / sigma_x
    w = np.exp(-0.5 * z * z)
    w /= w.sum(axis=1, keepdims=True)
    return (np.einsum("rg,rg->r", w, f_true[prompt_of_row]),
            np.einsum("rg,rg->r", w, f_proxy[prompt_of_row]))


def _bootstrap_weights(prompts: int, draws: int, gen: np.random.Generator) -> np.ndarray:
    """[B, P] resampling weights (multinomial counts / P): bootstrap means = W @ per-prompt values."""
    return gen.multinomial(prompts, np.full(prompts, 1.0 / prompts), size=draws) / prompts


@dataclass
class Curve:
    """A curve over an axis: per-prompt values [N, P] and their bootstrap means [B, N]."""

    per_prompt: np.ndarray
    boot: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return self.per_prompt.mean(axis=1)

    @property
    def se(self) -> np.ndarray:
        return self.boot.std(axis=0, ddof=1)

    def to_json(self) -> dict:
        lo, hi = np.percentile(self.boot, [2.5, 97.5], axis=0)
        return {"mean": _floats(self.mean), "se": _floats(self.se), "ci95": [_floats(lo), _floats(hi)]}


def _floats(x) -> list[float]:
    return [float(val) for val in np.asarray(x, dtype=np.float64).ravel()]


def scaling_experiment(pools: Pools, cfg: SimulationConfig, gen: np.random.Generator,
                       boot_w: np.ndarray) -> dict[str, dict[str, Curve]]:
    """Curves {key: {"true": Curve, "proxy": Curve}} with keys "bon", "itp" and "privbon@σ", "privitp@σ"."""
    p_count, reps, n_max = pools.prompts, cfg.replicates, cfg.ns[-1]
    lists = gen.integers(0, pools.size, size=(p_count, reps, n_max), dtype=np.int64)
    base_true, base_proxy = pools.base_true, pools.base_proxy
    acc = {}
    for sigma in cfg.sigmas:
        params = cfg.params(sigma, n_max)
        acc[sigma] = pool_acceptance(pools, params, lambda_grid(params, cfg.grid_step, cfg.grid_halfwidth))
    keys = ["bon", "itp"] + [f"{m}@{s!r}" for s in cfg.sigmas for m in ("privbon", "privitp")]
    vals = {k: {"true": np.zeros((len(cfg.ns), p_count)), "proxy": np.zeros((len(cfg.ns), p_count))} for k in keys}
    chunk = max(1, (1 << 22) // (reps * n_max))            # prompts per chunk: ≤ 4M candidates in memory
    for start in range(0, p_count, chunk):
        prompts = np.arange(start, min(p_count, start + chunk))
        rows_prompt = np.repeat(prompts, reps)
        rows_local = np.repeat(np.arange(prompts.size), reps)
        for j, n in enumerate(cfg.ns):
            idx = lists[prompts][:, :, :n].reshape(-1, n)
            s = pools.proxy[rows_prompt[:, None], idx]
            r = pools.true[rows_prompt[:, None], idx]
            rows = np.arange(s.shape[0])

            def put(key, true_row, proxy_row):
                vals[key]["true"][j, prompts] = true_row.reshape(prompts.size, reps).mean(axis=1)
                vals[key]["proxy"][j, prompts] = proxy_row.reshape(prompts.size, reps).mean(axis=1)

            best = np.argmax(s, axis=1)
            put("bon", r[rows, best], s[rows, best])
            lam = _lambda_hat_matrix(s, cfg.beta)
            law = itp_law(s, cfg.beta, lam, (1.0 - lam) / cfg.beta)        # M rule "range" (R_max = 1)
            put("itp", (law.probs * r).sum(axis=1) + law.fallback * base_true[rows_prompt],
                (law.probs * s).sum(axis=1) + law.fallback * base_proxy[rows_prompt])
            for sigma in cfg.sigmas:
                pb = privbon_law(s, sigma)
                put(f"privbon@{sigma!r}", (pb * r).sum(axis=1), (pb * s).sum(axis=1))
                a = acc[sigma]
                sub = PoolAcceptance(a.grid, a.mean_acc[prompts], a.acc_true[prompts], a.acc_proxy[prompts])
                et, ep = privitp_expected(sub, rows_local, lam, n, sigma / 2, base_true[prompts], base_proxy[prompts])
                put(f"privitp@{sigma!r}", et, ep)
    return {k: {kind: Curve(arr, boot_w @ arr.T) for kind, arr in d.items()} for k, d in vals.items()}


# --- filter experiment ---------------------------------------------------------------------------------

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
        out["eps1"].append(privitp_phase1_epsilon(params).value)
        per = {r: {k: [] for k in out["rules"][r]} for r in FILTER_RULES}
        for seed, (streams, noises) in enumerate(seeds):
            for ri, name in enumerate(FILTER_RULES):
                rule = _rule(name, params, cfg)
                gen = np.random.Generator(np.random.PCG64(noises[ri]))
                stream = _query_stream(pools, n, streams)     # identical stream for every rule
                queries = (q for _, q in zip(range(cfg.filter_max_queries), stream))
                outcomes = rule.run(queries, Randomness(gen, SEEDED, seed))
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


def _filter_summary(filt: dict) -> dict:
    """Means over seeds per σ and the filter/basic ratios."""
    summary = {}
    for name, rec in filt["rules"].items():
        answered = np.array(rec["answered"], dtype=np.float64)             # [σ, seeds]
        spent = np.array(rec["spent"], dtype=np.float64)
        summary[name] = {"answered_mean": _floats(answered.mean(axis=1)),
                         "answered_sd": _floats(answered.std(axis=1, ddof=1) if answered.shape[1] > 1
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


# --- observations --------------------------------------------------------------------------------------

def _largest_decrease(curve: Curve) -> dict:
    """The pair n_i < n_j with the largest standardised decrease (m_i − m_j)/SE(m_i − m_j) (paired bootstrap)."""
    m, b = curve.mean, curve.boot
    best = {"z": -math.inf, "i": 0, "j": 0, "drop": 0.0}
    for i in range(m.size):
        for j in range(i + 1, m.size):
            drop = m[i] - m[j]
            se = float(np.std(b[:, i] - b[:, j], ddof=1))
            z = drop / se if se > 0 else (math.inf if drop > 0 else -math.inf)
            if z > best["z"]:
                best = {"z": z, "i": i, "j": j, "drop": float(drop)}
    return best


def _significant(curve: Curve, i: int, j: int) -> float:
    """Standardised increase m_j − m_i over its paired bootstrap SE."""
    diff = curve.mean[j] - curve.mean[i]
    se = float(np.std(curve.boot[:, j] - curve.boot[:, i], ddof=1))
    return diff / se if se > 0 else (math.inf if diff > 0 else (0.0 if diff == 0 else -math.inf))


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _monotone_report(curve: Curve, ns) -> dict:
    dec = _largest_decrease(curve)
    return {"monotone": bool(dec["z"] <= Z_SCORE), "largest_decrease": dec["drop"],
            "largest_decrease_z": _finite(dec["z"]), "between_n": [ns[dec["i"]], ns[dec["j"]]]}


def observations(curves: dict, cfg: SimulationConfig, filt_summary: dict, filt: dict) -> dict:
    ns = list(cfg.ns)
    bon, bon_proxy = curves["bon"]["true"], curves["bon"]["proxy"]
    peak = int(np.argmax(bon.mean))
    rise = _significant(bon, 0, peak)
    fall = _significant(bon, len(ns) - 1, peak)
    proxy_mono = _monotone_report(bon_proxy, ns)
    proxy_rise = _significant(bon_proxy, 0, len(ns) - 1)
    a_bon = bool(rise > Z_SCORE and fall > Z_SCORE)
    a_proxy = bool(proxy_mono["monotone"] and proxy_rise > Z_SCORE)
    per_sigma_mono = []
    for s in cfg.sigmas:
        per_sigma_mono.append({"sigma": s, "privbon": _monotone_report(curves[f"privbon@{s!r}"]["true"], ns),
                               "privitp": _monotone_report(curves[f"privitp@{s!r}"]["true"], ns)})
    main = next(x for x in per_sigma_mono if x["sigma"] == cfg.sigma)
    # (b) PrivITP ≥ PrivBoN within error, per σ and n.
    per_sigma_b = []
    for s in cfg.sigmas:
        pi, pb = curves[f"privitp@{s!r}"]["true"], curves[f"privbon@{s!r}"]["true"]
        diff = pi.mean - pb.mean
        se = np.std(pi.boot - pb.boot, axis=0, ddof=1)
        holds = diff >= -Z_SCORE * se
        from_n = None
        for k in range(len(ns)):
            if np.all(holds[k:]):
                from_n = ns[k]
                break
        per_sigma_b.append({"sigma": s, "holds_at_n_max": bool(holds[-1]), "holds_for_n_from": from_n,
                            "holds_at": [ns[k] for k in range(len(ns)) if holds[k]],
                            "diff_at_n_max": float(diff[-1]), "se_at_n_max": float(se[-1])})
    # (d) PrivITP approaches ITP as σ decreases (gap at n_max, paired bootstrap).
    itp = curves["itp"]["true"]
    gaps = [float(itp.mean[-1] - curves[f"privitp@{s!r}"]["true"].mean[-1]) for s in cfg.sigmas]
    shrinks = True
    for a, b in zip(cfg.sigmas, cfg.sigmas[1:]):          # σ_a < σ_b: gap(σ_a) must not exceed gap(σ_b)
        ga = itp.boot[:, -1] - curves[f"privitp@{a!r}"]["true"].boot[:, -1]
        gb = itp.boot[:, -1] - curves[f"privitp@{b!r}"]["true"].boot[:, -1]
        diff = float(np.mean(itp.per_prompt[-1] - curves[f"privitp@{a!r}"]["true"].per_prompt[-1])
                     - np.mean(itp.per_prompt[-1] - curves[f"privitp@{b!r}"]["true"].per_prompt[-1]))
        se = float(np.std(ga - gb, ddof=1))
        if diff > Z_SCORE * se:
            shrinks = False
    # (c) filter vs basic composition.
    ratios = filt_summary["ratio_filter_over"]["basic_heuristic"]
    finite_ratios = [r for r in ratios if r is not None]
    halting = filt_summary["filter"]["mean_halting_time"]
    return {
        "note": "observations of this synthetic run (computed, not asserted by the library); "
                f"'within error' = no paired difference beyond {Z_SCORE:g} bootstrap standard errors",
        "z": Z_SCORE,
        "bon_non_monotone": {
            "value": bool(a_bon and a_proxy), "true_reward_rises_then_falls": a_bon,
            "proxy_keeps_rising": a_proxy, "peak_n": ns[peak], "true_at_n_min": float(bon.mean[0]),
            "true_at_peak": float(bon.mean[peak]), "true_at_n_max": float(bon.mean[-1]),
            "rise_z": _finite(rise), "fall_z": _finite(fall), "proxy_at_n_min": float(bon_proxy.mean[0]),
            "proxy_at_n_max": float(bon_proxy.mean[-1]), "proxy_largest_decrease": proxy_mono["largest_decrease"]},
        "private_monotone": {
            "value": bool(main["privbon"]["monotone"] and main["privitp"]["monotone"]), "sigma": cfg.sigma,
            "privbon": main["privbon"]["monotone"], "privitp": main["privitp"]["monotone"],
            "per_sigma": per_sigma_mono},
        "privitp_ge_privbon": {
            "value": bool(all(x["holds_at_n_max"] for x in per_sigma_b)),
            "at_main_sigma_all_n": next(x for x in per_sigma_b if x["sigma"] == cfg.sigma)["holds_at"] == ns,
            "per_sigma": per_sigma_b},
        "privitp_approaches_itp": {"value": bool(shrinks), "sigma": list(cfg.sigmas), "gap_at_n_max": gaps,
                                   "itp_at_n_max": float(itp.mean[-1])},
        "filter_vs_basic": {
            "value": float(np.mean(finite_ratios)) if finite_ratios else None, "sigma": list(cfg.sigmas),
            "ratio_per_sigma": ratios,
            "ratio_vs_clamped_per_sigma": filt_summary["ratio_filter_over"]["basic_clamped"],
            "paper_reported_ratio": "about 3x (Bhattad & Ray Chowdhury, Fig. 1 bottom right)",
            "filter_answered_mean": filt_summary["filter"]["answered_mean"],
            "basic_answered_mean": filt_summary["basic_heuristic"]["answered_mean"],
            "mean_halting_time": halting, "n": filt["n"],
            "halting_time_over_n": [None if t is None else t / filt["n"] for t in halting]},
    }


# --- document, plots, writing --------------------------------------------------------------------------

def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def simulate(cfg: SimulationConfig, seed: int) -> dict:
    """Run both experiments and return the UNSEALED document body (nothing is written)."""
    from privcheck.environment import environment

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise InvalidParameter("seed", seed, "an integer >= 0")
    seed = int(seed)
    cfg.validate()
    created = _now()
    start = time.perf_counter()
    root = np.random.SeedSequence(seed)
    pool_ss, list_ss, boot_ss, filt_ss = root.spawn(4)
    pools = generate_pools(cfg.data, np.random.Generator(np.random.PCG64(pool_ss)))
    boot_w = _bootstrap_weights(pools.prompts, cfg.bootstrap, np.random.Generator(np.random.PCG64(boot_ss)))
    curves = scaling_experiment(pools, cfg, np.random.Generator(np.random.PCG64(list_ss)), boot_w)
    filt = filter_experiment(pools, cfg, filt_ss)
    filt_summary = _filter_summary(filt)
    obs = observations(curves, cfg, filt_summary, filt)
    scaling = {"n": list(cfg.ns), "sigma": list(cfg.sigmas), "main_sigma": cfg.sigma,
               "base_true": float(pools.base_true.mean()), "base_proxy": float(pools.base_proxy.mean()),
               "bon": {k: c.to_json() for k, c in curves["bon"].items()},
               "itp": {k: c.to_json() for k, c in curves["itp"].items()},
               "privbon": {repr(s): {k: c.to_json() for k, c in curves[f"privbon@{s!r}"].items()}
                           for s in cfg.sigmas},
               "privitp": {repr(s): {k: c.to_json() for k, c in curves[f"privitp@{s!r}"].items()}
                           for s in cfg.sigmas},
               "privacy_reference": [{"sigma": s,
                                      "privbon_nominal_epsilon": privbon_epsilon(cfg.sensitivity, s,
                                                                                 mode="nominal").value,
                                      "privitp_eps1": privitp_phase1_epsilon(cfg.params(s, 1)).value}
                                     for s in cfg.sigmas]}
    return {
        "schema": SCHEMA_ID, "kind": "selection",
        "description": "Synthetic benchmark of spec selection.md §15: scaling of BoN, PrivBoN, ITP and PrivITP "
                       "in n from exact output laws, and PrivITP queries answered under the provable ex-post "
                       "filter vs basic composition. Seeded synthetic data: not a privacy release.",
        "config": cfg.to_json(),
        "curves": {"scaling": scaling, "filter": {**filt, "summary": filt_summary}},
        "observations": obs,
        "environment": environment(),
        "randomness": {"mode": SEEDED, "seed": seed, "privacy_release": False,
                       "note": "seeded simulation: reproducible, not a privacy release"},
        "privacy_release": False,
        "created_utc": created,
        "wall_time_s": time.perf_counter() - start,
    }


def render_plots(doc: dict) -> dict[str, bytes]:
    """The PNG figures of a document, rendered in memory: {file name: bytes}."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:                                  # optional dependency (extra "plots")
        raise PrivcheckError(f"matplotlib is required for the plots (pip install 'privcheck[plots]'): {exc}") from exc
    sc = doc["curves"]["scaling"]
    ns = np.array(sc["n"])
    main = repr(sc["main_sigma"])
    colors = {"bon": "tab:red", "privbon": "tab:orange", "itp": "tab:blue", "privitp": "tab:green"}
    labels = {"bon": "BoN", "privbon": "PrivBoN", "itp": "ITP", "privitp": "PrivITP"}

    def series(method, sigma=main):
        return sc[method] if method in ("bon", "itp") else sc[method][sigma]

    def band(ax, curve, color, label, style="-"):
        ax.plot(ns, curve["mean"], style, color=color, marker="o", ms=3, label=label)
        ax.fill_between(ns, curve["ci95"][0], curve["ci95"][1], color=color, alpha=0.2, lw=0)

    files = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in METHODS:
        band(axes[0], series(m)["true"], colors[m], labels[m])
        band(axes[1], series(m)["proxy"], colors[m], labels[m], "-" if m == "bon" else "--")
    for ax, base, title in ((axes[0], sc["base_true"], "true reward r* of the output"),
                            (axes[1], sc["base_proxy"], "proxy reward r̂ of the output")):
        ax.axhline(base, color="grey", lw=1, ls=":", label="π0 (base)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n (candidates per phase)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"expected reward (σ = {sc['main_sigma']}, β = {doc['config']['beta']})")
    axes[0].legend(fontsize=8)
    fig.suptitle("Scaling in n (exact output laws; 95% bootstrap bands over prompts)", fontsize=10)
    files[FIGURES["scaling"]] = _png(fig, plt)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    cmap = plt.get_cmap("viridis")
    for k, s in enumerate(sc["sigma"]):
        col = cmap(k / max(1, len(sc["sigma"]) - 1))
        for ax, m in ((axes[0], "privbon"), (axes[1], "privitp")):
            band(ax, sc[m][repr(s)]["true"], col, f"σ = {s}")
    for ax, m in ((axes[0], "privbon"), (axes[1], "privitp")):
        band(ax, sc["itp"]["true"], "black", "ITP (non-private)", "--")
        band(ax, sc["bon"]["true"], "tab:red", "BoN (non-private)", ":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n")
        ax.set_title(f"{labels[m]}: true reward vs n across σ")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("expected true reward")
    axes[1].legend(fontsize=7, loc="lower left")
    files[FIGURES["sigma"]] = _png(fig, plt)

    fl = doc["curves"]["filter"]
    sig = np.array(fl["sigma"])
    summ = fl["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    styles = {"filter": ("tab:green", "-", "ex-post filter (provable, §12.3)"),
              "basic_heuristic": ("tab:purple", "-", "basic composition (heuristic, ε_max at λ̃)"),
              "basic_clamped": ("tab:brown", "--", "basic composition (clamped λ̃, provable)"),
              "replication_unsound": ("grey", ":", "charge-after-run (NOT DP, replication)")}
    for name, (col, ls, lab) in styles.items():
        mean = np.array(summ[name]["answered_mean"])
        sd = np.array(summ[name]["answered_sd"])
        axes[0].errorbar(sig, mean, yerr=sd, color=col, ls=ls, marker="o", ms=4, capsize=3, label=lab)
    axes[0].set_yscale("log")
    axes[0].set_ylabel(f"queries answered (E = {fl['budget']:g}, n = {fl['n']})")
    axes[0].set_title(f"answered queries, mean ± sd over {len(fl['seeds'])} seeds")
    axes[0].legend(fontsize=7)
    for base, col, lab in (("basic_heuristic", "tab:purple", "filter / basic (heuristic)"),
                           ("basic_clamped", "tab:brown", "filter / basic (clamped, provable)")):
        ratio = [np.nan if r is None else r for r in summ["ratio_filter_over"][base]]
        axes[1].plot(sig, ratio, color=col, marker="o", ms=4, label=lab)
    axes[1].axhline(3.0, color="black", lw=1, ls=":", label="≈3x reported by [1]")
    axes[1].axhline(1.0, color="grey", lw=1)
    axes[1].set_ylim(bottom=0)
    axes[1].set_ylabel("ratio of answered queries")
    axes[1].set_title("filter advantage")
    axes[1].legend(fontsize=7)
    for name in ("filter", "basic_heuristic"):
        col, ls, lab = styles[name]
        ht = [np.nan if x is None else x for x in summ[name]["mean_halting_time"]]
        axes[2].plot(sig, ht, color=col, ls=ls, marker="o", ms=4, label=lab)
    axes[2].axhline(fl["n"], color="black", lw=1, ls=":", label="n")
    axes[2].set_ylim(0, fl["n"] * 1.05)
    axes[2].set_ylabel("mean halting time t (accepted queries)")
    axes[2].set_title("halting time")
    axes[2].legend(fontsize=7)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    for ax in axes:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(sig))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("σ (σ_X = σ_Z = σ/2)")
        ax.grid(alpha=0.3, which="major")
    files[FIGURES["filter"]] = _png(fig, plt)
    return files


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _write_outputs(out: Path, files: dict[str, bytes]) -> list[Path]:
    """Write the files atomically, the artifact JSON last; if any write fails, remove the files this call
    created (files that existed before are left as they were or atomically replaced) and re-raise."""
    from privcheck.artifacts.writer import write_atomic

    created, written = [], []
    try:
        for name, data in files.items():
            path = out / name
            existed = path.exists()
            write_atomic(path, data)
            written.append(path)
            if not existed:
                created.append(path)
    except BaseException:
        for path in created:
            try:
                path.unlink()
            except OSError:
                pass
        raise
    return written


def _out_dir(out) -> Path:
    if out is None or (isinstance(out, str) and not out.strip()):
        raise InvalidParameter("out", out, "a directory path")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InvalidParameter("out", str(out), "a directory (a file exists at this path)")
    return path


def run_simulation(out, seed: int = DEFAULT_SEED, quick: bool = False,
                   config: SimulationConfig | None = None) -> tuple[dict, list[Path]]:
    """Run the benchmark and write DIR/selection_simulation.json and the PNG figures.

    Everything (experiments, sealing, schema validation, plots) is computed in memory before the first
    file is written; the JSON artifact is written last. Returns (sealed document, written paths)."""
    from privcheck.artifacts.schema import validate
    from privcheck.artifacts.writer import dump_json, seal

    path = _out_dir(out)
    if not isinstance(quick, (bool, np.bool_)):
        raise InvalidParameter("quick", quick, "True or False")
    cfg = config if config is not None else (SimulationConfig.reduced() if quick else SimulationConfig.full())
    if not isinstance(cfg, SimulationConfig):
        raise InvalidParameter("config", type(cfg).__name__, "a SimulationConfig")
    body = simulate(cfg, seed)
    figures = render_plots(body)
    body["figures"] = {key: {"file": name, "sha256": hashlib.sha256(figures[name]).hexdigest()}
                       for key, name in FIGURES.items()}
    doc = seal(body)
    validate(doc, name=SCHEMA_FILE)
    files = dict(figures)
    files[ARTIFACT] = dump_json(doc)
    return doc, _write_outputs(path, files)


# --- CLI -----------------------------------------------------------------------------------------------

def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    return value


def add_simulate_parser(verbs: dict, common) -> None:
    """`privcheck simulate selection --out DIR [--seed N] [--quick] [--json]`."""
    p = verbs["simulate"].add_parser(
        "selection", parents=[common],
        help="synthetic benchmark of BoN/PrivBoN/ITP/PrivITP scaling and the PrivITP ex-post filter (spec §15)")
    p.add_argument("--out", required=True, help="output directory (selection_simulation.json and PNG plots)")
    p.add_argument("--seed", type=_seed, default=DEFAULT_SEED,
                   help=f"seed of the synthetic data and of every draw (default {DEFAULT_SEED}); seeded runs are "
                        "not privacy releases")
    p.add_argument("--quick", action="store_true", help="reduced sizes (tests, smoke runs)")
    p.set_defaults(func=cmd_simulate_selection)


def cmd_simulate_selection(args) -> int:
    from privcheck.cli import emit

    doc, paths = run_simulation(args.out, seed=args.seed, quick=args.quick)
    obs = doc["observations"]
    artifact = str(Path(args.out) / ARTIFACT)
    payload = {"artifact": artifact, "sha256": doc["sha256"], "files": [str(p) for p in paths],
               "observations": obs, "randomness": doc["randomness"], "wall_time_s": doc["wall_time_s"]}
    ratios = obs["filter_vs_basic"]["ratio_per_sigma"]
    rows = [("artifact", artifact), ("sha256", doc["sha256"]),
            ("(a) BoN rises then falls, proxy rises", obs["bon_non_monotone"]["value"]),
            (f"(a) PrivBoN & PrivITP monotone (σ = {obs['private_monotone']['sigma']})",
             obs["private_monotone"]["value"]),
            ("(b) PrivITP >= PrivBoN at n_max, every σ", obs["privitp_ge_privbon"]["value"]),
            ("(c) filter/basic answered, per σ", ", ".join("n/a" if r is None else f"{r:.2f}" for r in ratios)),
            ("(d) PrivITP -> ITP as σ decreases", obs["privitp_approaches_itp"]["value"]),
            ("randomness", f"seeded (seed {doc['randomness']['seed']}): not a privacy release"),
            ("wall time (s)", round(doc["wall_time_s"], 2))]
    emit(args, payload, rows)
    return 0


__all__ = ["ARTIFACT", "DEFAULT_SEED", "DataConfig", "FIGURES", "Pools", "SimulationConfig", "add_simulate_parser",
           "cmd_simulate_selection", "filter_experiment", "generate_pools", "lambda_grid", "observations",
           "pool_acceptance", "privitp_expected", "render_plots", "run_simulation", "scaling_experiment",
           "simulate"]
