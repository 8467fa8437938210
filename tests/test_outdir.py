"""privcheck.artifacts.outdir: output directories are checked and locked before any work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from privcheck.artifacts.outdir import LOCK_NAME, OutputBusy, check_output_directory, claim_output_directory
from privcheck.errors import InvalidParameter


@pytest.mark.parametrize("bad", ["", "   ", None, 3, "a\0b"])
def test_empty_or_non_path_is_refused(bad):
    with pytest.raises(InvalidParameter, match="out"):
        check_output_directory(bad)


def test_a_file_or_a_path_through_a_file_is_refused(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(InvalidParameter, match="a file exists at this path"):
        check_output_directory(f)
    with pytest.raises(InvalidParameter, match="is a file"):
        check_output_directory(f / "sub" / "dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_place_where_nothing_can_be_written_is_refused():
    with pytest.raises(InvalidParameter, match="writable directory"):
        check_output_directory("/proc/self/privcheck-out")      # procfs: no file can be created there, even as root


def test_claim_creates_locks_and_cleans_up(tmp_path):
    out = tmp_path / "a" / "b"
    with claim_output_directory(out, name="out") as path:
        assert path == out and (out / LOCK_NAME).is_file()
        code = ("from privcheck.artifacts.outdir import claim_output_directory as c\n"
                f"with c({str(out)!r}): pass\n")
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert other.returncode != 0 and "OutputBusy" in other.stderr and "is writing this directory" in other.stderr
        with pytest.raises(OutputBusy):                        # the same process, a second claim
            with claim_output_directory(out):
                pass
    assert not (tmp_path / "a").exists()                       # created by the claim, left empty: removed


def test_claim_keeps_what_the_block_wrote_and_drops_the_lock(tmp_path):
    with claim_output_directory(tmp_path / "out") as path:
        (path / "result.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["result.json"]
    with claim_output_directory(tmp_path / "out"):            # free again
        pass
