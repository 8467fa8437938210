"""What every training check shares: the bindings (`SuiteBindings`), the result wrapper and float64 helpers.

A check is `check_<name>(b: SuiteBindings, precision=None, **options) -> CheckResult` of suite "dpgrpo":

- a binding the check needs is missing → status "skipped" with the names of the missing fields (never "pass");
- a bound callable cannot show what the check needs (`privcheck.errors.CannotObserve`) → status "fail" with
  "cannot observe <what>: <reason>";
- a bound callable raises anything else → status "error" naming the binding and the user function that raised
  (the traceback is kept in `observed["traceback"]`);
- otherwise "pass"/"fail" from the comparison with an *independent* reference, under the tolerance the check's
  docstring states for the precision (`privcheck.checks.precision`); a failure's message names each failed
  quantity, its value and its bound ("quantity: value (bound: ...)", `bound_message`).

Every check runs inside `privcheck.rng_state.preserved_rng`: the global random states and the trainer's own
generators (`SuiteBindings.generators`) are as the check found them when it returns, so running the checks
never shifts the random draws of the user's run.

This module is the leaf the check modules import (`privcheck.checks.dpsgd`, `.grpo`, `.whole_step`,
`.catalogue`); `privcheck.checks.training` re-exports it. It imports torch lazily, inside functions.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from privcheck.artifacts.records import CheckResult
from privcheck.errors import CannotObserve, PrivcheckError
from privcheck.interrupts import reraise_if_interrupted
from privcheck.rng_state import preserved_rng

__all__ = ["AT_MOST_ZERO", "EQUAL", "NONE_FAILED", "SUITE", "WITHIN", "DropoutEnabled", "SkipCheck", "SuiteBindings",
           "as_f64", "assert_no_dropout", "bound_message", "evaluate", "fields_rule", "max_abs", "need", "raised_by",
           "ref_clip", "value_of"]

SUITE = "dpgrpo"
# the verdict rule of a check that lists every failed quantity in observed["failures"] and passes iff none failed
# (privcheck.artifacts.verdicts): `privcheck report` re-derives its verdict from that list
NONE_FAILED = {"kind": "none_failed", "field": "failures"}
# field rules of the checks whose observed, expected and tolerance are objects keyed by quantity
WITHIN = {"kind": "within"}                      # |observed[k] − expected[k]| ≤ tolerance[k]
EQUAL = {"kind": "equal"}                        # observed[k] = expected[k]
AT_MOST_ZERO = {"kind": "at_most", "bound": 0.0}  # observed[k] ≤ tolerance[k]


def fields_rule(**rules) -> dict:
    """The verdict rule "every named field passes its rule" (privcheck.artifacts.verdicts)."""
    return {"kind": "fields", "fields": rules}


class DropoutEnabled(PrivcheckError, ValueError):
    """A check was given a model with a dropout probability > 0 (breaks V4, V6, V7, V8: a random dropout
    mask makes one record's gradient differ between two evaluations, so no bit-identity comparison can hold)."""


class SkipCheck(Exception):
    """Raised inside a check when a binding it needs is missing."""


@dataclass
class SuiteBindings:
    """User-supplied callables and fixtures for the checks (docs/dpgrpo.md, "Pointing the checks at your own
    trainer"). Every field is optional."""

    # entry points
    sample: Callable | None = None
    advantages: Callable | None = None
    prompt_loss: Callable | None = None
    token_logprobs: Callable | None = None
    record_gradient: Callable | None = None
    record_loss_and_grad: Callable | None = None
    contributions: Callable | None = None
    clipped_sum: Callable | None = None
    privatize: Callable | None = None
    noisy_update: Callable | None = None
    private_update: Callable | None = None
    flat_update: Callable | None = None
    clip: Callable | None = None
    make_randomness: Callable | None = None
    epsilon_pld: Callable | None = None
    epsilon_rdp: Callable | None = None
    calibrate_sigma: Callable | None = None
    # fixtures
    items: Sequence | None = None
    additions: Sequence | None = None
    make_gradient_record: Callable | None = None
    perturb: Callable | None = None
    constant_items: Sequence | None = None
    reference_record_gradient: Callable | None = None
    chunk_item: Any = None
    initial_params: Any = None
    model: Any = None
    logprob_cases: Sequence | None = None
    # metadata
    C: float | None = None
    q: float | None = None
    n: int | None = None
    sigma: float | None = None
    dim: int | None = None
    G: int | None = None
    beta: float | None = None
    target: str = ""
    # whole-step checks (privcheck.checks.whole_step): a `WholeStepBindings` that builds fresh runs of the
    # user's real training step on neighbouring datasets
    whole_step: Any = None
    # whole-run checks (privcheck.checks.whole_run): a `WholeRunBindings` that runs the user's whole training on
    # neighbouring datasets with noise replay (docs/whole_run.md)
    whole_run: Any = None
    # the user's own accounting, compared with privcheck's PLD by `accountant_agreement`: the event describing
    # the run (a PoissonGaussianEvent or CompositionHistory at the user's q, σ, T), δ, and the ε the user's
    # accountant reports (a float, or a callable () -> float)
    accountant_event: Any = None
    delta: float | None = None
    user_epsilon: Any = None
    # the sampling scheme the trainer's loop was observed to iterate (e.g.
    # `privcheck.integrations.sampling_scheme.ObservedScheme`): poisson_sampling reports it and, when it is not
    # Poisson, its own figures beside user_epsilon (`privcheck.checks.scheme_report`)
    sampling_scheme: Any = None
    # the precision the bound trainer computes in ("float64", "float32" or "bfloat16"); selects the tolerances
    # of every check when the run does not name one
    precision: str | None = None
    # checks that do not apply to the bound trainer: check name -> the reason, reported with status "skipped"
    not_applicable: Mapping[str, str] | None = None
    # the trainer's own generator objects (torch, numpy or `random.Random`) that the checks draw from; every check
    # restores their states (and the global ones) when it returns
    generators: Sequence | None = None
    # what these bindings verify (a `privcheck.artifacts.identity.Subject`: the trainer's identity and declared
    # check-mode differences); `run_suite` stamps every result with it
    subject: Any = None


# --------------------------------------------------------------------------------------------- helpers

def assert_no_dropout(model) -> None:
    """Raise `DropoutEnabled` if `model` has any dropout probability > 0 (modules or config attributes)."""
    if model is None:
        return
    import torch

    bad = []
    if isinstance(model, torch.nn.Module):
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.modules.dropout._DropoutNd) and mod.p > 0:
                bad.append(f"{name or type(mod).__name__}.p={mod.p}")
    config = getattr(model, "config", None)
    if config is not None:
        attrs = config.to_dict() if hasattr(config, "to_dict") else vars(config)
        for key, value in attrs.items():
            if ("drop" in key.lower()) and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value > 0:
                bad.append(f"config.{key}={value}")
    if bad:
        raise DropoutEnabled("checks need every dropout probability to be 0 (random masks break bit identity); found: "
                             + ", ".join(bad[:8]))


