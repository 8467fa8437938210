"""The documentation is tested: every block of README.md and docs/**/*.md that shows output runs and prints what it
shows, so a figure in the docs cannot drift from what the code prints.

What runs (tests/doc_blocks.py finds the blocks):

* ```console blocks: each `$ privcheck ...` command, in-process (`privcheck.cli.main`) in a fresh directory, must
  print the output lines shown under it, or the row a `# [row] value` comment names. A comment "exit code N" on the
  command or its output means it must exit with N, and the lines shown are its stderr.
* ```python blocks run statement by statement in a fresh namespace and directory (docs/audit_your_model.md: the
  whole guide in one namespace, in page order). An expression statement with a value comment — `# -> 8.0 9.833`,
  or a comment that starts with values, `# 8.412886e-04`, `# 2.00000 (never above the target)` — must print
  (`print(...)`) or evaluate to those values; a block's asserts are its output too. ```py blocks are sketches that
  need the reader's own objects (a trainer, a model) and are not run.
* Tables of figures whose source command or function the page names (the `test_table_*` tests).

The comparison rule. Words, punctuation and counts (integers) must be what is printed; a shown decimal number must
be the printed number rounded to the shown digits (within half a unit of the last shown digit, and not showing more
significant digits than are printed); `digits...` is the start of the printed number; `...` elides text and a line
`...` elides lines. Only figures that depend on float FFT libraries (dp-accounting's `pld_float`, Opacus's PRV
accountant, and the σ that calibration finds by a search on dp-accounting's PLD) may differ by FFT_REL, relative:
their last digits move between CPUs and numpy builds (measured: ≤ 1e-9 relative on these rows). FFT_ROWS and the
table tests say which figures these are, and the docs say so where they show them.

Every block that shows output runs here in `make test` or is listed with its reason: SLOW (run by the slow tests of
this module, `make test-slow`), ELSEWHERE (run, with its output compared, by the test named) or NOT_RUN (cannot be
reproduced: wall-clock timings, the reader's own trainer). `test_every_block_that_shows_output_is_run_or_listed`
fails on a new block that is none of these, and `test_listed_blocks_exist` on a listed one that is gone.

Figures of float32 training and sampling (the slow tier's DP-GRPO runs, canary audits and rollouts) repeat on one
machine, but another CPU's float32 kernels round differently: those tests check the docs' reference machine
(README, "Tested documentation"), and can fail on another CPU without any change to the code.
"""

from __future__ import annotations

import re

import pytest

from tests.doc_blocks import (
    REPO,
    Block,
    Command,
    blocks,
    commands,
    doc_pages,
    match_lines,
    run_command,
    run_python,
    same,
    shown_number_matches,
    table_after,
    value_comment,
)

FFT_REL = 1e-8

# Rows of a command's table that depend on dp-accounting's float FFT PLD: (subcommand, row label).
FFT_ROWS = {
    ("account dp-sgd", "pld_float (cross-check)"),
    ("calibrate dp-sgd", "noise_multiplier"),
    ("calibrate dp-sgd", "epsilon (achieved)"),
    ("calibrate dp-sgd", "bracket"),
}

# Blocks that show output and run in the slow tier: (page, text of the command or block) -> the test that runs them.
SLOW = {
    ("docs/artifacts.md", "artifacts/verification.json"): "test_slow_verify_writes_what_the_docs_say",
    ("docs/audits.md", "plan(10_000, delta=1 / 69880"): "test_slow_power_plan_figures",
    ("docs/audits.md", "audit power --canaries 10000"): "test_slow_power_plan_figures",
    ("docs/audits.md", "resolve_preset(\"tiny-cpu\").build_policy(0)\nrng"): "test_slow_constant_reward_figures",
    ("docs/audits.md", "for phase in (None, BinaryPretraining())"): "test_slow_constant_reward_figures",
}

# Blocks run, with their output compared, by another test.
ELSEWHERE = {
    ("docs/audits.md", "audit multi-run --runs-in 1000"):
        "tests/audits/test_multirun_driver.py::test_docs_multi_run_command_prints_what_it_shows",
    ("docs/audits.md", "run_multirun_audit(GaussianRuns"):
        "tests/audits/test_multirun_driver.py::test_docs_python_block_runs",
    ("docs/scaling.md", "audit multi-run --runs-in 200"):
        "tests/audits/test_backends.py::test_scaling_doc_commands_print_what_they_show",
    ("docs/scaling.md", "audit power --canaries 3000"):
        "tests/audits/test_backends.py::test_scaling_doc_commands_print_what_they_show",
    ("docs/selection.md", "PrivBoNEvent(sensitivity=0.1"):
        "tests/selection/test_docs_examples.py::test_docs_python_blocks_run",
    ("docs/integrations/opacus.md", "run_suite(bindings, checks=list(DPSGD_CHECKS))"):
        "tests/integrations/test_opacus.py::test_docs_example_passes_the_checks_and_leaves_the_run_unchanged",
    ("docs/integrations/opacus.md", "GradientCanaries(optimizer"):
        "tests/integrations/test_opacus.py::test_docs_canary_audit_runs_on_the_opacus_model",
    ("docs/integrations/opacus.md", "bindings = whole_run_bindings(train, dataset"):
        "tests/integrations/test_opacus_whole_run.py::test_docs_whole_run_example_passes",
    ("docs/integrations/opacus.md", "pytest --privcheck -q 'conftest.py::privcheck[poisson_sampling]'"):
        "tests/integrations/test_sampling_scheme.py::test_docs_pytest_privcheck_shows_the_scheme",
    ("docs/integrations/trl.md", "results = {r.name: r for r in run_suite("):
        "tests/integrations/test_trl.py::test_example_trains_and_passes_the_fast_checks",
    ("docs/integrations/trl.md", "audit.analyse("):
        "tests/integrations/test_trl.py::test_example_audited",
    ("docs/integrations/trl.md", "run_public_outputs"):
        "tests/integrations/test_trl_run.py::test_docs_whole_run_example",
}

