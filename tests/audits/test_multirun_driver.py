"""Multi-run audits that train (audits/multirun_driver.py, `privcheck audit multi-run`; docs/audits.md, "Multi-run
audits that train"), on the serial backend. Ray-vs-serial equality: tests/audits/test_backends.py.

Independent references: the built-in target's closed form (score N(0, 1) without the canary, N(μ, 1) with it,
μ = √T/σ, so FP ~ Bin(N₀, Φ̄(t)) and FN ~ Bin(N₁, Φ(t − μ)), checked at 1e-7 per tail with scipy's binomial
quantiles); the exact μ-GDP ε(δ) of Balle & Wang's closed form, solved in mpmath; the seed derivation of
privcheck.randomness.derive_seed; and the counts recounted here from the returned scores.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import mpmath as mp
import numpy as np
import pytest
from scipy.stats import binom, norm

from audits.multirun_driver import GaussianRuns, run_multirun_audit, run_seeds
from audits.statistics.clopper_pearson import clopper_pearson
from privcheck.artifacts.schema import validate
from privcheck.artifacts.writer import verify_seal
from privcheck.cli import main
from privcheck.errors import InvalidParameter
from privcheck.randomness import RandomnessPolicy, derive_seed
from tests.audits.doc_console import console_commands, run_cli, same, section

TAIL = 1e-7          # per-tail false-failure probability of each binomial check


def _within_binomial(k: int, n: int, p: float) -> bool:
    return binom.ppf(TAIL, n, p) <= k <= binom.isf(TAIL, n, p)


def exact_gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: the root of δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018), in mpmath."""
    mp.mp.dps = 40
    m, d = mp.mpf(mu), mp.mpf(delta)
    return float(mp.findroot(lambda e: mp.ncdf(-e / m + m / 2) - mp.e ** e * mp.ncdf(-e / m - m / 2) - d, 2 * mu))


def test_gaussian_runs_counts_follow_the_closed_form():
    target = GaussianRuns(sigma=2.0, steps=4)                 # μ = 1, threshold μ/2
    t = target.default_threshold
    res = run_multirun_audit(target, runs_in=2000, runs_out=2000, threshold=t, delta=1e-5, seed=11)
    r = res.report.result
    assert target.mu == 1.0 and t == 0.5
    assert _within_binomial(r["fp"], 2000, norm.sf(t))        # P(N(0,1) ≥ t)
    assert _within_binomial(r["fn"], 2000, norm.cdf(t - 1.0))  # P(N(μ,1) < t)
    # the score law itself: mean of the in-arm minus the out-arm ≈ μ (std of the difference √(2/2000))
    diff = np.mean(res.scores_in) - np.mean(res.scores_out)
    assert abs(diff - 1.0) <= 5.3 * math.sqrt(2 / 2000)


def test_report_is_the_clopper_pearson_bound_of_the_recounted_runs_and_is_valid():
    target = GaussianRuns(sigma=1.0, steps=1)                 # μ = 1
    res = run_multirun_audit(target, runs_in=1500, runs_out=1500, threshold=0.5, delta=1e-5, seed=3)
    r = res.report.result
    fn = sum(s < 0.5 for s in res.scores_in)
    fp = sum(s >= 0.5 for s in res.scores_out)
    assert (r["fn"], r["fp"], r["n_in"], r["n_out"]) == (fn, fp, 1500, 1500)
    assert r == clopper_pearson(fp, 1500, fn, 1500, delta=1e-5, confidence=0.95).result
    exact = exact_gdp_epsilon(1.0, 1e-5)
    # the default claim is the certified μ-GDP ε: on the safe side of the exact one, and tight
    assert exact - 1e-9 <= target.nominal_epsilon(1e-5) <= exact + 1e-3
    assert res.report.claim["mechanism"] == {"name": "gaussian_runs", "params": {"sigma": 1.0, "steps": 1,
                                                                                  "mu": 1.0}}
    # validity at confidence 1 − 1e-7 (false-failure probability ≤ 1e-7): the bound stays below the true ε
    strict = clopper_pearson(fp, 1500, fn, 1500, delta=1e-5, confidence=1 - 1e-7).result["eps_lower"]
    assert 0 < strict <= r["eps_lower"] < exact


