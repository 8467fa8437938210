"""Gaussian selection accountants (Report-Noisy-Max and AboveThreshold, after Lebensold et al.), certified in Arb.

Guarantees (pure DP, scores in a public range [a, b], sensitivity 0 < Δ ≤ b − a: every score moves by at
most Δ between neighbours, all of them at once and in any direction):

* **Gaussian Report-Noisy-Max** (`gaussian_rnm_eps`). Add independent N(0, σ²) noise to each of d scores
  and release the arg-max index. The mechanism is ε_RNM-DP (ex-ante: the same bound for every index) with

      ε_RNM = log J(a − b + 2Δ) − log J(a − b),   J(y) = ∫ φ(z)·Φ(z + y/σ)^{d−1} dz.

  Worst case: the released query is at a on D′ and a + Δ on D; every other query is at b on D′ and
  b − Δ on D. Derivation of J's argument: with x = s_i + σz,
  P_s(argmax = i) = ∫ φ(z) Π_{j≠i} Φ(z + (s_i − s_j)/σ) dz; the gaps s_i − s_j are a − b on D′ and
  (a + Δ) − (b − Δ) = a − b + 2Δ on D. d = 1 gives ε = 0 exactly (the output is constant).

* **Gaussian AboveThreshold, ex-post** (`gaussian_at_expost_eps`). The public threshold ρ gets one
  shared draw σ_X·X; round k compares q_k + σ_Z·Z_k with ρ + σ_X·X and the mechanism halts at the first
  round at or above it. Halting at round t costs

      ε_AT(t) = log I(Δ) − log I(0),
      I(v) = ∫ φ(x)·Φ((ρ + σ_X·x − b + v)/σ_Z)^{t−1}·Φ((a + v − ρ − σ_X·x)/σ_Z) dx.

  Worst case: the t − 1 below-threshold queries are at b on D′ and b − Δ on D; the halting query is at
  a on D′ and a + Δ on D. Since
  P_q(halt at t) = ∫ φ(x) Π_{k<t} Φ((ρ + σ_X x − q_k)/σ_Z)·Φ((q_t − ρ − σ_X x)/σ_Z) dx,
  the two sides of the pair give I(0) and I(Δ).

Why these pairs are the worst (sketch; full proof in docs/selection.md). Both output probabilities are
monotone in every score, so for a fixed D′ the worst D moves each score by Δ in the direction favouring
the output, and it remains to maximise the ratio over D′.
RNM: with gaps g = (s_i − s_j)/σ, F(g) = ∫ φ(z) Π Φ(z + g_j) dz and H(g) = log F(g + c·1) − log F(g),
c = 2Δ/σ, ∂_j log F(g) = E_ν[λ(Z + g_j)] (λ = φ/Φ decreasing, ν ∝ φ(z)ΠΦ(z + g_k)); shifting every gap
by c is a shift of z, which moves ν up in likelihood ratio, so ∂_j H ≤ 0 and the supremum over
g_j ≥ (a − b)/σ is at the corner.
AT: writing the ratio as an expectation over the posterior of the noisy threshold (after the change of
variable T → T + Δ), the integrand is increasing and raising a below-threshold score moves the posterior
up in likelihood ratio: worst at q′_k = b. In the halting score u = q′_t − ρ the ratio is
C·P(S_δ ≤ u + 2Δ)/P(S ≤ u), S = σ_X Y + σ_Z Z′ log-concave and S_δ ≤_lr S + Δ, so its log-derivative is
rh_{S_δ}(u + 2Δ) − rh_S(u) ≤ rh_S(u + Δ) − rh_S(u) ≤ 0 (rh: reversed hazard): worst at q′_t = a.
The same monotonicities show that ε_RNM is nondecreasing in d and ε_AT(t) in t.
Assumptions: the idealised real-valued Gaussian mechanism (floating-point samplers are not covered,
docs/selection.md), scores clipped to [a, b], Δ a user-supplied public constant valid for the claimed neighbour
relation.

Certification: each integral is computed with `acb.integral` (through `privcheck.numerics.integrate`) on a
window around the integrand's mode (located in floats by maximising the log-integrand), split around the mode,
and the part outside the window is added as an explicit interval [0, tail]. The tail bound uses only that the
log-integrand f has f″ ≤ −1 (−x²/2 plus concave log Φ terms): beyond a point x0,
f(x) ≤ f(x0) + f′(x0)(x − x0) − (x − x0)²/2, and f(x0), f′(x0) are Arb balls (`_tail`). The window is widened
until the tails are below 2^−prec of the integral, so a mode far from 0 (a narrow or distant bump) costs no
more than one at 0. Both integrands are multiplied by the same exact power of two (which cancels in the ratio)
so that very small integrals stay far above the absolute tolerance. The reported ε is the upper end of the ball
log(I_num) − log(I_den), rounded up to a float; the precision starts at 256 bits and doubles until the ball's
radius is ≤ max(1e-12·ε, ABS_TOL = 1e-30) (absolute for a tiny ε, e.g. a tiny Δ, whose relative radius would
need unbounded precision), failing closed with `CertificationError` past `MAX_PREC`.

Legal range (refused with InvalidParameter before any work): d, t integers in [1, 2^53]; (b − a)/σ ≤ 100 for
RNM; for AT (b − a)/σ_Z ≤ 100, σ_X/σ_Z ≤ 100 and ρ ∈ [b − 100σ_Z, a + 100σ_Z]. All are checked on the exact
rationals of the float inputs.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from fractions import Fraction

from flint import acb, arb, ctx
from scipy.optimize import minimize_scalar
from scipy.special import log_ndtr

from privcheck import validation as v
from privcheck.accounting.records import AccountingRecord
from privcheck.errors import CertificationError, InvalidParameter
from privcheck.numerics.ball import normal_cdf, normal_pdf, normal_sf
from privcheck.numerics.certified import Certified, float_down, float_up
from privcheck.numerics.integrate import integrate, with_tail

__all__ = ["METHOD", "NEIGHBORING", "gaussian_at_expost_eps", "gaussian_rnm_eps", "range_sensitivity", "score_range"]

START_PREC = 256
MAX_PREC = 4096
REL_TOL = 1e-12
ABS_TOL = 1e-30        # absolute resolution of ε: the reported upper end exceeds ε by at most ~2·ABS_TOL
METHOD = "gaussian_selection_integral_arb"
NEIGHBORING = "score_sensitivity"   # NeighboringRelation.SCORE_SENSITIVITY: the relation enters only via Δ
PROOF = "docs/selection.md (Gaussian selection accountants)"


# Legal range (docs/accounting.md, "Legal ranges of the certified Gaussian accountants"): every score distance and
# the noise ratio, in units of the noise, at most RATIO_MAX (the ε there is already in the thousands, and the
# integrals take seconds); counts up to COUNT_MAX = 2^53 (the integers a float holds exactly). Checked exactly.
RATIO_MAX = 100
COUNT_MAX = 2 ** 53


def _at_ranges(rho: float, sigma_X: float, sigma_Z: float, a: float, b: float) -> None:
    A, B, R, SX, SZ = map(Fraction, (a, b, rho, sigma_X, sigma_Z))
    if B - A > RATIO_MAX * SZ:
        raise InvalidParameter("sigma_query", sigma_Z, f"[(b − a)/{RATIO_MAX}, inf) = [{(b - a) / RATIO_MAX!r}, inf)")
    if SX > RATIO_MAX * SZ:
        raise InvalidParameter("sigma_threshold", sigma_X,
                               f"(0, {RATIO_MAX}·sigma_query] = (0, {RATIO_MAX * sigma_Z!r}]")
    if not B - RATIO_MAX * SZ <= R <= A + RATIO_MAX * SZ:
        raise InvalidParameter("threshold", rho, f"[b − {RATIO_MAX}·sigma_query, a + {RATIO_MAX}·sigma_query] = "
                                                 f"[{float(B - RATIO_MAX * SZ)!r}, {float(A + RATIO_MAX * SZ)!r}]")


def _exact_float(*terms, den: float) -> float:
    """(Σ terms)/den computed exactly and rounded once: a user difference such as a − b never rounds (or
    overflows) in floats first. Used only to locate the integrand's mode; the certificate uses Arb balls."""
    return float(sum(Fraction(x) for x in terms) / Fraction(den))


