"""The synthetic benchmark (`privcheck simulate selection`, docs/selection.md): artifact, plots, randomness,
bad input, atomicity, and the exactness of its building blocks against independent computations."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import mechanisms.selection.simulate.run as sim_run
from mechanisms.selection import cli
from mechanisms.selection.laws import privitp_law
from mechanisms.selection.simulate import (
    ARTIFACT,
    DEFAULT_SEED,
    FIGURES,
    Z_SCORE,
    Curve,
    DataConfig,
    Pools,
    SimulationConfig,
    bootstrap_weights,
    lambda_grid,
    monotone_report,
    pool_acceptance,
    privitp_expected,
    run_simulation,
    scaling_experiment,
    significant_increase,
    simulate,
)
from privcheck.accounting import PrivITPParams
from privcheck.artifacts.schema import load_schema, validate
from privcheck.artifacts.writer import verify_seal
from privcheck.errors import InvalidParameter

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_config(**kw) -> SimulationConfig:
    base = dict(data=DataConfig(prompts=4, pool_size=300), ns=(1, 2, 4, 8), replicates=2, bootstrap=20,
                sigmas=(0.4,), sigma=0.4, filter_seeds=1, filter_budget=3.0, quick=True)
    base.update(kw)
    return SimulationConfig(**base).validate()


def stand_in_figures(body: dict) -> dict[str, bytes]:
    """In place of `render_plots` (≈ 3 s of matplotlib) where a test checks the CLI wiring or the atomic write, not
    the figures: distinct bytes under every figure name, hashed into the artifact like real PNGs. The real figures
    are rendered and checked by `quick_run` (test_quick_run_writes_valid_artifact_and_plots)."""
    return {name: PNG_MAGIC + f"stand-in {name}".encode() for name in FIGURES.values()}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    doc, paths = run_simulation(out, seed=DEFAULT_SEED, quick=True)
    return out, doc, paths


# --- artifact ------------------------------------------------------------------------------------------

def test_quick_run_writes_valid_artifact_and_plots(quick_run):
    out, doc, paths = quick_run
    assert sorted(p.name for p in paths) == sorted([ARTIFACT, *FIGURES.values()])
    assert paths[-1].name == ARTIFACT                           # the artifact is written last
    on_disk = json.loads((out / ARTIFACT).read_text("utf-8"))
    assert on_disk == doc
    validate(on_disk, name="simulation.schema.json")
    assert on_disk["schema"] == "privcheck.simulation/1"
    assert verify_seal(on_disk)
    for key, name in FIGURES.items():
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert on_disk["figures"][key] == {"file": name, "sha256": hashlib.sha256(data).hexdigest()}
    cfg = SimulationConfig.reduced()
    sc = on_disk["curves"]["scaling"]
    assert sc["n"] == list(cfg.ns)
    for curve in [sc["bon"]["true"], sc["itp"]["proxy"]] + [sc[m][repr(s)]["true"] for m in ("privbon", "privitp")
                                                             for s in cfg.sigmas]:
        assert len(curve["mean"]) == len(cfg.ns)
        assert all(0.0 <= x <= 1.0 for x in curve["mean"])
        assert all(lo <= hi for lo, hi in zip(*curve["ci95"]))
    fl = on_disk["curves"]["filter"]
    assert fl["n"] == 16 and fl["budget"] == 50.0 and fl["sigma"] == list(cfg.sigmas)
    for rule in fl["rules"].values():
        assert np.array(rule["answered"]).shape == (len(cfg.sigmas), cfg.filter_seeds)
    assert all(max(s) <= 50.0 for s in fl["rules"]["filter"]["spent"])
    assert all(max(s) <= 50.0 for s in fl["rules"]["basic_clamped"]["spent"])


def test_seeded_run_is_not_a_privacy_release(quick_run):
    _, doc, _ = quick_run
    assert doc["randomness"] == {"mode": "seeded", "seed": DEFAULT_SEED, "privacy_release": False,
                                 "note": doc["randomness"]["note"]}
    assert "not a privacy release" in doc["randomness"]["note"]
    assert doc["privacy_release"] is False
    bad = dict(doc, randomness=dict(doc["randomness"], privacy_release=True))
    with pytest.raises(jsonschema.ValidationError):         # the schema refuses a seeded "release"
        validate(bad, name="simulation.schema.json")


def test_schema_is_a_valid_json_schema():
    schema = load_schema("simulation.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "privcheck.simulation/1"


def test_committed_figures_match_their_artifact():
    """docs/figures/selection/ holds the default-seed full run: schema-valid, sealed, PNG hashes match."""
    root = Path(__file__).resolve().parents[2] / "docs" / "figures" / "selection"
    doc = json.loads((root / ARTIFACT).read_text("utf-8"))
    validate(doc, name="simulation.schema.json")
    assert verify_seal(doc)
    assert doc["randomness"]["seed"] == DEFAULT_SEED and doc["config"]["quick"] is False
    assert doc["config"] == SimulationConfig.full().to_json()
    for key, name in FIGURES.items():
        assert doc["figures"][key]["sha256"] == hashlib.sha256((root / name).read_bytes()).hexdigest()


def test_observations_are_reported_not_asserted(quick_run):
    _, doc, _ = quick_run
    obs = doc["observations"]
    for key in ("bon_non_monotone", "private_monotone", "privitp_ge_privbon", "privitp_approaches_itp"):
        assert isinstance(obs[key]["value"], bool)
    ratios = obs["filter_vs_basic"]["ratio_per_sigma"]
    fl = doc["curves"]["filter"]["summary"]
    for r, a, b in zip(ratios, fl["filter"]["answered_mean"], fl["basic_heuristic"]["answered_mean"]):
        assert r == pytest.approx(a / b, rel=1e-12)


def test_same_seed_same_curves_other_seed_other_curves():
    cfg = tiny_config()
    a, b, c = simulate(cfg, 5), simulate(cfg, 5), simulate(cfg, 6)
    assert a["curves"] == b["curves"] and a["observations"] == b["observations"]
    assert a["curves"]["scaling"]["bon"] != c["curves"]["scaling"]["bon"]


def test_cli_quick(tmp_path, capsys, monkeypatch):
    """`--quick` reaches `run_simulation(quick=True)` (its config spied on, the tiny one run in its place; the quick
    configuration itself runs in `quick_run`) and the printed payload is the written artifact's."""
    quick = []
    monkeypatch.setattr(SimulationConfig, "reduced", classmethod(lambda cls: quick.append(cls) or tiny_config()))
    monkeypatch.setattr(sim_run, "render_plots", stand_in_figures)
    parser = argparse.ArgumentParser(prog="privcheck")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true")
    verbs = {"simulate": sub.add_parser("simulate").add_subparsers(dest="what", required=True)}
    cli.add_simulate_parser(verbs, common)
    args = parser.parse_args(["simulate", "selection", "--out", str(tmp_path), "--quick", "--json"])
    assert args.seed == DEFAULT_SEED
    assert args.func(args) == 0
    assert quick == [SimulationConfig]
    payload = json.loads(capsys.readouterr().out)
    assert payload["artifact"] == str(tmp_path / ARTIFACT)
    assert payload["randomness"]["privacy_release"] is False
    doc = json.loads((tmp_path / ARTIFACT).read_text("utf-8"))
    assert payload["sha256"] == doc["sha256"] and payload["observations"] == doc["observations"]
    assert sorted(Path(f).name for f in payload["files"]) == sorted([ARTIFACT, *FIGURES.values()])
    assert doc["config"] == tiny_config().to_json()
    with pytest.raises(SystemExit) as exc:                # the one seed rule, applied while parsing
        parser.parse_args(["simulate", "selection", "--out", str(tmp_path / "x"), "--quick", "--seed", "-3"])
    assert exc.value.code == 2 and "invalid seed=-3: allowed range is an integer in [0, " in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# --- bad input and atomicity ---------------------------------------------------------------------------

