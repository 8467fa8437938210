"""Generic DP-SGD checks (docs/checks.md): they hold for any trainer that Poisson-samples records, clips each
record's contribution to C, adds N(0, σ²C²) once and divides by the public q·n, at the example level (Opacus)
and at the prompt level (DP-GRPO) alike.

=====================  ===================================================================================
check                  what it calls
=====================  ===================================================================================
clip_contract (V2)     ``clip(v, C)``
sensitivity_add_remove ``clipped_sum(items, C)``, ``make_gradient_record(v)``, optional ``record_gradient``
poisson_sampling (V5)  ``sample(n, q)``
record_isolation (V6)  ``record_gradient(item)`` and/or ``contributions(items)``, ``perturb(item)``
public_normalisation   ``noisy_update(items, sigma=0, C, q, n)``, ``make_gradient_record(v)``
noise_calibration      ``privatize(S, sigma, C, q, n)``
fresh_randomness       ``make_randomness(seed=None, release=False)``
accountant_agreement   ``accountant_event``, ``delta``, ``user_epsilon`` (the user's own accountant's ε)
=====================  ===================================================================================

The whole-step checks (`privcheck.checks.whole_step`) complete the generic catalogue; `privcheck.checks.catalogue`
orders them. Imports torch lazily.
"""

from __future__ import annotations

import math
from typing import Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.checks.common import (
    AT_MOST_ZERO,
    EQUAL,
    WITHIN,
    SkipCheck,
    SuiteBindings,
    as_f64,
    assert_no_dropout,
    bound_message,
    evaluate,
    fields_rule,
    max_abs,
    need,
    value_of,
)
from privcheck.checks.precision import resolve_precision, tolerance, tolerances
from privcheck.checks.scheme_report import scheme_report
from privcheck.errors import CannotObserve, InvalidParameter
from privcheck.interrupts import reraise_if_interrupted

__all__ = ["ACCOUNTANT_INTERVAL", "check_accountant_agreement", "check_clip_contract", "check_fresh_randomness",
           "check_noise_calibration", "check_poisson_sampling", "check_public_normalisation",
           "check_record_isolation", "check_sensitivity_add_remove"]


# ------------------------------------------------------------------------------------------------ V2

