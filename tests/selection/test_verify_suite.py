"""The `selection` verification suite: passes on the reference implementation, and fails when a
component is broken (so its checks can fail)."""

import pytest

from mechanisms.selection import verify


@pytest.fixture(scope="module")
def suite():
    return verify.run_suite(seed=7)


def test_suite_passes_and_is_seeded(suite):
    failed = [c.name for c in suite.checks if not c.passed]
    assert not failed, failed
    assert suite.randomness == "seeded"
    names = {c.name for c in suite.checks}
    for required in ("O-3.lambda0.5", "O-4.privitp_law", "O-8.gaussian_above_threshold", "monte_carlo.privitp",
                     "tightness.privitp_extremal_pair", "filter.adversarial_transcript_within_budget"):
        assert required in names


def test_registered_with_privcheck_verify():
    from privcheck.verify import available_suites
    assert available_suites()["selection"] == "mechanisms.selection.verify:run_suite"


def test_halved_phase2_noise_in_the_accountant_is_caught(monkeypatch):
    """An accountant using σ_Z/2 while the mechanism uses σ_Z (a documented replication pitfall) must fail O-3."""
    import dataclasses

    from privcheck.accounting import selection as sel
    real = sel.privitp_kappa.__wrapped__

    def wrong(params, lt):
        return real(dataclasses.replace(params, sigma_z=params.sigma_z / 2), lt)
    monkeypatch.setattr(sel, "privitp_kappa", wrong)            # what epsilon(PrivITPEvent) evaluates
    result = verify.run_suite(seed=7)
    failed = {c.name for c in result.checks if not c.passed}
    assert "O-3.lambda0.5" in failed


def test_broken_sampler_is_caught(monkeypatch):
    """A PrivBoN that uses half the Gumbel scale (bug zoo variant privbon_half_noise) fails Monte Carlo."""
    from mechanisms.selection import privbon
    real_init = privbon.PrivBoN.__init__

    def half(self, sensitivity, sigma, *a, **k):
        real_init(self, sensitivity, sigma / 2, *a, **k)
    monkeypatch.setattr(privbon.PrivBoN, "__init__", half)
    result = verify.run_suite(seed=7)
    failed = {c.name for c in result.checks if not c.passed}
    assert {"monte_carlo.privbon_gumbel", "monte_carlo.privbon_softmax"} <= failed
