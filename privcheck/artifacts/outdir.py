"""Output directories, claimed before any work: checked, then locked against a second writer.

* `check_output_directory(out)` — the directory a command will write, refused before any work when it cannot be
  written: an empty path, a path whose nearest existing part is a file, or a place where a probe file cannot be
  created (read-only, no permission). The probe creates and removes one temporary file, because permission bits
  say nothing for root or on read-only mounts.
* `claim_output_directory(out)` — the check, then an exclusive lock held for the `with` block: the lock file
  `LOCK_NAME` inside the directory, locked with `fcntl.flock`. A second writer of the same directory gets
  `OutputBusy` (naming the directory and the holder's pid) at once, before any work. A directory the claim created
  is removed again when the block leaves it empty (a rejected or failed run leaves nothing behind); the lock file is
  removed while the lock is still held, and a waiting claimant that finds the file replaced starts over.

Artifacts are still written by `ArtifactDirectory` (privcheck/artifacts/writer.py) inside the claimed block.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path

from privcheck.errors import InvalidParameter, PrivcheckError

__all__ = ["LOCK_NAME", "OutputBusy", "check_output_directory", "claim_output_directory"]

LOCK_NAME = ".privcheck.lock"


class OutputBusy(PrivcheckError):
    """Another process holds the output directory's lock."""


def _as_path(out, name: str) -> Path:
    if isinstance(out, os.PathLike):
        out = os.fspath(out)
    if not isinstance(out, str) or not out.strip() or "\0" in out:
        raise InvalidParameter(name, out, "a non-empty directory path")
    return Path(out)


def _probe(directory: Path, name: str, shown: str) -> None:
    """Create and remove one temporary file in `directory` (InvalidParameter when that fails)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".privcheck-probe.", dir=directory)
    except OSError as exc:
        raise InvalidParameter(name, shown, f"a writable directory ({directory}: {exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


def check_output_directory(out, name: str = "out") -> Path:
    """`out` as a Path, once it is known that the directory exists or can be created and that files can be written
    there and beside it (artifacts are staged next to the directory and moved in). Nothing is left behind."""
    path = _as_path(out, name)
    shown = os.fspath(out)
    anchor = path.absolute()
    if anchor.exists() and not anchor.is_dir():
        raise InvalidParameter(name, shown, "a directory (a file exists at this path)")
    existing = anchor if anchor.is_dir() else anchor.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InvalidParameter(name, shown, f"a directory path ({existing} is a file)")
    if anchor.is_dir():
        _probe(anchor, name, shown)
        if anchor.parent != anchor:
            _probe(anchor.parent, name, shown)     # the staging directory lives beside the target
    else:
        _probe(existing, name, shown)
    return path


def _make_dirs(path: Path) -> list[Path]:
    """Create `path` and its missing parents; returns the directories created, outermost first."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    created = []
    for directory in reversed(missing):
        directory.mkdir(mode=0o755)
        created.append(directory)
    return created


def _holder(lock: Path) -> str:
    try:
        pid = lock.read_text(encoding="ascii").strip()
    except OSError:
        return "another process"
    return f"process {pid}" if pid.isdigit() else "another process"


@contextlib.contextmanager
def claim_output_directory(out, name: str = "out"):
    """Check `out`, create it if missing, and hold its lock for the block; yields the directory's Path.

    Raises InvalidParameter (a path that cannot be written) or OutputBusy (another writer holds the lock) before
    the block runs."""
    path = check_output_directory(out, name)
    anchor = path.absolute()
    created = _make_dirs(anchor)
    lock = anchor / LOCK_NAME
    fd = None
    try:
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                fd = None
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputBusy(f"invalid {name}={os.fspath(out)!r}: {_holder(lock)} is writing this "
                                     f"directory (lock {lock}); wait for it or choose another directory") from None
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)                     # the holder removed or replaced the file before we locked it
            fd = None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode("ascii"))
        yield path
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(lock)
            os.close(fd)
        for directory in reversed(created):
            try:
                directory.rmdir()            # only when the block left it empty
            except OSError:
                break