def check_clip_contract(b: SuiteBindings, precision: str | None = None, *, seed: int = 0, n_dirs: int = 1000,
                        norm_ratio: float | None = None, cosine: float | None = None) -> CheckResult:
    """V2 `clip_contract`: clip(0) = 0 (no NaN); NaN/±inf inputs → 0; ‖v‖ ≤ C → bit-identical output (to v, or
    to v rounded to the precision's working dtype); 1,000 random directions with log10‖v‖ ~ U[−12, 12]:
    ‖out‖ ≤ C·(1 + norm_ratio), cos(out, v) ≥ 1 − cosine. float64: norm_ratio 1e-10, cosine 1e-12; float32 and
    bfloat16 (float32 clip): 1e-5 and 1e-10 (`privcheck.checks.precision`). Reference: the closed-form contract
    of Algorithm 1, line 7. Deterministic (seeded); no false failures."""
    precision = resolve_precision(precision, b)
    norm_ratio = tolerance(precision, "clip_contract", "norm_ratio", norm_ratio)
    cosine = tolerance(precision, "clip_contract", "cosine", cosine)
    working = tolerances(precision)["clip_contract"]["working_dtype"]
    C = b.C if b.C is not None else 1.0
    dim = b.dim or 64
    inputs = {"C": C, "dim": dim, "n_dirs": n_dirs, "seed": seed, "working_dtype": working}

    def fn():
        need(b, "clip")
        import torch

        zero = torch.zeros(dim, dtype=torch.float64)
        out0 = b.clip(zero.clone(), C)
        zero_ok = bool(torch.isfinite(out0).all()) and bool((out0 == 0).all())
        bad_cases = []
        for k, val in enumerate((math.nan, math.inf, -math.inf)):
            v = torch.randn(dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + k))
            v[k % dim] = val
            bad_cases.append(v)
        big = torch.full((dim,), 1e300, dtype=torch.float64)  # finite entries, norm overflows to inf
        bad_cases.append(big)
        zeroed = 0
        for v in bad_cases:
            out = b.clip(v.clone(), C)
            zeroed += int(bool(torch.isfinite(out).all()) and bool((out == 0).all()))
        gen = torch.Generator().manual_seed(seed)
        max_ratio, min_cos, identical_ok, n_inside = 0.0, 1.0, True, 0
        for _ in range(n_dirs):
            d = torch.randn(dim, dtype=torch.float64, generator=gen)
            lognorm = float(torch.rand((), dtype=torch.float64, generator=gen)) * 24 - 12
            v = d / torch.linalg.vector_norm(d) * (10.0 ** lognorm)
            out = b.clip(v.clone(), C)
            o = as_f64(out)
            norm_o = float(torch.linalg.vector_norm(o))
            norm_v = float(torch.linalg.vector_norm(v))
            max_ratio = max(max_ratio, norm_o / C if math.isfinite(norm_o) else math.inf)
            cos = float((o * v).sum()) / (norm_o * norm_v) if norm_o > 0 else -1.0
            min_cos = min(min_cos, cos if math.isfinite(cos) else -1.0)
            if norm_v <= C:
                n_inside += 1
                identical_ok &= bool(torch.equal(out, v)) or bool(torch.equal(out, v.to(getattr(torch, working))))
        passed = (zero_ok and zeroed == len(bad_cases) and identical_ok and max_ratio <= 1 + norm_ratio
                  and min_cos >= 1 - cosine)
        observed = {"max_norm_ratio": max_ratio, "min_cosine": min_cos, "nonfinite_cases_zeroed": zeroed,
                    "zero_case_ok": zero_ok, "inside_bit_identical": identical_ok, "n_inside": n_inside}
        expected = {"max_norm_ratio": "<= 1", "min_cosine": 1.0, "nonfinite_cases_zeroed": len(bad_cases),
                    "zero_case_ok": True, "inside_bit_identical": True}
        n_bad = len(bad_cases)
        rows = [("zero_case_ok", zero_ok, "clip(0) = 0, finite", zero_ok),
                ("nonfinite_cases_zeroed", f"{zeroed} of {n_bad}", f"{n_bad} of {n_bad}", zeroed == n_bad),
                ("inside_bit_identical", f"{identical_ok} over {n_inside} inputs with ‖v‖ ≤ C", True, identical_ok),
                ("max_norm_ratio", max_ratio, f"≤ {1 + norm_ratio!r}", max_ratio <= 1 + norm_ratio),
                ("min_cosine", min_cos, f"≥ {1 - cosine!r}", min_cos >= 1 - cosine)]
        message = bound_message(rows) if not passed else (
            f"clip contract holds: max_norm_ratio {max_ratio:.17g}, min_cosine {min_cos:.17g}, "
            f"{n_bad} of {n_bad} non-finite cases zeroed")
        return {"passed": passed, "observed": observed, "expected": expected,
                "tolerance": {"max_norm_ratio": norm_ratio, "min_cosine": cosine}, "message": message}

    return evaluate(b, "clip_contract", precision, "closed form clip_C(v) = v·min(1, C/‖v‖), non-finite → 0 "
                "(Algorithm 1, line 7)", inputs, fn)


# ------------------------------------------------------------------------------------------------ V3

