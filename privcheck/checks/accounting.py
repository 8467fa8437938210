"""The `accounting` verification suite: published figures, closed forms and a second library.

References (none of them produced by this library):
- Table VI / VII of Zhao, Januszewicz & Jung, "Reward-Driven Learning under Prompt-Level Differential
  Privacy" (arXiv:2610.07212), with the reproduced figures of docs/accounting.md ("Table VI");
- the JAX-Privacy reference configuration (q=0.1, σ=3, T=512, δ=1e-6 → 3.77, reproduced as 3.7697);
- closed forms evaluated in mpmath at 60 digits; dp-accounting's Gaussian PLD at q = 1.
"""

from __future__ import annotations

import math

import mpmath
from flint import ctx

from privcheck import accounting as acc
from privcheck.artifacts.records import Claim, SuiteResult
from privcheck.checks import Recorder, all_of, at_most, greater, overlaps, within
from privcheck.numerics import crosscheck

__all__ = ["DPSGD_ASSUMPTIONS", "JAX_PRIVACY", "PAPER", "TABLE_VI", "run_suite"]

PAPER = "Zhao, Januszewicz & Jung, arXiv:2610.07212, Table VI/VII"

# (name, n, m, T, σ from Table VII, PLD printed in the paper, PLD reproduced, RDP with dp-accounting 0.6.0,
#  RDP printed in the paper (= dp-accounting 0.4.3 / Opacus 1.6.0))
TABLE_VI = (
    ("math_eps1", 6988, 128, 50, 1.0023417361080647, 1.000, 1.0000, 1.4628, 1.463),
    ("math_eps4.23", 6988, 128, 50, 0.612058477104, 4.235, 4.2349, 5.3225, 5.322),
    ("math_eps8_reference", 6988, 128, 50, 0.4842404738068581, 8.000, 8.0000, 9.8330, 9.830),
    ("math_dpsft_T100", 6988, 128, 100, 0.519267738191411, 8.000, 8.0000, 9.7081, 9.702),
    ("math_coverage_G2", 6988, 512, 50, 0.7022244453430175, 8.000, 7.99998, 9.3410, 9.323),
    ("math_canary_rank4", 6988, 128, 100, 0.612058477104, 5.038, 5.038498, 6.1847, 6.185),
    ("gsm8k_csqa", 6961, 128, 100, 0.5196564674377442, 8.000, 8.0000, 9.7074, 9.701),
)
JAX_PRIVACY = dict(q=0.1, sigma=3.0, T=512, delta=1e-6, pld=3.7697, published=3.77)
DPSGD_ASSUMPTIONS = (
    "Poisson sampling with public rate q over a public slot count n",
    "each record's clipped contribution has L2 norm at most C; noise N(0, σ²C²I)",
    "add/remove-one neighbours at fixed capacity",
    "idealised real-valued Gaussian noise (floating-point sampler gap not covered)",
)


def _mp_analytic_delta(eps, mu):
    return crosscheck.analytic_gaussian_delta(eps, mu, dps=60)


