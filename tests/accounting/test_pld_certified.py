"""The certified PLD enclosure against independent truth (fast tier; the larger sweeps are in
test_pld_certified_slow.py).

1. q = 1: T Gaussian rounds are μ-GDP with μ = √T/σ, whose exact profile δ(ε) is a closed form (Balle–Wang),
   evaluated in mpmath at 60 digits (tests/accounting/pld_references.py). Because δ(ε) is strictly decreasing
   where it is positive, "exact ε ∈ [lower, upper]" is exactly "δ(upper) ≤ δ ≤ δ(lower)" (or lower = 0): two
   60-digit evaluations per triple decide it, which is what lets 10⁴ triples run in the fast tier. A subsample is
   also solved by mpmath bisection and checked against the enclosure directly.
2. q < 1: dp-accounting's optimistic PLD (a lower bound), its pessimistic connect-the-dots PLD and
   prv_accountant's [eps_low, eps_up] at a 10× finer grid; the certified upper must be ≥ each reference's lower
   end and the brackets must intersect.
3. Table VI rows and the JAX-Privacy reference through `epsilon`: the reported figure is the certified upper end.

All draws come from fixed seeds (numpy), so every run checks the same points; the checks are deterministic
(no statistical false-failure rate).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcheck.accounting import PoissonGaussianEvent, epsilon
from privcheck.accounting.pld_certified import certified_epsilon, certified_epsilons
from privcheck.errors import CertificationError
from tests.accounting import pld_references as ref

SIGMA_RANGE = (0.3, 20.0)
T_MAX = 10 ** 4
DELTA_RANGE = (1e-10, 1e-3)


def log_uniform(rng, lo, hi, size=None):
    return np.exp(rng.uniform(math.log(lo), math.log(hi), size))


def draw_steps(rng) -> int:
    return int(min(T_MAX, max(1, math.floor(log_uniform(rng, 1.0, T_MAX + 1.0)))))


def coarse_interval(mu: float) -> float:
    """A lattice interval relative to the problem's scale (the enclosure must hold at any interval)."""
    return max(1e-3, mu / 500)


def gdp_encloses(mu: float, delta: float, lower: float, upper: float) -> bool:
    """exact ε(δ) ∈ [lower, upper] for μ-GDP, decided by the 60-digit profile at both ends.

    Shortcut: where the store holds floats a ≤ b with δ(a) > δ ≥ δ(b) for (μ, δ) (a 60-digit bisection, made
    once; `test_stored_gdp_brackets_are_proved_live` proves a seeded sample of them on every run), upper ≥ b and
    lower ≤ a decide "inside" by monotonicity alone; anything else is decided by the profile itself."""
    if not (0.0 <= lower <= upper) or not math.isfinite(upper):
        return False
    stored = ref.gdp_epsilon_float_bracket.lookup(mu, delta)
    if stored is not None and upper >= stored[1] and (lower == 0.0 or lower <= stored[0]):
        return True
    if ref.gdp_delta(upper, mu) > delta:
        return False
    return lower == 0.0 or ref.gdp_delta(lower, mu) >= delta


def gdp_sweep(seed: int, pairs: int, deltas_per_pair: int, solve_every: int):
    """Random (σ, T) with many δ each, one composition per (σ, T). Returns checked count, misses, accountant
    failures and the bisection-checked subsample."""
    rng = np.random.default_rng(seed)
    checked, misses, failures, solved = 0, [], [], []
    for _ in range(pairs):
        sigma = float(log_uniform(rng, *SIGMA_RANGE))
        steps = draw_steps(rng)
        deltas = tuple(float(d) for d in np.sort(log_uniform(rng, *DELTA_RANGE, deltas_per_pair)))
        mu = math.sqrt(steps) / sigma
        h = coarse_interval(mu)
        try:
            bounds = certified_epsilons(((1.0, sigma, steps),), deltas, interval=h)
        except CertificationError as exc:
            failures.append(f"certified_epsilons(((1.0, {sigma!r}, {steps}),), <{len(deltas)} deltas in "
                            f"[{deltas[0]!r}, {deltas[-1]!r}]>, interval={h!r}): {exc}")
            continue
        for i, (d, b) in enumerate(zip(deltas, bounds)):
            checked += 1
            if not gdp_encloses(mu, d, b.lower, b.upper):
                misses.append(f"certified_epsilon(((1.0, {sigma!r}, {steps}),), {d!r}, interval={h!r}) = "
                              f"[{b.lower!r}, {b.upper!r}]")
            if i % solve_every == 0:
                solved.append((sigma, steps, d, h, b.lower, b.upper, ref.gdp_epsilon(mu, d)))
    return checked, misses, failures, solved


