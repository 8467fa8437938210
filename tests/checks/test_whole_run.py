"""The whole-run checks (privcheck.checks.whole_run, docs/whole_run.md) on tiny DP-SGD scripts written as a user
writes them (tests/checks/whole_run_scripts.py): a correct script passes all three checks; each defect between
or outside the steps fails the check that must see it, naming the field and the step; what cannot be observed is
said; the checks leave the caller's random generators as they found them.

Expected values are closed forms: the sensitivity ratio of one clipped record is at most 1 (the bound is
attained when its gradient norm exceeds C); the Poisson tests are exact binomial tests at α = 1e-7.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

from privcheck.checks.common import SuiteBindings
from privcheck.checks.whole_run import (
    WHOLE_RUN_CHECKS,
    WholeRunBindings,
    check_run_noise,
    check_run_poisson_sampling,
    check_run_public_outputs,
    check_run_sensitivity,
)
from privcheck.errors import InvalidParameter
from tests.checks.whole_run_scripts import C, Q, bindings, records, script

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def suite(run, **kw):
    clip = kw.pop("clip", C)
    return SuiteBindings(whole_run=bindings(run, clip, **kw), precision="float64")


def test_correct_script_passes_every_whole_run_check():
    b = suite(script(checkpoint="model", prints="lr"), sampling_runs=60)
    results = {name: check(b) for name, check in WHOLE_RUN_CHECKS.items()}
    for name, r in results.items():
        assert r.status == "pass", (name, r.message)
    s = results["run_sensitivity"]
    assert 0 < s.observed["max_ratio"] <= 1 + 1e-12
    # x added first, in the middle and last (3 pairs), each of the 4 records removed (slots 0, 1, 2, 3 of 5: first,
    # middle, middle, last), and the empty dataset against x alone
    assert s.observed["neighbours"]["positions"] == {"first": 2, "middle": 3, "last": 2, "alone": 1}
    assert s.observed["neighbours"]["kinds"] == {"addition": 4, "record": 4}
    p = results["run_public_outputs"]
    assert p.observed["unobservable"] == [] and p.observed["fields_compared"] > 100
    assert results["run_poisson_sampling"].observed["rounds"] == 60 * 4


def test_clip_regimes_both_pass_and_the_bound_is_attained_below_the_norms():
    """With C far below every per-record gradient norm each contribution has norm exactly C: ratio 1."""
    tight = check_run_sensitivity(suite(script(clip=1e-3), clip=1e-3))
    assert tight.status == "pass" and abs(tight.observed["max_ratio"] - 1) < 1e-9
    loose = check_run_sensitivity(suite(script(clip=1e3), clip=1e3))
    assert loose.status == "pass" and loose.observed["max_ratio"] < 1


def test_batch_scaled_noise_is_caught():
    """Noise std σ·max‖ḡ_i‖ follows the batch: 0 on an empty batch (run_noise), and below C·σ the difference of
    two neighbours' noise scales is in Δĝ (run_sensitivity, ratio > 1)."""
    r = check_run_noise(suite(script(noise_scale="batch")))
    assert r.status == "fail" and "std of ĝ = 0·σC/divisor" in r.message and "expected 1" in r.message
    s = check_run_sensitivity(suite(script(noise_scale="batch", clip=1e-3), clip=1e-3))
    assert s.status == "fail" and s.observed["max_ratio"] > 2
    assert "‖Δĝ‖·divisor/C" in s.message and "bound 1 +" in s.message and "step " in s.message


@pytest.mark.parametrize("defect, field", [
    ({"prints": "loss"}, "stdout[0]"),
    ({"prints": "log"}, "log[0]"),
    ({"prints": "stderr"}, "stderr[0]"),
    ({"checkpoint": "loss"}, "files.ckpt-"),
    ({"stop_below": 0.9}, "steps_taken"),
])
def test_private_outputs_are_leaks_named_by_field_and_step(defect, field):
    r = check_run_public_outputs(suite(script(**defect)))
    assert r.status == "fail", r.message
    hits = [f for f in r.observed["leak_fields"] if field in f]
    assert hits, r.observed["leak_fields"]
    assert r.message.startswith("leak: ") and field.split("[")[0] in r.message


def test_declared_public_metrics_dict_is_compared():
    metrics: dict = {}
    r = check_run_public_outputs(suite(script(metrics=metrics), public={"metrics": metrics}))
    assert r.status == "fail" and any(f.endswith("public.metrics.loss[0]") for f in r.observed["leak_fields"])
    assert r.observed["unobservable"] == [] and metrics == {}     # every run started from the dict's state
    undeclared = check_run_public_outputs(suite(script(metrics={})))
    assert undeclared.status == "pass"      # a dict nobody declared public is not an output of the run


