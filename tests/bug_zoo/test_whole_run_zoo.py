"""The whole-run bug zoo (tests/bug_zoo/run_variants.py) against the whole-run checks (docs/whole_run.md).

Every `RUN_ZOO` row fails its whole-run check through the default DPTrainer bindings
(`mechanisms.dpgrpo.whole_run.whole_run_bindings`), naming the field or test; each is a defect one fresh step
cannot show, and the whole-step check of the same kind passes it (so the whole run is what catches it). The
production `DPTrainer` and the correct variants in other shapes (a public schedule, a learning rate from the
noisy update, checkpoints and prints of public values, a micro-batched clipped sum) pass every whole-run check.
"""

from __future__ import annotations

import pytest

from mechanisms.dpgrpo.trainer import DPTrainer
from mechanisms.dpgrpo.whole_run import whole_run_bindings
from mechanisms.dpgrpo.whole_step import whole_step_bindings, whole_step_fixture
from privcheck.checks.common import SuiteBindings
from privcheck.checks.whole_run import WHOLE_RUN_CHECKS
from privcheck.checks.whole_step import WHOLE_STEP_CHECKS
from tests.bug_zoo.run_variants import CORRECT_RUNS, RUN_ZOO

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IDS = [e.name for e in RUN_ZOO]
STEP_ANALOGUE = {"run_public_outputs": "step_public_outputs", "run_poisson_sampling": "step_poisson_sampling"}


@pytest.fixture(scope="module")
def fixture():
    return whole_step_fixture(0)


def bindings(fixture, trainer_cls, **kw):
    return SuiteBindings(whole_run=whole_run_bindings(fixture, trainer_cls, **kw), precision="float64")


# make test keeps one row per class (a decision between rounds, training before the private phase, sampling across
# rounds, a noise scale from the batch); printed, logged and checkpointed leaks are in make test through the plain
# scripts of tests/checks/test_whole_run.py, and here in the slow tier
FAST = ("early_stop_on_plateau", "private_warm_start", "no_repeat_sampling", "batch_scaled_noise")


@pytest.mark.parametrize("entry", [e if e.name in FAST else pytest.param(e, marks=pytest.mark.slow)
                                   for e in RUN_ZOO], ids=IDS)
def test_variant_fails_its_whole_run_check(fixture, entry):
    r = WHOLE_RUN_CHECKS[entry.check](bindings(fixture, entry.trainer_cls))
    assert r.status == "fail", r.message[:600]
    if entry.check == "run_public_outputs":
        hits = [f for f in r.observed["leak_fields"] if entry.field in f]
        assert hits, r.observed["leak_fields"][:20]
        assert "leak: " in r.message
    else:
        assert entry.field in r.message, r.message[:600]


@pytest.mark.slow
@pytest.mark.parametrize("entry", [e for e in RUN_ZOO if e.name in ("plateau_scheduled_lr", "early_stop_on_plateau",
                                                                     "no_repeat_sampling", "prints_private_statistic")],
                         ids=lambda e: e.name)
def test_one_fresh_step_does_not_show_it(fixture, entry):
    """The defects act between rounds or across rounds: the whole-step check of the same kind passes them."""
    b = SuiteBindings(whole_step=whole_step_bindings(fixture, entry.trainer_cls), precision="float64")
    check = STEP_ANALOGUE[entry.check]
    options = {"cases": ("add",), "seeds": 2} if check == "step_public_outputs" else {"runs": 60}
    r = WHOLE_STEP_CHECKS[check](b, **options)
    assert r.status == "pass", r.message[:600]


# the production trainer and the micro-batched sum in make test; the other correct shapes in the slow tier
FAST_CORRECT = (DPTrainer, CORRECT_RUNS[-1])


@pytest.mark.parametrize("trainer_cls", [c if c in FAST_CORRECT else pytest.param(c, marks=pytest.mark.slow)
                                         for c in (DPTrainer,) + CORRECT_RUNS], ids=lambda c: c.__name__)
def test_correct_runs_pass_every_whole_run_check(fixture, trainer_cls):
    b = bindings(fixture, trainer_cls)
    for name, check in WHOLE_RUN_CHECKS.items():
        r = check(b)
        assert r.status == "pass", (name, r.message[:600])
    assert r.observed["rounds"] == 40 * 3
