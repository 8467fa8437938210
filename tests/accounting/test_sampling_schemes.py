"""Sampling schemes other than Poisson (docs/accounting.md, "Sampling schemes") against independent truth:

1. Fixed-size batches without replacement (replace-one): a small dataset enumerated batch by batch gives the exact
   one-round mixture, whose ε(δ) mpmath finds by quadrature and bisection; it must lie in the certified enclosure
   (at one round the symmetrised pair's profile above ε = 0 is that mixture's). dp-accounting's RDP accountant for
   `SampledWithoutReplacementDpEvent` (an upper bound, fed σ/2: its noise multiplier is relative to the
   replace-one sensitivity 2C) must be at least our certified lower end; our certified upper end must not exceed
   it on these inputs. The closed-form RDP bound is checked against mpmath quadrature of the symmetrised pair.
2. Lower-only schemes: the certified lower bound never exceeds a certified upper bound of the same mechanism where
   one exists independently (one step per epoch: the Gaussian mechanism, Balle–Wang in mpmath; with replacement and
   b = 1: the same as without), and the per-epoch event probabilities match a seeded Monte Carlo within 5.5 binomial
   standard deviations (false-failure rate below 4e-8 per comparison).
3. Records: value on the safe side, `upper: null` with the reason where no upper bound is proven.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import dp_accounting as dpa
import mpmath
import numpy as np
import pytest
from flint import arb, ctx

from privcheck.accounting import (
    BallsInBinsGaussianEvent,
    FixedSizeGaussianEvent,
    GaussianEvent,
    PoissonGaussianEvent,
    ShuffledGaussianEvent,
    TruncatedPoissonGaussianEvent,
    epsilon,
    sampling,
)
from privcheck.errors import InvalidParameter

DPS = 40     # mpmath digits, set locally (mpmath.workdps) so that no other test sees them


# --- exact small cases by enumeration (mpmath) -----------------------------------------------------------------

def enumerated_mixture(n: int, b: int, replacement: bool) -> dict[int, Fraction]:
    """Weights of the batch sum (in units of C, shifted by +b) for the dataset where every other record has
    gradient −1 and the differing one +1 (its neighbour: −1, whose sum is always −b, i.e. 0 shifted): enumerate
    every batch, count the shift 2·(copies of the record)."""
    weights: dict[int, mpmath.mpf] = {}
    batches = (itertools.product(range(n), repeat=b) if replacement else itertools.combinations(range(n), b))
    batches = list(batches)
    for batch in batches:
        shift = 2 * sum(1 for r in batch if r == 0)
        weights[shift] = weights.get(shift, Fraction(0)) + Fraction(1, len(batches))
    return weights


def exact_epsilon(weights: dict[int, mpmath.mpf], sigma: float, delta: float) -> mpmath.mpf:
    """ε(δ) of one round, max over both orders, for P = Σ w_k N(k, σ²) (k ≥ 0) and Q = N(0, σ²), in mpmath. The
    likelihood ratio p/q = Σ w_k e^{(2kx − k²)/(2σ²)} increases in x, so {p > e^ε q} = {x > x_ε} and
    {q > e^ε p} = {x < x'_ε}; the crossings by bisection, the masses by ncdf, ε(δ) by bisection."""
    with mpmath.workdps(DPS):
        return _exact_epsilon({k: mpmath.mpf(w.numerator) / w.denominator for k, w in weights.items()}, sigma, delta)


def _exact_epsilon(weights, sigma, delta):
    s = mpmath.mpf(sigma)

    def ratio(x):
        return sum(w * mpmath.e ** ((2 * k * x - k * k) / (2 * s * s)) for k, w in weights.items())

    def crossing(level):             # the x with ratio(x) = level (ratio increasing; ±inf outside its range)
        lo, hi = mpmath.mpf(-200), mpmath.mpf(200)
        if ratio(lo) >= level:
            return -mpmath.inf
        if ratio(hi) <= level:
            return mpmath.inf
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ratio(mid) < level else (lo, mid)
        return (lo + hi) / 2

    def p_above(x):                  # tails as ncdf of the far side: no cancellation of 1 − Φ
        return sum(w * mpmath.ncdf(k - x, 0, s) for k, w in weights.items())

    def p_below(x):
        return sum(w * mpmath.ncdf(x - k, 0, s) for k, w in weights.items())

    def delta_remove(eps):           # P(x > x_ε) − e^ε Q(x > x_ε)
        x = crossing(mpmath.e ** eps)
        return p_above(x) - mpmath.e ** eps * mpmath.ncdf(-x, 0, s)

    def delta_add(eps):              # Q(x < x'_ε) − e^ε P(x < x'_ε)
        x = crossing(mpmath.e ** -eps)
        return mpmath.ncdf(x, 0, s) - mpmath.e ** eps * p_below(x)

    def solve(profile):
        if profile(0) <= delta:
            return mpmath.mpf(0)
        lo, hi = mpmath.mpf(0), mpmath.mpf(60)
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
        return hi

    return max(solve(delta_remove), solve(delta_add))


@pytest.mark.parametrize("n, b, sigma, delta", [(4, 2, 1.0, 1e-3), (5, 1, 0.8, 1e-4), (6, 3, 2.0, 1e-2)])
def test_fixed_size_one_round_encloses_enumerated_truth(n, b, sigma, delta):
    truth = exact_epsilon(enumerated_mixture(n, b, replacement=False), sigma, delta)
    rec = epsilon(FixedSizeGaussianEvent(n, b, sigma, 1), delta)
    assert rec.certified.lower <= truth <= rec.certified.upper == rec.value
    assert rec.neighboring == "replace_one"


@pytest.mark.parametrize("n, b, sigma, steps", [(60000, 256, 2.0, 200), (10000, 100, 4.0, 1000),
                                                (1000, 100, 1.0, 50), (600, 6, 1.5, 300)])
def test_fixed_size_against_dp_accounting_rdp(n, b, sigma, steps):
    delta = 1e-5
    event = FixedSizeGaussianEvent(n, b, sigma, steps)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(event.to_dp_event())
    rdp = acc.get_epsilon(delta)
    rec = epsilon(event, delta)
    assert 0 < rec.certified.lower <= rec.certified.upper <= rdp
    assert event.to_dp_event().event.event.noise_multiplier == sigma / 2   # the replace-one sensitivity is 2C


def test_poisson_figures_understate_fixed_size_batches():
    """The certified lower end exceeds the Poisson figures a shuffling user would otherwise be given: the Poisson
    replace-one pair at σ, and dp-accounting's without-replacement RDP fed σ itself (its unit-sensitivity
    convention); a wrong normalisation would make this test fail the other way."""
    n, b, sigma, steps, delta = 10000, 100, 1.0, 200, 1e-5
    rec = epsilon(FixedSizeGaussianEvent(n, b, sigma, steps), delta)
    replace_pair = epsilon(PoissonGaussianEvent(b / n, sigma, steps, "replace_one"), delta)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma)),
                                        steps))
    assert rec.certified.lower > 4 * replace_pair.value
    assert rec.certified.lower > 4 * acc.get_epsilon(delta)
    assert rec.certified.lower > 4 * rec.details["poisson_add_remove_epsilon"]