def _nonnegative(cert: Certified) -> Certified:
    """Both ε's are ≥ 0 (I(Δ) ≥ I(0) and J(a − b + 2Δ) ≥ J(a − b): the integrands increase in the shift), so a
    ball reaching below 0 (a tiny ε accepted at its absolute resolution) keeps 0 as its lower end."""
    if cert.lower >= 0:
        return cert
    return Certified(cert.value, 0.0, max(cert.upper, 0.0), cert.method, cert.precision_bits, cert.side)


# --- validation -----------------------------------------------------------------------------------

def score_range(a, b) -> tuple[float, float]:
    allowed = "finite reals a < b"
    for x in (a, b):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
            raise InvalidParameter("range", (a, b), allowed)
    a, b = float(a), float(b)
    if not a < b:
        raise InvalidParameter("range", (a, b), allowed)
    return a, b


def range_sensitivity(sensitivity, a: float, b: float) -> float:
    """Δ in (0, b − a], decided exactly (b − a in floats may round)."""
    allowed = f"(0, b − a] = (0, {b - a!r}]"
    try:
        d = v.positive("sensitivity", sensitivity)
    except InvalidParameter:
        raise InvalidParameter("sensitivity", sensitivity, allowed) from None
    if Fraction(d) > Fraction(b) - Fraction(a):
        raise InvalidParameter("sensitivity", sensitivity, allowed)
    return d


