"""Output directories, claimed before any work: checked, then locked against a second writer.

* `check_output_directory(out)` — the directory a command will write, refused before any work when it cannot be
  written: an empty path, a path whose nearest existing part is a file, or a place where a probe file cannot be
  created (read-only, no permission). The probe creates and removes one temporary file inside the directory
  (creating and removing the directory when it is missing), because permission bits say nothing for root or on
  read-only mounts; nothing is created beside it.
* `claim_output_directory(out)` — the check, then an exclusive lock held for the `with` block: the lock file
  `LOCK_NAME` inside the directory, locked with `fcntl.flock`. A second writer of the same directory gets
  `OutputBusy` (naming the directory and the holder's pid) at once, before any work. A directory the claim created
  is removed again when the block leaves it empty (a rejected or failed run leaves nothing behind); the lock file is
  removed while the lock is still held, and a waiting claimant that finds the file replaced starts over.
  Once the lock is held, the claim removes what killed writers left in the directory (`remove_leftovers`).
* `hold_output_directory(out)` — what the artifact writer uses: nothing more when this process already holds the
  directory's lock (a command that claimed it), else a claim for the block.

Planted entries: before any work, `claim_output_directory` refuses (`InvalidParameter`, exit 2, one line naming the
entry and what it is) a symbolic link, FIFO, device node, socket or directory at a name privcheck writes there: the
lock, the manifest, `OWNED_FILES`, `OWNED_DIRECTORIES` (a link or non-directory) and every name the manifest lists
(a manifest listing a name outside the directory, '..' or absolute, is refused too). The lock is opened with
O_NOFOLLOW | O_NONBLOCK and must be a regular file; `refuse_planted` and `open_no_follow` are the helpers the
artifact writer uses for every other name (docs/artifacts.md, "Output directories").

Every temporary name a writer creates in a directory starts with `leftover_prefix(kind)`, i.e.
`.privcheck-<kind>.<pid>.`: the kind (a file being written, a staging or backup directory, a probe file) and the
process that made it. Such an entry is *provably ours* (the name) and *stale* when its process no longer exists;
a normal exit, an exception, Ctrl-C or SIGTERM (see `privcheck.interrupts`) remove their own temporary
entries, so only a killed process (SIGKILL, power loss) leaves any. See docs/artifacts.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path, PurePosixPath

from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.interrupts import deferred_interrupts

__all__ = ["LEFTOVER_KINDS", "LOCK_NAME", "MANIFEST_NAME", "OWNED_DIRECTORIES", "OWNED_FILES", "OutputBusy",
           "check_output_directory", "claim_output_directory", "entry_kind", "hold_output_directory",
           "leftover_prefix", "manifest_files", "open_no_follow", "read_regular", "refuse_planted",
           "remove_leftovers"]

LOCK_NAME = ".privcheck.lock"
MANIFEST_NAME = ".privcheck-manifest.json"     # {"heads": {head document: [files its output wrote]}}
# Names privcheck writes in an output directory whatever the command (checked before any work, with the names the
# manifest lists); every other name a writer uses is checked before anything is moved into place (writer.py).
OWNED_FILES = (LOCK_NAME, MANIFEST_NAME, "verification.json", "report.md", "audit.json", "compare.json",
               "selection_simulation.json", "selection_run.json")
OWNED_DIRECTORIES = ("private",)
_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
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


def entry_kind(path) -> str | None:
    """What is at `path`, not following a final symbolic link: None when nothing (or nothing can be: a parent is
    not a directory, or is a loop of symbolic links), else "a regular file", "a directory", "a symbolic link",
    "a FIFO", "a device node", "a socket"."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _planted(path: Path, kind: str, name: str, shown: str) -> InvalidParameter:
    return InvalidParameter(name, shown, f"a directory without {kind} at {path}, a name privcheck writes (it never "
                                         "follows or replaces one; remove it or choose another directory)")


def refuse_planted(directory, files=(), directories=(), name: str = "out", shown: str | None = None) -> None:
    """InvalidParameter naming the entry and what it is, when a name privcheck writes in `directory` is taken by
    anything but what privcheck writes there: a file name (relative, '/'-separated) by anything but a regular
    file, a directory name by anything but a directory, or a path through a symbolic link or a non-directory."""
    directory = Path(directory)
    shown = os.fspath(directory) if shown is None else shown
    wanted = [(f, "a regular file") for f in files] + [(d, "a directory") for d in directories]
    for rel, expected in wanted:
        parts = PurePosixPath(rel).parts
        path = directory
        for i, part in enumerate(parts):
            path = path / part
            kind = entry_kind(path)
            if kind is None:
                break
            if kind != (expected if i == len(parts) - 1 else "a directory"):
                raise _planted(path, kind, name, shown)


