"""The largest legal scores file is read in bounded memory (docs/artifacts.md, "Inputs"): a 10⁷-row .npz audited by
`privcheck audit one-run` peaks below the stated 2 GiB of resident memory (measured 1.7 GB on the reference machine:
the ids are checked as Python objects, about 170 bytes a row). Slow tier: writing and auditing the file take ~40 s."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from audits.scores_file import write_scores_file

ROWS = 10**7
PEAK_BOUND_KIB = 2 << 20            # 2 GiB, the bound docs/artifacts.md states


@pytest.mark.slow
def test_a_ten_million_row_scores_file_is_audited_within_the_stated_memory(tmp_path):
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2, ROWS)
    path = write_scores_file(tmp_path / "big.npz", rng.normal(size=ROWS) + 0.01 * bits, bits,
                             canary_ids=np.arange(ROWS).tolist(), salt=bytes(range(32)))
    del bits
    code = ("import json, resource; from privcheck.cli import main\n"
            f"status = main(['audit', 'one-run', '--delta', '1e-5', '--k-plus', '100', '--json', '--scores', "
            f"{str(path)!r}])\n"
            "print(json.dumps([status, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))")

    def limit():       # a runaway read fails here instead of taking the machine
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=limit)
    assert done.returncode == 0, done.stderr[-2000:]
    status, peak_kib = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0
    assert peak_kib < PEAK_BOUND_KIB, f"peak RSS {peak_kib >> 10} MiB"