@pytest.fixture(scope="module")
def q1_sweep():
    # 20 (σ, T) × 500 δ = 10⁴ triples; seed fixed so the points are the same on every run.
    return gdp_sweep(seed=20261101, pairs=20, deltas_per_pair=500, solve_every=50)


def test_q1_enclosure_holds_for_ten_thousand_triples(q1_sweep):
    checked, misses, failures, _ = q1_sweep
    assert misses == [], f"{len(misses)} enclosures miss the exact μ-GDP ε, e.g. {misses[:5]}"
    assert failures == [], f"accountant failed on legal inputs: {failures}"
    assert checked >= 10 ** 4


def test_stored_gdp_brackets_are_proved_live(q1_sweep):
    """The stored 60-digit brackets that let `gdp_encloses` skip the profile: 40 of them (seeded) are proved
    here by the profile itself, δ(a) > δ ≥ δ(b), and recomputed by bisection; 20 stored bisection roots too."""
    checked = ref.STORE.recheck(40, seed=7, function="gdp_epsilon_float_bracket")
    for _, (mu, delta), (a, b) in checked:
        assert a <= b and ref.gdp_delta(b, mu) <= delta
        assert ref.gdp_delta(a, mu) > delta or a == b == 0.0
    ref.STORE.recheck(20, seed=8, function="gdp_epsilon")
    assert len(ref.STORE.stored_calls("gdp_epsilon_float_bracket")) >= 10 ** 4


def test_q1_bisection_solution_inside_enclosure(q1_sweep):
    _, _, _, solved = q1_sweep
    assert len(solved) >= 200
    bad = [s for s in solved if not (s[4] <= s[6] <= s[5])]
    assert bad == [], f"exact ε (mpmath bisection) outside [lower, upper]: {bad[:5]}"


AUTO_CASES = [(1.0, 1, 1e-5), (2.0, 100, 1e-8), (0.8, 16, 1e-3)]   # the slow file runs them all


@pytest.mark.parametrize("sigma, steps, delta", AUTO_CASES[:1])
def test_q1_auto_interval_meets_tolerance_and_encloses(sigma, steps, delta):
    mu = math.sqrt(steps) / sigma
    b = certified_epsilon(((1.0, sigma, steps),), delta)
    exact = ref.gdp_epsilon(mu, delta)
    assert b.lower <= exact <= b.upper
    assert b.gap <= 1e-3 and b.details["meets_tolerance"]


def test_gdp_reference_matches_the_analytic_gaussian():
    # σ = 1, one release, δ = 1e-5: ε = 4.377178... (Balle & Wang 2018, the analytic Gaussian mechanism)
    e = ref.gdp_epsilon(1.0, 1e-5)
    assert abs(float(e) - 4.3771780957) < 1e-9
    assert abs(ref.gdp_delta(e, 1.0) / 1e-5 - 1) < 1e-12


# --- q < 1 against dp-accounting and prv_accountant -------------------------------------------------------------

def mu_clt(q: float, sigma: float, steps: int) -> float:
    """The CLT scale of T subsampled rounds, q·√(T(e^{1/σ²} − 1)) (Bu et al. 2020): only sizes the grid."""
    return q * math.sqrt(steps * math.expm1(min(1.0 / sigma ** 2, 700.0)))


