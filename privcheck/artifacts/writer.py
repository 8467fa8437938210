"""The one artifact writer: seal (sha256), validate (schema and consistency), write atomically, under the lock.

* `write_artifact(path, document, schema=...)` — one sealed JSON artifact. The document is sealed and checked
  in memory first (its schema, then the kind's consistency rules of `privcheck.artifacts.integrity`); the file is
  written through a temporary file in the same directory (fsync, rename), so a reader sees the old file or the
  complete new one, and a failure leaves no file behind.
* `ArtifactDirectory(out_dir)` — several files that belong together (an artifact, its report, plots, private
  logs). Inside `with ArtifactDirectory(out) as staging:` every file goes to a staging directory inside `out`;
  on normal exit the staged files are moved into place, schema-checked documents last, and the files the
  previous output of the same head document wrote that this one does not (a plot of a suite not run this time)
  are removed; if the block raises, or a move fails, the staging directory is removed and every file of `out`
  is restored as it was.

No link is followed: `write_atomic` refuses a path that is anything but a regular file (`refuse_planted`) and
writes a fresh `mkstemp` file (O_EXCL) renamed over it; staged files are created O_CREAT | O_EXCL | O_NOFOLLOW;
a commit refuses, before it moves anything, a final name taken by a link, FIFO, device, socket or a directory in
place of a file (or a non-directory in place of a directory), and removes a stale file only when it is a regular
file reached through real directories.

Both hold the directory's lock (`privcheck.artifacts.outdir.hold_output_directory`: the command's claim, or
their own), and every temporary name they use is one `outdir.remove_leftovers` recognises, so what a killed
writer leaves behind is removed by the next writer of the directory. See docs/artifacts.md.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath

from privcheck.artifacts.integrity import ArtifactInconsistent, consistency_problems
from privcheck.artifacts.outdir import (
    LOCK_NAME,
    MANIFEST_NAME,
    entry_kind,
    hold_output_directory,
    leftover_prefix,
    open_no_follow,
    read_regular,
    refuse_planted,
)
from privcheck.artifacts.schema import SCHEMA_SUFFIX, schema_file, validate
from privcheck.artifacts.seal import seal, sha256_of, verify_seal
from privcheck.errors import InvalidParameter
from privcheck.interrupts import deferred_interrupts, note_commit
from privcheck.serialization import canonical_json, dump_json

__all__ = ["ArtifactDirectory", "DIR_MODE", "FILE_MODE", "MANIFEST_NAME", "canonical_json", "dump_json", "seal",
           "sha256_of", "verify_seal", "write_artifact", "write_atomic"]

FILE_MODE = 0o644
DIR_MODE = 0o755
_RESERVED = (MANIFEST_NAME, LOCK_NAME)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable; some filesystems cannot open a directory, which is not an error."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes, mode: int = FILE_MODE) -> Path:
    """Write `data` to `path` so that readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_planted(path.parent, [path.name], name="path", shown=os.fspath(path))
    with deferred_interrupts():            # no signal between creating the temporary file and removing or renaming it
        _replace_with(path, data, mode)
    return path


def _replace_with(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=leftover_prefix("tmp"), dir=path.parent)     # O_CREAT | O_EXCL: no link
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_new(path: Path, data: bytes) -> None:
    """Write `data` to a new file at `path` (O_CREAT | O_EXCL | O_NOFOLLOW, fsynced); a regular file already
    there (a name staged twice) is removed first, anything else is refused by the open."""
    if entry_kind(path) == "a regular file":
        os.unlink(path)
    fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _sealed_and_valid(document, schema: str) -> dict:
    """Seal and check in memory: jsonschema.ValidationError on a schema defect, ArtifactInconsistent when a summary
    contradicts its data (`privcheck.artifacts.integrity`); nothing is written."""
    if not isinstance(document, dict):
        raise InvalidParameter("document", type(document).__name__, "a dict (a JSON object)")
    sealed = seal(document)
    validate(sealed, schema)
    problems = consistency_problems(sealed, schema[: -len(SCHEMA_SUFFIX)])
    if problems:
        raise ArtifactInconsistent("; ".join(problems))
    return sealed


def write_artifact(path: str | os.PathLike, document: dict, *, schema: str, mode: int = FILE_MODE) -> dict:
    """Seal `document`, validate it against `schema` (e.g. "verification", the file
    privcheck/schemas/verification.schema.json), write it atomically to `path`; returns the sealed document.

    Raises (InvalidParameter for an unknown schema or a directory that cannot be written, OutputBusy while another
    process writes the directory, jsonschema.ValidationError or ArtifactInconsistent for a defect, OSError) before
    or instead of writing: on failure no file and no temporary file is left at `path`.
    """
    schema = schema_file(schema)
    sealed = _sealed_and_valid(document, schema)
    path = Path(path)
    with hold_output_directory(path.parent, name="path"), deferred_interrupts():
        write_atomic(path, dump_json(sealed), mode=mode)
        note_commit()                      # the command's output is published: what is left of it is printing
    return sealed