def check_sensitivity_add_remove(b: SuiteBindings, precision: str | None = None, *, seed: int = 0,
                                 n_base: int = 5, n_gradient_records: int = 20, tol: float | None = None,
                                 clip_norms: Sequence[str] = ("C=0.7", "C_bind", "C_mix")) -> CheckResult:
    """V3 `sensitivity_add_remove`: ‖clipped_sum(base ∪ {a}) − clipped_sum(base)‖/C ≤ 1 + 1e-10 for every
    addition `a` (real records from `additions`, 20 GradientRecords of norm C·e^{3Z}, one of norm 1e12, each
    inserted at a random position) and for the removal of every base item, at C = 0.7, C_bind = 0.25·min‖g‖
    (every real record clipped) and C_mix = median ‖g‖ (the last two need `record_gradient`). `clip_norms`
    selects a subset of these three labels (the bug zoo runs only the C at which a defect shows).
    `tol`: 1e-10 in float64, 1e-6 in float32 and bfloat16 (`privcheck.checks.precision`).
    Reference: the sensitivity bound ‖ḡ‖ ≤ C (Lemma 1). Deterministic; no false failures."""
    precision = resolve_precision(precision, b)
    tol = tolerance(precision, "sensitivity_add_remove", "tol", tol)
    clip_norms = tuple(clip_norms)
    if not clip_norms or not set(clip_norms) <= {"C=0.7", "C_bind", "C_mix"}:
        raise InvalidParameter("clip_norms", clip_norms, "a non-empty subset of ('C=0.7', 'C_bind', 'C_mix')")
    inputs = {"seed": seed, "n_base": n_base, "n_gradient_records": n_gradient_records, "tol": tol,
              "clip_norms": list(clip_norms)}

    def fn():
        need(b, "clipped_sum", "items", "make_gradient_record", "dim")
        import numpy as np
        import torch

        base = list(b.items)[:n_base]
        real_adds = list(b.additions or [])
        Cs = {"C=0.7": 0.7} if "C=0.7" in clip_norms else {}
        if b.record_gradient is not None and {"C_bind", "C_mix"} & set(clip_norms):
            norms = [float(torch.linalg.vector_norm(as_f64(b.record_gradient(it)))) for it in base + real_adds
                     if not hasattr(it, "v")]
            norms = [x for x in norms if math.isfinite(x) and x > 0]
            if norms:
                if "C_bind" in clip_norms:
                    Cs["C_bind"] = 0.25 * min(norms)
                if "C_mix" in clip_norms:
                    Cs["C_mix"] = float(np.median(norms))
        if not Cs:
            raise SkipCheck("C_bind/C_mix need record_gradient and at least one real record with a nonzero gradient")
        rng = np.random.default_rng(seed)
        gen = torch.Generator().manual_seed(seed)
        worst, worst_kind, trials, per_c = -math.inf, None, 0, {}
        for label, C in Cs.items():
            adds = [("real", a) for a in real_adds]
            for _ in range(n_gradient_records):
                d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
                scale = C * math.exp(3 * float(rng.standard_normal()))
                adds.append(("gradient_record", b.make_gradient_record(d / torch.linalg.vector_norm(d) * scale)))
            d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
            adds.append(("adversarial_1e12", b.make_gradient_record(d / torch.linalg.vector_norm(d) * 1e12)))
            s_base = as_f64(b.clipped_sum(list(base), C))
            worst_c = {"add": -math.inf, "remove": -math.inf}
            for kind, a in adds:
                pos = int(rng.integers(0, len(base) + 1))
                s = as_f64(b.clipped_sum(base[:pos] + [a] + base[pos:], C))
                r = float(torch.linalg.vector_norm(s - s_base)) / C - 1
                r = r if math.isfinite(r) else math.inf
                trials += 1
                worst_c["add"] = max(worst_c["add"], r)
                if r > worst:
                    worst, worst_kind = r, kind
            for i in range(len(base)):
                s = as_f64(b.clipped_sum(base[:i] + base[i + 1:], C))
                r = float(torch.linalg.vector_norm(s_base - s)) / C - 1
                r = r if math.isfinite(r) else math.inf
                trials += 1
                worst_c["remove"] = max(worst_c["remove"], r)
                if r > worst:
                    worst, worst_kind = r, "removal"
            per_c[label] = {"C": C, "max_ratio_minus_one_add": worst_c["add"],
                            "max_ratio_minus_one_remove": worst_c["remove"]}
        skipped = [c for c in clip_norms if c not in Cs]
        note = f"; {'/'.join(skipped)} not run (record_gradient not bound)" if skipped else ""
        observed = {"max_ratio_minus_one": worst, "per_C": per_c, "worst_item_kind": worst_kind,
                    "n_trials": trials}
        return {"passed": worst <= tol, "rule": fields_rule(max_ratio_minus_one=AT_MOST_ZERO),
                "observed": observed, "expected": {"max_ratio_minus_one": "<= 0"},
                "tolerance": {"max_ratio_minus_one": tol},
                "message": (f"worst ‖Δ sum‖/C − 1 = {worst:.3g} ({worst_kind}){note}" if worst <= tol else
                            bound_message([("max_ratio_minus_one (‖Δ sum‖/C − 1)", worst, f"≤ {tol!r}", False)])
                            + f", worst case: {worst_kind}{note}")}

    return evaluate(b, "sensitivity_add_remove", precision, "Lemma 1 sensitivity bound ‖ḡ_i‖ ≤ C (closed form)",
                inputs, fn)


# ------------------------------------------------------------------------------------------------ V5

