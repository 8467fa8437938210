"""The binary auditor log of Dirac gradient canaries (written by `privcheck.integrations.opacus.GradientCanaries`,
read by `audits.visibility.read_auditor_log`; docs/integrations/opacus.md, "Audit an Opacus model").

One fixed-size record per optimizer step replaces the two JSON lines a step used to cost (≈ 1 ms of `json.dumps` at
m = 1,000). Layout, little-endian, no padding:

* header, written with the first record: `MAGIC`, then version u16, m u32, flags u32 (bit 0: real records masked
  on the reserved coordinates), the clip norm C f64, the m reserved coordinates i64, and a CRC-32 of everything
  after `MAGIC`;
* record (`record_dtype(m)`): t i64, σC f64, divisor f64, `reported` u8 (1 when the step that wrote U_t[J] ran the
  hooked clip_and_accumulate, so its inclusion bits are known), U_t[J] as m f64, the realised inclusion bits as m
  u8, and a CRC-32 of the record's other bytes.

Each record is appended through `privcheck.integrations.auditor_log.append_bytes` (mode 0600, O_APPEND,
O_NOFOLLOW, one write), so an interrupted run leaves every finished round readable and at most one partial record,
which the reader refuses. `parse_canary_log` checks the header, the size (whole records only) and every CRC before
it returns anything; every defect is an `InvalidParameter` naming `log_path`. `CanaryLog.entries()` gives the same
`round` and `diagnostics` entries the JSON-lines log held, so the audit reads both through one path.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from privcheck.errors import InvalidParameter
from privcheck.integrations.auditor_log import append_bytes, check_log_path

__all__ = ["MAGIC", "VERSION", "CanaryLog", "CanaryLogWriter", "canary_ids", "is_canary_log", "parse_canary_log",
           "record_dtype"]

MAGIC = b"\x89privcheck-canary-log\n"   # a non-UTF-8 first byte: never the start of a JSON-lines log
VERSION = 1
_HEAD = struct.Struct("<HIId")          # version, m, flags, clip norm
_ROUND = struct.Struct("<qddB")         # t, σC, divisor, reported
_CRC = struct.Struct("<I")
_MASKED = 1
_F8, _I8 = np.dtype("<f8"), np.dtype("<i8")


def canary_ids(coordinates: Sequence[int]) -> tuple[str, ...]:
    """The public ids "dirac:<j>" of the canaries on `coordinates` (the ids a membership commitment binds)."""
    return tuple(f"dirac:{int(j)}" for j in coordinates)


def record_dtype(m: int) -> np.dtype:
    """The packed numpy dtype of one round record of m canaries (module docstring)."""
    return np.dtype([("t", "<i8"), ("sigma_C", "<f8"), ("divisor", "<f8"), ("reported", "u1"),
                     ("U", "<f8", (m,)), ("included", "u1", (m,)), ("crc", "<u4")])


def _header(reserved: np.ndarray, clip_norm: float, mask_real: bool) -> bytes:
    body = _HEAD.pack(VERSION, reserved.size, _MASKED if mask_real else 0, clip_norm) + reserved.tobytes()
    return MAGIC + body + _CRC.pack(zlib.crc32(body))


class CanaryLogWriter:
    """Appends one record per round to the log at `path`, which must not hold a log yet (each run's rounds start
    at t = 1; a stale log of another run would otherwise be read as this one's)."""

    def __init__(self, path, reserved: Sequence[int], *, clip_norm: float, mask_real: bool):
        self.path = check_log_path(path)
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_size):
            raise InvalidParameter("log_path", self.path, "a path with no log yet (a new or empty regular file): "
                                                          "each run's canary log starts at round 1")
        self.reserved = np.ascontiguousarray(reserved, dtype=_I8)
        self._header = _header(self.reserved, float(clip_norm), bool(mask_real))
        self._absent = bytes(self.reserved.size)

    def write_round(self, t: int, U: np.ndarray, *, sigma_C: float, divisor: float,
                    included: np.ndarray | None) -> None:
        """Append round t: U_t[J] (m float64) and the realised inclusion bits (m bools), or None when the step
        did not run the hooked clip_and_accumulate (no inclusions known). The header goes with the first record."""
        inc = self._absent if included is None else np.asarray(included, dtype=np.bool_).tobytes()   # 0/1 bytes
        body = _ROUND.pack(t, sigma_C, divisor, included is not None) + np.asarray(U, dtype=_F8).tobytes() + inc
        append_bytes(self.path, body + _CRC.pack(zlib.crc32(body)), header=self._header)


