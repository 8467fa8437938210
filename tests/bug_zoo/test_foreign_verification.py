"""Bug zoo, foreign verification (docs/artifacts.md, "Run identity"): results produced on another trainer than the
one trained cannot stand for the release. The user of the report built a second, check-mode trainer by hand (another
q, σ, T) and offered its results for the real run; a `DPTrainer` subclass verified in place of the class trained
is another foreign case. Both are refused by name; results of the trained run itself bind.
"""

from __future__ import annotations

import pytest

from mechanisms.dpgrpo.identity import dptrainer_identity
from mechanisms.dpgrpo.verify import REFERENCE, reference_fixture, reference_setup
from privcheck.artifacts.identity import ForeignVerification, bind_verification
from privcheck.checks.catalogue import run_suite
from tests.bug_zoo.run_variants import PublicCosineLR

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CHEAP = ["clip_contract", "accountant_agreement"]        # quick checks: the binding, not the verdicts, is tested


@pytest.fixture(scope="module")
def fixture():
    R = REFERENCE
    return reference_fixture(n_records=R["n_base"] + R["n_additions"] + 1, G=R["G"], L_max=R["L_max"], seed=0)


def test_check_mode_trainer_results_are_refused_for_the_real_run(fixture):
    real, _ = reference_setup(0, fixture=fixture)
    check_mode, bindings = reference_setup(0, fixture=fixture, m=8, sigma=2.0)     # another q and σ, by hand
    assert check_mode.config.q != real.config.q and check_mode.config.sigma != real.config.sigma
    results = run_suite(bindings, checks=CHEAP)
    with pytest.raises(ForeignVerification) as err:
        bind_verification(dptrainer_identity(real), results, required=CHEAP)
    named = {d.field for d in err.value.differences}
    assert any("sampling_rate" in f for f in named) and any("noise_multiplier" in f for f in named), named
    assert "q" in str(err.value) and "σ" in str(err.value)


def test_a_subclass_verified_for_the_base_class_is_refused(fixture):
    real, _ = reference_setup(0, fixture=fixture)
    _, bindings = reference_setup(0, PublicCosineLR, fixture=fixture)
    with pytest.raises(ForeignVerification) as err:
        bind_verification(dptrainer_identity(real), run_suite(bindings, checks=CHEAP), required=CHEAP)
    assert err.value.field == "trainer" and err.value.verified.endswith("PublicCosineLR")


def test_results_of_the_trained_run_bind(fixture):
    real, bindings = reference_setup(0, fixture=fixture)
    binding = bind_verification(dptrainer_identity(real), run_suite(bindings, checks=CHEAP), required=CHEAP)
    assert binding.missing == ()
