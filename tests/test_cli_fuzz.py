"""Fuzz of every leaf command of `privcheck` (issue 13): hypothesis draws argument vectors from a valid base vector
with one to three flags set to drawn values (valid ones, and hostile ones: out of range, huge, negative, non-finite,
empty, wrong type, bad paths), plus a structural change (a required flag dropped, an unknown flag, a flag without
its value, a duplicated flag). Each value is valid or hostile by construction, so the oracle is exact:

* a vector with a hostile value (or a structural error) exits 2 before any work: one `privcheck: error:` line (or
  argparse's usage error) naming one of the bad parameters, nothing on stdout, no traceback, no new file anywhere
  in the sandbox (the working directory and every output path);
* a valid vector reaches work: for the commands whose work is long, their first expensive call is patched to raise
  `WorkStarted` (so "valid" means it was reached, and "hostile" that it was not: validation before work); the
  others run for real and exit 0.

Hostile files (issue 23): for every flag that reads a file (`--history`, `--scores`, `--model`, `--tokenizer`, the
artifacts `report DIR` reads) and every output directory (`--out`, `report DIR`), hypothesis also draws files made
in the sandbox by the generators of tests/hostile_files.py: not a regular file (FIFO, device, directory, socket,
dangling or looping link), over the size limit (sparse), empty, not UTF-8, truncated, or with a defect of the format
at a drawn place (JSON nested too deep, a key twice, a number in a forbidden form; CSV fields too long and numbers in
forbidden forms; .npz headers claiming too much, members twice); and output directories with a link to a victim
file outside, a dangling link, a FIFO, a device, a socket or a directory planted under a name privcheck writes. The
oracle is the same, and also: the command ends within seconds (a FIFO never blocks it: a deadline interrupts it),
nothing in the sandbox is created, removed or replaced, and the victim's content and mtime are unchanged. A link to a
valid input is followed (docs/artifacts.md, "Inputs"), so that draw is valid, except for `report`, which never
follows a link in the directory it writes.

`make test` runs a few examples per command (the project's derandomized profile, so the same ones every run); the
slow tier runs many more.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privcheck.accounting.conversions import MAX_GROUP_SIZE
from privcheck.accounting.pld_certified import MAX_STEPS
from privcheck.accounting.selection import MAX_CANDIDATES
from privcheck.cli import build_parser
from privcheck.validation import SEED_MAX
from tests import hostile_files as hf
from tests.cli_harness import deadline, listing, make_sandbox, patched_work, run_cli

SWITCH = object()                       # a flag given without a value (store_true)
BIG = str(10**30)
NOT_NUMBERS = ("", "x", "1,5", "0x10", "1_000", "\u0661\u0662", "\uff11", "1\n", " 1")   # ASCII decimal only
NON_FINITE = ("nan", "inf", "-inf", "1e999")
BAD_OUT = ("", " ", "{file}", "{file}/sub", "/proc/self/x")


@dataclass(frozen=True)
class Flag:
    """The values a flag is drawn from: `valid` ones (with the rest of the base vector) and `hostile` ones; an error
    for it names `name` or one of `blame` (a cross-check that names the other side), or the option itself."""
    valid: tuple = ()
    hostile: tuple = ()
    name: str | None = None
    blame: tuple = ()


def count(lo: int, hi: int | None, valid: tuple, *, more: tuple = (), blame: tuple = ()) -> Flag:
    """An integer flag with the range [lo, hi] (hi None: a maximum the library states and BIG exceeds)."""
    hostile = (BIG, *(() if hi is None else (str(hi + 1),)), str(lo - 1), "-" + BIG, "1.5", "1e3", "nan",
               *NOT_NUMBERS, *more, str(2**64))
    return Flag(valid, hostile, blame=blame)


def real(valid: tuple, *, more: tuple = ()) -> Flag:
    return Flag(valid, (*NON_FINITE, *NOT_NUMBERS, *more))


def positive(valid: tuple, *, more: tuple = ()) -> Flag:
    return real(valid, more=("0", "-1", *more))


def nonnegative(valid: tuple) -> Flag:
    return real(valid, more=("-1", "-1e-300"))


def open_unit(valid: tuple) -> Flag:
    return real(valid, more=("0", "1", "-0.5", "1.5"))


def half_open_unit(valid: tuple = ("0", "1e-5")) -> Flag:
    return real(valid, more=("1", "-1e-9", "1.5"))


def seed(valid: tuple = ("0", str(SEED_MAX))) -> Flag:
    return Flag(valid, ("-1", str(SEED_MAX + 1), BIG, "1.5", "", "x"))


def out() -> Flag:
    return Flag(("{out}",), BAD_OUT)


def choice(valid: tuple, hostile: tuple = ("bogus", "")) -> Flag:
    return Flag(valid, hostile)


SWITCH_FLAG = Flag((SWITCH,), ())


@dataclass(frozen=True)
class FileFlag:
    """A flag that reads a file (`flag` "dir": report's positional), given a file drawn by `hf.hostile_inputs` for
    `input`: without the flags of the base vector that exclude it (`drop`), with valid files for the flags it needs
    (`needs`: (flag, Input)); `valid_ok` False where a valid file would load heavy libraries (never drawn then); an
    error for it names the flag or one of `blame`."""
    flag: str
    input: hf.Input
    drop: tuple = ()
    needs: tuple = ()
    valid_ok: bool = True
    blame: tuple = ()


def _history():
    return {"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 10},
                       {"noise_multiplier": 2.0, "sampling_rate": 0.02, "steps": 5}]}


def _model_config():
    return {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 16, "hidden_size": 8,
            "num_attention_heads": 2, "rope_scaling": None, "tie_word_embeddings": True,
            "rope_theta": 10000.0, "torch_dtype": "float32"}


HISTORY = hf.Input("json", _history, ".json", "history", name="history")
OPACUS_HISTORY = hf.Input("json", lambda: [[1.0, 0.01, 10], [2.0, 0.02, 5]], ".json", "history",
                          name="opacus history")
SCORES_CSV = hf.Input("csv", lambda: hf.scores_base("csv"), ".csv", "scores.csv", name="scores")
SCORES_CSV_INT_IDS = hf.Input("csv", lambda: hf.scores_base("csv", "int"), ".csv", "scores.csv", name="scores, int ids")
SCORES_NPZ = hf.Input("npz", lambda: hf.scores_base("npz"), ".npz", "scores.npz", name="scores")
VERIFICATION = hf.Input("json", hf.verification_document, limit="artifact", member="verification.json",
                        follows_links=False, name="report")
RUN_ARTIFACT = hf.Input("json", hf.verification_document, limit="artifact", member="run-1.json",
                        follows_links=False, name="report runs")
MODEL_DIR = hf.Input("json", _model_config, limit="config", member="config.json",
                     siblings=(("model.safetensors", b""), ("tokenizer.json", b"{}")), name="model")
GGUF = hf.Input("gguf", lambda: b"GGUF" + bytes(28), ".gguf", name="gguf")
TOKENIZER = hf.Input("opaque", lambda: b"{}", member="tokenizer.json", name="tokenizer")
DPSGD_FILES = tuple(FileFlag("--history", inp, drop=("--sampling-rate", "--noise-multiplier", "--steps"))
                    for inp in (HISTORY, OPACUS_HISTORY))
SCORES_FILES = tuple(FileFlag("--scores", inp, drop=("--canaries", "--guesses", "--correct"))
                     for inp in (SCORES_CSV, SCORES_CSV_INT_IDS, SCORES_NPZ))
SIGNING_KEY = hf.Input("key", lambda: hf.key_files()["private"], ".key", "key", name="signing key")
TRUSTED_KEY = hf.Input("key", lambda: hf.key_files()["public"], ".pub", "key", name="trusted key")
REPORT_FILES = (*(FileFlag("dir", inp, valid_ok=False, blame=("artifact",)) for inp in (VERIFICATION, RUN_ARTIFACT)),
                # a valid key would render the report (exit 1: the document is not signed), so only bad ones
                FileFlag("--trust", TRUSTED_KEY, needs=(("dir", VERIFICATION),), valid_ok=False))
AUDIT_MODEL_FILES = (FileFlag("--model", MODEL_DIR, valid_ok=False),
                     FileFlag("--tokenizer", TOKENIZER, needs=(("--model", MODEL_DIR),), valid_ok=False))


@dataclass(frozen=True, repr=False)
class Spec:
    """One leaf command: its words, a valid base vector, the flags drawn, the required ones, groups of flags that
    exclude each other, and the first expensive calls (None: the command runs for real); the flags that read files
    (`files`), the files an output directory must hold (`out_needs`: (name, Input), for report) and the names whose
    presence there the command refuses (`out_taken`: one audit per directory)."""
    words: tuple
    base: dict
    flags: dict
    required: tuple = ()
    exclusive: tuple = ()
    work: tuple | None = None
    positional: Flag | None = None
    writes: bool = False
    files: tuple = ()
    out_needs: tuple = ()
    out_taken: tuple = ()

    @property
    def command(self) -> str:
        return " ".join(self.words)

    @property
    def out_flag(self) -> str | None:
        """The flag naming the output directory: --out, or report's positional `dir`."""
        if "--out" in self.flags:
            return "--out"
        return "dir" if self.positional is not None and self.positional.name == "dir" else None

    def __repr__(self) -> str:
        return f"Spec({self.command!r}, base={self.base!r})"


DPSGD_BASE = {"--sampling-rate": "0.5", "--noise-multiplier": "2", "--steps": "2", "--delta": "1e-5"}
PRIVITP_BASE = {"--sensitivity": "0.25", "--r-max": "1", "--sigma-x": "0.5", "--sigma-z": "0.5", "--headroom": "0.5",
                "--candidates": "4", "--lambda-tilde": "0.5", "--halting-time": "1", "--delta": "1e-5"}
ONE_RUN_BASE = {"--canaries": "1000", "--guesses": "100", "--correct": "90", "--delta": "1e-5"}
RUNS_BASE = {"--runs-in": "10", "--runs-out": "10", "--false-negatives": "1", "--false-positives": "1",
             "--delta": "1e-5"}
PROB = open_unit(("0.95", "0.5"))
NOMINAL = Flag(("0", "5"), (*NON_FINITE, *NOT_NUMBERS, "-1"), blame=("eps_nominal",))    # the library's name
SELECTION_FLAGS = {
    "--sigma": positive(("2", "0.5")), "--sensitivity": positive(("1", "0.25"), more=("2",)),
    "--r-max": Flag(("1", "2"), (*NON_FINITE, *NOT_NUMBERS, "0", "0.1"), blame=("sensitivity",)),
    "--headroom": real(("0", "0.5"), more=("-1",)),
    "--beta": positive(("0.05", "1")), "--lambda-tilde": Flag(("auto", "0.5", "-3"), (*NON_FINITE, "", "x")),
    "--event-family": Flag((("target",), ("singletons", "prefixes")), (("bogus",), ())),
    "--criterion": choice(("plugin_ratio", "predicted_bound")), "--split-frac": open_unit(("0.5", "0.25")),
    "--out": out(), "--seed": seed(), "--confidence": PROB,
}

# The plan's flags of audits that have run draw hostile values only: --plan-sims and --seed are refused without
# --score-model, and a valid plan is tested in tests/audits/test_one_run_plan.py and tests/audits/test_fdp_claim.py.
PLAN_FLAGS = {"--score-model": Flag((), ("", "bogus", "gdp:", "gdp:-1", "gdp:nan", "dpsgd_dirac:2,1,10,llr"),
                                    blame=("q", "sigma", "T", "mu", "stat")),
              "--plan-sims": Flag((), ("0", "-1", "1.5", "x", BIG)), "--seed": Flag((), seed().hostile)}

SPECS = [
    Spec(("account", "dp-sgd"), DPSGD_BASE, {
        "--sampling-rate": real(("0.5", "1"), more=("0", "1.5", "-0.1")),
        "--noise-multiplier": positive(("2",)),
        "--steps": count(1, MAX_STEPS, ("2",)),
        "--delta": open_unit(("1e-5",)),
        "--accountant": choice(("pld", "rdp")),
        "--history": Flag((), ("1.0:0.5:2", "x", "{file}", "{missing}.json", "{dir}.json", "/proc/self/x.json"),
                          blame=("sampling_rate",)),
        "--json": SWITCH_FLAG}, required=("--delta",), files=DPSGD_FILES),
    Spec(("account", "gaussian"), {"--sensitivity": "1", "--sigma": "2", "--delta": "1e-5"}, {
        "--sensitivity": positive(("1",)), "--sigma": positive(("2",)), "--delta": open_unit(("1e-5",)),
        "--json": SWITCH_FLAG}, required=("--sensitivity", "--sigma", "--delta")),
    Spec(("account", "privbon"), {"--sensitivity": "1", "--sigma": "2", "--candidates": "4", "--r-max": "1"}, {
        "--sensitivity": positive(("1", "0.5"), more=("2",)), "--sigma": positive(("2",)),
        "--candidates": count(1, MAX_CANDIDATES, ("4", "1")),
        "--r-max": Flag(("1",), (*NON_FINITE, *NOT_NUMBERS, "0", "0.5"), blame=("sensitivity", "r_lo")),
        "--r-lo": Flag(("0",), (*NON_FINITE, *NOT_NUMBERS, "1", "0.5"), blame=("r_max", "sensitivity")),
        "--json": SWITCH_FLAG}, required=("--sensitivity", "--sigma")),
    Spec(("account", "privitp"), PRIVITP_BASE, {
        "--sensitivity": positive(("0.25",), more=("2",)),
        "--r-max": Flag(("1",), (*NON_FINITE, *NOT_NUMBERS, "0", "0.1"), blame=("sensitivity",)),
        "--sigma-x": positive(("0.5",)), "--sigma-z": positive(("0.5",)), "--headroom": real(("0.5",), more=("-1",)),
        "--candidates": count(1, MAX_CANDIDATES, ("4",)), "--lambda-tilde": real(("0.5",)),
        "--halting-time": count(1, 4, ("1", "4"), more=("5",)),
        "--fallback": SWITCH_FLAG, "--delta": open_unit(("1e-5",))},
        required=tuple(f for f in PRIVITP_BASE if f != "--halting-time"),
        exclusive=(("--halting-time", "--fallback"),)),
    Spec(("account", "gaussian-rnm"), {"--sigma": "1", "--sensitivity": "1", "--queries": "3"}, {
        "--sigma": positive(("1",)), "--sensitivity": positive(("1",)),
        "--queries": count(1, 2**53, ("3",)),
        "--range": Flag((("0", "1"),), (("1", "0"), ("0", "nan"), ("0",), ("0", "x")), name="a", blame=("b",))},
        required=("--sigma", "--sensitivity", "--queries")),
    Spec(("account", "gaussian-above-threshold"),
         {"--threshold": "0.5", "--sigma-threshold": "1", "--sigma-query": "1", "--sensitivity": "1",
          "--halting-time": "2"}, {
        "--threshold": real(("0.5",)), "--sigma-threshold": positive(("1",)), "--sigma-query": positive(("1",)),
        "--sensitivity": positive(("1",)), "--halting-time": count(1, 2**53, ("2",))},
        required=("--threshold", "--sigma-threshold", "--sigma-query", "--sensitivity", "--halting-time")),
    Spec(("calibrate", "dp-sgd"), {"--sampling-rate": "1", "--steps": "1", "--delta": "1e-5", "--epsilon": "2"}, {
        "--sampling-rate": real(("1",), more=("0", "1.5")), "--steps": count(1, MAX_STEPS, ("1",)),
        "--delta": open_unit(("1e-5",)), "--epsilon": positive(("2",))},
        required=("--sampling-rate", "--steps", "--delta", "--epsilon")),
    Spec(("calibrate", "dp-sgd-steps"),
         {"--sampling-rate": "0.5", "--noise-multiplier": "4", "--delta": "1e-5", "--epsilon": "1"}, {
        "--sampling-rate": real(("0.5",), more=("0", "1.5")), "--noise-multiplier": positive(("4",)),
        "--delta": open_unit(("1e-5",)), "--epsilon": positive(("1",))},
        required=("--sampling-rate", "--noise-multiplier", "--delta", "--epsilon")),
    Spec(("convert", "group"), {"--epsilon": "1", "--delta": "1e-5", "--k": "2"}, {
        "--epsilon": nonnegative(("0", "1")), "--delta": half_open_unit(),
        "--k": count(1, MAX_GROUP_SIZE, ("2", "1")), "--json": SWITCH_FLAG},
        required=("--epsilon", "--delta", "--k")),
    Spec(("convert", "replace-one"), {"--epsilon": "1", "--delta": "1e-5"}, {
        "--epsilon": nonnegative(("0", "1")), "--delta": half_open_unit(), "--json": SWITCH_FLAG},
        required=("--epsilon", "--delta")),
    Spec(("verify",), {"--out": "{out}"}, {
        "--out": out(), "--suite": Flag((("accounting",), ("audits", "selection")), (("bogus",),)),
        "--seed": seed(), "--json": SWITCH_FLAG},
        required=("--out",), work=("privcheck.verify:_load",), writes=True, files=(FileFlag("--sign", SIGNING_KEY),)),
    Spec(("report",), {}, {"--json": SWITCH_FLAG},
         positional=Flag((), ("{missing}", "{file}", "{dir}", "/proc/self/x", ""), name="dir"),
         files=REPORT_FILES, out_needs=(("verification.json", VERIFICATION),)),
    Spec(("simulate", "selection"), {"--out": "{out}"}, {
        "--out": out(), "--seed": seed(), "--quick": SWITCH_FLAG, "--json": SWITCH_FLAG},
        required=("--out",), work=("mechanisms.selection.simulate:run_simulation",), writes=True),
    Spec(("run", "dp-grpo"), {"--preset": "tiny-cpu", "--out": "{out}", "--device": "cpu"}, {
        "--preset": choice(("tiny-cpu",)), "--out": out(),
        "--seeds": Flag((("0",), ("0", str(SEED_MAX))), (("-1",), ("0", "0"), (BIG,), ("x",)), name="seed",
                        blame=("seeds",)),
        "--seed": seed(),
        "--arms": Flag((("dp_grpo",), ("dp_grpo", "zero_advantage")), (("bogus",), ("dp_grpo", "dp_grpo"))),
        "--model": Flag((), ("{missing}", "{file}", "{dir}", "", "/proc/self/x", "{gguf}")),
        "--device": choice(("cpu",), ("tpu", "")), "--reduced": SWITCH_FLAG,
        "--time-limit-s": positive(("10", "1e9")),
        "--rounds": count(1, 10**5, ("1", "100000")),
        "--skip-verification": SWITCH_FLAG, "--no-timing": SWITCH_FLAG},
        required=("--preset", "--out"), exclusive=(("--seeds", "--seed"),),
        work=("mechanisms.dpgrpo.pipeline.setup:arm_config",), writes=True,
        files=(FileFlag("--model", MODEL_DIR), FileFlag("--model", GGUF))),
    Spec(("run", "selection"), {"--out": "{out}"}, {
        "--preset": choice(("cpu-tiny", "gpu-h200")), "--device": choice(("cpu", "cuda"), ("tpu", "")),
        "--out": out(), "--seed": seed(),
        "--selectors": Flag((("bon",), ("privbon", "privitp"), ("bon,itp",)), (("bogus",), ("",))),
        "--n": count(1, 10**6, ("1", "8", "1024")), "--prompts": count(1, 10**6, ("1", "4")),
        "--time-limit-s": positive(("1", "1e9")),
        "--r-max": Flag(("1", "2"), (*NON_FINITE, *NOT_NUMBERS, "0", "-1", "0.01"), blame=("sensitivity",)),
        "--sensitivity": positive(("0.05", "1"), more=("2",)), "--sigma": positive(("0.2", "5")),
        "--beta": positive(("0.05", "2"))},
        required=("--out",), work=("mechanisms.selection.pipeline.run:check_out",), writes=True),
    Spec(("audit", "one-run"), ONE_RUN_BASE, {
        "--canaries": count(1, 10**8, ("1000", "100000000"), more=("99",), blame=("guesses",)),
        "--guesses": count(0, None, ("100", "1000"), more=("1001", "89"), blame=("correct",)),
        "--correct": count(0, None, ("0", "90", "100"), more=("101",)),
        "--scores": Flag((), ("{missing}", "{file}", "{dir}", "/proc/self/x", ""), blame=("canaries",)),
        "--k-plus": Flag((), ("1", "-1", BIG)), "--k-minus": Flag((), ("0", "-1")),
        "--delta": half_open_unit(), "--confidence": PROB,
        "--epsilon-nominal": NOMINAL, "--out": out(), "--json": SWITCH_FLAG,
        **PLAN_FLAGS},
        required=("--canaries", "--guesses", "--correct", "--delta"), writes=True, files=SCORES_FILES),
    Spec(("audit", "clopper-pearson"), RUNS_BASE, {
        "--runs-in": count(1, 10**6, ("10", "1000000")), "--runs-out": count(1, 10**6, ("10", "1000000")),
        "--false-negatives": count(0, None, ("0", "10"), more=("11",)),
        "--false-positives": count(0, None, ("0", "10"), more=("11",)),
        "--delta": half_open_unit(), "--confidence": PROB, "--one-sided": SWITCH_FLAG,
        "--thresholds": count(1, 10**6, ("1", "1000000")),
        "--epsilon-nominal": NOMINAL, "--out": out(), "--json": SWITCH_FLAG},
        required=tuple(RUNS_BASE), writes=True),
    Spec(("audit", "gdp"), RUNS_BASE, {
        "--runs-in": count(1, 10**6, ("10", "1000000")), "--runs-out": count(1, 10**6, ("10",)),
        "--false-negatives": count(0, None, ("0", "10"), more=("11",)),
        "--false-positives": count(0, None, ("0", "10"), more=("11",)),
        "--delta": open_unit(("1e-5",)), "--confidence": PROB,
        "--hypotheses": count(1, 10**6, ("1", "1000000")), "--out": out(), "--json": SWITCH_FLAG},
        required=tuple(RUNS_BASE), writes=True),
    Spec(("audit", "fdp-one-run"), ONE_RUN_BASE, {
        "--canaries": count(1, 10**8, ("1000", "100000000"), more=("99",), blame=("guesses",)),
        "--guesses": count(0, None, ("100", "1000"), more=("1001", "89"), blame=("correct",)),
        "--correct": count(0, None, ("0", "90", "100"), more=("101",)),
        "--delta": open_unit(("1e-5",)), "--confidence": PROB, "--out": out(), "--json": SWITCH_FLAG},
        required=tuple(ONE_RUN_BASE), writes=True),
    Spec(("audit", "fdp-claim-curve"), {**ONE_RUN_BASE, "--sampling-rate": "1", "--noise-multiplier": "1",
                                         "--steps": "1"}, {
        "--canaries": count(1, 10**8, ("1000", "100000000"), more=("99",), blame=("guesses",)),
        "--guesses": count(0, None, ("100", "1000"), more=("1001", "89"), blame=("correct",)),
        "--correct": count(0, None, ("0", "90", "100"), more=("101",)),
        "--sampling-rate": real(("0.5", "1"), more=("0", "1.5", "-0.1")),
        "--noise-multiplier": positive(("1", "2"), more=("0.01",)),
        "--steps": count(1, MAX_STEPS, ("2",)),
        "--history": Flag((), ("1.0:0.5:2", "x", "{file}", "{missing}.json", "{dir}.json", "/proc/self/x.json"),
                          blame=("sampling_rate",)),
        "--delta": open_unit(("1e-5",)), "--confidence": PROB, "--out": out(), "--json": SWITCH_FLAG,
        **PLAN_FLAGS},
        required=tuple(ONE_RUN_BASE), writes=True, work=("audits.statistics.fdp_claim:fdp_claim_curve",),
        files=tuple(FileFlag("--history", inp, drop=("--sampling-rate", "--noise-multiplier", "--steps"))
                    for inp in (HISTORY, OPACUS_HISTORY))),
    Spec(("audit", "power"), {"--canaries": "100", "--delta": "1e-5", "--score-model": "perfect"}, {
        "--canaries": count(1, 10**8, ("1", "100", "1000000"), more=("100000000",), blame=("sims",)),
        "--delta": half_open_unit(), "--confidence": PROB,
        "--score-model": Flag(("perfect", "gdp:1", "dpsgd_dirac:0.1,1,10,llr", "dpsgd_dirac:0.5,2,100000,sum"),
                              ("", "bogus", "gdp:", "gdp:-1", "gdp:nan", "dpsgd_dirac:2,1,10,llr",
                               "dpsgd_dirac:0.1,1,1e300,llr", "dpsgd_dirac:0.1,1,100001,sum",
                               "dpsgd_dirac:0.1,1,10,bogus", "dpsgd_dirac:0.1,1,100000,llr"),
                              blame=("q", "sigma", "T", "mu", "stat")),
        "--epsilon-nominal": NOMINAL, "--sims": count(1, None, ("1", "200"), more=(BIG,)),
        "--seed": seed(), "--backend": choice(("serial",)),
        "--ray-address": Flag((), ("auto", "host:1"), name="ray_address"),
        "--max-retries": count(0, 100, ("0", "100")), "--json": SWITCH_FLAG},
        required=("--canaries", "--delta", "--score-model"),
        work=("audits.statistics.power:plan", "audits.statistics.power:nominal_epsilon")),
    Spec(("audit", "multi-run"), {"--runs-in": "10", "--runs-out": "10", "--sigma": "1", "--delta": "1e-5"}, {
        "--runs-in": count(1, 10**6, ("1", "1000000")), "--runs-out": count(1, 10**6, ("10",)),
        "--target": Flag(("gaussian",), ("", "bogus", ":f", "nosuchmodule_zz:f", "math:pi", "math:nosuch"),
                         blame=("sigma",)),
        "--sigma": positive(("1", "0.5")), "--steps": count(1, None, ("1", "100"), more=(BIG, "500000000")),
        "--threshold": real(("0", "-3")), "--delta": half_open_unit(), "--confidence": PROB,
        "--one-sided": SWITCH_FLAG, "--epsilon-nominal": NOMINAL, "--seed": seed(),
        "--backend": choice(("serial",)), "--ray-address": Flag((), ("auto",), name="ray_address"),
        "--max-retries": count(0, 100, ("3",)), "--out": out(), "--json": SWITCH_FLAG},
        required=("--runs-in", "--runs-out", "--delta"),
        work=("audits.multirun_driver:run_seeds", "audits.statistics.power:nominal_epsilon"), writes=True),
    Spec(("audit", "selection"), {"--mechanism": "privbon", "--samples": "100", "--out": "{out}"}, {
        **SELECTION_FLAGS,
        "--pair": Flag(("worst", "example"), ("phase1", "bogus")),
        "--candidates": count(1, 2**16, ("2", "16", "65536")),
        "--target": Flag(("1", "fallback", "16"), ("0", "17", "x", "", "-1")),
        "--samples": count(2, 10**7, ("2", "100", "10000000"), more=("1",)),
        "--delta": half_open_unit()},
        required=("--mechanism", "--samples", "--out"), work=("audits.cli.selection:build_pair",), writes=True),
    Spec(("audit", "selection"), {"--mechanism": "privitp", "--samples": "100", "--out": "{out}"}, {
        **SELECTION_FLAGS,
        "--pair": Flag(("worst", "phase1"), ("example", "bogus")),
        "--candidates": count(1, 2**16, ("4", "1024")),
        "--target": Flag(("1", "fallback", "4"), ("0", "5", "x", "")),
        "--samples": count(2, 10**7, ("2", "100", "10000000"), more=("1",)),
        "--delta": real(("1e-5",), more=("1", "-1e-9", "1.5"))},
        required=("--mechanism", "--samples", "--out"), work=("audits.cli.selection:build_pair",), writes=True),
    Spec(("audit", "dp-grpo"), {"--canaries": "10", "--out": "{out}"}, {
        "--preset": choice(("tiny-cpu",)),
        "--model": Flag((), ("{missing}", "{file}", "{dir}", "/proc/self/x", "")),
        "--tokenizer": Flag((), ("{dir}",)), "--lora-targets": Flag((), ("q_proj",)),
        "--canaries": count(1, 10**8, ("10", "1000"), more=(str(10**6),), blame=("rounds",)),
        "--canary-type": choice(("gradient_dirac", "input_binary")),
        "--out": out(), "--seed": seed(),
        "--rounds": count(1, 10**5, ("1", "30"), more=("5000",)),
        "--q": real(("0.5", "1"), more=("0", "1.5")), "--confidence": PROB, "--json": SWITCH_FLAG},
        required=("--canaries", "--out"),
        work=("audits.dpgrpo.gradient_canary:_run", "audits.dpgrpo.input_canary:_run"), writes=True,
        files=AUDIT_MODEL_FILES,
        out_taken=("private/auditor_log.jsonl",)),
]


def _leaf_commands() -> set[str]:
    found = set()

    def walk(parser, words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.add(" ".join(words))
        for action in subs:
            for name, child in action.choices.items():
                walk(child, [*words, name])
    walk(build_parser(), [])
    return found


def test_every_leaf_command_is_fuzzed():
    """A new subcommand fails this test until it has a spec (24 leaf commands today)."""
    leaves = _leaf_commands()
    assert len(leaves) == 24 and leaves == {spec.command for spec in SPECS}


def _options(spec: Spec) -> dict[str, argparse.Action]:
    parser = build_parser()
    for word in spec.words:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {opt: action for action in parser._actions for opt in action.option_strings}


def _tokens(flag: str, value) -> list[str]:
    if value is SWITCH:
        return [flag]
    return [flag, *value] if isinstance(value, tuple) else [flag, value]


def _substitute(tokens: list[str], places: dict[str, str]) -> list[str]:
    out = []
    for token in tokens:
        for key, path in places.items():
            token = token.replace(key, path)
        out.append(token)
    return out


@dataclass
class Case:
    """A drawn vector and what it must do."""
    argv: list[str]
    valid: bool
    blamed: set = field(default_factory=set)     # parameter names and option strings an error may name


def _name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


@st.composite
def cases(draw, spec: Spec) -> Case:
    values = dict(spec.base)
    valid, blamed = True, set()

    def blame(flag: str, info: Flag | None):
        blamed.update({flag, _name(flag)})
        if info is not None:
            blamed.update({info.name} if info.name else set())
            blamed.update(info.blame)

    chosen = draw(st.lists(st.sampled_from(sorted(spec.flags)), min_size=0 if spec.positional else 1, max_size=3,
                           unique=True))
    for flag in chosen:
        info = spec.flags[flag]
        pool = [(v, True) for v in info.valid] + [(v, False) for v in info.hostile]
        value, ok = draw(st.sampled_from(pool))
        values[flag] = value
        if not ok:
            valid = False
            blame(flag, info)
    for group in spec.exclusive:
        given = [f for f in group if f in values]
        if len(given) > 1:
            valid = False
            for f in given:
                blame(f, spec.flags[f])
    argv = list(spec.words)
    if spec.positional is not None:
        argv.append(draw(st.sampled_from(spec.positional.hostile)))
        valid = False
        blamed.update({spec.positional.name})
    structural = draw(st.sampled_from(("none", "none", "drop", "unknown", "dangling", "dup")))
    if structural == "drop" and [f for f in spec.required if f in values]:
        flag = draw(st.sampled_from([f for f in spec.required if f in values]))
        del values[flag]
        valid = False
        blame(flag, spec.flags.get(flag))
    for flag, value in values.items():
        argv += _tokens(flag, value)
    if structural == "unknown":
        argv += ["--bogus-flag", "1"]
        valid = False
        blamed.add("--bogus-flag")
    elif structural == "dangling":
        takes_value = [f for f, info in spec.flags.items() if SWITCH not in info.valid + info.hostile]
        if takes_value:
            flag = draw(st.sampled_from(sorted(takes_value)))
            argv.append(flag)
            valid = False
            blame(flag, spec.flags[flag])
    elif structural == "dup":
        single = [f for f, v in values.items() if isinstance(v, str)]
        if single:
            flag = draw(st.sampled_from(sorted(single)))
            argv += _tokens(flag, values[flag])          # the same value twice: validity unchanged
    return Case(argv, valid, blamed)


def sweep(spec: Spec, thorough: bool):
    """Every flag alone: its first hostile value (all of them when `thorough`), and its valid values where
    that costs nothing (a command whose work is patched) or when `thorough`: a systematic pass beside the fuzz."""
    exclusive = {f: [g for g in group if g != f] for group in spec.exclusive for f in group}
    positional = [] if spec.positional is None else [spec.positional.hostile[0]]
    for flag, info in spec.flags.items():
        conflict = any(other in spec.base for other in exclusive.get(flag, ()))
        for value in (info.hostile if thorough else info.hostile[:1]):
            argv = [*spec.words, *positional, *_vector(spec.base, flag, value)]
            yield Case(argv, False, {flag, _name(flag), *([info.name] if info.name else []), *info.blame})
        if positional or not (thorough or spec.work is not None):
            continue
        for value in info.valid:
            blamed = {flag, _name(flag), *exclusive.get(flag, ())}
            yield Case([*spec.words, *_vector(spec.base, flag, value)], not conflict, blamed)


def _vector(base: dict, flag: str, value) -> list[str]:
    values = {**base, flag: value}
    return [token for f, v in values.items() for token in _tokens(f, v)]


def check(spec: Spec, case: Case, root: Path) -> None:
    """The oracle of the module docstring."""
    places = make_sandbox(root)
    argv = _substitute(case.argv, places)
    outcome = run_cli(argv, root)
    shown = f"{argv!r}: code={outcome.code} started={outcome.started}\nstderr:\n{outcome.err}"
    assert "Traceback" not in outcome.err, shown
    if not case.valid:
        assert outcome.code == 2 and not outcome.started, shown
        assert outcome.out == "" and not outcome.new_paths, shown + f"\nnew paths: {outcome.new_paths}"
        last = outcome.err_lines[-1]
        if not outcome.argparse_exit:
            assert len(outcome.err_lines) == 1 and last.startswith("privcheck: error: "), shown
        named = {m.group(1) for m in re.finditer(r"invalid (\w+)=", last)} | set(re.findall(r"--[\w-]+", last))
        assert named & case.blamed or (outcome.argparse_exit and "required" in last), \
            shown + f"\nexpected one of {sorted(case.blamed)}"
        return
    if spec.work is not None:
        assert outcome.started, shown
        assert not outcome.new_paths, shown + f"\nnew paths: {outcome.new_paths}"   # the claim was rolled back
    else:
        assert outcome.code == 0, shown
        out_dir = places["{out}"]
        assert all(str(Path(root, p)).startswith(out_dir) for p in outcome.new_paths), outcome.new_paths


FAST = settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
THOROUGH = settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                              HealthCheck.too_slow])


