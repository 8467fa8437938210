"""Accounting for private selection: PrivBoN (exponential mechanism) and PrivITP (ex-post, two phases).

Guarantees (proofs: docs/selection.md):
- PrivBoN with Gumbel scale σ on scores clipped to [r_lo, r_hi] is ε-DP with ε = 2Δ/σ (nominal), and
  with the tight bounded-range loss ε_BoN(n) = log(1 + (n−1)e^{R/σ}) − log(1 + (n−1)e^{(R−2Δ)/σ}),
  R = r_hi − r_lo, for n candidates. Same loss for every output (ex-post = ex-ante).
- PrivITP: Phase 1 releases λ̃ = λ̂ + N(0, σ_X²) ((ε1, δ)-DP, analytic Gaussian with sensitivity Δ);
  Phase 2, given λ̃, is pure ex-post DP with ε2(t) = (t − 1)·κ(λ̃) + κ_acc(λ̃) for acceptance at round t
  and ε2(⊥) = n·κ(λ̃) for the fallback, where c = max(r_hi + σ_Z·L − λ̃, c_min) and
      κ     = log A(Δ) − log A(0),  A(v) ∝ G((λ̃ + c − r_hi + v)/σ_Z) − G((λ̃ − r_hi + v)/σ_Z),
      κ_acc = log B(Δ) − log B(0),  B(v) ∝ G((r_lo + v − λ̃)/σ_Z) − G((r_lo + v − λ̃ − c)/σ_Z),
  G(u) = uΦ(u) + φ(u). One query costs (ε1 + ε2, δ) (mixed composition).
Assumptions: Δ is the public score sensitivity (an assumption about the reward model, not verified);
all constants are public and fixed before data is read; noise is idealised real-valued.
All figures are upper ends of Arb balls rounded up. `PrivITPParams.threshold_width` is the single
definition of c used by both the mechanism and this accountant.

Legal ranges (docs/selection.md, "Legal ranges and what is certified at the edges"): PrivBoN accepts every
σ > 0, 0 < Δ ≤ r_max − r_lo (compared exactly) and n ≥ 1; the PrivITP accountants accept every
`PrivITPParams` and finite λ̃ whose magnitudes lie within `PRIVITP_SCALE` (see `privitp_check_range`), and
refuse anything else with InvalidParameter before any work. Inside these ranges every function returns a
certified value: an enclosure of relative radius ≤ 1e-12, or of absolute radius ≤ 2^-1080 (below the
smallest float) where the value is tiny; the reported float is the enclosure's upper end rounded up.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np
from flint import arb, ctx
from scipy.special import ndtr

from privcheck import validation as v
from privcheck.accounting.gaussian import gaussian_epsilon
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.ball import MAX_PREC, REL_TOL, START_PREC, ThresholdPredicate, erfc, evaluate
from privcheck.numerics.bracket import certified_crossing
from privcheck.numerics.certified import Certified, float_up

__all__ = ["ABS_RADIUS_LOG2", "EX_POST_NEIGHBORING", "KappaPair", "MAX_CANDIDATES", "PRIVITP_SCALE", "PrivITPParams",
    "check_privbon_sigma", "kappa_midpoint_float", "privbon_epsilon", "privbon_sigma", "privitp_check_range",
    "privitp_kappa",
    "privitp_kappa_batch", "privitp_loss", "privitp_loss_batch", "privitp_phase1_epsilon", "privitp_worst_phase2",
    "sensitivity_and_range"]

EX_POST_NEIGHBORING = "score_sensitivity"  # NeighboringRelation.SCORE_SENSITIVITY: enters only through Δ
# The largest number of candidates n (PrivBoN, PrivITP per phase): 2^53, the integers a float holds exactly (n is
# written into records next to floats and enters ε as the ball n − 1 or n·κ); the certified closed forms take any
# n in microseconds, and a mechanism holds n scores per prompt in memory long before that.
MAX_CANDIDATES = 2 ** 53


def _score_range(r_lo, r_hi) -> tuple[float, float]:
    lo, hi = v.finite("r_lo", r_lo), v.finite("r_max", r_hi)
    if not lo < hi:
        raise InvalidParameter("r_max", r_hi, f"(r_lo, inf) with r_lo = {lo}")
    return lo, hi


def _sensitivity(delta_s, r_lo: float, r_hi: float) -> float:
    d = v.positive("sensitivity", delta_s)
    if Fraction(d) > Fraction(r_hi) - Fraction(r_lo):  # exact: the float r_hi − r_lo may round (or overflow)
        raise InvalidParameter("sensitivity", delta_s, f"(0, r_max − r_lo] = (0, {r_hi!r} − {r_lo!r}] "
                               "(at most the score range, compared exactly)")
    return d


# Absolute acceptance: a ball of radius ≤ 2^-1080 (below the smallest positive float, 2^-1074) is accepted even
# when its relative radius is large: its upper end rounded up is the smallest float ≥ the exact value, or the
# next one. Without it, values far below the float range (κ far above the threshold) could never be certified.
ABS_RADIUS_LOG2 = -1080
_ABS_RADIUS = arb(2) ** ABS_RADIUS_LOG2


def _accepted(ball: arb, rel_tol: float) -> bool:
    return ball.is_finite() and (ball.rad() <= _ABS_RADIUS or ball.rad() <= arb(rel_tol) * abs(ball.mid()))


def _certify(compute, *, rel_tol: float = REL_TOL, max_prec: int = MAX_PREC) -> tuple[tuple[arb, ...], int]:
    """Precision doubling until every ball of `compute()` has relative radius ≤ rel_tol or absolute radius
    ≤ 2^ABS_RADIUS_LOG2; CertificationError past max_prec (never reached inside the documented ranges)."""
    prec = START_PREC
    while prec <= max_prec:
        with ctx.workprec(prec):
            balls = compute()
        if all(_accepted(b, rel_tol) for b in balls):
            return balls, prec
        prec *= 2
    raise CertificationError(f"balls did not reach relative radius {rel_tol} (or absolute 2^{ABS_RADIUS_LOG2}) "
                             f"at {max_prec} bits")


def check_privbon_sigma(sigma, sensitivity: float) -> float:
    """σ > 0 with 2Δ/σ (the nominal ε, and a bound on ε_BoN) at most the largest float, compared exactly."""
    sigma = v.positive("sigma", sigma)
    if 2 * Fraction(sensitivity) > Fraction(sys.float_info.max) * Fraction(sigma):
        with ctx.workprec(64):
            low = float_up(2 * arb(sensitivity) / arb(sys.float_info.max))
        raise InvalidParameter("sigma", sigma, f"[{low!r}, inf) at sensitivity={sensitivity!r} (the ε = 2Δ/σ must be "
                                               "a float)")
    return sigma


def sensitivity_and_range(sensitivity, r_lo, r_max) -> tuple[float, float, float | None]:
    """Validate Δ, against the score range when one is given (r_max None: no range, r_hi None)."""
    if r_max is None:
        return v.positive("sensitivity", sensitivity), r_lo, None
    r_lo, r_hi = _score_range(r_lo, r_max)
    return _sensitivity(sensitivity, r_lo, r_hi), r_lo, r_hi


# --- PrivBoN --------------------------------------------------------------------------------------

def _bon_ball(n: int, r_lo: float, r_hi: float, sensitivity: float, sigma) -> arb:
    """ε_BoN(n) = log(1 + m·e^x) − log(1 + m·e^z), m = n − 1, x = R/σ, z = (R − 2Δ)/σ, R = r_hi − r_lo in Arb
    (the float difference is never formed). Written without overflow for any x: with y = 2Δ/σ,
    z ≥ 0: ε = y + log(m + e^-x) − log(m + e^-z);   z < 0: ε = x + log(m + e^-x) − log1p(m·e^z)."""
    if n == 1:
        return arb(0)
    s, m = arb(sigma), arb(n - 1)
    span = arb(r_hi) - arb(r_lo)
    x = span / s
    z = (span - 2 * arb(sensitivity)) / s
    head = (m + (-x).exp()).log()
    if Fraction(r_hi) - Fraction(r_lo) >= 2 * Fraction(sensitivity):   # the sign of z, decided exactly
        return 2 * arb(sensitivity) / s + head - (m + (-z).exp()).log()
    return x + head - (m * z.exp()).log1p()


def privbon_epsilon(sensitivity, sigma, *, candidates=None, r_max=None, r_lo=0.0,
                    mode: str = "exact") -> AccountingRecord:
    """ε of PrivBoN. Mode "exact" with `candidates` and `r_max` charges the certified ε_BoN(n);
    otherwise (or with mode "nominal") the nominal 2Δ/σ. Both are valid upper bounds."""
    if mode not in ("exact", "nominal"):
        raise InvalidParameter("mode", mode, "'exact' or 'nominal'")
    start = time.perf_counter()
    sensitivity, r_lo, r_hi = sensitivity_and_range(sensitivity, r_lo, r_max)
    sigma = check_privbon_sigma(sigma, sensitivity)
    nominal_ball, p0 = evaluate(lambda: 2 * arb(sensitivity) / arb(sigma))
    nominal = Certified.from_ball(nominal_ball, "arb", p0)
    inputs = {"sensitivity": sensitivity, "sigma": sigma, "mode": mode}
    details = {"nominal": nominal.value, "reference": "McSherry & Talwar 2007; bounded range: docs/selection.md"}
    cert = nominal
    method = "exponential_mechanism_nominal"
    if candidates is not None:
        n = v.count("candidates", candidates, maximum=MAX_CANDIDATES)
        inputs["candidates"] = n
        if r_max is None:
            raise InvalidParameter("r_max", None, "a finite upper score bound when candidates is given")
        inputs.update(r_lo=r_lo, r_max=r_hi)
        ball, prec = evaluate(lambda: _bon_ball(n, r_lo, r_hi, sensitivity, sigma))
        exact = Certified.from_ball(ball, "arb", prec)
        details["bounded_range"] = exact.value
        details["bounded_range_certified"] = exact.to_json()
        if mode == "exact":
            cert, method = exact, "bounded_range_exact"
    return AccountingRecord(quantity="epsilon", value=cert.value, mechanism="privbon", method=method,
                            inputs=inputs, neighboring=EX_POST_NEIGHBORING, certified=cert, details=details,
                            wall_time_s=time.perf_counter() - start)


def privbon_sigma(sensitivity, epsilon, *, candidates=None, r_max=None, r_lo=0.0,
                  tight: bool = False) -> AccountingRecord:
    """Gumbel scale σ for a target ε: 2Δ/ε rounded up (default), or the smallest certified σ with
    ε_BoN(n; σ) ≤ ε (`tight=True`, needs `candidates` and `r_max`)."""
    epsilon = v.positive("epsilon", epsilon)
    start = time.perf_counter()
    sensitivity, r_lo, r_hi = sensitivity_and_range(sensitivity, r_lo, r_max)
    if 2 * Fraction(sensitivity) > Fraction(sys.float_info.max) * Fraction(epsilon):
        raise InvalidParameter("epsilon", epsilon, f"[{2 * sensitivity / sys.float_info.max!r}, inf) at sensitivity="
                                                   f"{sensitivity!r} (the σ = 2Δ/ε must be a float)")
    ball, prec = evaluate(lambda: 2 * arb(sensitivity) / arb(epsilon))
    nominal = float_up(ball)  # σ ≥ 2Δ/ε ⇔ 2Δ/σ ≤ ε: round up
    cert = Certified.from_ball(ball, "arb", prec)
    inputs = {"sensitivity": sensitivity, "epsilon": epsilon, "tight": tight}
    method = "nominal"
    if tight:
        if candidates is None or r_max is None:
            raise InvalidParameter("candidates", candidates, "an integer >= 1 (with r_max) for tight calibration")
        n = v.count("candidates", candidates, maximum=MAX_CANDIDATES)
        inputs.update(candidates=n, r_lo=r_lo, r_max=r_hi)
        holds = ThresholdPredicate(lambda s: _bon_ball(n, r_lo, r_hi, sensitivity, s), epsilon)
        br = certified_crossing(holds, nominal, domain=(nominal * 1e-6, nominal), increasing=True)
        cert = Certified.from_bracket(br.fails_end, br.holds_end, "arb_bisection", holds.precision_bits)
        method = "bounded_range_tight"
    return AccountingRecord(quantity="sigma", value=cert.value if tight else nominal, mechanism="privbon",
                            method=method, inputs=inputs, neighboring=EX_POST_NEIGHBORING, certified=cert,
                            details={"nominal": nominal}, wall_time_s=time.perf_counter() - start)


# --- PrivITP --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrivITPParams:
    """Public constants of PrivITP, validated at construction; shared by mechanism and accountant."""

    candidates: int          # n per phase
    beta: float              # χ² regularisation strength (mechanism only: M = c/β)
    sigma_x: float           # Phase-1 Gaussian std on λ̂
    sigma_z: float           # Phase-2 Gaussian std on each score
    headroom: float          # L ≥ 0, in units of σ_Z
    sensitivity: float       # Δ, score sensitivity
    delta: float             # Phase-1 δ
    r_max: float = 1.0       # r_hi
    r_lo: float = 0.0
    c_min: float | None = None

    def __post_init__(self):
        r_lo, r_hi = _score_range(self.r_lo, self.r_max)
        set_ = lambda k, val: object.__setattr__(self, k, val)  # noqa: E731
        set_("candidates", v.count("candidates", self.candidates, maximum=MAX_CANDIDATES))
        set_("beta", v.positive("beta", self.beta))
        set_("sigma_x", v.positive("sigma_x", self.sigma_x))
        set_("sigma_z", v.positive("sigma_z", self.sigma_z))
        set_("headroom", v.nonnegative("headroom", self.headroom))
        set_("sensitivity", _sensitivity(self.sensitivity, r_lo, r_hi))
        set_("delta", v.open_unit("delta", self.delta))
        set_("r_lo", r_lo)
        set_("r_max", r_hi)
        set_("c_min", 1e-12 * (r_hi - r_lo) if self.c_min is None else v.positive("c_min", self.c_min))

    def threshold_width(self, lambda_tilde: float) -> float:
        """c = max(r_hi + σ_Z·L − λ̃, c_min): the one definition used by mechanism and accountant."""
        lt = v.finite("lambda_tilde", lambda_tilde)
        return max(self.r_max + self.sigma_z * self.headroom - lt, self.c_min)

    def to_json(self) -> dict:
        return asdict(self)


# Float rounding of the mechanism's c = fl(fl(r_hi + fl(σ_Z·L)) − λ̃): three roundings, each ≤ 2^-53·|result|
# for a normal result and ≤ 2^-1075 for a subnormal one (covered by the 2^-1000 term of the scale).
_ROUNDING = 2.0 ** -51

# The documented range of the PrivITP accountants: |r_lo|, |r_max|, σ_Z·L, c_min and |λ̃| at most
# 2^128·σ_Z and at most 2^1000 (so the mechanism's float c and the rounding scale stay finite); Δ and c_min at
# least 2^-128·σ_Z and 2^-192·σ_Z. Inside it, the precision the certified evaluation needs is bounded
# (≈ 2·log2 of the largest argument, plus 2^-1080 absolute for tiny κ): every call returns.
PRIVITP_SCALE = {"ratio_log2": 128, "abs_log2": 1000, "sensitivity_ratio_log2": -128, "c_min_ratio_log2": -192}


def _at_most(name: str, value, magnitude: Fraction, sigma: Fraction, what: str):
    s = PRIVITP_SCALE
    if magnitude > Fraction(2) ** s["ratio_log2"] * sigma or magnitude > Fraction(2) ** s["abs_log2"]:
        raise InvalidParameter(name, value, f"{what} at most min(2^{s['ratio_log2']}·sigma_z, 2^{s['abs_log2']}) "
                               "(the certified range of the PrivITP accountant, docs/selection.md)")


@functools.lru_cache(maxsize=256)
def _check_params_range(params: PrivITPParams) -> None:
    s = PRIVITP_SCALE
    sigma = Fraction(params.sigma_z)
    _at_most("r_lo", params.r_lo, abs(Fraction(params.r_lo)), sigma, "|r_lo|")
    _at_most("r_max", params.r_max, abs(Fraction(params.r_max)), sigma, "|r_max|")
    _at_most("headroom", params.headroom, Fraction(params.headroom) * sigma, sigma, "sigma_z·headroom")
    _at_most("c_min", params.c_min, Fraction(params.c_min), sigma, "c_min")
    for name, value, k in (("sensitivity", params.sensitivity, s["sensitivity_ratio_log2"]),
                           ("c_min", params.c_min, s["c_min_ratio_log2"])):
        if Fraction(value) < Fraction(2) ** k * sigma:
            raise InvalidParameter(name, value, f"at least 2^{k}·sigma_z (the certified range of the PrivITP "
                                   "accountant, docs/selection.md)")


def _lambda_limit(params: PrivITPParams) -> float:
    """The largest legal |λ̃| as an exact float (σ_Z·2^128 is a power-of-two scaling: exact, or inf)."""
    return min(params.sigma_z * 2.0 ** PRIVITP_SCALE["ratio_log2"], 2.0 ** PRIVITP_SCALE["abs_log2"])


def privitp_check_range(params: PrivITPParams, lambda_tilde=None) -> None:
    """Raise InvalidParameter unless `params` (and λ̃, when given) lie in the documented certified range
    (`PRIVITP_SCALE`): |r_lo|, |r_max|, σ_Z·L, c_min, |λ̃| ≤ min(2^128·σ_Z, 2^1000); Δ ≥ 2^-128·σ_Z;
    c_min ≥ 2^-192·σ_Z. Checked exactly, before any work."""
    if not isinstance(params, PrivITPParams):
        raise InvalidParameter("params", type(params).__name__, "a PrivITPParams")
    _check_params_range(params)
    if lambda_tilde is not None:
        lt = v.finite("lambda_tilde", lambda_tilde)
        if abs(lt) > _lambda_limit(params):
            _at_most("lambda_tilde", lambda_tilde, abs(Fraction(lt)), Fraction(params.sigma_z), "|lambda_tilde|")


def _rounding_bucket(params: PrivITPParams, lambda_abs: float) -> int:
    """Exponent e with |c_float − c_exact| ≤ 2^e for every λ̃ with |λ̃| ≤ lambda_abs (finite in range)."""
    scale = abs(params.r_max) + abs(params.sigma_z * params.headroom) + lambda_abs + 2.0 ** -1000
    return math.frexp(_ROUNDING * scale)[1]          # _ROUNDING·scale ≤ 2^e, exactly


def _gauss_G(u: arb) -> arb:
    """G(u) = uΦ(u) + φ(u) (G′ = Φ > 0, so a wide ball maps through its endpoints); for u < 0 as
    φ(v)(1 − v·Φ̄(v)/φ(v)), v = −u, whose cancellation (≈ 1/v²) the precision loop absorbs."""
    if u.is_finite() and u.rad() > arb(2) ** (10 - ctx.prec) * (1 + abs(u.mid())):
        return _gauss_G_exact(u.lower()).union(_gauss_G_exact(u.upper()))
    return _gauss_G_exact(u)


_G_CONSTANTS: dict[int, tuple[arb, arb]] = {}


def _gauss_G_exact(u: arb) -> arb:
    if ctx.prec not in _G_CONSTANTS:   # (√2, 1/√(2π)) per precision
        _G_CONSTANTS[ctx.prec] = (arb(2).sqrt(), 1 / (2 * arb.pi()).sqrt())
    root2, inv_root_2pi = _G_CONSTANTS[ctx.prec]
    if u >= 0:
        return u * erfc(-u / root2) / 2 + (-(u * u) / 2).exp() * inv_root_2pi
    v = -u
    pdf = (-(v * v) / 2).exp() * inv_root_2pi
    return pdf * (1 - v * ((erfc(v / root2) / 2) / pdf))


@functools.lru_cache(maxsize=4096)
def _anchors(params: PrivITPParams, bucket: int, prec: int) -> tuple[arb, arb, arb, arb]:
    """G at the λ̃-free arguments of the unclamped case, with c's float rounding (≤ 2^bucket) as a ball:
    (G(top), G(top + Δ/σ_Z), G(bottom), G(bottom + Δ/σ_Z)), top = L + shift/σ_Z,
    bottom = (r_lo − r_hi)/σ_Z − L − shift/σ_Z. Cached per precision: they do not depend on λ̃."""
    with ctx.workprec(prec):
        s = arb(params.sigma_z)
        ds = arb(params.sensitivity) / s
        shift = arb(0, arb(2) ** bucket) / s
        top = arb(params.headroom) + shift
        bottom = (arb(params.r_lo) - arb(params.r_max)) / s - arb(params.headroom) - shift
        return _gauss_G(top), _gauss_G(top + ds), _gauss_G(bottom), _gauss_G(bottom + ds)


def _kappa_balls(p: PrivITPParams, lt: arb, c: float | None, bucket: int, which=(True, True)):
    """(κ, κ_acc) as balls at the working precision (entries not asked for in `which` are None).

    κ = log A(Δ) − log A(0) with A(v) ∝ G(top + v/σ_Z) − G(a0 + v/σ_Z), a0 = (λ̃ − r_hi)/σ_Z;
    κ_acc = log B(Δ) − log B(0) with B(v) ∝ G(b0 + v/σ_Z) − G(bottom + v/σ_Z), b0 = (r_lo − λ̃)/σ_Z.
    Unclamped (c is None), c = r_hi + σ_Z·L − λ̃ up to float rounding, so top = a0 + c/σ_Z and
    bottom = b0 − c/σ_Z do not depend on λ̃ (cached anchors; narrow cell enclosures). Clamped (c = c_min
    given), the general form is used.
    """
    s = arb(p.sigma_z)
    ds = arb(p.sensitivity) / s
    a0 = (lt - arb(p.r_max)) / s
    b0 = (arb(p.r_lo) - lt) / s
    if c is None:
        g_top, g_top_ds, g_bot, g_bot_ds = _anchors(p, bucket, ctx.prec)
    else:
        h = arb(c) / s
        g_top, g_top_ds = _gauss_G(a0 + h), _gauss_G(a0 + h + ds)
        g_bot, g_bot_ds = _gauss_G(b0 - h), _gauss_G(b0 - h + ds)
    kappa = ((g_top_ds - _gauss_G(a0 + ds)).log() - (g_top - _gauss_G(a0)).log()) if which[0] else None
    kappa_acc = ((_gauss_G(b0 + ds) - g_bot_ds).log() - (_gauss_G(b0) - g_bot).log()) if which[1] else None
    return kappa, kappa_acc


@dataclass(frozen=True)
class KappaPair:
    """Certified κ(λ̃) and κ_acc(λ̃) for one released λ̃, with the threshold width c that was used."""

    lambda_tilde: float
    c: float
    kappa: Certified
    kappa_acc: Certified
    kappa_ball: arb
    kappa_acc_ball: arb

    def phase2_ball(self, halting_time: int | None, n: int) -> arb:
        if halting_time is None:
            return arb(n) * self.kappa_ball
        return arb(halting_time - 1) * self.kappa_ball + self.kappa_acc_ball


@functools.lru_cache(maxsize=65536)
def privitp_kappa(params: PrivITPParams, lambda_tilde: float) -> KappaPair:
    """Certified κ and κ_acc at the released λ̃ (cached: the pair is a pure function of public values).

    Legal input: `privitp_check_range(params, λ̃)` (InvalidParameter otherwise, before any work). Each of
    `kappa`/`kappa_acc` is an enclosure [lower, upper] of the exact value with relative radius ≤ 1e-12 or, where
    the value is tiny (κ far above the threshold top is far below the float range), absolute radius
    ≤ 2^-1080; the reported value is the upper end rounded up, so it is never below the exact value.
    """
    privitp_check_range(params, lambda_tilde)
    lambda_tilde = float(lambda_tilde)
    c = params.threshold_width(lambda_tilde)
    clamped = c == params.c_min
    bucket = _rounding_bucket(params, abs(lambda_tilde))
    lt = arb(lambda_tilde)
    try:  # fast path: λ̃-free anchors (cached), c's rounding enclosed as a ball of radius 2^bucket
        if clamped:
            raise CertificationError("clamped: use the exact form")
        (k_ball, ka_ball), prec = _certify(lambda: _kappa_balls(params, lt, None, bucket), max_prec=128)
    except CertificationError:  # exact path: the mechanism's float c itself (narrows with precision)
        (k_ball, ka_ball), prec = _certify(lambda: _kappa_balls(params, lt, c, bucket))
    return KappaPair(lambda_tilde, c, Certified.from_ball(k_ball, "arb_closed_form", prec),
                     Certified.from_ball(ka_ball, "arb_closed_form", prec), k_ball, ka_ball)


# A cell's bound is computed at most at this precision: its width is set by the rounding ball of c, which more
# precision does not shrink; a cell that cannot reach the tolerance falls back to the per-value evaluation.
_CELL_MAX_PREC = 512


@functools.lru_cache(maxsize=1 << 18)
def _cell_upper(params: PrivITPParams, cell: int, log2_step: int) -> tuple[float, float]:
    """Upper bounds of κ and κ_acc over every λ̃ in [cell·2^s, (cell+1)·2^s] (s = log2_step); (inf, inf) when
    the cell cannot be bounded this way (the clamp may bind, or the tolerance is not reached).

    Where c is not clamped, κ is non-increasing and κ_acc non-decreasing in λ̃ (log-concavity of Φ,
    docs/selection.md), so the bounds are κ at the cell's lower end and κ_acc at its upper end, with the
    float rounding of the mechanism's c enclosed as a ball. The caller guarantees |cell| + 1 ≤ 2^53, so both
    ends are exact floats.
    """
    if not abs(cell) + 1 <= 2 ** 53:
        raise InvalidParameter("cell", cell, "an integer with |cell| + 1 <= 2^53")
    step = 2.0 ** log2_step
    lo, hi = cell * step, (cell + 1) * step          # exact: integers below 2^53 times a power of two
    bucket = _rounding_bucket(params, max(abs(lo), abs(hi)))
    # Unclamped on the whole cell iff the exact r_hi + σ_Z·L − hi exceeds c_min by more than c's rounding.
    margin = (Fraction(params.r_max) + Fraction(params.sigma_z) * Fraction(params.headroom) - Fraction(hi)
              - Fraction(2) ** bucket)
    if not margin > Fraction(params.c_min):
        return math.inf, math.inf

    def compute():
        return (_kappa_balls(params, arb(lo), None, bucket, (True, False))[0],
                _kappa_balls(params, arb(hi), None, bucket, (False, True))[1])

    try:
        (k_ball, ka_ball), _ = _certify(compute, rel_tol=1e-9, max_prec=_CELL_MAX_PREC)
    except CertificationError:
        return math.inf, math.inf
    return float_up(k_ball), float_up(ka_ball)


def privitp_kappa_batch(params: PrivITPParams, lambda_tildes, *,
                        log2_step: int = -12) -> tuple[np.ndarray, np.ndarray]:
    """Certified upper bounds on κ and κ_acc for many released λ̃ at once.

    λ̃ values are grouped into the cells of a public dyadic grid (step 2^log2_step); each cell is
    evaluated once, at the end where the loss is largest (monotonicity in λ̃), so the certified bound holds
    for every λ̃ in the cell: exact ≤ batch ≤ (the exact value at that cell end)·(1 + 3e-9), an overcharge of
    at most the loss's variation over one cell (about 2^log2_step · Δ/σ_Z² for κ_acc). Values whose cell
    cannot be used — the clamp of c may bind, |λ̃| ≥ 2^(52 + log2_step) (the cell index would need more than
    53 bits), or the cell misses its tolerance — get the per-value `privitp_kappa` upper end instead. Legal
    input: `privitp_check_range` for every value; results are cached per (params, cell).
    """
    lts = v.real_array("lambda_tildes", lambda_tildes)
    if lts.ndim != 1 or not np.all(np.isfinite(lts)):
        raise InvalidParameter("lambda_tildes", "array", "a 1-D array of finite reals")
    if isinstance(log2_step, bool) or not isinstance(log2_step, int) or not -40 <= log2_step <= 0:
        raise InvalidParameter("log2_step", log2_step, "an integer in [-40, 0]")
    privitp_check_range(params)
    if lts.size and float(np.max(np.abs(lts))) > _lambda_limit(params):
        privitp_check_range(params, float(lts[np.argmax(np.abs(lts))]))
    kappa = np.empty_like(lts)
    kappa_acc = np.empty_like(lts)
    on_grid = np.abs(lts) < 2.0 ** (52 + log2_step)        # then |cell| ≤ 2^52: exact in float64 and int64
    grid_index = np.nonzero(on_grid)[0]
    per_value = np.nonzero(~on_grid)[0].tolist()
    cells = np.floor(lts[grid_index] / 2.0 ** log2_step)   # exact: a power-of-two scaling, no overflow here
    uniq, inverse = np.unique(cells, return_inverse=True)
    for u_index, cell in enumerate(uniq.tolist()):
        k_up, ka_up = _cell_upper(params, int(cell), log2_step)
        members = grid_index[inverse.reshape(-1) == u_index]
        if math.isfinite(k_up) and math.isfinite(ka_up):
            kappa[members], kappa_acc[members] = k_up, ka_up
        else:
            per_value.extend(members.tolist())
    for m in per_value:
        pair = privitp_kappa(params, float(lts[m]))
        kappa[m], kappa_acc[m] = pair.kappa.value, pair.kappa_acc.value
    return kappa, kappa_acc


@functools.lru_cache(maxsize=256)
def _phase1(sigma_x: float, delta: float, sensitivity: float) -> AccountingRecord:
    return gaussian_epsilon(sigma_x, delta, sensitivity)


def privitp_phase1_epsilon(params: PrivITPParams) -> AccountingRecord:
    """(ε1, δ) of releasing λ̃ = λ̂ + N(0, σ_X²): analytic Gaussian at sensitivity Δ (never μ = Δ/σ_X)."""
    return _phase1(params.sigma_x, params.delta, params.sensitivity)


def privitp_loss(params: PrivITPParams, lambda_tilde: float, halting_time: int | None) -> AccountingRecord:
    """Ex-post (ε1 + ε2(t; λ̃), δ) of one PrivITP query that released λ̃ and halted at t (None: fallback)."""
    start = time.perf_counter()
    lambda_tilde = v.finite("lambda_tilde", lambda_tilde)
    if halting_time is not None:
        halting_time = v.count("halting_time", halting_time)
        if halting_time > params.candidates:
            raise InvalidParameter("halting_time", halting_time, f"1..{params.candidates} (or fallback)")
    privitp_check_range(params, lambda_tilde)
    pair = privitp_kappa(params, lambda_tilde)
    eps1 = privitp_phase1_epsilon(params)
    eps2_ball = pair.phase2_ball(halting_time, params.candidates)
    eps2 = Certified.from_ball(eps2_ball, "arb_closed_form", max(pair.kappa.precision_bits,
                                                                  pair.kappa_acc.precision_bits))
    total = Certified.from_ball(arb(eps1.value) + eps2_ball, "arb_sum_of_upper_bounds", eps2.precision_bits)
    return AccountingRecord(
        quantity="epsilon", value=total.value, mechanism="privitp", method="ex_post_mixed_composition",
        inputs={**{k: val for k, val in params.to_json().items() if k != "beta"}, "lambda_tilde": lambda_tilde,
                "halting_time": halting_time if halting_time is not None else "fallback"},
        neighboring=EX_POST_NEIGHBORING, certified=total,
        details={"eps1": eps1.value, "eps1_record": eps1.to_json(), "kappa": pair.kappa.to_json(),
                 "kappa_acc": pair.kappa_acc.to_json(), "eps2_post": eps2.to_json(), "c": pair.c,
                 "delta": params.delta, "ex_post": True,
                 "reference": "docs/selection.md (PrivITP Phase 2 and mixed composition)"},
        wall_time_s=time.perf_counter() - start)


def privitp_loss_batch(params: PrivITPParams, lambda_tildes, halting_times, *,
                       log2_step: int | None = None) -> list[AccountingRecord]:
    """`privitp_loss` for many queries. With `log2_step`, κ and κ_acc come from the monotone-cell batch
    (`privitp_kappa_batch`, slightly conservative, much faster); otherwise each query is exact."""
    lts = v.real_array("lambda_tildes", lambda_tildes)
    if lts.ndim != 1:
        raise InvalidParameter("lambda_tildes", f"array of shape {lts.shape}", "a 1-D array of finite reals")
    ts = list(halting_times)
    if len(ts) != lts.shape[0]:
        raise InvalidParameter("halting_times", len(ts), f"one per lambda_tilde ({lts.shape[0]})")
    checked = []
    for t in ts:   # every halting time is validated before any work
        if t is not None:
            t = v.count("halting_time", t)
            if t > params.candidates:
                raise InvalidParameter("halting_time", t, f"1..{params.candidates} (or fallback)")
        checked.append(t)
    ts = checked
    if log2_step is None:
        return [privitp_loss(params, float(lt), t) for lt, t in zip(lts, ts)]
    start = time.perf_counter()
    kappa, kappa_acc = privitp_kappa_batch(params, lts, log2_step=log2_step)
    eps1 = privitp_phase1_epsilon(params)
    params_json = params.to_json()   # once: asdict per record dominated the batch
    records = []
    for lt, t, k, ka in zip(lts.tolist(), ts, kappa.tolist(), kappa_acc.tolist()):
        eps2 = arb(params.candidates) * arb(k) if t is None else arb(t - 1) * arb(k) + arb(ka)
        eps2_up = float_up(eps2)
        total = float_up(arb(eps1.value) + eps2)
        records.append(AccountingRecord(
            quantity="epsilon", value=total, mechanism="privitp", method="ex_post_mixed_composition_cells",
            inputs={"lambda_tilde": lt, "halting_time": t if t is not None else "fallback",
                    "candidates": params.candidates},
            neighboring=EX_POST_NEIGHBORING,
            details={"eps1": eps1.value, "kappa_upper": k, "kappa_acc_upper": ka, "eps2_post": eps2_up,
                     "delta": params.delta, "ex_post": True, "log2_step": log2_step,
                     "c": params.threshold_width(lt), "params": params_json},
            wall_time_s=(time.perf_counter() - start) / max(1, len(ts))))
    return records


def privitp_worst_phase2(params: PrivITPParams, lambda_tilde: float, rounds: int) -> float:
    """Certified upper bound on the largest Phase-2 loss when the loop is capped at `rounds`:
    (rounds − 1)·κ + max(κ_acc, κ) (acceptance at the last round, or the fallback at rounds·κ)."""
    privitp_check_range(params, lambda_tilde)
    rounds = v.count("rounds", rounds, maximum=params.candidates)   # the loop holds n candidates at most
    pair = privitp_kappa(params, lambda_tilde)
    ball = arb(rounds - 1) * pair.kappa_ball + pair.kappa_acc_ball.max(pair.kappa_ball)
    return float_up(ball)


# --- float speed path (not certified) ---------------------------------------------------------------

def kappa_midpoint_float(params: PrivITPParams, lambda_tilde: float, points: int = 512) -> tuple[float, float]:
    """κ, κ_acc by a `points`-node midpoint rule over U in floats: a speed baseline, NOT a certificate
    (the sign of its error is unknown)."""
    c = params.threshold_width(lambda_tilde)
    u = (np.arange(points) + 0.5) / points
    s, d = params.sigma_z, params.sensitivity
    rej = lambda val: np.mean(ndtr((lambda_tilde + c * u - (params.r_max - val)) / s))  # noqa: E731
    acc = lambda val: np.mean(ndtr((params.r_lo + val - lambda_tilde - c * u) / s))  # noqa: E731
    return float(np.log(rej(d)) - np.log(rej(0.0))), float(np.log(acc(d)) - np.log(acc(0.0)))
