"""One-run canary audits of DP-GRPO (docs/audits.md, "Auditing DP-GRPO in one run"): gradient-space Dirac canaries
(`gradient_canary`) and input-space binary canaries scored end to end (`input_canary` and its `input_*` parts:
prompts, design, pilot, training, scoring, report).
"""
