"""privcheck.integrations.opacus.whole_run_bindings on real Opacus scripts (docs/integrations/opacus.md, "Verify the
whole run"): the real parameters come from the dry run of the user's script, the check-mode differences are
recorded, Opacus is restored after every run, and bad input is refused before any work."""

from __future__ import annotations

import os
import re
from pathlib import Path

import opacus  # noqa: F401 - installed by `make test` (the integrations extra): never a silent skip
import pytest
import torch
from opacus import PrivacyEngine

from privcheck.checks.whole_run import WHOLE_RUN_CHECKS
from privcheck.errors import InvalidParameter
from privcheck.integrations.opacus import whole_run_bindings
from tests.bug_zoo.opacus_run_variants import model_checkpoints, real_dataset, step_lr, with_epsilon

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "opacus.md"


def test_real_parameters_come_from_the_dry_run():
    """16 records, batch_size 4: Opacus's q = 1/len(loader) = 1/4, its divisor int(16 · 1/4) = 4, 4 steps an
    epoch; the check universe is 8 records + 1 slot at q = 0.5 (2 rounds an epoch), σ, C, divisor unchanged."""
    b = whole_run_bindings(step_lr, real_dataset(), delta=1e-5)
    wr = b.whole_run
    assert (b.q, b.n, b.sigma, b.C, b.precision) == (0.25, 16, 1.0, 1.0, "float64")
    assert (wr.divisor, wr.clip_norm, wr.noise_multiplier, wr.sampling_rate) == (4.0, 1.0, 1.0, 0.5)
    assert (len(wr.records), wr.removal) == (8, "absent")
    assert wr.check_mode["sampling_rate"] == {"real": 0.25, "checked": 0.5}
    assert wr.check_mode["steps_per_epoch"] == {"real": 4, "checked": 2}
    assert wr.check_mode["n"] == {"real": 16, "checked": 9}
    assert "noise_multiplier" not in wr.check_mode and b.accountant_event is None    # make_private names no epochs
    assert PrivacyEngine.make_private.__qualname__ == "PrivacyEngine.make_private"   # restored


def test_make_private_with_epsilon_keeps_the_real_sigma():
    """σ is Opacus's calibration for the real q = 1/4 over 3 epochs (not for the universe's q); the planned T = 3
    epochs × 4 steps feeds the accountant fields, and the engine's RDP accountant gives the user's ε."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.utils import get_noise_multiplier

    b = whole_run_bindings(with_epsilon, real_dataset(), delta=1e-5)
    sigma = get_noise_multiplier(target_epsilon=8.0, target_delta=1e-5, sample_rate=0.25, epochs=3,
                                 accountant="rdp")
    assert b.sigma == b.whole_run.noise_multiplier == sigma
    assert b.accountant_event.steps == 12 and b.accountant_event.sampling_rate == 0.25
    ref = RDPAccountant()
    ref.history = [(sigma, 0.25, 12)]
    assert b.user_epsilon() == ref.get_epsilon(1e-5) <= 8.0
    assert "noise_multiplier" in b.whole_run.check_mode
    r = WHOLE_RUN_CHECKS["run_public_outputs"](b, cases=("add",), seeds=1)
    assert r.status == "pass", r.message
    assert r.observed["fields_compared"] > 0


def test_dry_run_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    whole_run_bindings(model_checkpoints, real_dataset(), delta=1e-5)
    assert os.listdir(tmp_path) == []               # the dry run's checkpoint went to a scratch directory
    assert torch.equal(torch.get_rng_state(), state)
    assert os.getcwd() == str(tmp_path)


def test_a_script_failing_in_check_mode_is_reported_and_opacus_restored():
    """A script that runs on the real dataset but raises on the check universe: the check says what it cannot
    observe and why (never a Python error), and make_private is Opacus's again."""
    original = PrivacyEngine.make_private

    def picky(dataset):
        if len(dataset) != 16:
            raise RuntimeError("expected the full dataset")
        return step_lr(dataset)

    b = whole_run_bindings(picky, real_dataset(), delta=1e-5)
    r = WHOLE_RUN_CHECKS["run_sensitivity"](b, cases=("add",), seeds=1)
    assert r.status == "fail"
    assert r.message.startswith("cannot observe the private steps") and "expected the full dataset" in r.message
    assert PrivacyEngine.make_private is original


@pytest.mark.parametrize("kwargs, name", [
    ({"train": 3}, "train"),
    ({"dataset": 3}, "dataset"),
    ({"delta": 0.0}, "delta"),
    ({"public": 3}, "public"),
    ({"public": {"": {}}}, "public"),
    ({"records": [1, 2]}, "records"),
    ({"seeds": 0}, "seeds"),
    ({"sampling_runs": 1}, "sampling_runs"),
    ({"sampling_rate": 1.5}, "sampling_rate"),
    ({"steps_per_epoch": 0}, "steps_per_epoch"),
    ({"dataset": real_dataset(8)}, "dataset"),
])
def test_bad_input_is_refused_before_any_work(kwargs, name):
    calls = []

    def train(dataset):
        calls.append(1)
        return step_lr(dataset)

    args = {"train": train, "dataset": real_dataset(), "delta": 1e-5, **kwargs}
    with pytest.raises(InvalidParameter, match=name):
        whole_run_bindings(args.pop("train"), args.pop("dataset"), **args)
    assert calls == []


