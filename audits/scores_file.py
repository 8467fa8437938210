"""Scores files: a one-run audit of any model from its canary scores and the revealed, committed membership.

A scores file (docs/audit_your_model.md, "The scores file") holds, for m canaries, each canary's id, its score
(higher = "looks included") and its revealed membership bit (1 = included in training, 0 = left out), with the
commitment to the membership made before training and the salt it was made with
(`audits.canary.commit`: sha256(salt ‖ ids ‖ bits)). Two encodings, chosen by the extension:

* `.csv`: header lines `# key: value`, then the columns `canary_id,score,member` (exactly these). Header keys:
  `format` (`privcheck.scores/1`), `commitment` (`sha256:<64 hex>`), `salt` (64 hex digits, 32 bytes), and
  optionally `id_type` (`str`, default, or `int`: how the ids were given to `commit`), `canary_type`, `score`
  (free-text names copied into the report) and `preregistration` (the one-line JSON of
  `audits.canary.Preregistration.to_json()`). Other `# key: value` keys are refused (a typo must not drop a
  field); a comment line without a colon is free text.
* `.npz` (`numpy.savez`, read with `allow_pickle=False`): arrays `canary_ids` (str or int), `scores` (float),
  `member` (0/1), 0-d strings `commitment` and `salt`, optionally `format`, `canary_type`, `score`,
  `preregistration`; any other array is refused.

Guarantees: `load_scores` checks every field (InvalidParameter naming `scores.<field>` and its allowed values)
and recomputes the commitment from the ids, the bits and the salt before anything else reads the bits; a mismatch
is refused. `audit_scores_file` validates its own parameters first, then loads, then runs
`audits.statistics.one_run.from_scores` (the one implementation of the statistics) with the pre-registered explicit
guess rule (k₊, k₋). `write_scores_file` writes such a file atomically (`privcheck.artifacts.write_atomic`, mode 0600).

What the commitment does and does not prove: it binds the membership bits (fixed before training, never chosen
after seeing scores). It cannot show that the scores were computed without the bits; that is the user's part of
the protocol, and the report says so (randomness "external": the independence of the coins is an assumption).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import numbers
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from audits import canary as cn
from privcheck import validation as val
from privcheck.errors import InvalidParameter
from privcheck.inputs import csv_rows, npz_members, open_input, parse_json, read_input

__all__ = ["COLUMNS", "EXTENSIONS", "FORMAT", "NPZ_OPTIONAL", "NPZ_REQUIRED", "ScoresFile", "audit_scores_file",
           "load_scores", "write_scores_file"]

FORMAT = "privcheck.scores/1"
COLUMNS = ("canary_id", "score", "member")
EXTENSIONS = (".csv", ".npz")
HEADER_REQUIRED = ("commitment", "salt")
HEADER_OPTIONAL = ("format", "id_type", "canary_type", "score", "preregistration")
NPZ_REQUIRED = ("canary_ids", "scores", "member", "commitment", "salt")
NPZ_OPTIONAL = ("format", "canary_type", "score", "preregistration")
ID_TYPES = ("str", "int")
_COMMITMENT = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEADER = re.compile(r"^#\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*:\s?(.*)$")


@dataclass(frozen=True, eq=False)
class ScoresFile:
    """A loaded, verified scores file: the membership matches `commitment` (checked by `load_scores`)."""

    path: Path
    canary_ids: tuple
    scores: np.ndarray               # read-only float64[m], finite
    member: np.ndarray               # read-only int8[m], 1 = included, 0 = left out
    commitment: str
    salt: bytes
    preregistration: cn.Preregistration | None = None
    canary_type: str | None = None
    score_name: str | None = None
    sha256: str = ""                 # of the file's bytes, recorded in the report's diagnostics

    @property
    def m(self) -> int:
        return int(self.scores.size)

    @property
    def signs(self) -> np.ndarray:
        """The membership as ±1 (the encoding of `audits.statistics.one_run`)."""
        return cn.as_signs(self.member)


# ---------------------------------------------------------------------------------------------------------------------
# Reading.


def _extension(path) -> tuple[Path, str]:
    if isinstance(path, bool) or not isinstance(path, (str, Path)) or not str(path).strip():
        raise InvalidParameter("scores", path, "a path to a .csv or .npz scores file")
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in EXTENSIONS:
        raise InvalidParameter("scores", str(path), "a file ending in .csv or .npz")
    return path, ext


def _text(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise InvalidParameter(f"scores.{name}", value, "a non-empty one-line string")
    return value.strip()


def _commitment(value) -> str:
    if not isinstance(value, str) or not _COMMITMENT.match(value.strip()):
        raise InvalidParameter("scores.commitment", value, "'sha256:' followed by 64 lower-case hex digits")
    return value.strip()


def _salt(value) -> bytes:
    text = value.strip() if isinstance(value, str) else value
    try:
        salt = bytes.fromhex(text)
    except (TypeError, ValueError):
        salt = b""
    if len(salt) != cn.SALT_BYTES:
        raise InvalidParameter("scores.salt", value, f"{2 * cn.SALT_BYTES} hex digits ({cn.SALT_BYTES} bytes)")
    return salt


def _format(value) -> None:
    if value is not None and value != FORMAT:
        raise InvalidParameter("scores.format", value, repr(FORMAT))


def _preregistration(value, commitment: str) -> cn.Preregistration | None:
    if value is None:
        return None
    data = parse_json(value, "scores.preregistration") if isinstance(value, str) else None
    if not isinstance(data, dict):
        raise InvalidParameter("scores.preregistration", value, "the JSON object of Preregistration.to_json()")
    try:
        data["family"] = tuple(tuple(pair) for pair in data.get("family") or ())
        prereg = cn.Preregistration(**data)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, InvalidParameter):
            raise InvalidParameter(f"scores.preregistration.{exc.name}", exc.value, exc.allowed) from None
        raise InvalidParameter("scores.preregistration", sorted(data),
                               "the keys of Preregistration.to_json()") from None
    if prereg.commitment != commitment:
        raise InvalidParameter("scores.preregistration.commitment", prereg.commitment,
                               f"the file's commitment {commitment}")
    return prereg


def _member(values, labels) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int8)
    for i, v in enumerate(values):
        if v not in (0, 1):
            raise InvalidParameter("scores.member", f"{v!r} at {labels(i)}", "0 (left out) or 1 (included)")
        out[i] = v
    return out


def _read_csv(data: bytes) -> dict:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidParameter("scores", "undecodable bytes", "a UTF-8 text CSV file") from None
    lines = text.splitlines()
    header: dict[str, str] = {}
    body_start = len(lines)
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            body_start = i
            break
        found = _HEADER.match(line)
        if found is None:
            continue                                    # free-text comment
        key, value = found.group(1), found.group(2).strip()
        if key not in HEADER_REQUIRED + HEADER_OPTIONAL:
            raise InvalidParameter("scores.header", key, "keys among " + ", ".join(HEADER_REQUIRED + HEADER_OPTIONAL))
        if key in header:
            raise InvalidParameter(f"scores.{key}", "given twice", "one header line per key")
        header[key] = value
    rows = csv_rows("\n".join(lines[body_start:]), "scores")
    rows = [r for r in rows if r]                       # blank lines
    if not rows:
        raise InvalidParameter("scores.columns", None, "a header row " + ",".join(COLUMNS))
    columns = tuple(c.strip() for c in rows[0])
    if columns != COLUMNS:
        missing = [c for c in COLUMNS if c not in columns]
        raise InvalidParameter("scores.columns", list(columns),
                               "exactly " + ",".join(COLUMNS) + (f" (missing {', '.join(missing)})" if missing else ""))
    body = rows[1:]
    if not body:
        raise InvalidParameter("scores", "no rows", "one row per canary")
    for n, r in enumerate(body, start=2):
        if len(r) != len(COLUMNS):
            raise InvalidParameter("scores.columns", f"{len(r)} fields on data row {n - 1}", f"{len(COLUMNS)} fields")
    id_type = header.get("id_type", "str")
    if id_type not in ID_TYPES:
        raise InvalidParameter("scores.id_type", id_type, "str or int")
    ids = [r[0].strip() for r in body]
    if id_type == "int":            # the number grammar: int() also takes '٣', '３' or '0_3' for 3 (and fails on '³')
        try:
            ids = [val.integer_text("scores.canary_id", x) for x in ids]
        except InvalidParameter as exc:
            row = ids.index(exc.value) + 1
            raise InvalidParameter("scores.canary_id", f"{exc.value!r} on data row {row}",
                                   f"integers (id_type: int) written as {exc.allowed}") from None
    scores = []
    for n, r in enumerate(body, start=1):
        try:
            scores.append(val.real_text("scores.score", r[1].strip()))
        except InvalidParameter:
            raise InvalidParameter("scores.score", f"{r[1]!r} on data row {n}", "a finite number") from None
    members = []
    for n, r in enumerate(body, start=1):
        token = r[2].strip()
        members.append(int(token) if token in ("0", "1") else token)
    for key in HEADER_REQUIRED:
        if key not in header:
            raise InvalidParameter(f"scores.{key}", None, f"a '# {key}: ...' header line")
    return {"ids": ids, "scores": scores, "member": members, "member_where": lambda i: f"data row {i + 1}",
            **{k: header.get(k) for k in HEADER_REQUIRED + HEADER_OPTIONAL}}


def _scalar_text(arrays, key: str):
    if key not in arrays:
        return None
    arr = arrays[key]
    if arr.ndim != 0 or arr.dtype.kind != "U":
        raise InvalidParameter(f"scores.{key}", f"array of dtype {arr.dtype} and shape {arr.shape}", "a 0-d string")
    return str(arr[()])


def _read_npz(path: Path, fh) -> dict:
    from audits.statistics.pvalue import MAX_CANARIES

    npz_members(fh, "scores", MAX_CANARIES)         # shapes and dtypes from the headers, before any array is read
    fh.seek(0)
    try:
        with np.load(fh, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as exc:            # object arrays (pickles) and non-npz bytes
        raise InvalidParameter("scores", str(path), f"an .npz of plain arrays, no pickles ({exc})") from None
    except (OSError, EOFError, zipfile.BadZipFile, RuntimeError) as exc:
        raise InvalidParameter("scores", str(path), f"a readable .npz file ({exc.__class__.__name__})") from None
    unknown = sorted(set(arrays) - set(NPZ_REQUIRED + NPZ_OPTIONAL))
    if unknown:
        raise InvalidParameter("scores.arrays", unknown, "arrays among " + ", ".join(NPZ_REQUIRED + NPZ_OPTIONAL))
    missing = [k for k in NPZ_REQUIRED if k not in arrays]
    if missing:
        raise InvalidParameter("scores.arrays", sorted(arrays), "also " + ", ".join(missing))
    ids = arrays["canary_ids"]
    if ids.ndim != 1 or ids.dtype.kind not in "Uiu":
        raise InvalidParameter("scores.canary_ids", f"dtype {ids.dtype}, shape {ids.shape}",
                               "a 1-D array of strings or integers")
    ids = [str(x) for x in ids] if ids.dtype.kind == "U" else [int(x) for x in ids]
    scores = arrays["scores"]
    if scores.ndim != 1 or scores.dtype.kind not in "fiu":
        raise InvalidParameter("scores.scores", f"dtype {scores.dtype}, shape {scores.shape}", "a 1-D array of numbers")
    member = arrays["member"]
    if member.ndim != 1 or member.dtype.kind not in "biuf":
        raise InvalidParameter("scores.member", f"dtype {member.dtype}, shape {member.shape}", "a 1-D array of 0/1")
    members = [int(x) if float(x) in (0.0, 1.0) else x.item() for x in member]
    return {"ids": ids, "scores": scores.astype(np.float64).tolist(), "member": members,
            "member_where": lambda i: f"index {i}", "commitment": _scalar_text(arrays, "commitment"),
            "salt": _scalar_text(arrays, "salt"), "id_type": None,
            **{k: _scalar_text(arrays, k) for k in NPZ_OPTIONAL}}


def load_scores(path) -> ScoresFile:
    """Read and verify a `.csv` or `.npz` scores file (module docstring); InvalidParameter on any defect,
    including a membership that does not match the commitment."""
    path, ext = _extension(path)
    if ext == ".csv":
        data = read_input(path, "scores.csv", "scores")
        raw = _read_csv(data)
        digest = hashlib.sha256(data).hexdigest()
    else:
        with open_input(path, "scores.npz", "scores") as fh:
            raw = _read_npz(path, fh)
            fh.seek(0)
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
    _format(raw["format"])
    commitment = _commitment(raw["commitment"])
    salt = _salt(raw["salt"])
    m = len(raw["ids"])
    if len(raw["scores"]) != m or len(raw["member"]) != m:
        raise InvalidParameter("scores", f"{m} ids, {len(raw['scores'])} scores, {len(raw['member'])} bits",
                               "one id, one score and one bit per canary")
    scores = cn.check_scores(raw["scores"], "scores.score").copy()
    scores.setflags(write=False)
    member = _member(raw["member"], raw["member_where"])
    member.setflags(write=False)
    ids = tuple(raw["ids"])
    seen: set = set()
    for x in ids:                   # one pass: a duplicate late in 10⁷ ids is found in linear time
        if x in seen:
            raise InvalidParameter("scores.canary_id", f"{x!r} twice", "distinct canary ids")
        seen.add(x)
    del seen
    if any(isinstance(x, str) and not x for x in ids):
        raise InvalidParameter("scores.canary_id", "''", "non-empty ids")
    # The bits are read by nothing else before they are checked against the commitment made before training.
    if not cn.verify(commitment, member, list(ids), salt):
        raise InvalidParameter("scores.member", f"bits that do not match {commitment}",
                               "the membership committed before training (the same canary ids, bits and salt)")
    prereg = _preregistration(raw["preregistration"], commitment)
    if prereg is not None and prereg.m != m:
        raise InvalidParameter("scores.preregistration.m", prereg.m, f"the file's {m} canaries")
    return ScoresFile(path=path, canary_ids=ids, scores=scores, member=member, commitment=commitment, salt=salt,
                      preregistration=prereg, canary_type=_text("canary_type", raw["canary_type"]),
                      score_name=_text("score", raw["score"]), sha256=digest)


# ---------------------------------------------------------------------------------------------------------------------
# The audit.


def audit_scores_file(path, *, delta: float, confidence: float = 0.95, k_plus: int | None = None,
                      k_minus: int | None = None, eps_nominal: float | None = None, tie_break_seed: int | None = None,
                      power=None, claim=None, score_model=None, plan_sims: int = 200, plan_seed: int | None = None):
    """The one-run audit (`audits.statistics.one_run.from_scores`, explicit guess rule) of a scores file; an
    AuditReport.

    k₊ (top-ranked guessed "included") and k₋ (bottom-ranked guessed "left out", default 0) must be fixed before
    the reveal; with a preregistration in the file they default to its values (and every value the audit uses
    must agree with it: δ, confidence, m, k₊, k₋, tie-break seed). `eps_nominal`: the claimed ε to test.
    `score_model` (a ScoreModel or a string of `audits.statistics.power.parse_score_model`; not with `power`): the
    report's `power` block is the plan of this audit's own rule under that model (`plan_sims` simulated audits,
    seeded by `plan_seed`) and its verdict (`audits.statistics.power.planned_verdict`).
    """
    from audits.statistics.one_run import from_scores
    from audits.statistics.pvalue import MAX_CANARIES

    delta = val.half_open_unit("delta", delta)
    confidence = val.open_unit("confidence", confidence)
    if eps_nominal is not None:
        eps_nominal = val.nonnegative("eps_nominal", eps_nominal)
    for name, value in (("k_plus", k_plus), ("k_minus", k_minus)):
        if value is not None:
            val.count(name, value, 0, MAX_CANARIES)
    if tie_break_seed is not None:
        val.seed("tie_break_seed", tie_break_seed)
    if score_model is not None:
        from audits.statistics.power import parse_score_model
        if power is not None:
            raise InvalidParameter("score_model", score_model, "not given together with power")
        score_model = parse_score_model(score_model)
        plan_sims = val.count("plan_sims", plan_sims)
        if plan_seed is not None:
            val.seed("plan_seed", plan_seed)
    loaded = load_scores(path)
    prereg = loaded.preregistration
    if prereg is not None:
        k_plus = prereg.k_plus if k_plus is None else k_plus
        k_minus = prereg.k_minus if k_minus is None else k_minus
        tie_break_seed = prereg.tie_break_seed if tie_break_seed is None else tie_break_seed
    if k_plus is None:
        raise InvalidParameter("k_plus", None, "an integer >= 0 fixed before the reveal (or a preregistration in "
                                               "the scores file)")
    k_minus = 0 if k_minus is None else k_minus
    if score_model is not None:
        from audits.statistics.power import planned_verdict
        power = planned_verdict(len(loaded.scores), delta=delta, confidence=confidence, eps_nominal=eps_nominal,
                                score_model=score_model, rules=[(k_plus, k_minus)] if k_plus + k_minus else None,
                                sims=plan_sims, seed=plan_seed)
    return from_scores(loaded.scores, loaded.signs, delta=delta, confidence=confidence, k_plus=k_plus,
                       k_minus=k_minus, eps_nominal=eps_nominal, tie_break_seed=tie_break_seed, preregistration=prereg,
                       power=power, claim=claim,
                       canaries={"type": loaded.canary_type, "score": loaded.score_name,
                                 "membership_commitment": loaded.commitment},
                       diagnostics={"scores_file_sha256": loaded.sha256, "membership_commitment_verified": True})


# ---------------------------------------------------------------------------------------------------------------------
# Writing.


def write_scores_file(path, scores, membership, *, canary_ids, salt: bytes, commitment: str | None = None,
                      preregistration: cn.Preregistration | None = None, canary_type: str | None = None,
                      score: str | None = None) -> Path:
    """Write a scores file (`.csv` or `.npz` by extension) atomically with mode 0600; returns its path.

    `scores`: the canary scores (higher = "looks included"), or `FrozenScores`. `membership`: a sealed
    `audits.canary.Membership` (the scores are frozen first, then the bits are revealed: the protocol order) or
    the revealed bits (0/1, ±1 or booleans). `canary_ids` and `salt` are those the commitment was made with;
    `commitment`, when given, must match (InvalidParameter otherwise), else it is recomputed.
    """
    from privcheck.artifacts import write_atomic

    path, ext = _extension(path)
    frozen = cn.freeze_scores(scores)
    if isinstance(membership, cn.Membership):
        if membership.m != frozen.m:
            raise InvalidParameter("membership", f"{membership.m} coins", f"one coin per score (m={frozen.m})")
        signs = np.array(membership.reveal(frozen))
    else:
        signs = cn.as_signs(membership)
    if signs.size != frozen.m:
        raise InvalidParameter("membership", f"{signs.size} bits", f"one bit per score (m={frozen.m})")
    ids = _plain_ids(canary_ids)
    if len(ids) != frozen.m:
        raise InvalidParameter("canary_ids", f"{len(ids)} ids", f"one id per score (m={frozen.m})")
    made = cn.commit(signs, ids, salt)                 # validates the ids (distinct str/int) and the salt
    if commitment is not None and not cn.verify(commitment, signs, ids, salt):
        raise InvalidParameter("commitment", commitment, f"the commitment of these bits, ids and salt ({made})")
    kinds = {isinstance(x, str) for x in ids}
    if len(kinds) != 1:
        raise InvalidParameter("canary_ids", "a mix of str and int", "all str or all int ids")
    if ext == ".csv" and kinds == {True} and any(x != x.strip() or "\n" in x for x in ids):
        raise InvalidParameter("canary_ids", "ids with surrounding spaces or newlines", "ids that survive a CSV row")
    if ext == ".csv" and kinds == {False} and any(len(str(x)) > val.NUMBER_TEXT_MAX for x in ids):
        raise InvalidParameter("canary_ids", f"int ids of more than {val.NUMBER_TEXT_MAX} characters",
                               "int ids that `load_scores` reads back (the number grammar of privcheck.validation)")
    if preregistration is not None:
        if not isinstance(preregistration, cn.Preregistration):
            raise InvalidParameter("preregistration", type(preregistration).__name__, "a Preregistration or None")
        if preregistration.commitment != made:
            raise InvalidParameter("preregistration.commitment", preregistration.commitment, made)
    canary_type, score = _text("canary_type", canary_type), _text("score", score)
    member = (signs == 1).astype(np.int8)
    prereg_json = None if preregistration is None else json.dumps(preregistration.to_json(), sort_keys=True,
                                                                  separators=(",", ":"))
    if ext == ".csv":
        data = _csv_bytes(ids, frozen.values, member, made, salt, prereg_json, canary_type, score)
    else:
        data = _npz_bytes(ids, frozen.values, member, made, salt, prereg_json, canary_type, score)
    return write_atomic(path, data, mode=0o600)


def _plain_ids(canary_ids) -> list:
    """Python str/int ids (numpy scalars converted), so the file stores exactly what `commit` hashed."""
    if isinstance(canary_ids, (str, bytes)) or not isinstance(canary_ids, (Sequence, np.ndarray)):
        raise InvalidParameter("canary_ids", type(canary_ids).__name__, "a sequence of str or int ids")
    out = []
    for cid in canary_ids:
        if isinstance(cid, str):
            out.append(str(cid))
        elif isinstance(cid, numbers.Integral) and not isinstance(cid, (bool, np.bool_)):
            out.append(int(cid))
        else:
            raise InvalidParameter("canary_ids", cid, "str or int ids")
    return out


def _csv_bytes(ids, scores, member, commitment, salt, prereg_json, canary_type, score) -> bytes:
    out = io.StringIO()
    out.write(f"# format: {FORMAT}\n# commitment: {commitment}\n# salt: {salt.hex()}\n")
    out.write(f"# id_type: {'str' if isinstance(ids[0], str) else 'int'}\n")
    for key, value in (("canary_type", canary_type), ("score", score), ("preregistration", prereg_json)):
        if value is not None:
            out.write(f"# {key}: {value}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for cid, y, b in zip(ids, scores, member):
        writer.writerow([cid, repr(float(y)), int(b)])     # repr: the shortest text that reads back exactly
    return out.getvalue().encode("utf-8")


def _npz_bytes(ids, scores, member, commitment, salt, prereg_json, canary_type, score) -> bytes:
    arrays = {"format": np.array(FORMAT), "canary_ids": np.array(ids), "scores": np.asarray(scores, np.float64),
              "member": member, "commitment": np.array(commitment), "salt": np.array(salt.hex())}
    for key, value in (("canary_type", canary_type), ("score", score), ("preregistration", prereg_json)):
        if value is not None:
            arrays[key] = np.array(value)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()
