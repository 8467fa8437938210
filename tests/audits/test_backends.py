"""Audit sweeps on Ray (audits/backends.py; docs/scaling.md, "Audit sweeps on Ray"): the Ray backend gives the serial
backend's results for the same seeds (tasks, power Monte Carlo, the multi-run driver, a bug-zoo audit), a task that
fails once is retried, a task that always fails is reported and never counted, and bad input is refused before any
task runs. One local Ray (2 CPUs, no dashboard) serves the module.

Independent references: the serial backend (a plain loop in this process), the documented seed derivation
(privcheck.randomness.derive_seed), and counts recomputed here from the returned scores.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass

import numpy as np
import pytest
import ray

from audits.backends import TaskFailure, check_backend, run_tasks
from audits.multirun_driver import GaussianRuns, run_multirun_audit, run_seeds
from audits.statistics.power import mc_tasks, plan
from audits.statistics.score_models import GDP
from privcheck.artifacts.schema import validate
from privcheck.artifacts.writer import verify_seal
from privcheck.cli import main
from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.randomness import RandomnessPolicy, derive_seed
from tests.audits.doc_console import console_commands, run_cli, same, section
from tests.audits.power_memo import memoized_power


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", autouse=True)
def each_search_once():
    """Serial and Ray plans of the same (m, δ, seed) repeat the driver's ε searches: each is computed once
    (tests/audits/power_memo.py). The Monte Carlo tasks, which is what runs on Ray, are never cached."""
    with memoized_power():
        yield


def square_unless_three(x):
    if x == 3:
        raise ValueError(f"bad input {x}")
    return x * x


def fails_the_first_time(marker):
    """Fails on its first attempt (it leaves a marker file), succeeds on the next: on any worker of this machine."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("transient failure")
    return "done"


# ------------------------------------------------------------------------------------------ run_tasks


def test_ray_and_serial_give_the_same_results_and_failures():
    serial = run_tasks(square_unless_three, list(range(7)), backend="serial", max_retries=1)
    on_ray = run_tasks(square_unless_three, list(range(7)), backend="ray", max_retries=1)
    assert serial.results == on_ray.results == (0, 1, 4, None, 16, 25, 36)
    assert serial.failures == on_ray.failures == (TaskFailure(3, "ValueError: bad input 3", 2),)
    assert on_ray.finished == (0, 1, 2, 4, 5, 6)
    assert on_ray.ray_version == ray.__version__ and serial.ray_version is None
    doc = on_ray.to_json()
    assert doc["backend"] == "ray" and doc["tasks"] == 7 and doc["finished"] == 6
    assert doc["failed"] == [{"index": 3, "error": "ValueError: bad input 3", "attempts": 2}]
    assert doc["max_retries"] == 1 and doc["retry_exceptions"] is True


@pytest.mark.parametrize("backend", ["serial", "ray"])
def test_a_task_that_fails_once_is_retried_and_succeeds(backend, tmp_path):
    run = run_tasks(fails_the_first_time, [str(tmp_path / "a"), str(tmp_path / "b")], backend=backend,
                    max_retries=1)
    assert run.results == ("done", "done") and run.failures == ()
    if backend == "serial":
        assert run.retried == ((0, 2), (1, 2))
    # without retries the same transient failure is reported, not swallowed
    again = run_tasks(fails_the_first_time, [str(tmp_path / "c")], backend=backend, max_retries=0)
    assert again.results == (None,) and again.failures == (TaskFailure(0, "RuntimeError: transient failure", 1),)


# ------------------------------------------------------------------------------------------ power Monte Carlo


class FailsOnShortTasks(GDP):
    """gdp(1) scores, but a Monte Carlo task with fewer than 100 audits raises (the last, shorter task)."""

    def draw(self, included, rng):
        if included.ndim == 2 and included.shape[0] < 100:
            raise RuntimeError(f"out of memory ({included.shape[0]} audits)")
        return super().draw(included, rng)


def _without_execution(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "execution"}