def subsampled_interval(q, sigma, steps) -> float:
    return max(2e-3, mu_clt(q, sigma, steps) / 300)


REF_MU_MAX = 25.0   # beyond it dp-accounting at the 10× finer grid costs minutes (ε in the hundreds): skipped


def subsampled_sweep(seed: int, points: int, deltas_per_point: int, prv_eps_error: float = 0.02):
    """Random (q, σ, T) with a few δ: certified enclosure vs dp-accounting (optimistic and pessimistic at h/10)
    and prv_accountant. Returns (checked, problems, failures, skipped)."""
    rng = np.random.default_rng(seed)
    checked, problems, failures, skipped = 0, [], [], []
    for _ in range(points):
        q = float(log_uniform(rng, 1e-4, 1.0))
        sigma = float(log_uniform(rng, *SIGMA_RANGE))
        steps = draw_steps(rng)
        deltas = tuple(float(d) for d in np.sort(log_uniform(rng, *DELTA_RANGE, deltas_per_point)))
        if mu_clt(q, sigma, steps) > REF_MU_MAX:
            skipped.append((q, sigma, steps))
            continue
        h = subsampled_interval(q, sigma, steps)
        call = f"certified_epsilons((({q!r}, {sigma!r}, {steps}),), {deltas!r}, interval={h!r})"
        try:
            bounds = certified_epsilons(((q, sigma, steps),), deltas, interval=h)
        except CertificationError as exc:
            failures.append(f"{call}: {exc}")
            continue
        dpa = ref.dpa_bracket(((q, sigma, steps),), deltas, h / 10)
        prv = ref.prv_bracket(q, sigma, steps, deltas, prv_eps_error)
        for i, (d, b) in enumerate(zip(deltas, bounds)):
            checked += 1
            problems.extend(bracket_problems(f"{call}[{i}]", b.lower, b.upper, dpa[i], prv[i]))
    return checked, problems, failures, skipped


def bracket_problems(label, lower, upper, dpa, prv) -> list[str]:
    out = []
    if not (0.0 <= lower <= upper < math.inf):
        out.append(f"{label}: bad enclosure [{lower}, {upper}]")
    opt, pess = dpa
    if upper < opt:
        out.append(f"{label}: upper {upper} < dp-accounting optimistic {opt} (an under-report)")
    if lower > pess:
        out.append(f"{label}: lower {lower} > dp-accounting pessimistic {pess} (brackets disjoint)")
    if prv is not None:
        lo, up = prv
        if upper < lo:
            out.append(f"{label}: upper {upper} < prv_accountant eps_low {lo} (an under-report)")
        if lower > up:
            out.append(f"{label}: lower {lower} > prv_accountant eps_up {up} (brackets disjoint)")
    return out


@pytest.fixture(scope="module")
def subsampled():
    return subsampled_sweep(seed=11, points=8, deltas_per_point=3)


def test_q_below_one_never_below_the_peers_and_brackets_intersect(subsampled):
    checked, problems, _, skipped = subsampled
    assert problems == [], problems
    assert checked >= 9, (checked, skipped)


def test_stored_peer_references_match_live():
    """dp-accounting's and prv_accountant's brackets are stored (tests/accounting/reference_store.py); two of each,
    seeded among the cheap ones (≤ 300 rounds), are recomputed live here and must equal the stored ones."""
    ref.STORE.recheck(2, seed=3, function="dpa_bracket", where=lambda a: sum(p[2] for p in a[0]) <= 300)
    ref.STORE.recheck(2, seed=4, function="prv_bracket", where=lambda a: a[2] <= 300)


def test_q_below_one_returns_on_every_legal_point(subsampled):
    _, _, failures, _ = subsampled
    assert failures == [], failures


RELATION_CASES = [("replace_one", ((0.05, 1.2, 200),), 1e-5, 2e-3),
                  ("add_remove", ((0.02, 1.0, 100), (0.05, 1.5, 60), (0.01, 0.8, 150)), 1e-6, 2e-3)]


