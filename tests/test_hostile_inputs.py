"""Issue 23: every file input is bounded before it is read (privcheck/inputs.py). Each hostile file given to the
command line — a FIFO, /dev/zero, a sparse oversize file, an .npz whose header claims 3e8 doubles, a truncated .npz,
an over-long CSV field, JSON nested 10⁵ deep, a 5,000-digit integer, 1e999, duplicate keys, numbers in other digits
than ASCII ones, an .npz array given twice, a model's config.json of each of these kinds — exits 2 within seconds
with one line naming the input, writes nothing, and `report` refuses before writing report.md. (The CLI fuzz,
tests/test_cli_fuzz.py, draws such files for every flag that reads one; the cases it found are pinned here.)"""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile

import numpy as np
import pytest

from audits import canary as cn
from audits.scores_file import write_scores_file
from privcheck.cli import EXIT_USAGE
from privcheck.errors import InvalidParameter
from privcheck.inputs import LIMITS, MAX_DEPTH, json_depth, parse_json
from tests import hostile_files as hf
from tests.cli_harness import deadline, patched_work, run_cli

ACCOUNT = ["account", "dp-sgd", "--delta", "1e-5", "--history"]
ONE_RUN = ["audit", "one-run", "--delta", "1e-5", "--k-plus", "2", "--scores"]
SALT = bytes(range(32))
M = 8


def refused(tmp_path, argv, name: str) -> str:
    """`argv` exits 2 within 10 s with one stderr line naming `name`, nothing on stdout, nothing new written."""
    with deadline(10):
        outcome = run_cli([str(a) for a in argv], tmp_path)
    shown = f"{argv}: {outcome}"
    assert outcome.code == EXIT_USAGE and not outcome.argparse_exit, shown
    assert len(outcome.err_lines) == 1 and "Traceback" not in outcome.err and outcome.out == "", shown
    assert f"invalid {name}" in outcome.err or "cannot read artifact" in outcome.err, shown
    assert not outcome.new_paths, shown
    return outcome.err