# --- the integrals --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Factor:
    """Φ(alpha·x + beta)^power, with alpha, beta exact functions of the inputs (given as callables in Arb)."""

    alpha: object     # () -> arb, evaluated at the working precision
    beta: object
    alpha_f: float    # float versions, only for locating the mode
    beta_f: float
    power: int


def _log_integrand_float(factors):
    def f(x: float) -> float:
        out = -0.5 * x * x
        for fa in factors:
            if fa.power:
                out += fa.power * float(log_ndtr(fa.alpha_f * x + fa.beta_f))
        return out
    return f


def _mode(factors) -> tuple[float, float, float]:
    """(mode, width, log-peak) of x ↦ φ(x)·Π Φ(αx + β)^p in floats (log-concave: the mode is unique).

    The log-integrand (without −log√(2π)) is f(x) ≤ −x²/2, so f(mode) ≥ f(0) gives |mode| ≤ √(−2f(0)).
    The width is 1/√(−f''(mode)) ≤ 1 (f'' ≤ −1). None of these numbers enters the certificate.
    """
    f = _log_integrand_float(factors)
    f0 = f(0.0)
    if not math.isfinite(f0):
        raise CertificationError("log-integrand is not finite at 0; parameters outside the supported range")
    bound = math.sqrt(-2.0 * f0) + 1.0
    res = minimize_scalar(lambda x: -f(x), bounds=(-bound, bound), method="bounded",
                          options={"xatol": 1e-10 * max(1.0, bound)})
    m = float(res.x)
    if f(0.0) > f(m):
        m = 0.0
    h = 1e-3
    curv = -(f(m + h) - 2 * f(m) + f(m - h)) / (h * h)
    width = 1.0 / math.sqrt(curv) if math.isfinite(curv) and curv >= 1.0 else 1.0
    return m, width, f(m)


def _make_integrand(factors, scale_log2: int):
    """acb integrand 2^−scale_log2 · φ(z) · Π Φ(α z + β)^p, with Φ(u) = erfc(−u/√2)/2 (entire in z)."""
    total_power = sum(fa.power for fa in factors)
    # Exact power of two: identical in numerator and denominator, so it cancels in the ratio.
    c0 = acb(arb((1, -scale_log2 - total_power)) / (2 * arb.pi()).sqrt())
    m = -1 / arb(2).sqrt()
    coeffs = [(acb(fa.alpha() * m), acb(fa.beta() * m), fa.power) for fa in factors if fa.power]

    def g(z: acb) -> acb:
        out = (-(z * z) / 2).exp() * c0
        for A, B, p in coeffs:
            e = (z * A + B).erfc()
            out *= e if p == 1 else e ** p
        return out
    return g


