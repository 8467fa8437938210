"""CLI: JSON keys and values (against published figures), tables, and errors (stderr, exit 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from privcheck.cli import build_parser, main


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_account_dpsgd_jax_privacy_reference(capsys):
    out = run_json(capsys, "account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "3.0",
                   "--steps", "512", "--delta", "1e-6")
    assert abs(out["epsilon"] - 3.7697) <= 1e-4          # JAX-Privacy reference (published 3.77)
    assert out["cross_check"]["accountant"] == "rdp"
    assert abs(out["cross_check"]["epsilon"] - 4.051) <= 2e-3  # dp-accounting 0.6.0 RDP: 4.0510 at order 6.9


def test_account_dpsgd_table_vi_row_and_rdp(capsys):
    args = ["account", "dp-sgd", "--sampling-rate", str(128 / 6988), "--noise-multiplier", "0.612058477104",
            "--steps", "50", "--delta", str(1 / 69880)]
    assert round(run_json(capsys, *args)["epsilon"], 3) == 4.235          # Table VI, MATH ε=4.23
    rdp = run_json(capsys, *args, "--accountant", "rdp")
    assert abs(rdp["epsilon"] - 5.3225) <= 1e-3                          # dp-accounting 0.6.0 column


def test_account_gaussian(capsys):
    out = run_json(capsys, "account", "gaussian", "--sensitivity", "2", "--sigma", "2", "--delta", "1e-5")
    # Δ/σ = 1: same profile as σ = 1, Δ = 1; the enclosure brackets the value and ε is its upper end.
    lo, hi = out["enclosure"]
    assert lo <= out["epsilon"] == hi
    assert 4.37 < out["epsilon"] < 4.38


def test_convert_group_and_replace_one(capsys):
    import math
    g = run_json(capsys, "convert", "group", "--epsilon", "1", "--delta", "1e-5", "--k", "3")
    assert g["epsilon"] == 3.0 and abs(g["delta"] - 3 * math.exp(2) * 1e-5) <= 1e-18
    r = run_json(capsys, "convert", "replace-one", "--epsilon", "1", "--delta", "1e-5")
    assert r["epsilon"] == 2.0 and abs(r["delta"] - (1 + math.e) * 1e-5) <= 1e-18


def test_calibrate_dpsgd_never_overshoots(capsys):
    from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
    from dp_accounting.pld import PLDAccountant
    out = run_json(capsys, "calibrate", "dp-sgd", "--sampling-rate", "0.25", "--steps", "10", "--delta", "1e-3",
                   "--epsilon", "3")
    assert out["epsilon"] <= 3.0
    acc = PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(PoissonSampledDpEvent(0.25, GaussianDpEvent(out["noise_multiplier"])), 10)
    assert acc.get_epsilon(1e-3) <= 3.0   # dp-accounting's own figure at the returned σ


def test_table_output_is_readable(capsys):
    assert main(["convert", "replace-one", "--epsilon", "1", "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "epsilon" in out and "replace_one" in out and "{" not in out


@pytest.mark.parametrize("argv, name", [
    (["account", "dp-sgd", "--sampling-rate", "1.5", "--noise-multiplier", "1", "--steps", "1", "--delta", "1e-5"],
     "sampling_rate"),
    (["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "-1", "--steps", "1", "--delta", "1e-5"],
     "noise_multiplier"),
    (["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "0", "--delta", "1e-5"],
     "steps"),
    (["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "1e999", "--steps", "1", "--delta", "1e-5"],
     "noise_multiplier"),
    (["account", "gaussian", "--sensitivity", "1", "--sigma", "1", "--delta", "1"], "delta"),
    (["calibrate", "dp-sgd", "--sampling-rate", "0.1", "--steps", "5", "--delta", "1e-5", "--epsilon", "0"],
     "epsilon"),
    (["convert", "group", "--epsilon", "1", "--delta", "1e-5", "--k", "0"], "k"),
    (["convert", "replace-one", "--epsilon", "1e999", "--delta", "1e-5"], "epsilon"),
])
def test_bad_input_exit_2_names_parameter(capsys, argv, name):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert name in captured.err and "allowed range" in captured.err


def test_unknown_option_and_missing_dir(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "1",
              "--delta", "1e-5", "--bogus", "1"])
    assert exc.value.code == 2
    assert main(["report", str(tmp_path)]) == 2
    assert "dir" in capsys.readouterr().err


SCRIPT = str(Path(sys.executable).parent / "privcheck")       # the installed console script ([project.scripts])


def test_console_script_runs():
    proc = subprocess.run([SCRIPT, "convert", "group", "--epsilon", "1", "--delta", "1e-5", "--k", "2", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["epsilon"] == 2.0


def test_console_script_bad_input_and_lazy_plugins():
    """Bad input through the console script: exit 2, nothing on stdout, one error line naming the parameter, no
    traceback. A command of privcheck's own loads no command plugin, so the process never imports torch (every
    module it imports is listed by PYTHONPROFILEIMPORTTIME)."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    proc = subprocess.run([SCRIPT, "calibrate", "dp-sgd", "--sampling-rate", "0.1", "--steps", "5", "--delta", "1e-5",
                           "--epsilon", "0"], capture_output=True, text=True, timeout=120, env=env)
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(errors) == 1 and errors[0].startswith("privcheck: error: invalid epsilon=0"), errors
    assert "privcheck.cli" in imported and "torch" not in imported and "mechanisms" not in imported