def _scores(tmp_path, ext=".csv", prereg=True):
    signs = np.array([1, -1] * (M // 2))
    ids = [f"c{i}" for i in range(M)]
    commitment = cn.commit(signs, ids, SALT)
    pre = cn.Preregistration(m=M, delta=1e-5, confidence=0.95, selection="explicit", k_plus=2, k_minus=0,
                             commitment=commitment) if prereg else None
    return write_scores_file(tmp_path / f"s{ext}", np.linspace(0, 1, M), signs, canary_ids=ids, salt=SALT,
                             preregistration=pre)


def _with_prereg(tmp_path, edit) -> str:
    """A valid scores CSV whose preregistration header line is replaced by `edit(its JSON text)`."""
    path = _scores(tmp_path)
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("# preregistration: "))
    lines[i] = "# preregistration: " + edit(lines[i][len("# preregistration: "):])
    path.write_text("\n".join(lines) + "\n")
    return path


def _npy_header(shape, dtype="<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()           # magic, version 1.0, header: what np.load reads before any data


# --- not a regular file ------------------------------------------------------------------------------------


def test_a_fifo_history_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "h.json"
    os.mkfifo(fifo)
    assert "FIFO" in refused(tmp_path, [*ACCOUNT, fifo], "history")


@pytest.mark.parametrize("ext", [".csv", ".npz"])
def test_a_fifo_scores_file_is_refused_without_blocking(tmp_path, ext):
    os.mkfifo(tmp_path / f"s{ext}")
    assert "FIFO" in refused(tmp_path, [*ONE_RUN, tmp_path / f"s{ext}"], "scores")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full"])
def test_a_device_behind_a_json_name_is_refused(tmp_path, device):
    """In a child process with bounded address space: a regression reading the device fails, it cannot eat memory."""
    (tmp_path / "h.json").symlink_to(device)
    (tmp_path / "s.csv").symlink_to(device)
    codes, err, _ = _in_child([[*ACCOUNT, str(tmp_path / "h.json")], [*ONE_RUN, str(tmp_path / "s.csv")]])
    assert codes == [EXIT_USAGE, EXIT_USAGE], err
    lines = err.splitlines()
    assert len(lines) == 2 and all("character device" in line for line in lines), err
    assert "invalid history" in lines[0] and "invalid scores" in lines[1], err


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "d.json").mkdir()
    assert "directory" in refused(tmp_path, [*ACCOUNT, tmp_path / "d.json"], "history")


# --- size ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("s.csv", "scores.csv"), ("h.json", "history")])
def test_a_sparse_oversize_file_is_refused_from_its_metadata(tmp_path, name, kind):
    path = tmp_path / name
    with open(path, "wb") as fh:
        fh.truncate(2 << 30 if kind == "scores.csv" else LIMITS[kind] + 1)     # sparse: no disk, no reading
    argv = [*ONE_RUN, path] if kind == "scores.csv" else [*ACCOUNT, path]
    assert f"at most {LIMITS[kind]} bytes" in refused(tmp_path, argv, kind.split(".")[0])


def test_an_npz_header_claiming_3e8_doubles_is_refused_before_loading(tmp_path):
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w") as zf:                  # 3e8 doubles claimed, a few bytes stored
        zf.writestr("scores.npy", _npy_header((300_000_000,)) + b"\0" * 64)
    assert "scores.scores" in refused(tmp_path, [*ONE_RUN, path], "scores.scores")


def test_an_object_array_in_an_npz_is_refused(tmp_path):
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("canary_ids.npy", _npy_header((3,), "|O") + b"\0" * 64)
    assert "no objects" in refused(tmp_path, [*ONE_RUN, path], "scores.canary_ids")


def test_a_truncated_npz_is_refused(tmp_path):
    path = _scores(tmp_path, ".npz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    refused(tmp_path, [*ONE_RUN, path], "scores")


def test_an_intact_npz_still_loads(tmp_path):
    from audits.scores_file import load_scores
    assert load_scores(_scores(tmp_path, ".npz")).m == M


def test_an_overlong_csv_field_is_refused(tmp_path):
    path = _scores(tmp_path)
    path.write_text(path.read_text() + "x" * 200_000 + ",0.5,1\n")
    assert "characters" in refused(tmp_path, [*ONE_RUN, path], "scores")


# --- JSON: depth, numbers, duplicate keys --------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def test_depth_is_found_without_recursion_and_ignores_strings():
    assert json_depth(DEEP) == 100_000
    assert json_depth('{"a": "[[[[", "b": [1, {"c": "\\"]]"}]}') == 3
    with pytest.raises(InvalidParameter, match="nested"):
        parse_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "x")
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x") is not None


def test_deep_history_is_refused(tmp_path):
    (tmp_path / "h.json").write_text(DEEP)
    assert "nested" in refused(tmp_path, [*ACCOUNT, tmp_path / "h.json"], "history")


def test_deep_preregistration_is_refused(tmp_path):
    path = _with_prereg(tmp_path, lambda text: DEEP)
    assert "nested" in refused(tmp_path, [*ONE_RUN, path], "scores.preregistration")


def test_a_5000_digit_integer_in_a_history_is_refused(tmp_path):
    (tmp_path / "h.json").write_text('{"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": '
                                     + "9" * 5000 + "}]}")
    assert "digits" in refused(tmp_path, [*ACCOUNT, tmp_path / "h.json"], "history")


def test_1e999_in_a_history_and_in_a_family_is_refused(tmp_path):
    (tmp_path / "h.json").write_text("[[1e999, 0.01, 10]]")
    assert "finite" in refused(tmp_path, [*ACCOUNT, tmp_path / "h.json"], "history")
    path = _with_prereg(tmp_path, lambda text: text.replace('"family":[]', '"family":[[1e999,1]]'))
    assert "finite" in refused(tmp_path, [*ONE_RUN, path], "scores.preregistration")


def test_duplicate_keys_in_a_history_phase_are_refused(tmp_path):
    (tmp_path / "h.json").write_text('{"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 10, '
                                     '"noise_multiplier": 50.0}]}')
    assert "duplicate key 'noise_multiplier'" in refused(tmp_path, [*ACCOUNT, tmp_path / "h.json"], "history")


def test_duplicate_keys_in_a_preregistration_are_refused(tmp_path):
    path = _with_prereg(tmp_path, lambda text: text.replace('"k_plus":2', '"k_plus":50,"k_plus":999'))
    assert "duplicate key 'k_plus'" in refused(tmp_path, [*ONE_RUN[:-3], "--scores", path], "scores.preregistration")


def test_a_valid_history_file_is_still_accounted(tmp_path):
    (tmp_path / "h.json").write_text('{"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 10}]}')
    with deadline(60):
        outcome = run_cli([*ACCOUNT, str(tmp_path / "h.json"), "--json"], tmp_path)
    assert outcome.code == 0, outcome


# --- artifacts given to `privcheck report` --------------------------------------------------------------------


@pytest.mark.parametrize("case", ["1e999", "deep", "duplicate", "fifo", "sparse"])
def test_report_refuses_a_hostile_artifact_before_writing(tmp_path, case):
    artifact = tmp_path / "verification.json"
    if case == "fifo":
        os.mkfifo(artifact)
    elif case == "sparse":
        with open(artifact, "wb") as fh:
            fh.truncate(LIMITS["artifact"] + 1)
    else:
        body = {"1e999": '{"sha256": "0", "x": 1e999}', "deep": '{"sha256": "0", "x": ' + DEEP + "}",
                "duplicate": '{"sha256": "0", "status": "pass", "status": "fail"}'}[case]
        artifact.write_text(body)
    if case == "fifo":       # is_file() is false for a FIFO: refused as "no verification.json" before opening
        with deadline(10):
            outcome = run_cli(["report", str(tmp_path)], tmp_path)
        assert outcome.code == EXIT_USAGE and len(outcome.err_lines) == 1 and not outcome.new_paths, outcome
        return
    err = refused(tmp_path, ["report", tmp_path], "artifact")
    assert str(artifact) in err
    assert not (tmp_path / "report.md").exists()


def test_report_md_is_not_written_for_1e999(tmp_path):
    (tmp_path / "verification.json").write_text(json.dumps({"sha256": "0"})[:-1] + ', "x": 1e999}')
    refused(tmp_path, ["report", tmp_path], "artifact")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verification.json"]


def test_the_documented_limits_are_the_enforced_ones():
    from pathlib import Path

    from privcheck import inputs
    text = Path(__file__).resolve().parents[1].joinpath("docs", "artifacts.md").read_text(encoding="utf-8")
    section = text.split("## Inputs: every file bounded before it is read", 1)[1].split("\n## ", 1)[0]
    mib = 1 << 20
    for kind, shown in (("history", "16 MiB"), ("artifact", "64 MiB"), ("scores.csv", "256 MiB"),
                        ("scores.npz", "1 GiB"), ("config", "4 MiB"), ("auditor_log", "1 GiB")):
        value, unit = shown.split()
        assert inputs.LIMITS[kind] == int(value) * (mib if unit == "MiB" else 1024 * mib) and shown in section, kind
    assert f"{inputs.MAX_CSV_FIELD:,} characters" in section and f"at most {inputs.MAX_DEPTH} levels" in section
    assert f"at most {inputs.MAX_INT_DIGITS} digits" in section and inputs.MAX_NPZ_MEMBER_BYTES == 2048 * mib
    assert inputs.MAX_TEXT_CHARS == 2 ** 20 and "2²⁰ characters" in section


def _in_child(argvs: list[list[str]]) -> tuple[list[int], str, int]:
    """(exit codes, stderr, peak RSS in KiB) of `main(argv)` for each argv, in one child process limited to 4 GiB of
    address space and 60 s."""
    import resource
    import subprocess
    import sys

    code = ("import json, resource, sys; from privcheck.cli import main\n"
            f"codes = [main(argv) for argv in {argvs!r}]\n"
            "print(json.dumps([codes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                          preexec_fn=limit)
    assert done.returncode == 0 and done.stdout.strip(), done
    codes, peak = json.loads(done.stdout.strip().splitlines()[-1])
    return codes, done.stderr, peak


def test_peak_memory_stays_bounded_on_a_3e8_double_npz_and_a_2_gib_sparse_csv(tmp_path):
    """Both refusals stay far below what reading them would take (2.4 GB for the doubles alone)."""
    npz, csv_path = tmp_path / "s.npz", tmp_path / "s.csv"
    with zipfile.ZipFile(npz, "w") as zf:
        zf.writestr("scores.npy", _npy_header((300_000_000,)) + b"\0" * 64)
    with open(csv_path, "wb") as fh:
        fh.truncate(2 << 30)
    codes, err, peak_kib = _in_child([[*ONE_RUN, str(npz)], [*ONE_RUN, str(csv_path)]])
    assert codes == [EXIT_USAGE, EXIT_USAGE], err
    assert peak_kib < 1 << 20, f"peak RSS {peak_kib >> 10} MiB"


# --- numbers in other digits, arrays given twice, a model's config.json (found by the CLI fuzz) ------------------


def _scores_text(tmp_path, edit, id_type: str = "int"):
    """The fuzz's valid scores CSV (ids 3..10 with id_type int, else c0..c7), its data row of the canary whose id
    is 3 (int) or c0 (str) rewritten by `edit(fields)`."""
    lines = hf.scores_base("csv", id_type)["csv"].decode().splitlines()
    i = next(i for i, line in enumerate(lines) if line.split(",")[0] in ("3", "c0"))
    fields = lines[i].split(",")
    edit(fields)
    lines[i] = ",".join(fields)
    path = tmp_path / "s.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("form", ["٣", "۳", "३", "３", "𝟑", "³", "0_3", "0" * 101 + "3", "3.0", "Ⅲ"])
def test_an_integer_id_in_another_form_is_refused(tmp_path, form):
    """int() reads '٣', '３' and '0_3' as 3 (the file was accepted as if the id were written 3) and fails on '³' where
    str.isdigit() does not (an internal error): ids with id_type int follow the number grammar."""
    path = _scores_text(tmp_path, lambda fields: fields.__setitem__(0, form))
    assert "data row 1" in refused(tmp_path, [*ONE_RUN[:-3], "--scores", path], "scores.canary_id")


@pytest.mark.parametrize("form", ["٠.٥", "０.５", "0_5", "⁵", "½", "1e999", "-inf", "NaN", "9" * 5000])
def test_a_score_in_another_form_is_refused(tmp_path, form):
    path = _scores_text(tmp_path, lambda fields: fields.__setitem__(1, form), id_type="str")
    refused(tmp_path, [*ONE_RUN[:-3], "--scores", path], "scores")


@pytest.mark.parametrize("form", ["١٠", "１０", "1_0", "¹⁰"])
def test_numbers_in_other_digits_inside_json_inputs_are_refused(tmp_path, form):
    (tmp_path / "h.json").write_text('{"phases": [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": '
                                     + form + "}]}", encoding="utf-8")
    refused(tmp_path, [*ACCOUNT, tmp_path / "h.json"], "history")
    path = _with_prereg(tmp_path, lambda text: text.replace('"k_plus":2', '"k_plus":' + form))
    refused(tmp_path, [*ONE_RUN[:-3], "--scores", path], "scores.preregistration")


@pytest.mark.parametrize("name", ["member", "scores", "commitment"])
@pytest.mark.parametrize("names", [("{}.npy", "{}.npy"), ("{}", "{}.npy")])
def test_an_npz_array_given_twice_is_refused(tmp_path, name, names):
    """numpy.load reads one of two members of one name: such a file is refused, never resolved."""
    arrays = hf.scores_base("npz")["arrays"]
    path = tmp_path / "s.npz"
    buf = io.BytesIO()
    np.save(buf, arrays[name], allow_pickle=False)
    with zipfile.ZipFile(path, "w") as zf:
        for key, array in arrays.items():
            one = io.BytesIO()
            np.save(one, array, allow_pickle=False)
            zf.writestr(names[0].format(key) if key == name else f"{key}.npy", one.getvalue())
        with pytest.warns(UserWarning, match="Duplicate name") if names[0] == names[1] else contextlib.nullcontext():
            zf.writestr(names[1].format(name), buf.getvalue())
    assert "given twice" in refused(tmp_path, [*ONE_RUN[:-3], "--scores", path], f"scores.{name}")


def test_write_scores_file_refuses_int_ids_it_could_not_read_back(tmp_path):
    signs = np.array([1, -1])
    ids = [10**120, 3]
    with pytest.raises(InvalidParameter, match="canary_ids"):
        write_scores_file(tmp_path / "s.csv", [0.1, 0.9], signs, canary_ids=ids, salt=SALT)
    assert not (tmp_path / "s.csv").exists()
    write_scores_file(tmp_path / "s.npz", [0.1, 0.9], signs, canary_ids=[2**62, 3], salt=SALT)


RUN_DPGRPO = ["run", "dp-grpo", "--preset", "tiny-cpu", "--device", "cpu", "--model"]
RUN_DPGRPO_WORK = ("mechanisms.dpgrpo.pipeline.setup:arm_config",)


@pytest.mark.parametrize("case", ["sparse", "deep", "duplicate", "1e999", "digits", "list", "fifo", "device",
                                  "empty"])
def test_run_dpgrpo_reads_a_models_config_json_bounded_before_any_work(tmp_path, case):
    """`run dp-grpo --model DIR` checked only that DIR/config.json was a file: its content reached the work (and
    transformers) unread."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    config = model / "config.json"
    if case == "sparse":
        with open(config, "wb") as fh:
            fh.truncate(LIMITS["config"] + 1)
    elif case == "fifo":
        os.mkfifo(config)
    elif case == "device":
        config.symlink_to("/dev/zero")
    else:
        config.write_text({"deep": DEEP, "duplicate": '{"model_type": "qwen2", "model_type": "llama"}',
                           "1e999": '{"model_type": "qwen2", "rope_theta": 1e999}',
                           "digits": '{"model_type": "qwen2", "vocab_size": ١٦}', "list": '["qwen2"]',
                           "empty": ""}[case], encoding="utf-8")
    with deadline(20), patched_work(RUN_DPGRPO_WORK):
        outcome = run_cli([*RUN_DPGRPO, str(model), "--out", str(tmp_path / "out")], tmp_path)
    assert outcome.code == EXIT_USAGE and not outcome.started and len(outcome.err_lines) == 1, outcome
    assert "invalid model=" in outcome.err and not outcome.new_paths, outcome


def test_run_dpgrpo_accepts_a_models_config_json_object(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"")
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    with deadline(60), patched_work(RUN_DPGRPO_WORK):
        outcome = run_cli([*RUN_DPGRPO, str(model), "--out", str(tmp_path / "out")], tmp_path)
    assert outcome.started, outcome


def test_a_duplicate_id_late_in_a_large_file_is_found_in_seconds(tmp_path):
    """Duplicate ids were once searched in quadratic time (hours for 10⁶ ids with the duplicate last)."""
    m = 1_000_000
    ids = np.arange(m)
    ids[-1] = 0
    path = tmp_path / "dup.npz"
    np.savez(path, canary_ids=ids, scores=np.zeros(m), member=np.zeros(m, dtype=np.int8),
             commitment=np.array("sha256:" + "0" * 64), salt=np.array(SALT.hex()))
    assert "0 twice" in refused(tmp_path, [*ONE_RUN, path], "scores.canary_id")
