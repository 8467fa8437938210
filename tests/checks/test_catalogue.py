"""The split catalogue (generic DP-SGD vs GRPO-specific checks, privcheck's self-check apart), the precision table
and `precision` of every check, and `accountant_agreement` against the user's own accountant (docs/checks.md).

Reference values come from independent libraries: dp-accounting's PLDAccountant (its own composition path) for
privcheck's PLD figure, dp-accounting's RDP accountant and Opacus's RDP accountant as users' accountants."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from privcheck import accounting as acc
from privcheck.checks import catalogue, precision, training
from privcheck.checks.training import SuiteBindings
from privcheck.errors import InvalidParameter

Q, SIGMA, T, DELTA = 0.01, 1.0, 50, 1e-5          # a small DP-SGD run: PLD in ~1 s, cached for the module
INTERVAL = 1e-4


def _dp_event():
    import dp_accounting

    return dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(SIGMA))


@pytest.fixture(scope="module")
def oracle_pld():
    """dp-accounting's PLDAccountant composing the round T times (not privcheck's code path)."""
    from dp_accounting.pld import PLDAccountant

    a = PLDAccountant(value_discretization_interval=INTERVAL)
    a.compose(_dp_event(), T)
    return a.get_epsilon(DELTA)


def user(eps):
    return SuiteBindings(accountant_event=acc.PoissonGaussianEvent(Q, SIGMA, T), delta=DELTA, user_epsilon=eps)


# ------------------------------------------------------------------------------------------------ catalogue

def test_catalogue_split_and_order():
    generic = ["clip_contract", "sensitivity_add_remove", "poisson_sampling", "record_isolation",
               "public_normalisation", "noise_calibration", "fresh_randomness", "accountant_agreement"]
    whole = list(catalogue.WHOLE_STEP_CHECKS) + ["run_sensitivity", "run_public_outputs", "run_noise",
                                                 "run_poisson_sampling"]
    assert list(training.DPSGD_CHECKS) == generic + whole
    assert list(training.GRPO_CHECKS) == ["loss_reference", "nonprivate_equivalence", "constant_reward_groups",
                                          "chunk_identity"]
    assert list(training.CHECKS) == generic + whole + list(training.GRPO_CHECKS)
    assert training.check_names() == tuple(training.CHECKS)
    # privcheck's test of its own accountant (Table VI rows) is not a check of the user's trainer
    assert "accountant_reference" not in training.CHECKS and list(training.SELF_CHECKS) == ["accountant_reference"]
    assert training.SELF_CHECKS["accountant_reference"] is training.check_accountant_reference


def test_whole_step_checks_registered_when_present():
    from privcheck.checks import whole_step

    assert whole_step.WHOLE_STEP_CHECKS and set(whole_step.WHOLE_STEP_CHECKS) <= set(training.DPSGD_CHECKS)
    for name, check in whole_step.WHOLE_STEP_CHECKS.items():
        assert training.CHECKS[name] is check
        assert dict(precision.tolerances("float32")[name]) == whole_step.WHOLE_STEP_TOLERANCES["float32"]


def test_run_suite_selects_checks_and_validates_before_running():
    calls = []
    b = SuiteBindings(clip=lambda v, C: calls.append(1) or v)
    with pytest.raises(InvalidParameter, match="checks"):
        training.run_suite(b, checks=["clip_contract", "no_such_check"])
    with pytest.raises(InvalidParameter, match="precision"):
        training.run_suite(b, precision="float16")
    with pytest.raises(InvalidParameter, match="bindings"):
        training.run_suite(object())
    assert calls == []
    results = training.run_suite(SuiteBindings(), checks=["poisson_sampling", "accountant_reference"])
    assert [r.name for r in results] == ["poisson_sampling", "accountant_reference"]
    assert {r.status for r in results} == {"skipped"}


# ------------------------------------------------------------------------------------------------ precision

def clip32(v, C):
    """A correct clip computed in float32 (as a float32 trainer clips)."""
    x = v.to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        return torch.zeros_like(x)
    n = torch.linalg.vector_norm(x)
    if not bool(torch.isfinite(n)):
        return torch.zeros_like(x)
    return x * (C / n) if n > C else x.clone()


def test_precision_table_covers_every_check_and_keeps_float64():
    assert precision.PRECISIONS == ("float64", "float32", "bfloat16")
    for p in precision.PRECISIONS:
        assert set(precision.tolerances(p)) >= {"loss_reference", "clip_contract", "sensitivity_add_remove",
                                                "nonprivate_equivalence", "constant_reward_groups",
                                                "chunk_identity", "public_normalisation"}
    f64 = precision.tolerances("float64")
    # the float64 defaults are the values the checks' docstrings always stated
    assert f64["clip_contract"]["norm_ratio"] == 1e-10 and f64["clip_contract"]["cosine"] == 1e-12
    assert f64["sensitivity_add_remove"]["tol"] == 1e-10 and f64["loss_reference"]["rtol"] == 1e-12
    assert f64["nonprivate_equivalence"]["tol"] == 1e-12 and f64["chunk_identity"]["rel_tol"] is None
    assert f64["public_normalisation"]["ulp_dtype"] == "float64"
    # V13's float32 / bfloat16 tolerances, by their historical names
    assert training.PREFLIGHT_TOLERANCES["bfloat16"] == {"v3_ratio_minus_one": 1e-6, "v7_retention_rtol": 1e-5,
                                                         "v8_rel": 5e-2, "v9_ulp_dtype": "float32"}
    with pytest.raises(InvalidParameter, match="precision"):
        precision.tolerances("float16")
    with pytest.raises(TypeError):
        precision.tolerances("float64")["clip_contract"]["cosine"] = 0.0   # read-only


@pytest.mark.parametrize("name", list(training.CHECKS) + list(training.SELF_CHECKS))
def test_every_check_records_its_precision(name):
    check = training.CHECKS.get(name) or training.SELF_CHECKS[name]
    assert check(SuiteBindings()).precision == "float64"
    assert check(SuiteBindings(precision="bfloat16")).precision == "bfloat16"      # the bindings' own
    assert check(SuiteBindings(precision="bfloat16"), "float32").precision == "float32"   # explicit wins
    with pytest.raises(InvalidParameter, match="precision"):
        check(SuiteBindings(), "float16")


def test_float32_clip_passes_at_float32_and_is_false_failed_at_float64():
    b = SuiteBindings(clip=clip32, C=1.0, dim=64)
    r64 = training.check_clip_contract(b)
    assert r64.status == "fail" and r64.observed["inside_bit_identical"] is False   # float32 output ≠ float64 v
    r32 = training.check_clip_contract(dataclasses.replace(b, precision="float32"))
    assert r32.status == "pass" and r32.precision == "float32", r32.message
    assert r32.tolerance == {"max_norm_ratio": 1e-5, "min_cosine": 1e-10}
    # the float32 tolerances still catch a clip that overshoots: scale C/‖v‖ replaced by 1.001·C/‖v‖
    over = dataclasses.replace(b, precision="float32", clip=lambda v, C: clip32(v, C) * (1.001 if float(
        torch.linalg.vector_norm(v)) > C else 1.0))
    assert training.check_clip_contract(over).status == "fail"


def test_float32_sum_and_update_at_float32():
    """V3 and V9 on a float32 linear model's clipped sum and update: 1e-10 / float64 ulps false-fail it, the
    float32 row passes it, and a realised-batch divisor still fails."""
    from mechanisms.dpgrpo.records import GradientRecord

    def csum(items, C):
        return sum((clip32(it.v, C) for it in items), torch.zeros(16, dtype=torch.float32))

    def noisy(items, *, sigma, C, q, n, divisor=None):
        return csum(items, C) / torch.tensor(divisor or q * n, dtype=torch.float32)

    g = torch.Generator().manual_seed(3)
    items = [GradientRecord(torch.randn(16, dtype=torch.float64, generator=g)) for _ in range(5)]
    b = SuiteBindings(clipped_sum=csum, noisy_update=noisy, items=items, make_gradient_record=GradientRecord,
                      dim=16)
    v9_64 = training.check_public_normalisation(b)
    assert v9_64.status == "fail" and v9_64.observed["identical_across_batch_sizes"] is True
    assert training.check_public_normalisation(b, "float32").status == "pass"
    real = dataclasses.replace(b, noisy_update=lambda items, **k: noisy(items, divisor=len(items), **k))
    assert training.check_public_normalisation(real, "float32").status == "fail"
    v3 = training.check_sensitivity_add_remove(b, "float32", n_gradient_records=5, clip_norms=("C=0.7",))
    assert v3.status == "pass" and v3.tolerance == {"max_ratio_minus_one": 1e-6}, v3.message


def test_v4_float32_tolerance_scales_with_the_step():
    p0 = torch.linspace(-1, 1, 32, dtype=torch.float32)
    step = torch.full((32,), 1e-3, dtype=torch.float32)
    flat = (p0 - step).to(torch.float64)

    def bindings(factor, rounding):
        return SuiteBindings(initial_params=p0, flat_update=lambda p: flat,
                             private_update=lambda p: (p0 - factor * step).to(torch.float64) + rounding)
    ok = bindings(1.0, 3e-7)                       # ~2.5 float32 ulp of |θ| = 1 apart: rounding
    assert training.check_nonprivate_equivalence(ok).status == "fail"              # float64: 1e-12 absolute
    assert training.check_nonprivate_equivalence(ok, "float32").status == "pass"
    assert training.check_nonprivate_equivalence(bindings(4.0, 0.0), "float32").status == "fail"  # G× step


# ---------------------------------------------------------------------------------------- accountant_agreement

@pytest.fixture(scope="module")
def certified():
    return acc.epsilon(acc.PoissonGaussianEvent(Q, SIGMA, T), DELTA).certified


def test_accountant_above_passes_with_gap_reported(oracle_pld, certified):
    r = training.check_accountant_agreement(user(certified.upper + 0.01))
    assert r.status == "pass", r.message
    assert abs(r.observed["privcheck_epsilon"] - oracle_pld) <= 1e-3        # beside dp-accounting's float PLD
    assert r.observed["gap"] == pytest.approx(0.01, abs=1e-12)
    assert 0 <= r.tolerance["below_privcheck"] == pytest.approx(certified.width, abs=1e-15)
    assert "above" in r.message and r.precision == "float64"


def test_accountant_below_fails(certified):
    r = training.check_accountant_agreement(user(lambda: certified.lower - 0.01))   # a callable, a live accountant
    assert r.status == "fail" and r.observed["gap"] == pytest.approx(-0.01 - certified.width, abs=1e-12)
    assert "under-reports" in r.message


def test_accountant_inside_the_enclosure_passes_flagged(certified):
    r = training.check_accountant_agreement(user((certified.lower + certified.upper) / 2))
    assert r.status == "pass" and "not provably below" in r.message


def test_accountant_between_the_optimistic_pld_and_the_certified_lower_end_fails(oracle_pld, certified):
    """dp-accounting's optimistic PLD (an independent, float, lower estimate of the exact ε) lies about T·Δ/2 below;
    a user figure between it and the certified lower end is provably under-reported."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    one = pld.from_gaussian_mechanism(standard_deviation=SIGMA, sampling_prob=Q, value_discretization_interval=INTERVAL,
                                      pessimistic_estimate=False, use_connect_dots=False)
    optimistic = one.self_compose(T).get_epsilon_for_delta(DELTA)
    assert optimistic < certified.lower <= oracle_pld
    r = training.check_accountant_agreement(user((optimistic + certified.lower) / 2))
    assert r.status == "fail" and "under-reports" in r.message
    assert r.observed["privcheck_lower_bound"] == certified.lower