def _fuzz(spec: Spec, data) -> None:
    case = data.draw(cases(spec))
    with tempfile.TemporaryDirectory(prefix="privcheck-fuzz-") as tmp, patched_work(spec.work or ()):
        check(spec, case, Path(tmp) / "sandbox")


IDS = [f"{spec.command}[{spec.base.get('--mechanism', '')}]" if "--mechanism" in spec.base else spec.command
       for spec in SPECS]


def _sweep(spec: Spec, thorough: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="privcheck-sweep-") as tmp, patched_work(spec.work or ()):
        for i, case in enumerate(sweep(spec, thorough)):
            check(spec, case, Path(tmp) / str(i))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_sweep(spec):
    _sweep(spec, thorough=False)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_sweep_thorough(spec):
    _sweep(spec, thorough=True)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@FAST
@given(data=st.data())
def test_fuzz(spec, data):
    _fuzz(spec, data)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@THOROUGH
@given(data=st.data())
def test_fuzz_thorough(spec, data):
    _fuzz(spec, data)


# --- hostile files (issue 23) -------------------------------------------------------------------------------------

HOSTILE = "{hostile}"
DEADLINE_S = 20         # a command still running after this is blocked (a FIFO read): `Blocked` ends it


def _path_flags(spec: Spec) -> set[str]:
    """The flags (and positionals) of the command's parser that name a file to read or a directory to write."""
    parser = build_parser()
    for word in spec.words:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    found = set()
    for action in parser._actions:
        if action.type is not None or action.choices is not None or action.nargs == 0:
            continue                                    # a number, a choice or a switch: not a path
        text = f" {action.help or ''} ".lower()
        if action.dest in ("out", "dir") or action.metavar in ("FILE", "PATH", "DIR") or " file" in text \
                or "directory" in text:
            found.add(action.option_strings[0] if action.option_strings else action.dest)
    return found