def _relative(name) -> PurePosixPath:
    """A relative path inside the artifact directory (no absolute paths, no '..', no empty name)."""
    text = os.fspath(name) if isinstance(name, os.PathLike) else name
    if not isinstance(text, str) or not text.strip():
        raise InvalidParameter("name", name, "a non-empty relative file name")
    rel = PurePosixPath(text.replace(os.sep, "/"))
    if rel.is_absolute() or any(part in ("..", "") for part in rel.parts) or rel.parts in ((), (".",)):
        raise InvalidParameter("name", name, "a relative path inside the artifact directory (no '..')")
    return rel


def _manifest_name(name) -> str | None:
    """`name` as a manifest entry (a relative POSIX path), or None when it cannot be one."""
    try:
        rel = _relative(name)
    except InvalidParameter:
        return None
    text = rel.as_posix()
    return None if text in _RESERVED or text != name else text


def _read_manifest(directory: Path) -> dict[str, set[str]]:
    """{head document: files} of the directory's manifest; {} when there is none or it cannot be read (then no
    file is removed as stale: only names the manifest lists ever are)."""
    try:
        raw = json.loads(read_regular(directory / MANIFEST_NAME).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    heads = raw.get("heads") if isinstance(raw, dict) else None
    if not isinstance(heads, dict):
        return {}
    manifest = {}
    for head, files in heads.items():
        if _manifest_name(head) is not None and isinstance(files, list):
            manifest[head] = {f for f in files if isinstance(f, str) and _manifest_name(f) is not None}
    return manifest


class ArtifactDirectory:
    """Stage files inside `target` and move them into place together; roll back on any failure.

        with ArtifactDirectory(out) as staging:
            doc = staging.write_json("run.json", doc, schema="dpgrpo_run")   # sealed + validated
            staging.write_bytes("plot.png", png)
            staging.mkdir("private", mode=0o700)
            staging.write_bytes("private/log.jsonl", data, mode=0o600)
            tool.save(staging.path / "weights.bin")                         # tools that write files themselves

    The block holds the directory's lock (the command's claim, or its own: `OutputBusy` on entry while another
    process writes there). `path` is the staging directory (valid inside the block); `target` the final directory.

    Stale files: the output belongs to its *head* document (`head`, default the last schema-checked document
    written, e.g. "verification.json"). The directory's manifest (`MANIFEST_NAME`) records, per head, the files
    its last commit wrote. A commit that rewrites its head removes the files the head's previous output wrote and
    this one does not; a commit naming a head it does not rewrite (a re-rendered report) adds its files to that
    head's output; a commit without a head removes nothing. Staged files replace same-named ones, and a file
    belongs to the last commit that wrote it; files no manifest lists (the user's own) are never removed.

    Modes: files written with `write_*` get `mode` (default `file_mode`); files a tool wrote into `path` keep
    their own mode, capped at `file_mode`. A staged directory's mode carries over to a new final directory;
    an existing one is set to the mode given to `mkdir(mode=...)`, or tightened to the staged directory's mode
    when that is stricter (a private directory never becomes readable by the move).
    """

    def __init__(self, target: str | os.PathLike, *, head: str | None = None, file_mode: int = FILE_MODE,
                 dir_mode: int = DIR_MODE):
        if target is None or (isinstance(target, str) and not target.strip()):
            raise InvalidParameter("out", target, "a directory path")
        self.target = Path(target)
        if self.target.exists() and not self.target.is_dir():
            raise InvalidParameter("out", str(target), "a directory (a file exists at this path)")
        if head is not None and _manifest_name(head) is None:
            raise InvalidParameter("head", head, "a relative file name inside the artifact directory")
        self.head = head
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self._staging: Path | None = None
        self._hold = None
        self._dir_modes: dict[PurePosixPath, int] = {}
        self._documents: list[PurePosixPath] = []    # schema-checked JSON: moved last
        self._modes: dict[PurePosixPath, int] = {}

    # ------------------------------------------------------------------ context

    def __enter__(self) -> "ArtifactDirectory":
        if self._staging is not None:
            raise RuntimeError("ArtifactDirectory is not re-entrant")
        with deferred_interrupts():        # a signal cannot fall between creating the staging directory and noting it
            existed = self.target.is_dir()
            hold = hold_output_directory(self.target)
            hold.__enter__()
            try:
                if not existed:
                    os.chmod(self.target, self.dir_mode)         # the default mode, whatever the umask
                self._staging = Path(tempfile.mkdtemp(prefix=leftover_prefix("staging"), dir=self.target))
            except BaseException:
                hold.__exit__(None, None, None)
                raise
            self._hold = hold
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        # The commit window: a signal is held back until the files are moved (or rolled back) and the staging
        # directory and the lock are gone, so that an interruption leaves the old output or the complete new one.
        with deferred_interrupts():
            try:
                if exc_type is None:
                    self._commit()
                    note_commit()
            finally:
                self._cleanup()
        return False

    @property
    def path(self) -> Path:
        """The staging directory (files written here are moved into `target` on success)."""
        if self._staging is None:
            raise RuntimeError("ArtifactDirectory.path is only available inside its `with` block")
        return self._staging

    # ------------------------------------------------------------------ writing

    def _destination(self, name) -> tuple[PurePosixPath, Path]:
        rel = _relative(name)
        if rel.as_posix() in _RESERVED:
            raise InvalidParameter("name", name, "a name other than " + " and ".join(_RESERVED))
        dest = self.path.joinpath(*rel.parts)
        missing = [p for p in dest.parents if p != self.path and self.path in p.parents and not p.exists()]
        for directory in reversed(missing):
            directory.mkdir()
            os.chmod(directory, self.dir_mode)        # the default mode, whatever the umask
        return rel, dest

    def mkdir(self, name, *, mode: int | None = None) -> Path:
        """Create a sub-directory; its mode (default `dir_mode`) is applied to the final directory, which is
        created or, when it exists, set to that mode. Returns the staged path."""
        rel, dest = self._destination(name)
        dest.mkdir(exist_ok=True)
        os.chmod(dest, self.dir_mode if mode is None else mode)
        if mode is not None:
            self._dir_modes[rel] = mode
        return dest

    def write_bytes(self, name, data: bytes, *, mode: int | None = None) -> Path:
        """Stage `data` as `name`; returns the path the file will have in `target`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidParameter("data", type(data).__name__, "bytes")
        rel, dest = self._destination(name)
        _write_new(dest, data)
        self._modes[rel] = self.file_mode if mode is None else mode
        return self.target.joinpath(*rel.parts)

    def write_text(self, name, text: str, *, mode: int | None = None, encoding: str = "utf-8") -> Path:
        if not isinstance(text, str):
            raise InvalidParameter("text", type(text).__name__, "a str")
        return self.write_bytes(name, text.encode(encoding), mode=mode)

    def write_json(self, name, document, *, schema: str | None = None, mode: int | None = None) -> dict:
        """Stage a JSON file (indented, sorted keys). With `schema`, the document is sealed and checked first
        (as by `write_artifact`) and moved into `target` after every other file; returns what was written (the
        sealed document when `schema` is given)."""
        if schema is not None:
            document = _sealed_and_valid(document, schema_file(schema))
        data = dump_json(document)
        self.write_bytes(name, data, mode=mode)
        rel = _relative(name)
        if schema is not None and rel not in self._documents:
            self._documents.append(rel)
        return document

    # ------------------------------------------------------------------ commit / rollback

    def _staged(self) -> tuple[list[PurePosixPath], list[PurePosixPath], list[PurePosixPath]]:
        """(directories top-down, other files, schema-checked documents) found in the staging directory, as
        relative paths."""
        dirs, files = [], []
        for root, dirnames, filenames in os.walk(self.path):
            dirnames.sort()
            rel_root = PurePosixPath(Path(root).relative_to(self.path).as_posix())
            links = [d for d in dirnames if os.path.islink(os.path.join(root, d))]
            dirnames[:] = [d for d in dirnames if d not in links]       # a link is moved as it is, not walked
            dirs.extend(rel_root / d for d in dirnames)
            files.extend(rel_root / f for f in sorted(filenames + links))
        last = [f for f in self._documents if f in files]
        return dirs, [f for f in files if f not in last], last

    def _stage_manifest(self, written: set[str]) -> list[str]:
        """Stage the updated manifest (when it changes); returns the stale files of the head's previous output."""
        head = self.head or (self._documents[-1].as_posix() if self._documents else None)
        before = _read_manifest(self.target)
        after = {h: files - written for h, files in before.items()}
        stale: set[str] = set()
        if head is not None and head in written:
            stale = before.get(head, set()) - written
            after[head] = set(written)
        elif head is not None:
            after[head] = before.get(head, set()) | written
        after = {h: files for h, files in after.items() if files}
        if after != before:
            body = {"heads": {h: sorted(files) for h, files in sorted(after.items())},
                    "note": "files each head document's output wrote (privcheck, docs/artifacts.md); "
                            "removed as stale when that head is rewritten without them"}
            _write_new(self.path / MANIFEST_NAME, dump_json(body))
        return sorted(stale)

    def _removable(self, name: str) -> Path | None:
        """The stale file `name` in `target`, when it is a regular file reached through real directories inside
        `target` (no component a symbolic link); None otherwise: a link, a FIFO or a directory now at that name
        is not what privcheck wrote and is left alone."""
        parts = PurePosixPath(name).parts
        if any(part in ("..", ".", "") for part in parts):
            return None
        path = self.target
        for part in parts[:-1]:
            path = path / part
            if entry_kind(path) != "a directory":
                return None
        final = path / parts[-1]
        return final if entry_kind(final) == "a regular file" else None

    def _refuse_planted(self, dirs, files) -> None:
        """Before anything is moved: every name the commit writes in `target` must be absent or what privcheck
        writes there (a real directory, a regular file); InvalidParameter naming the entry otherwise."""
        refuse_planted(self.target, [rel.as_posix() for rel in files], [rel.as_posix() for rel in dirs])

    def _commit(self) -> None:
        dirs, others, documents = self._staged()
        self._refuse_planted(dirs, others + documents + [PurePosixPath(MANIFEST_NAME)])
        stale = self._stage_manifest({rel.as_posix() for rel in others + documents})
        if (self.path / MANIFEST_NAME).exists():
            others.append(PurePosixPath(MANIFEST_NAME))
            self._modes[PurePosixPath(MANIFEST_NAME)] = FILE_MODE
        backup = Path(tempfile.mkdtemp(prefix=leftover_prefix("backup"), dir=self.target))
        created_dirs: list[Path] = []
        chmodded: list[tuple[Path, int]] = []               # (existing directory, its mode before)
        moved: list[tuple[Path, Path | None]] = []          # (final path, backup of the file it replaced)

        def set_aside(final: Path) -> Path:
            saved = backup / str(len(moved))
            os.replace(final, saved)
            return saved

        try:
            for rel in [PurePosixPath()] + dirs:
                final = self.target.joinpath(*rel.parts)
                staged_mode = self.dir_mode if not rel.parts else \
                    stat.S_IMODE(self.path.joinpath(*rel.parts).stat().st_mode)
                if final.is_dir():
                    current = stat.S_IMODE(final.stat().st_mode)
                    wanted = self._dir_modes.get(rel)
                    if wanted is None and rel.parts and staged_mode & ~current == 0:
                        wanted = staged_mode                    # tighten, never loosen
                    if wanted is not None and wanted != current:
                        chmodded.append((final, current))
                        os.chmod(final, wanted)
                    continue
                final.mkdir(mode=0o700)
                created_dirs.append(final)
                os.chmod(final, staged_mode)
            for rel in others:
                self._move(rel, moved, set_aside)
            for name in stale:                              # before the documents: a reader who sees the new
                final = self._removable(name)               # head document sees none of the old output
                if final is not None:
                    moved.append((final, set_aside(final)))
            for rel in documents:
                self._move(rel, moved, set_aside)
            for directory in {self.target.joinpath(*rel.parent.parts) for rel in others + documents}:
                _fsync_dir(directory)
        except BaseException:
            for final, saved in reversed(moved):
                try:
                    if saved is not None:
                        os.replace(saved, final)
                    elif final.exists():
                        final.unlink()
                except OSError:
                    pass
            for directory in reversed(created_dirs):
                shutil.rmtree(directory, ignore_errors=True)
            for directory, mode in reversed(chmodded):
                try:
                    os.chmod(directory, mode)
                except OSError:
                    pass
            raise
        finally:
            shutil.rmtree(backup, ignore_errors=True)

    def _move(self, rel: PurePosixPath, moved: list, set_aside) -> None:
        staged = self.path.joinpath(*rel.parts)
        final = self.target.joinpath(*rel.parts)
        own = stat.S_IMODE(staged.lstat().st_mode) & self.file_mode
        if not staged.is_symlink():
            os.chmod(staged, self._modes.get(rel, own))
        saved = None
        if final.exists() or final.is_symlink():
            if final.is_dir() and not final.is_symlink():
                raise IsADirectoryError(f"{final} is a directory; cannot replace it with a file")
            saved = set_aside(final)
        moved.append((final, saved))
        os.replace(staged, final)

    def _cleanup(self) -> None:
        try:
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)
                self._staging = None
        finally:
            if self._hold is not None:
                hold, self._hold = self._hold, None
                hold.__exit__(None, None, None)
