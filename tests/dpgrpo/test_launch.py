"""`privcheck run dp-grpo` under a launcher (docs/scaling.md, "DP-GRPO on several processes").

The fast tier launches the CLI with `python -m torch.distributed.run --standalone --nproc-per-node 2` (2 gloo
ranks) on the gpu-h200 preset in reduced form on the CPU, with a seed whose 8 rounds hold at most 2 records, and
runs the single-process reference in this process meanwhile (`run_dpgrpo` with `launch=None`: `DPTrainer`, no
process group). With at most 2 records the fp32 sum of clipped contributions is v0 + v1 both ways, so the
released weights must be bit-identical (their sha256 is compared) and the public telemetry equal to 1e-12
relative. The refusals are shown per rank in this process (the launcher's variables set by monkeypatch), before
any process group exists. `scripts/gpu_dpgrpo.sh --dry-run` is checked against privcheck's own parser.

The slow tier (`make test-slow`): the same run under `accelerate launch` (its torchrun-based multi-process
launcher on CPU), and the refusal under torchrun itself.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mechanisms.dpgrpo import core
from mechanisms.dpgrpo.pipeline import run as runmod
from mechanisms.dpgrpo.presets import get_preset
from mechanisms.dpgrpo.randomness import TorchRandomness

REPO = Path(__file__).resolve().parents[2]
PRESET = ["--preset", "gpu-h200", "--reduced", "--device", "cpu", "--arms", "dp_grpo", "--skip-verification"]
LAUNCH_TIMEOUT_S = 300
RANK_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_RUN_ID")


def _seed_with_small_batches() -> int:
    """The first seed whose T rounds of the reduced gpu-h200 preset hold at most 2 records each, with an empty
    round and a round of 2 (so both ranks hold a record), read from the coins stream itself."""
    p = get_preset("gpu-h200", reduced=True)
    for seed in range(1000):
        gen = TorchRandomness.seeded(seed).coins
        sizes = [int(core.poisson_coins(p.n, p.m / p.n, gen).sum()) for _ in range(p.T)]
        if max(sizes) == 2 and 0 in sizes:
            return seed
    raise AssertionError("no seed below 1000 has rounds of at most 2 records")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS and not k.startswith("ACCELERATE_")}
    env.update(PYTHONPATH=str(REPO), HF_HOME=str(tmp / "hf"), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return env


def _launch(launcher: list, out: Path, seed: int, tmp: Path) -> subprocess.Popen:
    cmd = [sys.executable, *launcher, "-m", "privcheck.cli", "run", "dp-grpo", *PRESET, "--seed", str(seed),
           "--out", str(out), "--json"]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _load(path: Path) -> dict:
    return json.loads(path.read_text("utf-8"))


def _private(run_dir: Path, doc: dict) -> list:
    """The private telemetry lines without their wall-clock seconds."""
    lines = [json.loads(x) for x in (run_dir / doc["private_telemetry_ref"]["path"]).read_text().splitlines()]
    return [{k: v for k, v in line.items() if k != "wall_s"} for line in lines]


def _close(a, b, rel=1e-12) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    return a == b


_SINGLE: dict = {}


def _single(tmp_path_factory) -> tuple[int, Path]:
    """The single-process run (plain process: `DPTrainer`, no process group), seeded as the launched runs; once
    per session."""
    if not _SINGLE:
        seed = _seed_with_small_batches()
        out = tmp_path_factory.mktemp("single") / "run"
        runmod.run_dpgrpo("gpu-h200", out=out, reduced=True, device="cpu", seed=seed, arms=["dp_grpo"],
                          skip_verification=True, progress=False, launch=None)
        _SINGLE.update(seed=seed, out=out)
    return _SINGLE["seed"], _SINGLE["out"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return _single(tmp_path_factory)


@pytest.fixture(scope="module")
def torchrun(tmp_path_factory):
    """`python -m torch.distributed.run --standalone --nproc-per-node 2 -m privcheck.cli run dp-grpo ...`, with the
    single-process reference computed in this process while the ranks run."""
    tmp = tmp_path_factory.mktemp("torchrun")
    seed = _seed_with_small_batches()
    out = tmp / "run"
    # --standalone: torchrun's own store binds a free port (no race with other processes picking ports)
    proc = _launch(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"], out, seed, tmp)
    try:
        ref = _single(tmp_path_factory)
        stdout, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-4000:]
    return out, stdout, ref


def _assert_equal_to_single(launched: Path, ref: Path, seed: int, launcher: str) -> None:
    name = f"run-dp_grpo-seed{seed}.json"
    a, b = _load(launched / name), _load(ref / name)
    # the released LoRA weights: bit-identical files (sha256 recorded and recomputed)
    assert a["released_weights"]["sha256"] == b["released_weights"]["sha256"]
    assert (launched / a["released_weights"]["path"]).read_bytes() == (ref / b["released_weights"]["path"]).read_bytes()
    assert _close(a["public_telemetry"], b["public_telemetry"]) and len(a["public_telemetry"]) == 8
    assert _close(a["evaluation"]["curve"], b["evaluation"]["curve"])
    # mechanism, plan and ε unchanged (the accountant's own wall time aside)
    assert a["config"] == b["config"]
    pa, pb = (json.loads(json.dumps(d["privacy"])) for d in (a, b))
    for p in (pa, pb):
        p["accountant"]["record"].pop("wall_time_s")
        p["accountant"]["record"]["details"].pop("wall_time_s")
    assert pa == pb and pa["epsilon"] <= 8.0
    assert a["public_inputs"] == b["public_inputs"] and a["randomness"] == b["randomness"]
    # the gathered private telemetry reads as in one process: batch sizes, norms, per-record dicts
    priv_a, priv_b = _private(launched, a), _private(ref, b)
    assert _close(priv_a, priv_b)
    sizes = [line["batch_size"] for line in priv_b]
    assert max(sizes) == 2 and 0 in sizes                       # an empty round, and both ranks held a record
    assert a["timing"]["private_over_nonprivate"] is not None   # the timing rounds ran on both ranks as well
    assert a["environment"]["distributed"] == {"world_size": 2, "backend": "gloo", "launcher": launcher,
                                               "writer_rank": 0, "trainer": "DistributedDPTrainer"}
    assert "distributed" not in b["environment"]
    assert a["privacy_release"] is False                        # seeded: never a release, launched or not


def test_torchrun_two_ranks_equal_one_process(torchrun):
    out, _, (seed, ref) = torchrun
    _assert_equal_to_single(out, ref, seed, "torchrun")


def test_torchrun_has_one_writer(torchrun):
    """Rank 0 alone writes DIR (the same files as the single process, nothing staged left beside it) and prints
    the one summary; rank 1 prints nothing on stdout."""
    out, stdout, (seed, ref) = torchrun
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert files == sorted(str(p.relative_to(ref)) for p in ref.rglob("*"))
    assert {p.name for p in out.parent.iterdir()} <= {"run", "hf"}
    lines = stdout.strip().splitlines()
    assert len(lines) == 1                                      # rank 0's summary, nothing from rank 1
    payload = json.loads(lines[0])
    assert payload["status"] == "complete" and payload["compare"] == str(out / "compare.json")
    assert payload["epsilon"] == _load(ref / f"run-dp_grpo-seed{seed}.json")["privacy"]["epsilon"]


def test_docs_show_what_the_artifact_records(torchrun):
    """docs/scaling.md shows the `environment.distributed` entry of a torchrun run on 2 CPU ranks."""
    out, _, (seed, _) = torchrun
    text = (REPO / "docs" / "scaling.md").read_text("utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, flags=re.S) if '"world_size"' in b]
    assert len(blocks) == 1
    assert blocks[0] == {"distributed": _load(out / f"run-dp_grpo-seed{seed}.json")["environment"]["distributed"]}


# ------------------------------------------------------------------------------------------- refusals, per rank

def _as_rank(monkeypatch, rank: int, world_size: int = 2, **extra) -> None:
    for k in RANK_VARS:
        monkeypatch.delenv(k, raising=False)
    env = {"WORLD_SIZE": world_size, "RANK": rank, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world_size,
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500, "TORCHELASTIC_RUN_ID": "test", **extra}
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, str(v))


def _refused(tmp_path, capsys, argv) -> str:
    import torch.distributed as dist

    from privcheck.cli import main
    out = tmp_path / "dir"
    assert main(["run", "dp-grpo", *argv, "--out", str(out)]) == 2
    assert not out.exists() and not dist.is_initialized()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("rank", [0, 1])
def test_lora_dropout_is_refused_on_every_rank(tmp_path, capsys, monkeypatch, rank):
    """tiny-cpu has LoRA dropout 0.05: each rank refuses before any process group, exit 2, nothing written."""
    _as_rank(monkeypatch, rank)
    err = _refused(tmp_path, capsys, ["--preset", "tiny-cpu", "--reduced", "--seed", "0"])
    assert "invalid lora_dropout=0.05" in err and "torchrun" in err


@pytest.mark.parametrize("name, env", [
    ("WORLD_SIZE", {"WORLD_SIZE": "two"}),
    ("WORLD_SIZE", {"WORLD_SIZE": "0"}),
    ("RANK", {"RANK": "2"}),
    ("LOCAL_RANK", {"LOCAL_RANK": "-1"}),
    ("MASTER_ADDR", {"MASTER_ADDR": None}),
    ("MASTER_PORT", {"MASTER_PORT": "70000"}),
    ("ACCELERATE_MIXED_PRECISION", {"ACCELERATE_MIXED_PRECISION": "bf16"}),
    ("ACCELERATE_DYNAMO_BACKEND", {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}),
])
def test_bad_launch_environment_is_refused(tmp_path, capsys, monkeypatch, name, env):
    _as_rank(monkeypatch, 1, **env)
    err = _refused(tmp_path, capsys, PRESET + ["--seed", "0"])
    assert f"invalid {name}=" in err


def test_a_cuda_rank_without_its_gpu_is_refused(tmp_path, capsys, monkeypatch):
    """LOCAL_RANK 1 with one visible GPU (CUDA and NCCL stubbed: the check runs before any device work)."""
    import torch
    import torch.distributed as dist
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    _as_rank(monkeypatch, 1)
    err = _refused(tmp_path, capsys, ["--preset", "gpu-h200", "--reduced", "--device", "cuda", "--seed", "0"])
    assert "invalid LOCAL_RANK=1" in err


def test_a_plain_process_reads_no_launch(monkeypatch):
    from mechanisms.dpgrpo.pipeline.launch import detect_launch
    for k in RANK_VARS:
        monkeypatch.delenv(k, raising=False)
    assert detect_launch() is None
    launch = detect_launch({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
                            "MASTER_PORT": "1234", "ACCELERATE_MIXED_PRECISION": "no"})
    assert (launch.world_size, launch.rank, launch.local_rank, launch.launcher, launch.writer) == \
        (4, 3, 1, "accelerate launch", False)


# ------------------------------------------------------------------------------------------- scripts/gpu_dpgrpo.sh

def _script(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_dpgrpo.sh"), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=30)


@pytest.mark.parametrize("nproc", [None, "1", "4"])
def test_gpu_script_dry_run_prints_commands_privcheck_accepts(nproc):
    from privcheck.cli import build_parser
    r = _script(*(["--nproc", nproc] if nproc else []), "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        argv = shlex.split(line)
        if nproc is None:
            assert argv[:3] == ["privcheck", "run", "dp-grpo"]
            rest = argv[1:]
        else:
            assert argv[:6] == ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc]
            assert argv[6:8] == ["-m", "privcheck.cli"]
            rest = argv[8:]
        args = build_parser().parse_args(rest)     # the arguments privcheck would receive
        assert (args.preset, args.device, args.arms) == ("gpu-h200", "cuda", ["dp_grpo"])
    assert [shlex.split(x)[-1] for x in lines] == ["SMOKE_DIR", "OUT/dpgrpo"]


@pytest.mark.parametrize("args", [["--nproc", "0"], ["--nproc", "x"], ["--nproc"], ["--nproc=-2"], ["--gpus", "2"]])
def test_gpu_script_refuses_bad_arguments(args):
    r = _script(*args, "--dry-run")
    assert r.returncode == 2 and r.stdout == "" and "gpu_dpgrpo.sh:" in r.stderr


# ------------------------------------------------------------------------------------------- slow tier

@pytest.mark.slow    # ~45 s: the same run as the torchrun test, launched by accelerate
def test_accelerate_launch_two_ranks_equal_one_process(reference, tmp_path):
    seed, ref = reference
    out = tmp_path / "run"
    proc = _launch(["-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu", "--num_processes", "2",
                    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                    "--main_process_port", str(_free_port())], out, seed, tmp_path)
    stdout, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    assert proc.returncode == 0, stderr[-4000:]
    _assert_equal_to_single(out, ref, seed, "accelerate launch")


@pytest.mark.slow    # ~20 s
def test_torchrun_refuses_lora_dropout_with_no_artifact(tmp_path):
    """Under torchrun itself: the refusal is printed, the first rank to exit is reported with exit code 2, nothing is
    written. (Each rank refuses on its own, as the per-rank tests show; torchrun stops the others once one rank
    exits, so which rank is reported, and the others' exit codes, race.)"""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
           "privcheck.cli", "run", "dp-grpo", "--preset", "tiny-cpu", "--reduced", "--seed", "0", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    assert r.returncode != 0 and not out.exists()
    assert r.stderr.count("privcheck: error: invalid lora_dropout=0.05") >= 1
    root = r.stderr.split("Root Cause")[-1]
    assert re.search(r"exitcode\s*: 2 ", root), r.stderr[-3000:]
