"""Every file input, bounded before it is read (issue 23; the limits are listed in docs/artifacts.md, "Inputs").

* `read_input(path, kind, name)` — the bytes of a regular file of at most `LIMITS[kind]` bytes. A FIFO, device,
  directory or socket is refused from `os.stat` before it is opened; the file is opened with O_NONBLOCK and checked
  again with `fstat` (a FIFO swapped in between cannot block), and at most limit + 1 bytes are read (a file that grows
  is refused too).
* `parse_json(text, name)` — strict JSON: duplicate keys, NaN/Infinity, numbers that overflow to ±inf, integers of
  more than `MAX_INT_DIGITS` digits and nesting deeper than `MAX_DEPTH` (found by a scan without recursion, before
  parsing) are refused.
* `read_json(path, kind, name)` — both.
* `csv_rows(text, name)` — `csv.reader` rows with a field-size limit of `MAX_CSV_FIELD` characters.
* `open_input(path, kind, name)` — the same checks, then the open binary file (for readers that seek: .npz).
* `npz_members(fh, name, max_elements)` — each array's (shape, dtype) read from its .npy header, checked
  against the maxima before any array is loaded; a truncated or corrupt zip, and an array name given twice, are
  refused.

Every refusal is `InvalidParameter` naming the input and the allowed range (the CLI: exit 2, one line).
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import zipfile

import numpy as np

from privcheck.errors import InvalidParameter

__all__ = ["LIMITS", "MAX_CSV_FIELD", "MAX_DEPTH", "MAX_INT_DIGITS", "MAX_NPZ_MEMBER_BYTES", "MAX_TEXT_CHARS",
           "csv_rows", "json_depth", "npz_members", "open_input", "parse_json", "read_input",
           "read_json"]

MiB = 1 << 20
LIMITS = {                      # bytes of a file, per kind of input
    "history": 16 * MiB,        # --history JSON
    "artifact": 64 * MiB,       # a sealed artifact given to `privcheck report`
    "scores.csv": 256 * MiB,    # a scores file as CSV (larger audits: use .npz)
    "scores.npz": 1024 * MiB,   # a scores file as .npz (compressed size; members are bounded by their headers)
    "config": 4 * MiB,          # a model's config.json
    "key": 64 * 1024,           # an ed25519 key file (--sign KEY, --trust PUBKEY)
    "signature": 64 * 1024,     # an artifact's detached signature document
    "auditor_log": 1024 * MiB,  # a canary audit's private log (binary m = 1,000: about 119,000 rounds)
}
MAX_DEPTH = 64                  # JSON nesting (arrays and objects)
MAX_INT_DIGITS = 100            # digits of a JSON integer
MAX_CSV_FIELD = 4096            # characters of one CSV field
MAX_TEXT_CHARS = 1 << 20        # characters of a 0-d string array in an .npz (e.g. an embedded preregistration)
MAX_NPZ_MEMBER_BYTES = 2048 * MiB   # uncompressed bytes of one .npz array
_CHUNK = 1 << 20
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link"}


def _limit(kind: str) -> int:
    if kind not in LIMITS:
        raise KeyError(f"unknown input kind {kind!r}; one of {sorted(LIMITS)}")
    return LIMITS[kind]


def _not_regular(name: str, path, mode: int):
    what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return InvalidParameter(name, str(path), f"a regular file (this is {what})")


def open_input(path, kind: str, name: str):
    """A binary file object of the regular file `path` (at most `LIMITS[kind]` bytes by its metadata), opened
    without blocking and checked again with `fstat`."""
    limit = _limit(kind)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InvalidParameter(name, str(path), f"an existing readable regular file ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(name, path, st.st_mode)
    if st.st_size > limit:
        raise InvalidParameter(name, f"{path} ({st.st_size} bytes)", f"a file of at most {limit} bytes ({kind})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InvalidParameter(name, str(path), f"a readable regular file ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(name, path, st.st_mode)
        if st.st_size > limit:
            raise InvalidParameter(name, f"{path} ({st.st_size} bytes)", f"a file of at most {limit} bytes ({kind})")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_input(path, kind: str, name: str) -> bytes:
    """The bytes of the regular file `path`, at most `LIMITS[kind]` of them (module docstring)."""
    limit = _limit(kind)
    with open_input(path, kind, name) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InvalidParameter(name, str(path), f"a readable regular file ({exc.strerror})") from None
    if len(data) > limit:
        raise InvalidParameter(name, f"{path} (more than {limit} bytes)", f"a file of at most {limit} bytes ({kind})")
    return data


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings ignored), without recursion."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    data = _STRING.sub(b'""', data)
    codes = np.frombuffer(data, dtype=np.uint8)
    if codes.size == 0:
        return 0
    step = (np.isin(codes, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(codes, (ord("]"), ord("}"))).astype(np.int64))
    return int(max(np.cumsum(step).max(), 0))


def parse_json(text: str | bytes, name: str):
    """Strict JSON (module docstring); InvalidParameter naming `name` on any defect."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidParameter(name, f"undecodable byte at {exc.start}", "UTF-8 JSON text") from None
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise InvalidParameter(name, f"JSON nested {depth} deep", f"JSON nested at most {MAX_DEPTH} deep")

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise InvalidParameter(name, f"duplicate key {dup[:80]!r}", "JSON objects with distinct keys")
        return dict(items)

    def integer(token: str) -> int:
        if len(token.lstrip("-")) > MAX_INT_DIGITS:
            raise InvalidParameter(name, f"an integer of {len(token.lstrip('-'))} digits",
                                   f"integers of at most {MAX_INT_DIGITS} digits")
        return int(token)

    def real(token: str) -> float:
        value = float(token)
        if value in (float("inf"), float("-inf")):
            raise InvalidParameter(name, f"{token[:40]} (overflows a double)", "finite numbers")
        return value

    def constant(token: str):
        raise InvalidParameter(name, token, "finite numbers (NaN and Infinity are not JSON)")

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=real,
                          parse_constant=constant)
    except json.JSONDecodeError as exc:
        ends_early = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        what = "truncated JSON" if ends_early else "invalid JSON"
        raise InvalidParameter(name, f"{what} ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                               "one valid JSON document") from None
    except RecursionError:      # not reached below MAX_DEPTH; kept so no input can end as an internal error
        raise InvalidParameter(name, "JSON nested too deep", f"JSON nested at most {MAX_DEPTH} deep") from None


def read_json(path, kind: str, name: str):
    """`parse_json(read_input(path, kind, name), name)`."""
    return parse_json(read_input(path, kind, name), name)


def csv_rows(text: str, name: str) -> list[list[str]]:
    """The rows of CSV `text`, each field at most MAX_CSV_FIELD characters (InvalidParameter naming `name`)."""
    import io

    saved = csv.field_size_limit(MAX_CSV_FIELD)
    try:
        return list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise InvalidParameter(name, f"malformed CSV ({exc})",
                               f"CSV with fields of at most {MAX_CSV_FIELD} characters") from None
    finally:
        csv.field_size_limit(saved)


def npz_members(fh, name: str, max_elements: int) -> dict[str, tuple[tuple, np.dtype]]:
    """{array name: (shape, dtype)} of the .npz open as `fh` (`open_input`), read from each member's .npy header only.

    Refused (InvalidParameter naming `name`): a truncated or corrupt zip, a member that is not an .npy array, two
    members of one name (`x` and `x.npy` are one name), an object dtype (pickles), an array of more than
    `max_elements` elements, a string array of more than MAX_TEXT_CHARS characters per element, or one over
    MAX_NPZ_MEMBER_BYTES uncompressed."""
    out: dict[str, tuple[tuple, np.dtype]] = {}
    try:
        with zipfile.ZipFile(fh) as zf:
            for info in zf.infolist():
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if key in out:          # numpy.load would read one of them: refused, never resolved
                    raise InvalidParameter(f"{name}.{key}", "an array given twice", "one array per name")
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version in ((2, 0), (3, 0)):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        raise ValueError(f"unsupported .npy version {version}")
                _check_member(name, key, shape, dtype, max_elements)
                out[key] = (shape, dtype)
    except InvalidParameter:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, KeyError,
            NotImplementedError, RuntimeError) as exc:
        raise InvalidParameter(name, f"{type(exc).__name__}: {str(exc)[:120]}",
                               "an intact .npz of plain numpy arrays") from None
    return out


def _check_member(name: str, key: str, shape, dtype: np.dtype, max_elements: int) -> None:
    where = f"{name}.{key}"
    if dtype.hasobject:
        raise InvalidParameter(where, f"dtype {dtype}", "a plain array (no objects or pickles)")
    elements = int(np.prod(shape, dtype=object)) if shape else 1
    if elements > max_elements:
        raise InvalidParameter(where, f"shape {shape}", f"at most {max_elements} elements")
    if dtype.kind in "US" and dtype.itemsize // (4 if dtype.kind == "U" else 1) > MAX_TEXT_CHARS:
        raise InvalidParameter(where, f"dtype {dtype}", f"strings of at most {MAX_TEXT_CHARS} characters")
    if elements * dtype.itemsize > MAX_NPZ_MEMBER_BYTES:
        raise InvalidParameter(where, f"shape {shape}, dtype {dtype}",
                               f"at most {MAX_NPZ_MEMBER_BYTES} bytes uncompressed")