@pytest.mark.parametrize("alpha, gamma, s", [(2, 0.01, 1.0), (5, 0.1, 0.5), (12, 0.004, 1.0), (3, 0.5, 2.0)])
def test_symmetrised_rdp_bound_against_quadrature(alpha, gamma, s):
    """E_S[e^{(α−1)L}] of the symmetrised pair by mpmath quadrature: R's P-mass above loss 0 weighted e^{(α−1)L},
    R's Q-mass above loss 0 weighted e^{−(α−1)L}, and the atom at 0; our closed-form bound lies above it and
    not 30% above it (the quadratic bound on the mirrored part is what loosens it)."""
    with mpmath.workdps(DPS):
        _check_moment(alpha, gamma, s)


def _check_moment(alpha, gamma, s):
    g, sd = mpmath.mpf(gamma), mpmath.mpf(s)

    def ratio(x):
        return 1 - g + g * mpmath.e ** ((2 * x - 1) / (2 * sd ** 2))

    q = lambda x: mpmath.npdf(x, 0, sd)  # noqa: E731
    upper_part = mpmath.quad(lambda x: q(x) * ratio(x) ** alpha, [0.5, 2, 8, mpmath.inf])
    lower_part = mpmath.quad(lambda x: q(x) * ratio(x) ** (1 - alpha), [0.5, 2, 8, mpmath.inf])
    p_pos = (1 - g) * mpmath.ncdf(-0.5 / sd) + g * mpmath.ncdf(0.5 / sd)
    q_pos = mpmath.ncdf(-0.5 / sd)
    exact = upper_part + lower_part + 1 - p_pos - q_pos
    with ctx.workprec(128):
        bound = sampling.symmetrised_log_moment(alpha, arb(gamma), arb(s))
        lo, hi = mpmath.mpf(bound.lower().str(40, radius=False)), mpmath.mpf(bound.upper().str(40, radius=False))
    assert mpmath.log(exact) <= hi
    assert lo <= 1.3 * mpmath.log(exact)


