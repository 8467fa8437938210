"""The one artifact writer: write_artifact and ArtifactDirectory (seal, validate, atomic, roll back)."""

import json
import os
import stat

import jsonschema
import pytest

from privcheck.artifacts import ArtifactDirectory, available_schemas, verify_seal, write_artifact
from privcheck.artifacts.schema import schema_file
from privcheck.artifacts.writer import MANIFEST_NAME
from privcheck.errors import InvalidParameter


@pytest.fixture
def valid_doc(monkeypatch):
    from privcheck.verify import run_verification
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: {"tiny": "tests.test_artifacts:_tiny_suite"})
    doc = run_verification(["tiny"])
    return {k: v for k, v in doc.items() if k != "sha256"}      # unsealed: the writer seals it


def _listing(directory):
    return sorted(os.listdir(directory))


def test_schema_names_resolve_by_kind_or_file_name():
    assert "verification" in available_schemas() and "audit" in available_schemas()
    assert schema_file("verification") == schema_file("verification.schema.json") == "verification.schema.json"
    with pytest.raises(InvalidParameter, match="schema"):
        schema_file("no_such_kind")


def test_write_artifact_seals_validates_and_sets_mode(tmp_path, valid_doc):
    path = tmp_path / "a" / "verification.json"
    sealed = write_artifact(path, valid_doc, schema="verification")
    on_disk = json.loads(path.read_text("utf-8"))
    assert on_disk == sealed and verify_seal(on_disk) and "sha256" not in valid_doc
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_bytes().endswith(b"\n")
    write_artifact(tmp_path / "private.json", valid_doc, schema="verification", mode=0o600)
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
    assert _listing(tmp_path) == ["a", "private.json"]          # no temporary file left


def test_resealing_a_sealed_document_keeps_its_seal(tmp_path, valid_doc):
    first = write_artifact(tmp_path / "x.json", valid_doc, schema="verification")
    again = write_artifact(tmp_path / "y.json", first, schema="verification")
    assert again["sha256"] == first["sha256"]


def test_document_failing_its_schema_leaves_no_file(tmp_path, valid_doc):
    bad = dict(valid_doc, status="maybe")
    with pytest.raises(jsonschema.ValidationError):
        write_artifact(tmp_path / "out" / "v.json", bad, schema="verification")
    assert _listing(tmp_path) == []
    with pytest.raises(InvalidParameter, match="schema"):
        write_artifact(tmp_path / "v.json", valid_doc, schema="nope")
    with pytest.raises(InvalidParameter, match="document"):
        write_artifact(tmp_path / "v.json", [1], schema="verification")
    assert _listing(tmp_path) == []


def test_directory_schema_failure_leaves_no_file_and_no_staging_dir(tmp_path, valid_doc):
    out = tmp_path / "deep" / "out"
    with pytest.raises(jsonschema.ValidationError):
        with ArtifactDirectory(out) as staging:
            staging.write_bytes("plot.png", b"png")
            staging.write_json("verification.json", dict(valid_doc, status="maybe"), schema="verification")
    assert _listing(tmp_path) == []                               # parents created for staging are gone too