@dataclass(frozen=True, eq=False)
class CanaryLog:
    """A parsed binary log: the header's reserved coordinates, clip norm and masking flag, and the records."""

    reserved: tuple[int, ...]
    clip_norm: float
    mask_real: bool
    records: np.ndarray = field(repr=False)      # record_dtype(m), one per logged round, in file order

    def entries(self) -> list[dict]:
        """The log as the JSON-lines log's entries: per record a `round` entry (t, reserved, U, sigma_C, divisor)
        and a `diagnostics` entry (canary_included: m bits, or [] when not reported; the included canaries'
        pre-clip norm C; masking flag)."""
        reserved, ids = list(self.reserved), canary_ids(self.reserved)
        out: list[dict] = []
        for rec in self.records:
            t, reported = int(rec["t"]), bool(rec["reported"])
            inc = rec["included"].astype(np.int64).tolist() if reported else []
            out.append({"kind": "round", "t": t, "reserved": reserved, "U": rec["U"].tolist(),
                        "sigma_C": float(rec["sigma_C"]), "divisor": float(rec["divisor"])})
            out.append({"kind": "diagnostics", "t": t, "diagnostics": {
                "canary_included": inc,
                "canary_pre_clip_norms": {ids[k]: self.clip_norm for k in np.flatnonzero(inc).tolist()},
                "cross_talk_reserved": None, "real_records_masked_on_reserved": self.mask_real}})
        return out


def is_canary_log(data: bytes) -> bool:
    """Whether `data` starts as a binary canary log (its first bytes are `MAGIC`)."""
    return bytes(data[:len(MAGIC)]) == MAGIC


def _refuse(path: str, why: str) -> InvalidParameter:
    return InvalidParameter("log_path", f"{path} ({why})", f"a complete privcheck canary log, version {VERSION}")


def parse_canary_log(data: bytes, path: str = "auditor log") -> CanaryLog:
    """The log in `data` (the whole file, already size-bounded by the caller); InvalidParameter naming `log_path` on
    a wrong magic or version, a truncated header or record, or a CRC that does not match."""
    if not is_canary_log(data):
        raise _refuse(path, "not a binary canary log: wrong magic bytes")
    at = len(MAGIC)
    if len(data) < at + _HEAD.size:
        raise _refuse(path, f"truncated header: {len(data)} bytes")
    version, m, flags, clip_norm = _HEAD.unpack_from(data, at)
    if version != VERSION:
        raise _refuse(path, f"version {version}")
    end = at + _HEAD.size + 8 * m
    if m < 1 or len(data) < end + _CRC.size:
        raise _refuse(path, f"truncated header: {len(data)} bytes for m = {m}")
    if zlib.crc32(data[at:end]) != _CRC.unpack_from(data, end)[0] or flags & ~_MASKED:
        raise _refuse(path, "corrupt header: CRC mismatch")
    reserved = np.frombuffer(data, dtype=_I8, count=m, offset=at + _HEAD.size)
    dtype = record_dtype(m)
    start = end + _CRC.size
    body = len(data) - start
    if body % dtype.itemsize:
        raise _refuse(path, f"truncated: {body % dtype.itemsize} bytes of a partial record after "
                            f"{body // dtype.itemsize} whole ones (the writer was interrupted)")
    records = np.frombuffer(data, dtype=dtype, offset=start)
    size, view = dtype.itemsize - _CRC.size, memoryview(data)
    for k in range(records.size):
        lo = start + k * dtype.itemsize
        if zlib.crc32(view[lo:lo + size]) != int(records["crc"][k]):
            raise _refuse(path, f"corrupt record {k + 1} of {records.size}: CRC mismatch")
    if records.size and (records["reported"].max() > 1 or records["included"].max() > 1):
        raise _refuse(path, "inclusion bits other than 0/1")
    return CanaryLog(tuple(int(j) for j in reserved), float(clip_norm), bool(flags & _MASKED), records)