def relation_problems(cases) -> list[str]:
    problems = []
    for relation, phases, delta, h in cases:
        b = certified_epsilon(phases, delta, relation, interval=h)
        dpa = ref.dpa_bracket(phases, (delta,), h / 10, relation)[0]
        problems.extend(bracket_problems(f"certified_epsilon({phases!r}, {delta!r}, {relation!r}, interval={h!r})",
                                         b.lower, b.upper, dpa, None))
    return problems


def test_replace_one_against_dp_accounting():
    # the three-phase history is in the slow file
    assert relation_problems(RELATION_CASES[:1]) == []


# --- Table VI and the JAX-Privacy reference through `epsilon` -----------------------------------------------

# (name, n, m, T, σ (Table VII), PLD printed in the paper) from docs/accounting.md, "Table VI"; δ = 1/(10n).
TABLE_VI = (
    ("MATH eps=1", 6988, 128, 50, 1.0023417361080647, 1.000),
    ("MATH eps=4.23", 6988, 128, 50, 0.612058477104, 4.235),
    ("MATH eps=8 reference", 6988, 128, 50, 0.4842404738068581, 8.000),
    ("MATH DP-SFT T=100", 6988, 128, 100, 0.519267738191411, 8.000),
    ("MATH coverage G=2", 6988, 512, 50, 0.7022244453430175, 8.000),
    ("MATH canary rank-4", 6988, 128, 100, 0.612058477104, 5.038),
    ("GSM8K and CSQA", 6961, 128, 100, 0.5196564674377442, 8.000),
)
JAX_PRIVACY = ("JAX-Privacy", 0.1, 3.0, 512, 1e-6, 3.77)   # published to two decimals


def check_reported_row(q, sigma, steps, delta, published, published_tol):
    rec = epsilon(PoissonGaussianEvent(q, sigma, steps), delta)
    assert rec.certified is not None, rec.reason
    assert rec.value == rec.certified.upper
    assert rec.certified.upper - rec.certified.lower <= 1e-3
    dpa = ref.dpa_bracket(((q, sigma, steps),), (delta,), 1e-4)[0][1]   # dp-accounting pessimistic, 1e-4
    assert abs(rec.value - dpa) <= 1e-3, (rec.value, dpa)
    assert abs(rec.value - published) <= published_tol, (rec.value, published)
    return rec.value - dpa


@pytest.mark.parametrize("row", TABLE_VI[:1], ids=lambda r: r[0])
def test_table_vi_rows_are_certified_and_unchanged(row):
    # one row here, all seven in the slow file (about 2-12 s each). Measured: MATH eps=1 certified
    # [0.9999349, 1.0000339]; upper − dp-accounting pessimistic (1e-4) = +3.39e-5, upper − paper = +3.39e-5
    name, n, m, steps, sigma, paper = row
    check_reported_row(m / n, sigma, steps, 1 / (10 * n), paper, 1e-3)


def test_jax_privacy_reference():
    _, q, sigma, steps, delta, published = JAX_PRIVACY
    # measured: certified [3.7695269, 3.7697020]; upper − dp-accounting pessimistic (1e-4) = +1.54e-5,
    # upper − published 3.77 = −2.98e-4
    check_reported_row(q, sigma, steps, delta, published, 1e-3)


# --- edges ------------------------------------------------------------------------------------------------------

SINGLE_ROUND_CASES = [(1e-4, 20.0, 1e-10), (0.01, 1.0, 1e-5), (1.0, 0.5, 1e-3)]   # all three in the slow file


@pytest.mark.parametrize("q, sigma, delta", SINGLE_ROUND_CASES[:1])
def test_single_round_intersects_the_exact_method(q, sigma, delta):
    event = PoissonGaussianEvent(q, sigma, 1)
    pld = epsilon(event, delta)
    exact = epsilon(event, delta, method="exact_single_round")
    assert pld.certified is not None and exact.certified is not None, (pld.reason, exact.reason)
    assert pld.certified.lower <= exact.certified.upper and exact.certified.lower <= pld.certified.upper