def _f_and_slope(factors, x: arb) -> tuple[arb, arb]:
    """f(x) = −x²/2 + Σ p·log Φ(αx + β) and f′(x) = −x + Σ p·α·φ(u)/Φ(u) as balls (working precision)."""
    f, g = -(x * x) / 2, -x
    for fa in factors:
        if fa.power:
            al = fa.alpha()
            u = al * x + fa.beta()
            cdf = normal_cdf(u)
            f += fa.power * cdf.log()
            g += fa.power * al * (normal_pdf(u) / cdf)
    return f, g


def _tail(factors, x0: float, right: bool) -> arb:
    """Bound on ∫ φ(x)·Π Φ(αx + β)^p dx beyond x0 (to its right or to its left).

    f = log(√(2π)·φ·Π Φ^p) has f″ ≤ −1 (−x²/2 plus concave log Φ terms), so f(x) ≤ f(x0) + g·(x − x0) −
    (x − x0)²/2 with g = f′(x0), and the tail is at most e^{f(x0)}·e^{h²/2}·Φ̄(h), h = −g on the right, h = g on
    the left. That factor decreases in h, so the lower end of the ball for h gives a bound. Past the mode h > 0 and
    e^{h²/2}Φ̄(h) = m(h)/√(2π) ≤ 1/(h√(2π)) (Mills ratio m(h) ≤ 1/h), which avoids multiplying a huge ball by a
    tiny one.
    """
    f, g = _f_and_slope(factors, arb(x0))
    if not (f.is_finite() and g.is_finite()):
        return arb.nan()
    h = arb((-g if right else g).lower())
    if h > 0:
        return f.exp() / (h * (2 * arb.pi()).sqrt())
    return (f + h * h / 2).exp() * normal_sf(h)


def _window_side(factors, m: float, w: float, log_size: float, prec: int, right: bool) -> float:
    """A point x0 = m ± c·w beyond which the certified tail is below 2^−prec·e^{log_size}, doubling c as needed."""
    c = math.sqrt(2.0 * (prec * math.log(2) + 20.0))
    target = arb(log_size - prec * math.log(2) - 5.0).exp()
    for _ in range(200):
        x0 = m + c * w if right else m - c * w
        tail = _tail(factors, x0, right)
        if tail.is_finite() and tail < target:
            return x0
        c *= 1.25
    raise CertificationError("no integration window with a small enough tail")


def _window(num, den, modes, prec: int) -> tuple[float, float]:
    """[lo, hi] covering both modes, with certified tails of both integrands below 2^−prec of their size.

    A window only decides how much is integrated and how much bounded; the tails added are always certified.
    """
    left, right_ = min(modes[0][0], modes[1][0]), max(modes[0][0], modes[1][0])
    los, his = [], []
    with ctx.workprec(prec):
        for factors, (_m, w, peak) in ((num, modes[0]), (den, modes[1])):
            log_size = peak + math.log(w)   # ∫ e^f/√(2π) ≈ e^{peak}·w for a near-Gaussian bump
            los.append(_window_side(factors, left, w, log_size, prec, right=False))
            his.append(_window_side(factors, right_, w, log_size, prec, right=True))
    return min(los), max(his)


def _enclose(factors, *, prec: int, window: tuple[float, float], scale_log2: int,
             breakpoints) -> tuple[arb, arb]:
    """(scaled integral over ℝ, scaled tail bound): ∫ over the window + [0, both tails] (see `_tail`)."""
    lo, hi = window
    with ctx.workprec(prec):   # the integrand's constants must be formed at the working precision
        integrand = _make_integrand(factors, scale_log2)
    core = integrate(integrand, lo, hi, prec=prec, breakpoints=breakpoints)
    with ctx.workprec(prec):
        tail = (_tail(factors, lo, right=False) + _tail(factors, hi, right=True)) * arb((1, -scale_log2))
        if not tail.is_finite():
            raise CertificationError("tail bound is not finite")
        return with_tail(core, arb(0), arb(tail.upper())), tail


