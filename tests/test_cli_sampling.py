"""`privcheck account dp-sgd --sampling ...` (docs/accounting.md, "Sampling schemes"): the JSON carries the record
that `epsilon` gives for the scheme's event, `upper` is null with the reason where no upper bound is proven, and a
missing or foreign option exits 2 naming it before any work."""

import json
import math

import pytest

from privcheck.accounting import FixedSizeGaussianEvent, ShuffledGaussianEvent, epsilon
from privcheck.cli import main


def run_json(capsys, *argv):
    code = main(["account", "dp-sgd", *argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_fixed_size_json_is_the_events_record(capsys):
    out = run_json(capsys, "--sampling", "fixed-size", "--dataset-size", "1000", "--batch-size", "10",
                   "--noise-multiplier", "1.5", "--steps", "100", "--delta", "1e-5")
    rec = epsilon(FixedSizeGaussianEvent(1000, 10, 1.5, 100), 1e-5)
    assert out["epsilon"] == rec.value == out["certified_upper"]
    assert out["certified_lower"] == rec.certified.lower < rec.value
    assert out["neighboring"] == "replace_one" and out["reason"] is None
    assert out["record"]["event"] == rec.event.to_json()


def test_shuffle_json_has_no_upper_and_says_why(capsys):
    out = run_json(capsys, "--sampling", "shuffle", "--dataset-size", "1000", "--batch-size", "100",
                   "--noise-multiplier", "0.8", "--epochs", "2", "--delta", "1e-5")
    rec = epsilon(ShuffledGaussianEvent(1000, 100, 0.8, 2), 1e-5)
    assert out["epsilon"] == "inf" and math.isinf(rec.value)
    assert out["certified_upper"] is None and out["reason"] == rec.reason and rec.reason
    assert out["certified_lower"] == rec.certified.lower > 0
    assert out["record"]["certified"]["upper"] is None
    assert out["poisson_epsilon"] == rec.details["poisson_add_remove_epsilon"]


@pytest.mark.parametrize("argv, name", [
    (["--sampling", "shuffle", "--dataset-size", "100", "--noise-multiplier", "1", "--epochs", "1"], "batch_size"),
    (["--sampling", "fixed-size", "--dataset-size", "100", "--batch-size", "10", "--noise-multiplier", "1",
      "--epochs", "1"], "steps"),
    (["--sampling", "balls-in-bins", "--steps-per-epoch", "10", "--noise-multiplier", "1", "--epochs", "1",
      "--steps", "3"], "steps"),
    (["--sampling", "truncated-poisson", "--dataset-size", "100", "--sampling-rate", "0.1", "--noise-multiplier",
      "1", "--steps", "3"], "max_batch_size"),
    (["--sampling", "fixed-size", "--dataset-size", "100", "--batch-size", "101", "--noise-multiplier", "1",
      "--steps", "1"], "batch_size"),
    (["--sampling", "shuffle", "--dataset-size", "100", "--batch-size", "10", "--noise-multiplier", "1",
      "--epochs", "1", "--history", "1:0.1:10"], "history"),
    (["--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "3", "--epochs", "2"], "epochs"),
])
def test_missing_or_foreign_option_exits_2(capsys, argv, name):
    assert main(["account", "dp-sgd", *argv, "--delta", "1e-5"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and name in captured.err
