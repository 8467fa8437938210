"""privcheck.cli_args: the argparse `type=` parsers shared by every subcommand."""

import argparse
import math

import pytest

from privcheck.cli_args import integer, number


def test_number_parses_the_number_grammar():
    assert number("0.5") == 0.5 and number("1e-5") == 1e-5 and number("3") == 3.0
    assert math.isinf(number("1e999"))                    # range checks come later, in the library
    for text in ("x", "inf", "nan", "1_0", "1\n"):          # ASCII decimal forms only (tests/test_cli_grammar.py)
        with pytest.raises(argparse.ArgumentTypeError, match="not a number: "):
            number(text)


def test_integer_parses_base_ten_integers_only():
    assert integer("100") == 100 and integer("-3") == -3
    for text in ("1e2", "1.0", "", "ten"):
        with pytest.raises(argparse.ArgumentTypeError, match="not an integer"):
            integer(text)


def test_parsers_give_argparse_usage_errors(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--steps", type=integer)
    parser.add_argument("--delta", type=number)
    assert parser.parse_args(["--steps", "4", "--delta", "1e-5"]) == argparse.Namespace(steps=4, delta=1e-5)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--steps", "4.5"])
    assert exc.value.code == 2 and "not an integer: '4.5'" in capsys.readouterr().err