# Blocks whose output cannot be reproduced by a test, and why.
NOT_RUN = {
    ("docs/dpgrpo.md", "pytest --privcheck -rs"): "the output of the reader's own bindings (`my_clip`, ...); "
                                                  "test_pytest_plugin_output_is_consistent checks its form",
    ("docs/dpgrpo.md", "test_bench_dpgrpo.py --benchmark-enable"): "wall-clock timings, which vary by machine and load",
    ("docs/audits.md", "run_gradient_canary_audit(preset=\"tiny-cpu\", canaries=1000, out_dir"):
        "an audit release (OS entropy, ≈ 1 min, no output shown); the same audit runs seeded (`--seed 1`) in "
        "test_slow_dpgrpo_audit_figures",
}

# Pages whose ```python blocks and commands run in one namespace, in page order (each builds on the last).
SEQUENTIAL = ("docs/audit_your_model.md",)


# --- the inventory -------------------------------------------------------------------------------------------

def _items() -> list[Command | Block]:
    """Every command of a console block that shows output, and every ```python block, of every page."""
    found = []
    for page in doc_pages():
        for block in blocks(page):
            if block.lang == "console":
                found += [c for c in commands(block) if c.shows_output]
            elif block.lang == "python":
                found.append(block)
    return found


def _key_of(item, listed) -> tuple[str, str] | None:
    page, text = (item.block.page, item.text) if isinstance(item, Command) else (item.page, item.text)
    keys = [k for k in listed if k[0] == page and k[1] in text]
    assert len(keys) <= 1, (item.where, keys)
    return keys[0] if keys else None


def _listed(item) -> str | None:
    """The list that names `item` ("SLOW", "ELSEWHERE", "NOT_RUN"), or None."""
    names = [name for name, table in (("SLOW", SLOW), ("ELSEWHERE", ELSEWHERE), ("NOT_RUN", NOT_RUN))
             if _key_of(item, table) is not None]
    assert len(names) <= 1, (item.where, names)
    return names[0] if names else None


def _sequential(item) -> bool:
    return (item.block.page if isinstance(item, Command) else item.page) in SEQUENTIAL


ITEMS = _items()
COMMANDS = [c for c in ITEMS if isinstance(c, Command) and c.argv[0] == "privcheck" and _listed(c) is None
            and not _sequential(c)]
PYTHON = [b for b in ITEMS if isinstance(b, Block) and _listed(b) is None and not _sequential(b)]


def test_every_block_that_shows_output_is_run_or_listed():
    """Commands of privcheck and ```python blocks run here unless listed; any other command must be listed."""
    unaccounted = [item.where for item in ITEMS if _listed(item) is None and isinstance(item, Command)
                   and item.argv[0] != "privcheck"]
    assert not unaccounted, f"commands that show output but neither run here nor are listed: {unaccounted}"
    assert len(COMMANDS) >= 15 and len(PYTHON) >= 8


def test_listed_blocks_exist():
    for table in (SLOW, ELSEWHERE, NOT_RUN):
        for key in table:
            assert sum(_key_of(item, {key: None}) == key for item in ITEMS) == 1, f"no single block for {key}"
    this_module = globals()
    for key, test in SLOW.items():
        assert test in this_module and any(m.name == "slow" for m in this_module[test].pytestmark), (key, test)
    for key, where in ELSEWHERE.items():
        path, _, test = where.partition("::")
        assert f"def {test}(" in (REPO / path).read_text(encoding="utf-8"), (key, where)


def test_docs_blocks_are_well_formed():
    """A page has no `>>>` session (the value comments are the one convention) and every ```python block parses."""
    for page in doc_pages():
        for block in blocks(page):
            assert ">>>" not in block.text, block.where
            if block.lang == "python":
                compile(block.text, block.where, "exec")


# --- commands ------------------------------------------------------------------------------------------------

def _rel_of(command: Command):
    verb = " ".join(command.argv[1:3])
    rows = {label for v, label in FFT_ROWS if v == verb}
    return lambda line: FFT_REL if re.split(r"\s{2,}", line.strip())[0] in rows else 0.0