def need(b: SuiteBindings, *names: str) -> None:
    """Raise `SkipCheck` naming every field of `names` that `b` leaves unbound (None)."""
    missing = [n for n in names if getattr(b, n) is None]
    if missing:
        raise SkipCheck("missing binding(s): " + ", ".join(missing))


def value_of(x) -> float:
    """A float from a number or from a record with `.value` (an `AccountingRecord`, a `Calibration`)."""
    return float(getattr(x, "value", x))


def bound_message(rows: Sequence[tuple[str, Any, Any, bool]]) -> str:
    """The failed rows of (quantity, value, bound, ok) as "quantity: value (bound: bound)", joined by "; "."""
    def text(x):
        return f"{x:.6g}" if isinstance(x, float) else str(x)
    return "; ".join(f"{q}: {text(val)} (bound: {text(bound)})" for q, val, bound, ok in rows if not ok)


_CHECKS_DIR = Path(__file__).resolve().parent
_PACKAGE_DIR = _CHECKS_DIR.parent


def _inside(frame, root: Path) -> bool:
    try:
        return Path(frame.filename).resolve().is_relative_to(root)
    except (OSError, ValueError):
        return False


def raised_by(exc: BaseException) -> str:
    """Who raised `exc` inside a check: "binding <f> raised <Type>: <text> (in <user function> at <file:line>)",
    where <f> is the callable the check called and the user function is the first frame outside privcheck."""
    frames = traceback.extract_tb(exc.__traceback__)
    last_check = max((k for k, f in enumerate(frames) if _inside(f, _CHECKS_DIR)), default=-1)
    what = f"{type(exc).__name__}: {exc}"
    if last_check == len(frames) - 1:
        where = frames[-1] if frames else None
        at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
        return f"the check itself raised {what}{at}"
    callee = frames[last_check + 1].name
    user = next((f for f in frames[last_check + 1:] if not _inside(f, _PACKAGE_DIR)), None)
    at = f" (in {user.name} at {user.filename}:{user.lineno})" if user is not None else ""
    return f"binding {callee} raised {what}{at}"


