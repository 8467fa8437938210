"""The one artifact writer: seal (sha256), validate against the packaged JSON Schema, write atomically.

* `write_artifact(path, document, schema=...)` — one sealed JSON artifact. The document is sealed and
  validated in memory first; the file is written through a temporary file in the same directory (fsync,
  rename), so a reader sees the old file or the complete new one, and a failure leaves no file behind.
* `ArtifactDirectory(out_dir)` — several files that belong together (an artifact, its report, plots, private
  logs). Inside `with ArtifactDirectory(out) as staging:` every file goes to a staging directory next to
  `out`; on normal exit the staged files are moved into `out` (created if absent), schema-checked documents
  last; if the block raises, or a move fails, the staging directory is removed and every file of `out` is
  restored as it was.

The seal is sha256 over `canonical_json` of the document without its own `sha256` field; `verify_seal`
recomputes it. See docs/artifacts.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath

from privcheck.artifacts.schema import schema_file, validate
from privcheck.errors import InvalidParameter
from privcheck.serialization import canonical_json, dump_json

__all__ = ["ArtifactDirectory", "FILE_MODE", "DIR_MODE", "canonical_json", "dump_json", "seal", "sha256_of",
           "verify_seal", "write_artifact", "write_atomic"]

FILE_MODE = 0o644
DIR_MODE = 0o755


def sha256_of(document: dict) -> str:
    """sha256 over the canonical JSON of the document without its own `sha256` field."""
    body = {k: val for k, val in document.items() if k != "sha256"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(document: dict) -> dict:
    """Return a copy with `sha256` set (sealing a sealed document gives the same seal)."""
    sealed = dict(document)
    sealed["sha256"] = sha256_of(document)
    return sealed


def verify_seal(document: dict) -> bool:
    return document.get("sha256") == sha256_of(document)


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    return path


def _sealed_and_valid(document, schema: str) -> dict:
    """Seal and validate in memory (jsonschema.ValidationError on a defect); nothing is written."""
    if not isinstance(document, dict):
        raise InvalidParameter("document", type(document).__name__, "a dict (a JSON object)")
    sealed = seal(document)
    validate(sealed, schema)
    return sealed


def write_artifact(path: str | os.PathLike, document: dict, *, schema: str, mode: int = FILE_MODE) -> dict:
    """Seal `document`, validate it against `schema` (e.g. "verification", the file
    privcheck/schemas/verification.schema.json), write it atomically to `path`; returns the sealed document.

    Raises (InvalidParameter for an unknown schema, jsonschema.ValidationError for a defect, OSError) before
    or instead of writing: on failure no file and no temporary file is left at `path`.
    """
    schema = schema_file(schema)
    sealed = _sealed_and_valid(document, schema)
    write_atomic(path, dump_json(sealed), mode=mode)
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


class ArtifactDirectory:
    """Stage files next to `target` and move them into it together; roll back on any failure.

        with ArtifactDirectory(out) as staging:
            doc = staging.write_json("run.json", doc, schema="dpgrpo_run")   # sealed + validated
            staging.write_bytes("plot.png", png)
            staging.mkdir("private", mode=0o700)
            staging.write_bytes("private/log.jsonl", data, mode=0o600)
            tool.save(staging.path / "weights.bin")                         # tools that write files themselves

    Files already in `target` that are not staged are left alone; staged files replace same-named ones.
    `path` is the staging directory (valid inside the block); `target` the final directory.

    Modes: files written with `write_*` get `mode` (default `file_mode`); files a tool wrote into `path` keep
    their own mode, capped at `file_mode`. A staged directory's mode carries over to a new final directory;
    an existing one is set to the mode given to `mkdir(mode=...)`, or tightened to the staged directory's mode
    when that is stricter (a private directory never becomes readable by the move).
    """

    def __init__(self, target: str | os.PathLike, *, file_mode: int = FILE_MODE, dir_mode: int = DIR_MODE):
        if target is None or (isinstance(target, str) and not target.strip()):
            raise InvalidParameter("out", target, "a directory path")
        self.target = Path(target)
        if self.target.exists() and not self.target.is_dir():
            raise InvalidParameter("out", str(target), "a directory (a file exists at this path)")
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self._staging: Path | None = None
        self._created_parents: list[Path] = []
        self._dir_modes: dict[PurePosixPath, int] = {}
        self._documents: list[PurePosixPath] = []    # schema-checked JSON: moved last
        self._modes: dict[PurePosixPath, int] = {}

    # ------------------------------------------------------------------ context

    def __enter__(self) -> "ArtifactDirectory":
        if self._staging is not None:
            raise RuntimeError("ArtifactDirectory is not re-entrant")
        anchor = self.target.absolute()         # "out" or "." must stage beside the directory, not in it
        parent = anchor.parent
        missing = []
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for directory in reversed(missing):
            directory.mkdir(mode=self.dir_mode)
            self._created_parents.append(directory)
        self._staging = Path(tempfile.mkdtemp(prefix=f".{anchor.name}.", suffix=".staging", dir=anchor.parent))
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._commit()
        except BaseException:
            self._cleanup(remove_parents=True)
            raise
        self._cleanup(remove_parents=exc_type is not None)
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
        with open(dest, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self._modes[rel] = self.file_mode if mode is None else mode
        return self.target.joinpath(*rel.parts)

    def write_text(self, name, text: str, *, mode: int | None = None, encoding: str = "utf-8") -> Path:
        if not isinstance(text, str):
            raise InvalidParameter("text", type(text).__name__, "a str")
        return self.write_bytes(name, text.encode(encoding), mode=mode)

    def write_json(self, name, document, *, schema: str | None = None, mode: int | None = None) -> dict:
        """Stage a JSON file (indented, sorted keys). With `schema`, the document is sealed and validated
        first (as by `write_artifact`) and moved into `target` after every other file; returns what was
        written (the sealed document when `schema` is given)."""
        if schema is not None:
            document = _sealed_and_valid(document, schema_file(schema))
        data = dump_json(document)
        self.write_bytes(name, data, mode=mode)
        rel = _relative(name)
        if schema is not None and rel not in self._documents:
            self._documents.append(rel)
        return document

    # ------------------------------------------------------------------ commit / rollback

    def _staged(self) -> tuple[list[PurePosixPath], list[PurePosixPath]]:
        """(directories top-down, files in move order) found in the staging directory, as relative paths."""
        dirs, files = [], []
        for root, dirnames, filenames in os.walk(self.path):
            dirnames.sort()
            rel_root = PurePosixPath(Path(root).relative_to(self.path).as_posix())
            links = [d for d in dirnames if os.path.islink(os.path.join(root, d))]
            dirnames[:] = [d for d in dirnames if d not in links]       # a link is moved as it is, not walked
            dirs.extend(rel_root / d for d in dirnames)
            files.extend(rel_root / f for f in sorted(filenames + links))
        last = [f for f in self._documents if f in files]
        return dirs, [f for f in files if f not in last] + last

    def _commit(self) -> None:
        dirs, files = self._staged()
        backup = Path(tempfile.mkdtemp(prefix=f".{self.target.absolute().name}.", suffix=".backup",
                                       dir=self.path.parent))
        created_dirs: list[Path] = []
        chmodded: list[tuple[Path, int]] = []               # (existing directory, its mode before)
        moved: list[tuple[Path, Path | None]] = []          # (final path, backup of the file it replaced)
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
            for i, rel in enumerate(files):
                staged = self.path.joinpath(*rel.parts)
                final = self.target.joinpath(*rel.parts)
                own = stat.S_IMODE(staged.stat().st_mode) & self.file_mode
                os.chmod(staged, self._modes.get(rel, own))
                saved = None
                if final.exists() or final.is_symlink():
                    if final.is_dir():
                        raise IsADirectoryError(f"{final} is a directory; cannot replace it with a file")
                    saved = backup / str(i)
                    os.replace(final, saved)
                moved.append((final, saved))
                os.replace(staged, final)
            for directory in {self.target.joinpath(*rel.parent.parts) for rel in files}:
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

    def _cleanup(self, *, remove_parents: bool) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if remove_parents:
            for directory in reversed(self._created_parents):
                try:
                    directory.rmdir()           # only if still empty
                except OSError:
                    break
        self._created_parents = []
