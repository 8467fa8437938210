"""The synthetic benchmark of the selection mechanisms (`privcheck simulate selection`; docs/selection.md,
"Synthetic benchmark").

One module per job:

* `config`       — every public constant of a run (`DataConfig`, `SimulationConfig`);
* `pools`        — synthetic prompts and response pools with a misspecified proxy reward;
* `scaling`      — the scaling experiment in n, from exact output laws, with bootstrap bands;
* `composition`  — the filter experiment (ex-post filter vs basic composition vs the replication rule);
* `findings`     — the qualitative observations computed from the curves (reported, never asserted);
* `plots`        — the PNG figures;
* `run`          — the document and its artifact (`simulate`, `run_simulation`).

The command line lives in `mechanisms.selection.cli`.
"""

from mechanisms.selection.simulate.composition import FILTER_RULES, filter_experiment, filter_summary
from mechanisms.selection.simulate.config import DataConfig, SimulationConfig
from mechanisms.selection.simulate.findings import Z_SCORE, monotone_report, observations, significant_increase
from mechanisms.selection.simulate.plots import FIGURES, METHODS, render_plots
from mechanisms.selection.simulate.pools import Pools, generate_pools
from mechanisms.selection.simulate.run import ARTIFACT, DEFAULT_SEED, SCHEMA, SCHEMA_ID, run_simulation, simulate
from mechanisms.selection.simulate.scaling import (
                                                   Curve,
                                                   PoolAcceptance,
                                                   bootstrap_weights,
                                                   lambda_grid,
                                                   pool_acceptance,
                                                   privitp_expected,
                                                   scaling_experiment,
)

__all__ = [
    "ARTIFACT", "Curve", "DEFAULT_SEED", "DataConfig", "FIGURES", "FILTER_RULES", "METHODS", "PoolAcceptance", "Pools",
    "SCHEMA", "SCHEMA_ID", "SimulationConfig", "Z_SCORE", "bootstrap_weights", "filter_experiment", "filter_summary",
    "generate_pools", "lambda_grid", "monotone_report", "observations", "pool_acceptance", "privitp_expected",
    "render_plots", "run_simulation", "scaling_experiment", "significant_increase", "simulate",
]