def test_power_plan_on_ray_equals_serial():
    kw = dict(delta=1e-5, confidence=0.95, eps_nominal=4.0, score_model="gdp:1", sims=250, seed=2024)
    serial, on_ray = plan(2000, **kw), plan(2000, backend="ray", **kw)
    assert _without_execution(on_ray.to_json()) == _without_execution(serial.to_json())
    assert on_ray.execution["backend"] == "ray" and on_ray.execution["tasks"] == 3
    assert on_ray.sims_finished == serial.sims_finished == 250 and on_ray.execution["failed"] == []
    # tasks of ⌊200,000/m⌋ = 100 audits, seeded by the documented derivation
    assert mc_tasks(2000, 250, RandomnessPolicy.seeded(2024)) == tuple(
        (n, derive_seed(2024, f"audits.power/monte_carlo/{j}")) for j, n in enumerate((100, 100, 50)))


@pytest.mark.parametrize("backend", ["serial", "ray"])
def test_power_failed_task_is_reported_and_not_counted(backend):
    rep = plan(2000, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=FailsOnShortTasks(1.0), sims=250,
               seed=1, backend=backend, max_retries=1)
    assert rep.sims == 250 and rep.sims_finished == 200
    assert rep.execution["failed"] == [{"index": 2, "error": "RuntimeError: out of memory (50 audits)",
                                        "attempts": 2}]
    assert "200 of 250 simulated audits that finished (1 tasks failed)" in rep.message
    # the quantiles are those of the 200 finished audits: the same as a plan of the first two tasks alone
    first_two = plan(2000, delta=1e-5, confidence=0.95, eps_nominal=None, score_model=GDP(1.0), sims=200, seed=1)
    assert (rep.mc_p10, rep.mc_median, rep.mc_p90) == (first_two.mc_p10, first_two.mc_median, first_two.mc_p90)


# ------------------------------------------------------------------------------------------ multi-run driver


@dataclass(frozen=True)
class FailsOnSeed:
    """GaussianRuns(1) that raises for one seed (a run that fails on every attempt)."""
    bad: int

    def __call__(self, seed, include_canary):
        if seed == self.bad:
            raise RuntimeError("diverged")
        return GaussianRuns(1.0)(seed, include_canary)


def test_multirun_on_ray_equals_serial_and_counts_only_finished_runs():
    bad = run_seeds(40, 30, RandomnessPolicy.seeded(8))[45][2]        # the 6th run without the canary
    target = FailsOnSeed(bad)
    kw = dict(runs_in=40, runs_out=30, threshold=0.5, delta=1e-5, seed=8, max_retries=1)
    serial, on_ray = run_multirun_audit(target, **kw), run_multirun_audit(target, backend="ray", **kw)
    assert on_ray.scores_in == serial.scores_in and on_ray.scores_out == serial.scores_out
    assert on_ray.report.result == serial.report.result and on_ray.failed == serial.failed
    assert on_ray.failed == ({"arm": "out", "run": 5, "error": "RuntimeError: diverged", "attempts": 2},)
    r = on_ray.report.result
    assert (r["n_in"], r["n_out"]) == (40, 29)
    assert r["fp"] == sum(s >= 0.5 for s in on_ray.scores_out if s is not None)
    assert on_ray.report.software["ray"] == ray.__version__ and "ray" not in serial.report.software
    assert on_ray.report.diagnostics["execution"]["finished"] == 69


def test_cli_multi_run_on_ray_writes_the_serial_artifact(tmp_path, capsys):
    argv = ["audit", "multi-run", "--runs-in", "60", "--runs-out", "60", "--sigma", "1", "--steps", "2",
            "--delta", "1e-5", "--seed", "4", "--json"]
    docs = {}
    for backend in ("serial", "ray"):
        out = tmp_path / backend
        assert main([*argv, "--backend", backend, "--out", str(out)]) == 0
        capsys.readouterr()
        docs[backend] = json.loads((out / "audit.json").read_text())
        assert verify_seal(docs[backend])
        validate(docs[backend], name="audit.schema.json")
    a, b = docs["serial"], docs["ray"]
    assert a["result"] == b["result"] and a["claim"] == b["claim"]
    assert b["diagnostics"]["execution"]["backend"] == "ray" and b["software"]["ray"] == ray.__version__
    assert b["result"]["n_in"] + b["result"]["n_out"] == b["diagnostics"]["execution"]["finished"] == 120


# ------------------------------------------------------------------------------------------ bug-zoo sweep


@pytest.mark.slow      # two gradient-canary audits, one in a fresh Ray worker (≈ 50 s on a loaded 2-core machine)
def test_bug_zoo_sweep_task_on_ray_equals_serial(capsys):
    from tests.bug_zoo.test_dpgrpo_audits import measure

    serial = measure(seeds=[0], rows=[0], backend="serial")
    on_ray = measure(seeds=[0], rows=[0], backend="ray")
    capsys.readouterr()
    assert on_ray == serial and len(serial) == 3 and serial[2].startswith("| reference (C = 4) | ")
    assert serial[2].endswith("| 0/1 |")


