"""The hostile-input cases of issue 13, one by one, in-process (tests/cli_harness.py): bad output paths, huge
integers, bad seeds and claims exit 2 before any work with one line naming the parameter and its range, and write
nothing; unexpected errors, OS errors and Ctrl-C get one line and their own exit status; --help and --version import
nothing heavy."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from privcheck.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, main
from privcheck.validation import SEED_MAX
from tests.cli_harness import make_sandbox, patched_work, run_cli

BIG = str(10**30)
ONE_RUN = ["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "90", "--delta", "1e-5"]
RUNS = ["--runs-in", "10", "--runs-out", "10", "--false-negatives", "1", "--false-positives", "1", "--delta", "1e-5"]
MULTI_RUN = ["audit", "multi-run", "--runs-in", "10", "--runs-out", "10", "--sigma", "1", "--delta", "1e-5"]
SELECTION = ["audit", "selection", "--mechanism", "privbon", "--samples", "100"]

# Every command that writes, with a valid vector (less --out) and its first expensive call (None: cheap, run for real).
WRITERS = {
    "simulate selection": (["simulate", "selection", "--quick"], ("mechanisms.selection.simulate:run_simulation",)),
    "run selection": (["run", "selection"], ("mechanisms.selection.pipeline.run:check_out",)),
    "run dp-grpo": (["run", "dp-grpo", "--preset", "tiny-cpu", "--device", "cpu"],
                    ("mechanisms.dpgrpo.pipeline.setup:arm_config",)),
    "audit one-run": (ONE_RUN, None),
    "audit clopper-pearson": (["audit", "clopper-pearson", *RUNS], None),
    "audit gdp": (["audit", "gdp", *RUNS], None),
    "audit fdp-one-run": (["audit", "fdp-one-run", *ONE_RUN[2:]], None),
    "audit multi-run": (MULTI_RUN, ("audits.multirun_driver:run_seeds", "audits.statistics.power:nominal_epsilon")),
    "audit selection": (SELECTION, ("audits.cli.selection:build_pair",)),
    "audit dp-grpo": (["audit", "dp-grpo", "--canaries", "10"],
                      ("audits.dpgrpo.gradient_canary:_run", "audits.dpgrpo.input_canary:_run")),
}


def hostile(tmp_path, argv, work=None):
    """Run `argv` (placeholders {out}, {file}, {dir}, {missing}) in a sandbox; assert the clean refusal: exit 2, one
    error line, no traceback, nothing on stdout, work never reached, nothing written. Returns the error line."""
    root = tmp_path / "sandbox"
    places = make_sandbox(root)
    for key, path in places.items():
        argv = [token.replace(key, path) for token in argv]
    with patched_work(work or ()):
        outcome = run_cli(argv, root)
    shown = f"{argv}: {outcome}"
    assert outcome.code == EXIT_USAGE and not outcome.started, shown
    assert "Traceback" not in outcome.err and outcome.out == "" and not outcome.new_paths, shown
    if not outcome.argparse_exit:
        assert len(outcome.err_lines) == 1, shown
    return outcome.err_lines[-1]


# --- output paths ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, says", [("{file}", "a file exists at this path"), ("{file}/sub", "is a file"),
                                       ("/proc/self/x", "a writable directory"), ("", "a non-empty directory path")])
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_bad_output_directory_is_refused_before_any_work(tmp_path, command, bad, says):
    argv, work = WRITERS[command]
    line = hostile(tmp_path, [*argv, "--out", bad], work)
    assert line.startswith("privcheck: error: invalid out=") and says in line


def test_a_directory_another_writer_holds_is_refused(tmp_path):
    from privcheck.artifacts import claim_output_directory

    with claim_output_directory(tmp_path / "busy"):
        with patched_work(WRITERS["audit selection"][1]):
            outcome = run_cli([*SELECTION, "--out", str(tmp_path / "busy")], tmp_path)
    assert outcome.code == EXIT_USAGE and not outcome.started and "is writing this directory" in outcome.err


@pytest.mark.parametrize("bad", ["", "{file}", "/proc/self/x"])
def test_verify_bad_output_directory_is_refused_before_any_work(tmp_path, bad):
    line = hostile(tmp_path, ["verify", "--suite", "accounting", "--out", bad], ("privcheck.verify:_load",))
    assert "invalid out=" in line


# --- huge and negative integers, seeds, claims -----------------------------------------------------------------------

@pytest.mark.parametrize("argv, name, allowed", [
    (["audit", "power", "--canaries", BIG, "--delta", "1e-5", "--score-model", "perfect"], "canaries",
     "[1, 100000000]"),
    (["audit", "power", "--canaries", "10", "--delta", "1e-5", "--score-model", "perfect", "--sims", BIG], "sims",
     "an integer in [1, "),
    (["audit", "power", "--canaries", "10", "--delta", "1e-5", "--score-model", f"dpsgd_dirac:0.1,1,{BIG},llr"], "T",
     "[1, 100000]"),
    ([*ONE_RUN[:3], BIG, *ONE_RUN[4:]], "canaries", "[1, 100000000]"),
    (["audit", "fdp-one-run", "--canaries", BIG, *ONE_RUN[4:]], "canaries", "[1, 100000000]"),
    (["audit", "clopper-pearson", *RUNS[:1], BIG, *RUNS[2:]], "runs_in", "[1, 1000000]"),
    (["audit", "clopper-pearson", *RUNS, "--thresholds", BIG], "thresholds", "[1, 1000000]"),
    (["audit", "gdp", *RUNS[:3], BIG, *RUNS[4:]], "runs_out", "[1, 1000000]"),
    (["audit", "gdp", *RUNS, "--hypotheses", BIG], "hypotheses", "[1, 1000000]"),
    ([*MULTI_RUN[:3], BIG, *MULTI_RUN[4:]], "runs_in", "[1, 1000000]"),
    ([*MULTI_RUN, "--steps", BIG], "steps", "an integer in [1, "),
    ([*SELECTION[:5], BIG], "samples", "[2, 10000000]"),
    ([*SELECTION, "--candidates", BIG], "candidates", "[1, 65536]"),
    ([*SELECTION, "--candidates", "1000", "--samples", "10000000"], "samples", "[2, 1000000]"),
    (["audit", "dp-grpo", "--canaries", BIG], "canaries", "[1, 100000000]"),
    (["audit", "dp-grpo", "--canaries", "10", "--rounds", BIG], "rounds", "[1, 100000]"),
    (["run", "dp-grpo", "--preset", "tiny-cpu", "--rounds", BIG], "rounds", "[1, 100000]"),
    (["run", "selection", "--n", BIG], "n", "[1, 1000000]"),
    (["run", "selection", "--prompts", BIG], "prompts", "[1, 125000]"),      # 10^6 // n (the preset's n = 8)
])
def test_huge_integers_are_refused_with_their_range(tmp_path, argv, name, allowed):
    command = " ".join(argv[:2])
    work = (WRITERS[command][1] if command in WRITERS
            else ("audits.statistics.power:plan", "audits.statistics.power:nominal_epsilon"))
    writes = command in WRITERS and "--out" not in argv
    line = hostile(tmp_path, [*argv, *(["--out", "{out}"] if writes else [])], work)
    assert line.startswith(f"privcheck: error: invalid {name}=") and "allowed range is" in line and allowed in line


SEEDED = [["verify", "--out", "{out}"], ["simulate", "selection", "--out", "{out}"],
          ["run", "selection", "--out", "{out}"], ["run", "dp-grpo", "--preset", "tiny-cpu", "--out", "{out}"],
          ["audit", "power", "--canaries", "10", "--delta", "1e-5", "--score-model", "perfect"],
          [*MULTI_RUN], [*SELECTION, "--out", "{out}"], ["audit", "dp-grpo", "--canaries", "10", "--out", "{out}"]]


@pytest.mark.parametrize("value", ["-1", str(SEED_MAX + 1), BIG])
@pytest.mark.parametrize("argv", SEEDED, ids=[" ".join(a[:2]) for a in SEEDED])
def test_every_seed_flag_follows_one_rule(tmp_path, argv, value):
    line = hostile(tmp_path, [*argv, "--seed", value])
    assert f"invalid seed={value}: allowed range is an integer in [0, {SEED_MAX}]" in line


def test_run_dpgrpo_seeds_follow_the_seed_rule(tmp_path):
    line = hostile(tmp_path, ["run", "dp-grpo", "--preset", "tiny-cpu", "--out", "{out}", "--seeds", "0", "-1"])
    assert f"invalid seed=-1: allowed range is an integer in [0, {SEED_MAX}]" in line


def test_one_run_delta_one_is_refused(tmp_path):
    line = hostile(tmp_path, [*ONE_RUN[:-1], "1"])
    assert line == "privcheck: error: invalid delta=1.0: allowed range is [0, 1)"


# Accepted today by privcheck.accounting (another branch adds the accountant's ranges): each must exit 2 there.
LIBRARY = [
    ["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", BIG, "--delta", "1e-5"],
    ["account", "dp-sgd", "--history", f"1:0.5:{BIG}", "--delta", "1e-5"],
    ["account", "privbon", "--sensitivity", "1", "--sigma", "1", "--candidates", BIG, "--r-max", "1"],
    ["account", "privitp", "--sensitivity", "0.25", "--r-max", "1", "--sigma-x", "0.5", "--sigma-z", "0.5",
     "--headroom", "0.5", "--candidates", BIG, "--lambda-tilde", "0.5", "--halting-time", "1", "--delta", "1e-5"],
    ["convert", "group", "--epsilon", "1", "--delta", "1e-5", "--k", BIG],
    ["calibrate", "dp-sgd", "--sampling-rate", "0.1", "--steps", BIG, "--delta", "1e-5", "--epsilon", "1"],
    ["calibrate", "dp-sgd", "--sampling-rate", "0.1", "--steps", "10", "--delta", "1e-5", "--epsilon", "1e6"],
    ["calibrate", "dp-sgd-steps", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--delta", "1e-5",
     "--epsilon", "1e6"],
]


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise _TooSlow("no answer within 60 s")


@pytest.mark.parametrize("argv", LIBRARY, ids=[" ".join(a[:2]) for a in LIBRARY])
def test_huge_accounting_inputs_are_refused(tmp_path, argv):
    # a guard against a hang, not a timing assertion: the refusal takes milliseconds, the searches these inputs
    # started before they were bounded ran for more than 300 s
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        line = hostile(tmp_path, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "allowed range is" in line


# --- the top-level handler -------------------------------------------------------------------------------------------

def test_unexpected_error_is_one_line_exit_3(tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr("audits.statistics.one_run.search_eps_lower", boom)
    assert main(ONE_RUN) == EXIT_INTERNAL == 3
    err = capsys.readouterr().err
    assert err == "privcheck: internal error: RuntimeError: boom (rerun with --debug for the traceback)\n"
    for argv in (["--debug", *ONE_RUN], [*ONE_RUN, "--debug"]):
        assert main(argv) == EXIT_INTERNAL
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last):") and "RuntimeError: boom" in err
        assert err.splitlines()[-1].startswith("privcheck: internal error: RuntimeError: boom")


def test_os_error_names_the_path_exit_2(tmp_path, monkeypatch, capsys):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "/data/scores.csv")
    monkeypatch.setattr("audits.scores_file.load_scores", denied)
    assert main(["audit", "one-run", "--scores", "s.csv", "--delta", "1e-5"]) == EXIT_USAGE
    assert capsys.readouterr().err == "privcheck: error: /data/scores.csv: Permission denied\n"


def test_ctrl_c_while_writing_leaves_nothing_exit_130(tmp_path, monkeypatch):
    """Ctrl-C after the artifact's bytes are written, before they are renamed into place: exit 130, one line, and
    neither the artifact, its temporary file nor the claimed directory remains."""
    def interrupt(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", interrupt)
    outcome = run_cli([*ONE_RUN, "--out", str(tmp_path / "out")], tmp_path)
    assert outcome.code == EXIT_INTERRUPTED == 130 and outcome.err == "privcheck: interrupted\n"
    assert outcome.new_paths == set() and outcome.out == ""


def test_ctrl_c_during_work_releases_the_claim(tmp_path, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("audits.cli.selection.build_pair", interrupt)
    outcome = run_cli([*SELECTION, "--out", str(tmp_path / "a" / "b")], tmp_path)
    assert outcome.code == EXIT_INTERRUPTED and outcome.err == "privcheck: interrupted\n"
    assert outcome.new_paths == set()


def test_ctrl_c_while_loading_the_plugins_exit_130(monkeypatch, capsys):
    def interrupt(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr("privcheck.cli._register_plugins", interrupt)
    assert main(["audit", "power", "--help"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "privcheck: interrupted\n"


# --- fast --help and --version ----------------------------------------------------------------------------------------

def test_version_and_help_build_no_plugin_parser(monkeypatch, capsys):
    def refuse(*args):
        raise AssertionError("plugin parsers built")
    monkeypatch.setattr("privcheck.cli._register_plugins", refuse)
    for argv in (["--version"], ["--help"], ["--debug", "--version"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == (2 if argv == [] else 0)
    out = capsys.readouterr().out
    assert "privcheck 0.1.0" in out and "audit" in out
    assert "exit status:" in out and "130  interrupted" in out and "3    internal error" in out


HEAVY = ("torch", "transformers", "scipy", "dp_accounting", "flint", "numpy", "matplotlib", "mpmath", "jsonschema")


def test_parser_help_and_version_import_nothing_heavy():
    """The whole parser (every plugin), --help, --version and a verb's help, in a fresh interpreter: none of the
    heavy packages is imported (the plugins import them in their handlers)."""
    code = ("import json, sys\n"
            "from privcheck.cli import build_parser, main\n"
            "build_parser()\n"
            "for argv in (['--help'], ['--version'], ['audit', '--help'], ['run', '--help'], ['simulate', '--help']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_selection_cli_literals_match_the_library():
    """The selection plugin spells its preset names, devices and default seed so that its parser imports nothing."""
    from mechanisms.selection import cli
    from mechanisms.selection.pipeline import DEVICES, PRESETS
    from mechanisms.selection.simulate import DEFAULT_SEED

    assert cli.PRESET_NAMES == tuple(PRESETS) and cli.DEVICES == DEVICES and cli.DEFAULT_SEED == DEFAULT_SEED