def _raises(name, fn, *args, **kw):
    with pytest.raises(InvalidParameter) as err:
        fn(*args, **kw)
    assert err.value.name == name, err.value


def test_bad_input(tmp_path):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    _raises("seed", run_simulation, tmp_path / "a", seed=-1, quick=True)
    _raises("seed", run_simulation, tmp_path / "a", seed=True, quick=True)
    _raises("seed", run_simulation, tmp_path / "a", seed=1.5, quick=True)
    _raises("out", run_simulation, afile, quick=True)
    _raises("out", run_simulation, "", quick=True)
    _raises("quick", run_simulation, tmp_path / "a", quick="yes")
    _raises("config", run_simulation, tmp_path / "a", config={"prompts": 3})
    _raises("hack_fraction", DataConfig(hack_fraction=1.5).validate)
    _raises("mean_range", DataConfig(mean_range=(0.6, 0.2)).validate)
    _raises("prompts", DataConfig(prompts=1).validate)
    _raises("sigma", SimulationConfig(sigma=0.3).validate)
    _raises("sigmas", SimulationConfig(sigmas=(0.4, 0.1), sigma=0.4).validate)
    _raises("ns", SimulationConfig(ns=(1, 4, 2)).validate)
    _raises("ns", SimulationConfig(ns=(0, 1)).validate)
    _raises("sensitivity", SimulationConfig(sensitivity=2.0).validate)
    _raises("delta_total", SimulationConfig(delta=1e-5, delta_total=1e-6).validate)
    _raises("filter_budget", SimulationConfig(filter_budget=-1.0).validate)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("step", ["filter_experiment", "render_plots", "observations", "schema"])
