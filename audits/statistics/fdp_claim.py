"""One-run f-DP audit against the claimed mechanism's own trade-off curve (issue 24 item 1; Mahloujifar, Melis &
Chaudhuri 2024). Method `fdp_claim_curve`; proof sketch and labels: docs/audits.md, "f-DP against the claim's own
curve".

* The **family** of the claim: the claimed event with every noise multiplier scaled by s > 0 (s < 1: less
  private). Member s is tested through a trade-off curve f_L(s) that lies below its true curve: the lower envelope
  of the (ε_i, δ_i)-DP lines, ε_i the certified upper ε of `privcheck.accounting.epsilon_profile` on PROFILE_DELTAS.
* The **test** of member s is `audits.statistics.gdp.fdp_rejects_curve` with binv(y) = f_L(1 − y); the search finds the
  least private rejected member s_hi by doubling and bisection on log s (invariant: s_hi rejected, s_lo not).
* The **result** `eps_lower` is the lower end of the certified enclosure of `epsilon(member(s_hi), δ)` at the claim's
  δ: valid at level τ **under the assumption that the mechanism's curve is a member of the family** (extra
  assumption `claim_family:<event>`); the assumption-free Steinke bound is reported beside it (`eps_lower_steinke`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from audits.statistics import report
from audits.statistics.gdp import delta_of_eps, eps_of_mu, fdp_rejects_curve
from audits.statistics.pvalue import EPS_CAP, MAX_CANARIES, eps_lower
from audits.statistics.report import AuditReport
from privcheck import validation as val
from privcheck.accounting import (
    CompositionHistory,
    GaussianEvent,
    PoissonGaussianEvent,
    epsilon,
    epsilon_profile,
)
from privcheck.accounting.events import NeighboringRelation
from privcheck.accounting.pld_certified import NOISE_RANGE
from privcheck.errors import InvalidParameter
from privcheck.randomness import RandomnessPolicy

__all__ = ["CLAIM_FAMILY_PREFIX", "PLAN_SIMS", "PROFILE_DELTAS", "ClaimCurve", "claim_curve", "claim_eps_lower",
           "claim_family_label", "fdp_claim_curve", "gaussian_equivalent", "grid_search", "member", "member_epsilon",
           "planned_eps_lower"]

CLAIM_FAMILY_PREFIX = "claim_family:"
# The δ of the (ε, δ) lines behind each curve: 55 points, 1e-14 … 0.5, log-spaced (4 per decade). The recursion
# reads f_L(1 − y) at y ≥ τv/m, which for m ≤ 10⁶ lies where lines with δ ≥ 1e-14 carry it.
PROFILE_DELTAS = tuple(float(d) for d in np.logspace(-14.0, math.log10(0.5), 55))
_GRID_STEP = math.log1p(2e-3)   # the search grid s = (1 + 2e-3)^k: the search ends with s_hi / s_lo = 1.002
_K_MAX = math.ceil(24 * math.log(2.0) / _GRID_STEP)   # s up to 2^24: beyond, no member is rejected (eps_lower 0)
_PROXY_LINES = 256
_PROXY_INTERVAL = 1e-3
# Planning: every rule's correct count is pooled over 4 reference samples, for the choice and again (fresh) for the
# chosen rule's figure. One sample's count is within about ±0.5 of its mean at m = 1e4, r ≈ 100, and the figure
# moves by 0.04 of the claim per correct guess there: a single sample lets the choice chase noise.
_EVAL_SAMPLES = 4
PLAN_SIMS = 100              # planning: simulated audits of the chosen rule behind the Monte Carlo quantiles


@dataclasses.dataclass(frozen=True)
class ClaimCurve:
    """f_L(α) = max(0, max_i 1 − δ_i − e^{ε_i}·α, max_i e^{−ε_i}·(1 − δ_i − α)): the trade-off curve implied by
    (ε_i, δ_i)-DP for every i (Kairouz et al.; Dong, Roth & Su, Prop. 2.5), symmetric by construction."""

    eps: np.ndarray
    delta: np.ndarray

    def f(self, alpha: float) -> float:
        e, d = self.eps, self.delta
        a = float(np.max(1.0 - d - np.exp(e) * alpha, initial=0.0))
        b = float(np.max(np.exp(-e) * (1.0 - d - alpha), initial=0.0))
        return max(0.0, a, b)

    def binv(self, y: float) -> float:
        """f_L(1 − y), evaluated without forming 1 − y in the second family (small y keep their precision)."""
        e, d = self.eps, self.delta
        a = float(np.max((1.0 - d) - np.exp(e) * (1.0 - y), initial=0.0))
        b = float(np.max(np.exp(-e) * (y - d), initial=0.0))
        return max(0.0, a, b)


def _check_event(event):
    if not isinstance(event, (GaussianEvent, PoissonGaussianEvent, CompositionHistory)):
        raise InvalidParameter("event", type(event).__name__,
                               "a GaussianEvent, PoissonGaussianEvent or CompositionHistory (a noise-scaled family)")
    return event


def _noises(event) -> tuple[float, ...]:
    if isinstance(event, GaussianEvent):
        return (event.sigma / event.sensitivity,)
    if isinstance(event, PoissonGaussianEvent):
        return (event.noise_multiplier,)
    return tuple(p.noise_multiplier for p in event.phases)


def member(event, s: float):
    """The claimed event with every noise multiplier (σ of a GaussianEvent) scaled by s."""
    s = val.positive("s", s)
    if isinstance(event, GaussianEvent):
        return dataclasses.replace(event, sigma=event.sigma * s)
    if isinstance(event, PoissonGaussianEvent):
        return dataclasses.replace(event, noise_multiplier=event.noise_multiplier * s)
    return CompositionHistory(tuple(dataclasses.replace(p, noise_multiplier=p.noise_multiplier * s)
                                    for p in event.phases))


def claim_family_label(event) -> str:
    """`claim_family:<canonical event JSON>`: the assumption the ε of this method rests on."""
    return CLAIM_FAMILY_PREFIX + event.canonical()


def gaussian_equivalent(event, *, less_private: bool):
    """A `PoissonGaussianEvent` with q = 1 under add/remove is T rounds of the Gaussian mechanism of sensitivity C
    and noise σC; their composition is exactly the Gaussian mechanism with noise σ/√T (μ-GDP composes as
    μ = √T/σ, and the Gaussian mechanism's trade-off curve is exactly G_μ: Dong, Roth & Su), so its certified ε is
    the analytic Gaussian's (Arb), a hundred times cheaper than the PLD's and tighter. The float σ/√T is moved two
    ulps toward the safe side of the use: smaller (`less_private`, for a curve that must lie below the true one)
    or larger (for an ε that must lie below the true one). Any other event is returned unchanged."""
    if not (isinstance(event, PoissonGaussianEvent) and event.sampling_rate == 1.0
            and event.relation is NeighboringRelation.ADD_REMOVE):
        return event
    if event.steps == 1:
        return GaussianEvent(event.noise_multiplier)
    toward = 0.0 if less_private else math.inf
    sigma = math.nextafter(math.nextafter(event.noise_multiplier / math.sqrt(event.steps), toward), toward)
    return GaussianEvent(sigma)


@functools.lru_cache(maxsize=512)
def claim_curve(event) -> ClaimCurve:
    """f_L of `event` from its certified privacy profile on PROFILE_DELTAS (lines with ε = inf are dropped)."""
    eps = np.array(epsilon_profile(gaussian_equivalent(_check_event(event), less_private=True), PROFILE_DELTAS))
    keep = np.isfinite(eps)
    return ClaimCurve(eps=eps[keep], delta=np.array(PROFILE_DELTAS)[keep])


@functools.lru_cache(maxsize=512)
def member_epsilon(event, delta: float) -> float:
    """The lower end of the certified enclosure of ε(event, δ) (0 when the accountant gives none)."""
    rec = epsilon(gaussian_equivalent(event, less_private=False), delta)
    low = rec.certified.lower if rec.certified is not None else 0.0
    return max(0.0, low) if math.isfinite(low) else 0.0


def _s_min(event) -> float:
    floor = NOISE_RANGE[0] if isinstance(event, (PoissonGaussianEvent, CompositionHistory)) else 1e-3
    return floor / min(_noises(event))


def grid_scale(k: int) -> float:
    """Member k of the search grid: s = (1 + 2e-3)^k (k = 0 is the claim itself). Every search, for every guess rule,
    visits only grid points, so the curves it computes are shared (`claim_curve` is cached by event)."""
    return math.exp(k * _GRID_STEP)


def _k_range(event) -> tuple[int, int]:
    """The search's grid indices: from the accountant's noise floor up to s = 2^24, or, for PLD events, to the
    largest s that keeps every noise multiplier within the certified PLD's range (a claim with σ ≥ 6 would
    otherwise probe members the accountant refuses)."""
    k_max = _K_MAX
    if isinstance(event, (PoissonGaussianEvent, CompositionHistory)):
        k_max = min(k_max, math.floor(math.log(NOISE_RANGE[1] / max(_noises(event))) / _GRID_STEP))
    return math.ceil(math.log(_s_min(event)) / _GRID_STEP - 1e-9), k_max


def _rejects(m, r, v, event, s, tau) -> bool:
    return fdp_rejects_curve(m, r, v, claim_curve(member(event, s)).binv, tau)


# ---------------------------------------------------------------------------------------------------------------------
# The proxy curve: where to look, never what is reported.


@functools.lru_cache(maxsize=4096)
def proxy_curve(event) -> ClaimCurve | None:
    """A fast float stand-in for `claim_curve` that only steers searches: the lines (ε_j, δ(ε_j)) of dp-accounting's
    pessimistic PLD (interval 1e-3, one composition for all lines) on 256 ε_j, or of the exact μ-GDP profile of a
    GaussianEvent. None when it cannot be computed (the search then starts at the claim). Nothing reported rests on
    it: every rejection behind a reported figure is the certified curve's."""
    event = gaussian_equivalent(event, less_private=True)
    try:
        if isinstance(event, GaussianEvent):
            mu = event.sensitivity / event.sigma
            top = eps_of_mu(mu, PROFILE_DELTAS[0])
            eps = np.linspace(0.0, top, _PROXY_LINES)
            dlt = np.array([delta_of_eps(float(e), mu) for e in eps])
        else:
            from privcheck.accounting import dpsgd
            phases = event.phases if isinstance(event, CompositionHistory) else (event,)
            relation = event.relation.value
            pld = dpsgd.float_pld_history(tuple((p.sampling_rate, p.noise_multiplier, p.steps) for p in phases),
                                          _PROXY_INTERVAL, relation)
            top = float(pld.get_epsilon_for_delta(PROFILE_DELTAS[0]))
            eps = np.linspace(0.0, top, _PROXY_LINES)
            dlt = np.asarray(pld.get_delta_for_epsilon(eps), dtype=float)
    except (ValueError, ArithmeticError, OverflowError, MemoryError, KeyError, InvalidParameter):
        return None
    keep = np.isfinite(eps) & np.isfinite(dlt) & (dlt < 1.0)
    return ClaimCurve(eps=eps[keep], delta=np.clip(dlt[keep], 0.0, 1.0))