def run_suite(seed: int | None = None) -> SuiteResult:
    rec = Recorder("accounting")
    result = SuiteResult(name="accounting")

    # 1. Table VI: PLD is the reported figure; RDP a cross-check with tolerance.
    for name, n, m, T, sigma, paper, repro, rdp060, rdp_paper in TABLE_VI:
        q, delta = m / n, 1 / (10 * n)
        inputs = {"n": n, "m": m, "q": q, "T": T, "sigma": sigma, "delta": delta}
        event = acc.PoissonGaussianEvent(q, sigma, T)
        pld = acc.epsilon(event, delta)
        floats = acc.epsilon(event, delta, method="pld_float")
        rdp = acc.epsilon(event, delta, method="rdp")
        result.records += [pld, floats, rdp]
        rec.run(f"table_vi.{name}.pld", lambda: all_of(
            within(round(pld.value, 3), paper, 1e-3, "PLD rounded to the paper's 3 decimals"),
            within(pld.value, repro, 1e-4, "PLD against the reproduced 4-decimal figure")),
            reference=PAPER + " (PLD column)", inputs=inputs)
        rec.run(f"table_vi.{name}.certified_vs_float", lambda: _certified_beside(pld, floats.value),
                reference="dp-accounting's float PLD (pessimistic, connect-the-dots) at 1e-4", inputs=inputs)
        rec.run(f"table_vi.{name}.rdp_cross_check", lambda: all_of(
            within(rdp.value, rdp060, 1e-3, "RDP against dp-accounting 0.6.0's figure"),
            within(rdp.value, rdp_paper, 0.03, "RDP against the paper's (0.4.3) figure, stated tolerance 0.03"),
            at_most(pld.value, rdp.value, 1e-6, "RDP must not be below PLD")),
            reference=PAPER + " (RDP column) and docs/accounting.md", inputs=inputs)
        result.claims.append(Claim(
            mechanism="dpgrpo (Poisson-subsampled Gaussian, T rounds)", epsilon=pld.value, delta=delta,
            neighboring=acc.NeighboringRelation.ADD_REMOVE.value, assumptions=DPSGD_ASSUMPTIONS,
            parameters={"configuration": name, "q": q, "sigma": sigma, "T": T,
                        "record": "one prompt with all its rollouts"}, accountant="pld"))

    j = JAX_PRIVACY
    jax = acc.epsilon(acc.PoissonGaussianEvent(j["q"], j["sigma"], j["T"]), j["delta"])
    result.records.append(jax)
    rec.run("jax_privacy_reference.pld", lambda: all_of(
        within(jax.value, j["pld"], 1e-4), within(jax.value, j["published"], 5e-3, "published 3.77")),
        reference="JAX-Privacy reference configuration (published 3.77)", inputs=j)

    # 2. Calibration of σ for the MATH ε=8 row must land on Table VII's σ and never overshoot.
    q, T, delta = 128 / 6988, 50, 1 / 69880
    cal = acc.calibrate_sigma(q, T, delta, 8.0)
    result.records.append(cal)
    below = acc.epsilon(acc.PoissonGaussianEvent(q, cal.value - 1e-5, T), delta)
    rec.run("calibration.math_eps8", lambda: all_of(
        within(cal.value, 0.4842404738068581, 2e-5, "σ against Table VII"),
        at_most(cal.epsilon, 8.0, 0.0, "achieved ε at the returned σ"),
        greater(below.value, 8.0, "ε at σ − 1e-5 must exceed the target (σ is the smallest to tolerance)")),
        reference=PAPER + " (Table VII σ)", inputs={"q": q, "T": T, "delta": delta, "target": 8.0})

    # 3. Exact single round, certified in Arb, against PLD (T = 1), mpmath quadrature and acb.integral.
    for q, sigma, delta in ((128 / 6988, 0.4842404738068581, 1 / 69880), (0.25, 1.144, 1e-3), (1.0, 1.0, 1e-5)):
        inputs = {"q": q, "sigma": sigma, "T": 1, "delta": delta}
        exact = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, 1), delta, method="exact_single_round")
        pld1 = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, 1), delta, method="pld_float")
        cert1 = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, 1), delta)
        result.records += [exact, pld1, cert1]
        cert = exact.certified
        rec.run(f"single_round.q{q:.4g}_s{sigma:.4g}.pld_vs_certified", lambda: all_of(
            at_most(cert.lower, pld1.value, 0.0, "float PLD (an upper bound) must not be below the exact ε"),
            within(pld1.value, cert.upper, 1e-5, "float PLD within 1e-5 of the exact ε"),
            _encloses(cert1, cert.lower, cert.upper, "certified PLD enclosure against the exact one")),
            reference="exact hockey-stick divergence, closed form in Arb ball arithmetic", inputs=inputs)

        def _integral_check(q=q, sigma=sigma, cert=cert):
            eps = cert.upper
            with ctx.workprec(256):
                ball = acc.single_round_delta_ball(q, sigma, eps)
                integral = acc.single_round_delta_integral(q, sigma, eps)
            ref = crosscheck.subsampled_gaussian_delta_single_round(q, sigma, eps, dps=40)
            overlap = bool(ball.overlaps(integral))
            rel = abs(float(ref) - float(integral.mid())) / float(ref)
            return {"passed": overlap and rel < 1e-20, "observed": float(integral.mid()),
                    "expected": float(ref), "tolerance": 1e-20,
                    "message": f"closed form {ball}, acb.integral {integral}, mpmath quad {mpmath.nstr(ref, 25)}"}
        rec.run(f"single_round.q{q:.4g}_s{sigma:.4g}.integral_vs_closed_form", _integral_check,
                reference="mpmath quadrature (40 digits) and acb.integral with explicit tail bounds", inputs=inputs)

    # 4. Small T: quadrature recursion (second method) against PLD.
    for q, sigma, T, delta in ((0.25, 1.144, 2, 1e-3), (128 / 6988, 0.4842404738068581, 2, 1 / 69880)):
        quad = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, T), delta, method="quadrature")
        pld2 = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, T), delta, method="pld_float")
        cert2 = acc.epsilon(acc.PoissonGaussianEvent(q, sigma, T), delta)
        result.records += [quad, pld2, cert2]
        rec.run(f"small_T.q{q:.4g}_T{T}.pld_vs_quadrature", lambda: all_of(
            at_most(quad.value, pld2.value, 1e-9, "float PLD must not be below the quadrature ε"),
            within(pld2.value, quad.value, 1e-5),
            _encloses(cert2, quad.value - 1e-9, quad.value + 1e-9, "certified PLD enclosure against quadrature")),
            reference="hockey-stick recursion δ_T(ε) = E_A[δ_{T−1}(ε − L)] by adaptive quadrature",
            inputs={"q": q, "sigma": sigma, "T": T, "delta": delta})

    # 5. Analytic Gaussian: certified enclosure against the 60-digit mpmath profile; q = 1 PLD agrees.
    for sigma, delta in ((1.0, 1e-5), (3.0, 1e-6), (0.5, 1e-3)):
        g = acc.epsilon(acc.GaussianEvent(sigma), delta)
        result.records.append(g)

        def _gauss_check(g=g, sigma=sigma, delta=delta):
            lo, hi = g.certified.lower, g.certified.upper
            d_hi, d_lo = _mp_analytic_delta(hi, 1 / sigma), _mp_analytic_delta(lo, 1 / sigma)
            ok = d_hi <= delta < d_lo or (lo == hi == 0.0 and d_hi <= delta)
            return {"passed": bool(ok), "observed": [lo, hi], "expected": "δ(lo) > δ ≥ δ(hi)",
                    "tolerance": 0.0, "message": f"δ(hi) = {mpmath.nstr(d_hi, 15)}, δ(lo) = {mpmath.nstr(d_lo, 15)}"}
        rec.run(f"analytic_gaussian.sigma{sigma}_delta{delta}.enclosure", _gauss_check,
                reference="Balle & Wang 2018 Thm 8, evaluated in mpmath at 60 digits",
                inputs={"sigma": sigma, "delta": delta})
        pld_g = acc.epsilon(acc.PoissonGaussianEvent(1.0, sigma, 1), delta, method="pld_float")
        cert_g = acc.epsilon(acc.PoissonGaussianEvent(1.0, sigma, 1), delta)
        rec.run(f"analytic_gaussian.sigma{sigma}_delta{delta}.dp_accounting_q1", lambda: all_of(
            at_most(g.certified.lower, pld_g.value, 0.0), within(pld_g.value, g.value, 1e-5),
            _encloses(cert_g, g.certified.lower, g.certified.upper, "certified PLD (q = 1) against the analytic")),
            reference="dp-accounting Gaussian PLD (q = 1), a different library",
            inputs={"sigma": sigma, "delta": delta})

    # Reference values of the analytic Gaussian mechanism (docs/accounting.md): ε at δ = 1e-5 for
    # μ = Δ/σ ∈ {0.25, 0.5, 1, 2}; σ for ε = 1.
    for mu, expected in ((0.25, 0.926342), (0.5, 1.993091), (1.0, 4.377178), (2.0, 9.997256)):
        g = acc.epsilon(acc.GaussianEvent(1 / mu), 1e-5)
        result.records.append(g)
        rec.run(f"analytic_gaussian.mu{mu}_delta1e-5.published", lambda: within(g.value, expected, 1e-6),
                reference="analytic Gaussian reference values (Balle & Wang 2018; docs/accounting.md)",
                inputs={"mu": mu, "delta": 1e-5})
    sig = acc.gaussian_sigma(1.0, 1e-5)
    result.records.append(sig)
    rec.run("analytic_gaussian.sigma_for_eps1_delta1e-5", lambda: all_of(
        within(sig.value, 3.7306316, 1e-7, "reference value 3.7306316; Balle & Wang 2018 report σ ≈ 3.73"),
        {"passed": bool(_mp_analytic_delta(1.0, 1 / sig.value) <= 1e-5), "observed": sig.value,
         "expected": "δ(1; 1/σ) ≤ 1e-5 at 60 digits", "tolerance": 0.0}),
        reference="Balle & Wang 2018 (analytic Gaussian mechanism)", inputs={"epsilon": 1.0, "delta": 1e-5})

    # 6. Conversions against the formulas in mpmath.
    for eps, delta, k in ((1.0, 1e-5, 2), (0.5, 1e-6, 4), (8.0, 1e-9, 3)):
        grp = acc.group_privacy(eps, delta, k)
        rep = acc.replace_one(eps, delta)
        result.records += [grp, rep]
        with mpmath.workdps(60):
            g_delta = k * mpmath.exp((k - 1) * mpmath.mpf(eps)) * mpmath.mpf(delta)
            r_delta = (1 + mpmath.exp(mpmath.mpf(eps))) * mpmath.mpf(delta)
        rec.run(f"conversions.group_k{k}_eps{eps}", lambda: all_of(
            within(grp.value, k * eps, 0.0), within(grp.details["delta"], float(g_delta), 1e-15 * float(g_delta)),
            {"passed": grp.details["delta"] >= g_delta, "observed": grp.details["delta"],
             "expected": f">= {mpmath.nstr(g_delta, 20)}", "tolerance": 0.0, "message": "rounded up"}),
            reference="group privacy k·ε, k·e^{(k−1)ε}·δ (mpmath, 60 digits)",
            inputs={"epsilon": eps, "delta": delta, "k": k})
        rec.run(f"conversions.replace_one_eps{eps}", lambda: all_of(
            within(rep.value, 2 * eps, 0.0), within(rep.details["delta"], float(r_delta), 1e-15 * float(r_delta)),
            {"passed": rep.details["delta"] >= r_delta, "observed": rep.details["delta"],
             "expected": f">= {mpmath.nstr(r_delta, 20)}", "tolerance": 0.0, "message": "rounded up"}),
            reference="replace-one 2ε, (1+e^ε)δ (mpmath, 60 digits)", inputs={"epsilon": eps, "delta": delta})

    # 7. Events in dp-accounting's own accountant: a two-phase history (an Opacus-style schedule) and the MATH row.
    for label, event, delta in (("history_two_phase", acc.CompositionHistory.parse("1.0:0.05:100,0.8:0.05:100"), 1e-5),
                                ("math_row", acc.PoissonGaussianEvent(128 / 6988, 0.4842404738068581, 50),
                                 1 / 69880)):
        ours = acc.epsilon(event, delta, method="pld_float")
        certified = acc.epsilon(event, delta)
        result.records += [ours, certified]

        def _dp_accounting_check(event=event, delta=delta, ours=ours, certified=certified):
            from dp_accounting.pld import PLDAccountant
            accountant = PLDAccountant()
            accountant.compose(event.to_dp_event())
            theirs = accountant.get_epsilon(delta)
            return all_of(
                within(ours.value, theirs, 1e-9, "epsilon(event, method='pld_float') against PLDAccountant"),
                _certified_beside(certified, theirs))
        rec.run(f"events.{label}.dp_accounting_pld_accountant", _dp_accounting_check,
                reference="dp-accounting's PLDAccountant composing our to_dp_event() (its own composition path)",
                inputs=event.to_json())

    mu = acc.dp_to_gdp(1.0, 1e-5)
    back = acc.gdp_to_dp(mu.value, 1e-5)
    result.records += [mu, back]
    rec.run("conversions.gdp_round_trip", lambda: all_of(
        at_most(back.value, 1.0, 0.0, "the μ returned for (1, 1e-5) must imply ε ≤ 1"),
        within(back.value, 1.0, 1e-8)),
        reference="μ-GDP ↔ (ε, δ), Dong, Roth & Su 2019 Cor. 2.13", inputs={"epsilon": 1.0, "delta": 1e-5})

    result.checks = rec.checks
    result.figures = _figures()
    return result


