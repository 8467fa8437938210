"""audits.input_space: prepare() for input-space canary audits of any run (TRL / DP-GRPO), its power verdict and the
noiseless guard of pilot (`Empirical`) score models."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, norm

from audits import canary as cn
from audits import input_space
from audits.statistics.power import default_k_grid, plan
from audits.statistics.pvalue import eps_lower
from audits.statistics.score_models import Empirical
from privcheck.errors import InvalidParameter, PrivcheckError

# ---------------------------------------------------------------------------------------------------------------------
# A simulated input-space run: DP-SGD on a linear model whose per-example gradient is the canary's input x_i (a
# random unit vector in R^D, norm = C = 1), Poisson rate q, T steps, noise N(0, σ²I) per step; the released model is
# θ = Σ_i K_i·x_i + σ·√T·Z (K_i ~ Bin(T, q) inclusions if present, 0 if not; the sum of T step noises is one
# Gaussian). A canary's score is the model's response to its input, ⟨θ, x_i⟩ (the change from the base θ₀ = 0):
# post-processing of θ with public inputs, so the run is (ε, δ)-DP per canary at the PLD ε of (q, σ, T).

D = 8192
RUN = dict(sampling_rate=0.3, noise_multiplier=1.5, steps=10)          # PLD ε = 3.664 at δ = 1e-5


def _inputs(m: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((m, D), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _run(present: np.ndarray, x: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = rng.binomial(RUN["steps"], RUN["sampling_rate"], size=present.size) * present
    theta = k.astype(np.float32) @ x + np.float32(sigma * math.sqrt(RUN["steps"])) * rng.standard_normal(
        D, dtype=np.float32)
    return (x @ theta).astype(np.float64)


@pytest.fixture(scope="module")
def pilot():
    """A public pilot of the same mechanism: 2,000 public canaries, exactly half included by the pilot's own coins."""
    m = 2000
    present = np.zeros(m, dtype=bool)
    present[np.random.default_rng(1).permutation(m)[: m // 2]] = True
    scores = _run(present, _inputs(m, 100), RUN["noise_multiplier"], seed=2)
    return scores[present], scores[~present]


def _audited(audit, sigma: float, tmp_path, name: str):
    x = _inputs(audit.m, 200)
    scores = _run(audit.presence_for_training().astype(bool), x, sigma, seed=9)
    return audit.analyse(audit.write_scores(tmp_path / f"{name}.csv", scores))


def test_a_simulated_run_without_noise_is_rejected_at_the_default_plan(pilot, tmp_path):
    """With the run's q and T the pilot's Empirical carries (1 − q)^T = 0.7^10 and the plan is guarded: it picks a
    top-only rule; the run with its noise removed is rejected (every guess right), the honest run is not. The same
    pilot without q, T has no guard: its plan (k₊ = k₋ = 7) leaves the noiseless run unrejected."""
    pilot_in, pilot_out = pilot
    kw = dict(canaries=1000, delta=1e-5, pilot_in=pilot_in, pilot_out=pilot_out, seed=5, search_canaries=False)
    audit = input_space.prepare(**RUN, **kw)
    assert audit.score_model.never_sampled == pytest.approx(0.7 ** 10, rel=1e-12)
    assert audit.epsilon == pytest.approx(3.664, abs=1e-3)
    guard = audit.power.noiseless
    assert guard["guarded"] and guard["miss_bound"] <= 1e-6 and audit.preregistration.k_minus == 0
    assert (audit.preregistration.k_plus, audit.preregistration.k_minus) == (audit.power.k_plus, 0)
    assert audit.power.k_plus == 148                          # the figures of docs/audits.md, "Runs without noise"
    honest = _audited(audit, RUN["noise_multiplier"], tmp_path, "honest")
    assert honest.result["rejects_nominal"] is False and honest.result["eps_lower"] < 0.5 * audit.epsilon
    assert honest.result["eps_lower"] == pytest.approx(0.71, abs=0.01)
    audit = input_space.prepare(**RUN, **kw)                  # a fresh membership object (a reveal happens once)
    noiseless = _audited(audit, 0.0, tmp_path, "noiseless")
    assert noiseless.result["rejects_nominal"] is True and noiseless.result["eps_lower"] > audit.epsilon
    assert noiseless.result["correct"] == noiseless.result["guesses"] == audit.power.k_plus
    assert noiseless.result["eps_lower"] == pytest.approx(3.86, abs=0.01)

    unguarded = input_space.prepare(score_model=Empirical(pilot_in, pilot_out), epsilon=audit.epsilon,
                                    **{k: v for k, v in kw.items() if not k.startswith("pilot")})
    assert unguarded.power.noiseless is None and unguarded.score_model.never_sampled is None
    assert (unguarded.preregistration.k_plus, unguarded.preregistration.k_minus) == (7, 7)
    missed = _audited(unguarded, 0.0, tmp_path, "unguarded")
    assert missed.result["rejects_nominal"] is False and missed.result["eps_lower"] == pytest.approx(1.40, abs=0.01)


# ---------------------------------------------------------------------------------------------------------------------
# The issue: 500 input-space canaries, a pilot with AUROC ≈ 0.54, ε_lower 0 and no UNDERPOWERED line.

WEAK = dict(sampling_rate=0.01, noise_multiplier=1.5, steps=100, delta=1e-5)    # PLD ε = 0.2921


def _weak_pilot():
    """A deterministic pilot with AUROC ≈ 0.54: 2,000 normal quantiles, the in-scores shifted by μ = 0.1415
    (Φ(μ/√2) = 0.540)."""
    base = norm.ppf((np.arange(2000) + 0.5) / 2000)
    return base + 0.1415, base


def _mass_at_top(high, low, fraction: float) -> float:
    """P[score in the top `fraction` of the ½/½ mixture of the empirical laws of `high` and `low`, and drawn from
    `high`]: the planner's reference precision with an infinite reference sample."""
    values = np.concatenate([high, low])
    weight = np.concatenate([np.full(high.size, 0.5 / high.size), np.full(low.size, 0.5 / low.size)])
    from_high = np.concatenate([np.ones(high.size, bool), np.zeros(low.size, bool)])
    order = np.argsort(-values, kind="stable")
    weight, from_high = weight[order], from_high[order]
    cum = np.concatenate([[0.0], np.cumsum(weight)])
    cum_high = np.concatenate([[0.0], np.cumsum(weight * from_high)])
    j = min(int(np.searchsorted(cum, fraction, side="right")) - 1, weight.size - 1)
    return float(cum_high[j] + (fraction - cum[j] if from_high[j] else 0.0))


def _exact_best(m: int, pilot_in, pilot_out) -> float:
    """The best bound of the default grid at m canaries, precision computed exactly from the pilot's laws."""
    best = 0.0
    for rule in default_k_grid(m):
        correct = m * (_mass_at_top(pilot_in, pilot_out, rule.k_plus / m)
                       + _mass_at_top(-pilot_out, -pilot_in, rule.k_minus / m))
        best = max(best, eps_lower(m, rule.guesses, math.floor(correct + 1e-9), 1e-5, 0.05))
    return best


def test_500_canaries_with_a_weak_pilot_are_underpowered_and_the_count_is_named(tmp_path):
    pilot_in, pilot_out = _weak_pilot()
    auroc = mannwhitneyu(pilot_in, pilot_out).statistic / (pilot_in.size * pilot_out.size)
    assert auroc == pytest.approx(0.54, abs=0.002)
    audit = input_space.prepare(canaries=500, pilot_in=pilot_in, pilot_out=pilot_out, plan_sims=50, seed=3, **WEAK)
    target = 0.5 * audit.epsilon
    assert audit.epsilon == pytest.approx(0.2921, abs=1e-4)
    assert audit.verdict.underpowered is True and audit.verdict.canaries_basis == "score_model"
    needed = audit.canaries_needed
    assert needed == 8000 == 500 * 2 ** 4                      # the search grid: m·2, m·4, ...
    assert audit.warning.startswith("UNDERPOWERED: planned ε_lower ")
    assert f"about {needed} canaries would plan ≥ {target:.4g}" in audit.warning
    # independent: the exact reference precision of the pilot's laws reaches the target at the count, not at half
    exact_at, exact_half = _exact_best(needed, pilot_in, pilot_out), _exact_best(needed // 2, pilot_in, pilot_out)
    assert exact_at >= target > exact_half
    for m, exact in ((needed, exact_at), (needed // 2, exact_half)):
        planned = plan(m, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=audit.score_model, sims=1,
                       seed=11).planned_eps_lower
        assert planned == pytest.approx(exact, abs=0.02)      # pre-declared: the reference sample's ±0.02

    # the audit after training carries the plan: report.warning is the UNDERPOWERED line
    rng = np.random.default_rng(4)
    present = audit.presence_for_training().astype(bool)
    scores = np.where(present, rng.normal(0.1415, 1.0, 500), rng.normal(0.0, 1.0, 500))
    report = audit.analyse(audit.write_scores(tmp_path / "scores.csv", scores))
    assert report.warning == audit.warning and report.underpowered is True
    assert report.power["canaries_needed"] == needed
    assert report.power["planned_eps_lower"] == audit.power.planned_eps_lower
    assert report.power["score_model"] == "empirical(n_in=2000, n_out=2000, q=0.01, T=100)"
    assert (report.guessing["k_plus"], report.guessing["k_minus"]) == (audit.power.k_plus, audit.power.k_minus)
    assert report.guessing["preregistration"] == audit.preregistration.digest
    assert report.claim["epsilon"] == audit.epsilon and report.claim["mechanism"]["params"]["steps"] == 100
    assert report.canaries["type"] == "input_space"


def test_analyse_refuses_another_audits_scores_file(tmp_path):
    kw = dict(canaries=20, score_model="gdp:1.0", epsilon=1.0, delta=1e-5, plan_sims=5, search_canaries=False)
    first, second = input_space.prepare(seed=1, **kw), input_space.prepare(seed=2, **kw)
    path = first.write_scores(tmp_path / "first.csv", np.arange(20.0))
    with pytest.raises(PrivcheckError, match="is not this audit's"):
        second.analyse(path)


def test_a_fixed_rule_and_a_given_claim_are_kept():
    audit = input_space.prepare(canaries=40, score_model="gdp:2.0", epsilon=2.0, delta=1e-5, k_plus=5, k_minus=3,
                                plan_sims=5, seed=1, search_canaries=False, canary_ids=list(range(40)))
    assert (audit.preregistration.k_plus, audit.preregistration.k_minus) == (5, 3)
    assert audit.epsilon == 2.0 and audit.epsilon_source == "given" and audit.event is None
    assert audit.power.noiseless is None                       # gdp: no sampled mechanism, no guard
    assert audit.canary_ids == tuple(range(40)) and audit.presence_for_training().shape == (40,)
    assert audit.preregistration.commitment == audit.commitment


def test_prepare_validates_before_any_work(monkeypatch):
    def drawn(*args, **kwargs):
        raise AssertionError("membership drawn before validation")

    monkeypatch.setattr(cn, "draw_membership", drawn)
    base = dict(canaries=20, delta=1e-5, sampling_rate=0.1, noise_multiplier=1.0, steps=10,
                pilot_in=[1.0, 2.0], pilot_out=[0.0, 0.5])
    bad = [("canaries", 0), ("delta", 0.0), ("sampling_rate", 1.5), ("sampling_rate", None), ("steps", None),
           ("noise_multiplier", 0.0), ("epsilon", -1.0), ("pilot_in", [float("nan")]), ("pilot_out", None),
           ("score_model", "gdp:1"), ("confidence", 1.0), ("plan_sims", 0), ("seed", -1), ("k_plus", 21),
           ("k_minus", -1), ("fraction", 0.0), ("fraction", 1.5), ("search_canaries", 1),
           ("canary_ids", ["a"] * 20), ("canary_ids", ["a"]), ("score_name", "two\nlines")]
    for key, value in bad:
        with pytest.raises(InvalidParameter) as info:
            input_space.prepare(**{**base, key: value})
        assert info.value.name in (key, "pilot_in", "pilot_out", "score_model", "canary_ids", "m"), (key, info.value)
    with pytest.raises(InvalidParameter, match="epsilon"):
        input_space.prepare(canaries=20, delta=1e-5, score_model="gdp:1")
    with pytest.raises(InvalidParameter, match="noise_multiplier"):
        input_space.prepare(canaries=20, delta=1e-5, noise_multiplier=1.0, score_model="gdp:1")


def test_empirical_carries_the_never_sampled_share():
    model = Empirical([1.0, 2.0], [0.0], sampling_rate=0.25, steps=12)
    assert model.never_sampled == pytest.approx(0.75 ** 12, rel=1e-12)
    assert model.name == "empirical(n_in=2, n_out=1, q=0.25, T=12)" and model.params()["T"] == 12
    assert Empirical([1.0], [0.0]).never_sampled is None
    assert Empirical([1.0], [0.0], sampling_rate=1.0, steps=3).never_sampled == 0.0
    for kw in (dict(sampling_rate=0.5), dict(steps=3), dict(sampling_rate=0.0, steps=3),
               dict(sampling_rate=0.5, steps=0)):
        with pytest.raises(InvalidParameter):
            Empirical([1.0], [0.0], **kw)