@pytest.mark.parametrize("argv", [["1", "--backend", "threads"], ["1", "--backend", "ray", "--ray-address", "x"],
                                  ["1", "--max-retries", "-1"]])
def test_bug_zoo_sweep_refuses_a_bad_backend_before_any_audit(argv, capsys, monkeypatch):
    import tests.bug_zoo.test_dpgrpo_audits as zoo

    calls = []
    monkeypatch.setattr(zoo, "measure", lambda *a, **k: calls.append(a))
    with pytest.raises(SystemExit) as info:
        zoo.sweep_main(argv)
    assert info.value.code == 2 and calls == [] and "invalid" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("backend, address, retries, name", [
    ("threads", None, 3, "backend"), (None, None, 3, "backend"),
    ("serial", "localhost:6379", 3, "ray_address"), ("ray", "localhost", 3, "ray_address"),
    ("ray", "host:0", 3, "ray_address"), ("ray", "host:70000", 3, "ray_address"), ("ray", "", 3, "ray_address"),
    ("ray", 6379, 3, "ray_address"), ("ray", "http://host:6379", 3, "ray_address"),
    ("ray", None, -1, "max_retries"), ("ray", None, True, "max_retries"), ("ray", None, 1.5, "max_retries"),
    ("serial", None, 101, "max_retries"),
])
def test_bad_backend_input_is_refused_before_any_task(backend, address, retries, name):
    calls = []
    with pytest.raises(InvalidParameter) as info:
        run_tasks(calls.append, [1, 2], backend=backend, address=address, max_retries=retries)
    assert info.value.name == name and calls == []
    with pytest.raises(InvalidParameter):
        check_backend(backend, address, retries)


@pytest.mark.parametrize("address", ["auto", "10.0.0.5:6379", "ray://head-node.example:10001", "[::1]:6379"])
def test_cluster_addresses_are_accepted(address):
    assert check_backend("ray", address, 0) == ("ray", address, 0)


def test_what_ray_cannot_pickle_is_refused_before_any_task():
    calls = []
    with pytest.raises(InvalidParameter) as info:
        run_tasks(calls.append, [1, threading.Lock()], backend="ray")
    assert info.value.name == "inputs[1]" and calls == []


def test_missing_ray_names_the_extra(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "ray", None)             # `import ray` now raises ImportError
    with pytest.raises(PrivcheckError, match=r"privcheck\[ray\]"):
        run_tasks(calls.append, [1], backend="ray")
    assert calls == []


@pytest.mark.parametrize("extra, name", [
    (["--backend", "threads"], "backend"), (["--ray-address", "localhost:6379"], "ray_address"),
    (["--backend", "ray", "--ray-address", "nohost"], "ray_address"), (["--max-retries", "-2"], "max_retries"),
])
def test_cli_power_bad_backend_is_exit_2(extra, name, capsys):
    code = main(["audit", "power", "--canaries", "100", "--delta", "1e-5", "--score-model", "perfect", "--sims", "5",
                 *extra])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.startswith(f"privcheck: error: invalid {name}=")


# ------------------------------------------------------------------------------------------ docs


def test_scaling_doc_commands_print_what_they_show():
    """The console blocks of docs/scaling.md's "Audit sweeps on Ray" (run on this module's local Ray)."""
    commands = console_commands(section("scaling.md", "## Audit sweeps on Ray"))
    assert len(commands) == 2 and all(shown for _, shown in commands)
    for argv, shown in commands:
        actual = run_cli(argv).splitlines()
        assert len(actual) == len(shown), actual
        for s, a in zip(shown, actual):
            assert same(s, a), (s, a)


def test_power_json_records_the_backend(capsys):
    code = main(["audit", "power", "--canaries", "3000", "--delta", "1e-5", "--score-model", "gdp:1", "--sims", "150",
                 "--seed", "3", "--backend", "ray", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["sims_finished"] == 150
    assert doc["execution"]["backend"] == "ray" and doc["execution"]["tasks"] == 3
    assert doc["execution"]["ray_version"] == ray.__version__
    assert np.isfinite(doc["mc_median"])
