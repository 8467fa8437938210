"""Ctrl-C (SIGINT) and SIGTERM: one interruption, wherever it lands, that unwinds through every writer's cleanup.

By default SIGTERM (`kill PID`, a CI job's timeout, `docker stop`) ends the process at once: no `finally` block runs,
so temporary files, staging directories and the output directory's lock would be left behind. Inside a scope of
this module both signals raise KeyboardInterrupt in the main thread instead, and record that an interruption was
requested (docs/artifacts.md, "Interrupted commands"):

* `terminate_as_interrupt()` — the library's scope: a signal raises KeyboardInterrupt anywhere in the block.
* `command_interrupts()` — the command line's scope: a signal raises only while the command runs
  (`interruptible(command)`, not while its outcome is reported) and, since every command's commit is its last act,
  no longer once its output is committed (`note_commit`): the command then finishes and exits with its status.

In both, a signal that arrives while an interruption is already unwinding (a second Ctrl-C during the cleanup) is
recorded and not raised, so the cleanup runs to its end; and a KeyboardInterrupt Python cannot raise (in a finaliser
or a weakref callback, where it would be printed as "Exception ignored" and lost) is delivered again once the main
thread is back in ordinary code.

Native code can hide the KeyboardInterrupt raised in a Python callback: python-flint's `acb.integral` turns one
raised in its integrand into `SystemError: ... returned a result with an exception set`, other extensions into an
exception of their own. `is_interruption(exc)` tells such an exception apart (an interruption was requested in this
scope, or a KeyboardInterrupt is in its `__cause__`/`__context__` chain) and `reraise_if_interrupted(exc)`, the
first line of every broad `except` on the path of a long command, raises KeyboardInterrupt for it, so that no
interruption is recorded as a failed check and carried on.

`deferred_interrupts()` holds signals back for a short block that must run to its end (a commit and its cleanup,
claiming an output directory); they are delivered when it ends.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from dataclasses import dataclass
from types import CodeType

__all__ = ["SIGNALS", "command_interrupts", "deferred_interrupts", "interrupt_requested", "interruptible",
           "is_interruption", "note_commit", "reraise_if_interrupted", "terminate_as_interrupt"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(eq=False)
class _Scope:
    within: CodeType | None        # signals raise only while this code runs (None: anywhere in the scope)
    commit_ends: bool              # a commit ends the interruptible part (the command line)
    committed: bool = False
    requested: bool = False


_scopes: list[_Scope] = []         # innermost last; only the main thread installs scopes


def interruptible(command):
    """`command()`; under `command_interrupts()` signals raise KeyboardInterrupt only while it runs (one that arrived
    in the scope before it started interrupts it at once)."""
    if interrupt_requested():
        raise KeyboardInterrupt("interrupted before the command started")
    return command()


def interrupt_requested() -> bool:
    """Whether SIGINT or SIGTERM arrived in the current scope (always False outside one)."""
    return bool(_scopes) and _scopes[-1].requested


def _chain(exc: BaseException | None):
    """`exc` and every exception in its `__cause__` and `__context__` chains (each once)."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def is_interruption(exc: BaseException) -> bool:
    """Whether `exc` is an interruption in disguise: a signal arrived in this scope, or a KeyboardInterrupt is in
    its chain (native code that called a Python callback re-raised it as another exception)."""
    return interrupt_requested() or any(isinstance(e, KeyboardInterrupt) for e in _chain(exc))


def reraise_if_interrupted(exc: BaseException) -> None:
    """Raise KeyboardInterrupt (chained to `exc`) when `exc` is an interruption; the first line of a broad
    `except`, which must not record an interruption as an error and carry on."""
    if is_interruption(exc):
        raise KeyboardInterrupt("interrupted") from exc


def note_commit() -> None:
    """The output is committed: under `command_interrupts()` the rest of the command (printing its result) is no
    longer interrupted. The writers call it inside their commit window."""
    if _scopes and _scopes[-1].commit_ends:
        _scopes[-1].committed = True


def _running(frame, code: CodeType) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _unwinding() -> bool:
    """Whether the exception being handled (an `except`, `finally` or `__exit__` on the stack) is an interruption:
    its cleanup is running."""
    exc = sys.exception()
    return exc is not None and any(isinstance(e, KeyboardInterrupt) for e in _chain(exc))