def test_no_partial_artifact_when_a_step_fails(tmp_path, monkeypatch, step):
    out = tmp_path / "out"

    def boom(*args, **kw):
        raise RuntimeError(f"injected failure in {step}")

    if step == "schema":                                   # an invalid document is never written
        monkeypatch.setattr(sim_run, "observations", lambda *a, **k: {"bogus": True})
        monkeypatch.setattr(sim_run, "render_plots", stand_in_figures)     # figures staged before the schema fails
        expected = jsonschema.ValidationError
    else:
        monkeypatch.setattr(sim_run, step, boom)
        expected = RuntimeError
    with pytest.raises(expected):
        run_simulation(out, seed=1, config=tiny_config())
    assert not out.exists() or list(out.iterdir()) == []


def test_failed_write_removes_the_files_it_created(tmp_path, monkeypatch):
    """The artifact is moved into place last; when that move fails, the figures already moved are taken back
    and the files that were in DIR before are restored."""
    import privcheck.artifacts.writer as writer

    out = tmp_path / "out"
    out.mkdir()
    (out / FIGURES["scaling"]).write_bytes(b"old figure")
    real = writer.os.replace

    def failing(src, dst):
        if Path(dst).name == ARTIFACT:
            raise OSError("disk full (injected)")
        return real(src, dst)

    monkeypatch.setattr(writer.os, "replace", failing)
    monkeypatch.setattr(sim_run, "render_plots", stand_in_figures)
    with pytest.raises(OSError):
        run_simulation(out, seed=1, config=tiny_config())
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == [FIGURES["scaling"]]
    assert (out / FIGURES["scaling"]).read_bytes() == b"old figure"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]            # no staging directory left behind


# --- building blocks against independent computations ---------------------------------------------

def test_privitp_expected_matches_enumerated_exact_laws():
    """E[r*] of PrivITP from the grid computation (Phase 2 integrated out analytically) equals the average,
    over every Phase-2 list of a 3-response pool, of the library's exact law `privitp_law`."""
    q = 8
    proxy = np.array([[2, 5, 8]]) / q                      # 0.25, 0.625, 1.0 on a public grid of 1/8
    true = np.array([[0.1, 0.9, 0.05]])
    pools = Pools(true=true, proxy=proxy, hacking=np.zeros((1, 3), bool), resolution=q)
    for sigma in (0.05, 0.2, 0.8):
        base = PrivITPParams(candidates=1, beta=0.05, sigma_x=sigma / 2, sigma_z=sigma / 2, headroom=0.5,
                             sensitivity=0.01, delta=1e-6)
        acc = pool_acceptance(pools, base, lambda_grid(base, 1 / 64, 10.0))
        for n, lam in itertools.product([1, 2, 3], [0.3, 0.95, 1.02]):
            p = replace(base, candidates=n)
            lists = np.array(list(itertools.product(range(3), repeat=n)))        # all 3^n equiprobable lists
            law = privitp_law(proxy[0, lists], np.full(len(lists), lam), p, method="split")
            exact_true = np.mean((law.probs * true[0, lists]).sum(axis=1) + law.fallback * true.mean())
            exact_proxy = np.mean((law.probs * proxy[0, lists]).sum(axis=1) + law.fallback * proxy.mean())
            et, ep = privitp_expected(acc, np.array([0]), np.array([lam]), n, p.sigma_x, pools.base_true,
                                      pools.base_proxy)
            # trapezoid error O(step²) from the kink of the clamp of c: a few 1e-7 at step σ_X/64
            assert et[0] == pytest.approx(exact_true, abs=1e-6), (sigma, n, lam)
            assert ep[0] == pytest.approx(exact_proxy, abs=1e-6), (sigma, n, lam)


def test_constant_pool_gives_its_value_for_every_method():
    """A pool whose responses all have the same proxy and true reward: every selector (and every fallback)
    returns that value exactly, at every n."""
    cfg = tiny_config(sigmas=(0.1, 0.4))
    pools = Pools(true=np.full((4, 50), 0.3), proxy=np.full((4, 50), 0.625), hacking=np.zeros((4, 50), bool),
                  resolution=1024)
    w = bootstrap_weights(4, 20, np.random.default_rng(0))
    curves = scaling_experiment(pools, cfg, np.random.default_rng(1), w)
    for key, d in curves.items():
        assert np.allclose(d["true"].mean, 0.3, atol=1e-9), key
        assert np.allclose(d["proxy"].mean, 0.625, atol=1e-9), key


