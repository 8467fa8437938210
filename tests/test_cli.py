"""CLI: JSON keys and values (against published figures), tables, and errors (stderr, exit 2)."""

import json
import subprocess
import sys

import pytest

from privcheck.cli import main


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
    assert abs(out["cross_check"]["epsilon"] - 4.051) <= 2e-3  # spec §5.5: 4.0510 at order 6.9


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
    (["account", "dp-sgd", "--sampling-rate", "0.1", "--noise-multiplier", "nan", "--steps", "1", "--delta", "1e-5"],
     "noise_multiplier"),
    (["account", "gaussian", "--sensitivity", "1", "--sigma", "1", "--delta", "1"], "delta"),
    (["calibrate", "dp-sgd", "--sampling-rate", "0.1", "--steps", "5", "--delta", "1e-5", "--epsilon", "0"],
     "epsilon"),
    (["convert", "group", "--epsilon", "1", "--delta", "1e-5", "--k", "0"], "k"),
    (["convert", "replace-one", "--epsilon", "inf", "--delta", "1e-5"], "epsilon"),
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


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "privcheck.cli", "convert", "group", "--epsilon", "1",
                           "--delta", "1e-5", "--k", "2", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["epsilon"] == 2.0
