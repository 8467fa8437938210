"""The dpgrpo checks V1–V12: pass on the reference binding, fail on each bug-zoo variant, skip on missing
bindings, report errors for raising callables, and refuse models with dropout."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from privcheck import accounting as acc
from privcheck.checks import dpsgd
from privcheck.checks.dpsgd import SuiteBindings
from tests.checks import reference_bindings as rb

FAST_V12 = {"rows": ["math_eps4.23", "math_canary_rank4"], "calibration_rows": ("math_eps8_reference",)}
TABLE_VII_SIGMA_EPS8 = 0.4842404738068581  # Table VII, MATH ε=8 row (spec §5.5)


def replayed_calibration(q, T, delta, target):
    """Fast stand-in for `calibrate_sigma` in the default tier: replays Table VII's σ for the MATH ε=8 row
    (the real calibration, 8 s, runs in the slow tier)."""
    assert (round(q * 6988), T, target) == (128, 50, 8.0)
    return TABLE_VII_SIGMA_EPS8


@pytest.fixture(scope="module")
def reference():
    return rb.Reference().bindings()


@pytest.fixture(scope="module")
def suite_results(reference):
    """run_suite on the reference binding without the accountant (V12 is tested separately, with caching)."""
    b = dataclasses.replace(reference, epsilon_pld=None, epsilon_rdp=None)
    return dpsgd.run_suite(b)


def _run(check, b, **kw):
    r = check(b, **kw)
    assert r.suite == "dpgrpo" and r.precision == "float64" and r.reference
    assert r.passed == (r.status == "pass")
    return r


# ------------------------------------------------------------------------------- correct binding passes

@pytest.mark.parametrize("name", [n for n in dpsgd.CHECKS if n != "accountant_reference"])
def test_reference_binding_passes(suite_results, name):
    (r,) = [r for r in suite_results if r.name == name]
    assert r.suite == "dpgrpo" and r.precision == "float64" and r.reference
    assert r.status == "pass" and r.passed, r.message


def test_reference_v1_compares_logprobs_and_all_parts(suite_results):
    r = suite_results[0]
    assert r.observed["max_abs_diff_logprobs"] is not None
    assert r.observed["max_abs_diff_value"] <= 1e-12


def test_reference_v3_runs_all_three_clip_norms(suite_results):
    r = suite_results[2]
    assert set(r.observed["per_C"]) == {"C=0.7", "C_bind", "C_mix"}
    assert r.observed["n_trials"] == 3 * (20 + 20 + 1 + 5)


def test_v12_fast_tier_passes(reference):
    b = dataclasses.replace(reference, calibrate_sigma=replayed_calibration)
    r = _run(dpsgd.check_accountant_reference, b, **FAST_V12)
    assert r.status == "pass", r.message
    assert set(r.observed["cases"]) == {"math_eps4.23", "math_canary_rank4", "jax_privacy"}


@pytest.mark.slow
def test_v12_full_with_real_calibration(reference):
    b = dataclasses.replace(reference, calibrate_sigma=acc.calibrate_sigma)
    r = _run(dpsgd.check_accountant_reference, b)
    assert r.status == "pass", r.message
    bad = dataclasses.replace(reference, calibrate_sigma=rb.sigma_rounded_down(acc.calibrate_sigma))
    assert _run(dpsgd.check_accountant_reference, bad, rows=[], jax_privacy=False).status == "fail"


@pytest.mark.slow
def test_v12_calibration_eps1_row(reference):
    b = dataclasses.replace(reference, calibrate_sigma=acc.calibrate_sigma)
    r = _run(dpsgd.check_accountant_reference, b, rows=[], jax_privacy=False, calibration_rows=("math_eps1",))
    assert r.status == "pass", r.message


def test_run_suite_in_order(suite_results):
    results = suite_results
    assert [r.name for r in results] == list(dpsgd.CHECKS)
    assert [r.status for r in results] == ["pass"] * 11 + ["skipped"]


# ------------------------------------------------------------------------------------------- bug zoo

BUGS = [
    (rb.BatchAdvantageNorm, "record_isolation"),
    (rb.PerCompletionClip, "sensitivity_add_remove"),
    (rb.RealisedBatchDivisor, "public_normalisation"),
    (rb.ShuffledFixedBatches, "poisson_sampling"),
    (rb.NoiseSigmaOnly, "noise_calibration"),
    (rb.ClipPerChunk, "chunk_identity"),
    (rb.SkipConstantGroups, "constant_reward_groups"),
    (rb.ReusedSeededNoise, "fresh_randomness"),
    (rb.NonfinitePassthrough, "clip_contract"),
    (rb.GroupSumLoss, "loss_reference"),
    (rb.GroupSumLoss, "nonprivate_equivalence"),
]


@pytest.mark.parametrize("variant,check", BUGS, ids=[f"{v.__name__}-{c}" for v, c in BUGS])
def test_bug_variant_fails_its_check(variant, check):
    b = variant().bindings(with_accountant=False)
    r = _run(dpsgd.CHECKS[check], b)
    assert r.status == "fail", (r.status, r.message)


def test_bug_details():
    r = _run(dpsgd.check_noise_calibration, rb.NoiseSigmaOnly().bindings(with_accountant=False))
    assert r.observed["std_ratio"] == pytest.approx(4.0, rel=0.01)      # 1/C with C = 0.25
    r = _run(dpsgd.check_record_isolation, rb.BatchAdvantageNorm().bindings(with_accountant=False))
    assert r.observed["function_level_identical"] is True and r.observed["trainer_level_identical"] is False
    r = _run(dpsgd.check_poisson_sampling, rb.ShuffledFixedBatches().bindings(with_accountant=False))
    assert r.observed["max_freq_error"] == pytest.approx(0.2 - 1 / 6, abs=0.012)  # batch of 1 of 6


def test_sigma_rounded_down_fails_v12(reference):
    b = dataclasses.replace(reference, calibrate_sigma=rb.sigma_rounded_down(replayed_calibration))
    r = _run(dpsgd.check_accountant_reference, b, rows=[], jax_privacy=False)
    assert r.status == "fail"
    assert r.observed["calibration"]["math_eps8_reference"]["eps_at_sigma"] > 8.0


def test_wrong_accountant_fails_v12(reference):
    b = dataclasses.replace(reference, epsilon_pld=lambda q, s, T, d: acc.epsilon_pld(q, s, T, d).value * 1.001)
    assert _run(dpsgd.check_accountant_reference, b, rows=["math_eps4.23"], jax_privacy=False).status == "fail"


# ------------------------------------------------------------------------------- skipped, error, dropout

@pytest.mark.parametrize("name", list(dpsgd.CHECKS))
def test_missing_bindings_skip_never_pass(name):
    r = _run(dpsgd.CHECKS[name], SuiteBindings())
    assert r.status == "skipped" and not r.passed
    assert "missing binding" in r.message


def _boom(*args, **kwargs):
    raise RuntimeError("boom from the binding")


@pytest.mark.parametrize("name,field", [
    ("loss_reference", "prompt_loss"), ("clip_contract", "clip"), ("sensitivity_add_remove", "clipped_sum"),
    ("nonprivate_equivalence", "private_update"), ("poisson_sampling", "sample"),
    ("record_isolation", "record_gradient"), ("constant_reward_groups", "record_gradient"),
    ("chunk_identity", "record_loss_and_grad"), ("public_normalisation", "noisy_update"),
    ("noise_calibration", "privatize"), ("fresh_randomness", "make_randomness"),
    ("accountant_reference", "epsilon_pld")])
def test_raising_callable_is_error(reference, name, field):
    b = dataclasses.replace(reference, **{field: _boom})
    r = _run(dpsgd.CHECKS[name], b)
    assert r.status == "error" and not r.passed
    assert "boom from the binding" in r.message


def test_dropout_model_raises_typed_error():
    b = rb.Reference(dropout=0.1).bindings(with_accountant=False)
    with pytest.raises(dpsgd.DropoutEnabled):
        dpsgd.check_record_isolation(b)
    with pytest.raises(dpsgd.DropoutEnabled):
        dpsgd.run_suite(b)
    from privcheck.errors import PrivcheckError
    assert issubclass(dpsgd.DropoutEnabled, PrivcheckError)


def test_dropout_in_hf_style_config_detected():
    class Cfg:
        def to_dict(self):
            return {"resid_pdrop": 0.1, "n_embd": 64}

    model = torch.nn.Linear(2, 2)
    model.config = Cfg()
    with pytest.raises(dpsgd.DropoutEnabled, match="resid_pdrop"):
        dpsgd.assert_no_dropout(model)


def test_checks_import_without_torch():
    code = ("import sys\n"
            "import privcheck.checks.dpsgd as d, privcheck.accounting\n"
            "r = d.check_clip_contract(d.SuiteBindings()); assert r.status == 'skipped', r\n"
            "assert 'torch' not in sys.modules, 'privcheck.checks.dpsgd imported torch eagerly'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


# ------------------------------------------------------------------------------------------ pytest plugin

CONFTEST = """
    import sys, pytest
    sys.path.insert(0, {root!r})
    from tests.checks import reference_bindings as rb
    @pytest.fixture
    def privcheck_bindings():
        return rb.SkipConstantGroups().bindings(with_accountant=False)