def _certified_beside(record, float_value: float) -> dict:
    """The certified record carries an enclosure with gap ≤ 1e-3 whose lower end is not above dp-accounting's
    float upper estimate and whose upper end (the reported figure) is at most 1e-3 above it."""
    cert = record.certified
    ok = (cert is not None and record.value == cert.upper and cert.width <= 1e-3
          and cert.lower <= float_value + 1e-9 and cert.upper - float_value <= 1e-3)
    return {"passed": bool(ok), "observed": None if cert is None else [cert.lower, cert.upper],
            "expected": f"lower ≤ {float_value!r}, upper ≤ that + 1e-3, gap ≤ 1e-3", "tolerance": 1e-3,
            "message": "certified PLD enclosure beside dp-accounting's float figure"}


def _encloses(record, lower: float, upper: float, message: str) -> dict:
    """The certified enclosure of `record` intersects [lower, upper] (a reference enclosure of the exact ε)."""
    cert = record.certified
    return overlaps(None if cert is None else [cert.lower, cert.upper], [lower, upper], message)


def _figures() -> dict:
    """ε against σ and against T for the MATH configuration (PLD at interval 1e-3, RDP beside it)."""
    q, delta = 128 / 6988, 1 / 69880
    sigmas = [0.45, 0.5, 0.6, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0]
    steps = [1, 5, 10, 25, 50, 100, 200, 400]

    def series(events):
        return {"PLD (interval 1e-3)": [_num(acc.epsilon(e, delta, interval=1e-3).value) for e in events],
                "RDP": [_num(acc.epsilon(e, delta, method="rdp").value) for e in events]}

    return {
        "epsilon_vs_sigma": {
            "title": "ε vs σ (q = 128/6988, T = 50, δ = 1/69880)", "x_label": "noise multiplier σ",
            "y_label": "ε", "x": sigmas, "series": series([acc.PoissonGaussianEvent(q, s, 50) for s in sigmas])},
        "epsilon_vs_steps": {
            "title": "ε vs T (q = 128/6988, σ = 0.4842, δ = 1/69880)", "x_label": "steps T", "y_label": "ε",
            "x": steps, "log_x": True,
            "series": series([acc.PoissonGaussianEvent(q, 0.4842404738068581, t) for t in steps])},
    }


def _num(x: float):
    return x if math.isfinite(x) else "inf"
