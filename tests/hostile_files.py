"""Hostile files for the command-line fuzz (tests/test_cli_fuzz.py; issue 23): hypothesis strategies that draw, for a
flag that reads a file, a file the command must refuse, and, for a command that writes an output directory, a
directory with an entry planted under a name privcheck writes there.

A drawn value is a frozen object whose `build(root, victim)` creates it under the sandbox `root` and returns the
command-line value; its `valid` says whether the command must accept it (a symbolic link to a valid input is
followed, docs/artifacts.md "Inputs"; a plant of what privcheck itself writes there is fine; everything else drawn
here is refused).

* Inputs. An `Input` says what a flag reads: a format ("json", "csv", "npz", "gguf", "key": an ed25519 key file,
  or "opaque": checked for presence only), the size limit of its kind (`privcheck.inputs.LIMITS`), the suffix of
  its name, a valid file, and whether the flag names a directory holding it (`member`, with `siblings`).
  `hostile_inputs(input)` draws a kind of file, then its details:
  - not a regular file: a FIFO, a device (a link to /dev/zero, /dev/null or /dev/full, a device node, or the device
    path itself), a directory, a socket, a dangling link, a loop of links, a link to a FIFO;
  - a sparse file over the size limit (made with truncate: no disk), an empty file, non-UTF-8 bytes, a truncated file;
  - JSON: nesting deeper than MAX_DEPTH at any place, a key given twice in any object (top level or nested), a number
    in a forbidden form at any place (underscores, non-ASCII digits of several scripts, full-width digits,
    superscripts, 1e999, NaN, a 5,000-digit integer, ...);
  - CSV scores: a field longer than MAX_CSV_FIELD in any cell, a number in a forbidden form in a score, membership or
    integer id cell (including the same number in other digits), a header key given twice, and the JSON defects
    inside the embedded preregistration;
  - key files (--sign, --trust): truncated, the other side's key, an encrypted key, an RSA key, bit-flipped, zeros;
  - .npz scores: an array whose header claims too many elements or bytes, an object array, over-long strings, a
    member that is not an .npy array, a member name given twice, non-finite scores, membership bits that are not 0/1,
    and the JSON defects inside the embedded preregistration.
* Output directories. `planted_outputs(needs)` draws a name privcheck writes in an output directory (`OWNED_FILES`,
  `OWNED_DIRECTORIES`, or any name a manifest lists, planted at any of its parts) and what is planted there: a link
  to the victim file or directory outside, a dangling link into the victim directory, a FIFO, a device node, a
  socket, a directory in place of a file, a file in place of a directory; or the output path itself is a FIFO, a
  device, a socket, a link to the victim, a dangling link or a loop of links.
"""

from __future__ import annotations

import functools
import io
import json
import os
import socket
import stat
import string
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from privcheck.artifacts.outdir import MANIFEST_NAME, OWNED_DIRECTORIES, OWNED_FILES
from privcheck.inputs import LIMITS, MAX_CSV_FIELD, MAX_DEPTH, MAX_INT_DIGITS, MAX_NPZ_MEMBER_BYTES, MAX_TEXT_CHARS
from privcheck.validation import NUMBER_TEXT_MAX

__all__ = ["HostileInput", "Input", "Plant", "Victim", "can_make_device_nodes", "entry_state", "hostile_inputs",
           "json_defect", "key_files", "planted_outputs", "scores_base", "tiny_suite", "verification_document"]

DEVICES = ("/dev/zero", "/dev/null", "/dev/full")
DEVICE_NUMBERS = {"/dev/null": (1, 3), "/dev/zero": (1, 5), "/dev/full": (1, 7)}
NOT_REGULAR = ("fifo", "device-link", "device-node", "device-path", "directory", "socket", "dangling-link",
               "link-loop", "link-to-fifo")
