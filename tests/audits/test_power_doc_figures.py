"""The power-analysis figures docs/audits.md shows: its `privcheck audit power` console block prints what it shows,
and the Monte Carlo columns of "The DP-GRPO planning figure" and of the seeded tiny-cpu run of "Measured figures"
are what `audits.power.plan` gives for their seeds (200 simulated audits each; ≈ 1 min each on 2 busy cores, so
slow). The planned figures are asserted independently in tests/audits/test_power.py."""

from __future__ import annotations

import re

import pytest

from audits.power import plan
from audits.score_models import DPSGDDirac
from tests.audits.doc_console import DOCS, console_commands, run_cli, same, section

pytestmark = pytest.mark.slow

Q, SIGMA, T, DELTA = 128 / 6988, 0.612058477104, 100, 1 / 69880


def test_power_console_block_prints_what_it_shows():
    commands = console_commands(section("audits.md", "## Power analysis: plan an audit before you run it"))
    assert len(commands) == 1 and len(commands[0][1]) == 12
    argv, shown = commands[0]
    actual = run_cli(argv).splitlines()
    assert len(actual) == len(shown)
    for s, a in zip(shown, actual):
        assert same(s, a), (s, a)


def test_dpgrpo_planning_table_monte_carlo_columns():
    table = section("audits.md", "### The DP-GRPO planning figure")
    rows = re.findall(r"^\| (LLR|sum \(final model\)) \| ([\d,]+) \| [\d.]+ \| [*\d.]+ \((\d+)\) \| "
                      r"([\d.]+) \[([\d.]+), ([\d.]+)\] \| ([\d.]+) \|$", table, flags=re.M)
    assert len(rows) == 4
    for stat, m, guesses, median, p10, p90, zero in rows:
        r = plan(int(m.replace(",", "")), delta=DELTA, confidence=0.95, eps_nominal=5.0385,
                 score_model=DPSGDDirac(Q, SIGMA, T, "llr" if stat == "LLR" else "sum"), sims=200, seed=2024)
        assert r.guesses == int(guesses)
        assert (round(r.mc_median, 3), round(r.mc_p10, 3), round(r.mc_p90, 3)) == (float(median), float(p10),
                                                                                   float(p90))
        assert r.prob_zero == pytest.approx(float(zero), abs=5e-4)


def test_tiny_cpu_seeded_run_monte_carlo_band():
    from audits.dpgrpo_canary import audit_plan

    text = (DOCS / "audits.md").read_text(encoding="utf-8")
    row = re.search(r"^\| seeded, `--seed 1` \| 1000 \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \[([\d.]+), "
                    r"([\d.]+)\] \|", text, flags=re.M)
    p = audit_plan(n_real=100, m=1000, q=0.5, T=30, target_epsilon=8.0, C=1.0)
    r = plan(1000, delta=p.delta, confidence=0.95, eps_nominal=p.epsilon().value,
             score_model=DPSGDDirac(p.sampling_rate, p.noise_multiplier, p.steps, "llr", 0.0), sims=200, seed=1)
    shown = tuple(float(x) for x in row.groups())
    assert (round(r.planned_eps_lower, 3), round(r.mc_median, 3), round(r.mc_p10, 3), round(r.mc_p90, 3)) == shown
