"""One-run f-DP audit against the claimed mechanism's own trade-off curve (issue 24 item 1; Mahloujifar, Melis &
Chaudhuri 2024). Method `fdp_claim_curve`; proof sketch and labels: docs/audits.md, "f-DP against the claim's own
curve".

* The **family** of the claim: the claimed event with every noise multiplier scaled by s > 0 (s < 1: less
  private). Member s is tested through a trade-off curve f_L(s) that lies below its true curve: the lower envelope
  of the (ε_i, δ_i)-DP lines, ε_i the certified upper ε of `privcheck.accounting.epsilon_profile` on PROFILE_DELTAS.
* The **test** of member s is `audits.gdp.fdp_rejects_curve` with binv(y) = f_L(1 − y); the search finds the
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

from audits import report
from audits.gdp import fdp_rejects_curve
from audits.pvalue import EPS_CAP, MAX_CANARIES, eps_lower
from audits.report import AuditReport
from privcheck import validation as val
from privcheck.accounting import (
    CompositionHistory,
    GaussianEvent,
    PoissonGaussianEvent,
    epsilon,
    epsilon_profile,
)
from privcheck.accounting.pld_certified import NOISE_RANGE
from privcheck.errors import InvalidParameter

__all__ = ["CLAIM_FAMILY_PREFIX", "PROFILE_DELTAS", "ClaimCurve", "claim_curve", "claim_eps_lower",
           "claim_family_label", "fdp_claim_curve", "member", "member_epsilon"]

CLAIM_FAMILY_PREFIX = "claim_family:"
# The δ of the (ε, δ) lines behind each curve: 55 points, 1e-14 … 0.5, log-spaced (4 per decade). The recursion
# reads f_L(1 − y) at y ≥ τv/m, which for m ≤ 10⁶ lies where lines with δ ≥ 1e-14 carry it.
PROFILE_DELTAS = tuple(float(d) for d in np.logspace(-14.0, math.log10(0.5), 55))
_LOG_S_WIDTH = 2e-3          # the search stops when s_hi / s_lo − 1 < 2e-3
_MAX_DOUBLINGS = 24


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


@functools.lru_cache(maxsize=512)
def claim_curve(event) -> ClaimCurve:
    """f_L of `event` from its certified privacy profile on PROFILE_DELTAS (lines with ε = inf are dropped)."""
    eps = np.array(epsilon_profile(_check_event(event), PROFILE_DELTAS))
    keep = np.isfinite(eps)
    return ClaimCurve(eps=eps[keep], delta=np.array(PROFILE_DELTAS)[keep])


@functools.lru_cache(maxsize=512)
def member_epsilon(event, delta: float) -> float:
    """The lower end of the certified enclosure of ε(event, δ) (0 when the accountant gives none)."""
    rec = epsilon(event, delta)
    low = rec.certified.lower if rec.certified is not None else 0.0
    return max(0.0, low) if math.isfinite(low) else 0.0


def _s_min(event) -> float:
    floor = NOISE_RANGE[0] if isinstance(event, (PoissonGaussianEvent, CompositionHistory)) else 1e-3
    return floor / min(_noises(event))


def _rejects(m, r, v, event, s, tau) -> bool:
    return fdp_rejects_curve(m, r, v, claim_curve(member(event, s)).binv, tau)


def claim_eps_lower(m: int, r: int, v: int, event, delta: float, tau: float) -> dict:
    """The search (validated inputs): {eps_lower, s (least private rejected scale, None if none), rejects_nominal,
    search_capped}. eps_lower = lower end of ε(member(s), δ), 0 when no member is rejected."""
    nominal = bool(v > 0 and _rejects(m, r, v, event, 1.0, tau))
    if v == 0:
        return {"eps_lower": 0.0, "s": None, "rejects_nominal": False, "search_capped": False}
    s_min, capped = _s_min(event), False
    if nominal:
        hi, lo = 1.0, 0.5
        while _rejects(m, r, v, event, max(lo, s_min), tau):
            if lo <= s_min:
                hi, lo, capped = s_min, None, True
                break
            hi, lo = lo, lo / 2
        lo = None if lo is None else max(lo, s_min)
    else:
        lo, hi = 1.0, 2.0
        for _ in range(_MAX_DOUBLINGS):
            if _rejects(m, r, v, event, hi, tau):
                break
            lo, hi = hi, hi * 2
        else:
            return {"eps_lower": 0.0, "s": None, "rejects_nominal": False, "search_capped": False}
    while lo is not None and hi / lo - 1.0 > _LOG_S_WIDTH:      # invariant: rejects(hi), not rejects(lo)
        mid = math.sqrt(lo * hi)
        if _rejects(m, r, v, event, mid, tau):
            hi = mid
        else:
            lo = mid
    eps = min(member_epsilon(member(event, hi), delta), EPS_CAP)
    return {"eps_lower": eps, "s": hi, "rejects_nominal": nominal, "search_capped": capped}


def fdp_claim_curve(m: int, guesses: int, correct: int, *, event, delta: float, confidence: float = 0.95,
                    power=None, claim=None, canaries=None, diagnostics=None) -> AuditReport:
    """The claim-curve f-DP one-run audit (method fdp_claim_curve): `eps_lower` under the extra assumption
    `claim_family:<event>`, `eps_lower_steinke` (no extra assumption) beside it, `rejects_nominal` for the claimed
    event itself (s = 1). All arguments are checked before any work."""
    m, r, v = val.ordered_counts(m, guesses, correct, r_name="guesses", v_name="correct", maximum=MAX_CANARIES)
    event = _check_event(event)
    delta = val.open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    if claim is not None and "epsilon" in claim:
        raise InvalidParameter("claim.epsilon", claim["epsilon"], "absent: the claim is the event's own ε")
    p = val.significance(confidence)
    claimed = epsilon(event, delta)
    if not math.isfinite(claimed.value):
        raise InvalidParameter("event", event.canonical(), f"an event privcheck accounts at δ = {delta!r}")
    out = claim_eps_lower(m, r, v, event, delta, p)
    top = claim_eps_lower(m, m, m, event, delta, p) if power is None else None
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


def planned_eps_lower(m: int, *, event, delta: float, score_model, confidence: float = 0.95, points: int = 8,
                      seed: int = 0) -> dict:
    """Planned claim-curve ε_lower for m canaries (audits.power style, expected counts): for each pre-declared rule
    of a `points`-point grid of top-only and balanced rules, v = the rule's correct count on power's reference
    sample of the score model (seeded), and ε_lower(m, k, v); the largest and its rule, beside the Steinke
    planned bound of the same rule and the claimed ε. A forecast, not a bound."""
    from audits.power import GuessRule, _reference_counts, guess_counts, parse_score_model

    m = val.count("m", m, 1, MAX_CANARIES)
    event = _check_event(event)
    delta = val.open_unit("delta", delta)
    p = val.significance(val.open_unit("confidence", confidence))
    model = parse_score_model(score_model) if isinstance(score_model, str) else score_model
    ks = guess_counts(m, points)
    rules = [GuessRule(k, 0) for k in ks] + [GuessRule((k + 1) // 2, k // 2) for k in ks if k > 1]
    ratio, correct = _reference_counts(model, m, rules, np.random.default_rng(seed))
    best = {"eps_lower": -1.0}
    for rule, c in zip(rules, correct):
        k = rule.k_plus + rule.k_minus
        v = c // ratio
        out = claim_eps_lower(m, k, v, event, delta, p)
        if out["eps_lower"] > best["eps_lower"]:
            best = {"eps_lower": out["eps_lower"], "k_plus": rule.k_plus, "k_minus": rule.k_minus, "correct": v,
                    "eps_lower_steinke": eps_lower(m, k, v, delta, p)}
    best["eps_claimed"] = epsilon(event, delta).value
    return best