def evaluate(bindings, name: str, precision: str, reference: str, inputs: dict, fn: Callable[[], dict]
             ) -> CheckResult:
    """`fn()` returns dict(passed, observed, expected, tolerance, message), run with every random state restored
    afterwards. A check the bindings declare `not_applicable` is reported skipped with their reason and never
    run; `CannotObserve` is a failure, any other exception an error naming who raised it (module docstring)."""
    start = time.perf_counter()
    reason = (getattr(bindings, "not_applicable", None) or {}).get(name)
    if reason is not None:
        return CheckResult(name=name, suite=SUITE, passed=False, observed=None, expected=None, tolerance=None,
                           reference=reference, inputs=inputs, message=f"skipped: {name} does not apply: {reason}",
                           seconds=0.0, status="skipped", precision=precision)

    def result(message, status, observed=None, out=None):
        out = out or {}
        return CheckResult(name=name, suite=SUITE, passed=status == "pass", observed=out.get("observed", observed),
                           expected=out.get("expected"), tolerance=out.get("tolerance"), reference=reference,
                           inputs=inputs, message=message, seconds=time.perf_counter() - start, status=status,
                           precision=precision, rule=out.get("rule") if status in ("pass", "fail") else None)

    try:
        with preserved_rng(getattr(bindings, "generators", None) or ()):
            out = fn()
        return result(out.get("message", ""), "pass" if out["passed"] else "fail", out=out)
    except SkipCheck as exc:
        return result(f"skipped: {exc}", "skipped")
    except CannotObserve as exc:
        return result(str(exc), "fail", observed={"cannot_observe": exc.what, "reason": exc.reason})
    except DropoutEnabled:
        raise
    except Exception as exc:  # noqa: BLE001 - a raising callable is an "error" result, never a pass
        reraise_if_interrupted(exc)
        return result(raised_by(exc), "error", observed={"traceback": traceback.format_exc(limit=8)})


def ref_clip(v, C):
    """Independent float64 transcription of clip_C (Algorithm 1, line 7): v·min(1, C/‖v‖), non-finite → 0."""
    import torch

    x = v.detach().to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        return torch.zeros_like(x)
    norm = math.sqrt(float((x * x).sum()))
    if not math.isfinite(norm):
        return torch.zeros_like(x)
    return x * (C / norm) if norm > C else x.clone()


def as_f64(x):
    """`x` detached, flattened and in float64 (the dtype every reference comparison is made in)."""
    import torch

    return x.detach().to(torch.float64).reshape(-1)


def max_abs(a, b) -> float:
    """max |a − b| elementwise in float64 (0 for empty tensors)."""
    if a.numel() == 0:
        return 0.0
    return float((as_f64(a) - as_f64(b)).abs().max())