def _proxy_rejects(m, r, v, event, k, tau) -> bool:
    curve = proxy_curve(member(event, grid_scale(k)))
    return bool(curve is not None and fdp_rejects_curve(m, r, v, curve.binv, tau))


def grid_search(rejects, k0: int, k_min: int, k_max: int) -> tuple[int | None, int | None]:
    """The least k in [k_min, k_max] with rejects(k), for a (nearly) monotone predicate (False below, True above):
    galloping from k0 to a bracket, then bisection. Returns (k_hi, k_lo): rejects(k_hi) was evaluated True and
    rejects(k_lo) False with k_hi − k_lo = 1; k_lo None when k_hi = k_min (capped); (None, k_max) when even k_max
    does not reject. The returned k_hi is always a rejected point, whatever the predicate's shape."""
    k0 = min(max(k0, k_min), k_max)
    step = 1
    if rejects(k0):
        hi = k0
        while True:
            if hi == k_min:
                return hi, None
            cand = max(hi - step, k_min)
            if not rejects(cand):
                lo = cand
                break
            hi, step = cand, step * 2
    else:
        lo = k0
        while True:
            if lo == k_max:
                return None, k_max
            cand = min(lo + step, k_max)
            if rejects(cand):
                hi = cand
                break
            lo, step = cand, step * 2
    while hi - lo > 1:                    # invariant: rejects(hi), not rejects(lo)
        mid = (lo + hi) // 2
        if rejects(mid):
            hi = mid
        else:
            lo = mid
    return hi, lo


