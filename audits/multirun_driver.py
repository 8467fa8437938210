"""Multi-run audits that run their own trainings: N₁ runs with the canary, N₀ without, thresholded scores, the
Clopper–Pearson bound of `audits.statistics.clopper_pearson` (docs/audits.md, "Multi-run audits that train").

`run_multirun_audit(train_and_score, runs_in=N₁, runs_out=N₀, threshold=t, delta=δ, ...)` calls
`train_and_score(seed, include_canary) -> score` once per run, each call an independent task of
`audits.backends.run_tasks` (`backend="serial"` or `"ray"`), and tests "canary present ⇔ score ≥ t".

* Seeds: run i with the canary gets `RandomnessPolicy.derive_seed(f"audits.multirun/in/{i}")`, run j without it
  `.../out/{j}` (fresh OS entropy per run when `seed` is None), so both backends give the same scores and adding
  runs leaves the others' seeds alone.
* Counts: a run that fails on every attempt (an exception, a lost worker, or a score that is not a finite real)
  is listed in `failed` and in the artifact's `diagnostics.runs_failed`; N₁, N₀, FN and FP count only the runs
  that finished, so `result.n_in + result.n_out` always equals the runs that finished. No finished run in an arm
  is an error (nothing to bound), not an artifact.
* The threshold and the function are fixed before the runs (the CP guarantee needs a test chosen independently of
  them); a threshold chosen from these scores would void the bound.

`GaussianRuns(sigma, steps)` is a built-in, cheap target with a closed form: T full-batch noisy-sum steps on a
canary of sensitivity 1 (DP-SGD at q = 1 on the canary's coordinate), score = Σ_t y_t/(σ√T), y_t = b + σZ_t. The
score is N(0, 1) without the canary and N(μ, 1) with it, μ = √T/σ: the mechanism is μ-GDP, FPR(t) = Φ̄(t) and
FNR(t) = Φ(t − μ); its default threshold is μ/2 and its claim the μ-GDP ε (`nominal_epsilon`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from audits.backends import DEFAULT_MAX_RETRIES, TaskFailure, check_backend, run_tasks
from audits.statistics.clopper_pearson import MAX_RUNS, clopper_pearson
from audits.statistics.report import AuditReport
from privcheck import validation as val
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.randomness import RandomnessPolicy
from privcheck.serialization import thaw

__all__ = ["GAUSSIAN_MAX_DRAWS", "GaussianRuns", "MultiRunResult", "RUN_SEED_LABEL", "run_multirun_audit", "run_seeds"]

RUN_SEED_LABEL = "audits.multirun/{arm}/{index}"
GAUSSIAN_MAX_DRAWS = 10**9     # normals drawn by all runs of the built-in target (runs × T; about a minute)


@dataclass(frozen=True)
class GaussianRuns:
    """The built-in target (module docstring): `GaussianRuns(sigma, steps)(seed, include_canary) -> score`."""
    sigma: float
    steps: int = 1

    def __post_init__(self):
        object.__setattr__(self, "sigma", val.positive("sigma", self.sigma))
        object.__setattr__(self, "steps", val.count("steps", self.steps, 1, GAUSSIAN_MAX_DRAWS // 2))

    def check_runs(self, runs: int) -> None:
        """`runs` runs draw runs·T normals in all: at most GAUSSIAN_MAX_DRAWS (InvalidParameter naming steps)."""
        if runs * self.steps > GAUSSIAN_MAX_DRAWS:
            raise InvalidParameter("steps", self.steps, f"an integer in [1, {GAUSSIAN_MAX_DRAWS // runs}] for {runs} "
                                   f"runs (runs × steps <= {GAUSSIAN_MAX_DRAWS} normal draws)")

    @property
    def mu(self) -> float:
        """μ = √T/σ: the GDP parameter and the mean score with the canary."""
        return math.sqrt(self.steps) / self.sigma

    @property
    def default_threshold(self) -> float:
        return self.mu / 2

    def __call__(self, seed: int, include_canary: bool) -> float:
        noise = np.random.default_rng(seed).standard_normal(self.steps)
        y = float(include_canary) + self.sigma * noise            # the canary coordinate of T noisy sums
        return float(y.sum() / (self.sigma * math.sqrt(self.steps)))

    def nominal_epsilon(self, delta: float) -> float:
        """The μ-GDP ε at δ (`audits.statistics.power.nominal_epsilon` of `gdp(μ)`: the certified Gaussian-mechanism
        ε)."""
        from audits.statistics.power import nominal_epsilon
        from audits.statistics.score_models import GDP

        try:
            return nominal_epsilon(GDP(self.mu), delta)[0]
        except InvalidParameter:
            raise InvalidParameter("sigma", self.sigma, f"a noise multiplier whose μ = √steps/σ = {self.mu:.6g} the "
                                                        f"accountant covers at delta={delta!r}") from None

    def claim(self) -> dict:
        return {"accountant": "analytic",
                "mechanism": {"name": "gaussian_runs", "params": {"sigma": self.sigma, "steps": self.steps,
                                                                  "mu": self.mu}}}


@dataclass(frozen=True)
class MultiRunResult:
    """The report, the scores of each arm (None for a failed run) and the failed runs."""
    report: AuditReport
    scores_in: tuple
    scores_out: tuple
    failed: tuple[dict, ...]          # {"arm", "run", "error", "attempts"}
    execution: dict                   # `audits.backends.TaskRun.to_json()`

    @property
    def eps_lower(self) -> float:
        return self.report.result["eps_lower"]


def run_seeds(runs_in: int, runs_out: int, policy: RandomnessPolicy) -> tuple[tuple[str, int, int], ...]:
    """(arm, run index, seed) of every run, the runs with the canary first."""
    return tuple((arm, i, policy.derive_seed(RUN_SEED_LABEL.format(arm=arm, index=i)))
                 for arm, n in (("in", runs_in), ("out", runs_out)) for i in range(n))


def _score_run(item):
    """One task: `train_and_score(seed, include_canary)`."""
    train_and_score, seed, include = item
    return train_and_score(seed, include)


def _finite_score(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        return None
    return float(value)


def run_multirun_audit(train_and_score, *, runs_in: int, runs_out: int, threshold: float, delta: float,
                       confidence: float = 0.95, two_sided: bool = True, eps_nominal: float | None = None,
                       seed: int | None = None, backend: str = "serial", address: str | None = None,
                       max_retries: int = DEFAULT_MAX_RETRIES, claim=None) -> MultiRunResult:
    """Run N₁ + N₀ trainings as tasks and report the Clopper–Pearson bound (module docstring). Every input is
    validated before the first run."""
    if not callable(train_and_score):
        raise InvalidParameter("train_and_score", train_and_score, "a callable (seed, include_canary) -> score")
    runs_in, runs_out = val.count("runs_in", runs_in, 1, MAX_RUNS), val.count("runs_out", runs_out, 1, MAX_RUNS)
    threshold = val.finite("threshold", threshold)
    delta = val.half_open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    if not isinstance(two_sided, bool):
        raise InvalidParameter("two_sided", two_sided, "True or False")
    eps_nominal = None if eps_nominal is None else val.nonnegative("eps_nominal", eps_nominal)
    seed = None if seed is None else val.seed("seed", seed)
    backend, address, max_retries = check_backend(backend, address, max_retries)
    if isinstance(train_and_score, GaussianRuns):
        train_and_score.check_runs(runs_in + runs_out)
    if claim is None and isinstance(train_and_score, GaussianRuns):
        claim = train_and_score.claim()
    clopper_pearson(0, 1, 0, 1, delta=delta, confidence=confidence, claim=claim)   # the claim, checked up front

    policy = RandomnessPolicy.from_setting(seed)
    runs = run_seeds(runs_in, runs_out, policy)
    run = run_tasks(_score_run, [(train_and_score, s, arm == "in") for arm, _, s in runs], backend=backend,
                    address=address, max_retries=max_retries, desc="multi-run audit")
    failures = {f.index: f for f in run.failures}
    for i, value in enumerate(run.results):          # a bad return value is a failed run, not a retry
        if i not in failures and _finite_score(value) is None:
            failures[i] = TaskFailure(i, f"InvalidParameter: score={value!r} is not a finite real number", 1)
    scores = {"in": [], "out": []}
    failed = []
    for i, (arm, index, _) in enumerate(runs):
        if i in failures:
            f = failures[i]
            failed.append({"arm": arm, "run": index, "error": f.error, "attempts": f.attempts})
            scores[arm].append(None)
        else:
            scores[arm].append(_finite_score(run.results[i]))
    finished_in = [s for s in scores["in"] if s is not None]
    finished_out = [s for s in scores["out"] if s is not None]
    if not finished_in or not finished_out:
        raise PrivcheckError(f"no run {'with' if not finished_in else 'without'} the canary finished "
                             f"({len(failed)} runs failed; first: {failed[0]['error']})")
    fn = sum(s < threshold for s in finished_in)
    fp = sum(s >= threshold for s in finished_out)
    execution = run.to_json()
    diagnostics = {"threshold": threshold, "runs_requested": {"in": runs_in, "out": runs_out},
                   "runs_failed": failed, "execution": execution}
    rep = clopper_pearson(fp, len(finished_out), fn, len(finished_in), delta=delta, confidence=confidence,
                          two_sided=two_sided, eps_nominal=eps_nominal, claim=claim, diagnostics=diagnostics)
    software = thaw(rep.software)
    if run.ray_version is not None:
        software["ray"] = run.ray_version
    note = ("multi-run audit: runs with and without the canary are fixed in advance; "
            + (f"training seeds derived from seed {seed}: a test, not a privacy release" if seed is not None
               else "training seeds from OS entropy"))
    randomness = {"membership": "not_applicable", "audit_release": False if seed is not None else None, "note": note}
    rep = dataclasses.replace(rep, software=software, randomness=randomness)
    return MultiRunResult(rep, tuple(scores["in"]), tuple(scores["out"]), tuple(failed), execution)
