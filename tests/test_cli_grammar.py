"""Issue 23, items 3 and 6: one number grammar for every number given as text (command-line flags, the `--history`
phases, CSV scores), one seed range for the CLI and the Python API, no ε printed beyond the documented range, error
lines that cut long values, `--help` of every command without the heavy modules, and ASCII terminals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from privcheck import validation
from privcheck.cli import main
from privcheck.errors import SHOWN_MAX, InvalidParameter, shown

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_NUMBERS = ("1_000", "1_0", "\u0661\u0662", "\uff11", "1\n", " 1", "1 ", "\t1", "inf", "nan", "0x10", "1,5",
                   "", "1" * (validation.NUMBER_TEXT_MAX + 1))
REALS = {"1": 1.0, "-2": -2.0, "+0.5": 0.5, ".5": 0.5, "5.": 5.0, "1e-5": 1e-5, "-.5E+3": -500.0, "1e1": 10.0}
INTEGERS = {"1": 1, "-3": -3, "+7": 7, "007": 7, "1" * validation.NUMBER_TEXT_MAX: int("1" * 100)}
HEAVY = ("torch", "transformers", "scipy", "flint", "dp_accounting", "matplotlib")
PRIVBON = ["account", "privbon", "--sensitivity", "0.1", "--sigma", "0.2"]
PRIVITP = ["account", "privitp", "--sensitivity", "0.25", "--r-max", "1", "--sigma-x", "0.5", "--sigma-z", "0.5",
           "--headroom", "0.5", "--candidates", "4", "--lambda-tilde", "0.5", "--halting-time", "1", "--delta", "1e-5"]


def _run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:                  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


# --- the shared grammar -------------------------------------------------------------------------------

@pytest.mark.parametrize("text", HOSTILE_NUMBERS)
def test_shared_parser_refuses_hostile_forms(text):
    for parse in (validation.real_text, validation.integer_text):
        with pytest.raises(InvalidParameter, match=r"^invalid x="):
            parse("x", text)


def test_shared_parser_accepts_ascii_decimal_forms():
    assert {t: validation.real_text("x", t) for t in REALS} == REALS
    assert {t: validation.integer_text("x", t) for t in INTEGERS} == INTEGERS
    for text in ("1e1", "1.0", "1.", ".5"):                   # an integer has no exponent or decimal point
        with pytest.raises(InvalidParameter):
            validation.integer_text("steps", text)
    with pytest.raises(InvalidParameter):
        validation.real_text("x", 1.5)                        # text only


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662", "\uff11", "1\n", "1 ", "1e1"])
def test_cli_integer_flags_refuse_hostile_forms(capsys, text):
    code, out, err = _run(capsys, "account", "dp-sgd", "--sampling-rate", "0.5", "--noise-multiplier", "2",
                          "--steps", text, "--delta", "1e-5")
    assert code == 2 and out == "" and "--steps" in err and "Traceback" not in err, err


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662", "\uff11", "1\n", " 1", "inf"])
def test_cli_number_flags_refuse_hostile_forms(capsys, text):
    code, out, err = _run(capsys, *PRIVBON[:-1], text)
    assert code == 2 and out == "" and "--sigma" in err and "Traceback" not in err, err
    code, out, err = _run(capsys, "convert", "replace-one", "--epsilon", text, "--delta", "1e-5")
    assert code == 2 and out == "" and "--epsilon" in err, err


@pytest.mark.parametrize("history", ["1:0.5:1e1", "1:0.5:1_0", "1_0:0.5:10", "1:0.5: 10", "1:0.5:10\n",
                                     "1:0.5:10, 1:0.5:10", "\uff11:0.5:10", "1:0.5:1.0"])
def test_history_follows_the_same_grammar_as_the_flags(capsys, history):
    """Steps in --history follow --steps: an integer, 1e1 refused in both."""
    code, out, err = _run(capsys, "account", "dp-sgd", "--history", history, "--delta", "1e-5")
    assert code == 2 and out == "" and err.startswith("privcheck: error: invalid history="), err


def test_history_accepts_the_documented_form():
    from privcheck.accounting import CompositionHistory
    history = CompositionHistory.parse("1.0:0.05:100,0.8:.05:+100")
    assert history.steps == 200 and history.phases[1].sampling_rate == 0.05


def test_csv_scores_follow_the_grammar(tmp_path):
    import numpy as np

    from audits import scores_file as sf
    ids = [f"c{i}" for i in range(8)]
    path = sf.write_scores_file(tmp_path / "s.csv", np.linspace(0.0, 1.0, 8), np.arange(8) % 2 == 0,
                                canary_ids=ids, salt=b"0" * 32)
    assert sf.load_scores(path).scores.size == 8
    lines = path.read_text(encoding="utf-8").splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("c1,"))
    lines[row] = "c1,1_0," + lines[row].rsplit(",", 1)[1]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidParameter, match=r"^invalid scores\.score="):
        sf.load_scores(path)


# --- seeds --------------------------------------------------------------------------------------------

def test_python_seeds_share_the_cli_range(capsys):
    from mechanisms.selection.randomness import make_rng
    from privcheck.randomness import RandomnessPolicy
    assert make_rng(validation.SEED_MAX).seed == validation.SEED_MAX
    assert RandomnessPolicy.seeded(validation.SEED_MAX).seed == validation.SEED_MAX
    for bad in (validation.SEED_MAX + 1, 10**400, -1):
        with pytest.raises(InvalidParameter, match=r"^invalid seed=.*9223372036854775807"):
            make_rng(bad)
        with pytest.raises(InvalidParameter, match=r"^invalid seed=.*9223372036854775807"):
            RandomnessPolicy.seeded(bad)
    code, out, err = _run(capsys, "verify", "--out", "unused", "--seed", str(validation.SEED_MAX + 1))
    assert code == 2 and "9223372036854775807" in err and not Path("unused").exists()


# --- ε beyond the documented range ---------------------------------------------------------------------

@pytest.mark.parametrize("argv, name", [
    ([*PRIVBON[:-1], "1e-300"], "sigma"),
    ([*PRIVBON[:-1], "1e-300", "--json"], "sigma"),
    ([*PRIVBON[:-1], "1e-5"], "sigma"),                       # 2Δ/σ = 2e4 > 1e4
    (["convert", "replace-one", "--epsilon", "6000", "--delta", "0"], "epsilon"),
    (["convert", "group", "--epsilon", "2000", "--delta", "0", "--k", "6"], "k"),
])
def test_epsilon_beyond_the_documented_range_is_refused(capsys, argv, name):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "", (out, err)
    assert err.startswith(f"privcheck: error: invalid {name}=") and "at most 10000" in err, err


def test_epsilon_at_the_edge_is_printed(capsys):
    code, out, err = _run(capsys, *PRIVBON[:-1], "2e-5", "--json")           # 2Δ/σ = 1e4 exactly
    assert code == 0 and json.loads(out)["epsilon"] == pytest.approx(1e4), err


# --- long values are cut ------------------------------------------------------------------------------

def test_invalid_parameter_cuts_long_values():
    message = str(InvalidParameter("sigma", "9" * 10**6, "(0, inf)"))
    assert len(message) < 2 * SHOWN_MAX + 100 and "(1000000 characters)" in message
    assert shown("short") == "'short'" and str(InvalidParameter("k", 3, "[1, 2]")) == \
        "invalid k=3: allowed range is [1, 2]"


@pytest.mark.parametrize("argv", [
    [*PRIVBON[:-1], "9" * 10**6],
    ["account", "dp-sgd", "--history", "1:0.5:" + "9" * 10**6, "--delta", "1e-5"],
    ["account", "dp-sgd", "--history", "x" * 10**6, "--delta", "1e-5"],
    ["account", "dp-sgd", "--history", "1:0.5:10", "--delta", "1e-5", "--accountant", "x" * 10**6],
    [*PRIVBON, "x" * 10**6],
])
def test_cli_error_lines_cut_long_values(capsys, argv):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    last = err.splitlines()[-1]
    assert len(last) <= 600 and "characters)" in last, last[:700]


# --- --help imports nothing heavy; ASCII terminals ---------------------------------------------------

_LEAVES = """
import argparse, json, sys
from privcheck.cli import build_parser, main