"""


def _pytest(tmp_path, *args):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "privcheck.checks.pytest_plugin", "-rs", "-q",
                           "-p", "no:cacheprovider", f"--rootdir={tmp_path}", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_plugin_collects_one_test_per_check(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST.format(root=str(Path(__file__).parents[2]))))
    rc, out = _pytest(tmp_path, "--privcheck")
    assert rc == 1, out
    assert "1 failed, 10 passed, 1 skipped" in out, out
    assert "privcheck[constant_reward_groups]" in out
    assert "accountant_reference: skipped: missing binding(s): epsilon_pld" in out


def test_plugin_without_override_fails_with_instructions(tmp_path):
    rc, out = _pytest(tmp_path, "--privcheck")
    assert rc == 1 and "12 error" in out, out
    assert "conftest.py" in out


def test_plugin_inactive_without_option(tmp_path):
    rc, out = _pytest(tmp_path)
    assert rc == 5, out  # no tests collected


def test_plugin_provided_test_function(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST.format(root=str(Path(__file__).parents[2]))))
    (tmp_path / "test_mine.py").write_text(
        "from privcheck.checks.pytest_plugin import privcheck_test as test_privcheck  # noqa: F401\n")
    rc, out = _pytest(tmp_path, "test_mine.py")
    assert rc == 1 and "1 failed, 10 passed, 1 skipped" in out, out
