"""Run independent audit tasks serially or as Ray tasks (docs/scaling.md, "Audit sweeps on Ray").

`run_tasks(fn, inputs, backend="serial" | "ray", address=None, max_retries=3)` evaluates `fn(item)` for every
item of `inputs` and returns a `TaskRun`: the results in input order (None where a task failed), the failures
(index, error text, attempts) and the execution record that artifacts store (`TaskRun.to_json()`).

* Same inputs, same results: a task's randomness must come from its input (callers derive one seed per task with
  `privcheck.randomness.RandomnessPolicy.derive_seed`), never from the backend, the worker or the order in which
  tasks finish, so "serial" and "ray" give identical results.
* Retries are Ray's own (`max_retries`, `retry_exceptions=True`: an exception or a lost worker re-runs the task up
  to `max_retries` times); the serial backend applies the same policy in-process, so a task that fails once and
  then succeeds counts as finished on both backends. A task that fails on every attempt is listed in `failures`,
  its result is None, and it never counts as finished: callers count only `finished` results.
* Ray is an optional extra (`pip install 'privcheck[ray]'`), imported only for backend "ray". Without an address
  an initialised Ray is reused, else `ray.init()` starts a local one; with an address (`"auto"`, `"HOST:PORT"`,
  `"ray://HOST:PORT"`) `ray.init(address=...)` joins an existing cluster. Ray does not report attempt counts of
  successful tasks to the driver, so `retried` is None on Ray.
* Bad input (backend, address, retries, a non-callable, inputs that Ray cannot pickle) raises InvalidParameter
  before any task runs. A progress bar (tqdm) is shown on a TTY only.
"""

from __future__ import annotations

import numbers
import re
import sys
from dataclasses import dataclass

from privcheck.errors import InvalidParameter, PrivcheckError
from privcheck.interrupts import reraise_if_interrupted

__all__ = ["BACKENDS", "DEFAULT_MAX_RETRIES", "MAX_RETRIES_LIMIT", "RAY_EXTRA", "TaskFailure", "TaskRun",
           "check_backend", "error_text", "run_tasks"]

BACKENDS = ("serial", "ray")
DEFAULT_MAX_RETRIES = 3          # Ray's own default for tasks
MAX_RETRIES_LIMIT = 100
RAY_EXTRA = "pip install 'privcheck[ray]'"
_HOST_PORT = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9._\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class TaskFailure:
    """Task `index` failed on each of its `attempts` attempts; `error` is the last one's "Type: message". On Ray,
    `attempts` is max_retries + 1: Ray reports a task's error only once its retries are spent."""
    index: int
    error: str
    attempts: int

    def to_json(self) -> dict:
        return {"index": self.index, "error": self.error, "attempts": self.attempts}


@dataclass(frozen=True)
class TaskRun:
    """The outcome of `run_tasks`: `results[i]` is task i's value, None when it is in `failures`."""
    backend: str
    results: tuple
    failures: tuple[TaskFailure, ...]
    max_retries: int
    retried: tuple[tuple[int, int], ...] | None    # (index, attempts) of tasks that needed > 1 attempt; None on Ray
    address: str | None
    ray_version: str | None

    @property
    def finished(self) -> tuple[int, ...]:
        """Indices of the tasks that finished, in input order."""
        failed = {f.index for f in self.failures}
        return tuple(i for i in range(len(self.results)) if i not in failed)

    def to_json(self) -> dict:
        return {"backend": self.backend, "tasks": len(self.results), "finished": len(self.finished),
                "failed": [f.to_json() for f in self.failures], "max_retries": self.max_retries,
                "retry_exceptions": True,
                "retried": None if self.retried is None else [list(r) for r in self.retried],
                "ray_address": self.address, "ray_version": self.ray_version}