def check_poisson_sampling(b: SuiteBindings, precision: str | None = None, *, n: int = 6, q: float = 0.2,
                           calls: int = 20_000, freq_tol: float = 0.012, corr_tol: float = 0.035
                           ) -> CheckResult:
    """V5 `poisson_sampling`: n = 6, q = 0.2, 20,000 calls of the trainer's own sampler.

    Per-slot inclusion frequency: sd = sqrt(q(1−q)/N) = 0.00283, so 0.012 is 4.24 sd (two-sided 2.2e-5 per
    slot, 1.3e-4 for 6 slots). Off-diagonal correlation of indicators: sd ≈ 1/√N = 0.00707, 0.035 is 4.95 sd
    (7.4e-7 per pair, 1.1e-5 for 15 pairs). Total false-failure probability below 1e-3 (≈ 1.5e-4).
    Reference: independent Bernoulli(q) coins (Algorithm 1, line 2). Precision-independent.

    With `sampling_scheme` bound, the result also names the scheme the loop was observed to iterate
    (`observed["sampling_scheme"]`, one message line) and, for a scheme that is not Poisson, that scheme's own
    figures beside `user_epsilon` (`privcheck.checks.scheme_report`); the verdict is the coins' alone."""
    precision = resolve_precision(precision, b)
    inputs = {"n": n, "q": q, "calls": calls}

    def fn():
        need(b, "sample")
        import numpy as np

        rows = np.empty((calls, n), dtype=np.float64)
        for t in range(calls):
            c = b.sample(n, q)
            arr = np.asarray(c.detach().cpu().numpy() if hasattr(c, "detach") else c).astype(np.float64)
            if arr.shape != (n,):
                raise CannotObserve("the coins of sample(n, q)", f"it returned shape {arr.shape}, not ({n},)")
            rows[t] = arr
        freq = rows.mean(axis=0)
        max_freq = float(np.abs(freq - q).max())
        if np.any(rows.std(axis=0) == 0):
            max_corr = math.inf
        else:
            corr = np.corrcoef(rows, rowvar=False)
            max_corr = float(np.abs(corr[~np.eye(n, dtype=bool)]).max())
        passed = max_freq < freq_tol and max_corr < corr_tol
        observed = {"max_freq_error": max_freq, "max_offdiag_corr": max_corr,
                    "mean_batch_size": float(rows.sum(axis=1).mean())}
        scheme, scheme_line = scheme_report(b)       # what the loop iterates, and its own figures
        if scheme is not None:
            observed["sampling_scheme"] = scheme
        message = bound_message([
            ("max_freq_error (|inclusion frequency − q|)", max_freq, f"< {freq_tol!r}", max_freq < freq_tol),
            ("max_offdiag_corr", max_corr, f"< {corr_tol!r}", max_corr < corr_tol)]) \
            or f"Bernoulli({q}) coins: max_freq_error {max_freq:.3g}, max_offdiag_corr {max_corr:.3g}"
        return {"passed": passed, "observed": observed,
                "rule": fields_rule(max_freq_error={"kind": "below", "bound": freq_tol},
                                max_offdiag_corr={"kind": "below", "bound": corr_tol}),
                "expected": {"max_freq_error": 0.0, "max_offdiag_corr": 0.0, "mean_batch_size": q * n},
                "tolerance": {"max_freq_error": freq_tol, "max_offdiag_corr": corr_tol},
                "message": message + (f"; {scheme_line}" if scheme_line else "")}

    return evaluate(b, "poisson_sampling", precision, "independent Bernoulli(q) coins: binomial frequencies and "
                "zero correlations (closed form)", inputs, fn)


# ------------------------------------------------------------------------------------------------ V6

def check_record_isolation(b: SuiteBindings, precision: str | None = None) -> CheckResult:
    """V6 `record_isolation`: (a) `record_gradient(i)` is bit-identical before and after evaluating `j` and
    `perturb(j)`; (b) `contributions([i, j, k])` and `contributions([i, perturb(j), k])` agree bit for bit on
    i and k. Precondition: the perturbation changes j's own gradient. Reference: (A2) record isolation.
    Bit identity at every precision (a deterministic path computes the same bits whatever its dtype).
    Deterministic; no false failures."""
    precision = resolve_precision(precision, b)

    def fn():
        need(b, "items", "perturb")
        if b.record_gradient is None and b.contributions is None:
            raise SkipCheck("missing binding(s): record_gradient and contributions (need at least one)")
        import torch

        assert_no_dropout(b.model)
        if len(b.items) < 3:
            raise CannotObserve("three records i, j, k", f"items holds {len(b.items)} (V6 needs at least 3)")
        i, j, k = list(b.items)[:3]
        pj = b.perturb(j)
        observed, ok, diffs = {}, True, []
        if b.record_gradient is not None:
            g1 = b.record_gradient(i)
            gj = b.record_gradient(j)
            gpj = b.record_gradient(pj)
            g2 = b.record_gradient(i)
            same = bool(torch.equal(g1, g2))
            effective = not torch.equal(gj, gpj)
            observed.update(function_level_identical=same, perturbation_changes_j=effective)
            diffs.append(max_abs(g1, g2))
            ok &= same and effective
        else:
            observed["function_level_identical"] = None
        if b.contributions is not None:
            c1 = b.contributions([i, j, k])
            c2 = b.contributions([i, pj, k])
            same = bool(torch.equal(c1[0], c2[0])) and bool(torch.equal(c1[2], c2[2]))
            observed["trainer_level_identical"] = same
            diffs += [max_abs(c1[0], c2[0]), max_abs(c1[2], c2[2])]
            ok &= same
        else:
            observed["trainer_level_identical"] = None
        observed["max_abs_diff"] = max(diffs)
        missing = [k for k in ("function_level_identical", "trainer_level_identical") if observed[k] is None]
        diff = observed["max_abs_diff"]
        rows = [(k, f"{observed[k]} (max |Δ| = {diff:.3g})", True, observed[k] is not False)
                for k in ("function_level_identical", "trainer_level_identical")]
        rows.insert(1, ("perturbation_changes_j (precondition)", observed.get("perturbation_changes_j"), True,
                        observed.get("perturbation_changes_j") is not False))
        message = bound_message(rows) if not ok else f"bit-identical (max |Δ| = {diff:.3g})"
        return {"passed": ok, "observed": observed, "expected": "bit-identical", "tolerance": 0.0,
                "message": message + (f"; not run: {missing} (binding missing)" if missing else "")}

    return evaluate(b, "record_isolation", precision, "(A2) record isolation: a record's gradient and clipped "
                "contribution depend only on (θ_t, x_i)", {}, fn)


