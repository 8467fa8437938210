"""In-process harness for `privcheck.cli.main`: run an argument vector in a sandbox directory and observe the exit
status, stdout, stderr, whether work started, and which files appeared (used by tests/test_cli_fuzz.py and
tests/test_cli_hostile.py).

"Work started" is observed by patching a command's first expensive call with `start_work`, which raises
`WorkStarted`: a BaseException, so that no handler of the command line turns it into an exit status. Whatever the
command claimed or staged before it is rolled back as for any exception (the output-directory claim removes a
directory it created). `deadline(seconds)` ends a command that blocks (a FIFO opened or read without O_NONBLOCK)
with `Blocked`, another BaseException, instead of hanging the test.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from privcheck.cli import main

__all__ = ["Blocked", "Outcome", "WorkStarted", "deadline", "listing", "make_sandbox", "patched_work", "run_cli",
           "start_work"]


class WorkStarted(BaseException):
    """The patched first expensive call of a command was reached."""


class Blocked(BaseException):
    """A command ran past its deadline (e.g. blocked reading a FIFO): a BaseException, so that no handler of the
    command line turns it into an exit status."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise `Blocked` in the block once it has run `seconds` (SIGALRM: a blocking open or read of a FIFO is
    interrupted too; main thread only)."""
    def expired(signum, frame):
        raise Blocked(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def start_work(*args, **kwargs):
    raise WorkStarted()


@contextlib.contextmanager
def patched_work(targets):
    """Replace each "module:attribute" of `targets` with `start_work` for the block."""
    saved = []
    try:
        for target in targets:
            module_name, _, attr = target.partition(":")
            module = importlib.import_module(module_name)
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, start_work)
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


def make_sandbox(root: Path) -> dict[str, str]:
    """A sandbox under `root`: a regular file, a file named like GGUF weights that is not, an empty directory, and
    the names of paths that do not exist yet. Returns the placeholders of the argument vectors ({out}, {file},
    {gguf}, {dir}, {missing})."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "file").write_text("x\n")
    (root / "weights.gguf").write_bytes(b"not GGUF")
    (root / "dir").mkdir(exist_ok=True)
    return {"{out}": str(root / "out"), "{file}": str(root / "file"), "{gguf}": str(root / "weights.gguf"),
            "{dir}": str(root / "dir"), "{missing}": str(root / "missing")}


def listing(root: Path) -> set[str]:
    """Every path under `root`, relative, with a trailing slash for directories."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        found.update(str(rel / d) + "/" for d in dirnames)
        found.update(str(rel / f) for f in filenames)
    return found


@dataclass
class Outcome:
    code: int | None          # exit status; None when work started
    out: str
    err: str
    started: bool
    new_paths: set[str]       # paths under the sandbox that were not there before
    argparse_exit: bool       # the status came from argparse (SystemExit), not from `main`'s return value

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def run_cli(argv: list[str], sandbox: Path) -> Outcome:
    """`main(argv)` with the sandbox as working directory and stdout/stderr captured."""
    before = listing(sandbox)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(sandbox)
    code, started, from_argparse = None, False, False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                from_argparse = True
                code = 0 if exc.code is None else exc.code
            except WorkStarted:
                started = True
    finally:
        os.chdir(cwd)
    return Outcome(code, out.getvalue(), err.getvalue(), started, listing(sandbox) - before, from_argparse)
