"""Score models for audit power analysis: how canary scores are distributed (docs/audits.md, "Score models").

A score model draws one attack score per canary given whether the canary was included, in canary order:
`model.draw(included, rng)` returns an array of the shape of the boolean array `included`, each entry drawn
independently given its own inclusion bit. Higher scores mean "more likely included".

Models:
* `Perfect()`: every included canary scores above every excluded one (in ~ 1 + U(0,1), out ~ U(0,1)).
* `GDP(mu)`: in ~ N(mu, 1), out ~ N(0, 1).
* `DPSGDDirac(q, sigma, steps, stat, interference)`: an idealised gradient-space Dirac canary audited white-box
  (the DP-GRPO Dirac canary of docs/audits.md). Per step, in units of the noise std σC, `y_t = B_t/σ + s·Z_t`
  with `B_t ~ Bern(q)` if included and 0 if not, `Z_t ~ N(0, 1)`, `s = sqrt(1 + τ²)`. `stat="llr"` scores
  `Σ_t log(1 − q + q·exp((y_t/σ − 1/(2σ²))/s²))`, the Neyman–Pearson statistic of the per-step observations;
  `stat="sum"` scores `Σ_t y_t/√T` (the final-model coordinate of plain SGD).
* `Empirical(in_scores, out_scores[, sampling_rate, steps])`: resampled with replacement from a pilot's scores; with
  the run's q and T it also carries (1 − q)^T for the noiseless guard.

Assumptions and numerics: canaries are independent given their bits (no interference between canaries beyond τ).
The LLR is a symmetric function of the steps, so an included canary's K ~ Bin(T, q) inclusions are placed on its
first K steps (same law as Bernoulli steps). Per-step LLR terms are computed in float32 (the normals dominate the
cost; terms carry ~1e−7 relative error, far below the noise) and summed in float64; terms whose exponent could
overflow float32, and every term when q > 1/2 (where 1 + q·expm1(x) cancels), are computed in float64 with
`logaddexp`. `stat="sum"` is drawn exactly: the sum of T
unit normals over √T is one unit normal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privcheck import validation as val
from privcheck.errors import InvalidParameter

STATS = ("llr", "sum")
MAX_STEPS = 10**5   # T of dpsgd_dirac: its nominal ε is the PLD of T steps (about 30 s at 1e5 on one core)
# Elements per float32 block of per-step LLR terms (~8 MB): bounds memory whatever m, sims and T are.
_BLOCK_ELEMENTS = 2_000_000
# Above this exponent, exp() in float32 may overflow (float32 max ≈ e^88.7); such terms are redone in float64.
_FLOAT32_EXP_LIMIT = 80.0


class ScoreModel:
    """Base class: `draw(included, rng)` and a short `name` for reports."""

    name: str = ""

    def draw(self, included: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def params(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {"name": self.name, "params": self.params()}

    @property
    def draws_per_score(self) -> int:
        """Random numbers drawn per simulated score (what a power plan's cost is counted in)."""
        return 1

    @property
    def event(self):
        """The `privcheck.accounting` event of the audited mechanism, or None when the model has none."""
        return None

    @property
    def never_sampled(self) -> float | None:
        """For a subsampled noisy mechanism whose noise a faulty run could omit: the probability (1 − q)^T that an
        included canary is never sampled (it then scores exactly like an excluded one, with or without noise).
        None when the model describes no such mechanism (the planner then has no noiseless run to guard against)."""
        return None


@dataclass(frozen=True)
class Perfect(ScoreModel):
    """Perfect separation: every included canary outscores every excluded one."""

    @property
    def name(self) -> str:
        return "perfect"

    def draw(self, included, rng):
        included = np.asarray(included, dtype=bool)
        return rng.random(included.shape) + included


@dataclass(frozen=True)
class GDP(ScoreModel):
    """μ-GDP scores: in ~ N(μ, 1), out ~ N(0, 1)."""

    mu: float

    def __post_init__(self):
        object.__setattr__(self, "mu", val.nonnegative("mu", self.mu))

    @property
    def name(self) -> str:
        return f"gdp(mu={self.mu!r})"

    def params(self) -> dict:
        return {"mu": self.mu}

    @property
    def event(self):
        """μ-GDP is the Gaussian mechanism of sensitivity μ and unit noise (None for μ = 0: no claim to compare)."""
        if self.mu == 0:
            return None
        from privcheck.accounting import GaussianEvent
        return GaussianEvent(sigma=1.0, sensitivity=self.mu)

    def draw(self, included, rng):
        included = np.asarray(included, dtype=bool)
        return rng.standard_normal(included.shape) + self.mu * included


@dataclass(frozen=True)
class DPSGDDirac(ScoreModel):
    """Gradient-space Dirac canary with white-box per-step scoring (module docstring)."""

    q: float
    sigma: float
    steps: int
    stat: str = "llr"
    interference: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "q", val.sampling_rate("q", self.q))
        object.__setattr__(self, "sigma", val.positive("sigma", self.sigma))
        object.__setattr__(self, "steps", val.count("T", self.steps, 1, MAX_STEPS))
        if self.stat not in STATS:
            raise InvalidParameter("stat", self.stat, " or ".join(STATS))
        object.__setattr__(self, "interference", val.nonnegative("interference", self.interference))

    @property
    def name(self) -> str:
        return (f"dpsgd_dirac(q={self.q!r}, sigma={self.sigma!r}, T={self.steps}, stat={self.stat}, "
                f"interference={self.interference!r})")

    def params(self) -> dict:
        return {"q": self.q, "sigma": self.sigma, "T": self.steps, "stat": self.stat,
                "interference": self.interference}

    @property
    def event(self):
        """The audited DP-SGD / DP-GRPO mechanism: Poisson rate q, noise multiplier σ, T steps (add/remove)."""
        from privcheck.accounting import PoissonGaussianEvent
        return PoissonGaussianEvent(sampling_rate=self.q, noise_multiplier=self.sigma, steps=self.steps)

    @property
    def never_sampled(self) -> float:
        """(1 − q)^T: an included canary with K = 0 inclusions carries no signal and ties with the excluded ones
        (in `draw` its K is 0, exactly as for an excluded canary)."""
        return math.exp(self.steps * math.log1p(-self.q)) if self.q < 1 else 0.0

    @property
    def draws_per_score(self) -> int:
        """The llr statistic draws one normal per step; the sum statistic one normal in all."""
        return self.steps if self.stat == "llr" else 1

    @property
    def noise_scale(self) -> float:
        """s = sqrt(1 + τ²): per-step std of y_t in units of σC."""
        return math.sqrt(1.0 + self.interference ** 2)

    def draw(self, included, rng):
        included = np.asarray(included, dtype=bool)
        flat = included.ravel()
        inclusions = rng.binomial(self.steps, self.q, size=flat.size) * flat   # K_i; 0 for excluded canaries
        if self.stat == "sum":
            signal = inclusions / (self.sigma * math.sqrt(self.steps))    # Σ_t B_t/σ over √T
            scores = signal + self.noise_scale * rng.standard_normal(flat.size)
        else:
            scores = self._llr(inclusions, rng)
        return scores.reshape(included.shape)

    def llr(self, y) -> float:
        """The per-step LLR of observed y_1..y_T (units of σC): Σ_t log(1 − q + q·exp((y_t/σ − 1/(2σ²))/s²))."""
        s = self.noise_scale
        x = (np.asarray(y, dtype=np.float64) / self.sigma - 0.5 / self.sigma ** 2) / s ** 2
        return float(np.sum(_log_mixture(self.q, x)))

    def _llr(self, inclusions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Per step, x_t = (y_t/σ − 1/(2σ²))/s² = a·Z_t + b + B_t·c with a = 1/(σs), b = −1/(2σ²s²), c = 1/(σ²s²);
        # the term is log(1 − q + q·e^{x_t}) = log1p(q·expm1(x_t)).
        s = self.noise_scale
        a, b, c = 1.0 / (self.sigma * s), -0.5 / (self.sigma * s) ** 2, 1.0 / (self.sigma * s) ** 2
        T, q = self.steps, self.q
        out = np.empty(inclusions.size, dtype=np.float64)
        rows = max(1, _BLOCK_ELEMENTS // T)
        for start in range(0, inclusions.size, rows):
            k = inclusions[start:start + rows]
            x = rng.standard_normal((k.size, T), dtype=np.float32)
            x *= np.float32(a)
            x += np.float32(b)
            k_max = int(k.max(initial=0))
            if k_max:
                x[:, :k_max] += np.where(np.arange(k_max) < k[:, None], np.float32(c), np.float32(0.0))
            if q > 0.5:           # 1 + q·expm1(x) would cancel towards 1 − q: every term exactly, in float64
                out[start:start + k.size] = _log_mixture(q, x.astype(np.float64)).sum(axis=1)
                continue
            large = x > _FLOAT32_EXP_LIMIT
            exact = None
            if large.any():       # only for tiny σ: these terms exactly, in float64
                exact = _log_mixture(q, x[large].astype(np.float64))
                x[large] = 0.0
            np.expm1(x, out=x)
            x *= np.float32(q)
            np.log1p(x, out=x)
            if exact is not None:
                out[start:start + k.size] = x.sum(axis=1, dtype=np.float64) + _row_sums(large, exact)
            else:
                out[start:start + k.size] = x.sum(axis=1, dtype=np.float64)
        return out


def _log_mixture(q: float, x: np.ndarray) -> np.ndarray:
    """log(1 − q + q·e^x) without overflow or cancellation."""
    return np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + x)


def _row_sums(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-row sums of `values`, laid out in the row-major order of `mask`'s True entries."""
    rows = np.nonzero(mask)[0]
    return np.bincount(rows, weights=values, minlength=mask.shape[0])


@dataclass(frozen=True, eq=False)
class Empirical(ScoreModel):
    """Scores resampled with replacement from a pilot (whose inclusion coins are independent of the audit's).

    `sampling_rate`, `steps` (both or neither): the audited run's public Poisson rate q and step count T, when the
    pilot is a run of a subsampled noisy mechanism with the same q and T. They do not change the draws (the pilot's
    in-scores already hold its never-sampled canaries); they give `never_sampled` = (1 − q)^T, so the planner's
    noiseless guard applies under its separation assumption (docs/audits.md, "Runs without noise")."""

    in_scores: np.ndarray = field(repr=False)
    out_scores: np.ndarray = field(repr=False)
    sampling_rate: float | None = None
    steps: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "in_scores", _pilot_scores("in_scores", self.in_scores))
        object.__setattr__(self, "out_scores", _pilot_scores("out_scores", self.out_scores))
        if (self.sampling_rate is None) != (self.steps is None):
            raise InvalidParameter("sampling_rate" if self.sampling_rate is None else "steps", None,
                                   "sampling_rate and steps given together (the run's q and T), or neither")
        if self.sampling_rate is not None:
            object.__setattr__(self, "sampling_rate", val.sampling_rate("sampling_rate", self.sampling_rate))
            object.__setattr__(self, "steps", val.count("steps", self.steps, 1, MAX_STEPS))

    @property
    def name(self) -> str:
        run = "" if self.sampling_rate is None else f", q={self.sampling_rate!r}, T={self.steps}"
        return f"empirical(n_in={self.in_scores.size}, n_out={self.out_scores.size}{run})"

    def params(self) -> dict:
        run = {} if self.sampling_rate is None else {"q": self.sampling_rate, "T": self.steps}
        return {"n_in": int(self.in_scores.size), "n_out": int(self.out_scores.size), **run}

    @property
    def never_sampled(self) -> float | None:
        """(1 − q)^T when the run's q and T are given, else None (no noiseless guard)."""
        if self.sampling_rate is None:
            return None
        return math.exp(self.steps * math.log1p(-self.sampling_rate)) if self.sampling_rate < 1 else 0.0

    def draw(self, included, rng):
        included = np.asarray(included, dtype=bool)
        scores = self.out_scores[rng.integers(0, self.out_scores.size, size=included.shape)]
        n_in = int(included.sum())
        scores[included] = self.in_scores[rng.integers(0, self.in_scores.size, size=n_in)]
        return scores


def _pilot_scores(name: str, scores) -> np.ndarray:
    try:
        arr = np.array(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameter(name, scores, "a non-empty 1-D sequence of finite numbers") from None
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise InvalidParameter(name, scores if arr.size <= 8 else f"<array of {arr.size}>",
                               "a non-empty 1-D sequence of finite numbers")
    arr.setflags(write=False)
    return arr


def parse_score_model(score_model) -> ScoreModel:
    """A ScoreModel, or one of the strings `perfect`, `gdp:MU`, `dpsgd_dirac:Q,SIGMA,T,llr|sum[,TAU]`."""
    if isinstance(score_model, ScoreModel):
        return score_model
    allowed = "perfect, gdp:MU, dpsgd_dirac:Q,SIGMA,T,llr|sum[,TAU] or a ScoreModel instance"
    if not isinstance(score_model, str):
        raise InvalidParameter("score_model", score_model, allowed)
    kind, _, args = score_model.strip().partition(":")
    fields = [f.strip() for f in args.split(",")] if args else []
    if kind == "perfect" and not fields:
        return Perfect()
    if kind == "gdp" and len(fields) == 1:
        return GDP(_number("mu", fields[0]))
    if kind == "dpsgd_dirac" and len(fields) in (4, 5):
        tau = _number("interference", fields[4]) if len(fields) == 5 else 0.0
        steps = _number("T", fields[2])
        return DPSGDDirac(_number("q", fields[0]), _number("sigma", fields[1]),
                          int(steps) if float(steps).is_integer() else steps, fields[3], tau)
    raise InvalidParameter("score_model", score_model, allowed)


def _number(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidParameter(name, text, "a number") from None


__all__ = ["DPSGDDirac", "Empirical", "GDP", "MAX_STEPS", "Perfect", "STATS", "ScoreModel", "parse_score_model"]