BAD_UTF8 = (b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xfe\xff")
DIGITS = {"arabic-indic": "٠١٢٣٤٥٦٧٨٩", "persian": "۰۱۲۳۴۵۶۷۸۹", "devanagari": "०१२३४५६७८९",
          "full-width": "０１２３４５６７８９", "superscript": "⁰¹²³⁴⁵⁶⁷⁸⁹", "bold": "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"}
# refused as a JSON number wherever it stands: not JSON, or not finite, or too many digits
JSON_NUMBERS = ("1_0", "1_000.5", "١٢", "１", "²", "1e999", "-1e999", "1E400", "NaN", "Infinity", "-Infinity",
                "9" * 5000, "-" + "9" * (MAX_INT_DIGITS + 1), "0x10", "+1", ".5", "01", "1.", "1e", "--1")
# refused as a number in a CSV cell (privcheck.validation.real_text, then finiteness)
TEXT_REALS = ("1_0", "0_.5", "١٢", "１", "²", "1e999", "-1e999", "nan", "NaN", "inf", "-Infinity", "0x10", "1e",
              "9" * 5000, "1" * (NUMBER_TEXT_MAX + 1), "", "½", "Ⅻ")
TEXT_BITS = ("１", "١", "¹", "𝟏", "1.0", "01", "+1", "2", "-1", "", "true", "0x1", "1_0")
TEXT_INTEGERS = ("1_0", "0x3", "3.0", "3e0", "", "Ⅲ")


def _unix_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(os.fspath(path))


@functools.cache
def can_make_device_nodes() -> bool:
    """Whether this process may create device nodes (root outside a user namespace)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.mknod(Path(tmp) / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except OSError:
            return False
    return True


def _not_regular(path: Path, kind: str, device: str) -> str | None:
    """Create `kind` at `path` (NOT_REGULAR); returns the value to give instead of `path` ("device-path")."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device-link":
        path.symlink_to(device)
    elif kind == "device-node":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(*DEVICE_NUMBERS[device]))
    elif kind == "device-path":
        return device
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("mine\n")
    elif kind == "socket":
        _unix_socket(path)
    elif kind == "dangling-link":
        path.symlink_to(path.with_name("absent-" + path.name))
    elif kind == "link-loop":
        other = path.with_name("loop-" + path.name)
        other.symlink_to(path.name)
        path.symlink_to(other.name)
    elif kind == "link-to-fifo":
        target = path.with_name("fifo-" + path.name)
        os.mkfifo(target)
        path.symlink_to(target.name)
    else:
        raise ValueError(kind)
    return None


class Victim:
    """A file and a directory outside every directory privcheck is given, and their state (content, mtime,
    listing): a link planted in an output directory points here."""

    def __init__(self, root: Path):
        self.dir = root / "victim"
        self.dir.mkdir(exist_ok=True)
        self.file = self.dir / "precious.txt"
        self.file.write_bytes(b"keep\n")
        os.utime(self.file, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
        self.state = self._state()

    def _state(self):
        return self.file.read_bytes(), os.stat(self.file).st_mtime_ns, sorted(os.listdir(self.dir))

    def unchanged(self) -> bool:
        return self._state() == self.state


def entry_state(path) -> tuple | None:
    """What is at `path`, not following a link: its type and inode, a link's target, a file's size and mtime, a
    directory's listing (not its mtime: the writability probe creates and removes a file in an output directory)."""
    try:
        st_ = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st_.st_mode):
        return "directory", st_.st_ino, sorted(os.listdir(path))
    return (stat.S_IFMT(st_.st_mode), st_.st_ino, os.readlink(path) if stat.S_ISLNK(st_.st_mode) else None,
            st_.st_size, st_.st_mtime_ns)


# --- JSON with defects at any place --------------------------------------------------------------------------------


class Raw(str):
    """Text emitted as it is (a token that is not JSON, or JSON nested too deep)."""


class Pairs(tuple):
    """A JSON object as (key, value) pairs, a key possibly given twice."""