def test_tiny_q_large_sigma_is_near_zero_and_nonnegative():
    b = certified_epsilon(((1e-4, 20.0, 100),), 1e-6)
    assert 0.0 <= b.lower <= b.upper <= 1e-3


# --- speed paths that must not change the answer --------------------------------------------------------------

def test_sublattice_composition_gives_the_full_lattice_enclosure(monkeypatch):
    """Breakpoints spaced by multiples of g let the FFTs run on N/g points (`_sublattice`); the enclosure must
    be the one the full lattice gives (same masses, same cyclic convolution; only the rounding differs)."""
    from privcheck.accounting import pld_certified as pc
    phases = ((0.1, 3.0, 64),)
    fast = certified_epsilon(phases, 1e-6, interval=1e-4)
    assert max(d["sublattice"] for d in fast.details["directions"]) >= 2, "meant to exercise the sublattice"
    monkeypatch.setattr(pc, "_sublattice", lambda rounds, N: 1)
    full = certified_epsilon(phases, 1e-6, interval=1e-4)
    assert all(d["sublattice"] == 1 for d in full.details["directions"])
    assert abs(fast.lower - full.lower) <= 1e-9 and abs(fast.upper - full.upper) <= 1e-9
    (opt, pess), = ref.dpa_bracket(phases, (1e-6,), 1e-5)
    assert fast.upper >= opt and fast.lower <= pess