def test_a_script_that_never_makes_private_or_fails_is_refused():
    with pytest.raises(InvalidParameter, match="train.*never called PrivacyEngine.make_private"):
        whole_run_bindings(lambda dataset: None, real_dataset(), delta=1e-5)

    def broken(dataset):
        raise ValueError("no GPU")

    with pytest.raises(InvalidParameter, match="train.*ValueError: no GPU"):
        whole_run_bindings(broken, real_dataset(), delta=1e-5)
    assert PrivacyEngine.make_private.__qualname__ == "PrivacyEngine.make_private"


def test_declared_public_outputs_callable_and_logger():
    """What the script releases outside torch's view is compared once declared: a callable's value, and a logger
    that does not propagate to the root logger (invisible unless declared)."""
    import logging

    from tests.bug_zoo.opacus_run_variants import private_training, small_net, train_epoch

    quiet = logging.getLogger("privcheck.tests.quiet")
    quiet.propagate, quiet.level = False, logging.INFO
    state: dict = {}

    def script(dataset):
        model, optimizer, loader = private_training(dataset, small_net())
        for epoch in range(2):
            state["loss"] = train_epoch(model, optimizer, loader)
            quiet.info("epoch %d loss %.4f", epoch, state["loss"])

    undeclared = whole_run_bindings(script, real_dataset(), delta=1e-5)
    r = WHOLE_RUN_CHECKS["run_public_outputs"](undeclared, cases=("add",), seeds=1)
    assert r.status == "pass", r.message          # nothing the check sees differs: not observed, as documented
    for public, field in ((lambda: dict(state), "public.public.loss"), ({"quiet": quiet}, "log[0]")):
        b = whole_run_bindings(script, real_dataset(), delta=1e-5, public=public)
        r = WHOLE_RUN_CHECKS["run_public_outputs"](b, cases=("add",), seeds=1)
        assert r.status == "fail" and field in r.observed["leak_fields"], r.message[:400]


def test_worker_processes_load_in_process_in_check_mode():
    """A DataLoader with num_workers = 1: the check-mode DPDataLoader fetches in this process (recorded), so the
    sampled indices are the fetched ones and the sampling tests hold."""
    from tests.bug_zoo.opacus_run_variants import small_net, train_epoch

    def script(dataset):
        net = small_net()
        model, optimizer, loader = PrivacyEngine().make_private(
            module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0,
            data_loader=torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=1))
        for _ in range(2):
            train_epoch(model, optimizer, loader)

    b = whole_run_bindings(script, real_dataset(), delta=1e-5, sampling_runs=10)
    assert b.whole_run.check_mode["num_workers"] == {"real": 1, "checked": 0}
    r = WHOLE_RUN_CHECKS["run_poisson_sampling"](b)
    assert r.status == "pass" and r.observed["rounds"] == 10 * 2 * 2, r.message


def test_a_second_private_phase_is_reported_not_observable():
    def two_phases(dataset):
        step_lr(dataset)
        return step_lr(dataset)

    b = whole_run_bindings(two_phases, real_dataset(), delta=1e-5)
    r = WHOLE_RUN_CHECKS["run_public_outputs"](b, cases=("add",), seeds=1)
    assert r.status == "fail" and r.message.startswith("cannot observe a second private phase"), r.message
    assert PrivacyEngine.make_private.__qualname__ == "PrivacyEngine.make_private"


def test_dropout_is_refused_when_the_bindings_are_made():
    from privcheck.checks.common import DropoutEnabled

    def with_dropout(dataset):
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2)).double()
        PrivacyEngine().make_private(module=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                     data_loader=torch.utils.data.DataLoader(dataset, batch_size=4),
                                     noise_multiplier=1.0, max_grad_norm=1.0)

    with pytest.raises(DropoutEnabled, match=r"_module.1.p=0.3"):
        whole_run_bindings(with_dropout, real_dataset(), delta=1e-5)
    assert PrivacyEngine.make_private.__qualname__ == "PrivacyEngine.make_private"


def test_docs_whole_run_example_passes():
    """The 'Verify the whole run' example of docs/integrations/opacus.md, run as written (≤ 20 lines): at the
    script's real q = 16/64 every whole-run check passes, with the check mode in every result."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Verify the whole run"):]
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    assert len([line for line in code.splitlines() if line.strip()]) <= 20
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)   # noqa: S102 - the documented example itself
    results = scope["results"]
    assert set(results) == set(WHOLE_RUN_CHECKS)
    bad = {k: r.message[:300] for k, r in results.items() if r.status != "pass"}
    assert not bad
    for r in results.values():
        assert r.inputs["check_mode"]["sampling_rate"] == {"real": 0.25, "checked": 0.5}
    # (add first, in the middle and last, 8 removals, empty) × 2 seeds
    assert results["run_public_outputs"].observed["runs"] == 24
