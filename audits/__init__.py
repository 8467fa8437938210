"""Privacy audits (one-run canary audits, Clopper–Pearson, power analysis, black-box neighbour pairs).

May import `mechanisms` and `privcheck`, never the other way round. Specified in shared/spec/audits.md;
not yet implemented in this package.
"""