def test_band_of_surviving_frequencies_gives_the_full_spectrum_enclosure(monkeypatch):
    """After T = 10⁵ rounds only a narrow band of frequencies survives the T-th power: the band is summed directly
    (`band_dft`, proven off the band by a coarse transform) and the rest set to zero within 2^-1000 each. The
    enclosure must lie inside the one from the full length-N transform powering every frequency, within 1e-4 of
    it (only the error bounds differ: 3e-5 here), and both must bracket dp-accounting's."""
    from privcheck.accounting import pld_certified as pc
    from privcheck.numerics import band_dft
    phases = ((0.01, 1.0, 10 ** 5),)
    seen = []
    band = band_dft.band

    def spy(x, n, T):
        keep = band(x, n, T)
        seen.append((1 << n, None if keep is None else len(keep)))
        return keep
    monkeypatch.setattr(band_dft, "band", spy)
    fast = certified_epsilon(phases, 1e-5, interval=1e-4)
    assert any(k is not None and k < N // 100 for N, k in seen), f"meant to exercise the band: {seen}"
    monkeypatch.setattr(band_dft, "band", lambda x, n, T: None)
    monkeypatch.setattr(pc, "_band", lambda Xr, Xi, T: None)
    full = certified_epsilon(phases, 1e-5, interval=1e-4)
    # the band's direct sums err far less than the length-N FFT: the enclosure is as tight or tighter
    assert full.lower - 1e-9 <= fast.lower <= fast.upper <= full.upper + 1e-9
    assert fast.upper - fast.lower >= 0.99 * (full.upper - full.lower) - 1e-4
    (opt, pess), = ref.dpa_bracket(phases, (1e-5,), 1e-4)
    for b in (fast, full):
        assert b.upper >= opt and b.lower <= pess


def test_band_cut_is_below_the_exact_threshold():
    """`band_dft.power_cut(T)` is a float c with ((1 + u)·√((c + 2^-1021)/(1 − u)³) + 2^-1073)^T ≤ 2^-1000 (checked in
    mpmath at 50 digits), and negative where T < 2 (nothing dropped)."""
    import mpmath

    from privcheck.numerics.band_dft import power_cut
    assert power_cut(1) < 0
    u = mpmath.mpf(2) ** -53
    with mpmath.workdps(50):
        for T in (2, 3, 100, 10 ** 3, 12345, 10 ** 6):
            c = mpmath.mpf(power_cut(T))
            assert c > 0
            a = (1 + u) * mpmath.sqrt((c + mpmath.mpf(2) ** -1021) / (1 - u) ** 3) + mpmath.mpf(2) ** -1073
            assert T * mpmath.log(a, 2) <= -1000


@pytest.mark.parametrize("r", [0.9999123, 0.5, 1.0 - 2.0 ** -40])
def test_blocked_powers_stay_within_their_rounding_bound(r):
    """`geometric_powers(r, n)` (blocked cumulative products) is within (1 + u)^{2i+1} of the exact r^i, in
    mpmath at 200 bits, at block edges and across the range (the suffix sums' bound `fac` assumes that)."""
    import mpmath

    from privcheck.numerics.powers import POWER_BLOCK, geometric_powers
    n = 3 * POWER_BLOCK + 17
    w = geometric_powers(r, n)
    with mpmath.workprec(200):
        u = mpmath.mpf(2) ** -53
        B = POWER_BLOCK
        for i in sorted(set(range(0, n, 331)) | {1, B - 1, B, B + 1, 2 * B, n - 1}):
            exact = mpmath.mpf(r) ** i
            if exact < mpmath.mpf(2) ** -1000:
                continue
            assert abs(mpmath.mpf(float(w[i])) / exact - 1) <= (1 + u) ** (2 * i + 1) - 1, i


@pytest.mark.parametrize("sigma,steps", [(0.12, 1), pytest.param(0.3, 10, marks=pytest.mark.slow)])
def test_q1_far_above_epsilon_37_is_enclosed(sigma, steps):
    """q = 1 with ε ≈ 69 and 147: the float crossing point cancelled e^e below 2^-53 (ε > 37.4), which put the
    add pair's lattice top at 37.4 and the Arb one held 0 at 88: both failed closed (ε = inf) before."""
    mu = math.sqrt(steps) / sigma
    rec = epsilon(PoissonGaussianEvent(1.0, sigma, steps), 1e-5)
    assert rec.reason is None and gdp_encloses(mu, 1e-5, rec.certified.lower, rec.certified.upper)
    assert rec.certified.upper - rec.certified.lower <= 1e-3


def test_a_window_missing_the_crossing_falls_back_to_the_whole_support():
    """q = 1e-6, σ = 0.1, T = 1: wide buckets put a mass ≈ 3e-8 at a loss of 103, so the Chernoff bound on the
    mass above the window (3e-4) exceeded δ and the crossing was declared outside. The exact ε is 0: the total
    variation q·(2Φ(1/(2σ)) − 1) < 1e-6 is below δ = 1e-5 (closed form, mpmath)."""
    import mpmath
    with mpmath.workdps(60):
        tv = mpmath.mpf(1e-6) * (2 * mpmath.ncdf(1 / (2 * mpmath.mpf(0.1))) - 1)
    assert tv <= 1e-5
    rec = epsilon(PoissonGaussianEvent(1e-6, 0.1, 1), 1e-5)
    assert rec.reason is None and rec.certified.lower == 0.0 and 0.0 <= rec.value < 1e-2


@pytest.mark.parametrize("phases,delta,name", [
    (((0.1, 1.0, 10**6 + 1),), 1e-5, "steps"),
    (tuple((0.1, 1.0, 10**4) for _ in range(101)), 1e-5, "phases"),
    (tuple((0.1, 1.0, 10**5) for _ in range(11)), 1e-5, "steps"),       # 1.1·10⁶ rounds in total
    (((0.1, 1.0, 10),), 1e-51, "delta"),
    (((0.1, 0.09, 10),), 1e-5, "noise_multiplier"),
    (((0.1, 1.1e8, 10),), 1e-5, "noise_multiplier"),
])
def test_the_certified_range_is_checked_before_any_work(phases, delta, name):
    from privcheck.errors import InvalidParameter
    with pytest.raises(InvalidParameter) as info:
        certified_epsilon(phases, delta)
    assert info.value.name == name