# ------------------------------------------------------------------------------------------------ V9

def check_public_normalisation(b: SuiteBindings, precision: str | None = None, *, n: int = 16, q: float = 0.25,
                               k: int = 3, C: float = 1.0, ulp_dtype: str | None = None) -> CheckResult:
    """V9 `public_normalisation`: with σ = 0, n = 16, q = 0.25 (q·n = 4), x a GradientRecord with norm 0.5·C
    (so v = x exactly) and k = 3 zero GradientRecords: noisy_update([x]) and noisy_update([x, z1, z2, z3]) are
    bit-identical and within 2 ulp of v/(q·n) elementwise, ulp of `ulp_dtype` (the update's dtype: float64
    here, float32 in V13, where v itself is rounded to float32 on the way in). Reference: closed form v/(q·n)
    with the public divisor (Algorithm 1, line 8). `ulp_dtype` defaults to the precision's (float64, or float32
    for float32 and bfloat16). Deterministic; no false failures."""
    precision = resolve_precision(precision, b)
    ulp_dtype = tolerance(precision, "public_normalisation", "ulp_dtype", ulp_dtype)
    if ulp_dtype not in ("float64", "float32"):
        raise InvalidParameter("ulp_dtype", ulp_dtype, "'float64' or 'float32'")
    inputs = {"n": n, "q": q, "k": k, "C": C, "sigma": 0.0, "ulp_dtype": ulp_dtype}

    def fn():
        need(b, "noisy_update", "make_gradient_record", "dim")
        import torch

        gen = torch.Generator().manual_seed(9)
        d = torch.randn(b.dim, dtype=torch.float64, generator=gen)
        v = d / torch.linalg.vector_norm(d) * (0.5 * C)
        x = b.make_gradient_record(v)
        zeros = [b.make_gradient_record(torch.zeros(b.dim, dtype=torch.float64)) for _ in range(k)]
        ga = b.noisy_update([x], sigma=0.0, C=C, q=q, n=n)
        gb = b.noisy_update([x] + zeros, sigma=0.0, C=C, q=q, n=n)
        identical = bool(torch.equal(ga, gb))
        expect = v / (q * n)
        fi = torch.finfo(getattr(torch, ulp_dtype))
        ulp = fi.eps * expect.abs().clamp_min(fi.tiny)
        ulps = float(((as_f64(ga) - expect).abs() / ulp).max())
        ulps_b = float(((as_f64(gb) - expect).abs() / ulp).max())
        passed = identical and ulps <= 2 and ulps_b <= 2
        observed = {"identical_across_batch_sizes": identical, "max_ulp_vs_public_divisor": max(ulps, ulps_b),
                    "batch_sizes": [1, 1 + k]}
        return {"passed": passed, "observed": observed,
                "rule": fields_rule(identical_across_batch_sizes=EQUAL, max_ulp_vs_public_divisor=AT_MOST_ZERO),
                "expected": {"identical_across_batch_sizes": True, "max_ulp_vs_public_divisor": 0},
                "tolerance": {"max_ulp_vs_public_divisor": 2},
                "message": bound_message([
                    ("identical_across_batch_sizes", f"{identical} (batch sizes 1 and {1 + k})", True, identical),
                    (f"max_ulp_vs_public_divisor (ulp of {ulp_dtype}, divisor q·n = {q * n:g})",
                     max(ulps, ulps_b), "≤ 2", ulps <= 2 and ulps_b <= 2)])
                or f"v/(q·n) within {max(ulps, ulps_b):.3g} ulp, identical across batch sizes 1 and {1 + k}"}

    return evaluate(b, "public_normalisation", precision, "closed form v/(q·n) with the public divisor q·n", inputs, fn)


