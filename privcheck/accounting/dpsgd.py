"""Accounting for the Poisson-subsampled Gaussian mechanism composed T times (DP-SGD, DP-GRPO).

Dominating pair per round (Lemma 1 of the DP-GRPO paper; Zhu, Dong & Wang 2022):
    A = (1 − q)·N(0, σ²) + q·N(1, σ²),   B = N(0, σ²),
    δ_{q,σ,T}(ε) = max{ H_{e^ε}(A^{⊗T} ‖ B^{⊗T}), H_{e^ε}(B^{⊗T} ‖ A^{⊗T}) }      (add/remove neighbours).

Reported figure: the certified PLD enclosure (`privcheck.accounting.pld_certified`): bucket masses in Arb, a
composition whose float error has a proven bound, ε(δ) solved in Arb; the upper end is reported and the record
carries `certified = {lower, upper}`. Cross-checks: dp-accounting's float PLD (pessimistic, connect-the-dots,
method "pld_float"), RDP (dp-accounting), the exact T = 1 profile certified in Arb (closed form and
`acb.integral`), and a quadrature recursion for small T. Proof and the PLD/RDP gap: docs/accounting.md.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import re
import time

import dp_accounting
import numpy as np
from dp_accounting import rdp
from dp_accounting.pld import privacy_loss_distribution as _pld
from flint import acb, arb, ctx
from scipy import integrate as _quad
from scipy.optimize import brentq
from scipy.special import log_ndtr

from privcheck import validation as v
from privcheck.accounting import pld_certified
from privcheck.accounting.gaussian import EPS_MAX
from privcheck.accounting.pld_pairs import log_excess
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.ball import ThresholdPredicate, decide, normal_cdf, normal_sf
from privcheck.numerics.bracket import certified_crossing
from privcheck.numerics.certified import Certified
from privcheck.numerics.integrate import gaussian_tail_bound, integrate

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_ORDERS", "FLOAT_PLD_DELTA_MIN", "INTERVAL_RANGE", "MECHANISM", "RDP_ORDERS_MAX",
           "RDP_ORDER_MAX", "check_interval", "clear_caches", "composed_delta_quadrature", "delta_single_float",
           "epsilon_pld", "epsilon_pld_certified", "epsilon_quadrature", "epsilon_rdp", "epsilon_rdp_history",
           "epsilon_single_round_certified", "float_pld_history", "pld_epsilon_value", "pld_history_epsilon_value",
           "single_round_delta_ball", "single_round_delta_integral"]

MECHANISM = "poisson_subsampled_gaussian"
DEFAULT_INTERVAL = 1e-4
# The PLD lattice intervals accepted (float and certified): at 1e-5 one round of a moderate ε already takes 10⁶–10⁷
# buckets (dp-accounting holds them all in memory; 1e-12 exhausts it); above 1 the lattice cannot resolve an ε.
INTERVAL_RANGE = (1e-5, 1.0)
# The float PLD (dp-accounting) truncates 1e-15 of the composed mass to +∞: below that δ its ε is inf, and close to it
# the truncation dominates; searches that run on it (calibration) need δ ≥ this.
FLOAT_PLD_DELTA_MIN = 1e-12
DEFAULT_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024])


def _check_pld_signature() -> None:
    """The reported figure relies on pessimistic, connect-the-dots PLDs: make sure the API still offers them."""
    params = inspect.signature(_pld.from_gaussian_mechanism).parameters
    for name in ("pessimistic_estimate", "use_connect_dots", "sampling_prob", "neighboring_relation",
                 "value_discretization_interval"):
        if name not in params:
            raise ImportError(f"dp-accounting's from_gaussian_mechanism lacks {name!r}; pinned 0.6.0 expected")


_check_pld_signature()


def check_interval(name: str, value) -> float:
    """A PLD lattice interval in INTERVAL_RANGE."""
    return v.closed_range(name, value, *INTERVAL_RANGE, "a PLD lattice interval")


def _validate(q, sigma, steps, delta, *, closed_form: bool = False):
    """The accountants' common checks; σ in the certified PLD's NOISE_RANGE, or any σ > 0 for the closed-form Arb
    methods of one round (`closed_form`), which need no lattice."""
    check_sigma = v.positive if closed_form else pld_certified.check_noise
    return (v.sampling_rate("sampling_rate", q), check_sigma("noise_multiplier", sigma),
            v.count("steps", steps, maximum=pld_certified.MAX_STEPS), pld_certified.check_delta("delta", delta))


# --- PLD (reported figure) ------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _one_round_pld(q: float, sigma: float, interval: float, relation: str):
    """One round's PLD; cached because a history or a step search builds the same round many times (dp-accounting's
    compose/self_compose return new objects and never modify their operands)."""
    return _pld.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, sampling_prob=q, value_discretization_interval=interval,
        pessimistic_estimate=True, use_connect_dots=True, neighboring_relation=_DP_RELATIONS[relation])


_DP_RELATIONS = {"add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                 "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}


# The float PLD holds every bucket in memory: a round of q = 1, σ = 0.1 at 1e-5 is 1.5·10⁷ of them, and 10⁶ such
# rounds spread over 10⁹ (no answer in hours). Above this many predicted buckets it is not run (ε = inf, fail closed).
FLOAT_PLD_MAX_BUCKETS = 1 << 24
_TRUNCATION_Z = 9.9      # dp-accounting truncates each Gaussian at log mass −50: |x − mean| ≤ 9.9σ


def _float_pld_buckets(q: float, sigma: float, steps: int, interval: float) -> float:
    """A float estimate of the buckets dp-accounting's PLD of `steps` rounds holds: one round's loss range over the
    truncated noise, and the composed window (±8 standard deviations of the summed loss, at most `steps` ranges),
    both divided by the interval. Loss moments by a 4001-point trapezoid rule (only a size estimate)."""
    x = np.linspace(-_TRUNCATION_Z * sigma, 1 + _TRUNCATION_Z * sigma, 4001)
    with np.errstate(all="ignore"):
        loss = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, (2 * x - 1) / (2 * sigma * sigma) + math.log(q))
        dens = (1 - q) * np.exp(-x * x / (2 * sigma * sigma)) + q * np.exp(-(x - 1) ** 2 / (2 * sigma * sigma))
    w = dens / np.sum(dens)
    mean = float(np.sum(w * loss))
    std = math.sqrt(max(float(np.sum(w * (loss - mean) ** 2)), 0.0))
    width = float(loss[-1] - loss[0])
    return (width + min(steps * width, 16 * math.sqrt(steps) * std)) / interval


def _check_float_pld_size(phases, interval: float) -> None:
    buckets = sum(_float_pld_buckets(q, sigma, steps, interval) for q, sigma, steps in phases)
    if not buckets <= FLOAT_PLD_MAX_BUCKETS:
        raise ValueError(f"the float PLD would hold about {buckets:.3g} buckets at interval {interval!r} (at most "
                         f"{FLOAT_PLD_MAX_BUCKETS}); use the certified PLD")


@functools.lru_cache(maxsize=4096)
def pld_epsilon_value(q: float, sigma: float, steps: int, delta: float, interval: float,
                      relation: str = "add_remove") -> float:
    """The float PLD ε (pessimistic, connect-the-dots) of `steps` rounds; the fast path behind `epsilon`.
    ValueError where it would hold more than FLOAT_PLD_MAX_BUCKETS buckets."""
    _check_float_pld_size(((q, sigma, steps),), interval)
    return float(_one_round_pld(q, sigma, interval, relation).self_compose(steps).get_epsilon_for_delta(delta))


def float_pld_history(phases: tuple, interval: float, relation: str = "add_remove"):
    """dp-accounting's pessimistic float PLD of phases ((q, σ, steps), ...) run one after the other: each phase's PLD
    self-composed, then composed (a speed path: no certified figure comes from it). ValueError where it would hold
    more than FLOAT_PLD_MAX_BUCKETS buckets."""
    _check_float_pld_size(phases, interval)
    total = None
    for q, sigma, steps in phases:
        one = _one_round_pld(q, sigma, interval, relation)
        pld = one.self_compose(steps) if steps > 1 else one
        total = pld if total is None else total.compose(pld)
    return total


@functools.lru_cache(maxsize=1024)
def pld_history_epsilon_value(phases: tuple, delta: float, interval: float, relation: str = "add_remove") -> float:
    """PLD ε of phases ((q, σ, steps), ...) run one after the other (`float_pld_history`).
    ValueError where it would hold more than FLOAT_PLD_MAX_BUCKETS buckets."""
    return float(float_pld_history(phases, interval, relation).get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=64)
def _one_round_pld_optimistic(q: float, sigma: float, interval: float, relation: str):
    """One round's optimistic PLD: privacy losses rounded down, no connect-the-dots (a lower estimate)."""
    return _pld.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, sampling_prob=q, value_discretization_interval=interval,
        pessimistic_estimate=False, use_connect_dots=False, neighboring_relation=_DP_RELATIONS[relation])