# --- lower-only schemes -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma, epochs, delta", [(1.0, 1, 1e-5), (0.7, 4, 1e-6), (2.0, 20, 1e-3)])
def test_one_step_per_epoch_lower_bound_below_gaussian(sigma, epochs, delta):
    """t = 1: every epoch is one full-batch Gaussian round, E of them the Gaussian mechanism with sensitivity √E
    (Balle–Wang, certified in Arb and checked in tests/accounting/test_gaussian.py)."""
    truth = epsilon(GaussianEvent(sigma, math.sqrt(epochs)), delta)
    replace_truth = epsilon(GaussianEvent(sigma, 2 * math.sqrt(epochs)), delta)     # replace-one: sensitivity 2C
    for event in (BallsInBinsGaussianEvent(1, sigma, epochs), ShuffledGaussianEvent(50, 50, sigma, epochs)):
        rec = epsilon(event, delta)
        assert 0 < rec.certified.lower <= truth.certified.upper
        assert rec.certified.lower < rec.details["lower_replace_one"] <= replace_truth.certified.upper
        assert rec.value == math.inf and rec.certified.upper == math.inf


def test_with_replacement_single_draw_lower_bound_below_without():
    """b = 1: one uniform draw is the same batch with or without replacement."""
    with_r = epsilon(FixedSizeGaussianEvent(100, 1, 1.0, 50, replacement=True), 1e-5)
    without = epsilon(FixedSizeGaussianEvent(100, 1, 1.0, 50), 1e-5)
    assert 0 < with_r.certified.lower <= without.certified.upper


@pytest.mark.parametrize("n, b, sigma, delta", [(4, 2, 1.0, 1e-3), (3, 2, 0.8, 1e-2)])
def test_with_replacement_lower_bound_below_enumerated_truth(n, b, sigma, delta):
    """One round with replacement: the count test's bound never exceeds the exact ε of the very dataset it uses."""
    truth = exact_epsilon(enumerated_mixture(n, b, replacement=True), sigma, delta)
    rec = epsilon(FixedSizeGaussianEvent(n, b, sigma, 1, replacement=True), delta)
    assert 0 < rec.certified.lower <= truth


def test_max_coordinate_probabilities_match_monte_carlo():
    rng = np.random.default_rng(20261203)
    sigma, t, n = 1.0, 8, 400_000
    x0 = 2.0
    noise = rng.normal(0.0, sigma, size=(n, t))
    q_hat = np.mean(noise.max(axis=1) > x0)
    j = rng.integers(0, t, size=n)
    noise[np.arange(n), j] += 1.0
    p_hat = np.mean(noise.max(axis=1) > x0)
    p, q = (float(b.mid()) for b in sampling.max_coordinate_probabilities(x0, sigma, t))
    for est, exact in ((p_hat, p), (q_hat, q)):
        assert abs(est - exact) <= 5.5 * math.sqrt(exact * (1 - exact) / n)


