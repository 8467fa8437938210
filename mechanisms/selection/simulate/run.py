"""`privcheck simulate selection`: the synthetic benchmark of BoN, PrivBoN, ITP and PrivITP (docs/selection.md,
"Synthetic benchmark"), assembled into one sealed artifact with its figures.

Reproduces the SETTINGS and QUALITATIVE CLAIMS of Bhattad & Ray Chowdhury's experiments on synthetic
data (no reward model or LLM is shipped). Nothing here is a privacy release: the data are synthetic and
every run is seeded (`privacy_release: false` in the artifact). The qualitative outcomes are computed and
reported as observations of the run, never asserted by the library.

    run_simulation(out, seed, quick):
        pools ← generate_pools(seeded);  scaling ← scaling_experiment;  filt ← filter_experiment
        body ← {config, curves, observations, environment, randomness, created_utc}
        figures ← render_plots(body);  body.figures ← {file, sha256} per PNG      (all in memory)
        with ArtifactDirectory(out): write the PNGs and DIR/selection_simulation.json (sealed, validated
        against simulation.schema.json); nothing is left in DIR if any step fails
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from mechanisms.selection.simulate.composition import filter_experiment, filter_summary
from mechanisms.selection.simulate.config import SimulationConfig
from mechanisms.selection.simulate.findings import observations
from mechanisms.selection.simulate.plots import FIGURES, render_plots
from mechanisms.selection.simulate.pools import generate_pools
from mechanisms.selection.simulate.scaling import bootstrap_weights, scaling_experiment
from privcheck.accounting import PrivBoNEvent, PrivITPPhase1Event, epsilon
from privcheck.artifacts import ArtifactDirectory
from privcheck.errors import InvalidParameter
from privcheck.randomness import RandomnessPolicy
from privcheck.serialization import utc_now

__all__ = ["ARTIFACT", "DEFAULT_SEED", "SCHEMA", "SCHEMA_ID", "run_simulation", "simulate"]

SCHEMA_ID = "privcheck.simulation/1"
SCHEMA = "simulation"                          # privcheck/schemas/simulation.schema.json
ARTIFACT = "selection_simulation.json"
DEFAULT_SEED = 20240917


def simulate(cfg: SimulationConfig, seed: int) -> dict:
    """Run both experiments and return the UNSEALED document body (nothing is written)."""
    from privcheck.environment import environment

    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise InvalidParameter("seed", seed, "an integer >= 0")
    seed = int(seed)
    policy = RandomnessPolicy.seeded(seed)
    cfg.validate()
    created = utc_now(timespec="seconds")
    start = time.perf_counter()
    root = np.random.SeedSequence(seed)
    pool_ss, list_ss, boot_ss, filt_ss = root.spawn(4)
    pools = generate_pools(cfg.data, np.random.Generator(np.random.PCG64(pool_ss)))
    boot_w = bootstrap_weights(pools.prompts, cfg.bootstrap, np.random.Generator(np.random.PCG64(boot_ss)))
    curves = scaling_experiment(pools, cfg, np.random.Generator(np.random.PCG64(list_ss)), boot_w)
    filt = filter_experiment(pools, cfg, filt_ss)
    filt_summary = filter_summary(filt)
    obs = observations(curves, cfg, filt_summary, filt)
    scaling = {"n": list(cfg.ns), "sigma": list(cfg.sigmas), "main_sigma": cfg.sigma,
               "base_true": float(pools.base_true.mean()), "base_proxy": float(pools.base_proxy.mean()),
               "bon": {k: c.to_json() for k, c in curves["bon"].items()},
               "itp": {k: c.to_json() for k, c in curves["itp"].items()},
               "privbon": {repr(s): {k: c.to_json() for k, c in curves[f"privbon@{s!r}"].items()}
                           for s in cfg.sigmas},
               "privitp": {repr(s): {k: c.to_json() for k, c in curves[f"privitp@{s!r}"].items()}
                           for s in cfg.sigmas},
               "privacy_reference": [{"sigma": s,
                                      "privbon_nominal_epsilon": epsilon(PrivBoNEvent(cfg.sensitivity, s,
                                                                                      mode="nominal")).value,
                                      "privitp_eps1": epsilon(PrivITPPhase1Event(cfg.params(s, 1))).value}
                                     for s in cfg.sigmas]}
    return {
        "schema": SCHEMA_ID, "kind": "selection",
        "description": "Synthetic benchmark of docs/selection.md ('Synthetic benchmark'): scaling of BoN, "
                       "PrivBoN, ITP and PrivITP in n from exact output laws, and PrivITP queries answered under "
                       "the provable ex-post filter vs basic composition. Seeded synthetic data: not a privacy "
                       "release.",
        "config": cfg.to_json(),
        "curves": {"scaling": scaling, "filter": {**filt, "summary": filt_summary}},
        "observations": obs,
        "environment": environment(),
        "randomness": {"mode": policy.mode, "seed": policy.seed, "privacy_release": policy.privacy_release,
                       "note": "seeded simulation: reproducible, not a privacy release"},
        "privacy_release": False,
        "created_utc": created,
        "wall_time_s": time.perf_counter() - start,
    }


def run_simulation(out, seed: int = DEFAULT_SEED, quick: bool = False,
                   config: SimulationConfig | None = None) -> tuple[dict, list[Path]]:
    """Run the benchmark and write DIR/selection_simulation.json and the PNG figures.

    Everything (experiments, plots, figure hashes) is computed in memory before the first file is staged;
    `ArtifactDirectory` seals and validates the document and moves the files into DIR together, the JSON
    artifact last. Returns (sealed document, written paths)."""
    directory = ArtifactDirectory(out)                     # validates `out`; touches nothing yet
    if not isinstance(quick, (bool, np.bool_)):
        raise InvalidParameter("quick", quick, "True or False")
    cfg = config if config is not None else (SimulationConfig.reduced() if quick else SimulationConfig.full())
    if not isinstance(cfg, SimulationConfig):
        raise InvalidParameter("config", type(cfg).__name__, "a SimulationConfig")
    body = simulate(cfg, seed)
    figures = render_plots(body)
    body["figures"] = {key: {"file": name, "sha256": hashlib.sha256(figures[name]).hexdigest()}
                       for key, name in FIGURES.items()}
    with directory as staging:
        paths = [staging.write_bytes(name, data) for name, data in figures.items()]
        doc = staging.write_json(ARTIFACT, body, schema=SCHEMA)
        paths.append(directory.target / ARTIFACT)
    return doc, paths