@functools.lru_cache(maxsize=1024)
def pld_history_epsilon_lower_value(phases: tuple, delta: float, interval: float,
                                    relation: str = "add_remove") -> float:
    """A lower bound on the exact ε(δ) of phases ((q, σ, steps), ...): dp-accounting's optimistic PLD.

    Why: with pessimistic_estimate=False every privacy loss is rounded down to the grid and the truncated tails are
    dropped, so the discretised pair is dominated by the exact one (its hockey-stick divergence is below the exact
    δ(ε) at every ε); domination is kept by composition, so ε_opt(δ) ≤ ε_exact(δ). Used to judge other
    accountants (`privcheck.checks` accountant_agreement); never a reported ε."""
    total = None
    for q, sigma, steps in phases:
        pld = _one_round_pld_optimistic(q, sigma, interval, relation).self_compose(steps)
        total = pld if total is None else total.compose(pld)
    return float(total.get_epsilon_for_delta(delta))


def epsilon_pld(sampling_rate, noise_multiplier, steps, delta, *,
                interval: float = DEFAULT_INTERVAL) -> AccountingRecord:
    """dp-accounting's float PLD ε of T compositions (pessimistic, connect-the-dots): the cross-check
    "pld_float" beside the certified figure, and calibration's fast inner loop."""
    q, sigma, T, delta = _validate(sampling_rate, noise_multiplier, steps, delta)
    interval = check_interval("interval", interval)
    start = time.perf_counter()
    reason = None
    try:
        eps = pld_epsilon_value(q, sigma, T, delta, interval)
        if not math.isfinite(eps) or eps < 0:
            eps, reason = math.inf, f"PLD returned {eps!r}"
    except (ArithmeticError, ValueError, OverflowError, MemoryError) as exc:  # fail closed
        eps, reason = math.inf, f"PLD failed: {exc}"
    return AccountingRecord(
        quantity="epsilon", value=eps, mechanism=MECHANISM, method="pld_float",
        inputs={"sampling_rate": q, "noise_multiplier": sigma, "steps": T, "delta": delta},
        details={"library": "dp-accounting", "interval": interval, "pessimistic": True, "connect_dots": True,
                 "bound": "float estimate of an upper bound (pessimistic discretisation, float FFT)"},
        wall_time_s=time.perf_counter() - start, reason=reason)