def test_replacement_probabilities_match_monte_carlo():
    rng = np.random.default_rng(7)
    sigma, b, size, n = 1.0, 4, 5, 400_000
    x0 = 1.5
    copies = rng.binomial(b, 1 / size, size=n)
    y = rng.normal(2.0 * copies, sigma)
    p, q = (float(v.mid()) for v in sampling.replacement_probabilities(x0, sigma, b, size))
    assert abs(np.mean(y > x0) - p) <= 5.5 * math.sqrt(p * (1 - p) / n)
    assert q == pytest.approx(float(mpmath.ncdf(-x0 / sigma)), rel=1e-12)


# --- records ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("event", [ShuffledGaussianEvent(1000, 100, 0.8, 3), BallsInBinsGaussianEvent(10, 0.8, 3),
                                   FixedSizeGaussianEvent(1000, 10, 1.0, 20, replacement=True)],
                         ids=lambda e: e.kind)
def test_lower_only_records_say_why(event):
    rec = epsilon(event, 1e-5)
    doc = json.loads(json.dumps(rec.to_json()))
    assert doc["value"] == "inf" and doc["reason"]
    assert doc["certified"]["upper"] is None and doc["certified"]["reason"] == doc["reason"]
    assert doc["certified"]["lower"] > 0
    assert doc["details"]["poisson_add_remove_epsilon"] > 0


def test_truncated_poisson():
    plain = epsilon(PoissonGaussianEvent(0.01, 1.0, 100), 1e-5)
    never_cut = epsilon(TruncatedPoissonGaussianEvent(1000, 0.01, 1001, 1.0, 100), 1e-5)
    assert never_cut.value == plain.value and never_cut.certified.lower == plain.certified.lower
    cut = epsilon(TruncatedPoissonGaussianEvent(1000, 0.01, 20, 1.0, 100), 1e-5)
    assert cut.value == math.inf and cut.certified.upper == math.inf and "truncated" in cut.reason
    # the lower end: the Poisson pairs at a rate below q, so below the Poisson figure, and below dp-accounting's
    # PLD for the truncated event (a float estimate of an upper bound, arXiv 2508.15089)
    acc = dpa.pld.PLDAccountant()
    acc.compose(dpa.TruncatedSubsampledGaussianDpEvent(dataset_size=1000, sampling_probability=0.01,
                                                       truncated_batch_size=20, noise_multiplier=1.0), 100)
    assert 0 < cut.certified.lower <= min(plain.certified.upper, acc.get_epsilon(1e-5))


@pytest.mark.parametrize("n, q, cap", [(60000, 0.01, 700), (60000, 0.01, 600), (60000, 0.01, 500), (1000, 0.5, 1),
                                       (10, 0.9, 3)])
def test_truncated_inclusion_rate_lower_bound(n, q, cap):
    """r = q·E[min(1, B/(K + 1))], K ~ Bin(n − 1, q), summed in mpmath over k < 2000 (the mean is at most 600
    here; the terms left out are positive, so the partial sum is below r and the check only gets stricter)."""
    with mpmath.workdps(30):
        exact = q * mpmath.fsum(mpmath.binomial(n - 1, k) * mpmath.mpf(q) ** k * (1 - mpmath.mpf(q)) ** (n - 1 - k)
                                * min(1, mpmath.mpf(cap) / (k + 1)) for k in range(min(n, 2000)))
    lower = sampling.truncated_inclusion_lower(n, q, cap)
    assert 0.5 * exact <= lower <= exact