def test_every_file_and_directory_flag_gets_hostile_files():
    """A new flag that reads a file or writes a directory fails this test until the fuzz draws hostile files for it."""
    for spec in SPECS:
        fuzzed = {f.flag for f in spec.files} | ({spec.out_flag} if spec.out_flag else set())
        assert _path_flags(spec) == fuzzed, spec.command


@dataclass
class FileCase:
    """A drawn vector whose `HOSTILE` token is the value `drawn.build` makes (an `hf.HostileInput` or `hf.Plant`),
    with valid files for the placeholders of `extra`."""
    argv: list[str]
    drawn: object
    extra: tuple = ()
    blamed: set = field(default_factory=set)

    @property
    def valid(self) -> bool:
        return self.drawn.valid


@st.composite
def file_cases(draw, spec: Spec) -> FileCase:
    targets = [*spec.files, *([spec.out_flag] if spec.out_flag else [])]
    target = draw(st.sampled_from(targets))
    values, extra = dict(spec.base), ()
    if isinstance(target, FileFlag):
        flag = target.flag
        drawn = draw(hf.hostile_inputs(target.input, target.valid_ok))
        blamed = {flag, _name(flag), *target.blame}
        for dropped in target.drop:
            values.pop(dropped, None)
        extra = tuple((f"{{{_name(f)}}}", f, hf.HostileInput(inp, "valid", data=inp.valid_bytes(), valid=True,
                                                               where=_name(f)))
                      for f, inp in target.needs)
    else:
        flag = target
        needs = tuple((name, inp.valid_bytes()) for name, inp in spec.out_needs)
        drawn = draw(hf.planted_outputs(needs, valid_ok=flag != "dir", taken=spec.out_taken))  # report: no plots
        blamed = {flag, _name(flag)}
    positional = HOSTILE if flag == "dir" else next((p for p, f, _ in extra if f == "dir"), None)
    argv = [*spec.words, *([positional] if positional else [])]
    if flag != "dir":
        values[flag] = HOSTILE
    for placeholder, f, _ in extra:
        if f != "dir":                  # report's positional, placed above
            values[f] = placeholder
    for f, value in values.items():
        argv += _tokens(f, value)
    if draw(st.booleans()) and "--json" in spec.flags:
        argv.append("--json")
    return FileCase(argv, drawn, extra, blamed)


