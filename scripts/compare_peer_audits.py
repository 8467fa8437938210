#!/usr/bin/env python3
"""privcheck's one-run audit beside jax_privacy's CanaryScoreAuditor and ML Privacy Meter's one-run audit, on the
same score files (docs/audits.md, "Soundness on null scores").

Usage:
  python scripts/compare_peer_audits.py                 # privcheck only (peer columns: "not installed")
  python scripts/compare_peer_audits.py --install       # first pip-installs the peers, then runs all three
  python scripts/compare_peer_audits.py --trials 1000 --out peer_scores --json peers.json

What it does: writes privcheck scores files (`audits.scores_file`, .npz with the membership commitment) for a few
settings, m canaries each (default 200) with i.i.d. Bern(½) coins and scores N(μ·[in], 1): the null setting μ = 0
(no membership signal, true ε = 0) and signal settings μ = 1, 2, 4. Every tool reads the same file (`load_scores`,
which verifies the commitment) and reports its ε lower bound at 95% confidence, δ = 1e-5:

* privcheck: `audits.statistics.one_run.from_scores` with Bonferroni (4 declared pairs) and Split(0.5);
* jax_privacy: `CanaryScoreAuditor(in, out).epsilon_one_run(significance, delta, threshold_strategy=...)` with its
  Bonferroni() and Split() strategies, and `epsilon_one_run_fdp` (Gaussian f-DP, Bonferroni);
* ML Privacy Meter: `compute_abstain_attack_results(scores, membership, delta, p_value)` of its `audit.py` (the
  "Best One Run DP Auditing" of its report), which chooses (k₋, k₊) on the labels it then tests with.

The figure of each signal setting is the median ε over `--figure-trials` files; the null false-positive rate is
the fraction of `--trials` null files with ε > 0, with its exact binomial tail P[Bin(n, 0.05) ≥ count].

`--install` runs `pip install jax-privacy` in this interpreter (use a separate virtual environment with privcheck's
dependencies: jax is large) and clones ML Privacy Meter (https://github.com/privacytrustlab/ml_privacy_meter) into
`--peer-dir` (the `privacy-meter` package on PyPI, 1.0.1, predates its one-run audit); `--privacy-meter-repo`
points at an existing checkout instead.
Without `--install` the peers are used only if already importable. Nothing here runs in the test suite except
`--help` and the privcheck side (tests/audits/test_type_one_error.py); the tests never use the network.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFIDENCE = 0.95
DELTA = 1e-5
SIGNALS = (1.0, 2.0, 4.0)
MLPM_REPO = "https://github.com/privacytrustlab/ml_privacy_meter"
NOT_INSTALLED = "not installed"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--install", action="store_true",
                    help="pip-install jax-privacy and clone ML Privacy Meter before running (network)")
    ap.add_argument("--peer-dir", default=str(Path(tempfile.gettempdir()) / "privcheck_peers"),
                    help="where --install clones ML Privacy Meter (default: %(default)s)")
    ap.add_argument("--privacy-meter-repo", default=None,
                    help="a checkout of ML Privacy Meter (default: PEER_DIR/ml_privacy_meter)")
    ap.add_argument("--m", type=int, default=200, help="canaries per score file (default: %(default)s)")
    ap.add_argument("--trials", type=int, default=200, help="null score files (default: %(default)s)")
    ap.add_argument("--mlpm-trials", type=int, default=50,
                    help="null files given to ML Privacy Meter, the first of --trials (its audit takes ~4 s per "
                         "file at m = 200; default: %(default)s)")
    ap.add_argument("--figure-trials", type=int, default=5,
                    help="score files per signal setting (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=2024, help="seed of every score file (default: %(default)s)")
    ap.add_argument("--out", default=None, help="keep the score files in this folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write the table as JSON to this path")
    ap.add_argument("--privcheck-only", action="store_true", help="skip the peers even when they are importable")
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------------------
# Score files.

def write_file(folder: Path, name: str, m: int, mu: float, seed) -> Path:
    from audits.scores_file import write_scores_file
    rng = np.random.default_rng(seed)
    member = (rng.random(m) < 0.5).astype(np.int8)
    if member.min() == member.max():
        member[0] = 1 - member[0]
    scores = rng.normal(size=m) + mu * member
    return write_scores_file(folder / f"{name}.npz", scores, member, canary_ids=list(range(m)),
                             salt=rng.bytes(32), canary_type="synthetic", score=f"N({mu}*in, 1)")


def read_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(scores, member 0/1) of a scores file, its commitment verified."""
    from audits.scores_file import load_scores
    loaded = load_scores(path)
    return np.asarray(loaded.scores, dtype=float), np.asarray(loaded.member, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------------
# The auditors: each maps (scores, member) to ε_lower.

def privcheck_auditors(m: int) -> dict:
    from audits.statistics import one_run
    from audits.statistics import strategies as st
    family = st.Bonferroni([(k, 0) for k in (m // 100, m // 20, m // 10)] + [(m // 4, m // 4)])

    def run(strategy):
        return lambda s, b: one_run.from_scores(s, b, delta=DELTA, confidence=CONFIDENCE,
                                                strategy=strategy).result["eps_lower"]

    return {"privcheck one_run, Bonferroni (4 pairs)": run(family),
            "privcheck one_run, Split(0.5)": run(st.Split(0.5, seed=0))}


def jax_privacy_auditors() -> dict | str:
    try:
        aud = importlib.import_module("jax_privacy.auditing")
    except Exception as err:                                   # noqa: BLE001 - any import failure means "absent"
        return f"{NOT_INSTALLED} ({type(err).__name__})"
    p = 1.0 - CONFIDENCE

    def run(method, strategy):
        def go(s, b):
            auditor = aud.CanaryScoreAuditor(s[b == 1], s[b == 0])
            return float(getattr(auditor, method)(p, DELTA, threshold_strategy=strategy))
        return go

    return {"jax_privacy epsilon_one_run, Bonferroni": run("epsilon_one_run", aud.Bonferroni()),
            "jax_privacy epsilon_one_run, Split(0.5)": run("epsilon_one_run", aud.Split(0.5, seed=0)),
            "jax_privacy epsilon_one_run_fdp, Bonferroni": run("epsilon_one_run_fdp", aud.Bonferroni())}


def _privacy_meter_function(repo: Path):
    """ML Privacy Meter's `compute_abstain_attack_results` from its `audit.py`: imported when its import chain
    (torch, scikit-learn, its attacks and plotting modules) is available, else the three functions of the one-run
    audit (`compute_abstain_attack_results`, `get_eps_audit`, `p_value_DP_audit`) are taken verbatim from the file
    and run with numpy, math and scipy. Returns (function, how)."""
    import ast
    import math

    import scipy
    import scipy.stats
    sys.path.insert(0, str(repo))
    try:
        return importlib.import_module("audit").compute_abstain_attack_results, "imported audit.py"
    except Exception as err:                                   # noqa: BLE001 - fall back to the functions alone
        why = f"{type(err).__name__}: {err}"
    finally:
        sys.path.remove(str(repo))
    source = (repo / "audit.py").read_text()
    wanted = {"compute_abstain_attack_results", "get_eps_audit", "p_value_DP_audit"}
    defs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    if {n.name for n in defs} != wanted:
        raise ImportError(f"audit.py lacks {sorted(wanted - {n.name for n in defs})}")
    namespace = {"np": np, "math": math, "scipy": scipy}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(repo / "audit.py"), "exec"), namespace)  # noqa: S102
    return namespace["compute_abstain_attack_results"], f"functions from audit.py (import failed: {why})"


def privacy_meter_auditors(repo: Path) -> dict | str:
    if not (repo / "audit.py").exists():
        return f"{NOT_INSTALLED} (no {repo}/audit.py)"
    try:
        fn, how = _privacy_meter_function(repo)
    except Exception as err:                                   # noqa: BLE001
        return f"{NOT_INSTALLED} ({type(err).__name__}: {err})"
    print(f"ML Privacy Meter: {how}", file=sys.stderr)
    p = 1.0 - CONFIDENCE
    return {"ML Privacy Meter one-run (same-data k choice)":
            lambda s, b: float(fn(s, b, delta=DELTA, p_value=p)["eps_opt"])}


def _mlpm_repo(args) -> Path:
    return Path(args.privacy_meter_repo) if args.privacy_meter_repo else Path(args.peer_dir) / "ml_privacy_meter"


def install(peer_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "jax-privacy"], check=True)
    peer_dir.mkdir(parents=True, exist_ok=True)
    if not (peer_dir / "ml_privacy_meter").exists():
        subprocess.run(["git", "clone", "--depth", "1", MLPM_REPO, str(peer_dir / "ml_privacy_meter")], check=True)


# ---------------------------------------------------------------------------------------------------------------------
# The table.

def measure(args, folder: Path) -> dict:
    from scipy.stats import binom
    auditors = dict(privcheck_auditors(args.m))
    absent = {}
    if not args.privcheck_only:
        for tool, got in (("jax_privacy", jax_privacy_auditors()),
                          ("ML Privacy Meter", privacy_meter_auditors(_mlpm_repo(args)))):
            if isinstance(got, str):
                absent[tool] = got
            else:
                auditors.update(got)
    seeds = np.random.SeedSequence(args.seed)
    null_seeds, *signal_seeds = seeds.spawn(1 + len(SIGNALS))
    rows = {name: {"figures": {}, "null_positive": 0,
                   "trials": min(args.trials, args.mlpm_trials) if name.startswith("ML Privacy Meter") else args.trials}
            for name in auditors}
    for mu, seq in zip(SIGNALS, signal_seeds):
        paths = [write_file(folder, f"signal{mu:g}_{i}", args.m, mu, child) for i, child in
                 enumerate(seq.spawn(args.figure_trials))]
        for name, fn in auditors.items():
            rows[name]["figures"][f"mu={mu:g}"] = float(np.median([fn(*read_file(p)) for p in paths]))
    for i, child in enumerate(null_seeds.spawn(args.trials)):
        path = write_file(folder, f"null_{i}", args.m, 0.0, child)
        s, b = read_file(path)
        for name, fn in auditors.items():
            if i < rows[name]["trials"]:
                rows[name]["null_positive"] += fn(s, b) > 0
    for row in rows.values():
        row["null_positive"] = int(row["null_positive"])
        row["null_rate"] = row["null_positive"] / row["trials"] if row["trials"] else None
        row["binomial_tail"] = float(binom.sf(row["null_positive"] - 1, row["trials"], 1.0 - CONFIDENCE))
    return {"m": args.m, "trials": args.trials, "figure_trials": args.figure_trials, "seed": args.seed,
            "delta": DELTA, "confidence": CONFIDENCE, "rows": rows, "absent": absent}


def print_table(result: dict) -> None:
    cols = [f"mu={mu:g}" for mu in SIGNALS]
    print(f"m = {result['m']}, δ = {result['delta']}, confidence {result['confidence']}, seed {result['seed']}; "
          f"figures: median ε_lower over {result['figure_trials']} files; null: {result['trials']} files")
    print("| auditor | " + " | ".join(f"ε_lower, μ = {c[3:]}" for c in cols)
          + " | null ε > 0 | P[Bin(n, 0.05) ≥ count] |")
    print("|---" * (len(cols) + 3) + "|")
    for name, row in result["rows"].items():
        figs = " | ".join(f"{row['figures'][c]:.3f}" for c in cols)
        null = (f"{row['null_positive']}/{row['trials']} ({row['null_rate']:.3f}) | {row['binomial_tail']:.2g}"
                if row["trials"] else "not run |")
        print(f"| {name} | {figs} | {null} |")
    for tool, why in result["absent"].items():
        print(f"| {tool} | " + " | ".join("not measured" for _ in cols) + f" | not measured ({why}) | |")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.install:
        install(Path(args.peer_dir))
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        result = measure(args, folder)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = measure(args, Path(tmp))
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
