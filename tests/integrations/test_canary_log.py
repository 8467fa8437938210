"""privcheck.integrations.canary_log: the binary auditor log of the Opacus gradient canaries, written record by record
and read back by audits.visibility.read_auditor_log (round trip, and every defect refused with InvalidParameter)."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from audits import gradient_log
from audits.visibility import read_auditor_log
from privcheck.errors import CanariesNotObserved, InvalidParameter, PrivcheckError
from privcheck.inputs import LIMITS
from privcheck.integrations.canary_log import MAGIC, CanaryLogWriter, parse_canary_log

RESERVED = (5, 17, 2)
C = 1.5


def _write(path, rounds, *, reserved=RESERVED, mask_real=True):
    """Write `rounds` = [(U, included or None)] as rounds 1, 2, ... with σC = 0.75·t and divisor 4."""
    log = CanaryLogWriter(path, reserved, clip_norm=C, mask_real=mask_real)
    for t, (U, inc) in enumerate(rounds, 1):
        log.write_round(t, np.asarray(U, dtype=np.float64), sigma_C=0.75 * t, divisor=4.0,
                        included=None if inc is None else np.asarray(inc, dtype=bool))


def _sizes(m: int, rounds: int) -> tuple[int, int]:
    """(header bytes, record bytes) by the documented layout: magic, version u16, m u32, flags u32, C f64, m i64,
    CRC u32; a record: t i64, σC f64, divisor f64, reported u8, m f64, m u8, CRC u32."""
    return len(MAGIC) + 2 + 4 + 4 + 8 + 8 * m + 4, 8 + 8 + 8 + 1 + 8 * m + m + 4


def test_round_trip_gives_the_json_lines_entries(tmp_path):
    rng = np.random.default_rng(7)
    U = rng.normal(size=(3, 3)) * np.array([1.0, 1e-300, 1e300])        # extreme magnitudes survive exactly
    incs = [[1, 0, 1], None, [0, 0, 1]]                                   # round 2: the hook did not run
    path = tmp_path / "log.bin"
    _write(path, list(zip(U, incs)))
    head, rec = _sizes(3, 3)
    assert os.path.getsize(path) == head + 3 * rec                        # the header once, whole records
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    entries = read_auditor_log(path)
    expected = []
    for t, (u, inc) in enumerate(zip(U, incs), 1):
        expected.append({"kind": "round", "t": t, "reserved": [5, 17, 2], "U": [float(x) for x in u],
                         "sigma_C": 0.75 * t, "divisor": 4.0})
        expected.append({"kind": "diagnostics", "t": t, "diagnostics": {
            "canary_included": [] if inc is None else inc,
            "canary_pre_clip_norms": {} if inc is None else {f"dirac:{j}": C for j, b in zip(RESERVED, inc) if b},
            "cross_talk_reserved": None, "real_records_masked_on_reserved": True}})
    assert entries == expected
    parsed = parse_canary_log(path.read_bytes(), str(path))
    assert parsed.reserved == RESERVED and parsed.clip_norm == C and parsed.mask_real is True
    assert np.array_equal(parsed.records["U"], U) and parsed.records["t"].tolist() == [1, 2, 3]


def test_every_truncation_and_every_corrupted_byte_is_refused(tmp_path):
    """Cutting the file anywhere but at a record boundary, or flipping any single byte (CRC-32 detects every
    single-byte error; a flip inside the magic makes it a JSON-lines log that does not parse), is an
    InvalidParameter naming log_path, never a traceback or a silently different log."""
    path = tmp_path / "log.bin"
    _write(path, [([0.5, -1.0, 2.0], [1, 0, 1]), ([0.0, 1.0, -3.0], [0, 1, 1])])
    data = path.read_bytes()
    head, rec = _sizes(3, 2)
    whole = {0: 0, head: 0, head + rec: 2}                       # length -> entries of a complete shorter log
    bad = tmp_path / "bad.bin"
    for cut in range(len(data)):
        bad.write_bytes(data[:cut])
        if cut in whole:
            assert len(read_auditor_log(bad)) == whole[cut]
            continue
        with pytest.raises(InvalidParameter, match="log_path") as err:
            read_auditor_log(bad)
        assert "allowed range is" in str(err.value), cut
    for at in range(len(data)):
        bad.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
        with pytest.raises(InvalidParameter, match="log_path"):
            read_auditor_log(bad)
    bad.write_bytes(data + data[-rec:-1])                        # a partial record after the last whole one
    with pytest.raises(InvalidParameter, match="partial record after 2 whole ones"):
        read_auditor_log(bad)
    bad.write_bytes(data[:len(MAGIC)] + struct.pack("<H", 2) + data[len(MAGIC) + 2:])
    with pytest.raises(InvalidParameter, match="version 2"):
        read_auditor_log(bad)


def test_an_oversized_log_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.bin"
    with open(path, "wb") as fh:
        fh.write(MAGIC)
        fh.truncate(LIMITS["auditor_log"] + 1)                  # sparse: no disk, and never read
    with pytest.raises(InvalidParameter, match=f"at most {LIMITS['auditor_log']} bytes"):
        read_auditor_log(path)


def test_a_broken_json_lines_log_is_refused_clearly(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"kind": "round", "t": 1}\n{"kind": "diagn')
    with pytest.raises(InvalidParameter, match="line 2"):
        read_auditor_log(path)
    path.write_text('{"kind": "round", "t": 1}\n[1, 2]\n')
    with pytest.raises(InvalidParameter, match="line 2: a JSON list"):
        read_auditor_log(path)


def test_the_writer_refuses_a_path_holding_a_log(tmp_path):
    path = tmp_path / "old.bin"
    _write(path, [([1.0, 2.0, 3.0], [1, 1, 0])])
    with pytest.raises(InvalidParameter, match="no log yet"):
        CanaryLogWriter(path, RESERVED, clip_norm=C, mask_real=True)
    (tmp_path / "empty.bin").write_bytes(b"")
    CanaryLogWriter(tmp_path / "empty.bin", RESERVED, clip_norm=C, mask_real=True)     # an empty file is fine
    assert not (tmp_path / "never.bin").exists()
    CanaryLogWriter(tmp_path / "never.bin", RESERVED, clip_norm=C, mask_real=True)
    assert not (tmp_path / "never.bin").exists()                 # nothing written before the first round


def test_analyse_refuses_binary_logs_like_json_ones(tmp_path):
    """The audit reads the binary log through the same checks: a complete log is scored, a truncated one is an
    InvalidParameter, a log with no round is CanariesNotObserved, a log missing rounds is a PrivcheckError."""
    audit = gradient_log.prepare(dim=40, canaries=8, sampling_rate=0.5, noise_multiplier=1.0, steps=2,
                                 clip_norm=1.0, delta=1e-5, plan_sims=5, seed=1, search_canaries=False)
    J = audit.design.reserved
    rounds = [([0.25, -1.0] * 4, [0, 1, 0, 0, 0, 0, 1, 0]) for _ in range(2)]
    path = tmp_path / "ok.bin"
    log = CanaryLogWriter(path, J, clip_norm=1.0, mask_real=True)
    for t, (U, inc) in enumerate(rounds, 1):
        log.write_round(t, np.asarray(U), sigma_C=1.0, divisor=4.0, included=np.asarray(inc, dtype=bool))
    report = gradient_log.analyse(path, audit)
    assert report.canaries["m"] == 8 and report.diagnostics["realized_inclusions_logged"] is True
    data = path.read_bytes()
    head, rec = _sizes(8, 2)
    (tmp_path / "cut.bin").write_bytes(data[:-3])
    with pytest.raises(InvalidParameter, match="truncated"):
        gradient_log.analyse(tmp_path / "cut.bin", audit)
    (tmp_path / "header.bin").write_bytes(data[:head])
    with pytest.raises(CanariesNotObserved, match="round line"):
        gradient_log.analyse(tmp_path / "header.bin", audit)
    (tmp_path / "one.bin").write_bytes(data[:head + rec])
    with pytest.raises(PrivcheckError, match="expected rounds 1..2"):
        gradient_log.analyse(tmp_path / "one.bin", audit)
