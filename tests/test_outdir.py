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


# ------------------------------------------------------------------------------------------ leftovers, busy, SIGTERM

def _spawn(code: str, *args) -> subprocess.Popen:
    """A Python process running `code`, once it has printed "ready" (it then waits to be killed)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "ready", line
    return proc


KILLED_IN_COMMIT = """
import sys, time
import privcheck.artifacts.writer as writer
from privcheck.artifacts import ArtifactDirectory, write_atomic

def stop(directory):                      # every file moved, the backup directory not yet removed
    print("ready", flush=True)
    time.sleep(600)

writer._fsync_dir = stop
with ArtifactDirectory(sys.argv[1]) as staging:
    staging.write_bytes("plot.png", b"new")
"""

KILLED_IN_BLOCK = """
import sys, time
from privcheck.artifacts import ArtifactDirectory

with ArtifactDirectory(sys.argv[1]) as staging:
    staging.mkdir("private", mode=0o700)
    staging.write_bytes("private/auditor_log.jsonl", b"{}\\n", mode=0o600)   # an audit's log, mid-run
    print("ready", flush=True)
    time.sleep(600)
"""

KILLED_IN_WRITE_ATOMIC = """
import os, sys, time
from privcheck.artifacts import write_atomic

def stop(fd):
    print("ready", flush=True)
    time.sleep(600)

os.fsync = stop
write_atomic(sys.argv[1] + "/a.json", b"{}")
"""


def _killed(code, out) -> set[str]:
    """Run `code` on `out` until it is ready, SIGKILL it; returns the names of the temporary entries in `out`."""
    import signal

    proc = _spawn(code, out)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    return {p.name for p in out.iterdir() if p.name.startswith(".privcheck-")}


def test_leftovers_of_a_killed_writer_are_removed_by_the_next_writer(tmp_path):
    import os

    out = tmp_path / "out"
    out.mkdir()
    (out / "plot.png").write_bytes(b"old")
    first = _killed(KILLED_IN_COMMIT, out)             # killed between the moves and the backup's removal
    assert sorted(name.split(".")[1] for name in first) == ["privcheck-backup", "privcheck-staging"], first
    assert (out / "plot.png").read_bytes() == b"new"
    second = _killed(KILLED_IN_BLOCK, out)             # the next writer removed those; it leaves its own staging
    assert not second & first and len(second) == 1
    assert (out / second.pop() / "private" / "auditor_log.jsonl").exists()
    third = _killed(KILLED_IN_WRITE_ATOMIC, out)       # write_atomic alone takes no lock: the staging stays
    tmp = [name for name in third if name.startswith(".privcheck-tmp.")]
    assert len(third) == 2 and len(tmp) == 1, third
    alive = out / f".privcheck-tmp.{os.getpid()}.keepme"            # a live process's temporary file: kept
    alive.write_bytes(b"")
    foreign = [out / ".privcheck-tmp.notapid.x", out / ".plot.png.tmp", out / "x.staging"]   # not our names: kept
    for path in foreign:
        path.write_bytes(b"")
    with claim_output_directory(out) as path:
        remaining = sorted(p.name for p in path.iterdir())
    assert remaining == sorted([LOCK_NAME, alive.name, "plot.png"] + [p.name for p in foreign])


def test_a_second_writer_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from privcheck.cli import main

    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"tiny": "tests.test_outdir:_no_work_suite"})
    out = tmp_path / "out"
    holder = _spawn("import sys, time\nfrom privcheck.artifacts import claim_output_directory\n"
                    "with claim_output_directory(sys.argv[1]):\n    print('ready', flush=True)\n    time.sleep(600)\n",
                    out)
    try:
        assert main(["verify", "--out", str(out), "--suite", "tiny"]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"process {holder.pid} is writing this directory" in err
    finally:
        holder.kill()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]    # the killed holder's lock file (unlocked)
    assert main(["verify", "--out", "", "--suite", "tiny"]) == 2
    assert "invalid out=''" in capsys.readouterr().err


def _no_work_suite(seed=None):
    raise AssertionError("a suite ran although the directory was busy")


def test_writers_inside_a_claim_share_it_and_a_lone_writer_claims(tmp_path):
    from privcheck.artifacts import ArtifactDirectory, write_artifact  # noqa: F401  (the writers under test)
    from privcheck.artifacts.outdir import hold_output_directory

    out = tmp_path / "out"
    with claim_output_directory(out):
        with ArtifactDirectory(out) as staging:                     # the command's claim: no second lock
            staging.write_bytes("a.txt", b"a")
        with hold_output_directory(out):
            pass
        assert (out / LOCK_NAME).exists()
    assert not (out / LOCK_NAME).exists()
    with ArtifactDirectory(out) as staging:                          # alone: it claims the directory itself
        assert (out / LOCK_NAME).exists()
        with pytest.raises(OutputBusy):
            with claim_output_directory(out):
                pass
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]


SIGTERMED = """
import sys, time
from privcheck.artifacts import ArtifactDirectory, terminate_as_interrupt
try:
    with terminate_as_interrupt(), ArtifactDirectory(sys.argv[1]) as staging:
        staging.write_bytes("plot.png", b"png")
        print("ready", flush=True)
        time.sleep(600)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_sigterm_unwinds_like_ctrl_c_and_cleans_up(tmp_path):
    import signal

    out = tmp_path / "new" / "out"
    proc = _spawn(SIGTERMED, out)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    proc.stdout.close()
    assert list(tmp_path.iterdir()) == []                           # staging, lock and the directories it made


def test_terminate_as_interrupt_restores_the_previous_handler():
    import os
    import signal

    from privcheck.artifacts import terminate_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)                    # the handler runs as os.kill returns
    assert signal.getsignal(signal.SIGTERM) is before
