"""Private mechanisms built on `privcheck`.

- `mechanisms.selection`: BoN, PrivBoN, ITP and PrivITP over score arrays, with exact output laws
  (spec: shared/spec/selection.md; proofs: docs/selection.md).
- `mechanisms.dpgrpo`: prompt-level DP-GRPO (spec: shared/spec/dpgrpo.md; in progress, docs/dpgrpo.md).

Dependencies flow one way: `audits → mechanisms → privcheck`. A mechanism never computes its own ε: it
calls one `privcheck.accounting` function and returns its record with the output.
"""
