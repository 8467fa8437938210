"""The Opacus whole-script bug zoo (tests/bug_zoo/opacus_run_variants.py) against the whole-run checks, through
`privcheck.integrations.opacus.whole_run_bindings` on each script's real dataset (docs/integrations/opacus.md,
"Verify the whole run").

Every `SCRIPT_ZOO` row fails its whole-run check naming the field and the step; the correct scripts (StepLR,
BatchMemoryManager, loss_reduction="sum", a learning rate from the noisy update, model checkpoints,
make_private_with_epsilon, a tiny CNN with GroupNorm) pass every whole-run check. One defect and one correct
script run in the fast tier.
"""

from __future__ import annotations

import pytest

from privcheck.checks.whole_run import WHOLE_RUN_CHECKS
from privcheck.integrations.opacus import whole_run_bindings
from tests.bug_zoo.opacus_run_variants import CORRECT_SCRIPTS, METRICS, SCRIPT_ZOO, real_dataset, step_lr

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAST = {"private_warm_up", step_lr.__name__}


def _param(x, name):
    return pytest.param(x, id=name, marks=() if name in FAST else pytest.mark.slow)


def bindings(train):
    return whole_run_bindings(train, real_dataset(), delta=1e-5, public={"metrics": METRICS})


@pytest.mark.parametrize("entry", [_param(e, e.name) for e in SCRIPT_ZOO])
def test_script_fails_its_whole_run_check(entry):
    b = bindings(entry.train)
    options = {"cases": ("add",)} if entry.name in FAST else {}
    r = WHOLE_RUN_CHECKS[entry.check](b, **options)
    assert r.status == "fail", r.message[:600]
    assert r.inputs["check_mode"]["sampling_rate"] == {"real": 0.25, "checked": 0.5}
    assert entry.field in r.message, r.message[:600]
    if entry.check == "run_public_outputs":
        assert r.message.startswith("leak: ")
        assert any(entry.field in f for f in r.observed["leak_fields"]), r.observed["leak_fields"][:20]


@pytest.mark.parametrize("train", [_param(t, t.__name__) for t in CORRECT_SCRIPTS])
def test_correct_script_passes_every_whole_run_check(train):
    b = bindings(train)
    results = {name: check(b) for name, check in WHOLE_RUN_CHECKS.items()}
    for name, r in results.items():
        assert r.status == "pass", (name, r.message[:600])
        assert r.inputs["check_mode"]["n"] == {"real": 16, "checked": 9}
    assert results["run_poisson_sampling"].observed["rounds"] == 40 * 3 * 2   # runs × epochs × int(1/0.5) rounds
