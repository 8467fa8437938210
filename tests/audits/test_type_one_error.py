"""Type-I error on null scores (issue 24 item 5; docs/audits.md, "Soundness on null scores").

Every method × threshold strategy × planner choice of `audits.null_check` (enumerated from the code: the classes of
`strategies.STRATEGIES`, every `ScoreModel` subclass × noiseless guard through `power.plan`, every black-box event
family × criterion) is run on seeded null data (in and out scores of the same law, coins i.i.d. Bern(½): true ε = 0,
every claim holds). A valid level-α audit is positive with probability ≤ α = 0.05, so each row's count of positives
is tested by an exact binomial test: the row fails only when P[Bin(n, α) ≥ count] < 1e-7 / (number of rows), so the
whole file fails falsely with probability < 1e-7 (union bound). A second test runs the same counters on data with a
strong signal and requires every row to exceed the null limit, so the counters can fail.
"""

from __future__ import annotations

import pytest

from audits import null_check as nc

SEED = 20241124


def _limit(trials: int, rows: int) -> int:
    """The largest count that passes: P[Bin(trials, α) ≥ count + 1] ≥ 1e-7 / rows fails at count + 1."""
    count = 0
    while nc.binomial_tail(count + 1, trials, nc.LEVEL) >= 1e-7 / rows:
        count += 1
    return count


def _documented(column: int) -> dict:
    """(method, rule) -> "positives/trials" of docs/audits.md's null-scores table (column 2: fast, 3: slow)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "audits.md").read_text(encoding="utf-8")
    section = text.split("## Soundness on null scores", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            table[(cells[0].strip("`"), cells[1])] = cells[column].split(" ")[0]
    return table


def _assert_documented(rows, column: int):
    assert {(r.method, r.rule): f"{r.positives}/{r.trials}" for r in rows} == _documented(column)


def _assert_valid(rows):
    bad = [(r.method, r.rule, r.positives, r.trials, r.tail) for r in rows if r.tail < 1e-7 / len(rows)]
    assert not bad, bad


def test_every_strategy_model_and_family_is_enumerated():
    assert nc.check_coverage() == []
    rules = nc.one_run_rules(200)
    assert {"explicit", "bonferroni", "split"} <= set(rules)
    assert sum(r.startswith("plan[") for r in rules) == 2 * len(nc.sm.ScoreModel.__subclasses__())


def test_null_scores_type_one_error_fast():
    """60 null trials: 60 one-run data sets × 11 rules × 3 methods, 60 multi-run pairs × 3 rules × 2 methods, 30
    black-box pairs × 8 families/criteria (≈ 2,600 audits). Measured with this seed: docs/audits.md."""
    rows = nc.run(60, SEED, blackbox_trials=30)
    assert len(rows) == 3 * len(nc.one_run_rules(200)) + 6 + len(nc.bb.FAMILIES) * len(nc.bb.CRITERIA)
    _assert_valid(rows)
    _assert_documented(rows, 2)


def test_counters_have_power_on_signal_scores():
    """The same counters on strong-signal data (in-scores shifted by 3 standard deviations; D puts 75% of its mass
    on output 0): every row is positive in more trials than the null limit allows, so `_assert_valid` can fail."""
    trials, bb_trials = 12, 12
    rows = nc.run(trials, SEED + 1, shift=3.0, blackbox_trials=bb_trials, draws=2000)
    weak = [(r.method, r.rule, r.positives) for r in rows if r.positives <= _limit(r.trials, len(rows))]
    assert not weak, weak


@pytest.mark.slow
def test_null_scores_type_one_error_slow():
    """10× the fast tier: 600 null trials (300 black-box pairs), ≈ 26,000 audits."""
    rows = nc.run(600, SEED + 2, blackbox_trials=300)
    _assert_valid(rows)
    _assert_documented(rows, 3)


# --- scripts/compare_peer_audits.py: only its help and its privcheck side run here (no peers, no network) ---------

def _peer_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "compare_peer_audits.py"
    spec = importlib.util.spec_from_file_location("compare_peer_audits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peer_script_help(capsys):
    with pytest.raises(SystemExit) as done:
        _peer_script().main(["--help"])
    assert done.value.code == 0
    assert "--install" in capsys.readouterr().out


def test_peer_script_privcheck_side(tmp_path, capsys):
    """The privcheck columns on real scores files (written, commitment-verified, audited); peers left out."""
    import json

    out = tmp_path / "table.json"
    assert _peer_script().main(["--privcheck-only", "--m", "100", "--trials", "4", "--figure-trials", "1",
                                "--out", str(tmp_path / "files"), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert set(doc["rows"]) == {"privcheck one_run, Bonferroni (4 pairs)", "privcheck one_run, Split(0.5)"}
    assert doc["absent"] == {} and "| privcheck one_run, Split(0.5) |" in table
    for row in doc["rows"].values():
        assert row["trials"] == 4 and 0 <= row["null_positive"] <= 4
        assert row["figures"]["mu=4"] > 1.0                 # μ = 4 on 100 canaries: far from 0
    assert len(list((tmp_path / "files").glob("null_*.npz"))) == 4