def test_seeds_follow_the_documented_derivation():
    target = GaussianRuns(sigma=0.5, steps=3)
    res = run_multirun_audit(target, runs_in=3, runs_out=2, threshold=1.0, delta=1e-5, seed=42)
    for arm, scores, include in (("in", res.scores_in, True), ("out", res.scores_out, False)):
        for i, score in enumerate(scores):
            seed = derive_seed(42, f"audits.multirun/{arm}/{i}")
            noise = np.random.default_rng(seed).standard_normal(3)
            assert score == pytest.approx((3 * float(include) + 0.5 * noise.sum()) / (0.5 * math.sqrt(3)),
                                          rel=1e-12)
    assert run_seeds(3, 2, RandomnessPolicy.seeded(42))[3] == ("out", 0, derive_seed(42, "audits.multirun/out/0"))
    assert res.report.randomness["audit_release"] is False and "seed 42" in res.report.randomness["note"]


def test_unseeded_runs_draw_fresh_seeds():
    target = GaussianRuns(sigma=1.0)
    a = run_multirun_audit(target, runs_in=4, runs_out=4, threshold=0.5, delta=1e-5)
    b = run_multirun_audit(target, runs_in=4, runs_out=4, threshold=0.5, delta=1e-5)
    assert a.scores_in != b.scores_in
    assert a.report.randomness["audit_release"] is None and "OS entropy" in a.report.randomness["note"]


@dataclass(frozen=True)
class Flaky:
    """GaussianRuns that raises on the run with seed `bad_in` and returns NaN on the run with seed `nan_out`."""
    bad_in: int
    nan_out: int

    def __call__(self, seed, include_canary):
        if seed == self.bad_in:
            raise RuntimeError(f"training diverged (seed {seed})")
        if seed == self.nan_out:
            return float("nan")
        return GaussianRuns(1.0)(seed, include_canary)


def flaky_for(seed: int, runs_in: int, runs_out: int) -> Flaky:
    seeds = {(arm, i): s for arm, i, s in run_seeds(runs_in, runs_out, RandomnessPolicy.seeded(seed))}
    return Flaky(bad_in=seeds[("in", 2)], nan_out=seeds[("out", 5)])


def test_failed_runs_are_listed_and_left_out_of_the_counts():
    res = run_multirun_audit(flaky_for(5, 10, 12), runs_in=10, runs_out=12, threshold=0.5, delta=1e-5, seed=5,
                             max_retries=1)
    r = res.report.result
    assert [(f["arm"], f["run"], f["attempts"]) for f in res.failed] == [("in", 2, 2), ("out", 5, 1)]
    assert res.failed[0]["error"].startswith("RuntimeError: training diverged")
    assert res.failed[1]["error"].startswith("InvalidParameter: score=nan")
    assert res.scores_in[2] is None and res.scores_out[5] is None
    assert (r["n_in"], r["n_out"]) == (9, 11)                       # the runs that finished, no more
    assert r["fn"] == sum(s < 0.5 for s in res.scores_in if s is not None)
    assert r["fp"] == sum(s >= 0.5 for s in res.scores_out if s is not None)
    d = res.report.diagnostics
    assert d["runs_requested"] == {"in": 10, "out": 12} and len(d["runs_failed"]) == 2
    assert d["execution"]["backend"] == "serial" and d["execution"]["finished"] == 21    # the NaN run did return


def always_fails(seed, include_canary):
    raise RuntimeError("no GPU")