def test_core_command_help_is_the_same_without_plugins(capsys):
    """`main` skips the plugins for privcheck's own commands: its usage and help are those of the whole parser."""
    argv = ["calibrate", "dp-sgd", "--help"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    lazy = capsys.readouterr().out
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert exc.value.code == 0 and lazy == capsys.readouterr().out and "--sampling-rate" in lazy


def test_plugin_commands_are_built_without_their_heavy_modules(capsys, monkeypatch):
    """The whole parser (every plugin) is built while transformers, matplotlib and the DP-GRPO audit cannot be
    imported: they load only when a command that needs them runs."""
    for name in ("transformers", "matplotlib", "audits.dpgrpo.gradient_canary", "audits.dpgrpo.input_canary"):
        monkeypatch.setitem(sys.modules, name, None)            # `import name` now raises ImportError
    with pytest.raises(SystemExit) as exc:
        main(["audit", "--help"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == ""                   # no "command plugin unavailable" warning
    assert all(command in out for command in ("one-run", "power", "multi-run", "selection", "dp-grpo"))
    assert main(["audit", "power", "--canaries", "0", "--delta", "1e-5", "--score-model", "perfect"]) == 2
    assert capsys.readouterr().err.startswith("privcheck: error: invalid canaries=0")


# --- selection accountants (reference values of the selection suite) ----------------------------------

def test_account_privbon_nominal_and_bounded_range(capsys):
    out = run_json(capsys, "account", "privbon", "--sensitivity", "0.1", "--sigma", "0.2", "--candidates", "16",
                   "--r-max", "1")
    assert out["epsilon"] == 1.0                                           # 2Δ/σ
    assert abs(out["epsilon_bounded_range"] - 0.999228797882) <= 1e-11     # O-5
    lo, hi = out["epsilon_bounded_range_enclosure"]
    assert lo <= out["epsilon_bounded_range"] == hi
    only = run_json(capsys, "account", "privbon", "--sensitivity", "0.1", "--sigma", "0.2")
    assert "epsilon_bounded_range" not in only


@pytest.mark.parametrize("stop, eps2", [(["--halting-time", "4"], 1.434885007), (["--fallback"], 3.022340232)])
def test_account_privitp_o3(capsys, stop, eps2):
    out = run_json(capsys, "account", "privitp", "--sensitivity", "0.01", "--r-max", "1", "--sigma-x", "0.05",
                   "--sigma-z", "0.05", "--headroom", "0.5", "--candidates", "16", "--lambda-tilde", "0.2",
                   *stop, "--delta", "1e-5")
    assert abs(out["kappa"] - 0.188896264520) <= 1e-11 and abs(out["kappa_acc"] - 0.868196213116) <= 1e-11
    assert abs(out["eps2_post"] - eps2) <= 1e-9
    # ε1: analytic Gaussian at μ = Δ/σ_X = 0.2, δ = 1e-5 (checked against mpmath at 50 digits)
    import mpmath
    with mpmath.workdps(50):
        mu = mpmath.mpf(0.01) / mpmath.mpf(0.05)
        delta = lambda e: mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu)  # noqa
        assert delta(out["eps1"]) <= 1e-5 < delta(out["eps1"] - 1e-9)
    assert out["epsilon"] >= out["eps1"] + out["eps2_post"] - 1e-15
    lo, hi = out["enclosures"]["epsilon"]
    assert lo <= out["epsilon"] == hi


def test_account_gaussian_selection_o8_and_rnm(capsys):
    import math
    out = run_json(capsys, "account", "gaussian-above-threshold", "--threshold", "0.75", "--sigma-threshold", "0.3",
                   "--sigma-query", repr(math.sqrt(3) * 0.3), "--sensitivity", "1e-3", "--halting-time", "3")
    assert abs(out["epsilon"] - 0.00796829839499) <= 1e-13                 # O-8
    rnm = run_json(capsys, "account", "gaussian-rnm", "--sigma", "0.5", "--sensitivity", "0.5", "--queries", "2")
    # d = 2: the arg-max of two noisy queries is a Gaussian comparison, so in closed form
    # P_D(i) = Φ((a − b + 2Δ)/(σ√2)) and P_D′(i) = Φ((a − b)/(σ√2)) with a − b = −1, Δ = 0.5, σ = 0.5.
    from scipy.stats import norm
    expected = math.log(norm.cdf((-1 + 1.0) / (0.5 * math.sqrt(2)))) - math.log(norm.cdf(-1 / (0.5 * math.sqrt(2))))
    assert abs(rnm["epsilon"] - expected) <= 1e-12


@pytest.mark.parametrize("argv, name", [
    (["account", "privbon", "--sensitivity", "2", "--sigma", "1", "--candidates", "4", "--r-max", "1"], "sensitivity"),
    (["account", "privbon", "--sensitivity", "0.1", "--sigma", "1", "--candidates", "4"], "r_max"),
    (["account", "privitp", "--sensitivity", "0.01", "--r-max", "1", "--sigma-x", "0.05", "--sigma-z", "0.05",
      "--headroom", "-1", "--candidates", "16", "--lambda-tilde", "0.2", "--fallback", "--delta", "1e-5"], "headroom"),
    (["account", "privitp", "--sensitivity", "0.01", "--r-max", "1", "--sigma-x", "0.05", "--sigma-z", "0.05",
      "--headroom", "0.5", "--candidates", "16", "--lambda-tilde", "0.2", "--halting-time", "17", "--delta", "1e-5"],
     "halting_time"),
    (["account", "gaussian-rnm", "--sigma", "0.1", "--sensitivity", "0.001", "--queries", "0"], "queries"),
    (["account", "gaussian-above-threshold", "--threshold", "0.5", "--sigma-threshold", "0.3", "--sigma-query", "0.5",
      "--sensitivity", "2", "--halting-time", "3"], "sensitivity"),
])
def test_selection_bad_input(capsys, argv, name):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert name in err and "allowed range" in err
