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
  Once the lock is held, the claim removes what killed writers left in the directory (`remove_leftovers`).
* `hold_output_directory(out)` — what the artifact writer uses: nothing more when this process already holds the
  directory's lock (a command that claimed it), else a claim for the block.

Every temporary name a writer creates in a directory starts with `leftover_prefix(kind)`, i.e.
`.privcheck-<kind>.<pid>.`: the kind (a file being written, a staging or backup directory, a probe file) and the
process that made it. Such an entry is *provably ours* (the name) and *stale* when its process no longer exists;
a normal exit, an exception, Ctrl-C or SIGTERM (see `privcheck.artifacts.interrupts`) remove their own temporary
entries, so only a killed process (SIGKILL, power loss) leaves any. See docs/artifacts.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from privcheck.errors import InvalidParameter, PrivcheckError

__all__ = ["LEFTOVER_KINDS", "LOCK_NAME", "OutputBusy", "check_output_directory", "claim_output_directory",
           "hold_output_directory", "leftover_prefix", "remove_leftovers"]

LOCK_NAME = ".privcheck.lock"
LEFTOVER_KINDS = ("tmp", "staging", "backup", "probe")
_LEFTOVER = re.compile(r"^\.privcheck-(" + "|".join(LEFTOVER_KINDS) + r")\.([1-9][0-9]{0,9})\.[A-Za-z0-9_]+$")

_held: set[tuple[int, int]] = set()          # (st_dev, st_ino) of the directories this process has claimed
_held_guard = threading.Lock()


class OutputBusy(PrivcheckError):
    """Another process holds the output directory's lock."""


def leftover_prefix(kind: str) -> str:
    """The prefix of a temporary entry of `kind` made by this process (`tempfile.mk*temp(prefix=...)` appends
    a random part of letters, digits and underscores)."""
    if kind not in LEFTOVER_KINDS:
        raise InvalidParameter("kind", kind, "one of " + ", ".join(LEFTOVER_KINDS))
    return f".privcheck-{kind}.{os.getpid()}."


def _as_path(out, name: str) -> Path:
    if isinstance(out, os.PathLike):
        out = os.fspath(out)
    if not isinstance(out, str) or not out.strip() or "\0" in out:
        raise InvalidParameter(name, out, "a non-empty directory path")
    return Path(out)


def _probe(directory: Path, name: str, shown: str) -> None:
    """Create and remove one temporary file in `directory` (InvalidParameter when that fails)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=leftover_prefix("probe"), dir=directory)
    except OSError as exc:
        raise InvalidParameter(name, shown, f"a writable directory ({directory}: {exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


def check_output_directory(out, name: str = "out") -> Path:
    """`out` as a Path, once it is known that the directory exists or can be created and that files can be written
    in it (artifacts are staged inside it and moved into place). Nothing is left behind."""
    path = _as_path(out, name)
    shown = os.fspath(out)
    anchor = path.absolute()
    if anchor.exists() and not anchor.is_dir():
        raise InvalidParameter(name, shown, "a directory (a file exists at this path)")
    existing = anchor
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InvalidParameter(name, shown, f"a directory path ({existing} is a file)")
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


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (a process of another user counts; so does this one)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_leftovers(directory) -> list[Path]:
    """Remove the temporary entries of dead writers directly inside `directory` (see the module docstring); returns
    what was removed. Call it only while holding the directory's lock: a live writer that claimed the directory
    cannot then be writing there, and entries of live processes are kept in any case."""
    directory = Path(directory)
    removed = []
    try:
        with os.scandir(directory) as entries:
            stale = [e for e in entries if (m := _LEFTOVER.match(e.name)) and not _alive(int(m.group(2)))]
    except OSError:                          # a directory we may write but not list: nothing to clean up
        return removed
    for entry in stale:
        path = directory / entry.name
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:                      # gone already, or not ours to remove after all
            continue
        removed.append(path)
    return removed


def _key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def claim_output_directory(out, name: str = "out"):
    """Check `out`, create it if missing, and hold its lock for the block; yields the directory's Path.

    Raises InvalidParameter (a path that cannot be written) or OutputBusy (another writer, or another claim in this
    process, holds the lock) before the block runs. Temporary entries of killed writers are removed once the lock
    is held."""
    path = check_output_directory(out, name)
    anchor = path.absolute()
    created = _make_dirs(anchor)
    lock = anchor / LOCK_NAME
    fd = None
    key = None
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
        key = _key(anchor)
        with _held_guard:
            _held.add(key)
        remove_leftovers(anchor)
        yield path
    finally:
        if key is not None:
            with _held_guard:
                _held.discard(key)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(lock)
            os.close(fd)
        for directory in reversed(created):
            try:
                directory.rmdir()            # only when the block left it empty
            except OSError:
                break


@contextlib.contextmanager
def hold_output_directory(out, name: str = "out"):
    """Yields `out` as a Path with its lock held: the lock this process already holds (a command claimed the
    directory), or a `claim_output_directory` for the block."""
    path = _as_path(out, name)
    key = _key(path) if path.is_dir() else None
    with _held_guard:
        held = key is not None and key in _held
    if held:
        yield path
        return
    with claim_output_directory(out, name) as claimed:
        yield claimed
