"""Configuration of the synthetic selection benchmark: every public constant of one run, validated.

The defaults reproduce the settings of Bhattad & Ray Chowdhury's experiments on synthetic data
(docs/selection.md, "Synthetic benchmark"): n ∈ {2^0, …, 2^12}, β = 0.05, σ_X = σ_Z = σ/2 with σ the
PrivBoN Gumbel scale, and for the filter experiment n = 16, budget E = 50, 10 seeds and a sweep over σ.
Δ, δ, L, β, σ are public constants of the configuration, never derived from the scores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from privcheck import validation as v
from privcheck.accounting import PrivITPParams
from privcheck.errors import InvalidParameter
from privcheck.serialization import jsonable

__all__ = ["DataConfig", "LIMITS", "SimulationConfig"]

# The largest sizes a run accepts (a larger one is refused before any work, not left to exhaust memory): the pools
# are float64 arrays [prompts, pool_size] (at most 2^28 entries, 2 GiB), the replicates and bootstrap resamples
# multiply the run time, and the filter experiment draws up to filter_max_queries queries per σ and seed.
LIMITS = {"prompts": 2 ** 16, "pool_size": 2 ** 24, "pool_entries": 2 ** 28, "resolution": 2 ** 16,
          "replicates": 2 ** 16, "bootstrap": 2 ** 20, "filter_n": 65536, "filter_seeds": 2 ** 16,
          "filter_max_queries": 10 ** 7}


@dataclass(frozen=True)
class DataConfig:
    """Synthetic prompts and response pools (the data model: `mechanisms.selection.simulate.pools`)."""

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
        prompts = v.count("prompts", self.prompts, minimum=2, maximum=LIMITS["prompts"])
        pool = v.count("pool_size", self.pool_size, minimum=2, maximum=LIMITS["pool_size"])
        if prompts * pool > LIMITS["pool_entries"]:
            raise InvalidParameter("pool_size", self.pool_size, f"[2, {LIMITS['pool_entries'] // prompts}] with "
                                   f"{prompts} prompts (prompts·pool_size <= {LIMITS['pool_entries']})")
        if not 0.0 <= v.nonnegative("hack_fraction", self.hack_fraction) < 1.0:
            raise InvalidParameter("hack_fraction", self.hack_fraction, "[0, 1)")
        for name in ("hack_true", "hack_proxy", "mean_range"):
            lo, hi = _pair(name, getattr(self, name))
            if not 0.0 <= lo <= hi <= 1.0 or (name == "mean_range" and not 0.0 < lo <= hi < 1.0):
                raise InvalidParameter(name, getattr(self, name), "0 <= lo <= hi <= 1 (mean_range: 0 < lo <= hi < 1)")
        v.positive("concentration", self.concentration)
        v.nonnegative("proxy_noise", self.proxy_noise)
        v.count("resolution", self.resolution, minimum=2, maximum=LIMITS["resolution"])
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
        v.count("replicates", self.replicates, maximum=LIMITS["replicates"])
        v.count("bootstrap", self.bootstrap, minimum=20, maximum=LIMITS["bootstrap"])
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
        v.count("filter_n", self.filter_n, maximum=LIMITS["filter_n"])
        v.positive("filter_budget", self.filter_budget)
        v.count("filter_seeds", self.filter_seeds, maximum=LIMITS["filter_seeds"])
        v.count("filter_max_queries", self.filter_max_queries, maximum=LIMITS["filter_max_queries"])
        return self

    def params(self, sigma: float, candidates: int) -> PrivITPParams:
        """PrivITP's public constants at PrivBoN scale σ: σ_X = σ_Z = σ/2 (the paper's setting)."""
        return PrivITPParams(candidates=candidates, beta=self.beta, sigma_x=sigma / 2, sigma_z=sigma / 2,
                             headroom=self.headroom, sensitivity=self.sensitivity, delta=self.delta)

    def to_json(self) -> dict:
        """JSON types only (tuples become lists)."""
        return jsonable(asdict(self))


def _pair(name, value) -> tuple[float, float]:
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise InvalidParameter(name, value, "a pair (lo, hi) of finite reals") from None
    return v.finite(name, lo), v.finite(name, hi)