def check_backend(backend="serial", address=None, max_retries=DEFAULT_MAX_RETRIES) -> tuple[str, str | None, int]:
    """Validated (backend, address, max_retries); InvalidParameter names the first bad one."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidParameter("backend", backend, " or ".join(repr(b) for b in BACKENDS))
    if isinstance(max_retries, bool) or not isinstance(max_retries, numbers.Integral) \
            or not 0 <= int(max_retries) <= MAX_RETRIES_LIMIT:
        raise InvalidParameter("max_retries", max_retries, f"an integer in [0, {MAX_RETRIES_LIMIT}]")
    if address is not None:
        if backend != "ray":
            raise InvalidParameter("ray_address", address, "None unless backend is 'ray'")
        if not isinstance(address, str) or not (address == "auto" or _valid_host_port(address)):
            raise InvalidParameter("ray_address", address,
                                   "'auto', 'HOST:PORT' or 'ray://HOST:PORT' (port 1-65535) of a running Ray cluster")
    return backend, address, int(max_retries)


def _valid_host_port(address: str) -> bool:
    match = _HOST_PORT.match(address)
    return bool(match) and 1 <= int(match.group("port")) <= 65535


def error_text(exc: BaseException) -> str:
    """"Type: message", the same on both backends (Ray's task errors are unwrapped to their cause)."""
    return f"{type(exc).__name__}: {exc}"


def _progress(total: int, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with the train extra
        return None
    return tqdm(total=total, desc=desc, disable=not sys.stderr.isatty())


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise PrivcheckError(f"backend 'ray' needs Ray ({RAY_EXTRA}): {exc}") from None
    return ray


def _apply(fn, item):
    """The remote body: `fn(item)` (module level, so Ray pickles it by reference)."""
    return fn(item)


def run_tasks(fn, inputs, *, backend="serial", address=None, max_retries=DEFAULT_MAX_RETRIES,
              desc: str = "tasks") -> TaskRun:
    """Evaluate `fn(item)` for each item of `inputs` on `backend` (module docstring)."""
    backend, address, max_retries = check_backend(backend, address, max_retries)
    if not callable(fn):
        raise InvalidParameter("fn", fn, "a callable taking one task input")
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, (list, tuple)):
        raise InvalidParameter("inputs", type(inputs).__name__, "a list or tuple of task inputs")
    inputs = tuple(inputs)
    if backend == "serial":
        return _run_serial(fn, inputs, max_retries, desc)
    ray = _import_ray()
    _check_picklable(ray, fn, inputs)
    return _run_ray(ray, fn, inputs, address, max_retries, desc)


def _check_picklable(ray, fn, inputs) -> None:
    """Ray ships the function and every input to its workers: refuse what it cannot pickle before any work."""
    from ray import cloudpickle

    for name, obj in [("fn", fn), *((f"inputs[{i}]", item) for i, item in enumerate(inputs))]:
        try:
            cloudpickle.dumps(obj)
        except Exception as exc:
            reraise_if_interrupted(exc)
            raise InvalidParameter(name, type(obj).__name__, f"a picklable object ({error_text(exc)})") from None


def _run_serial(fn, inputs, max_retries: int, desc: str) -> TaskRun:
    results, failures, retried = [None] * len(inputs), [], []
    bar = _progress(len(inputs), desc)
    try:
        for i, item in enumerate(inputs):
            for attempt in range(1, max_retries + 2):
                try:
                    results[i] = fn(item)
                except Exception as exc:          # retried like Ray's retry_exceptions=True
                    reraise_if_interrupted(exc)
                    if attempt == max_retries + 1:
                        failures.append(TaskFailure(i, error_text(exc), attempt))
                    continue
                if attempt > 1:
                    retried.append((i, attempt))
                break
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return TaskRun("serial", tuple(results), tuple(failures), max_retries, tuple(retried), None, None)


def _connect(ray, address: str | None) -> str:
    """Reuse an initialised Ray, else `ray.init()` (local) or `ray.init(address=...)`; returns the GCS address."""
    if not ray.is_initialized():
        try:
            ray.init() if address is None else ray.init(address=address)
        except ConnectionError as exc:
            raise InvalidParameter("ray_address", address, f"the address of a running Ray cluster ({exc})") from None
    return ray.get_runtime_context().gcs_address


def _run_ray(ray, fn, inputs, address: str | None, max_retries: int, desc: str) -> TaskRun:
    from ray.exceptions import RayError, RayTaskError

    if not inputs:
        return TaskRun("ray", (), (), max_retries, None, address, ray.__version__)
    used = _connect(ray, address)
    remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=True)(_apply).options(name=desc)
    fn_ref = ray.put(fn)                      # shipped once, not once per task
    refs = [remote.remote(fn_ref, item) for item in inputs]
    index = {ref: i for i, ref in enumerate(refs)}
    results, failures = [None] * len(inputs), []
    bar = _progress(len(inputs), desc)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            if pending:                                   # and whatever else is ready, in one call
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                done = done + more
            for ref in done:
                i = index[ref]
                try:
                    results[i] = ray.get(ref)
                except RayTaskError as exc:               # the task raised on every attempt
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                    failures.append(TaskFailure(i, error_text(cause), max_retries + 1))
                except RayError as exc:                   # e.g. its worker died on every attempt
                    failures.append(TaskFailure(i, error_text(exc), max_retries + 1))
                if bar is not None:
                    bar.update(1)
    except BaseException:
        for ref in pending:                              # e.g. Ctrl-C: stop what has not run yet
            ray.cancel(ref)
        raise
    finally:
        if bar is not None:
            bar.close()
    failures.sort(key=lambda f: f.index)
    return TaskRun("ray", tuple(results), tuple(failures), max_retries, None, used, ray.__version__)