@functools.lru_cache(maxsize=512)
def _certified_bounds(phases: tuple, delta: float, relation: str, interval, tolerance: float):
    return pld_certified.certified_epsilon(phases, delta, relation, interval=interval, tolerance=tolerance)


def clear_caches() -> None:
    """Forget every cached PLD result (benchmarks time the computation, not a cache hit)."""
    for fn in (_one_round_pld, pld_epsilon_value, pld_history_epsilon_value, _one_round_pld_optimistic,
               pld_history_epsilon_lower_value, _certified_bounds):
        fn.cache_clear()


def epsilon_pld_certified(phases, delta, *, relation: str = "add_remove", interval: float | None = None,
                          tolerance: float = pld_certified.DEFAULT_TOLERANCE) -> AccountingRecord:
    """Certified ε of phases ((q, σ, steps), ...) run one after the other: the reported DP-SGD/DP-GRPO figure.

    The record's `certified` holds [lower, upper] (lower from a dominated discretisation, upper from a dominating
    one, both composed with proven error bounds); `value` is the upper end. `interval` fixes the lattice (None:
    chosen from the loss spread and refined while the gap exceeds `pld_certified.gap_target`, at most
    `tolerance`). A numerical failure gives ε = inf with a reason."""
    phases = pld_certified.check_phases(tuple((*_validate(q, s, t, delta)[:3],) for q, s, t in phases))
    delta = pld_certified.check_delta("delta", delta)
    if interval is not None:
        interval = check_interval("interval", interval)
    tolerance = v.positive("tolerance", tolerance)
    start = time.perf_counter()
    reason, cert, details = None, None, {}
    try:
        bounds = _certified_bounds(phases, delta, relation, interval, tolerance)
        value = bounds.upper
        cert = Certified.from_bracket(bounds.lower, bounds.upper, "certified_pld", pld_certified.PREC)
        details = dict(bounds.details)
    except (CertificationError, ArithmeticError, ValueError, OverflowError, MemoryError) as exc:  # fail closed
        value, reason = math.inf, f"certified PLD failed: {exc}"
    single = len(phases) == 1
    inputs = ({"sampling_rate": phases[0][0], "noise_multiplier": phases[0][1], "steps": phases[0][2],
               "delta": delta} if single else
              {"phases": [{"sampling_rate": q, "noise_multiplier": s, "steps": t} for q, s, t in phases],
               "delta": delta})
    details.update({"bound": "certified upper bound (upper end of the enclosure)"})
    return AccountingRecord(
        quantity="epsilon", value=value, mechanism=MECHANISM if single else MECHANISM + "_history", method="pld",
        inputs=inputs, neighboring=relation, certified=cert, details=details,
        wall_time_s=time.perf_counter() - start, reason=reason)