# ----------------------------------------------------------------------------------------------- V10

def check_noise_calibration(b: SuiteBindings, precision: str | None = None, *, sigma: float = 0.8,
                            C: float = 0.25, q: float = 0.25, n: int = 16, min_samples: int = 2 ** 17,
                            seed: int = 0) -> CheckResult:
    """V10 `noise_calibration`: σ = 0.8, C = 0.25, q·n = 4, S = 0, ≥ 2^17 noise coordinates (repeated calls on a
    vector of length `dim`); then a random S (≥ 2^17 coordinates) for the mean.

    Requirements: sample std within 1% of σC/(q·n) (sd of the relative error ≈ 1/√(2N) = 0.00195, so 1% is
    5.1 sd, false failure ≈ 3e-7); |mean| ≤ 5·σC/(q·n)/√N (5.7e-7); mean(ĝ·q·n − S) within 5·σC/√N (5.7e-7).
    Total false-failure probability ≈ 1.5e-6. Reference: N(0, σ²C²) before division by q·n (Algorithm 1, line 8).
    Precision-independent (the statistics are computed in float64 from the returned draws).
    """
    precision = resolve_precision(precision, b)
    inputs = {"sigma": sigma, "C": C, "q": q, "n": n, "min_samples": min_samples}

    def fn():
        need(b, "privatize")
        import torch

        dim = b.dim or min_samples
        calls = -(-min_samples // dim)
        qn = q * n
        draws = [as_f64(b.privatize(torch.zeros(dim, dtype=torch.float64), sigma=sigma, C=C, q=q, n=n))
                 for _ in range(calls)]
        z = torch.cat(draws)
        N = z.numel()
        target = sigma * C / qn
        std = float(z.std())
        mean = float(z.mean())
        gen = torch.Generator().manual_seed(seed)
        resid = []
        dtype = None
        for _ in range(calls):
            S = torch.randn(dim, dtype=torch.float64, generator=gen) * 3
            out = b.privatize(S.clone(), sigma=sigma, C=C, q=q, n=n)
            dtype = str(out.dtype)
            resid.append(as_f64(out) * qn - S)
        r = torch.cat(resid)
        mean_resid = float(r.mean())
        ratio = std / target
        mean_z = mean / (target / math.sqrt(N))
        resid_z = mean_resid / (sigma * C / math.sqrt(r.numel()))
        passed = abs(ratio - 1) <= 0.01 and abs(mean_z) <= 5 and abs(resid_z) <= 5
        observed = {"std_ratio": ratio, "mean_z": mean_z, "offset_mean_z": resid_z, "noise_dtype": dtype,
                    "n_samples": N}
        return {"passed": passed, "observed": observed, "rule": fields_rule(std_ratio=WITHIN, mean_z=WITHIN,
                                                                        offset_mean_z=WITHIN),
                "expected": {"std_ratio": 1.0, "mean_z": 0.0, "offset_mean_z": 0.0},
                "tolerance": {"std_ratio": 0.01, "mean_z": 5, "offset_mean_z": 5},
                "message": bound_message([
                    ("std_ratio (sample std / (σC/(q·n)))", ratio, "1 ± 0.01", abs(ratio - 1) <= 0.01),
                    ("mean_z", mean_z, "|·| ≤ 5", abs(mean_z) <= 5),
                    ("offset_mean_z (mean of ĝ·q·n − S)", resid_z, "|·| ≤ 5", abs(resid_z) <= 5)])
                or f"std_ratio {ratio:.5g}, mean_z {mean_z:.3g}, offset_mean_z {resid_z:.3g} over {N} samples"}

    return evaluate(b, "noise_calibration", precision, "closed form: std σ·C/(q·n), mean S/(q·n)", inputs, fn)


# ----------------------------------------------------------------------------------------------- V11

def check_fresh_randomness(b: SuiteBindings, precision: str | None = None, *, p: int = 4096, n: int = 256,
                           q: float = 0.5, seed: int = 1234) -> CheckResult:
    """V11 `fresh_randomness`: in default (OS-entropy) mode two consecutive noise draws (S = 0, p ≥ 4096) have
    |corr| ≤ 6/√p and differ, two consecutive coin vectors (n = 256, q = 0.5) differ, two fresh instances give
    different first draws of both; two seeded instances with the same seed give identical draws and report
    `privacy_release = False` (default instances report True); a release-mode constructor given a seed
    raises. Under independence corr ~ N(0, 1/p): false failure 2·Φ(−6) ≈ 2e-9 per pair; equal coin vectors
    have probability 2^-256. Reference: (A3) fresh hidden randomness. Precision-independent."""
    precision = resolve_precision(precision, b)
    inputs = {"p": p, "n": n, "q": q, "seed": seed}

    def fn():
        need(b, "make_randomness")
        import torch

        dim = b.dim or p
        calls = -(-p // dim)

        def noise(h):
            return torch.cat([as_f64(h.privatize(torch.zeros(dim, dtype=torch.float64), sigma=1.0, C=1.0, q=1.0,
                                               n=1)) for _ in range(calls)])

        def corr(a, c):
            a, c = a - a.mean(), c - c.mean()
            den = float(torch.linalg.vector_norm(a) * torch.linalg.vector_norm(c))
            return float((a * c).sum()) / den if den > 0 else 1.0

        bound = 6 / math.sqrt(calls * dim)
        h1 = b.make_randomness()
        z1, z2 = noise(h1), noise(h1)
        c1, c2 = h1.sample_coins(n, q), h1.sample_coins(n, q)
        h2 = b.make_randomness()
        z3, c3 = noise(h2), h2.sample_coins(n, q)
        within = corr(z1, z2)
        across = corr(z1, z3)
        coins_equal_within = bool(torch.equal(c1, c2))
        coins_equal_across = bool(torch.equal(c1, c3))
        s1, s2 = b.make_randomness(seed=seed), b.make_randomness(seed=seed)
        seeded_same = bool(torch.equal(noise(s1), noise(s2))) and bool(torch.equal(s1.sample_coins(n, q),
                                                                                   s2.sample_coins(n, q)))
        seeded_flagged = (s1.privacy_release is False) and (s2.privacy_release is False)
        default_release = (h1.privacy_release is True) and (h2.privacy_release is True)
        try:
            b.make_randomness(seed=seed, release=True)
            release_refuses_seed = False
        except Exception as exc:  # noqa: BLE001 - any refusal counts; the type is not part of the contract here
            reraise_if_interrupted(exc)
            release_refuses_seed = True
        passed = (abs(within) <= bound and abs(across) <= bound and not torch.equal(z1, z2)
                  and not coins_equal_within and not coins_equal_across and seeded_same and seeded_flagged
                  and default_release and release_refuses_seed)
        observed = {"noise_corr_within_run": within, "noise_corr_across_runs": across,
                    "coins_equal_within_run": coins_equal_within, "coins_equal_across_runs": coins_equal_across,
                    "seeded_identical": seeded_same, "seeded_flagged": seeded_flagged,
                    "default_privacy_release": default_release, "release_refuses_seed": release_refuses_seed}
        return {"passed": passed, "observed": observed,
                "expected": {"noise_corr": 0.0, "coins_equal": False, "seeded_identical": True,
                             "seeded_flagged": True, "default_privacy_release": True,
                             "release_refuses_seed": True},
                "tolerance": {"noise_corr": bound},
                "message": bound_message([
                    ("noise_corr_within_run", within, f"|·| ≤ {bound:.3g}", abs(within) <= bound),
                    ("noise_corr_across_runs", across, f"|·| ≤ {bound:.3g}", abs(across) <= bound),
                    ("noise_draws_equal_within_run", bool(torch.equal(z1, z2)), False, not torch.equal(z1, z2)),
                    ("coins_equal_within_run", coins_equal_within, False, not coins_equal_within),
                    ("coins_equal_across_runs", coins_equal_across, False, not coins_equal_across),
                    ("seeded_identical", seeded_same, True, seeded_same),
                    ("seeded_flagged (privacy_release False)", seeded_flagged, True, seeded_flagged),
                    ("default_privacy_release", default_release, True, default_release),
                    ("release_refuses_seed", release_refuses_seed, True, release_refuses_seed)])
                or f"fresh draws: |corr| ≤ {max(abs(within), abs(across)):.3g} (bound {bound:.3g}), coins differ, "
                   "seeded handles reproducible and flagged"}

    return evaluate(b, "fresh_randomness", precision, "(A3) fresh hidden randomness: independent draws have "
                "correlation ~ N(0, 1/p)", inputs, fn)


# --------------------------------------------------------------------------------------- accountant

ACCOUNTANT_INTERVAL: float | None = None   # privcheck's reported figure: the certified PLD's own default grid


def check_accountant_agreement(b: SuiteBindings, precision: str | None = None, *,
                               interval: float | None = ACCOUNTANT_INTERVAL) -> CheckResult:
    """`accountant_agreement`: the ε the user's own accountant reports (`user_epsilon`, a float or a callable
    returning one, or a record with `.value`) for the user's run (`accountant_event`, a `PoissonGaussianEvent`
    or `CompositionHistory` at the user's q, σ, T, and `delta`) against privcheck's certified PLD of the same
    event (`privcheck.accounting.epsilon(event, delta)`, an enclosure [lower, upper] of the exact ε).

    Verdict: fail when the user's ε is below the enclosure's lower end, a proven lower bound of the exact ε: the
    user's accountant then under-reports the privacy loss. Pass otherwise; a value above privcheck's (a looser
    accountant, e.g. RDP) passes with the gap reported; a value inside the enclosure passes as "not provably
    below" (the message says so). `interval` fixes the certified PLD's lattice (None: its default, refined to a
    gap ≤ 1e-3). NaN fails; +inf passes (it claims nothing). Deterministic; no false failures (the bound is a
    proof, not a statistic). Precision-independent."""
    precision = resolve_precision(precision, b)
    if interval is not None and not (isinstance(interval, float) and 0 < interval <= 1e-2):
        raise InvalidParameter("interval", interval, "None or a float in (0, 1e-2]")
    inputs = {"interval": interval}

    def fn():
        need(b, "accountant_event", "delta", "user_epsilon")
        from privcheck.accounting import CompositionHistory, PoissonGaussianEvent, epsilon

        event = b.accountant_event
        if not isinstance(event, (PoissonGaussianEvent, CompositionHistory)):
            raise InvalidParameter("accountant_event", type(event).__name__,
                                   "a PoissonGaussianEvent or CompositionHistory (the user's q, σ, T)")
        raw = b.user_epsilon() if callable(b.user_epsilon) else b.user_epsilon
        user = value_of(raw)
        ours_rec = epsilon(event, b.delta, **({} if interval is None else {"interval": interval}))
        ours = float(ours_rec.value)
        inputs.update(event=event.to_json(), delta=b.delta)
        lower = ours_rec.certified.lower if ours_rec.certified is not None else 0.0
        band = ours - lower
        if math.isnan(user):
            passed, verdict = False, f"user_epsilon: nan (bound: a number ≥ {lower!r}, the certified lower end)"
        elif not math.isfinite(ours):
            passed, verdict = False, (f"privcheck_epsilon: {ours!r} (bound: finite); privcheck's PLD failed "
                                      f"({ours_rec.reason}), nothing to compare with")
        else:
            gap = user - ours
            passed = user >= lower
            if gap >= 0:
                verdict = f"user's ε is {gap:.6g} above privcheck's certified PLD (safe side)"
            elif passed:
                verdict = (f"user's ε is {-gap:.3g} below privcheck's certified upper end, inside its enclosure "
                           f"(width {band:.3g}, lower end {lower:.6g}): not provably below the exact ε")
            else:
                verdict = (f"user_epsilon: {user!r} (bound: ≥ {lower!r}, the certified lower end of the exact ε); "
                           f"user's ε is {-gap:.6g} below privcheck's PLD: the user's accountant under-reports ε")
        gap = user - ours
        observed = {"user_epsilon": user, "privcheck_epsilon": ours, "privcheck_lower_bound": lower, "gap": gap,
                    "relative_gap": gap / ours if ours and math.isfinite(ours) and math.isfinite(gap) else None,
                    "steps": int(event.steps), "delta": float(b.delta)}
        scheme = getattr(b, "sampling_scheme", None)
        if scheme is not None and scheme.scheme != "poisson":
            # both figures here are Poisson ones: say so where the user reads them
            observed["sampling_scheme"] = scheme.scheme
            verdict += (f"; note: the loop iterates a {scheme.scheme} loader, not Poisson sampling: both figures "
                        "describe a Poisson run (poisson_sampling reports the observed scheme's own figures)")
        return {"passed": passed, "observed": observed,
                "expected": {"user_epsilon": f">= {lower!r} (the certified lower bound; privcheck's ε {ours!r})"},
                "tolerance": {"below_privcheck": band, "rule": "the certified PLD enclosure's lower end"},
                "message": verdict}

    return evaluate(b, "accountant_agreement", precision, "privcheck's certified PLD enclosure of the exact ε "
                    "(docs/accounting.md, \"Certified PLD\"; docs/checks.md)", inputs, fn)
