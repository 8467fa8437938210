"""The scaling experiment: expected true and proxy reward of BoN, PrivBoN, ITP and PrivITP as n grows, from
EXACT output laws (no Monte Carlo over the mechanisms' noise), with bootstrap error bars over prompts.

For n ∈ ns, R candidate lists per prompt (nested prefixes of one list of length max(ns), so the curves are
paired across n):

    BoN      argmax of the list (ties to the lowest index)                    — per list
    PrivBoN  softmax(s/σ) over the list                                       — per list
    ITP      itp_law(s, β, λ̂(s), M = (R_max − λ̂)/β), fallback = fresh π0 draw  — per list (λ̂ from the same list)
    PrivITP  Phase 1: λ̂ from the list (a Phase-1 batch); Phase 2: a fresh independent list of n, integrated
             out EXACTLY given λ̃: with p(r; λ̃) = P_acc (laws.acceptance_rejection, c = threshold_width(λ̃)),
             p̄ = E_π0[p], a = E_π0[p·r*], q = 1 − p̄, the i.i.d. list gives
                 E[r* | λ̃] = a·(1 − qⁿ)/p̄ + qⁿ·E_π0[r*]     (Σ_i q^{i−1}·a, plus the fresh-π0 fallback)
             and the average over λ̃ ~ N(λ̂, σ_X²) is taken AFTER forming the products qⁱ, by the trapezoid
             rule on a public λ̃ grid of step σ_X/16 over [r_lo − β − 10σ_X, r_max − β + 10σ_X] (λ̂ always
             lies in [r_lo − β, r_max − β]); the quadrature error is O(step²) from the kink of the clamp
             c = max(·, c_min), a few 1e-6 at σ_X/16 (the tests compare with `laws.privitp_law` averaged over
             every Phase-2 list of a small pool, to 1e-6 at step σ_X/64).

The fallback is scored as E_π0[r*] because the mechanisms return a fresh π0 draw. Error bars: a bootstrap
over prompts (each prompt's mean over its R lists), shared by every curve, so differences (across n,
methods, σ) are paired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechanisms.selection.itp import lambda_hat_matrix
from mechanisms.selection.laws import acceptance_rejection, itp_law, privbon_law
from mechanisms.selection.simulate.config import SimulationConfig
from mechanisms.selection.simulate.pools import Pools
from privcheck.accounting import PrivITPParams
from privcheck.serialization import jsonable

__all__ = ["Curve", "PoolAcceptance", "as_floats", "bootstrap_weights", "lambda_grid", "pool_acceptance",
           "privitp_expected", "scaling_experiment"]


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
    average is taken after the products, never over the per-round probabilities."""
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


def bootstrap_weights(prompts: int, draws: int, gen: np.random.Generator) -> np.ndarray:
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
        return {"mean": as_floats(self.mean), "se": as_floats(self.se), "ci95": [as_floats(lo), as_floats(hi)]}


def as_floats(x) -> list[float]:
    """A flat list of Python floats (the JSON form of a curve)."""
    return jsonable(np.asarray(x, dtype=np.float64).ravel())


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
            lam = lambda_hat_matrix(s, cfg.beta)
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