def _on_signal(signum, frame):
    scope = _scopes[-1] if _scopes else None
    if scope is None:
        return
    scope.requested = True
    if scope.committed or _unwinding() or (scope.within is not None and not _running(frame, scope.within)):
        return                     # recorded only: the output is committed, a cleanup runs, or the command is done
    raise KeyboardInterrupt(f"interrupted by {signal.Signals(signum).name}")


def _unraisable(hook):
    """A `sys.unraisablehook` that delivers again an interruption Python could not raise: a KeyboardInterrupt raised
    in a finaliser or a weakref callback (an import's module lock, a `__del__`) would otherwise be printed with its
    traceback ("Exception ignored in ...") and lost. Other unraisable exceptions go to `hook`."""
    def unraisable(info):
        if not (isinstance(info.exc_value, KeyboardInterrupt) and _scopes):
            return hook(info)
        # from another thread, a moment later, so that the handler runs once the main thread is back in ordinary
        # code (called from here, it would run inside this hook); no thread starts while the interpreter shuts down
        with contextlib.suppress(RuntimeError):
            _thread.start_new_thread(_interrupt_main_soon, (_scopes[-1],))
    return unraisable


def _interrupt_main_soon(scope: _Scope) -> None:
    time.sleep(0.01)
    if scope in _scopes:                   # never after the scope: the caller's handler would raise outside it
        _thread.interrupt_main(signal.SIGINT)


def _forget_unhandled_interrupt() -> None:
    """CPython notes a KeyboardInterrupt that leaves code run by `PyRun_String` (an extension imported at the moment
    of the interruption does that) and, under `python -m`, ends the process with SIGINT after it exits, whatever
    its status; a successful `PyRun_SimpleString` clears the note, so that the exit status stays 130."""
    with contextlib.suppress(ImportError, AttributeError):
        import ctypes
        ctypes.pythonapi.PyRun_SimpleString(b"")


def _ignore_while_exiting(scope: _Scope) -> None:
    """The process exits next, with its status decided: ignore SIGINT and SIGTERM from now on. Python puts its own
    handlers back to the default action early in its shutdown, before the (with torch: seconds of) module teardown,
    where the default action would end the process by the signal instead; an ignored signal stays ignored."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if scope.requested:
        _forget_unhandled_interrupt()


@contextlib.contextmanager
def _scope(within, commit_ends: bool, restore: bool = True):
    if threading.current_thread() is not threading.main_thread():    # Python cannot install handlers there
        yield
        return
    scope = _Scope(within, commit_ends)
    _scopes.append(scope)
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    hook, sys.unraisablehook = sys.unraisablehook, _unraisable(sys.unraisablehook)
    try:
        yield
    finally:
        if restore:
            sys.unraisablehook = hook
            for s, handler in previous.items():
                signal.signal(s, signal.SIG_DFL if handler is None else handler)
            _scopes.pop()
        else:
            _ignore_while_exiting(scope)


def terminate_as_interrupt():
    """For the block, SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (a second one while the first
    unwinds is recorded only); the previous handlers are restored after. Outside the main thread (where Python
    cannot install handlers) the block runs unchanged."""
    return _scope(None, commit_ends=False)


def command_interrupts(*, exiting: bool = False):
    """The command line's scope: as `terminate_as_interrupt`, but a signal raises only inside `interruptible(...)`
    and not after `note_commit()`. `exiting`: the process exits after the block (the `privcheck` script), so the
    handlers are not put back: signals are ignored from then on, and one that arrives while the interpreter shuts
    down changes neither the output nor the exit status."""
    return _scope(interruptible.__code__, commit_ends=True, restore=not exiting)


@contextlib.contextmanager
def deferred_interrupts():
    """Hold SIGINT and SIGTERM back for the block, which runs to its end; one that arrived is delivered when the
    block ends (to the handler in force then: a KeyboardInterrupt, or the process's default action). Outside the
    main thread, or when a handler was not installed from Python (it could not be put back), the block runs
    unchanged."""
    if threading.current_thread() is not threading.main_thread() or None in map(signal.getsignal, SIGNALS):
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)