# --- RDP (cross-check) ----------------------------------------------------------------------------

class _ExcludedOrders(logging.Filter):
    """Collects (and silences) dp-accounting's 'failed to converge ... Excluding this order' warnings."""

    pattern = re.compile(r"alpha=([0-9.]+)\. Excluding this order")

    def __init__(self):
        super().__init__()
        self.orders: list[float] = []

    def filter(self, record: logging.LogRecord) -> bool:
        m = self.pattern.search(record.getMessage())
        if m:
            self.orders.append(float(m.group(1)))
            return False
        return True


@contextlib.contextmanager
def _collect_excluded_orders():
    logger = logging.getLogger("absl")
    flt = _ExcludedOrders()
    logger.addFilter(flt)
    try:
        yield flt.orders
    finally:
        logger.removeFilter(flt)


# RDP orders: dp-accounting's cost grows with the order (10⁴: 0.07 s, 10⁶: 5 s, 2^60: no answer in a minute,
# 1e300: TypeError inside it) and with their number (10⁴ orders: 12 s); the defaults stop at 1024 (about 160 orders).
RDP_ORDER_MAX = 10 ** 4
RDP_ORDERS_MAX = 1000


def _rdp_record(phases, delta: float, orders, inputs: dict, mechanism: str) -> AccountingRecord:
    allowed = f"a sequence of 1 to {RDP_ORDERS_MAX} orders in (1, {RDP_ORDER_MAX}]"
    try:
        orders = tuple(orders)
    except TypeError:
        raise InvalidParameter("orders", orders, allowed) from None
    if not 1 <= len(orders) <= RDP_ORDERS_MAX or not all(
            isinstance(o, (int, float)) and not isinstance(o, bool) and 1 < o <= RDP_ORDER_MAX for o in orders):
        raise InvalidParameter("orders", orders, allowed)
    start = time.perf_counter()
    acc = rdp.RdpAccountant(orders=list(orders),
                            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    with _collect_excluded_orders() as excluded:
        for q, sigma, steps in phases:
            acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    reason = None
    try:
        eps, order = acc.get_epsilon_and_optimal_order(delta)
        eps, order = float(eps), float(order)
        if not math.isfinite(eps):
            reason = "RDP returned a non-finite epsilon"
            eps = math.inf
    except (ArithmeticError, ValueError) as exc:
        eps, order, reason = math.inf, math.nan, f"RDP failed: {exc}"
    return AccountingRecord(
        quantity="epsilon", value=eps, mechanism=mechanism, method="rdp", inputs=inputs,
        details={"library": "dp-accounting", "order": order, "orders": f"{len(orders)} orders in "
                 f"[{min(orders)}, {max(orders)}]", "conversion": "Balle et al. 2020 (improved)",
                 "excluded_orders": sorted(set(excluded))},
        wall_time_s=time.perf_counter() - start, reason=reason)


def epsilon_rdp(sampling_rate, noise_multiplier, steps, delta, *, orders=DEFAULT_ORDERS) -> AccountingRecord:
    """RDP ε (dp-accounting RdpAccountant, improved conversion); a cross-check, never the reported figure."""
    q, sigma, T, delta = _validate(sampling_rate, noise_multiplier, steps, delta)
    return _rdp_record([(q, sigma, T)], delta, orders,
                       {"sampling_rate": q, "noise_multiplier": sigma, "steps": T, "delta": delta}, MECHANISM)


def epsilon_rdp_history(phases, delta, *, orders=DEFAULT_ORDERS) -> AccountingRecord:
    """RDP ε of phases ((q, σ, steps), ...) run one after the other (cross-check of the history's PLD)."""
    phases = pld_certified.check_phases(tuple((*_validate(q, s, t, delta)[:3],) for q, s, t in phases))
    delta = pld_certified.check_delta("delta", delta)
    return _rdp_record(phases, delta, orders,
                       {"phases": [{"sampling_rate": q, "noise_multiplier": s, "steps": t} for q, s, t in phases],
                        "delta": delta}, MECHANISM + "_history")


# --- exact single round, certified ----------------------------------------------------------------

def _crossing(level: arb, q: arb, s: arb) -> arb:
    """x with log(1 − q + q·e^{(2x−1)/(2σ²)}) = level (the privacy-loss crossing point)."""
    return s * s * (log_excess(level, q) - q.log()) + arb(1) / 2


def single_round_delta_ball(q: float, sigma: float, epsilon: float) -> arb:
    """Exact δ_{q,σ,1}(ε) in closed form (both directions), as an Arb ball at the working precision."""
    q, sigma, _, _ = _validate(q, sigma, 1, 0.5, closed_form=True)
    epsilon = v.nonnegative("epsilon", epsilon)
    qa, s, e = arb(q), arb(sigma), arb(epsilon)
    alpha = e.exp()
    x_ab = _crossing(e, qa, s)
    h_ab = qa * normal_sf((x_ab - 1) / s) - (alpha - 1 + qa) * normal_sf(x_ab / s)
    gap = (-e).exp() - (1 - qa)  # B‖A is positive only where e^{−ε} > 1 − q
    if gap <= 0:
        h_ba = arb(0)
    elif gap > 0:
        x_ba = _crossing(-e, qa, s)
        h_ba = (1 - alpha * (1 - qa)) * normal_cdf(x_ba / s) - alpha * qa * normal_cdf((x_ba - 1) / s)
    else:
        return arb.nan()
    return h_ab.max(h_ba)


def single_round_delta_integral(q: float, sigma: float, epsilon: float, *, prec: int = 256) -> arb:
    """δ_{q,σ,1}(ε) by rigorous integration of (a − e^ε b)₊ and (b − e^ε a)₊ with explicit error terms.

    The integral starts at an exact point c next to the crossing x*; since the integrand vanishes at x*
    and |a − αb| ≤ (1 + α)/(σ√(2π)), moving the endpoint costs at most |c − x*|·(1 + α)/(σ√(2π)). Tails
    beyond ±40σ are bounded by the Mills inequality Φ̄(t) ≤ φ(t)/t.
    """
    q, sigma, _, _ = _validate(q, sigma, 1, 0.5, closed_form=True)
    epsilon = v.nonnegative("epsilon", epsilon)
    with ctx.workprec(prec):
        qa, s, e = arb(q), arb(sigma), arb(epsilon)
        alpha = e.exp()
        norm = 1 / (s * (2 * arb.pi()).sqrt())
        dens_b = lambda z: (-(z * z) / (2 * s * s)).exp() * norm  # noqa: E731
        dens_a = lambda z: (1 - qa) * dens_b(z) + qa * (-((z - 1) * (z - 1)) / (2 * s * s)).exp() * norm  # noqa
        bound = (1 + alpha) * norm
        span = arb(40) * s + 2

        x_ab = _crossing(e, qa, s)
        c = arb(x_ab.mid())
        hi = c.max(arb(1)) + span
        core = integrate(lambda z: dens_a(z) - acb(alpha) * dens_b(z), c, hi, prec=prec,
                         breakpoints=[float(c.mid()) + k * float(sigma) for k in (1, 4, 10)])
        slack = x_ab.rad() * bound
        t_hi = gaussian_tail_bound((hi - 1) / s)          # ∫_hi^∞ a ≤ Φ̄((hi−1)/σ)
        t_lo = alpha * gaussian_tail_bound(hi / s)         # ∫_hi^∞ αb ≤ α Φ̄(hi/σ)
        h_ab = (core - slack - t_lo).union(core + slack + t_hi)

        gap = (-e).exp() - (1 - qa)
        if gap <= 0:
            h_ba = arb(0)
        elif gap > 0:
            x_ba = _crossing(-e, qa, s)
            c2 = arb(x_ba.mid())
            lo = c2.min(arb(0)) - span
            core2 = integrate(lambda z: dens_b(z) - acb(alpha) * dens_a(z), lo, c2, prec=prec,
                              breakpoints=[float(c2.mid()) - k * float(sigma) for k in (1, 4, 10)])
            slack2 = x_ba.rad() * bound
            t2_hi = gaussian_tail_bound(-lo / s)           # ∫_{-∞}^{lo} b ≤ Φ̄(−lo/σ)
            t2_lo = alpha * gaussian_tail_bound(-lo / s)   # ∫_{-∞}^{lo} αa ≤ α Φ̄(−lo/σ) (a ≤ b there up to q)
            h_ba = (core2 - slack2 - t2_lo).union(core2 + slack2 + t2_hi)
        else:
            raise CertificationError("cannot decide the sign of e^{-ε} − (1 − q)")
        return h_ab.nonnegative_part().max(h_ba.nonnegative_part())


def epsilon_single_round_certified(sampling_rate, noise_multiplier, delta) -> AccountingRecord:
    """Exact ε for one round (T = 1), certified: δ_{q,σ,1}(ε) ≤ δ decided in Arb at the reported ε."""
    q, sigma, _, delta = _validate(sampling_rate, noise_multiplier, 1, delta, closed_form=True)
    ok, _, _ = decide(lambda: single_round_delta_ball(q, sigma, EPS_MAX), delta)
    if ok is not True:   # ε* > EPS_MAX: the search domain holds no answer (decided before any search)
        raise InvalidParameter("noise_multiplier", sigma, f"a noise multiplier whose exact ε at delta={delta!r} is at "
                               f"most {EPS_MAX:g} (at sampling_rate={q!r} this one exceeds it)")
    start = time.perf_counter()
    holds = ThresholdPredicate(lambda e: single_round_delta_ball(q, sigma, e), delta)
    est = _epsilon_from_delta_fn(lambda e: delta_single_float(q, sigma, e, "ab"), delta)
    if holds(0.0) is True:
        cert = Certified.from_bracket(0.0, 0.0, "closed_form_arb", holds.precision_bits)
        evals = 1
    else:
        br = certified_crossing(holds, est, domain=(0.0, EPS_MAX), increasing=True)
        cert = Certified.from_bracket(br.fails_end, br.holds_end, "closed_form_arb", holds.precision_bits)
        evals = br.evaluations + 1
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism=MECHANISM, method="exact_single_round",
        inputs={"sampling_rate": q, "noise_multiplier": sigma, "steps": 1, "delta": delta}, certified=cert,
        details={"arb_evaluations": evals}, wall_time_s=time.perf_counter() - start)


