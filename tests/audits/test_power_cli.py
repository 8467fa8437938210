"""`privcheck audit power` (audits/cli/power.py), on a parser built here the way privcheck.cli builds its verbs.

Reference values: the ceiling of docs/audits.md (m = 1000, δ = 1e−5: 5.7823), the DP-GRPO paper's nominal ε ≈ 5.04 for
q = 128/6988, σ = 0.612058477104, T = 100, δ = 1/69880, and the ceiling's δ = 0 closed form.
"""

from __future__ import annotations

import json
import math

import pytest

from audits.cli.power import add_power_parser
from privcheck.cli import build_parser
from privcheck.errors import InvalidParameter


def _parser():
    """The installed `privcheck` command line (the audit commands come from the entry point)."""
    return build_parser()


def _run(argv, capsys):
    args = _parser().parse_args(["audit", "power", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_json_headline_keys_and_reference_ceiling(capsys):
    out = _run(["--canaries", "1000", "--delta", "1e-5", "--score-model", "perfect", "--epsilon-nominal", "5",
                "--sims", "10", "--seed", "1", "--json"], capsys)
    doc = json.loads(out)                                 # exactly one JSON object
    for key in ("eps_ceiling", "planned_eps_lower", "guesses", "min_correct_for_nominal"):
        assert key in doc
    assert abs(doc["eps_ceiling"] - 5.7823) <= 1e-4       # reference ceiling
    assert doc["planned_eps_lower"] == doc["eps_ceiling"] and doc["guesses"] == 1000
    assert set(doc["power"]) == {"eps_ceiling", "min_correct_for_nominal", "planned_eps_lower", "mc_median",
                                 "mc_p10", "mc_p90", "prob_zero", "score_model", "underpowered",
                                 "underpowered_fraction", "canaries_needed", "plan_note"}
    assert doc["power"]["score_model"] == "perfect" and doc["eps_nominal_source"] == "given"
    assert doc["randomness"] == {"seed": 1, "seeded": True, "note": "seeded plan (seed 1): reproducible"}


def test_dpsgd_default_nominal_is_the_pld_epsilon(capsys):
    out = _run(["--canaries", "200", "--delta", str(1 / 69880), "--score-model",
                f"dpsgd_dirac:{128 / 6988},0.612058477104,100,sum", "--sims", "5", "--seed", "0", "--json"], capsys)
    doc = json.loads(out)
    assert abs(doc["eps_nominal"] - 5.04) < 0.005         # DP-GRPO paper: nominal ε ≈ 5.04
    assert doc["eps_nominal_source"].startswith("pld(")
    assert doc["plan_reaches_nominal"] is False and doc["min_correct_for_nominal"] is None


def test_table_output_states_the_verdict(capsys):
    out = _run(["--canaries", "100", "--delta", "0", "--score-model", "gdp:1", "--epsilon-nominal", "6",
                "--sims", "5", "--seed", "0"], capsys)
    rows = dict(line.split(None, 1) for line in out.splitlines() if line.startswith(("eps_ceiling", "verdict")))
    assert math.isclose(float(rows["eps_ceiling"]), -math.log(20 ** (1 / 100) - 1), rel_tol=1e-9)   # δ = 0 form
    assert "CANNOT CERTIFY" in rows["verdict"] and "at least" in rows["verdict"]


@pytest.mark.parametrize("argv, name", [
    (["--canaries", "0", "--delta", "1e-5", "--score-model", "perfect"], "canaries"),
    (["--canaries", "10", "--delta", "1e-5", "--score-model", "nope"], "score_model"),
    (["--canaries", "10", "--delta", "1e-5", "--score-model", "dpsgd_dirac:2,1,10,llr"], "q"),
    (["--canaries", "10", "--delta", "1e-5", "--score-model", "perfect", "--confidence", "1"], "confidence"),
    (["--canaries", "10", "--delta", "-1", "--score-model", "perfect"], "delta"),
    (["--canaries", "10", "--delta", "1e-5", "--score-model", "perfect", "--sims", "0"], "sims"),
])
def test_bad_input_raises_invalid_parameter(argv, name, capsys):
    args = _parser().parse_args(["audit", "power", *argv, "--json"])
    with pytest.raises(InvalidParameter) as info:
        args.func(args)
    assert info.value.name == name
    assert capsys.readouterr().out == ""                  # nothing printed before the error


def test_main_style_exit_code_two(capsys):
    """privcheck.cli.main maps InvalidParameter to exit 2 with the parameter named on stderr."""
    from privcheck.cli import main

    code = main(["audit", "power", "--canaries", "10", "--delta", "1e-5", "--score-model", "gdp:-1"])
    assert code == 2
    assert "invalid mu=-1.0" in capsys.readouterr().err


def test_power_parser_is_the_registered_one():
    """`audits.cli.register` wires `audits.cli.power.add_power_parser` under `privcheck audit`."""
    args = _parser().parse_args(["audit", "power", "--canaries", "10", "--delta", "1e-5", "--score-model", "perfect"])
    probe = _probe_parser().parse_args(["power", "--canaries", "10", "--delta", "1e-5", "--score-model", "perfect"])
    assert args.func is probe.func


def _probe_parser():
    import argparse

    parser = argparse.ArgumentParser()
    add_power_parser(parser.add_subparsers(), argparse.ArgumentParser(add_help=False))
    return parser