def test_wall_clock_in_the_output_is_reported_unobservable_not_a_leak():
    r = check_run_public_outputs(suite(script(prints="time")))
    assert r.status == "pass"
    assert r.observed["unobservable"] and all("stdout[" in f for f in r.observed["unobservable"])
    assert "not observable" in r.message


def test_unseeded_noise_cannot_be_observed():
    r = check_run_sensitivity(suite(script(unseeded=True)))
    assert r.status == "fail" and "cannot observe" in r.message and "not reproducible" in r.message


def test_a_run_that_never_attaches_cannot_be_observed():
    for check in WHOLE_RUN_CHECKS.values():
        r = check(suite(script(attach=False)))
        assert r.status == "fail" and r.message.startswith("cannot observe"), r.message
        assert "session.attach" in r.message


def test_active_dropout_cannot_be_coupled():
    r = check_run_sensitivity(suite(script(dropout=0.5)))
    assert r.status == "fail" and r.message.startswith("cannot observe the coupling of neighbouring runs")
    assert "dropout" in r.message


def test_log_records_keep_their_logger_name():
    r = check_run_public_outputs(suite(script(prints="log")))
    first = r.observed["leaks"][next(f for f in r.observed["leak_fields"] if "log[" in f)]["first"]["difference"]
    assert "privcheck.tests.whole_run_scripts:WARNING:step" in first


def test_a_raising_run_is_reported_with_the_error():
    def run(dataset, session):
        raise KeyError("label")
    r = check_run_sensitivity(suite(run))
    assert r.status == "fail" and "KeyError" in r.message and "cannot observe" in r.message


def test_missing_binding_is_skipped_and_bad_bindings_are_refused():
    r = check_run_sensitivity(SuiteBindings())
    assert r.status == "skipped" and "whole_run" in r.message
    recs = records()
    with pytest.raises(InvalidParameter, match="run"):
        WholeRunBindings(run=None, records=recs[:2], addition=recs[2], clip_norm=1, divisor=1, noise_multiplier=1,
                         sampling_rate=0.5)
    with pytest.raises(InvalidParameter, match="sampling_rate"):
        WholeRunBindings(run=script(), records=recs[:2], addition=recs[2], clip_norm=1, divisor=1,
                         noise_multiplier=1, sampling_rate=1.5)
    with pytest.raises(InvalidParameter, match="public"):
        bindings(script(), public=[1])
    with pytest.raises(InvalidParameter, match="cases"):
        check_run_sensitivity(suite(script()), cases=("sideways",))


def test_checks_restore_the_callers_random_generators_and_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    states = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    check_run_public_outputs(suite(script(checkpoint="model")))
    assert torch.equal(torch.get_rng_state(), states[0])
    assert (np.random.get_state()[1] == states[1]).all() and random.getstate() == states[2]
    assert list(tmp_path.iterdir()) == []           # the run wrote in its own working directory


def test_cross_round_sampling_defect_is_caught():
    def excluding(dataset, session):
        # a loader that never samples a record in two consecutive rounds
        model = torch.nn.Linear(3, 1).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch, last = [], set()
        session.attach(model=model, optimizer=opt, private_parameters=["weight", "bias"], sampled=lambda: list(batch))
        for t in range(4):
            coins = torch.rand(len(dataset), generator=torch.Generator().manual_seed(1000 * session.seed + t)) < Q
            batch[:] = [i for i in coins.nonzero().flatten().tolist() if dataset[i] is not None and i not in last]
            last = set(batch)
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            opt.step()
    r = check_run_poisson_sampling(suite(excluding, sampling_runs=60))
    assert r.status == "fail" and "two consecutive rounds" in r.message and "p-value" in r.message


def test_the_runs_scratch_directory_is_private_and_removed_with_the_bindings():
    import gc
    import os
    import stat

    b = suite(script(checkpoint="model"))
    check_run_public_outputs(b)
    root = b.whole_run._cache["root"]
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    del b
    gc.collect()
    assert not os.path.exists(root)


def test_logging_handlers_are_removed():
    root = logging.getLogger()
    before = list(root.handlers)
    check_run_public_outputs(suite(script(prints="log")))
    assert root.handlers == before


def test_clip_norm_C_is_the_scripts():
    assert C == 1.0
