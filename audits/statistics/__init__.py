"""The statistics behind the audits and the report they produce: the one-run test and its p-values (`one_run`,
`pvalue`), guess rules and thresholds (`strategies`), Gaussian- and f-DP (`gdp`, `fdp_claim`), Clopper–Pearson
multi-run bounds (`clopper_pearson`), power analysis and its score models (`power`, `score_models`), and the audit
report (`report`). Proof notes: docs/audits.md.
"""