def test_accountant_nan_fails_and_missing_skips():
    assert training.check_accountant_agreement(user(math.nan)).status == "fail"
    r = training.check_accountant_agreement(dataclasses.replace(user(1.0), user_epsilon=None))
    assert r.status == "skipped" and "user_epsilon" in r.message
    bad = dataclasses.replace(user(1.0), accountant_event=acc.GaussianEvent(1.0))
    assert training.check_accountant_agreement(bad).status == "error"
    with pytest.raises(InvalidParameter, match="interval"):
        training.check_accountant_agreement(user(1.0), interval=0.5)


def test_dp_accounting_rdp_passes():
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    a = RdpAccountant()
    a.compose(_dp_event(), T)
    r = training.check_accountant_agreement(user(a.get_epsilon(DELTA)))
    assert r.status == "pass" and r.observed["gap"] > 0, r.message
    assert isinstance(dp_accounting.GaussianDpEvent(1.0), dp_accounting.DpEvent)


def test_opacus_rdp_accountant_passes():
    from opacus.accountants import RDPAccountant

    a = RDPAccountant()
    a.history = [(SIGMA, Q, T)]                    # Opacus's (noise_multiplier, sample_rate, steps) history
    r = training.check_accountant_agreement(user(lambda: a.get_epsilon(DELTA)))
    assert r.status == "pass" and r.observed["gap"] > 0, r.message


def test_history_event_uses_total_steps():
    history = acc.CompositionHistory.parse("1.0:0.01:30,1.0:0.01:20")   # the same 50 rounds in two phases
    b = SuiteBindings(accountant_event=history, delta=DELTA, user_epsilon=100.0)
    r = training.check_accountant_agreement(b)
    assert r.status == "pass" and r.observed["steps"] == 50
    assert 0 <= r.tolerance["below_privcheck"] <= 1e-3


def test_a_check_declared_not_applicable_is_skipped_with_its_reason_and_never_run():
    calls = []
    b = SuiteBindings(clip=lambda v, C: calls.append(1) or v, not_applicable={"clip_contract": "no clipping here"})
    r = training.check_clip_contract(b)
    assert r.status == "skipped" and r.message == "skipped: clip_contract does not apply: no clipping here"
    assert calls == [] and not r.passed
    ok = training.check_clip_contract(dataclasses.replace(b, not_applicable={"chunk_identity": "other check"}))
    assert ok.status == "fail" and calls                     # the identity "clip" fails the contract when run