def walk(parser, words):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words
    for action in subs:
        for name, child in action.choices.items():
            yield from walk(child, [*words, name])

def run(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code
"""

_HELP_IMPORTS = _LEAVES + """
leaves = list(walk(build_parser(), []))
codes = {" ".join(leaf): run([*leaf, "--help"]) for leaf in leaves}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1].split(","))
print(json.dumps({"codes": codes, "heavy": heavy}))
"""

_ASCII = _LEAVES + """
leaves = list(walk(build_parser(), []))
codes = {" ".join(leaf): run([*leaf, "--help"]) for leaf in leaves}
codes["privbon"] = run(json.loads(sys.argv[1]))
codes["privitp"] = run(json.loads(sys.argv[2]))
codes["privbon error"] = run([*json.loads(sys.argv[1])[:-1], "\\u0661"])
print("CODES " + json.dumps(codes))
"""


def _python(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, env=environ, cwd=ROOT,
                          timeout=120)


def test_every_leaf_help_imports_nothing_heavy():
    """`--help` of every leaf command (24 today, `audit dp-grpo` included) builds its parser without torch,
    transformers, scipy, flint, dp_accounting or matplotlib (asserted on the imported modules, not on time)."""
    proc = _python(_HELP_IMPORTS, ",".join(HEAVY))
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout.decode().splitlines()[-1])
    assert len(result["codes"]) >= 23 and "audit dp-grpo" in result["codes"]
    assert set(result["codes"].values()) == {0}, result["codes"]
    assert result["heavy"] == [], result["heavy"]


def test_dpgrpo_help_lists_the_registered_presets():
    from audits.cli.dpgrpo import PRESET_NAMES
    from audits.dpgrpo.gradient_canary import AUDIT_PRESETS
    assert tuple(sorted(AUDIT_PRESETS)) == PRESET_NAMES


def test_ascii_terminal():
    """Every leaf's --help, `account privbon` and `account privitp` exit 0 on an ASCII terminal (σ, ε, λ̃ written as
    escapes), and an error line with a non-ASCII value is still one line with exit 2."""
    env = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}
    proc = _python(_ASCII, json.dumps(PRIVBON), json.dumps(PRIVITP), env=env)
    stdout = proc.stdout.decode("ascii")                  # raises if a non-ASCII byte was written
    stderr = proc.stderr.decode("ascii")
    assert proc.returncode == 0 and "UnicodeEncodeError" not in stdout + stderr, stderr
    codes = json.loads(next(line for line in stdout.splitlines() if line.startswith("CODES "))[6:])
    assert codes.pop("privbon error") == 2 and set(codes.values()) == {0}, codes
    assert "Traceback" not in stderr and "\\u0661" in stderr