def test_exception_inside_the_block_leaves_target_untouched(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old report")
    (out / "keep.txt").write_text("unrelated")
    with pytest.raises(RuntimeError, match="boom"):
        with ArtifactDirectory(out) as staging:
            staging.write_text("report.md", "new report")
            staging.write_bytes("new.bin", b"x")
            raise RuntimeError("boom")
    assert _listing(out) == ["keep.txt", "report.md"]
    assert (out / "report.md").read_text() == "old report"
    assert _listing(tmp_path) == ["out"]                          # staging directory removed


def test_success_moves_files_into_existing_and_new_directories(tmp_path, valid_doc):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("unrelated")
    (out / "report.md").write_text("old")
    with ArtifactDirectory(out) as staging:
        sealed = staging.write_json("verification.json", valid_doc, schema="verification")
        staging.write_text("report.md", "new")
        staging.mkdir("private", mode=0o700)
        staging.write_bytes("private/log.jsonl", b"{}\n", mode=0o600)
        (staging.path / "tool_output.bin").write_bytes(b"written by a tool")
        assert not (out / "verification.json").exists()           # nothing visible before the block ends
    assert _listing(out) == [MANIFEST_NAME, "keep.txt", "private", "report.md", "tool_output.bin", "verification.json"]
    assert json.loads((out / "verification.json").read_text()) == sealed and verify_seal(sealed)
    assert (out / "report.md").read_text() == "new"
    assert stat.S_IMODE((out / "private").stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "private" / "log.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "report.md").stat().st_mode) == 0o644
    assert _listing(tmp_path) == ["out"]

    fresh = tmp_path / "new" / "dir"
    with ArtifactDirectory(fresh) as staging:
        staging.write_text("a.txt", "a")
    assert (fresh / "a.txt").read_text() == "a"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o755


def test_modes_set_in_staging_are_never_loosened(tmp_path):
    out = tmp_path / "out"
    for existing in (False, True):
        if existing:
            (out / "private").chmod(0o755)                        # an earlier, too permissive run
        with ArtifactDirectory(out) as staging:
            private = staging.path / "private"                     # a directory made without staging.mkdir
            private.mkdir(exist_ok=True)
            os.chmod(private, 0o700)
            (private / "tool.log").write_bytes(b"secret")
            os.chmod(private / "tool.log", 0o600)
            staging.write_bytes("private/log.jsonl", b"{}", mode=0o600)
            staging.write_bytes("nested/deeper/public.txt", b"x")
        assert stat.S_IMODE((out / "private").stat().st_mode) == 0o700
        assert stat.S_IMODE((out / "private" / "tool.log").stat().st_mode) == 0o600
        assert stat.S_IMODE((out / "private" / "log.jsonl").stat().st_mode) == 0o600
        assert stat.S_IMODE((out / "nested" / "deeper").stat().st_mode) == 0o755
        assert stat.S_IMODE((out / "nested" / "deeper" / "public.txt").stat().st_mode) == 0o644


def test_failed_move_restores_the_previous_files(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old a")
    (out / "private").mkdir(mode=0o755)
    os.chmod(out / "private", 0o755)
    real_replace = os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if str(dst).endswith("b.txt"):
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        with ArtifactDirectory(out) as staging:
            staging.mkdir("private", mode=0o700)
            staging.write_text("a.txt", "new a")
            staging.write_text("b.txt", "new b")
    monkeypatch.setattr(os, "replace", real_replace)
    assert _listing(out) == ["a.txt", "private"] and (out / "a.txt").read_text() == "old a"
    assert stat.S_IMODE((out / "private").stat().st_mode) == 0o755
    assert _listing(tmp_path) == ["out"]


def test_bad_names_and_targets_are_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidParameter, match="out"):
        ArtifactDirectory(tmp_path / "file")
    with pytest.raises(InvalidParameter, match="out"):
        ArtifactDirectory("")
    with ArtifactDirectory(tmp_path / "out") as staging:
        for name in ("../escape.txt", "/abs.txt", "", "a/../../b"):
            with pytest.raises(InvalidParameter, match="name"):
                staging.write_text(name, "x")
        with pytest.raises(InvalidParameter, match="data"):
            staging.write_bytes("x.bin", "not bytes")
    assert not (tmp_path / "escape.txt").exists()
    with pytest.raises(RuntimeError):
        _ = staging.path


# ------------------------------------------------------------------------------------------ stale files (manifest)

def _commit(out, valid_doc, files, *, head_doc=True, head=None):
    with ArtifactDirectory(out, head=head) as staging:
        for name in files:
            staging.write_bytes(name, name.encode())
        if head_doc:
            staging.write_json("verification.json", valid_doc, schema="verification")


def test_a_rewritten_head_removes_what_its_previous_output_wrote_and_nothing_else(tmp_path, valid_doc):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    _commit(out, valid_doc, ["a.png", "b.png", "private/log.jsonl"])
    _commit(out, valid_doc, ["extra.png"], head_doc=False)               # no head: adds, removes nothing
    _commit(out, valid_doc, ["a.png"])                                   # the rerun makes a.png only
    assert _listing(out) == [MANIFEST_NAME, "a.png", "extra.png", "notes.txt", "private", "verification.json"]
    assert _listing(out / "private") == []
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["heads"] == {"verification.json": ["a.png", "verification.json"]}


def test_a_commit_naming_a_head_it_does_not_rewrite_adds_to_that_output(tmp_path, valid_doc):
    out = tmp_path / "out"
    _commit(out, valid_doc, ["a.png"])
    _commit(out, valid_doc, ["report.md", "c.png"], head_doc=False, head="verification.json")   # a re-render
    _commit(out, valid_doc, ["a.png"])
    assert _listing(out) == [MANIFEST_NAME, "a.png", "verification.json"]


def test_a_file_belongs_to_the_last_commit_that_wrote_it(tmp_path, valid_doc):
    out = tmp_path / "out"
    with ArtifactDirectory(out) as staging:                              # another kind's output: run.json
        staging.write_bytes("shared.md", b"x")
        staging.write_json("run.json", valid_doc, schema="verification")
    _commit(out, valid_doc, ["shared.md"])                              # verification.json takes shared.md over
    _commit(out, valid_doc, [])
    assert _listing(out) == [MANIFEST_NAME, "run.json", "verification.json"]


def test_a_failed_commit_keeps_the_stale_files(tmp_path, valid_doc, monkeypatch):
    out = tmp_path / "out"
    _commit(out, valid_doc, ["a.png", "b.png"])
    before = {name: (out / name).read_bytes() for name in _listing(out)}
    real_replace = os.replace
    failed = []

    def failing(src, dst):                                  # the new document's move fails (once)
        if str(dst).endswith("verification.json") and not failed:
            failed.append(dst)
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        _commit(out, valid_doc, ["a.png"])
    monkeypatch.setattr(os, "replace", real_replace)
    assert {name: (out / name).read_bytes() for name in _listing(out)} == before


def test_the_manifest_never_reaches_outside_the_directory(tmp_path, valid_doc):
    out, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    _commit(out, valid_doc, ["link/precious.txt"])
    (out / "link" / "precious.txt").unlink()
    (out / "link").rmdir()
    (out / "link").symlink_to(outside)                                  # the directory replaced by a link
    for listed, refusal in (("link/precious.txt", "without a symbolic link at"), ("../outside/precious.txt", "lists"),
                            ("/etc/passwd", "lists")):
        (out / MANIFEST_NAME).write_text(json.dumps({"heads": {"verification.json": [listed, "verification.json"]}}))
        with pytest.raises(InvalidParameter, match=refusal):      # refused before anything is written
            _commit(out, valid_doc, [])
        assert (outside / "precious.txt").read_text() == "keep"
    (out / "link").unlink()
    (out / MANIFEST_NAME).unlink()
    _commit(out, valid_doc, [])
    for reserved in (MANIFEST_NAME, ".privcheck.lock"):
        with ArtifactDirectory(out) as staging, pytest.raises(InvalidParameter, match="name"):
            staging.write_bytes(reserved, b"x")


def test_staging_and_temporary_names_are_inside_the_directory_and_recognisable(tmp_path):
    from privcheck.artifacts.outdir import leftover_prefix

    out = tmp_path / "out"
    with ArtifactDirectory(out) as staging:
        assert staging.path.parent == out and staging.path.name.startswith(leftover_prefix("staging"))
        staging.write_bytes("a.txt", b"a")
    assert _listing(tmp_path) == ["out"] and _listing(out) == ["a.txt"]