def _log_ratio(num, den, *, label: str):
    """Certified ball for log(∫num) − log(∫den) with the precision-doubling loop described above.

    Returns (ε ball, precision, details dict). Acceptance: radius ≤ max(REL_TOL·|ε|, ABS_TOL), so that a tiny
    ε (a tiny Δ) is accepted at its absolute resolution instead of doubling the precision without end.
    """
    m_den, w_den, peak_den = _mode(den)
    m_num, w_num, peak_num = _mode(num)
    scale_log2 = math.floor(peak_den / math.log(2))
    last_error = "not attempted"
    prec = START_PREC
    while prec <= MAX_PREC:
        centres = [(m_den, w_den)] + ([(m_num, w_num)] if abs(m_num - m_den) > w_den / 4 else [])
        bps = sorted({m + k * w for m, w in centres for k in (-12, -4, -1, 0, 1, 4, 12)})
        try:
            window = _window(num, den, ((m_num, w_num, peak_num), (m_den, w_den, peak_den)), prec)
            i_num, tail = _enclose(num, prec=prec, window=window, scale_log2=scale_log2, breakpoints=bps)
            i_den, _ = _enclose(den, prec=prec, window=window, scale_log2=scale_log2, breakpoints=bps)
        except CertificationError as exc:
            last_error = str(exc)
            prec *= 2
            continue
        with ctx.workprec(prec):
            if i_num > 0 and i_den > 0:
                eps = i_num.log() - i_den.log()
                if eps.is_finite() and eps.rad() <= max(arb(REL_TOL) * abs(eps.mid()), arb(ABS_TOL)):
                    unscale = arb((1, scale_log2))
                    details = {
                        "window": list(window), "T": max(abs(window[0]), abs(window[1])),   # window ⊂ [−T, T]
                        "precision_bits": prec, "mode": m_den, "breakpoints": bps,
                        "scale_log2": scale_log2,
                        "numerator": _ball_json(i_num * unscale), "denominator": _ball_json(i_den * unscale),
                        "tail_bound": _ball_json(tail * unscale),
                    }
                    return eps, prec, details
            last_error = f"ε enclosure too wide at {prec} bits: num {i_num}, den {i_den}"
        prec *= 2
    raise CertificationError(f"{label}: no enclosure with radius ≤ max({REL_TOL}·ε, {ABS_TOL}) up to "
                             f"{MAX_PREC} bits ({last_error})")


def _ball_json(x: arb) -> dict:
    return {"lower": float_down(x), "upper": float_up(x), "arb": x.str(30, radius=True)}


# --- public API -----------------------------------------------------------------------------------

def gaussian_rnm_eps(d, sigma, sensitivity, a=0.0, b=1.0) -> AccountingRecord:
    """Certified pure-DP ε of Gaussian Report-Noisy-Max over d queries (ex-ante).

    ε_RNM = log J(a − b + 2Δ) − log J(a − b), J(y) = ∫ φ(z)·Φ(z + y/σ)^{d−1} dz.
    Proof: docs/selection.md.
    """
    d = v.count("queries", d, maximum=COUNT_MAX)
    sigma = v.positive("sigma", sigma)
    a, b = score_range(a, b)
    sensitivity = range_sensitivity(sensitivity, a, b)
    if Fraction(b) - Fraction(a) > RATIO_MAX * Fraction(sigma):
        raise InvalidParameter("sigma", sigma, f"[(b − a)/{RATIO_MAX}, inf) = [{(b - a) / RATIO_MAX!r}, inf)")
    start = time.perf_counter()
    inputs = {"queries": d, "sigma": sigma, "sensitivity": sensitivity, "a": a, "b": b}
    worst = ("selected query at a on D′ and a + Δ on D; every other query at b on D′ and b − Δ on D")
    if d == 1:   # a single query: the arg-max is constant, the output reveals nothing
        cert = Certified.from_ball(arb(0), METHOD, 0, side="upper")
        return AccountingRecord(
            quantity="epsilon", value=cert.value, mechanism="gaussian_report_noisy_max", method=METHOD,
            inputs=inputs, neighboring=NEIGHBORING, certified=cert,
            details={"note": "d = 1: the output is constant, ε = 0 exactly",
                     "guarantee": "pure DP, ex-ante", "worst_case": worst, "proof": PROOF},
            wall_time_s=time.perf_counter() - start)

    def factors(y2):  # J(y) with y = a − b + y2·Δ: Φ(z + y/σ)^{d−1}
        return [_Factor(alpha=lambda: arb(1),
                        beta=lambda: (arb(a) - arb(b) + y2 * arb(sensitivity)) / arb(sigma),
                        alpha_f=1.0, beta_f=_exact_float(a, -b, y2 * Fraction(sensitivity), den=sigma), power=d - 1)]

    eps, prec, details = _log_ratio(factors(2), factors(0), label="gaussian_rnm_eps")
    cert = _nonnegative(Certified.from_ball(eps, METHOD, prec, side="upper"))
    details.update({"numerator_is": "J(a − b + 2Δ)", "denominator_is": "J(a − b)",
                    "guarantee": "pure DP, ex-ante (same bound for every released index)",
                    "worst_case": worst, "proof": PROOF})
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="gaussian_report_noisy_max", method=METHOD,
        inputs=inputs, neighboring=NEIGHBORING, certified=cert, details=details,
        wall_time_s=time.perf_counter() - start)


