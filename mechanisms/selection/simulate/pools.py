"""Synthetic prompts and response pools with a misspecified proxy reward.

P prompts, each with a response pool of K responses (π0 = uniform over the pool). A fraction h of the
responses are "hacking" (true reward r* ~ U(0, 0.2), proxy r̂ ~ U(0.95, 1)); for the others
r* ~ Beta(m·κ, (1 − m)·κ) with a per-prompt mean m ~ U(m_lo, m_hi) and r̂ = r* + N(0, τ²). Proxies are
clipped to [0, R_max] = [0, 1] and recorded at a public resolution of 1/Q (a reward model's output grid), so
that the exact laws can be evaluated per distinct score value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.selection.simulate.config import DataConfig

__all__ = ["Pools", "generate_pools"]


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