def emit(node) -> str:
    """One-line JSON text of `node` (Raw and Pairs emitted as they are)."""
    if isinstance(node, Raw):
        return str(node)
    if isinstance(node, dict):
        node = Pairs(node.items())
    if isinstance(node, Pairs):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + emit(v) for k, v in node) + "}"
    if isinstance(node, (list, tuple)):
        return "[" + ",".join(emit(v) for v in node) + "]"
    return json.dumps(node, ensure_ascii=False, allow_nan=False)


def _places(node, path=()):
    """(path, node) of every node of a JSON document, the root first."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _places(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _places(value, (*path, i))


def _replace(node, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in node.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(node)]


def _in_digits(text: str, script: str) -> str:
    return text.translate(str.maketrans("0123456789", DIGITS[script]))


@st.composite
def _number_form(draw, number) -> str:
    """A forbidden form of a number: its own text in other digits or with an underscore, or one of JSON_NUMBERS."""
    own = json.dumps(number) if isinstance(number, (int, float)) and not isinstance(number, bool) else "12"
    forms = [_in_digits(own, script) for script in DIGITS]
    pairs = [i for i in range(1, len(own)) if own[i - 1].isdigit() and own[i].isdigit()]
    forms += [own[:i] + "_" + own[i:] for i in pairs[:1]]
    return draw(st.sampled_from(forms + list(JSON_NUMBERS)))


def _deep(depth: int, objects: bool) -> str:
    return ('{"a":' * depth + "1" + "}" * depth) if objects else ("[" * depth + "1" + "]" * depth)


DEPTHS = st.one_of(st.just(MAX_DEPTH + 1), st.integers(MAX_DEPTH + 1, 100_000))


@st.composite
def json_defect(draw, doc) -> tuple[str, str]:
    """(what was done, one-line JSON text) of `doc` with one structural defect at a drawn place."""
    places = list(_places(doc))
    objects = [(p, n) for p, n in places if isinstance(n, dict) and n]
    kinds = ["deep", "number", "truncated", *(["duplicate-key"] if objects else [])]
    kind = draw(st.sampled_from(kinds))
    if kind == "deep":
        path, _ = draw(st.sampled_from(places))
        depth, as_objects = draw(DEPTHS), draw(st.booleans())
        return f"deep {depth} at {list(path)}", emit(_replace(doc, path, Raw(_deep(depth, as_objects))))
    if kind == "number":
        leaves = [(p, n) for p, n in places if not isinstance(n, (dict, list))]
        numbers = [(p, n) for p, n in leaves if isinstance(n, (int, float)) and not isinstance(n, bool)]
        path, node = draw(st.sampled_from(numbers or leaves or places))
        token = draw(_number_form(node))
        return f"number {token[:20]!r} at {list(path)}", emit(_replace(doc, path, Raw(token)))
    if kind == "duplicate-key":
        path, node = draw(st.sampled_from(objects))
        key = draw(st.sampled_from(sorted(node)))
        again = draw(st.sampled_from([node[key], 0, "x", None, [1], {"k": 1}]))
        items = list(node.items())
        at = draw(st.integers(0, len(items)))
        pairs = Pairs(items[:at] + [(key, again)] + items[at:])
        return f"duplicate key {key!r} at {list(path)}", emit(_replace(doc, path, pairs))
    text = emit(doc)
    cut = draw(st.integers(0, len(text) - 1))
    return f"truncated at {cut} of {len(text)}", text[:cut]


# --- inputs --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """What a flag reads (module docstring). `make()` is the valid content: a JSON document ("json"), a dict of
    arrays and the CSV text ("csv", "npz": `scores_base`), or bytes ("gguf", "opaque")."""
    format: str
    make: Callable[[], object]
    suffix: str = ""
    limit: str | None = None             # key of privcheck.inputs.LIMITS; None: not bounded before work
    member: str | None = None            # the flag names a directory holding the file `member`
    siblings: tuple = ()                 # (name, bytes) of the other files of that directory
    follows_links: bool = True           # a link to a valid file is followed (else refused like any link)
    name: str = ""

    def __repr__(self) -> str:
        return f"Input({self.name or self.format}{'/' + self.member if self.member else ''})"

    def valid_bytes(self) -> bytes:
        base = self.make()
        if self.format == "json":
            return emit(base).encode("utf-8")
        if self.format in ("csv", "npz"):
            return base[self.format]
        return base


@dataclass(frozen=True)
class HostileInput:
    """A drawn input file: `kind` (NOT_REGULAR, "oversized", "link-to-valid", "valid" or a content defect), what was
    done (`detail`), and the bytes (`data`) or sparse size (`size`) of a regular file."""
    input: Input
    kind: str
    detail: str = ""
    data: bytes | None = field(default=None, repr=False)
    size: int = 0
    device: str = "/dev/zero"
    valid: bool = False
    where: str = "in"                    # the directory under the sandbox that holds it

    def build(self, root: Path, victim: Victim | None = None) -> str:
        """Create the file (and its directory, for a `member`) under `root`; the command-line value."""
        base = root / self.where
        base.mkdir(exist_ok=True)
        inp = self.input
        if inp.member is None:
            path = base / ("input" + inp.suffix)
            value = path
        else:
            value = base / ("given" + inp.suffix)
            value.mkdir()
            for name, data in inp.siblings:
                (value / name).write_bytes(data)
            path = value / inp.member
        if self.kind in NOT_REGULAR:
            instead = _not_regular(path, self.kind, self.device)
            return os.fspath(value if instead is None else instead)
        if self.kind == "link-to-valid":
            real = base / ("real" + (inp.suffix if inp.member is None else Path(inp.member).suffix))
            real.write_bytes(inp.valid_bytes())
            path.symlink_to(real)
        elif self.kind == "oversized":
            with open(path, "wb") as fh:
                fh.write(inp.valid_bytes())
                fh.truncate(self.size)              # sparse: no disk, and nothing reads it
        else:
            path.write_bytes(self.data)
        return os.fspath(value)


@st.composite
def _bytes_defect(draw, valid: bytes, *, keep_last: int = 0) -> tuple[str, bytes]:
    """Non-UTF-8 bytes inserted at a drawn place, or the file cut short (before its last `keep_last` bytes)."""
    if draw(st.booleans()):
        at, bad = draw(st.integers(0, len(valid))), draw(st.sampled_from(BAD_UTF8))
        return f"non-UTF-8 {bad!r} at {at}", valid[:at] + bad + valid[at:]
    cut = draw(st.integers(0, max(len(valid) - 1 - keep_last, 0)))
    return f"truncated at {cut} of {len(valid)}", valid[:cut]


# CSV scores ----------------------------------------------------------------------------------------------------------


def _split_csv(text: str):
    """(header lines, column line index, data line indices) of a scores CSV as `write_scores_file` writes it."""
    lines = text.splitlines()
    columns = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return lines, columns, list(range(columns + 1, len(lines)))


@st.composite
def _csv_defect(draw, base: dict) -> tuple[str, bytes]:
    text = base["csv"].decode("utf-8")
    lines, columns, rows = _split_csv(text)
    int_ids = "# id_type: int" in lines[:columns]
    kind = draw(st.sampled_from(["long-field", "score", "bit", "duplicate-header", "preregistration", "bytes",
                                 *(["id"] if int_ids else [])]))

    def cell(row: int, col: int, value: str) -> str:
        fields = lines[row].split(",")
        fields[col] = value
        out = list(lines)
        out[row] = ",".join(fields)
        return "\n".join(out) + "\n"

    if kind == "long-field":
        row, col = draw(st.sampled_from([columns, *rows])), draw(st.integers(0, 2))
        n = draw(st.one_of(st.just(MAX_CSV_FIELD + 1), st.integers(MAX_CSV_FIELD + 1, 200_000)))
        filler, quoted = draw(st.sampled_from(["x", "1", "é", "١"])), draw(st.booleans())
        value = filler * n
        return f"field of {n} {filler!r} at line {row}, column {col}", cell(
            row, col, f'"{value}"' if quoted else value).encode()
    if kind in ("score", "bit", "id"):
        row = draw(st.sampled_from(rows))
        col = {"id": 0, "score": 1, "bit": 2}[kind]
        own = lines[row].split(",")[col]
        script_forms = [_in_digits(own, s) for s in DIGITS]
        if kind == "id":
            forms = [*script_forms, "0_" + own, "0" * (NUMBER_TEXT_MAX + 1) + own, *TEXT_INTEGERS]
        else:
            forms = [*script_forms, *(TEXT_REALS if kind == "score" else TEXT_BITS)]
        value = draw(st.sampled_from(forms))
        return f"{kind} {value[:20]!r} at line {row}", cell(row, col, value).encode()
    if kind == "duplicate-header":
        keyed = [i for i in range(columns) if ":" in lines[i]]
        i = draw(st.sampled_from(keyed))
        again = draw(st.sampled_from([lines[i], lines[i].split(":")[0] + ": x"]))
        at = draw(st.integers(0, columns))
        out = lines[:at] + [again] + lines[at:]
        return f"header line {i} twice", ("\n".join(out) + "\n").encode()
    if kind == "preregistration":
        i = next(i for i in range(columns) if lines[i].startswith("# preregistration: "))
        detail, bad = draw(json_defect(json.loads(lines[i][len("# preregistration: "):])))
        out = list(lines)
        out[i] = "# preregistration: " + bad
        return f"preregistration: {detail}", ("\n".join(out) + "\n").encode()
    return draw(_bytes_defect(base["csv"], keep_last=1))   # the last byte is the final newline


# .npz scores ---------------------------------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def _npy_header(shape, descr: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)         # "Duplicate name": a member given twice is drawn
        for name, data in members:
            zf.writestr(name + ".npy", data)
    return buf.getvalue()


# (shape, dtype) an .npy header may claim that the library refuses before reading (elements, bytes, characters)
HUGE_HEADERS = (((100_000_001,), "<f8"), ((300_000_000,), "<f8"), ((2**40,), "|i1"), ((100_000, 100_000), "<f8"),
                ((10_000_000,), "<U64"), ((MAX_NPZ_MEMBER_BYTES // 8 + 1,), "<c16"), ((), f"<U{MAX_TEXT_CHARS + 1}"),
                ((1,), f"|S{MAX_TEXT_CHARS + 1}"), ((3,), "|O"), ((), "|O"))


@st.composite
def _npz_defect(draw, base: dict) -> tuple[str, bytes]:
    arrays = base["arrays"]
    members = [(k, _npy(v)) for k, v in arrays.items()]
    names = [k for k, _ in members]
    kind = draw(st.sampled_from(["header", "not-npy", "twice", "scores", "bits", "preregistration", "garbage",
                                 "truncated"]))
    if kind == "header":
        name = draw(st.sampled_from(names))
        shape, descr = draw(st.sampled_from(HUGE_HEADERS))
        data = _npy_header(shape, descr) + b"\0" * draw(st.sampled_from([0, 64]))
        out = [(k, data if k == name else v) for k, v in members]
        return f"{name} claims {shape} {descr}", _zip(out)
    if kind == "not-npy":
        name = draw(st.sampled_from(names))
        data = draw(st.sampled_from([b"", b"hello", b"\x93NUMPY", b"\x93NUMPY\x09\x00"]))
        return f"{name} is {data!r}", _zip([(k, data if k == name else v) for k, v in members])
    if kind == "twice":
        name = draw(st.sampled_from(names))
        original = arrays[name]
        other = draw(st.sampled_from(["same", "changed"]))
        again = original if other == "same" else (original[::-1].copy() if original.ndim else
                                                  np.array(str(original[()]) + "0"))
        at = draw(st.integers(0, len(members)))
        return f"{name} twice ({other})", _zip(members[:at] + [(name, _npy(again))] + members[at:])
    if kind in ("scores", "bits"):
        key = "scores" if kind == "scores" else "member"
        values = arrays[key].astype(np.float64)
        i = draw(st.integers(0, values.size - 1))
        values[i] = draw(st.sampled_from([np.nan, np.inf, -np.inf] if kind == "scores" else [2.0, -1.0, 0.5]))
        return f"{key}[{i}] = {values[i]}", _zip([(k, _npy(values) if k == key else v) for k, v in members])
    if kind == "preregistration":
        detail, bad = draw(json_defect(json.loads(str(arrays["preregistration"][()]))))
        return f"preregistration: {detail}", _zip(
            [(k, _npy(np.array(bad)) if k == "preregistration" else v) for k, v in members])
    if kind == "garbage":
        data = draw(st.sampled_from([b"not a zip", b"PK\x03\x04" + b"\0" * 40, b"\x93NUMPY" + b"\0" * 100]))
        return f"garbage {data[:12]!r}", data
    valid = base["npz"]
    cut = draw(st.integers(0, len(valid) - 1))
    return f"truncated at {cut} of {len(valid)}", valid[:cut]


@functools.cache
def scores_base(ext: str, id_type: str = "str") -> dict:
    """A valid scores file of 8 canaries with a preregistration (k₊ = 2): {"csv" or "npz": its bytes, "arrays":
    the .npz arrays}."""
    from audits import canary as cn
    from audits.scores_file import write_scores_file

    m, salt = 8, bytes(range(32))
    signs = np.array([1, -1, -1, 1, 1, -1, 1, -1])
    ids = list(range(3, 3 + m)) if id_type == "int" else [f"c{i}" for i in range(m)]
    commitment = cn.commit(signs, ids, salt)
    prereg = cn.Preregistration(m=m, delta=1e-5, confidence=0.95, selection="explicit", k_plus=2, k_minus=0,
                                commitment=commitment, tie_break_seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_scores_file(Path(tmp) / f"s.{ext}", np.linspace(0.05, 0.95, m), signs, canary_ids=ids, salt=salt,
                                 preregistration=prereg)
        data = path.read_bytes()
    out = {ext: data}
    if ext == "npz":
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            out["arrays"] = {k: npz[k] for k in npz.files}
    return out


@functools.cache
def key_files() -> dict[str, bytes]:
    """An ed25519 key pair (PEM private, PEM public, OpenSSH public), the private key encrypted, and an RSA key: the
    valid keys of --sign and --trust and the wrong ones their defects draw."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    key = ed25519.Ed25519PrivateKey.generate()
    pem, pkcs8 = ser.Encoding.PEM, ser.PrivateFormat.PKCS8
    return {"private": key.private_bytes(pem, pkcs8, ser.NoEncryption()),
            "public": key.public_key().public_bytes(pem, ser.PublicFormat.SubjectPublicKeyInfo),
            "ssh-public": key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH),
            "encrypted": key.private_bytes(pem, pkcs8, ser.BestAvailableEncryption(b"passphrase")),
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=1024 + 1024)
            .private_bytes(pem, pkcs8, ser.NoEncryption())}


