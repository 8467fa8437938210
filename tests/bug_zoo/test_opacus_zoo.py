"""Opacus-user bugs caught through privcheck.integrations.opacus's DEFAULT binding (docs/integrations/opacus.md):
the checks see the loader the loop iterates and the train_step it calls, so a bug in the user's loop shows. The
same loop without the bug passes every one of these checks (tests/integrations/test_opacus.py)."""

from __future__ import annotations

import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest

from privcheck.checks.catalogue import run_suite
from privcheck.integrations.opacus import bindings_for
from tests.integrations.opacus_fixture import tiny_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _statuses(checks, **run):
    engine, model, opt, loader, step = tiny_run(**run)
    b = bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=20)
    return {r.name: r for r in run_suite(b, checks=checks)}


def test_shuffled_fixed_batches_fail_poisson_and_step_checks():
    """Bug (i): the loop iterates the user's DataLoader(shuffle=True, batch_size=8) instead of the DPDataLoader
    make_private returned. Every record is in every batch of the checks' small universes (or in exactly one batch
    per epoch), never Bernoulli(q). (step_sensitivity still passes: a fixed batch bounds one step's sensitivity;
    what breaks is the sampling the accountant's amplification assumes.)"""
    checks = ["poisson_sampling", "step_poisson_sampling"]
    bug = _statuses(checks, plain_loader=True)
    assert {k: r.status for k, r in bug.items()} == {k: "fail" for k in checks}, {k: r.message[:200]
                                                                                 for k, r in bug.items()}
    assert bug["poisson_sampling"].observed["max_freq_error"] > 0.5          # inclusion 1, not q = 0.2


def test_dividing_by_the_realised_batch_size_fails_sensitivity_and_normalisation():
    """Bug (ii): train_step sets `optimizer.expected_batch_size = len(x)` so Opacus averages over the realised
    batch: ĝ = (S + z)/|B| instead of (S + z)/(q·n). One record then moves every other record's share."""
    checks = ["sensitivity_add_remove", "public_normalisation", "noise_calibration", "step_sensitivity",
              "step_noise"]
    bug = _statuses(checks, realised=True)
    assert {k: r.status for k, r in bug.items()} == {k: "fail" for k in checks}, {k: r.message[:200]
                                                                                 for k, r in bug.items()}
    # V9's batches hold synthetic records only (|B| = 0 real records → Opacus divides by 1, not q·n = 4)
    assert bug["public_normalisation"].observed["max_ulp_vs_public_divisor"] > 1e15


def test_accountant_check_rdp_passes_forged_fails():
    """Opacus's RDP accountant is above privcheck's PLD (passes, gap reported); an accountant reporting 0.9×
    privcheck's PLD is below it by more than the stated tolerance and fails."""
    from opacus.accountants import RDPAccountant

    from privcheck.accounting import PoissonGaussianEvent, epsilon

    engine, model, opt, loader, step = tiny_run()
    ok = run_suite(bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=20),
                   checks=["accountant_agreement"])[0]
    pld = epsilon(PoissonGaussianEvent(0.5, 1.0, 20), 1e-5).value

    class Forged(RDPAccountant):
        def get_epsilon(self, delta, **kwargs):
            return 0.9 * pld                # reports less privacy loss than the run has

    engine.accountant = Forged()
    bad = run_suite(bindings_for(engine, model, opt, loader, step, delta=1e-5, steps=20),
                    checks=["accountant_agreement"])[0]
    ref = RDPAccountant()
    ref.history = [(1.0, 0.5, 20)]
    assert ref.get_epsilon(1e-5) > pld                    # independent: Opacus's RDP figure is above the PLD
    assert ok.status == "pass" and "above" in ok.message
    assert bad.status == "fail"
