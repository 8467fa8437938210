"""Worst-case neighbour pairs of the selection mechanisms as score-level harnesses (docs/audits.md, "Black-box
pair audits of the selection mechanisms").

Each builder returns a `SelectionPair`: two samplers (`sample(size, generator) -> outputs`) that run the
mechanism's own code on a fixed, public candidate list whose scores differ by at most Δ per candidate, the
certified ε the accountant charges (`privcheck.accounting.epsilon` of the mechanism's event), and the exact
output laws of the reference mechanism (docs/selection.md, "Exact output laws"), from which the exact
log-ratio of any event follows. `pair.audit(n, seed=...)` runs `audits.blackbox.pair_audit` (by default on the
pair's pre-registered target event) with the right nominal value: the ex-ante ε for PrivBoN, the largest
certified ex-post loss over the outputs of the chosen event for PrivITP's Phase 2 (an ex-post claim bounds
every output's probability ratio by that output's loss).

    privbon_worst_pair(Δ, σ, n, R)     D: (Δ, R−Δ, …, R−Δ), D′: (0, R, …, R); event {candidate 1}:
                                       exact ln-ratio ε_BoN(n) ≤ 2Δ/σ
    exponential_mechanism_pair()       the n = 2, R = Δ = 1, σ = 2 case: u(D) = (1, 0), u(D′) = (0, 1),
                                       ln-ratio 1/2 (the ε = 1 exponential mechanism on two outputs)
    privitp_phase2_pair(θ, λ̃, t₀)      Phase 2 given a fixed λ̃: rejected candidates R−Δ vs R, the accepted
                                       one Δ vs 0; ln-ratio (t₀−1)κ + κ_acc, or nκ for t₀ = ⊥
    plan_privitp_phase2(θ, t₀, n)      λ̃ and σ_Z from a grid maximising the bound predicted by the exact law
    privitp_phase1_pair(θ)             the λ̃ release: Phase-1 scores shifted by Δ shift λ̂ by exactly Δ
    privitp_independence_probe(θ, …)   Phase-1 lists that are permutations of each other (same λ̂, hence the
                                       same output law): claim ε = 0; catches Phase 2 reusing Phase 1's pool

Outputs: PrivBoN returns the 0-based candidate index; Phase 2 the halting time t ∈ {1..n}, with
HALT_FALLBACK = 0 for ⊥; the Phase-1 pair returns λ̃. Every builder takes a test hook (`mechanism` or
`phase2`) so that a modified implementation can be audited against the reference claim; the exact laws are
always those of the reference mechanism.

Scope: these audits test the mechanism (noise scale, sampling, accounting), never the reward model's Δ, which
stays an assumption. Candidate lists are fixed and public, not π0 draws (the guarantees hold for every fixed
list, hence also for lists drawn from π0).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from scipy.stats import norm

from audits.blackbox import (
    D_OVER_DPRIME,
    MAX_SAMPLES,
    Event,
    Fixed,
    Singletons,
    Thresholds,
    TopPrefixes,
    bound_from_counts,
    pair_audit,
)
from mechanisms.selection import (
    HALT_FALLBACK,
    PrivBoN,
    PrivITP,
    lambda_hat,
    privbon_law,
    privitp_law,
    privitp_law_given_lambda,
)
from mechanisms.selection.privitp import run_phase2
from privcheck import validation as v
from privcheck.accounting import PrivBoNEvent, PrivITPEvent, PrivITPParams, PrivITPPhase1Event, epsilon
from privcheck.errors import InvalidParameter

_CHUNK_CANDIDATES = 1 << 22     # draws per sampler call are chunked to bound memory (rows × n)
MAX_CANDIDATES = 2**16          # n of a pair: the artifact lists every candidate's score on both sides
MAX_DRAWS = 10**9               # samples per side × n: candidate scores the mechanism noises per side (minutes)

SCOPE = "score-level harness with a fixed public candidate list: tests the mechanism, not the reward model's Δ"


@dataclass(frozen=True)
class SelectionPair:
    """A neighbour pair ready for `pair_audit`.

    `support`/`law_D`/`law_Dprime`: the reference mechanism's exact law over a finite output support
    (None for continuous outputs, where `event_probabilities` is given instead). `target`: the outputs of the
    pair's extremal event. `certified_epsilon`: the claim for the target event. `expost`: certified loss per
    output (ex-post mechanisms), else None and every event carries `claimed[direction]` (the ε the mechanism
    reports when run on the numerator dataset; equal on both sides for a correct implementation).
    """

    pair_id: str
    sample_D: Callable
    sample_Dprime: Callable
    certified_epsilon: float
    delta: float
    claim: Mapping
    target: tuple | None = None
    support: tuple | None = None
    law_D: np.ndarray | None = None
    law_Dprime: np.ndarray | None = None
    expost: Mapping | None = None
    claimed: Mapping | None = None
    scores_D: np.ndarray | None = None
    scores_Dprime: np.ndarray | None = None
    event_probabilities: Callable | None = field(default=None, repr=False)
    default_family: tuple | None = None

    @property
    def event_family(self) -> tuple:
        """The family `audit` uses by default: the pre-registered target event when there is one (each worst
        pair is designed for it), else singletons and top-j prefixes."""
        if self.default_family is not None:
            return self.default_family
        if self.target is not None:
            return (Fixed((self.target,)),)
        return (Singletons(), TopPrefixes())

    def probabilities(self, event) -> tuple[float, float]:
        """(P_D(E), P_D′(E)) under the reference mechanism's exact law; `event` is an Event or a set of outputs."""
        if self.event_probabilities is not None:
            return self.event_probabilities(event)
        members = self._members(event)
        return float(self.law_D[members].sum()), float(self.law_Dprime[members].sum())

    def exact_log_ratio(self, event=None, direction: str = D_OVER_DPRIME) -> float:
        """ln(P_num(E)/P_den(E)) of the exact law (default: the target event, D over D′)."""
        p_d, p_dp = self.probabilities(self.target if event is None else event)
        num, den = (p_d, p_dp) if direction == D_OVER_DPRIME else (p_dp, p_d)
        if num <= 0.0:
            return -math.inf
        return math.inf if den <= 0.0 else math.log(num) - math.log(den)

    def nominal(self, event, direction: str) -> float:
        """The claim to compare with for this event: max certified ex-post loss over its outputs,
        or the ex-ante ε the mechanism reports on the numerator dataset."""
        if self.expost is None:
            return float(self.claimed[direction]) if self.claimed else self.certified_epsilon
        members = self._members(event)
        losses = [self.expost[o] for o, inside in zip(self.support, members) if inside]
        return max(losses, default=0.0)

    def audit(self, n: int, *, seed, confidence: float = 0.95, split_frac: float = 0.5, event_family=None,
              criterion: str = "plugin_ratio", diagnostics: dict | None = None):
        """`pair_audit` on this pair with its nominal values and claim metadata (n draws per side, each running
        the mechanism on the pair's candidate list: n × candidates ≤ MAX_DRAWS)."""
        check_samples(n, 1 if self.scores_D is None else len(self.scores_D))
        return pair_audit(self.sample_D, self.sample_Dprime, n=n, split_frac=split_frac,
                          event_family=self.event_family if event_family is None else event_family,
                          delta=self.delta, confidence=confidence, seed=seed, criterion=criterion,
                          eps_nominal=self.nominal, claim=self.claim, pair_id=self.pair_id,
                          diagnostics=diagnostics)

    def _members(self, event) -> np.ndarray:
        support = np.asarray(self.support)
        if isinstance(event, Event):
            return event.contains(support)
        return np.isin(support, np.asarray(tuple(event)))


