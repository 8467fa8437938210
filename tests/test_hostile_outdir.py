"""Output directories that cannot be turned against the user (issue 23, item 1; docs/artifacts.md, "Output
directories"): an entry planted under a name privcheck writes — a symbolic link to a file or a directory outside,
a dangling link, a FIFO, a device node, a directory in place of a file — is refused with exit 2 and one line naming
it, and nothing outside the output directory is created, truncated or removed; a FIFO never blocks a command."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from privcheck.artifacts import ArtifactDirectory, CheckResult, Claim, SuiteResult, write_artifact
from privcheck.artifacts.outdir import LOCK_NAME, OWNED_DIRECTORIES, OWNED_FILES
from privcheck.artifacts.writer import MANIFEST_NAME
from privcheck.cli import EXIT_USAGE
from privcheck.errors import InvalidParameter
from tests.cli_harness import deadline, patched_work, run_cli

KINDS = ("link-to-file", "dangling-link", "link-to-directory", "fifo", "device", "directory")
WHAT = {"link-to-file": "a symbolic link", "dangling-link": "a symbolic link", "link-to-directory": "a symbolic link",
        "fifo": "a FIFO", "device": "a device node", "directory": "a directory"}
ONE_RUN = ["audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "90", "--delta", "1e-5"]
VERIFY_WORK = ("privcheck.verify:run_verification",)
FIGURE = {"title": "t", "x_label": "x", "y_label": "y", "x": [1, 2], "series": {"s": [1.0, 2.0]}}


def _suite(seed=None):
    result = SuiteResult(name="tiny")
    result.checks.append(CheckResult(name="one_plus_one", suite="tiny", passed=True, observed=2, expected=2,
                                     tolerance=0, reference="arithmetic"))
    result.claims.append(Claim(mechanism="m", epsilon=1.0, delta=1e-5, neighboring="add_remove", assumptions=("a",)))
    result.figures["curve"] = FIGURE                 # one plot: curve.png
    return result


@pytest.fixture
def suites(monkeypatch):
    registry = {"tiny": "tests.test_hostile_outdir:_suite"}
    monkeypatch.setattr("privcheck.verify.BUILTIN_SUITES", registry)
    monkeypatch.setattr("privcheck.verify.available_suites", lambda: registry)


class Outside:
    """A file and a directory outside the output directory, and their state (content, mtime, listing)."""

    def __init__(self, root: Path):
        self.dir = root / "outside"
        self.dir.mkdir()
        self.file = self.dir / "precious.txt"
        self.file.write_text("keep\n")
        os.utime(self.file, (1_000_000_000, 1_000_000_000))
        self.state = self._state()

    def _state(self):
        st = self.file.stat()
        return self.file.read_bytes(), st.st_mtime_ns, sorted(os.listdir(self.dir))

    def unchanged(self) -> bool:
        return self._state() == self.state


def _plant(path: Path, kind: str, outside: Outside) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-to-file":
        path.symlink_to(outside.file)
    elif kind == "dangling-link":
        path.symlink_to(outside.dir / "not-there")
    elif kind == "link-to-directory":
        path.symlink_to(outside.dir, target_is_directory=True)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))       # /dev/null's numbers
        except PermissionError:
            pytest.skip("creating a device node needs privileges")
    else:
        path.mkdir()
        (path / "inside").write_text("mine\n")


def _entry(path: Path):
    """What is at `path`, enough to see that nothing replaced or followed it."""
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), os.readlink(path) if path.is_symlink() else None, \
        sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else None


def _refused(tmp_path, argv, out: Path, planted: Path, kind: str, outside: Outside, work=()) -> None:
    """Run `argv`; assert exit 2 with one line naming the planted entry and its kind, no traceback, work never
    reached (when `work` is patched), the planted entry and the output directory as they were, nothing outside
    touched."""
    before, entry = sorted(os.listdir(out)), _entry(planted)
    with deadline(20), patched_work(work):
        outcome = run_cli(argv, tmp_path)
    shown = f"{argv} {kind}: {outcome}"
    assert outcome.code == EXIT_USAGE and not outcome.started, shown
    assert "Traceback" not in outcome.err and len(outcome.err_lines) == 1, shown
    assert str(planted) in outcome.err and WHAT[kind] in outcome.err, shown
    assert sorted(os.listdir(out)) == before and _entry(planted) == entry, shown
    assert outside.unchanged(), shown


# ------------------------------------------------------------------ refused before any work: privcheck's own names

@pytest.mark.parametrize(("name", "kind"), [
    (name, kind) for name in (LOCK_NAME, MANIFEST_NAME, "verification.json", "report.md", "curve.png", "private")
    for kind in KINDS if (name, kind) != ("private", "directory")])    # a private directory is what belongs there
def test_verify_refuses_a_planted_entry_before_any_work(tmp_path, suites, name, kind):
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    if name != MANIFEST_NAME:                        # a previous output listed curve.png (a name it owns)
        (out / MANIFEST_NAME).write_text(json.dumps({"heads": {"verification.json": [
            "curve.png", "report.md", "verification.json"]}}))
    _plant(out / name, kind, outside)
    _refused(tmp_path, ["verify", "--suite", "tiny", "--out", str(out)], out, out / name, kind, outside,
             VERIFY_WORK)


@pytest.mark.parametrize("kind", KINDS)
def test_a_name_known_only_once_written_is_refused_before_anything_is_moved(tmp_path, suites, kind):
    """No manifest names curve.png yet: the suite runs, and the commit refuses before it writes anything."""
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    _plant(out / "curve.png", kind, outside)
    _refused(tmp_path, ["verify", "--suite", "tiny", "--out", str(out)], out, out / "curve.png", kind, outside)


@pytest.mark.parametrize("kind", ["link-to-file", "fifo", "directory"])
@pytest.mark.parametrize("name", ["verification.json", "report.md", "curve.png", LOCK_NAME, MANIFEST_NAME])
def test_report_refuses_a_planted_entry(tmp_path, suites, name, kind):
    from privcheck.verify import run_verification

    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    doc = {k: v for k, v in run_verification(["tiny"]).items() if k != "sha256"}
    write_artifact((outside.dir if name == "verification.json" else out) / "verification.json", doc,
                   schema="verification")
    (out / MANIFEST_NAME).write_text(json.dumps({"heads": {"verification.json": ["curve.png", "report.md"]}}))
    outside.state = outside._state()
    if name == "verification.json" and kind == "link-to-file":
        (out / name).symlink_to(outside.dir / "verification.json")      # a valid artifact, but through a link
    else:
        (out / name).unlink(missing_ok=True)
        _plant(out / name, kind, outside)
    _refused(tmp_path, ["report", str(out)], out, out / name, kind, outside)


@pytest.mark.parametrize(("name", "kind"), [
    (name, kind) for name in OWNED_FILES + OWNED_DIRECTORIES for kind in KINDS
    if (name, kind) != ("private", "directory")])
def test_audit_one_run_refuses_a_planted_entry(tmp_path, name, kind):
    """Every name privcheck writes in any output directory, whatever the command, refused for each kind of entry
    (a device node under each of them too)."""
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    _plant(out / name, kind, outside)
    _refused(tmp_path, [*ONE_RUN, "--out", str(out)], out, out / name, kind, outside)


# ------------------------------------------------------------------ the manifest and leftovers never reach outside

@pytest.mark.parametrize("listed", ["../outside/precious.txt", "/etc/passwd", "sub/../../outside/precious.txt"])
def test_a_manifest_naming_a_place_outside_is_refused(tmp_path, suites, listed):
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text(json.dumps({"heads": {"verification.json": [listed]}}))
    with deadline(20), patched_work(VERIFY_WORK):
        outcome = run_cli(["verify", "--suite", "tiny", "--out", str(out)], tmp_path)
    assert outcome.code == EXIT_USAGE and not outcome.started and len(outcome.err_lines) == 1, outcome
    assert MANIFEST_NAME in outcome.err and repr(listed) in outcome.err, outcome
    assert sorted(os.listdir(out)) == [MANIFEST_NAME] and outside.unchanged()


@pytest.mark.parametrize("kind", ["link-to-file", "link-to-directory", "fifo", "directory"])
def test_leftover_names_are_removed_without_being_followed(tmp_path, kind):
    """A name of a dead writer's temporary entry (pid 999999999 does not exist) is privcheck's to remove: the entry
    itself goes, never what a link points to (a directory's links are removed, not followed)."""
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    leftover = out / ".privcheck-staging.999999999.planted"
    _plant(leftover, kind, outside)
    if kind == "directory":
        (leftover / "link").symlink_to(outside.dir, target_is_directory=True)
    with deadline(20):
        outcome = run_cli([*ONE_RUN, "--out", str(out)], tmp_path)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome
    assert sorted(os.listdir(out)) == ["audit.json"] and outside.unchanged()


# ------------------------------------------------------------------ the library writers

def test_write_artifact_refuses_a_link_at_its_path(tmp_path, suites):
    from privcheck.verify import run_verification

    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "run-1.json").symlink_to(outside.file)
    doc = {k: v for k, v in run_verification(["tiny"]).items() if k != "sha256"}
    with pytest.raises(InvalidParameter, match="without a symbolic link at .*run-1.json"):
        write_artifact(out / "run-1.json", doc, schema="verification")
    assert sorted(os.listdir(out)) == ["run-1.json"] and outside.unchanged()


