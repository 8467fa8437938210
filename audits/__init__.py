"""Privacy audits (one-run canary audits, Clopper–Pearson, power analysis, black-box neighbour pairs).

May import `mechanisms` and `privcheck`, never the other way round. Specified in shared/spec/audits.md.

Modules: `one_run` (Steinke–Nasr–Jagielski p-value, ε_lower, reports from counts or scores),
`strategies` (Explicit / Bonferroni / Split guess rules), `multirun` (Clopper–Pearson), `gdp` (GDP
conversions and the Gaussian-family estimates, never reported as ε lower bounds), `canary` (coins,
commitment, sealed reveal, pre-registration), `report` (the frozen AuditReport and its artifact),
`power` (planning), `blackbox` (selection-mechanism pair audits), `verify` (the `audits` suite), `cli`.
Submodules are imported on use: importing the package is cheap.
"""