@pytest.mark.parametrize("make, name", [
    (lambda: FixedSizeGaussianEvent(10, 11, 1.0, 1), "batch_size"),
    (lambda: FixedSizeGaussianEvent(0, 1, 1.0, 1), "dataset_size"),
    (lambda: FixedSizeGaussianEvent(10, 2, 1.0, 1, replacement="yes"), "replacement"),
    (lambda: ShuffledGaussianEvent(10, 2, -1.0, 1), "noise_multiplier"),
    (lambda: BallsInBinsGaussianEvent(0, 1.0, 1), "steps_per_epoch"),
    (lambda: TruncatedPoissonGaussianEvent(10, 0.1, 0, 1.0, 1), "max_batch_size"),
    (lambda: epsilon(FixedSizeGaussianEvent(10, 2, 0.15, 1), 1e-5), "noise_multiplier"),
    (lambda: epsilon(BallsInBinsGaussianEvent(10 ** 5, 1.0, 11), 1e-5), "epochs"),
    (lambda: epsilon(ShuffledGaussianEvent(10, 2, 1.0, 1), 2.0), "delta"),
])
def test_bad_input_is_refused_naming_the_parameter(make, name):
    with pytest.raises(InvalidParameter) as err:
        make()
    assert err.value.name == name


# --- plans ------------------------------------------------------------------------------------------------------

def test_plan_with_a_sampling_scheme_uses_its_event():
    from privcheck.accounting import DPSGDPlan
    plan = DPSGDPlan(records=1000, sampling_rate=0.1, noise_multiplier=1.0, clip_norm=1.0, steps=30, delta=1e-5,
                     sampling="shuffle")
    assert plan.event == ShuffledGaussianEvent(1000, 100, 1.0, 3)
    assert DPSGDPlan.from_json(plan.to_json()) == plan
    fixed = plan.replace(sampling="fixed-size", relation="replace_one")
    assert fixed.event == FixedSizeGaussianEvent(1000, 100, 1.0, 30)
    assert fixed.epsilon().value == epsilon(fixed.event, 1e-5).value
    poisson = DPSGDPlan(records=1000, sampling_rate=0.1, noise_multiplier=1.0, clip_norm=1.0, steps=30, delta=1e-5)
    assert "sampling" not in poisson.to_json()          # Poisson plans serialise as before


@pytest.mark.parametrize("changes, name", [
    ({"sampling": "shuffle", "steps": 31}, "steps"),
    ({"sampling": "fixed-size"}, "relation"),
    ({"sampling": "truncated-poisson"}, "max_batch_size"),
    ({"sampling": "bogus"}, "sampling"),
    ({"sampling": "balls-in-bins", "sampling_rate": 0.3}, "sampling_rate"),
])
def test_plan_refuses_inconsistent_sampling(changes, name):
    from privcheck.accounting import DPSGDPlan
    base = {"records": 1000, "sampling_rate": 0.1, "noise_multiplier": 1.0, "clip_norm": 1.0, "steps": 30,
            "delta": 1e-5}
    with pytest.raises(InvalidParameter) as err:
        DPSGDPlan(**{**base, **changes})
    assert err.value.name == name


@pytest.mark.slow
def test_slow_fixed_size_sweep_against_dp_accounting_rdp():
    """Seeded draws over n, b, σ, T, δ: the certified lower end never exceeds dp-accounting's RDP upper bound
    (σ/2, replace-one), and lower ≤ upper. (Our upper is not required to beat RDP everywhere.)"""
    rng = np.random.default_rng(25)
    for _ in range(16):
        n = int(rng.integers(100, 100_000))
        b = int(rng.integers(1, max(2, n // 10)))
        sigma = float(np.exp(rng.uniform(math.log(0.5), math.log(8.0))))
        steps = int(np.exp(rng.uniform(0, math.log(3000))))
        delta = float(10 ** rng.uniform(-9, -3))
        event = FixedSizeGaussianEvent(n, b, sigma, steps)
        acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(event.to_dp_event())
        rec = epsilon(event, delta)
        assert rec.certified.lower <= rec.certified.upper, event
        assert rec.certified.lower <= acc.get_epsilon(delta), event
