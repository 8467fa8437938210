"""Interruptions (privcheck.interrupts; docs/artifacts.md, "Interrupted commands"): Ctrl-C and SIGTERM end every
command with exit 130 and one line, wherever they land (native code included), and leave the output directory as it
was or with the complete new output.

The signal tests of the command line run `privcheck` as a process (Linux: /proc tells when its handlers are in
place) and signal it at seeded random delays counted from that moment; `make test` signals `verify --suite
selection`, the slow tier sweeps every long command, the DP-GRPO audit included.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from privcheck import cli
from privcheck.artifacts import ArtifactDirectory, check_artifact, claim_output_directory, load_artifact
from privcheck.interrupts import (
    command_interrupts,
    deferred_interrupts,
    interrupt_requested,
    interruptible,
    is_interruption,
    note_commit,
    reraise_if_interrupted,
    terminate_as_interrupt,
)

ROOT = Path(__file__).resolve().parents[1]
INTERRUPTED = "privcheck: interrupted"


def _chained(outer: BaseException, inner: BaseException, how: str) -> BaseException:
    """`outer` raised while handling `inner` ("context") or from it ("cause")."""
    try:
        try:
            raise inner
        except BaseException as exc:
            if how == "cause":
                raise outer from exc
            raise outer
    except BaseException as exc:
        return exc


# ------------------------------------------------------------------------------------------ the helpers

@pytest.mark.parametrize("how", ["cause", "context"])
def test_a_keyboard_interrupt_in_the_chain_is_an_interruption(how):
    hidden = _chained(SystemError("<cyfunction acb.integral> returned a result with an exception set"),
                      KeyboardInterrupt(), how)
    deeper = _chained(RuntimeError("backward hook failed"), hidden, how)
    assert is_interruption(hidden) and is_interruption(deeper)
    with pytest.raises(KeyboardInterrupt) as raised:
        reraise_if_interrupted(deeper)
    assert raised.value.__cause__ is deeper


def test_other_exceptions_are_not_and_pass_through():
    plain = _chained(ValueError("x"), TypeError("y"), "context")
    plain.__context__.__context__ = plain                      # a cycle: the chain is walked once
    assert not is_interruption(plain) and not interrupt_requested()
    assert reraise_if_interrupted(plain) is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_interrupts_and_is_recorded_for_the_scope(signum):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signum)
        assert interrupt_requested()
        assert is_interruption(ValueError("raised while the interruption unwinds"))
    assert not interrupt_requested()                           # the flag belongs to the scope
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_second_signal_during_the_cleanup_is_recorded_only():
    cleaned = []
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            try:
                signal.raise_signal(signal.SIGINT)
            finally:
                signal.raise_signal(signal.SIGINT)            # Ctrl-C again: the cleanup still runs to its end
                cleaned.append("done")
    assert cleaned == ["done"]


def test_an_interrupt_raised_in_a_finaliser_is_delivered_again(capfd):
    class Finalised:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)                # Python can only print what this raises, and go on

    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            obj = Finalised()
            del obj
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:                # delivered again, to ordinary code
                pass
    assert "Exception ignored" not in capfd.readouterr().err


def test_deferred_signals_arrive_when_the_block_ends():
    steps = []
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            with deferred_interrupts():
                with deferred_interrupts():
                    signal.raise_signal(signal.SIGTERM)
                    steps.append("inner block finished")
                steps.append("outer block finished")
    assert steps == ["inner block finished", "outer block finished"]


def test_the_command_line_is_interrupted_inside_the_command_and_before_its_commit_only():
    def committed_then_signalled():
        note_commit()
        signal.raise_signal(signal.SIGINT)                     # recorded: the output is committed
        return interrupt_requested()

    with command_interrupts():
        with pytest.raises(KeyboardInterrupt):
            interruptible(lambda: signal.raise_signal(signal.SIGINT))
        signal.raise_signal(signal.SIGTERM)                    # while the outcome is reported: recorded only
    with command_interrupts():
        signal.raise_signal(signal.SIGTERM)                    # before the command starts: it never does
        with pytest.raises(KeyboardInterrupt):
            interruptible(lambda: pytest.fail("the command started"))
    with command_interrupts():
        assert interruptible(committed_then_signalled) is True
    with terminate_as_interrupt():                              # the library's scope: every signal interrupts
        note_commit()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)


# ------------------------------------------------------------------------------------------ writers

def _signal_in(monkeypatch, module, name, signum=signal.SIGTERM):
    """Make `module.name` (a function the writer calls) send `signum` to this process before it runs."""
    real = getattr(module, name)

    def signalled(*args, **kwargs):
        signal.raise_signal(signum)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, signalled)


def test_a_signal_during_a_commit_completes_it_then_interrupts_a_library_caller(tmp_path, monkeypatch):
    import privcheck.artifacts.writer as writer
    _signal_in(monkeypatch, writer, "note_commit")              # inside the commit window, once the files moved
    out = tmp_path / "out"
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            with ArtifactDirectory(out) as staging:
                staging.write_bytes("result.txt", b"complete")
    assert sorted(p.name for p in out.iterdir()) == ["result.txt"]


def test_a_signal_while_claiming_finds_the_directory_claimed_then_released(tmp_path, monkeypatch):
    import privcheck.artifacts.outdir as outdir
    _signal_in(monkeypatch, outdir, "remove_leftovers", signal.SIGINT)     # the claim's last step
    with terminate_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            with claim_output_directory(tmp_path / "new" / "out"):
                pytest.fail("the block ran although the claim was interrupted")
    assert list(tmp_path.iterdir()) == []                      # the lock and the directories it made are gone


# ------------------------------------------------------------------------------------------ the command line

def _command(monkeypatch, work):
    """`privcheck account gaussian ...` running `work(args)` instead."""
    monkeypatch.setattr(cli, "cmd_account_gaussian", work)
    return ["account", "gaussian", "--sensitivity", "1", "--sigma", "1", "--delta", "1e-5"]


def _interrupting_integrand(at: int, interrupt):
    """An integrand for `privcheck.numerics.integrate` that calls `interrupt()` at its `at`-th evaluation."""
    calls = itertools.count()

    def integrand(z):
        if next(calls) == at:
            interrupt()
        return (-z * z).exp()
    return integrand


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


@pytest.mark.parametrize("interrupt", [lambda: signal.raise_signal(signal.SIGINT),
                                       lambda: signal.raise_signal(signal.SIGTERM), _raise_keyboard_interrupt],
                         ids=["SIGINT", "SIGTERM", "KeyboardInterrupt"])
@pytest.mark.parametrize("at", [0, 5])
def test_an_interrupt_inside_a_flint_integral_exits_130(monkeypatch, capsys, interrupt, at):
    from privcheck.numerics.integrate import integrate

    def work(args):
        integrate(_interrupting_integrand(at, interrupt), 0, 1)
        return 0
    try:
        integrate(_interrupting_integrand(at, _raise_keyboard_interrupt), 0, 1)
    except BaseException as exc:     # python-flint 0.9: SystemError("... returned a result with an exception set")
        assert is_interruption(exc) and not interrupt_requested()
    else:
        pytest.fail("the integral ignored the KeyboardInterrupt of its integrand")
    assert cli.main(_command(monkeypatch, work)) == cli.EXIT_INTERRUPTED
    captured = capsys.readouterr()
    assert captured.err == INTERRUPTED + "\n" and captured.out == ""


def test_a_check_interrupted_inside_a_flint_integral_is_no_failed_check():
    from privcheck.checks import Recorder
    from privcheck.numerics.integrate import integrate

    recorder = Recorder("interrupts")
    with pytest.raises(KeyboardInterrupt):
        recorder.run("integral", lambda: integrate(_interrupting_integrand(3, _raise_keyboard_interrupt), 0, 1),
                     reference="none")
    assert recorder.checks == []


def test_a_signal_in_the_commit_window_lets_the_command_finish(tmp_path, monkeypatch, capsys):
    import privcheck.artifacts.writer as writer
    _signal_in(monkeypatch, writer, "note_commit")
    out = tmp_path / "out"

    def work(args):
        with claim_output_directory(out) as claimed, ArtifactDirectory(claimed) as staging:
            staging.write_bytes("result.txt", b"complete")
        signal.raise_signal(signal.SIGINT)                      # after the commit too: the command prints its result
        print("written")
        return 0
    assert cli.main(_command(monkeypatch, work)) == cli.EXIT_OK
    assert capsys.readouterr() == ("written\n", "")
    assert sorted(p.name for p in out.iterdir()) == ["result.txt"]


def test_an_error_raised_by_an_interruption_is_reported_as_one(monkeypatch, capsys):
    def work(args):
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            raise OSError("the cleanup failed")                # replaces the KeyboardInterrupt
    assert cli.main(_command(monkeypatch, work)) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err == INTERRUPTED + "\n"


# ------------------------------------------------------------------------------------------ signals at random points

def _handlers_installed(pid: int) -> bool:
    """Whether process `pid` catches SIGTERM (privcheck's handler is in place; Linux /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask >> (signal.SIGTERM - 1) & 1)


def _signalled(command: list[str], delay: float | None, signum: int, repeat: int = 1, timeout: float = 300
               ) -> subprocess.CompletedProcess:
    """Run `command` (python arguments), send `signum` `delay` seconds after its handlers are installed (unless it
    has finished; no signal when `delay` is None), `repeat` times 2 ms apart, and wait for it."""
    if not Path("/proc/self/status").is_file():
        pytest.fail("this test needs /proc (Linux) to see when the process's signal handlers are in place")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not _handlers_installed(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if delay is not None:
        time.sleep(delay)
        for _ in range(repeat):
            if proc.poll() is None:
                proc.send_signal(signum)
            time.sleep(0.002)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _temporary(name: str) -> bool:
    """A name a writer uses while it works (the lock, `.privcheck-KIND.PID.RANDOM`), never one a command leaves."""
    return name == ".privcheck.lock" or (name.startswith(".privcheck-") and name != ".privcheck-manifest.json")


def _check_outcome(done: subprocess.CompletedProcess, out: Path, complete) -> str:
    """Exit 130 with one line and nothing written, or exit 0 with the complete output (`complete(out)`); no
    traceback, no temporary name left behind. Returns "interrupted" or "finished"."""
    err = done.stderr.strip()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert len(err.splitlines()) <= 1, err
    if done.returncode == cli.EXIT_INTERRUPTED:
        assert err == INTERRUPTED, err
        assert not out.exists(), sorted(out.rglob("*"))      # the claim made it, and removed it again
        return "interrupted"
    assert not [p for p in out.rglob("*") if _temporary(p.name)]
    assert done.returncode == cli.EXIT_OK and err == "", (done.returncode, err)
    complete(out)
    return "finished"


def _verification_checks_out(out: Path) -> None:
    assert check_artifact(load_artifact(out / "verification.json")) == []
    assert (out / "report.md").is_file()


def _delays(seed: int, count: int, low: float, high: float):
    rng = random.Random(seed)
    return [(rng.uniform(low, high), rng.choice([signal.SIGINT, signal.SIGTERM])) for _ in range(count)]


# `privcheck.cli.main()` run as the `privcheck` script after `patch`
LAUNCHER = """
import sys
{patch}
from privcheck.cli import main
sys.exit(main())
"""
# a signal the process sends itself inside the commit window, once the files are moved, before the commit is noted
SIGNAL_IN_COMMIT = """
import signal
import privcheck.artifacts.writer as writer
noted = writer.note_commit
def note_commit():
    signal.raise_signal(signal.SIGTERM)
    noted()
writer.note_commit = note_commit
"""


def _verify(argv, delay, signum, tmp_path, repeat=1, patch=None):
    out = tmp_path / "out"
    python = ["-m", "privcheck.cli"] if patch is None else ["-c", LAUNCHER.format(patch=patch)]
    done = _signalled([*python, "verify", *argv, "--out", str(out)], delay, signum, repeat)
    return _check_outcome(done, out, _verification_checks_out)


@pytest.mark.parametrize("delay, signum", _delays(23, 2, 0.0, 2.0))
def test_verify_selection_signalled_at_a_random_point(tmp_path, delay, signum):
    _verify(["--suite", "selection"], delay, signum, tmp_path)


def test_verify_selection_signalled_twice_exits_130_with_one_line(tmp_path):
    (delay, _), = _delays(29, 1, 0.2, 1.5)
    assert _verify(["--suite", "selection"], delay, signal.SIGINT, tmp_path, repeat=2) == "interrupted"


def test_verify_selection_signalled_in_its_commit_window_finishes(tmp_path):
    assert _verify(["--suite", "selection"], None, signal.SIGTERM, tmp_path, patch=SIGNAL_IN_COMMIT) == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(5, 6, 0.0, 3.5))
def test_verify_selection_sweep(tmp_path, delay, signum):
    _verify(["--suite", "selection"], delay, signum, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(7, 3, 0.5, 30.0))
def test_verify_accounting_sweep(tmp_path, delay, signum):
    _verify(["--suite", "accounting"], delay, signum, tmp_path)


def _artifacts_check_out(*names):
    def complete(out: Path) -> None:
        for name in names:
            assert check_artifact(load_artifact(out / name)) == [], name
    return complete


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(11, 2, 0.5, 8.0))
def test_simulate_selection_sweep(tmp_path, delay, signum):
    out = tmp_path / "out"
    done = _signalled(["-m", "privcheck.cli", "simulate", "selection", "--quick", "--out", str(out)], delay, signum)
    _check_outcome(done, out, _artifacts_check_out("selection_simulation.json"))


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(13, 2, 0.5, 10.0))
def test_run_selection_sweep(tmp_path, delay, signum):
    out = tmp_path / "out"
    argv = ["run", "selection", "--seed", "1", "--n", "4", "--prompts", "2", "--out", str(out)]
    done = _signalled(["-m", "privcheck.cli", *argv], delay, signum)
    _check_outcome(done, out, _artifacts_check_out("selection_run.json"))


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(17, 2, 1.0, 14.0))
def test_run_dpgrpo_sweep(tmp_path, delay, signum):
    out = tmp_path / "out"
    argv = ["run", "dp-grpo", "--preset", "tiny-cpu", "--reduced", "--seed", "1", "--rounds", "2", "--arms", "dp_grpo",
            "--skip-verification", "--no-timing", "--out", str(out)]
    done = _signalled(["-m", "privcheck.cli", *argv], delay, signum)
    _check_outcome(done, out, _artifacts_check_out("compare.json", "run-dp_grpo-seed1.json"))