# --- small-T second method: hockey-stick recursion by quadrature (floats) -------------------------

def _log_ratio(x, q: float, sigma: float):
    """L(x) = log(a(x)/b(x)) = log(1 − q + q·exp((2x − 1)/(2σ²))), overflow-safe."""
    t = (2 * x - 1) / (2 * sigma * sigma) + math.log(q)
    return np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, t)


def _log_sub_exp(a: float, b: float) -> float:
    """log(e^a − e^b) for a > b (b may be −inf)."""
    return a + math.log1p(-math.exp(b - a))


def delta_single_float(q: float, sigma: float, eps: float, direction: str) -> float:
    """Closed-form H_{e^ε}(A‖B) ("ab") or H_{e^ε}(B‖A) ("ba") in floats, for any real ε.

    Evaluated in log space so that ε up to ~1e4 neither overflows nor cancels to log(0).
    """
    log_1mq = math.log1p(-q) if q < 1 else -math.inf
    log_q = math.log(q)
    if direction == "ab":
        if eps <= log_1mq:  # the loss exceeds ε everywhere: H = 1 − e^ε
            return -math.expm1(eps)
        log_c = _log_sub_exp(eps, log_1mq)               # log(e^ε − 1 + q)
        x = sigma * sigma * (log_c - log_q) + 0.5
        hi = log_q + float(log_ndtr(-(x - 1) / sigma))
        lo = log_c + float(log_ndtr(-x / sigma))
        return math.exp(hi) * -math.expm1(lo - hi) if hi > lo else 0.0
    if -eps <= log_1mq:  # e^{−ε} ≤ 1 − q: the region {b > e^ε a} is empty
        return 0.0
    log_c = _log_sub_exp(-eps, log_1mq)                  # log(e^{−ε} − 1 + q)
    x = sigma * sigma * (log_c - log_q) + 0.5
    first = math.log1p(-math.exp(eps + log_1mq)) + float(log_ndtr(x / sigma))   # (1 − e^ε(1−q))·Φ(x/σ)
    second = eps + log_q + float(log_ndtr((x - 1) / sigma))                      # e^ε q·Φ((x−1)/σ)
    return math.exp(first) * -math.expm1(second - first) if first > second else 0.0