def check_samples(samples, candidates: int) -> int:
    """Draws per side of an audit whose every draw runs the mechanism on `candidates` candidates."""
    most = min(MAX_SAMPLES, MAX_DRAWS // candidates)
    return v.count("samples", samples, 2, most)


def _candidates(value) -> int:
    return v.count("candidates", value, 1, MAX_CANDIDATES)


def _chunked(draw: Callable[[int, np.random.Generator], np.ndarray], width: int):
    """A sampler calling `draw(rows, generator)` in chunks of at most _CHUNK_CANDIDATES // width rows."""
    rows_max = max(1, _CHUNK_CANDIDATES // max(1, width))

    def sample(size: int, gen: np.random.Generator) -> np.ndarray:
        parts = [np.asarray(draw(min(rows_max, size - lo), gen)) for lo in range(0, size, rows_max)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    return sample


# --- PrivBoN ------------------------------------------------------------------------------------------------------

def privbon_worst_pair(sensitivity, sigma, candidates, r_max, r_lo=0.0, *, mode: str = "exact",
                       mechanism=None) -> SelectionPair:
    """The extremal PrivBoN pair: on D candidate 1 scores r_lo + Δ and the others r_max − Δ; on D′ they
    score r_lo and r_max. Event {candidate 1} (output 0) has exact ln-ratio ε_BoN(n) (docs/selection.md, PrivBoN).

    `mechanism`: an object with `select(scores[P, n], generator) -> SelectionResult` (default
    `PrivBoN(Δ, σ, r_max, r_lo, mode)`); its own record gives the claimed ε on each side.
    """
    n = _candidates(candidates)
    d, lo = v.positive("sensitivity", sensitivity), v.finite("r_lo", r_lo)
    hi = v.finite("r_max", r_max)
    return privbon_pair(np.array([lo + d] + [hi - d] * (n - 1)), np.array([lo] + [hi] * (n - 1)),
                        sensitivity=d, sigma=sigma, r_max=hi, r_lo=lo, mode=mode, mechanism=mechanism,
                        pair_id=f"privbon_worst_n{n}_delta{d:g}_sigma{float(sigma):g}_range{lo:g}-{hi:g}",
                        pair_kind="worst_case")


def privbon_pair(scores_D, scores_Dprime, *, sensitivity, sigma, r_max, r_lo=0.0, mode: str = "exact",
                 mechanism=None, target=(0,), pair_id: str | None = None, pair_kind: str = "custom") -> SelectionPair:
    """A PrivBoN pair on given candidate scores (|s_D − s_D′| ≤ Δ per candidate). Scores may lie outside
    [r_lo, r_max]: a correct mechanism clips them, so the exact (reference) law is softmax(clip(s)/σ).
    The claim on each side is the ε in the mechanism's own record for that side's scores."""
    s_d, s_dp = (np.asarray(x, dtype=np.float64) for x in (scores_D, scores_Dprime))
    if s_d.ndim != 1 or s_d.shape != s_dp.shape or not (np.all(np.isfinite(s_d)) and np.all(np.isfinite(s_dp))):
        raise InvalidParameter("scores_D", "array", "two 1-D arrays of finite scores of the same length")
    n = s_d.size
    event = PrivBoNEvent(sensitivity, sigma, candidates=n, r_max=r_max, r_lo=r_lo, mode=mode)
    certified = epsilon(event)
    d, lo, hi = event.sensitivity, event.r_lo, event.r_max
    if np.max(np.abs(s_d - s_dp)) > d:
        raise InvalidParameter("scores_Dprime", "array", f"scores within Δ = {d} of scores_D (neighbours)")
    mech = PrivBoN(d, sigma, hi, lo, mode=mode) if mechanism is None else mechanism
    claimed = {D_OVER_DPRIME: _claimed_bon(mech, s_d), "Dprime_over_D": _claimed_bon(mech, s_dp)}

    def sampler(scores):
        return _chunked(lambda rows, gen: mech.select(np.broadcast_to(scores, (rows, n)), gen).indices, n)

    return SelectionPair(
        pair_id=pair_id or f"privbon_pair_n{n}_delta{d:g}_sigma{float(sigma):g}",
        sample_D=sampler(s_d), sample_Dprime=sampler(s_dp), certified_epsilon=certified.value,
        delta=0.0, claim={"accountant": "analytic", "mechanism": {"name": "privbon", "params": {
            "sensitivity": d, "sigma": float(sigma), "candidates": n, "r_lo": lo, "r_max": hi, "mode": mode,
            "nominal_2delta_over_sigma": certified.details["nominal"], "scores_D": s_d.tolist(),
            "scores_Dprime": s_dp.tolist(), "pair": pair_kind, "scope": SCOPE}}},
        target=tuple(target), support=tuple(range(n)), law_D=privbon_law(np.clip(s_d, lo, hi), sigma),
        law_Dprime=privbon_law(np.clip(s_dp, lo, hi), sigma), claimed=claimed, scores_D=s_d, scores_Dprime=s_dp)


def _claimed_bon(mech, scores: np.ndarray) -> float:
    """The ε the mechanism reports for one query on `scores` (its own record)."""
    record = mech.select(scores[None, :], np.random.default_rng(0)).record
    if record is None:
        raise InvalidParameter("mechanism", type(mech).__name__, "a private selection mechanism with a record")
    return float(record.value)


def exponential_mechanism_pair(mechanism=None) -> SelectionPair:
    """The ε = 1 exponential mechanism on two outputs, u(D) = (1, 0), u(D′) = (0, 1), Δu = 1,
    i.e. PrivBoN with n = 2, R_max = Δ = 1, σ = 2. Exact ln-ratio of output 0: 1/2 = ε_BoN(2)."""
    pair = privbon_worst_pair(1.0, 2.0, 2, 1.0, mechanism=mechanism)
    return dataclasses.replace(pair, pair_id="exponential_mechanism_eps1_two_outputs")


# --- PrivITP Phase 2 given λ̃ --------------------------------------------------------------------------------------

def _eps2(params: PrivITPParams, lambda_tilde: float, halting_time: int | None) -> float:
    """Certified Phase-2 ex-post loss ε2(t; λ̃) of one PrivITP query, from its event's record."""
    return epsilon(PrivITPEvent(params, lambda_tilde, halting_time)).details["eps2_post"]["value"]


def _phase2_scores(params: PrivITPParams, target: int | None) -> tuple[np.ndarray, np.ndarray]:
    n, d, lo, hi = params.candidates, params.sensitivity, params.r_lo, params.r_max
    accepted = -1 if target is None else target - 1
    on_d = np.array([lo + d if i == accepted else hi - d for i in range(n)])
    on_dp = np.array([lo if i == accepted else hi for i in range(n)])
    return on_d, on_dp


def _target(params: PrivITPParams, target) -> int | None:
    if target is None:
        return None
    t = v.count("target", target)
    if t > params.candidates:
        raise InvalidParameter("target", target, f"1..{params.candidates} or None (the fallback)")
    return t


def privitp_phase2_pair(params: PrivITPParams, lambda_tilde, target, *, accountant_params: PrivITPParams | None = None,
                        phase2=None) -> SelectionPair:
    """Phase 2 of PrivITP conditional on a fixed released λ̃ (a test hook), for the event {t = target}
    (`target` None: the fallback ⊥). The worst case (docs/selection.md, PrivITP): on D′ the candidates before
    the target score r_max and the target r_lo; on D, r_max − Δ and r_lo + Δ (candidates after it score as the
    rejected ones). For the fallback every candidate scores r_max on D′ and r_max − Δ on D.

    `phase2(scores[P, n], λ̃[P], c[P], σ_Z, generator) -> (first, accepted)` defaults to the mechanism's
    `run_phase2`; `accountant_params` (default `params`) is what the accountant is given, for auditing a
    mismatched accountant. The certified ex-post loss per output is the `eps2_post` of
    `epsilon(PrivITPEvent(...))` (Phase 2 only: λ̃ is fixed, so ε1 and δ are not part of this audit).
    """
    if not isinstance(params, PrivITPParams):
        raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
    acc = params if accountant_params is None else accountant_params
    if not isinstance(acc, PrivITPParams):
        raise InvalidParameter("accountant_params", type(acc).__name__, "a PrivITPParams or None")
    _candidates(params.candidates)
    lt = v.finite("lambda_tilde", lambda_tilde)
    t0 = _target(params, target)
    n = params.candidates
    run = run_phase2 if phase2 is None else phase2
    c = params.threshold_width(lt)
    scores_d, scores_dp = _phase2_scores(params, t0)

    def sampler(scores):
        def draw(rows, gen):
            first, accepted = run(np.broadcast_to(scores, (rows, n)), np.full(rows, lt), np.full(rows, c),
                                  params.sigma_z, gen)
            return np.where(accepted, np.asarray(first) + 1, HALT_FALLBACK).astype(np.int64)
        return _chunked(draw, n)

    support = tuple(range(1, n + 1)) + (HALT_FALLBACK,)
    expost = {t: _eps2(acc, lt, t) for t in range(1, n + 1)}
    expost[HALT_FALLBACK] = _eps2(acc, lt, None)
    law_d, law_dp = (privitp_law_given_lambda(s, lt, params) for s in (scores_d, scores_dp))
    target_output = HALT_FALLBACK if t0 is None else t0
    return SelectionPair(
        pair_id=f"privitp_phase2_worst_t{'fallback' if t0 is None else t0}_n{n}_lambda{lt:g}_sigmaz{params.sigma_z:g}",
        sample_D=sampler(scores_d), sample_Dprime=sampler(scores_dp), certified_epsilon=expost[target_output],
        delta=0.0, claim={"accountant": "ex_post", "mechanism": {"name": "privitp_phase2_given_lambda", "params": {
            **{k: val for k, val in params.to_json().items()}, "lambda_tilde": lt, "c": c,
            "target": "fallback" if t0 is None else t0, "pair": "worst_case", "scope": SCOPE}}},
        target=(target_output,), support=support,
        law_D=np.append(law_d.probs, law_d.fallback), law_Dprime=np.append(law_dp.probs, law_dp.fallback),
        expost=expost, scores_D=scores_d, scores_Dprime=scores_dp)


@dataclass(frozen=True)
class Phase2Plan:
    """A Phase-2 configuration chosen from the exact law before any sampling."""

    params: PrivITPParams
    lambda_tilde: float
    p_D: float
    p_Dprime: float
    exact_log_ratio: float
    certified: float
    predicted_eps_lower: float


def plan_privitp_phase2(base: PrivITPParams, target, samples: int, *, sigma_z_grid=None, lambda_grid=None,
                        confidence: float = 0.95, split_frac: float = 0.5, min_expected: float = 100.0) -> Phase2Plan:
    """Choose (σ_Z, λ̃) on a grid so that the event {t = target} of the extremal pair is auditable:
    among configurations whose expected count of the event on D′'s test part, m·P_D′(E) with
    m = samples − round(split_frac·samples), is at least `min_expected`, maximise the ε_lower predicted when
    the test counts equal their expectations under the exact law. Uses only public quantities (no sampling).
    Default grids: σ_Z = base.sigma_z; λ̃ in 13 steps from r_lo − (r_max − r_lo)/2 to r_max."""
    if not isinstance(base, PrivITPParams):
        raise InvalidParameter("base", type(base).__name__, "a PrivITPParams")
    samples = check_samples(samples, _candidates(base.candidates))
    min_expected = v.nonnegative("min_expected", min_expected)
    t0 = _target(base, target)
    width = base.r_max - base.r_lo
    sz_grid = [base.sigma_z] if sigma_z_grid is None else [v.positive("sigma_z_grid", s) for s in sigma_z_grid]
    lt_grid = list(np.linspace(base.r_lo - 0.5 * width, base.r_max, 13)) if lambda_grid is None else \
        [v.finite("lambda_grid", x) for x in lambda_grid]
    if not sz_grid or not lt_grid:
        raise InvalidParameter("sigma_z_grid", sigma_z_grid, "non-empty grids")
    m = samples - min(samples - 1, max(1, int(round(samples * split_frac))))
    best = None
    for sz, lt in itertools.product(sz_grid, lt_grid):
        params = dataclasses.replace(base, sigma_z=sz)
        d_scores, dp_scores = _phase2_scores(params, t0)
        laws = [privitp_law_given_lambda(s, lt, params) for s in (d_scores, dp_scores)]
        p_d, p_dp = ((law.fallback if t0 is None else law.probs[t0 - 1]) for law in laws)
        p_d, p_dp = float(p_d), float(p_dp)
        if p_d <= 0.0 or p_dp * m < min_expected:
            continue
        predicted, _, _ = bound_from_counts(round(p_d * m), m, round(p_dp * m), m, delta=0.0, confidence=confidence)
        if best is None or predicted > best[0]:
            best = (predicted, params, float(lt), p_d, p_dp)
    if best is None:
        raise InvalidParameter("samples", samples, f"enough draws for m·P_D′(E) >= {min_expected} at some grid point")
    predicted, params, lt, p_d, p_dp = best
    certified = _eps2(params, lt, t0)
    return Phase2Plan(params, lt, p_d, p_dp, math.log(p_d) - math.log(p_dp), certified, predicted)


# --- PrivITP Phase 1 and the independence probe -------------------------------------------------------------------

def privitp_phase1_pair(params: PrivITPParams, *, phase1_scores=None, phase1_epsilon: float | None = None,
                        mechanism=None) -> SelectionPair:
    """The λ̃ release of PrivITP: D′ has Phase-1 scores s (default all (r_lo + r_max − Δ)/2), D has s + Δ, so
    λ̂ shifts by exactly Δ (translation equivariance); the Phase-2 list is the same on both sides. Output: λ̃.

    Claim: (ε1, δ) of the analytic Gaussian release (`phase1_epsilon` overrides ε1 to audit a wrong charge).
    Exact law: λ̃ ~ N(λ̂, σ_X²) on each side; events are thresholds on λ̃.
    `mechanism`: an object with PrivITP's `select` (default `PrivITP(params)`).
    """
    if not isinstance(params, PrivITPParams):
        raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
    n, d = _candidates(params.candidates), params.sensitivity
    if phase1_scores is None:
        s = np.full(n, (params.r_lo + params.r_max - d) / 2.0)
    else:
        s = np.asarray(phase1_scores, dtype=np.float64)
        if s.shape != (n,) or not np.all(np.isfinite(s)) or np.any(s < params.r_lo) or np.any(s > params.r_max - d):
            raise InvalidParameter("phase1_scores", "array",
                                   f"{n} scores in [r_lo, r_max − Δ] (so s + Δ stays in range)")
    eps1 = (epsilon(PrivITPPhase1Event(params)).value if phase1_epsilon is None
            else v.positive("phase1_epsilon", phase1_epsilon))
    mech = PrivITP(params) if mechanism is None else mechanism
    phase2 = np.full(n, params.r_lo)                      # the same public Phase-2 list on both sides
    lam_dp = lambda_hat(s, params.beta)
    lam_d = lambda_hat(s + d, params.beta)

    def sampler(scores):
        return _chunked(lambda rows, gen: mech.select(np.broadcast_to(scores, (rows, n)),
                                                      np.broadcast_to(phase2, (rows, n)), gen,
                                                      account=False).lambda_tilde, n)

    def probabilities(event):
        if not isinstance(event, Event) or event.op is None or event.summary is not None:
            raise InvalidParameter("event", event, "a threshold event on λ̃ (Thresholds() without a summary)")
        dist = norm.sf if event.op == ">=" else norm.cdf
        return (float(dist(event.threshold, lam_d, params.sigma_x)),
                float(dist(event.threshold, lam_dp, params.sigma_x)))

    return SelectionPair(
        pair_id=f"privitp_phase1_shift_n{n}_sigmax{params.sigma_x:g}_delta{d:g}",
        sample_D=sampler(s + d), sample_Dprime=sampler(s), certified_epsilon=eps1, delta=params.delta,
        claim={"accountant": "analytic", "mechanism": {"name": "privitp_phase1_release", "params": {
            **params.to_json(), "eps1": eps1, "lambda_hat_D": lam_d, "lambda_hat_Dprime": lam_dp,
            "pair": "phase1_shift", "scope": SCOPE}}},
        scores_D=s + d, scores_Dprime=s, event_probabilities=probabilities, default_family=(Thresholds(),))


def privitp_independence_probe(params: PrivITPParams, phase1_scores, phase1_permuted, phase2_scores, *,
                               mechanism=None) -> SelectionPair:
    """Two inputs that must give the same output law: Phase-1 lists that are permutations of each other
    (λ̂ is a symmetric function, so λ̃ has the same law) and the same Phase-2 list. The halting time depends
    only on λ̃ and the Phase-2 list (the two phases use independent batches), so the claim is ε = 0, δ = 0; a
    positive ε_lower shows that Phase 2 reads the Phase-1 candidates."""
    if not isinstance(params, PrivITPParams):
        raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
    n = params.candidates
    s1, s1p, s2 = (np.asarray(x, dtype=np.float64) for x in (phase1_scores, phase1_permuted, phase2_scores))
    for name, x in (("phase1_scores", s1), ("phase1_permuted", s1p), ("phase2_scores", s2)):
        if x.shape != (n,) or not np.all(np.isfinite(x)):
            raise InvalidParameter(name, "array", f"{n} finite scores")
    if not np.array_equal(np.sort(s1), np.sort(s1p)):
        raise InvalidParameter("phase1_permuted", "array", "a permutation of phase1_scores")
    mech = PrivITP(params) if mechanism is None else mechanism

    def sampler(phase1):
        return _chunked(lambda rows, gen: mech.select(np.broadcast_to(phase1, (rows, n)),
                                                      np.broadcast_to(s2, (rows, n)), gen,
                                                      account=False).halting_times, n)

    law = privitp_law(s2, lambda_hat(np.clip(s1, params.r_lo, params.r_max), params.beta), params)
    probs = np.append(law.probs, law.fallback)
    return SelectionPair(
        pair_id=f"privitp_phase_independence_probe_n{n}", sample_D=sampler(s1), sample_Dprime=sampler(s1p),
        certified_epsilon=0.0, delta=0.0,
        claim={"accountant": None, "mechanism": {"name": "privitp", "params": {
            **params.to_json(), "phase1_scores": s1.tolist(), "phase1_permuted": s1p.tolist(),
            "phase2_scores": s2.tolist(),
            "probe": "identical output laws expected (independent Phase-2 batch); claim epsilon = 0"}}},
        support=tuple(range(1, n + 1)) + (HALT_FALLBACK,), law_D=probs, law_Dprime=probs,
        claimed={D_OVER_DPRIME: 0.0, "Dprime_over_D": 0.0})


__all__ = ["MAX_CANDIDATES", "MAX_DRAWS", "Phase2Plan", "SCOPE", "SelectionPair", "check_samples",
           "exponential_mechanism_pair", "plan_privitp_phase2", "privbon_pair", "privbon_worst_pair",
           "privitp_independence_probe", "privitp_phase1_pair", "privitp_phase2_pair"]