def _key_defect(draw, base: bytes) -> tuple[str, bytes]:
    """A file that is not the ed25519 key of its side: truncated, the other side's key, encrypted, RSA, bit-flipped."""
    keys = key_files()
    other = keys["public"] if base == keys["private"] else keys["private"]
    name = draw(st.sampled_from(("truncated", "other side", "encrypted", "rsa", "flipped", "zeros")))
    data = {"truncated": base[: len(base) // 2], "other side": other, "encrypted": keys["encrypted"],
            "rsa": keys["rsa"], "flipped": base.replace(b"M", b"N", 1), "zeros": bytes(len(base))}[name]
    return name, data


# the draw ------------------------------------------------------------------------------------------------------------


def _kinds(inp: Input, valid_ok: bool) -> list[str]:
    kinds = [k for k in NOT_REGULAR if (k != "device-node" or can_make_device_nodes())
             and (k != "device-path" or inp.member is None)]
    if valid_ok or not inp.follows_links:                   # a link the command follows is a valid file
        kinds.append("link-to-valid")
    if inp.limit is not None:
        kinds.append("oversized")
    if inp.format != "opaque":
        kinds += ["empty", "defect", "defect"]
    if valid_ok:
        kinds.append("valid")
    return kinds


@st.composite
def hostile_inputs(draw, inp: Input, valid_ok: bool = True) -> HostileInput:
    """A drawn file for `inp` (module docstring); with `valid_ok` False, never one the command must accept."""
    kind = draw(st.sampled_from(_kinds(inp, valid_ok)))
    if kind in NOT_REGULAR:
        return HostileInput(inp, kind, device=draw(st.sampled_from(DEVICES)))
    if kind == "link-to-valid":
        return HostileInput(inp, kind, valid=inp.follows_links)
    if kind == "valid":
        return HostileInput(inp, kind, data=inp.valid_bytes(), valid=True)
    if kind == "oversized":
        limit = LIMITS[inp.limit]
        size = draw(st.sampled_from([limit + 1, 2 * limit, 1 << 40]))
        return HostileInput(inp, kind, f"{size} bytes, limit {limit}", size=size)
    if kind == "empty":
        data = draw(st.sampled_from([b"", b"\n", b"   \n"])) if inp.format != "npz" else b""
        return HostileInput(inp, kind, repr(data), data=data)
    base = inp.make()
    if inp.format == "json":
        if draw(st.integers(0, 3)) == 0:
            detail, data = draw(_bytes_defect(emit(base).encode("utf-8")))
        else:
            detail, text = draw(json_defect(base))
            data = text.encode("utf-8")
    elif inp.format == "csv":
        detail, data = draw(_csv_defect(base))
    elif inp.format == "npz":
        detail, data = draw(_npz_defect(base))
    elif inp.format == "key":
        detail, data = _key_defect(draw, base)
    else:                                                    # "gguf": a file shorter than its magic, or another magic
        data = draw(st.sampled_from([base[:3], b"GGUG" + base[4:], b"\0" * len(base), b"ggml" + base[4:]]))
        detail = f"starts {data[:4]!r}"
    return HostileInput(inp, "defect", detail, data=data)


# --- output directories ----------------------------------------------------------------------------------------------

PLANT_KINDS = ("link-to-victim", "link-to-victim-dir", "dangling-link", "fifo", "device-node", "socket",
               "directory", "file")
WHOLE_KINDS = ("fifo", "device-path", "socket", "link-to-victim", "dangling-link", "link-loop", "file")
ARTIFACT_NAMES = ("curve.png", "run-1.json", "private/auditor_log.jsonl", "private/reveal.json", "scores.png",
                  "bound_vs_m.png", "selection_run.json", "compare.json", "plots/a/b.png")
PART = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12).filter(
    lambda part: part not in (".", "..") and not part.startswith(".privcheck-"))