def composed_delta_quadrature(q, sigma, T: int, epsilon: float) -> float:
    """δ_{q,σ,T}(ε) for small T by the recursion δ_T(ε) = E_{x∼A}[δ_{T−1}(ε − L(x))] (and its B‖A twin).

    Each level is one adaptive scipy quadrature over x, so the cost grows like (evaluations)^(T−1): meant
    for T ≤ 3 as an independent check of the PLD figure (floats: a cross-check, not a certificate).
    """
    q, sigma, T, _ = _validate(q, sigma, T, 0.5)
    epsilon = v.finite("epsilon", epsilon)
    if T > 3:
        raise InvalidParameter("steps", T, "1..3 for the quadrature cross-check")
    lo, hi = -40 * sigma, 1 + 40 * sigma
    pts = [0.0, 0.5, 1.0]
    norm = 1 / (sigma * math.sqrt(2 * math.pi))
    dens_b = lambda x: norm * math.exp(-x * x / (2 * sigma * sigma))  # noqa: E731
    dens_a = lambda x: (1 - q) * dens_b(x) + q * norm * math.exp(-(x - 1) ** 2 / (2 * sigma * sigma))  # noqa

    def ab(k, eps):
        if k == 1:
            return delta_single_float(q, sigma, eps, "ab")
        f = lambda x: dens_a(x) * ab(k - 1, eps - float(_log_ratio(x, q, sigma)))  # noqa: E731
        return _quad.quad(f, lo, hi, points=pts, limit=200, epsabs=1e-14, epsrel=1e-10)[0]

    def ba(k, eps):
        if k == 1:
            return delta_single_float(q, sigma, eps, "ba")
        f = lambda x: dens_b(x) * ba(k - 1, eps + float(_log_ratio(x, q, sigma)))  # noqa: E731
        return _quad.quad(f, lo, hi, points=pts, limit=200, epsabs=1e-14, epsrel=1e-10)[0]

    return max(ab(T, epsilon), ba(T, epsilon))


def _epsilon_from_delta_fn(delta_fn, delta: float, hi: float = 1.0) -> float:
    if delta_fn(0.0) <= delta:
        return 0.0
    while delta_fn(hi) > delta:
        hi *= 2
        if hi > 1e4:
            return math.inf
    return brentq(lambda e: math.log(max(delta_fn(e), 1e-300)) - math.log(delta), 0.0, hi,
                  xtol=1e-12, rtol=1e-10)


def epsilon_quadrature(sampling_rate, noise_multiplier, steps, delta) -> AccountingRecord:
    """ε for small T (≤ 3) from the quadrature recursion; a float cross-check of the PLD figure."""
    q, sigma, T, delta = _validate(sampling_rate, noise_multiplier, steps, delta)
    start = time.perf_counter()
    eps = _epsilon_from_delta_fn(lambda e: composed_delta_quadrature(q, sigma, T, e), delta)
    return AccountingRecord(
        quantity="epsilon", value=eps, mechanism=MECHANISM, method="quadrature_recursion",
        inputs={"sampling_rate": q, "noise_multiplier": sigma, "steps": T, "delta": delta},
        details={"library": "scipy.integrate.quad", "bound": "float estimate (cross-check only)"},
        wall_time_s=time.perf_counter() - start)
