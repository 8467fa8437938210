"""Throughput benchmark of the selection mechanisms (no privacy claim: seeded randomness, accounting off).

Usage:  .venv/bin/python -m mechanisms.selection.bench [--prompts 1000] [--n 4096] [--repeats 7]

Reports, on uniform scores in [0, 1]:
* PrivBoN (Gumbel and softmax samplers, including clipping checks and the cached accounting record)
  against the bare `np.argmax(scores + rng.gumbel(scale=σ, size=...), axis=1)` on the same array;
* PrivITP (`select(..., account=False)`: Phase 1 solver + noise, c per prompt, Phase 2) in Phase-2
  candidates per second (prompts·n / time; both phases together score twice as many), for a typical
  configuration and for the worst case where no candidate is ever accepted (every round drawn);
* the per-prompt cost of the ex-post accounting (`PrivITP.account`), for reference.
Timings are the minimum over `repeats` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from privcheck.accounting.selection import PrivITPParams

from mechanisms.selection.privbon import PrivBoN
from mechanisms.selection.privitp import PrivITP
from mechanisms.selection.randomness import make_rng


def _best(f, repeats: int) -> float:
    f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(prompts: int = 1000, n: int = 4096, repeats: int = 7, seed: int = 0) -> dict:
    rand = make_rng(seed)
    gen = rand.generator
    scores = gen.random((prompts, n))
    phase2 = gen.random((prompts, n))
    sigma = 0.2
    bon = PrivBoN(sensitivity=0.01, sigma=sigma, r_max=1.0)
    bon_soft = PrivBoN(sensitivity=0.01, sigma=sigma, r_max=1.0, sampler="softmax")
    bare = _best(lambda: np.argmax(scores + gen.gumbel(scale=sigma, size=scores.shape), axis=1), repeats)
    gumbel = _best(lambda: bon.select(scores, rand), repeats)
    softmax = _best(lambda: bon_soft.select(scores, rand), repeats)
    params = PrivITPParams(candidates=n, beta=0.05, sigma_x=sigma / 2, sigma_z=sigma / 2, headroom=0.5,
                           sensitivity=0.01, delta=1e-5)
    itp = PrivITP(params)
    typical = _best(lambda: itp.select(scores, phase2, rand, account=False), repeats)
    # Worst case: Phase-2 scores at r_lo while λ̃ is near r_max, so (almost) every round is drawn.
    high = 1.0 - 0.01 * gen.random((prompts, n))
    low = np.zeros((prompts, n))
    worst_params = PrivITPParams(candidates=n, beta=0.05, sigma_x=1e-3, sigma_z=1e-3, headroom=0.5,
                                 sensitivity=0.001, delta=1e-5)
    worst_itp = PrivITP(worst_params)
    worst = _best(lambda: worst_itp.select(high, low, rand, account=False), repeats)
    res = itp.select(scores, phase2, rand, account=False)
    k = min(prompts, 200)
    t0 = time.perf_counter()
    itp.account(res.lambda_tilde[:k], res.halting_times[:k])
    per_record = (time.perf_counter() - t0) / k
    cands = prompts * n
    return {
        "prompts": prompts, "n": n, "repeats": repeats,
        "privbon": {"bare_numpy_s": bare, "gumbel_s": gumbel, "softmax_s": softmax,
                    "gumbel_over_bare": gumbel / bare, "softmax_over_bare": softmax / bare},
        "privitp": {"typical_s": typical, "typical_candidates_per_s": cands / typical,
                    "typical_mean_halting_time": float(res.halting_times[res.accepted].mean()),
                    "worst_case_s": worst, "worst_case_candidates_per_s": cands / worst,
                    "accounting_s_per_prompt": per_record},
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(json.dumps(run(args.prompts, args.n, args.repeats, args.seed), indent=2))


if __name__ == "__main__":
    main()