def _listable(name: str) -> bool:
    """A name a manifest may list for this draw: not a directory privcheck owns taken as a file, no file privcheck
    owns taken as a directory."""
    parts = name.split("/")
    return name not in OWNED_DIRECTORIES and not any(p in OWNED_FILES for p in parts[:-1])


@dataclass(frozen=True)
class Plant:
    """An output directory (`name` is None: the output path itself) with `kind` planted at `name`, and the names a
    manifest in it lists; `needs` are (name, bytes) the command reads there (report: verification.json)."""
    name: str | None
    kind: str
    manifest: tuple = ()
    expected: str = "file"               # what privcheck writes at `name`: "file" or "dir"
    needs: tuple = field(default=(), repr=False)
    device: str = "/dev/null"
    taken: bool = False                  # `name` is one whose presence the command refuses (one run per directory)

    @property
    def valid(self) -> bool:
        return self.name is not None and not self.taken and \
            self.kind == {"file": "file", "dir": "directory"}[self.expected]

    def path(self, root: Path) -> Path:
        return root / "out" if self.name is None else root / "out" / self.name

    def build(self, root: Path, victim: Victim) -> str:
        out = root / "out"
        if self.name is None:
            return self._whole(out, victim)
        out.mkdir()
        for name, data in self.needs:
            (out / name).write_bytes(data)
        if self.manifest:
            (out / MANIFEST_NAME).write_text(json.dumps({"heads": {"audit.json": list(self.manifest)}}))
        path = out / self.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():               # a needed file or the manifest, planted over
            path.unlink()
        kind = self.kind
        if kind == "link-to-victim":
            path.symlink_to(victim.file)
        elif kind == "link-to-victim-dir":
            path.symlink_to(victim.dir, target_is_directory=True)
        elif kind == "dangling-link":
            path.symlink_to(victim.dir / "not-there")
        elif kind == "device-node":
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(*DEVICE_NUMBERS[self.device]))
        elif kind == "file":
            path.write_bytes(dict(self.needs).get(self.name, b"mine\n"))
        else:
            _not_regular(path, kind, self.device)
        return os.fspath(out)

    def _whole(self, out: Path, victim: Victim) -> str:
        if self.kind == "link-to-victim":
            out.symlink_to(victim.file)
        elif self.kind == "dangling-link":
            out.symlink_to(victim.dir / "not-there")
        elif self.kind == "file":
            out.write_bytes(b"mine\n")
        else:
            instead = _not_regular(out, self.kind, self.device)
            return os.fspath(out) if instead is None else instead
        return os.fspath(out)