def open_no_follow(path, flags: int, mode: int = 0o600) -> int:
    """os.open with O_NOFOLLOW | O_NONBLOCK (a symbolic link is refused, a FIFO never blocks); the descriptor
    is closed again and OSError(ELOOP/EINVAL) raised unless it is a regular file."""
    fd = os.open(path, flags | _NO_FOLLOW, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path) -> bytes:
    """The bytes of the regular file at `path`, never following a final symbolic link or blocking on a FIFO
    (OSError otherwise)."""
    fd = open_no_follow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def manifest_files(directory, name: str = "out", shown: str | None = None) -> list[str]:
    """Every file name the directory's manifest lists (heads and their files); [] when there is no manifest or
    it is not JSON. InvalidParameter for a listed name that leaves the directory ('..', an absolute path): the
    manifest was not written by privcheck, and no name of it is acted on."""
    path = Path(directory) / MANIFEST_NAME
    try:
        raw = json.loads(read_regular(path).decode("utf-8"))
    except (OSError, ValueError):
        return []
    heads = raw.get("heads") if isinstance(raw, dict) else None
    if not isinstance(heads, dict):
        return []
    names = set()
    for head, files in heads.items():
        for f in [head] + (files if isinstance(files, list) else []):
            if isinstance(f, str) and not _inside(f):
                raise InvalidParameter(name, os.fspath(directory) if shown is None else shown,
                                       f"a directory whose manifest lists only names inside it ({path} lists "
                                       f"{f!r}; remove the manifest or choose another directory)")
            if isinstance(f, str):
                names.add(f)
    return sorted(names)


def _inside(text: str) -> bool:
    """Whether `text` is a relative '/'-separated path that stays inside its directory (no '..', not absolute)."""
    rel = PurePosixPath(text)
    return bool(text.strip()) and "\0" not in text and not rel.is_absolute() and rel.parts not in ((), (".",)) \
        and all(part not in ("..", "", ".") for part in text.split("/"))


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
    if existing == anchor:
        _probe(anchor, name, shown)
        return path
    try:                                     # the probe goes inside the output directory, never beside it
        created = _make_dirs(anchor)
    except OSError as exc:
        raise InvalidParameter(name, shown, f"a writable directory ({existing}: {exc.strerror or exc})") from None
    try:
        _probe(anchor, name, shown)
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                directory.rmdir()
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
        pid = read_regular(lock).decode("ascii").strip()
    except (OSError, ValueError):
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
    is held. Claiming and releasing hold signals back (`deferred_interrupts`): an interruption finds the directory
    claimed or not, never half-claimed."""
    claim = _Claim()
    try:
        with deferred_interrupts():
            path = claim.acquire(out, name)
        yield path
    finally:
        with deferred_interrupts():
            claim.release()


class _Claim:
    """What a claim made: the directories it created, the locked file descriptor, the key of the held directory."""

    def __init__(self):
        self.created: list[Path] = []
        self.fd: int | None = None
        self.lock: Path | None = None
        self.key: tuple[int, int] | None = None

    def acquire(self, out, name: str) -> Path:
        path = check_output_directory(out, name)
        anchor = path.absolute()
        self.created = _make_dirs(anchor)
        self.lock = lock = anchor / LOCK_NAME
        if not self.created:                 # names privcheck writes: refused when planted, before any work
            refuse_planted(anchor, OWNED_FILES, OWNED_DIRECTORIES, name, os.fspath(out))
            refuse_planted(anchor, manifest_files(anchor, name, os.fspath(out)), (), name, os.fspath(out))
        while True:
            try:
                self.fd = open_no_follow(lock, os.O_RDWR | os.O_CREAT)
            except OSError:                  # planted between the check and the open
                raise _planted(lock, entry_kind(lock) or "an entry", name, os.fspath(out)) from None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(self.fd)
                self.fd = None
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputBusy(f"invalid {name}={os.fspath(out)!r}: {_holder(lock)} is writing this "
                                     f"directory (lock {lock}); wait for it or choose another directory") from None
                raise
            try:
                same = os.fstat(self.fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(self.fd)                # the holder removed or replaced the file before we locked it
            self.fd = None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode("ascii"))
        self.key = _key(anchor)
        with _held_guard:
            _held.add(self.key)
        remove_leftovers(anchor)
        return path

    def release(self) -> None:
        if self.key is not None:
            with _held_guard:
                _held.discard(self.key)
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.lock)
            os.close(self.fd)
        for directory in reversed(self.created):
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
