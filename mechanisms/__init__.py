"""Private mechanisms built on `privcheck` (selection: PrivBoN/PrivITP; dpgrpo: DP-GRPO).

Dependencies flow one way: `audits → mechanisms → privcheck`. A mechanism never computes its own ε: it
calls one `privcheck.accounting` function and returns its record with the output. The selection and
DP-GRPO mechanisms are specified in shared/spec/selection.md and shared/spec/dpgrpo.md and are not yet
implemented in this package.
"""
