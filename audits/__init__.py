"""Privacy audits (one-run canary audits, Clopper–Pearson, power analysis, black-box neighbour pairs).

May import `mechanisms` and `privcheck`, never the other way round. What each audit guarantees, its assumptions and
the proofs the code relies on: docs/audits.md.

Modules: `pvalue` (the one-run p-value of Steinke, Nasr & Jagielski and the ε_lower search), `one_run` (reports
from counts or scores; re-exports `pvalue`), `strategies` (Explicit / Bonferroni / Split guess rules), `multirun`
(Clopper–Pearson), `gdp` (GDP conversions and the Gaussian-family estimates, never reported as ε lower bounds),
`canary` (coins, commitment, sealed reveal, pre-registration), `scores_file` (scores files: load, verify against
the commitment, audit, write; docs/audit_your_model.md), `gradient_log` (one-run audits from the auditor log of a
gradient-canary hook, e.g. an Opacus run; docs/integrations/opacus.md), `report` (the frozen AuditReport and its
artifact), `score_models` and `power` (planning), `blackbox` (selection-mechanism pair audits), `null_check` (type-I
error of every audit on null scores), `verify` (the `audits` suite), `cli` (the `privcheck audit` commands).
Submodules are imported on use: importing the package is cheap.
"""

__all__ = ["blackbox", "canary", "cli", "gdp", "gradient_log", "multirun", "null_check", "one_run", "power", "pvalue",
           "report", "score_models", "scores_file", "strategies", "verify"]