def _proxy_start(m, r, v, event, tau, k_hint: int = 0) -> int:
    """The proxy's least rejected grid index (the certified search starts there), k_hint when there is no proxy."""
    if proxy_curve(event) is None:
        return k_hint
    k_min, k_max = _k_range(event)
    hi, _ = grid_search(lambda k: _proxy_rejects(m, r, v, event, k, tau), k_hint, k_min, k_max)
    return k_max if hi is None else hi


def claim_eps_lower(m: int, r: int, v: int, event, delta: float, tau: float, *, hint: int = 0) -> dict:
    """The search (validated inputs): {eps_lower, s (least private rejected scale, None if none), rejects_nominal,
    search_capped}. eps_lower = lower end of ε(member(s), δ), 0 when no member is rejected. The certified search
    runs on the grid s = grid_scale(k), starting where the proxy curve places the answer (its search starts at
    grid index `hint`; without a proxy the certified search does), and ends
    with k_hi rejected by the certified curve and k_hi − 1 not (or k_hi at the floor: search_capped)."""
    if v == 0:
        return {"eps_lower": 0.0, "s": None, "rejects_nominal": False, "search_capped": False}
    nominal = bool(_rejects(m, r, v, event, 1.0, tau))
    k_min, k_max = _k_range(event)
    k0 = _proxy_start(m, r, v, event, tau, hint)
    hi, lo = grid_search(lambda k: _rejects(m, r, v, event, grid_scale(k), tau), k0, k_min, k_max)
    if hi is None:
        return {"eps_lower": 0.0, "s": None, "rejects_nominal": nominal, "search_capped": False}
    s_hi = grid_scale(hi)
    eps = min(member_epsilon(member(event, s_hi), delta), EPS_CAP)
    return {"eps_lower": eps, "s": s_hi, "rejects_nominal": nominal, "search_capped": lo is None}