# The audit runs on tiny-cpu with 2 public pretraining steps and n = 4 (as tests/audits/conftest.py's
# `lightly_pretrained`), registered in the process before `privcheck.cli.main()` runs.
AUDIT_PRESET = """
import dataclasses
from audits.dpgrpo import gradient_canary as dc
from mechanisms.dpgrpo import presets
presets.PRESETS["tiny-cpu-4"] = dataclasses.replace(presets.TINY_CPU, name="tiny-cpu-4", pretrain_steps=2, n=4, m=1)
dc.AUDIT_PRESETS["tiny-cpu-4"] = lambda: dc.audit_preset("tiny-cpu-4")
"""
AUDIT_ARGV = ["audit", "dp-grpo", "--preset", "tiny-cpu-4", "--canaries", "16", "--rounds", "4", "--q", "1",
              "--seed", "3"]


def _audit_complete(out: Path) -> None:
    """All of the audit's files, its artifact checking out; a rerun into `out` is refused (docs/artifacts.md)."""
    from audits.dpgrpo.gradient_canary import check_fresh_out
    from privcheck.errors import InvalidParameter

    assert check_artifact(load_artifact(out / "audit.json")) == []
    for name in ("private/auditor_log.jsonl", "private/reveal.json", "scores.png", "bound_vs_m.png"):
        assert (out / name).is_file(), name
    with pytest.raises(InvalidParameter, match="one audit per directory"):
        check_fresh_out(out)


def _audit(tmp_path, delay, signum, patch=""):
    out = tmp_path / "audit"
    done = _signalled(["-c", LAUNCHER.format(patch=AUDIT_PRESET + patch), *AUDIT_ARGV, "--out", str(out)], delay,
                      signum)
    outcome = _check_outcome(done, out, _audit_complete)
    if outcome == "interrupted":
        from audits.dpgrpo.gradient_canary import check_fresh_out
        check_fresh_out(out)                                   # nothing left: a rerun is accepted
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("delay, signum", _delays(19, 4, 2.0, 12.0))
def test_audit_dpgrpo_sweep(tmp_path, delay, signum):
    _audit(tmp_path, delay, signum)


@pytest.mark.slow
def test_audit_dpgrpo_signalled_in_its_commit_window_completes(tmp_path):
    assert _audit(tmp_path, None, signal.SIGTERM, patch=SIGNAL_IN_COMMIT) == "finished"