@pytest.mark.parametrize("kind", ["link-to-directory", "fifo", "directory"])
def test_artifact_directory_refuses_a_planted_sub_directory_or_file(tmp_path, kind):
    """Files a tool wrote into the staging directory (run-*.json, private logs, weights) are checked the same way
    when they are moved into place: a sub-directory replaced by a link, a file by a FIFO or a directory."""
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    planted = out / ("private" if kind == "link-to-directory" else "run-1.json")
    _plant(planted, kind, outside)
    entry = _entry(planted)
    with deadline(20), pytest.raises(InvalidParameter, match=WHAT[kind]):
        with ArtifactDirectory(out) as staging:
            staging.mkdir("private", mode=0o700)
            staging.write_bytes("private/log.jsonl", b"{}\n", mode=0o600)
            (staging.path / "run-1.json").write_bytes(b"{}")           # as a tool writes it
    assert sorted(os.listdir(out)) == [planted.name] and _entry(planted) == entry and outside.unchanged()


def test_a_stale_lock_file_is_reused_and_removed(tmp_path):
    """A regular lock file a killed writer left is privcheck's own: taken over, then removed."""
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("999999999")
    outcome = run_cli([*ONE_RUN, "--out", str(out)], tmp_path)
    assert outcome.code == 0 and sorted(os.listdir(out)) == ["audit.json"], outcome