def test_cli_no_finished_run_is_exit_2_without_artifact(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["audit", "multi-run", "--runs-in", "3", "--runs-out", "3", "--delta", "1e-5", "--target",
                 "tests.audits.test_multirun_driver:always_fails", "--threshold", "0", "--max-retries", "0",
                 "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "no run with the canary finished" in capsys.readouterr().err


def test_cli_artifact_counts_equal_the_finished_runs(tmp_path, capsys):
    out = tmp_path / "audit"
    code = main(["audit", "multi-run", "--runs-in", "300", "--runs-out", "200", "--sigma", "1", "--steps", "4",
                 "--delta", "1e-5", "--seed", "9", "--out", str(out), "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    doc = json.loads((out / "audit.json").read_text())
    assert verify_seal(doc)
    validate(doc, name="audit.schema.json")
    assert printed["eps_lower"] == doc["result"]["eps_lower"] and printed["artifact"] == str(out / "audit.json")
    assert doc["method"] == "clopper_pearson" and doc["canaries"]["inclusion"] == "fixed_runs"
    assert (doc["result"]["n_in"], doc["result"]["n_out"]) == (300, 200)
    assert doc["diagnostics"]["execution"]["finished"] == 500 and doc["diagnostics"]["runs_failed"] == []
    assert doc["diagnostics"]["threshold"] == 1.0                     # μ/2 with μ = √4/1
    assert doc["claim"]["epsilon"] == pytest.approx(exact_gdp_epsilon(2.0, 1e-5), abs=1e-3)
    assert "ray" not in doc["software"] and doc["randomness"]["audit_release"] is False


@pytest.mark.parametrize("change, name", [
    ({"runs_in": 0}, "runs_in"), ({"runs_out": 1.5}, "runs_out"), ({"threshold": float("nan")}, "threshold"),
    ({"delta": 2}, "delta"), ({"confidence": 1}, "confidence"), ({"seed": -1}, "seed"),
    ({"backend": "threads"}, "backend"), ({"max_retries": -1}, "max_retries"),
    ({"address": "localhost:6379"}, "ray_address"), ({"backend": "ray", "address": "no-port"}, "ray_address"),
    ({"claim": {"neighbouring": "x"}}, "claim"),
])
def test_bad_input_is_refused_before_any_run(change, name):
    calls = []

    def spy(seed, include_canary):
        calls.append(seed)
        return 0.0

    kwargs = {**dict(runs_in=2, runs_out=2, threshold=0.5, delta=1e-5, seed=1), **change}
    with pytest.raises(InvalidParameter) as info:
        run_multirun_audit(spy, **kwargs)
    assert info.value.name == name and calls == []


@pytest.mark.parametrize("argv, name", [
    (["--sigma", "1", "--backend", "threads"], "backend"),
    (["--sigma", "1", "--ray-address", "localhost:6379"], "ray_address"),
    (["--sigma", "1", "--backend", "ray", "--ray-address", "host:0"], "ray_address"),
    (["--sigma", "1", "--max-retries", "-1"], "max_retries"),
    ([], "sigma"),
    (["--sigma", "0"], "sigma"),
    (["--target", "tests.audits.test_multirun_driver:always_fails"], "threshold"),
    (["--target", "tests.audits.test_multirun_driver:always_fails", "--threshold", "0", "--sigma", "1"], "sigma"),
    (["--target", "no_such_module:fn", "--threshold", "0"], "target"),
    (["--target", "gauss", "--threshold", "0"], "target"),
    (["--sigma", "1", "--runs-in", "0"], "runs_in"),
])
def test_cli_bad_input_is_exit_2_without_artifact(argv, name, tmp_path, capsys):
    out = tmp_path / "out"
    base = ["audit", "multi-run", "--runs-in", "5", "--runs-out", "5", "--delta", "1e-5", "--out", str(out)]
    assert main(base + argv) == 2                          # a repeated flag overrides the base one
    captured = capsys.readouterr()
    assert not out.exists() and captured.out == ""
    assert captured.err.startswith(f"privcheck: error: invalid {name}=")


# ------------------------------------------------------------------------------------------ docs

AUDITS_DOC = section("audits.md", "## Multi-run audits that train")


def test_docs_python_block_runs():
    blocks = re.findall(r"```python\n(.*?)```", AUDITS_DOC, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/audits.md", "exec"), {})


def test_docs_multi_run_command_prints_what_it_shows():
    commands = console_commands(AUDITS_DOC)
    assert len(commands) == 1 and commands[0][1]
    for argv, shown in commands:
        actual = run_cli(argv).splitlines()
        assert len(actual) == len(shown)
        for s, a in zip(shown, actual):
            assert same(s, a), (s, a)