def check_command(command: Command) -> None:
    code, out, err = run_command(command.argv[1:])
    assert code == command.exit_code, (command.where, code, err)
    printed = (out if code == 0 else err).splitlines()
    if command.shown:
        why = match_lines(list(command.shown), printed, _rel_of(command))
        assert why is None, f"{command.where}: {why}"
    else:                                   # `# [row] value`: that row (or the first) of the table
        row, value = command.comment_value
        line = next(p for p in printed if row is None or p.split()[0] == row)
        assert same(value, line.split()[-1], _rel_of(command)(line)), (command.where, value, line)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_command_prints_what_it_shows(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_command(command)


def test_every_privcheck_command_shown_parses():
    """Every `privcheck` command line of a console or bash block is a valid command line (those with `[...]` or
    `A|B` placeholders excepted)."""
    from privcheck.cli import build_parser

    parser = build_parser()
    shown = []
    for page in doc_pages():
        for block in blocks(page):
            if block.lang == "console":
                shown += [c.argv[1:] for c in commands(block) if c.argv[0] == "privcheck"]
            elif block.lang == "bash":
                joined = block.text.replace("\\\n", " ")
                shown += [line.split(" #")[0].split()[1:] for line in joined.splitlines()
                          if line.startswith("privcheck ")]
    checked = 0
    for argv in shown:
        if any(c in " ".join(argv) for c in "[]|"):
            continue
        parser.parse_args(argv)
        checked += 1
    assert checked >= 40


# --- python blocks -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_block_prints_what_it_shows(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problems = run_python(block, {"__name__": "__docs__"})
    assert not problems, "\n".join(problems)


def test_audit_your_model_guide_runs_as_shown(tmp_path, monkeypatch):
    """docs/audit_your_model.md in page order, in one namespace and directory: its ```python blocks (their asserts
    are the output) and the `privcheck` command whose output it shows (the salt is fresh, so the commitment, the
    preregistration digest and the seal are elided)."""
    monkeypatch.chdir(tmp_path)
    page = "docs/audit_your_model.md"
    namespace: dict = {"__name__": "__docs__"}
    ran = []
    for block in blocks(page):
        if block.lang == "python":
            problems = run_python(block, namespace)
            assert not problems, "\n".join(problems)
            ran.append(block.lang)
        elif block.lang == "console":
            for command in commands(block):
                if command.shows_output:
                    check_command(command)
                    ran.append("console")
    assert ran.count("python") == 5 and ran.count("console") == 1
    assert (tmp_path / "my-model" / "config.json").is_file() and (tmp_path / "my-tokenizer").is_dir()
    _check_scores_file_format(page, tmp_path / "scores.csv")


def _check_scores_file_format(page: str, path) -> None:
    """The ```text block of "The scores file" is the head of the file the guide wrote (`<...>` and `…` elide)."""
    shown = next(b for b in blocks(page) if b.lang == "text").text.splitlines()
    printed = path.read_text(encoding="utf-8").splitlines()[:len(shown)]
    shown = [re.sub(r"<[^>]*>", "...", line) for line in shown]
    why = match_lines(shown, printed)
    assert why is None, why


def test_value_comments_are_read_as_intended():
    """The convention the module docstring states, on the comment forms the pages use."""
    assert value_comment("# -> 0.484241 True") == "0.484241 True"
    assert value_comment("# 14.11, the ε of T = 40, not 2.0") == "14.11"
    assert value_comment("# 0.126937, 4.3772") == "0.126937, 4.3772"
    assert value_comment("# reported figure: certified PLD, upper end") is None
    assert same("0.95485832...", "0.9548583288") and not same("0.95485832...", "0.9548584")
    assert same("3.7697", "3.76968658") and not same("3.7697", "3.76976")
    assert not same("8.000", "8.0") and not same("59", "59.4") and not same("13", "14")


# --- tables of figures whose source the page names -------------------------------------------------------------

MATH_SIGMA = 0.4842404738068581     # Table VII's σ of the MATH ε = 8 row (docs/accounting.md abbreviates it 0.48424)


def _number(text: str) -> float:
    """A configuration value as the docs write it: "128/6988", "1e-3", "0.48424" (Table VII's σ)."""
    if text == "0.48424":
        return MATH_SIGMA
    num, _, den = text.partition("/")
    return float(num) / float(den or 1)


def _shows(shown: str, value: float, rel: float = 0.0) -> bool:
    """A figure of a table against the value computed for it (written with all its digits, so that the rule's
    "no more significant digits than printed" does not apply: 0.64 may be shown as 0.640)."""
    return shown_number_matches(shown, f"{float(value):.17g}", rel)


def _interval(cell: str) -> tuple[str, str]:
    lower, upper = re.fullmatch(r"\[([\d.]+), ([\d.]+)\]", cell).groups()
    return lower, upper


def test_table_verify_exact_against_float_pld():
    """docs/accounting.md, "Measured (privcheck verify ...)": the accounting suite's exact ε (Arb closed form at T = 1,
    quadrature at T = 2) beside dp-accounting's float PLD (FFT: FFT_REL, also on their difference), and the
    discretisation convergence below it."""
    from privcheck.accounting import PoissonGaussianEvent, epsilon

    rows = table_after("docs/accounting.md", "Measured (`.venv/bin/privcheck verify")
    assert len(rows) == 5
    for config, exact_cell, pld_cell, diff_cell in rows:
        T, q, sigma, delta = re.fullmatch(r"T = (\d), q = ([\d/.]+), σ = ([\d.]+), δ = ([\de/.-]+)( \(Gaussian\))?",
                                          config).groups()[:4]
        event, delta = PoissonGaussianEvent(_number(q), _number(sigma), int(T)), _number(delta)
        if T == "1":
            exact = epsilon(event, delta, method="exact_single_round").certified
            lower, upper = _interval(exact_cell)
            assert _shows(lower, exact.lower) and _shows(upper, exact.upper), (config, exact)
            exact = exact.upper
        else:
            exact = epsilon(event, delta, method="quadrature").value
            assert exact_cell == f"{exact_cell.split()[0]} (quadrature)" and _shows(exact_cell.split()[0], exact)
        pld = epsilon(event, delta, method="pld_float").value
        assert _shows(pld_cell, pld, FFT_REL), (config, pld)
        assert abs(float(diff_cell) - (pld - exact)) <= max(0.05 * float(diff_cell), FFT_REL * pld), (config, pld)
    text = (REPO / "docs/accounting.md").read_text(encoding="utf-8")
    shown = re.search(r"interval 1e-2 → ([\d.]+) .*?1e-3 → ([\d.]+)\s.*?1e-4 → ([\d.]+) ", text, flags=re.S).groups()
    event = PoissonGaussianEvent(128 / 6988, MATH_SIGMA, 50)
    for value, interval in zip(shown, (1e-2, 1e-3, 1e-4)):
        assert _shows(value, epsilon(event, 1 / 69880, method="pld_float", interval=interval).value, FFT_REL)


def _table_vi() -> dict[str, tuple]:
    """docs/accounting.md's Table VI: configuration -> (event, δ, its row's cells)."""
    from privcheck.accounting import PoissonGaussianEvent

    rows = table_after("docs/accounting.md", "### Table VI (reproduced by `privcheck verify`)")
    assert len(rows) == 7
    return {name: (PoissonGaussianEvent(int(m) / int(n), float(sigma), int(T)), 1 / (10 * int(n)), cells)
            for name, n, m, T, sigma, *cells in rows}


JAX_PRIVACY = ("JAX-Privacy reference", 0.1, 3.0, 512, 1e-6)


def test_table_vi_float_pld_and_rdp():
    """Table VI's dp-accounting columns: the float PLD at 1e-4 (FFT: FFT_REL) and RDP (0.6.0)."""
    from privcheck.accounting import epsilon

    for name, (event, delta, (paper, pld_float, rdp)) in _table_vi().items():
        assert _shows(pld_float, epsilon(event, delta, method="pld_float").value, FFT_REL), name
        assert _shows(rdp, epsilon(event, delta, method="rdp").value), name
        assert abs(float(paper) - epsilon(event, delta).value) <= 1e-3, name      # the paper's PLD, to 1e-3


def _peer_rows():
    from privcheck.accounting import PoissonGaussianEvent

    table_vi = _table_vi()
    name, q, sigma, T, delta = JAX_PRIVACY
    events = {**{k: v[:2] for k, v in table_vi.items()}, name: (PoissonGaussianEvent(q, sigma, T), delta)}
    rows = table_after("docs/accounting.md", "| configuration | certified [lower, upper], default |")
    assert [r[0] for r in rows] == list(events)
    return [(events[r[0]], r) for r in rows]


def test_table_certified_beside_the_peers():
    """docs/accounting.md, "Certified figures beside the peers": the certified enclosure at the default settings and
    the lattice interval it used, dp-accounting's float PLD (FFT_REL) and RDP; the fixed-lattice and Opacus PRV
    columns are in test_slow_certified_peer_figures."""
    from privcheck.accounting import epsilon

    above = []
    for (event, delta), (name, default, interval, _, pld_float, _, rdp) in _peer_rows():
        rec = epsilon(event, delta)
        above.append(rec.certified.upper - epsilon(event, delta, method="pld_float").value)
        lower, upper = _interval(default)
        assert _shows(lower, rec.certified.lower) and _shows(upper, rec.certified.upper), (name, rec.certified)
        assert _shows(interval, rec.details["interval"]), (name, rec.details["interval"])
        assert _shows(pld_float, epsilon(event, delta, method="pld_float").value, FFT_REL), name
        assert _shows(rdp, epsilon(event, delta, method="rdp").value), name
    assert _shows("3.7697", epsilon(*_peer_rows()[-1][0]).value)     # "→ 3.7697 (published 3.77)" below Table VI
    text = (REPO / "docs/accounting.md").read_text(encoding="utf-8")
    shown = re.search(r"The certified upper end is at most\s([\d.e-]+) above dp-accounting's float figure", text)
    assert _shows(shown.group(1), max(above)), max(above)


def test_calibration_paragraph():
    """docs/accounting.md, "Calibration": the MATH ε = 8 row's σ (FFT_REL: found on dp-accounting's PLD), its
    certified ε and the evaluations, and Table VII's σ's certified ε."""
    from privcheck.accounting import PoissonGaussianEvent, calibrate_sigma, epsilon

    text = (REPO / "docs/accounting.md").read_text(encoding="utf-8")
    sigma, table_vii, its_eps, eps, lower, evaluations = re.search(
        r"MATH ε = 8 row:\sσ = ([\d.]+) \(Table VII: ([\d.]+), whose certified ε is ([\d.]+)\), certified ε = ([\d.]+)"
        r" \(lower end\s([\d.]+)\); `evaluations` = (\d+)", text).groups()
    cal = calibrate_sigma(128 / 6988, 50, 1 / 69880, 8.0)
    assert _shows(sigma, cal.value, FFT_REL) and _shows(table_vii, MATH_SIGMA)
    assert _shows(its_eps, epsilon(PoissonGaussianEvent(128 / 6988, MATH_SIGMA, 50), 1 / 69880).value)
    assert _shows(eps, cal.epsilon, FFT_REL) and _shows(lower, cal.achieved.certified.lower, FFT_REL)
    assert int(evaluations) == cal.evaluations


BLACKBOX_PAIRS = {      # the "pair" column of docs/audits.md's black-box table -> `privcheck audit selection` options
    "exponential mechanism (`--pair example`)": ["--mechanism", "privbon", "--pair", "example"],
    "PrivBoN worst, n = 16, Δ = R = 1, σ = 2": ["--mechanism", "privbon", "--sigma", "2", "--candidates", "16"],
    "PrivITP Phase 2, n = 4, Δ = σ_Z = 0.25, L = 0.5, λ̃ = 0": ["--mechanism", "privitp", "--lambda-tilde", "0"],
    "same, `--lambda-tilde auto` (planner: λ̃ = 0.625)": ["--mechanism", "privitp", "--lambda-tilde", "auto"],
    "PrivITP Phase 1, Δ = σ_X = 0.25 (μ = 1), δ = 1e-5": ["--mechanism", "privitp", "--pair", "phase1", "--sigma",
                                                          "0.25"],
}


def _blackbox_rows(tmp_path, keep) -> list[float]:
    """docs/audits.md, black-box "Measured figures": `privcheck audit selection ... --seed 1` for the rows whose draws
    per side `keep` accepts (ε_lower, the event's exact ln-ratio, the certified ε; the times are wall-clock)."""
    import json

    rows = table_after("docs/audits.md", "Confidence 0.95, seed 1, the commands above")
    assert len(rows) == 8
    options = None
    for k, (pair, draws, event, eps_lower, exact, certified, _) in enumerate(rows):
        options = BLACKBOX_PAIRS[pair] if pair in BLACKBOX_PAIRS else options
        if not keep(int(draws.replace(",", ""))):
            continue
        target = {"{t = 2}": ["--target", "2"], "{⊥}": ["--target", "fallback"]}.get(event, [])
        code, out, err = run_command(["audit", "selection", *options, *target, "--samples", draws.replace(",", ""),
                                      "--seed", "1", "--out", str(tmp_path / str(k)), "--json"])
        doc = json.loads(out)
        assert code == 0 and _shows(eps_lower, doc["eps_lower"]), (pair, event, doc["eps_lower"], err)
        assert _shows(exact, doc["exact_log_ratio"]), (pair, event, doc["exact_log_ratio"])
        assert _shows(certified.split()[0], doc["epsilon_certified"]), (pair, event, doc["epsilon_certified"])
        if "≤" in event:
            assert _shows(event.split("≤ ")[1].rstrip("}").replace("−", "-"), doc["result"]["event"]["threshold"])
    return rows


def test_table_blackbox_measured_figures(tmp_path):
    """The rows of up to 200,000 draws per side (the 1,000,000-draw row: test_slow_blackbox_million_draws), and the
    share of the exact ln-ratio that the tight pairs' rows reach, as the prose below the table says."""
    rows = _blackbox_rows(tmp_path, lambda draws: draws <= 200_000)
    shares = [float(r[3]) / float(r[4]) for r in rows if "≤" not in r[2]]
    text = (REPO / "docs/audits.md").read_text(encoding="utf-8")
    low, high = re.search(r"The audits reach (\d+)–(\d+)% of it", text).groups()
    assert (round(100 * min(shares)), round(100 * max(shares))) == (int(low), int(high))


@pytest.mark.slow
def test_slow_blackbox_million_draws(tmp_path):
    _blackbox_rows(tmp_path, lambda draws: draws > 200_000)


def test_checks_page_lists_the_catalogue_in_order():
    """docs/checks.md's list of the checks `pytest --privcheck` collects, against `check_names()`."""
    from privcheck.checks.training import check_names

    text = (REPO / "docs/checks.md").read_text(encoding="utf-8")
    listed = re.search(r"privcheck\[<check>\]`, in this order:\n(.*?) \(`python -c", text, flags=re.S).group(1)
    assert re.findall(r"`(\w+)`", listed) == list(check_names())


def test_pytest_plugin_output_is_consistent():
    """docs/dpgrpo.md's `pytest --privcheck -rs` output depends on the reader's bindings (NOT_RUN); its counts add
    up to the catalogue and its skip line is the plugin's message for a missing binding."""
    from privcheck.checks.training import CHECKS, SuiteBindings, run_suite

    command = next(c for c in commands(next(b for b in blocks("docs/dpgrpo.md") if "pytest --privcheck -rs"
                                            in b.text)))
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (failed|passed|skipped)", command.shown[-1]))
    assert sum(counts.values()) == len(CHECKS)
    skipped = next(line for line in command.shown if line.startswith("SKIPPED"))
    name = re.search(r": (\w+): skipped", skipped).group(1)
    (result,) = run_suite(SuiteBindings(), checks=[name])
    assert skipped.endswith(f"{name}: {result.message}")


# --- the slow tier: blocks and tables whose commands take minutes -------------------------------------------------

def _json_out(argv) -> dict:
    import json

    code, out, err = run_command(argv)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_slow_verify_writes_what_the_docs_say(tmp_path, monkeypatch):
    """`privcheck verify --out artifacts/` (≈ 2 min on 2 cores): README's checks per suite and plots, and
    docs/artifacts.md's block that reads the artifact."""
    import json
    from collections import Counter

    monkeypatch.chdir(tmp_path)
    code, _, err = run_command(["verify", "--out", "artifacts/"])
    assert code == 0, err
    doc = json.loads((tmp_path / "artifacts" / "verification.json").read_text(encoding="utf-8"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"`accounting` (\d+), `selection` (\d+),\s+`dpgrpo` (\d+), `audits` (\d+): (\d+) checks", readme)
    counts = Counter(c["suite"] for c in doc["checks"])
    assert [int(x) for x in shown.groups()] == [counts[s] for s in ("accounting", "selection", "dpgrpo", "audits")] \
        + [len(doc["checks"])]
    plots = re.search(r"`artifacts/report.md` and (\w+) plots", readme).group(1)
    assert len(list((tmp_path / "artifacts").glob("*.png"))) == ["one", "two", "three", "four"].index(plots) + 1
    (block,) = [b for b in blocks("docs/artifacts.md") if b.lang == "python"]
    assert not run_python(block, {"__name__": "__docs__"})


@pytest.mark.slow
def test_slow_power_plan_figures(tmp_path, monkeypatch):
    """docs/audits.md's power analysis: the `privcheck audit power` block and the Python plan beside it, the
    Monte Carlo columns of "The DP-GRPO planning figure" (200 simulated audits each, seed 2024), the "Planned bound
    against m" table (`plot_bound_vs_canaries`, 50 audits per point, seeds 0–5) and the seeded tiny-cpu run's
    plan in "Measured figures". The planned figures are also asserted independently in tests/audits/test_power.py."""
    from audits.dpgrpo.gradient_canary import audit_plan
    from audits.statistics.power import plan, plot_bound_vs_canaries
    from audits.statistics.score_models import DPSGDDirac

    monkeypatch.chdir(tmp_path)
    page = "docs/audits.md"
    (command,) = [c for b in blocks(page) if b.lang == "console" for c in commands(b) if "audit power" in c.text]
    check_command(command)
    (block,) = [b for b in blocks(page) if b.lang == "python" and "plan(10_000" in b.text]
    problems = run_python(block, {"__name__": "__docs__"})
    assert not problems, problems

    q, sigma, T, delta = 128 / 6988, 0.612058477104, 100, 1 / 69880
    rows = table_after(page, "| score | m | ceiling | planned (k*) | MC median [p10, p90] | P(bound = 0) |")
    assert len(rows) == 4
    for stat, m, ceiling, planned, band, zero in rows:
        r = plan(int(m.replace(",", "")), delta=delta, confidence=0.95, eps_nominal=5.0385,
                 score_model=DPSGDDirac(q, sigma, T, "llr" if stat == "LLR" else "sum"), sims=200, seed=2024,
                 noiseless_guard=False)
        shown_planned, guesses = re.fullmatch(r"\**([\d.]+)\** \((\d+)\)", planned).groups()
        median, p10, p90 = re.fullmatch(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", band).groups()
        assert _shows(ceiling, r.eps_ceiling) and _shows(shown_planned, r.planned_eps_lower), (stat, m)
        assert int(guesses) == r.guesses and _shows(zero, r.prob_zero), (stat, m)
        assert _shows(median, r.mc_median) and _shows(p10, r.mc_p10) and _shows(p90, r.mc_p90), (stat, m, r)

    m_row, ceilings, planned = table_after(page, "Planned bound against m (LLR, 50 simulated audits", header=True)
    ms = [int(x.replace(",", "")) for x in m_row[1:]]
    curve = plot_bound_vs_canaries(DPSGDDirac(q, sigma, T, "llr"), ms, delta=delta, eps_nominal=5.03849813457551,
                                   sims=50, seed=0, noiseless_guard=False)
    for shown, computed in ((ceilings[1:], curve.eps_ceiling), (planned[1:], curve.planned_eps_lower)):
        assert all(_shows(v, c) for v, c in zip(shown, computed, strict=True)), (shown, computed)

    p = audit_plan(n_real=100, m=1000, q=0.5, T=30, target_epsilon=8.0, C=1.0)
    r = plan(1000, delta=p.delta, confidence=0.95, eps_nominal=p.epsilon().value,
             score_model=DPSGDDirac(p.sampling_rate, p.noise_multiplier, p.steps, "llr", 0.0), sims=200, seed=1)
    row = next(r for r in table_after(page, "| run | m | certified ε (PLD) |") if r[0] == "seeded, `--seed 1`")
    median, p10, p90 = re.fullmatch(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", row[5]).groups()
    assert _shows(row[4], r.planned_eps_lower) and _shows(median, r.mc_median), (row, r)
    assert _shows(p10, r.mc_p10) and _shows(p90, r.mc_p90), (row, r)


@pytest.mark.slow
def test_slow_constant_reward_figures(tmp_path, monkeypatch):
    """docs/audits.md: the constant-reward fraction of 200 binary canary prompts on the pretrained tiny-cpu policy
    (the block prints it, the prose quotes it), and the base-policy table with and without the binary-choice
    phase (≈ 10 s)."""
    import contextlib
    import io

    monkeypatch.chdir(tmp_path)
    page = "docs/audits.md"
    text = (REPO / page).read_text(encoding="utf-8")
    fraction_key = "resolve_preset(\"tiny-cpu\").build_policy(0)\nrng"
    (fraction_block,) = [b for b in blocks(page) if b.lang == "python" and fraction_key in b.text]
    problems = run_python(fraction_block, {"__name__": "__docs__"})             # its print shows `# 0.92`
    assert not problems, problems
    shown = value_comment(fraction_block.text.rstrip().rsplit("#", 1)[1])
    assert f"constant rewards in **{round(100 * float(shown))}%**" in text, shown

    (table_block,) = [b for b in blocks(page) if b.lang == "python" and "BinaryPretraining()" in b.text]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert not run_python(table_block, {"__name__": "__docs__"})
    printed = [re.findall(r"[\d.]+(?:e-?\d+)?", line) for line in buf.getvalue().splitlines()]
    rows = table_after(page, "| base policy | constant-reward groups | P(`0`⏎), P(`1`⏎) |")
    assert len(rows) == len(printed) == 2
    for (_, const, options), numbers in zip(rows, printed):
        shown = [const, *options.split(", ")]
        assert all(_shows(s, float(p)) for s, p in zip(shown, numbers, strict=True)), (shown, numbers)


@pytest.mark.slow
def test_slow_dpgrpo_audit_figures(tmp_path):
    """docs/audits.md, "Measured figures" of the Dirac-canary audit: `privcheck audit dp-grpo --preset tiny-cpu
    --canaries 1000 --seed 1` (≈ 1 min) against the seeded row and the paragraph above the table, the release row's
    figures that do not depend on the run's randomness, and the test row (tests/audits/test_dpgrpo_canary.py's
    configuration, ≈ 15 s)."""
    import torch

    from audits.dpgrpo import gradient_canary as dc
    from tests.audits.test_dpgrpo_canary import N_REAL, SEED, M, Q, T, light_preset

    page = "docs/audits.md"
    doc = _json_out(["audit", "dp-grpo", "--preset", "tiny-cpu", "--canaries", "1000", "--out",
                     str(tmp_path / "audit"), "--seed", "1", "--json"])
    rows = {r[0]: r for r in table_after(page, "| run | m | certified ε (PLD) |")}
    seeded, release, test_row = rows["seeded, `--seed 1`"], rows["OS entropy (release)"], rows[next(
        k for k in rows if k.startswith("test"))]
    median, p10, p90 = re.fullmatch(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", seeded[5]).groups()
    correct, guesses = seeded[7].split(" / ")
    power, result = doc["power"], doc["result"]
    for shown, value in ((seeded[2], doc["claim"]["epsilon"]), (seeded[3], power["eps_ceiling"]),
                         (seeded[4], power["planned_eps_lower"]), (median, power["mc_median"]), (p10, power["mc_p10"]),
                         (p90, power["mc_p90"]), (seeded[6].strip("*"), result["eps_lower"]),
                         (release[2], doc["claim"]["epsilon"]), (release[3], power["eps_ceiling"])):
        assert _shows(shown, value), (shown, value)
    assert (int(correct), int(guesses)) == (result["correct"], result["guesses"])
    # the f-DP column: the seeded run's second bound, and the release row's recomputed from its shown counts
    from audits.statistics.fdp_claim import claim_eps_lower
    from tests.audits.fdp_block import block_event

    assert _shows(seeded[8], result["fdp_claim_curve"]["eps_lower"]), (seeded[8], result["fdp_claim_curve"])
    rel_correct, rel_guesses = (int(x) for x in release[7].split(" / "))
    rel_fdp = claim_eps_lower(doc["canaries"]["m_test"], rel_guesses, rel_correct, block_event(doc),
                              doc["claim"]["delta"], result["significance"])
    assert _shows(release[8], rel_fdp["eps_lower"]), (release[8], rel_fdp)
    text = (REPO / page).read_text(encoding="utf-8")
    sigma, k_star, k_plus, k_minus = re.search(r"the calibrated σ = ([\d.]+)\. The plan chose k\* = (\d+) guesses\n?"
                                               r"\(k₊ = (\d+), k₋ = (\d+)\)", text).groups()
    params = doc["claim"]["mechanism"]["params"]
    assert _shows(sigma, params["sigma"], FFT_REL), params
    assert (int(k_star), int(k_plus), int(k_minus)) == (result["guesses"], doc["guessing"]["k_plus"],
                                                         doc["guessing"]["k_minus"])
    auroc = re.search(r"separate \(AUROC ([\d.]+) in the seeded run\)", text).group(1)
    assert _shows(auroc, doc["diagnostics"]["auroc"])

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = dc.run_gradient_canary_audit(preset=light_preset(), canaries=M, out_dir=tmp_path / "test", seed=SEED,
                                           rounds=T, q=Q, n_real=N_REAL, plan_sims=50)
    finally:
        torch.set_num_threads(threads)
    rep = res.report
    config = re.search(r"n = (\d+), T = (\d+), δ = 1/(\d+), σ = ([\d.]+)", test_row[0]).groups()
    assert [int(x) for x in (*config[:3], test_row[1])] == [N_REAL, T, round(1 / rep.claim["delta"]), M]
    assert _shows(config[3], rep.claim["mechanism"]["params"]["sigma"], FFT_REL)
    correct, guesses = test_row[7].split(" / ")
    for shown, value in ((test_row[2], rep.claim["epsilon"]), (test_row[3], rep.power["eps_ceiling"]),
                         (test_row[4], rep.power["planned_eps_lower"]), (test_row[6].strip("*"), res.eps_lower)):
        assert _shows(shown, value), (shown, value)
    assert (int(correct), int(guesses)) == (rep.result["correct"], rep.result["guesses"])
    assert _shows(test_row[8], rep.result["fdp_claim_curve"]["eps_lower"]), (test_row[8], rep.result)


@pytest.mark.slow
def test_slow_dpgrpo_seed_figures(tmp_path):
    """docs/dpgrpo.md, "Measured results (tiny-cpu, 3 seeds)", its preset σ and README's seed gains: the command the
    section shows (≈ 2 min on 2 cores). Seeded training is reproducible on one machine; float32 kernels differ
    between CPUs, so the accuracies of another machine can differ (the page says so)."""
    import json

    code, _, err = run_command(["run", "dp-grpo", "--preset", "tiny-cpu", "--out", str(tmp_path / "run"), "--seeds",
                                "0", "1", "2", "--skip-verification"])
    assert code == 0, err
    compare = json.loads((tmp_path / "run" / "compare.json").read_text(encoding="utf-8"))
    acc = compare["accuracy"]
    rows = table_after("docs/dpgrpo.md", "| seed | DP-GRPO before → after | zero-advantage after | DP-GRPO − control |")
    gains = []
    for seed, before_after, control, gain in rows:
        before, after = before_after.split(" → ")
        dp, zero = acc["dp_grpo"][f"seed{seed}"], acc["zero_advantage"][f"seed{seed}"]
        difference = dp["after"] - zero["after"]
        assert _shows(before, dp["before"]) and _shows(after, dp["after"]) and _shows(control, zero["after"]), seed
        assert _shows(gain.lstrip("+"), difference), (seed, difference)
        gains.append(difference)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"in every seed \(\+([\d.]+), \+([\d.]+), \+([\d.]+)\)", readme).groups()
    assert all(_shows(s, g) for s, g in zip(shown, gains, strict=True)), gains
    run = json.loads((tmp_path / "run" / "run-dp_grpo-seed0.json").read_text(encoding="utf-8"))
    text = (REPO / "docs/dpgrpo.md").read_text(encoding="utf-8")
    eps = re.search(r"ε = ([\d.]+) \(PLD, δ = 1e-3\) for both arms", text).group(1)
    assert _shows(eps, run["privacy"]["epsilon"], FFT_REL), run["privacy"]["epsilon"]
    sigma = re.search(r"\| T, σ, δ, ε \| 30, ([\d.]+) \(calibrated\)", text).group(1)     # the presets table
    assert _shows(sigma, run["privacy"]["sigma"], FFT_REL), run["privacy"]["sigma"]


@pytest.mark.slow
def test_slow_input_canary_figures():
    """docs/audits.md, the input-space canary table (seeds 1–3; `run_input_canary_audit` as its "Reproduce" block
    calls it, ≈ 30 s each) and the training diagnostic quoted above it."""
    import torch

    from audits.dpgrpo.input_canary import run_input_canary_audit

    rows = table_after("docs/audits.md", "| seed | ceiling | planned (pilot) | guesses k* | correct | ε_lower |")
    assert [r[0] for r in rows] == ["1", "2", "3"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for seed, ceiling, planned, guesses, correct, eps_lower, auroc, constant in rows:
            r = run_input_canary_audit(canaries=200, rounds=10, q=0.5, n_real=4, seed=int(seed))
            rep = r.report
            assert _shows(ceiling, rep.power["eps_ceiling"]) and _shows(planned, rep.power["planned_eps_lower"]), seed
            assert (int(guesses), int(correct)) == (rep.result["guesses"], rep.result["correct"]), seed
            assert _shows(eps_lower, r.eps_lower) and _shows(auroc, rep.diagnostics["auroc"]), seed
            assert _shows(constant, rep.diagnostics["constant_reward_canary_groups_frac"]), seed
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_slow_certified_peer_figures():
    """docs/accounting.md: the certified enclosure at the fixed lattice 1e-4 and Opacus's PRV accountant (FFT_REL)
    of "Certified figures beside the peers", the σ calibrations of its "Speed" list, and the σ = 1.144 example of
    "Calibration"."""
    from opacus.accountants import PRVAccountant
    from opacus.accountants.utils import get_noise_multiplier

    from privcheck.accounting import PoissonGaussianEvent, calibrate_sigma, epsilon

    for (event, delta), (name, _, _, fixed, _, prv, _) in _peer_rows():
        rec = epsilon(event, delta, interval=1e-4)
        lower, upper = _interval(fixed)
        assert _shows(lower, rec.certified.lower) and _shows(upper, rec.certified.upper), (name, rec.certified)
        accountant = PRVAccountant()
        accountant.history = [(event.noise_multiplier, event.sampling_rate, event.steps)]
        assert _shows(prv, accountant.get_epsilon(delta), FFT_REL), name

    text = (REPO / "docs/accounting.md").read_text(encoding="utf-8")
    opacus_sigmas, our_sigmas = re.search(r"\(σ = ([\d., ]+)\); ours resolves σ .*?\(σ = ([\d., ]+)\)", text,
                                          flags=re.S).groups()
    q, T, delta = 128 / 6988, 50, 1 / 69880
    for target, theirs, ours in zip((1.0, 4.23, 8.0), opacus_sigmas.split(", "), our_sigmas.split(", "), strict=True):
        assert _shows(ours, calibrate_sigma(q, T, delta, target).value, FFT_REL), target
        assert _shows(theirs, get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q,
                                                   steps=T, accountant="prv"), FFT_REL), target
    rounded, overshoot, calibrated, achieved = re.search(
        r"σ = ([\d.]+) gives ε = ([\d.]+) for q = 0.25, T = 60, δ = 1e-3, where the calibrated\s+σ = ([\d.]+) "
        r"gives ([\d.]+)\.", text).groups()
    assert _shows(overshoot, epsilon(PoissonGaussianEvent(0.25, float(rounded), 60), 1e-3).value)
    cal = calibrate_sigma(0.25, 60, 1e-3, 8.0)
    assert _shows(calibrated, cal.value, FFT_REL) and _shows(achieved, cal.epsilon, FFT_REL)


def _markdown_rows(lines) -> dict[str, list[str]]:
    """Markdown table lines (as a tool prints them) by their first cell, backticks removed."""
    rows = [line.strip().strip("|").split(" | ") for line in lines if line.startswith("| ")]
    return {cells[0].strip().replace("`", ""): [c.strip() for c in cells] for cells in rows[1:]}


@pytest.mark.slow
def test_slow_selection_zoo_audit_figures():
    """docs/audits.md, "Bug zoo: caught by a check, an audit, or both": `python -m tests.bug_zoo.test_selection_audits`
    (≈ 4 s)."""
    from tests.bug_zoo.test_selection_audits import zoo_table

    printed = _markdown_rows(zoo_table().splitlines())
    rows = table_after("docs/audits.md", "| variant | caught by check | caught by audit | ε claimed | ε_lower (broken)")
    assert len(rows) == len(printed)
    for variant, _, caught, claimed, broken, reference in rows:
        row = printed[variant.replace("`", "")]
        assert re.split(r" \(| for ", caught)[0] == row[3], (variant, row[3])
        for shown, value in ((claimed, row[6]), (broken, row[7]), (reference, row[8])):
            assert shown == "—" and value == "—" or same(shown, value), (variant, shown, value)


@pytest.mark.slow
def test_slow_dpgrpo_zoo_audit_figures():
    """docs/audits.md, "What the audit catches in the bug zoo": `python -m tests.bug_zoo.test_dpgrpo_audits 6`
    (seeds 1000–1005, ≈ 4 min on one core)."""
    from tests.bug_zoo.test_dpgrpo_audits import measure

    printed = _markdown_rows(measure(range(6)))
    rows = table_after("docs/audits.md", "| variant | defect | caught by check | caught by audit | ε claimed |")
    measured = [r for r in rows if r[4] != "—"]
    assert len(measured) == len(printed)
    for variant, _, _, _, claimed, planned, bounds, rejected in measured:
        row = printed[variant.replace("`", "")]
        for shown, value in ((claimed, row[1]), (planned, row[2]), (bounds, row[3]), (rejected, row[4])):
            assert same(shown, value), (variant, shown, value)


@pytest.mark.slow
def test_slow_sampling_schemes_table():
    """docs/accounting.md, "Sampling schemes": every figure of the table of peers' figures on the same inputs (our
    certified ends from `epsilon`; dp-accounting's RDP and PLD, Opacus's RDP and PRV recomputed here; the float
    PLD figures within FFT_REL)."""
    import math

    import dp_accounting as dpa
    from opacus.accountants import PRVAccountant, RDPAccountant

    from privcheck.accounting import (
        BallsInBinsGaussianEvent,
        FixedSizeGaussianEvent,
        PoissonGaussianEvent,
        ShuffledGaussianEvent,
        TruncatedPoissonGaussianEvent,
        epsilon,
    )

    n, b, sigma, delta, steps = 60000, 600, 1.0, 1e-5, 1000
    q = b / n

    def ours(event):
        rec = epsilon(event, delta)
        return rec, rec.certified

    def rdp(event, relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE):
        acc = dpa.rdp.RdpAccountant(neighboring_relation=relation)
        acc.compose(event)
        return acc.get_epsilon(delta)

    opacus_rdp, opacus_prv = RDPAccountant(), PRVAccountant()
    opacus_rdp.history = opacus_prv.history = [(sigma, q, steps)]
    opacus = (opacus_rdp.get_epsilon(delta), 0.0)
    poisson = PoissonGaussianEvent(q, sigma, steps)
    pld = dpa.pld.PLDAccountant()
    pld.compose(poisson.to_dp_event())
    truncated_pld = dpa.pld.PLDAccountant()
    truncated_pld.compose(dpa.TruncatedSubsampledGaussianDpEvent(dataset_size=n, sampling_probability=q,
                                                                 truncated_batch_size=700, noise_multiplier=sigma),
                          steps)
    _, add_remove = ours(poisson)
    _, replace = ours(PoissonGaussianEvent(q, sigma, steps, "replace_one"))
    fixed = FixedSizeGaussianEvent(n, b, sigma, steps)
    _, fixed_c = ours(fixed)
    naive = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(sigma)), steps)
    _, with_r = ours(FixedSizeGaussianEvent(n, b, sigma, steps, replacement=True))
    shuffle_rec, shuffle_c = ours(ShuffledGaussianEvent(n, b, sigma, 10))
    bib_rec, bib_c = ours(BallsInBinsGaussianEvent(100, sigma, 10))
    truncated_rec = epsilon(TruncatedPoissonGaussianEvent(n, q, 700, sigma, steps), delta)
    assert math.isinf(truncated_rec.value) and truncated_rec.reason
    expected = {
        "poisson": [(add_remove.lower, 0), (add_remove.upper, 0), (replace.lower, 0), (replace.upper, 0),
                    (pld.get_epsilon(delta), FFT_REL), (rdp(poisson.to_dp_event()), 0), opacus,
                    (opacus_prv.get_epsilon(delta), FFT_REL)],
        "fixed-size": [(fixed_c.lower, 0), (fixed_c.upper, 0),
                       (rdp(fixed.to_dp_event(), dpa.NeighboringRelation.REPLACE_ONE), 0),
                       (rdp(naive, dpa.NeighboringRelation.REPLACE_ONE), 0), opacus],
        "fixed-size-replacement": [(with_r.lower, 0), opacus],
        "shuffle": [(shuffle_c.lower, 0), (shuffle_rec.details["lower_replace_one"], 0), opacus],
        "balls-in-bins": [(bib_c.lower, 0), (bib_rec.details["lower_replace_one"], 0), opacus],
        "truncated-poisson": [(truncated_rec.certified.lower, 0), (truncated_pld.get_epsilon(delta), FFT_REL),
                              opacus],
    }
    rows = table_after("docs/accounting.md", "| scheme | privcheck (certified) |", header=True)[1:]
    assert [r[0] for r in rows] == list(expected)
    for cells in rows:
        text = " | ".join(cells[1:]).replace("arXiv 2508.15089", "")
        shown = re.findall(r"\d+\.\d+", text)
        assert len(shown) == len(expected[cells[0]]), (cells[0], shown)
        for figure, (value, rel) in zip(shown, expected[cells[0]]):
            assert _shows(figure, value, rel), (cells[0], figure, value)