def fdp_claim_curve(m: int, guesses: int, correct: int, *, event, delta: float, confidence: float = 0.95,
                    power=None, claim=None, canaries=None, diagnostics=None, score_model=None,
                    plan_sims: int = PLAN_SIMS, plan_seed: int | None = None) -> AuditReport:
    """The claim-curve f-DP one-run audit (method fdp_claim_curve): `eps_lower` under the extra assumption
    `claim_family:<event>`, `eps_lower_steinke` (no extra assumption) beside it, `rejects_nominal` for the claimed
    event itself (s = 1). `score_model` (not with `power`): the `power` block is this method's own plan of the
    audit's r guesses (top-only or split evenly, `planned_eps_lower` with `rules`; `plan_sims` simulated audits
    seeded by `plan_seed`, OS entropy when None), so the report's verdict weighs this method's figures. All
    arguments are checked before any work."""
    m, r, v = val.ordered_counts(m, guesses, correct, r_name="guesses", v_name="correct", maximum=MAX_CANARIES)
    event = _check_event(event)
    delta = val.open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    if claim is not None and "epsilon" in claim:
        raise InvalidParameter("claim.epsilon", claim["epsilon"], "absent: the claim is the event's own ε")
    if score_model is not None:
        from audits.statistics.power import parse_score_model
        if power is not None:
            raise InvalidParameter("score_model", score_model, "not given together with power")
        score_model = parse_score_model(score_model)
        plan_sims = val.count("plan_sims", plan_sims, 1, 10_000)
        plan_seed = None if plan_seed is None else val.seed("plan_seed", plan_seed)
    p = val.significance(confidence)
    claimed = epsilon(event, delta)
    if not math.isfinite(claimed.value):
        raise InvalidParameter("event", event.canonical(), f"an event privcheck accounts at δ = {delta!r}")
    out = claim_eps_lower(m, r, v, event, delta, p)
    top = claim_eps_lower(m, m, m, event, delta, p) if power is None else None
    if score_model is not None and r:
        planned = planned_eps_lower(m, event=event, delta=delta, score_model=score_model, confidence=confidence,
                                    sims=plan_sims, seed=plan_seed, rules=[(r, 0), ((r + 1) // 2, r // 2)])
        power = {"eps_ceiling": top["eps_lower"], "min_correct_for_nominal": None,
                 "planned_eps_lower": planned["eps_lower"], "mc_median": planned["mc_median"],
                 "mc_p10": planned["mc_p10"], "mc_p90": planned["mc_p90"], "prob_zero": planned["prob_zero"],
                 "score_model": score_model.name}
    result = {"guesses": r, "correct": v, "precision": (v / r) if r else None, "eps_lower": out["eps_lower"],
              "eps_lower_steinke": eps_lower(m, r, v, delta, p), "confidence": confidence, "significance": p,
              "p_value_at_nominal": None, "rejects_nominal": out["rejects_nominal"],
              "search_capped": out["search_capped"], "noise_scale": out["s"]}
    ceiling = top["eps_lower"] if top is not None else 0.0
    return AuditReport(method="fdp_claim_curve", claim=report.claim_block(claimed.value, delta, claim),
                       canaries=report.canaries_block(m=m, m_test=m, n_in=None, n_out=None,
                                                      inclusion="iid_bernoulli_0.5", overrides=canaries),
                       guessing=report.guessing_block(selection="explicit"), result=result,
                       power=report.power_block(power, eps_ceiling=ceiling, min_correct=None),
                       assumptions=report.ONE_RUN_ASSUMPTIONS, extra_assumptions=(claim_family_label(event),),
                       diagnostics=report.diagnostics_block(diagnostics), software=report.software(),
                       randomness=report.randomness_block("external", None))


def _fixed_rules(rules, m: int) -> list[tuple[int, int]]:
    allowed = f"(k_plus, k_minus) pairs of integers >= 0 with 1 <= k_plus + k_minus <= {m}"
    try:
        pairs = [(int(a), int(b)) for a, b in rules]
    except (TypeError, ValueError):
        raise InvalidParameter("rules", rules, allowed) from None
    if not pairs or any(a < 0 or b < 0 or not 1 <= a + b <= m for a, b in pairs):
        raise InvalidParameter("rules", rules, allowed)
    return pairs


def _least_positive(m: int, r: int, event, tau: float) -> int:
    """The least correct count v whose ε_lower is positive: the least v that rejects the most private member of
    the search (its largest s; a count that rejects nothing there rejects nothing anywhere); r + 1 if none does."""
    curve = claim_curve(member(event, grid_scale(_k_range(event)[1])))
    if not fdp_rejects_curve(m, r, r, curve.binv, tau):
        return r + 1
    lo, hi = 0, r                        # invariant: v = hi rejects, v = lo does not (v = 0 never rejects)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fdp_rejects_curve(m, r, mid, curve.binv, tau):
            hi = mid
        else:
            lo = mid
    return hi


def _pooled_counts(reference_counts, model, m: int, rules, rng) -> tuple[int, list[int]]:
    """`reference_counts` summed over _EVAL_SAMPLES independent reference samples: (total ratio, total counts)."""
    ratio, total = 0, [0] * len(rules)
    for _ in range(_EVAL_SAMPLES):
        r, counts = reference_counts(model, m, rules, rng)
        ratio += r
        total = [a + b for a, b in zip(total, counts)]
    return ratio, total


def planned_eps_lower(m: int, *, event, delta: float, score_model, confidence: float = 0.95, points: int = 40,
                      refine: int = 12, sims: int = PLAN_SIMS, seed: int = 0, rules=None) -> dict:
    """Planned claim-curve ε_lower for m canaries (audits.statistics.power style, expected counts): the guess rule is
    chosen on simulated scores only (pre-registrable), then the method runs at its expected counts.

    Rules: top-only and balanced rules on a `points`-point log grid of guess counts, then `refine` more counts of
    the best kind between the best count's grid neighbours; v = the rule's mean correct count on _EVAL_SAMPLES of
    power's reference samples of the score model (seeded), floored. Each rule is ranked by the proxy curve's least
    rejected grid member (a rule is searched only when it beats the best so far). The chosen rule's counts are then
    drawn afresh (_EVAL_SAMPLES more independent reference samples, pooled), so that choosing the best of many
    rules does not inflate the forecast, and its ε_lower is computed with the certified curves, as the audit would.

    Monte Carlo: `sims` simulated audits of the chosen rule (S_i ~ Bern(1/2), scores from the model;
    `audits.statistics.power.simulate_correct` in the power plan's seeded tasks) give correct counts v_1..v_sims;
    `mc_p10`, `mc_median`, `mc_p90` are the ε_lower of the counts at those quantiles (inverted-CDF quantiles, so
    each is a simulated count). ε_lower is non-decreasing in v at fixed (m, r) (tested in
    tests/audits/test_fdp_claim.py), so these are the quantiles of the audits' ε_lower. `mc_median` is the typical
    audit's figure; `eps_lower` (at ⌊mean count⌋) can be a whole correct guess below it when r is small.

    `rules` ((k₊, k₋) pairs): consider only these (an audit whose guess count is fixed), without refinement.
    `prob_zero`: the fraction of simulated audits whose ε_lower is 0, i.e. that reject not even the most private
    member of the search (s = 2^24; rejection is monotone in s).

    Returns the ε_lower figures, the rule, its counts, the Steinke planned bound of the same counts, the noise
    scale and the claimed ε. A forecast, not a bound."""
    from audits.statistics.power import (
        GuessRule,
        guess_counts,
        mc_tasks,
        parse_score_model,
        reference_counts,
        simulate_correct,
    )

    m = val.count("m", m, 1, MAX_CANARIES)
    seed = None if seed is None else val.seed("seed", seed)
    event = _check_event(event)
    delta = val.open_unit("delta", delta)
    p = val.significance(val.open_unit("confidence", confidence))
    points = val.count("points", points, 2, 400)
    refine = val.count("refine", refine, 0, 400)
    sims = val.count("sims", sims, 1, 10_000)
    model = parse_score_model(score_model) if isinstance(score_model, str) else score_model
    rng = np.random.default_rng(seed)
    if rules is None:
        ks = guess_counts(m, points)
        rules = [GuessRule(k, 0) for k in ks] + [GuessRule((k + 1) // 2, k // 2) for k in ks if k > 1]
    else:
        rules, refine = [GuessRule(*rule) for rule in _fixed_rules(rules, m)], 0
    ratio, correct = _pooled_counts(reference_counts, model, m, rules, rng)
    best: dict = {"k": None}

    def consider(rule, c):
        r, v = rule.k_plus + rule.k_minus, c // ratio
        if v == 0:
            return
        if best["k"] is None:
            k = _proxy_start(m, r, v, event, p)
        elif _proxy_rejects(m, r, v, event, best["k"] - 1, p):
            k = grid_search(lambda j: _proxy_rejects(m, r, v, event, j, p), best["k"] - 1, *_k_range(event))[0]
        else:
            return
        if k is not None and (best["k"] is None or k < best["k"]):
            best.update(k=k, rule=rule, r=r, v=v)

    order = sorted(zip(rules, correct), key=lambda rc: -eps_lower(m, rc[0].guesses, rc[1] // ratio, delta, p))
    for rule, c in order:
        consider(rule, c)
    if best["k"] is not None and refine:
        pos = ks.index(best["r"])
        lo, hi = ks[max(pos - 1, 0)], ks[min(pos + 1, len(ks) - 1)]
        extra = sorted({int(k) for k in np.round(np.geomspace(lo, hi, refine + 2))} - set(ks))
        balanced = best["rule"].k_minus > 0
        more = [GuessRule((k + 1) // 2, k // 2) if balanced else GuessRule(k, 0) for k in extra]
        if more:
            _, more_correct = _pooled_counts(reference_counts, model, m, more, rng)
            for rule, c in zip(more, more_correct):
                consider(rule, c)
    eps_claimed = epsilon(event, delta).value
    if best["k"] is None:
        return {"eps_lower": 0.0, "k_plus": None, "k_minus": None, "correct": None, "eps_lower_steinke": 0.0,
                "noise_scale": None, "eps_claimed": eps_claimed, "mc_p10": 0.0, "mc_median": 0.0, "mc_p90": 0.0,
                "mc_correct": None, "prob_zero": 1.0, "sims": sims}
    fresh_ratio, (fresh,) = _pooled_counts(reference_counts, model, m, [best["rule"]], rng)   # no winner's curse
    r, v = best["r"], fresh // fresh_ratio
    out = claim_eps_lower(m, r, v, event, delta, p, hint=best["k"])
    policy = RandomnessPolicy.from_setting(seed)
    v_sim = np.concatenate([simulate_correct(model, m, best["rule"], n, np.random.default_rng(task_seed))
                            for n, task_seed in mc_tasks(m, sims, policy)])
    v_q = [int(np.quantile(v_sim, q, method="inverted_cdf")) for q in (0.1, 0.5, 0.9)]
    eps_q = [claim_eps_lower(m, r, c, event, delta, p, hint=best["k"])["eps_lower"] for c in v_q]
    return {"eps_lower": out["eps_lower"], "k_plus": best["rule"].k_plus, "k_minus": best["rule"].k_minus,
            "correct": v, "eps_lower_steinke": eps_lower(m, r, v, delta, p), "noise_scale": out["s"],
            "eps_claimed": eps_claimed, "mc_p10": eps_q[0], "mc_median": eps_q[1], "mc_p90": eps_q[2],
            "mc_correct": tuple(v_q), "prob_zero": float(np.mean(v_sim < _least_positive(m, r, event, p))),
            "sims": sims}