def _named(line: str) -> set[str]:
    """The parameters an error line names: `invalid NAME=` (the first part of a dotted name such as
    scores.preregistration), and `artifact` for an artifact report cannot read."""
    named = {m.split(".")[0] for m in re.findall(r"invalid ([\w.]+)=", line)}
    return named | ({"artifact"} if line.startswith("privcheck: error: cannot read artifact ") else set())


def check_file(spec: Spec, case: FileCase, root: Path) -> None:
    """The oracle of the module docstring, for a drawn hostile file."""
    places = make_sandbox(root)
    victim = hf.Victim(root)
    places[HOSTILE] = case.drawn.build(root, victim)
    for placeholder, _, made in case.extra:
        places[placeholder] = made.build(root)
    argv = _substitute(case.argv, places)
    watched = [Path(places[HOSTILE]), *((case.drawn.path(root),) if isinstance(case.drawn, hf.Plant) else ())]
    if isinstance(case.drawn, hf.HostileInput) and case.drawn.input.member is not None:
        watched.append(Path(places[HOSTILE]) / case.drawn.input.member)
    watched = [p for p in watched if p.is_relative_to(root)]          # not /dev/null
    states, before = [hf.entry_state(p) for p in watched], listing(root)
    start = time.perf_counter()
    with deadline(DEADLINE_S):
        outcome = run_cli(argv, root)
    seconds = time.perf_counter() - start
    shown = (f"{case.drawn!r}\n{argv!r}: code={outcome.code} started={outcome.started} {seconds:.1f} s\n"
             f"stdout:\n{outcome.out[:2000]}\nstderr:\n{outcome.err}")
    assert "Traceback" not in outcome.err, shown
    assert victim.unchanged(), shown + "\nthe victim outside was touched"
    if not case.valid:
        assert outcome.code == 2 and not outcome.started and not outcome.argparse_exit, shown
        assert outcome.out == "" and len(outcome.err_lines) == 1, shown
        assert outcome.err_lines[0].startswith("privcheck: error: "), shown
        assert _named(outcome.err_lines[0]) & case.blamed, shown + f"\nexpected one of {sorted(case.blamed)}"
        assert listing(root) == before, shown + f"\ncreated or removed: {listing(root) ^ before}"
        assert [hf.entry_state(p) for p in watched] == states, shown + "\nan entry was replaced or followed"
        return
    if spec.work is not None:
        assert outcome.started and not outcome.new_paths, shown + f"\nnew paths: {outcome.new_paths}"
    else:
        assert outcome.code == 0, shown
        assert all(p.startswith("out/") or p == "out/" for p in outcome.new_paths), outcome.new_paths


FILE_SPECS = [spec for spec in SPECS if spec.files or spec.out_flag]
FILE_IDS = [IDS[SPECS.index(spec)] for spec in FILE_SPECS]


def _fuzz_files(spec: Spec, data) -> None:
    case = data.draw(file_cases(spec))
    with tempfile.TemporaryDirectory(prefix="privcheck-files-") as tmp, patched_work(spec.work or ()):
        check_file(spec, case, Path(tmp) / "sandbox")


@pytest.mark.parametrize("spec", FILE_SPECS, ids=FILE_IDS)
@FAST
@given(data=st.data())
def test_fuzz_files(spec, data):
    _fuzz_files(spec, data)


@pytest.mark.slow
@pytest.mark.parametrize("spec", FILE_SPECS, ids=FILE_IDS)
@THOROUGH
@given(data=st.data())
def test_fuzz_files_thorough(spec, data):
    _fuzz_files(spec, data)
