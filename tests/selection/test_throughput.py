"""Speed targets (slow: timing depends on the machine and its load; run with `make test-slow`).

* PrivBoN (Gumbel sampler, validation + clipping check + cached record included) within 1.5× of the bare
  `np.argmax(scores + rng.gumbel(scale=σ, size=...), axis=1)` on the same [1000, 4096] array;
* PrivITP (`account=False`) at ≥ 2·10⁷ Phase-2 candidates/s at n = 4096 over 1,000 prompts.
The quick test only checks that the benchmark script runs.
"""

from __future__ import annotations

import pytest

from mechanisms.selection.bench import run


def test_benchmark_script_runs_on_a_small_problem():
    out = run(prompts=20, n=64, repeats=1)
    assert out["privbon"]["gumbel_s"] > 0 and out["privitp"]["typical_candidates_per_s"] > 0


@pytest.mark.slow
def test_speed_targets():
    out = run(prompts=1000, n=4096, repeats=7)
    assert out["privbon"]["gumbel_over_bare"] <= 1.5, out
    assert out["privitp"]["typical_candidates_per_s"] >= 2e7, out
