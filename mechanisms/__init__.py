"""Private mechanisms built on `privcheck`.

- `mechanisms.selection`: BoN, PrivBoN, ITP and PrivITP over score arrays, with exact output laws
  (guarantees and proofs: docs/selection.md).
- `mechanisms.dpgrpo`: prompt-level DP-GRPO (threat model, Algorithm 1 and its proof map: docs/dpgrpo.md).

Dependencies flow one way: `audits → mechanisms → privcheck`. A mechanism never computes its own ε: it describes
what it did as an event (or a plan) and asks `privcheck.accounting.epsilon` for the record.
"""