@st.composite
def planted_outputs(draw, needs: tuple = (), valid_ok: bool = True, taken: tuple = ()) -> Plant:
    """A drawn output directory (module docstring); `needs`: (name, bytes) of files the command reads there; with
    `valid_ok` False, never one the command must accept; `taken`: names whose presence the command refuses (a
    previous run's log), which ARTIFACT_NAMES may list too."""
    device = draw(st.sampled_from(DEVICES))
    if draw(st.integers(0, 5)) == 0:
        return Plant(None, draw(st.sampled_from(WHOLE_KINDS)), device=device)
    if draw(st.booleans()):
        name = draw(st.sampled_from(OWNED_FILES + OWNED_DIRECTORIES))
        expected = "dir" if name in OWNED_DIRECTORIES else "file"
        listed = draw(st.sampled_from([(), ("curve.png",)]))
    else:
        listed = draw(st.one_of(st.sampled_from(ARTIFACT_NAMES), st.lists(PART, min_size=1, max_size=3)
                                .map("/".join)).filter(_listable))
        parts = listed.split("/")
        depth = draw(st.integers(1, len(parts)))           # the entry is planted at parts[:depth]
        expected = "file" if depth == len(parts) else "dir"
        name, listed = "/".join(parts[:depth]), (listed,)
    benign = {"file": "file", "dir": "directory"}[expected]
    kinds = [k for k in PLANT_KINDS if (k != "device-node" or can_make_device_nodes()) and (valid_ok or k != benign)]
    return Plant(name, draw(st.sampled_from(kinds)), listed, expected, needs, device, taken=name in taken)


# --- a valid artifact for `privcheck report` -------------------------------------------------------------------------


def tiny_suite(seed=None):
    """One passing check and one claim: the suite of `verification_document`."""
    from privcheck.artifacts import CheckResult, Claim, SuiteResult

    result = SuiteResult(name="tiny")
    result.checks.append(CheckResult(name="one_plus_one", suite="tiny", passed=True, observed=2, expected=2,
                                     tolerance=0, reference="arithmetic"))
    result.claims.append(Claim(mechanism="m", epsilon=1.0, delta=1e-5, neighboring="add_remove", assumptions=("a",)))
    return result


@functools.cache
def verification_document() -> dict:
    """A sealed, schema-valid verification artifact (the suite `tiny_suite`)."""
    from unittest import mock

    import privcheck.verify as verify

    registry = {"tiny": "tests.hostile_files:tiny_suite"}
    with mock.patch.object(verify, "BUILTIN_SUITES", registry), \
            mock.patch.object(verify, "available_suites", lambda: registry):
        return verify.run_verification(["tiny"])