def test_the_check_of_a_missing_directory_creates_nothing_beside_it(tmp_path, monkeypatch):
    """The writability probe of a directory that does not exist yet goes inside it (created, then removed), never
    into its parent: no moment where a file of privcheck's lies outside the output directory."""
    import tempfile

    from privcheck.artifacts import check_output_directory

    seen = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: (seen.append(Path(k["dir"])), real(*a, **k))[1])
    out = tmp_path / "a" / "out"
    check_output_directory(out)
    assert seen == [out.absolute()] and sorted(os.listdir(tmp_path)) == []


def test_report_of_a_loop_of_links_names_the_directory(tmp_path):
    """A directory path that loops (a -> b -> a) is no directory: refused naming `dir`, not as an OS error."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for path in (tmp_path / "a", tmp_path / "a" / "sub"):
        with deadline(20):
            outcome = run_cli(["report", str(path)], tmp_path)
        assert outcome.code == EXIT_USAGE and len(outcome.err_lines) == 1, outcome
        assert outcome.err.startswith("privcheck: error: invalid dir=") and not outcome.new_paths, outcome


@pytest.mark.parametrize("kind", ["link-to-file", "fifo", "directory"])
def test_report_of_a_run_directory_refuses_a_planted_run_file(tmp_path, kind):
    """`privcheck report DIR` on run artifacts reads every run-*.json: a FIFO would block it, a link lead outside."""
    outside, out = Outside(tmp_path), tmp_path / "out"
    out.mkdir()
    _plant(out / "run-1.json", kind, outside)
    _refused(tmp_path, ["report", str(out)], out, out / "run-1.json", kind, outside)
