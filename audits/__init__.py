"""Privacy audits (one-run canary audits, Clopper–Pearson, power analysis, black-box neighbour pairs).

May import `mechanisms` and `privcheck`, never the other way round. What each audit guarantees, its assumptions and
the proofs the code relies on: docs/audits.md.

Modules: `pvalue` (the one-run p-value of Steinke, Nasr & Jagielski and the ε_lower search), `one_run` (reports
from counts or scores; re-exports `pvalue`), `strategies` (Explicit / Bonferroni / Split guess rules), `multirun`
(Clopper–Pearson), `gdp` (GDP conversions and the Gaussian-family estimates, never reported as ε lower bounds),
`canary` (coins, commitment, sealed reveal, pre-registration), `report` (the frozen AuditReport and its artifact),
`score_models` and `power` (planning), `blackbox` (selection-mechanism pair audits), `verify` (the `audits`
suite), `cli` (the `privcheck audit` commands). Submodules are imported on use: importing the package is cheap.
"""

__all__ = ["blackbox", "canary", "cli", "gdp", "multirun", "one_run", "power", "pvalue", "report", "score_models",
           "strategies", "verify"]