def gaussian_at_expost_eps(t, rho, sigma_threshold, sigma_query, sensitivity, a=0.0, b=1.0) -> AccountingRecord:
    """Certified pure ex-post ε of Gaussian AboveThreshold halting at round t.

    ε_AT(t) = log I(Δ) − log I(0),
    I(v) = ∫ φ(x)·Φ((ρ + σ_X x − b + v)/σ_Z)^{t−1}·Φ((a + v − ρ − σ_X x)/σ_Z) dx.
    Proof: docs/selection.md.
    """
    t = v.count("halting_time", t, maximum=COUNT_MAX)
    rho = v.finite("threshold", rho)
    sigma_X = v.positive("sigma_threshold", sigma_threshold)
    sigma_Z = v.positive("sigma_query", sigma_query)
    a, b = score_range(a, b)
    sensitivity = range_sensitivity(sensitivity, a, b)
    _at_ranges(rho, sigma_X, sigma_Z, a, b)
    start = time.perf_counter()

    def factors(dv):  # I(v) with v = dv·Δ
        vv = lambda: dv * arb(sensitivity)  # noqa: E731
        return [
            _Factor(alpha=lambda: arb(sigma_X) / arb(sigma_Z),
                    beta=lambda: (arb(rho) - arb(b) + vv()) / arb(sigma_Z),
                    alpha_f=sigma_X / sigma_Z,
                    beta_f=_exact_float(rho, -b, dv * Fraction(sensitivity), den=sigma_Z), power=t - 1),
            _Factor(alpha=lambda: -arb(sigma_X) / arb(sigma_Z),
                    beta=lambda: (arb(a) + vv() - arb(rho)) / arb(sigma_Z),
                    alpha_f=-sigma_X / sigma_Z,
                    beta_f=_exact_float(a, -rho, dv * Fraction(sensitivity), den=sigma_Z), power=1),
        ]

    eps, prec, details = _log_ratio(factors(1), factors(0), label="gaussian_at_expost_eps")
    cert = _nonnegative(Certified.from_ball(eps, METHOD, prec, side="upper"))
    details.update({
        "numerator_is": "I(Δ)", "denominator_is": "I(0)",
        "guarantee": "pure ex-post DP for the output 'halted at round t' (charge ε_AT(t) when t is released)",
        "worst_case": ("below-threshold queries at b on D′ and b − Δ on D; halting query at a on D′ and "
                       "a + Δ on D"),
        "proof": PROOF})
    return AccountingRecord(
        quantity="epsilon", value=cert.value, mechanism="gaussian_above_threshold", method=METHOD,
        inputs={"halting_time": t, "threshold": rho, "sigma_threshold": sigma_X, "sigma_query": sigma_Z,
                "sensitivity": sensitivity, "a": a, "b": b},
        neighboring=NEIGHBORING, certified=cert, details=details,
        wall_time_s=time.perf_counter() - start)