def test_bon_and_privbon_curves_against_closed_forms():
    """Two-valued pools (half the responses at r = a, half at r = b, proxy = true reward):
    E[BoN] = b − (b − a)·2^{−n}; PrivBoN at n = 2: E = (a + b)/4 + ½·(a·e^{a/σ} + b·e^{b/σ})/(e^{a/σ} + e^{b/σ}).
    Monte Carlo over 2·4000 lists; tolerance 6 standard errors (two-sided normal tail < 2e-9)."""
    a, b, sigma = 0.25, 0.75, 0.4
    prompts, k = 2, 64
    vals = np.tile(np.repeat([a, b], k // 2), (prompts, 1))
    pools = Pools(true=vals, proxy=vals, hacking=np.zeros_like(vals, bool), resolution=4)
    cfg = tiny_config(data=DataConfig(prompts=prompts, pool_size=k), ns=(1, 2, 4, 8), replicates=4000,
                      sigmas=(sigma,), sigma=sigma)
    w = bootstrap_weights(prompts, 20, np.random.default_rng(0))
    curves = scaling_experiment(pools, cfg, np.random.default_rng(2), w)
    lists = prompts * cfg.replicates
    for j, n in enumerate(cfg.ns):
        p_top = 1 - 2.0 ** -n
        expected = a + (b - a) * p_top
        se = (b - a) * math.sqrt(p_top * (1 - p_top) / lists)
        assert abs(curves["bon"]["true"].mean[j] - expected) <= 6 * se + 1e-12, n
    ea, eb = math.exp(a / sigma), math.exp(b / sigma)
    mixed = (a * ea + b * eb) / (ea + eb)                   # softmax expectation of the lists (a, b) and (b, a)
    expected = (a + b) / 4 + 0.5 * mixed
    sd = float(np.std([mixed, mixed, a, b]))               # sd of the per-list value over the 4 equiprobable lists
    se = sd / math.sqrt(lists)
    assert abs(curves[f"privbon@{sigma!r}"]["true"].mean[1] - expected) <= 6 * se + 1e-12
    # BoN's proxy curve is pathwise non-decreasing in n (nested prefixes): exactly, not statistically
    assert np.all(np.diff(curves["bon"]["proxy"].mean) >= 0)


def _curve(values_by_n, prompts=40, noise=1e-3, seed=0):
    """A Curve whose per-prompt values are the given means plus small prompt noise, bootstrapped."""
    gen = np.random.default_rng(seed)
    per_prompt = np.asarray(values_by_n, dtype=np.float64)[:, None] + noise * gen.standard_normal((len(values_by_n),
                                                                                                   prompts))
    w = bootstrap_weights(prompts, 400, gen)
    return Curve(per_prompt, w @ per_prompt.T)


def test_monotonicity_observations_on_known_shapes():
    ns = [1, 2, 4, 8, 16]
    rising = _curve([0.1, 0.2, 0.3, 0.4, 0.5])
    hump = _curve([0.1, 0.3, 0.5, 0.3, 0.1])
    flat = _curve([0.3] * 5, noise=1e-2)
    assert monotone_report(rising, ns)["monotone"] is True
    rep = monotone_report(hump, ns)
    assert rep["monotone"] is False and rep["largest_decrease"] == pytest.approx(0.4, abs=0.01)
    assert monotone_report(flat, ns)["monotone"] is True       # noise alone is not a decrease
    assert significant_increase(hump, 0, 2) > Z_SCORE and significant_increase(hump, 4, 2) > Z_SCORE


def test_full_configuration_is_valid_and_documented():
    cfg = SimulationConfig.full()
    assert cfg.ns == tuple(2 ** k for k in range(13)) and cfg.beta == 0.05
    assert cfg.filter_n == 16 and cfg.filter_budget == 50.0 and cfg.filter_seeds == 10
    p = cfg.params(0.4, 16)
    assert p.sigma_x == p.sigma_z == 0.2
    assert replace(cfg, quick=True).validate().quick is True


@pytest.mark.slow
def test_full_run_writes_valid_artifact(tmp_path):
    doc, paths = run_simulation(tmp_path, seed=DEFAULT_SEED)
    validate(json.loads((tmp_path / ARTIFACT).read_text("utf-8")), name="simulation.schema.json")
    assert doc["wall_time_s"] < 180
    assert len(paths) == 4
