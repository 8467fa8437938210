"""The auditor's private log of a canary audit: JSON lines (or, for `append_bytes`, binary records) in a file
created with mode 0600.

Each `append_line(path, obj)` (or `append_lines(path, objs)`: several lines, one write) opens the file with
O_CREAT | O_APPEND | O_NOFOLLOW (a symlink is refused), makes sure it is a regular file with mode 0600 (fchmod
otherwise) and writes the whole line through one append-mode descriptor, so lines written by concurrent writers
are not interleaved. Objects go through `privcheck.serialization.jsonable`, so non-finite floats are written as the
strings "nan", "inf", "-inf"; the keys are sorted. `read_log(path)` is the auditor's reader (docs/audits.md
describes the audits that read such logs); `parse_lines` parses the bytes of such a log with a clear refusal of a
line that is not JSON. `append_bytes` is the same append of an opaque record (the binary canary log,
`privcheck.integrations.canary_log`).
"""

from __future__ import annotations

import json
import os
import stat

from privcheck.errors import InvalidParameter
from privcheck.serialization import jsonable

__all__ = ["LOG_MODE", "append_bytes", "append_line", "append_lines", "check_log_path", "parse_lines", "read_log"]

LOG_MODE = 0o600


def check_log_path(path) -> str:
    """The log path as a string (InvalidParameter unless it is a non-empty path)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InvalidParameter("log_path", path, "a file path (the auditor's private log)")
    return os.fspath(path)


def append_line(path, obj: dict) -> None:
    """Append `obj` as one JSON line to the private log at `path` (created 0600; see the module docstring)."""
    append_lines(path, [obj])


def append_lines(path, objs) -> None:
    """Append each of `objs` as one JSON line, in order, through one descriptor and one write (the same lines as
    `append_line` of each in turn; a hook logging two lines per step opens the file once)."""
    line = "".join(json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
                   for obj in objs).encode()
    append_bytes(path, line)


def append_bytes(path, data: bytes, *, header: bytes = b"") -> None:
    """Append `data` to the private log at `path` through one append-mode descriptor and one write (module
    docstring); `header` is written before it when the file is empty (a binary log's header goes with its first
    record, so a run that never logs leaves no file)."""
    path = check_log_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, LOG_MODE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidParameter("log_path", path, "a regular file")
        if stat.S_IMODE(st.st_mode) != LOG_MODE:
            os.fchmod(fd, LOG_MODE)
        view = memoryview(header + data if header and not st.st_size else data)
        while view:
            k = os.write(fd, view)
            view = view[k:]
    finally:
        os.close(fd)


def parse_lines(data: bytes, path: str = "auditor log") -> list[dict]:
    """The JSON lines of a log's bytes, in order; InvalidParameter naming `log_path` and the line when one is not
    a UTF-8 JSON object (a truncated or corrupt log), never a bare decoding error."""
    out = []
    for k, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InvalidParameter("log_path", f"{path} (line {k}: {type(exc).__name__})",
                                   "a JSON-lines auditor log, one JSON object per line") from None
        if not isinstance(obj, dict):
            raise InvalidParameter("log_path", f"{path} (line {k}: a JSON {type(obj).__name__})",
                                   "a JSON-lines auditor log, one JSON object per line")
        out.append(obj)
    return out


def read_log(path) -> list[dict]:
    """The log's JSON lines, in order."""
    with open(check_log_path(path), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
