"""Typed errors. Every rejection of user input names the parameter and its allowed range."""

__all__ = ["SHOWN_MAX", "CalibrationMismatch", "CanariesNotObserved", "CannotObserve", "CertificationError",
           "InvalidParameter", "PrivcheckError", "shown"]

SHOWN_MAX = 200     # characters of a value an error message shows


def shown(value, limit: int = SHOWN_MAX) -> str:
    """repr(value) for an error message, cut to its first `limit` characters with "… (N characters)" after them
    when longer (N: the length of a string value, else of its repr), so that a 1 MB value is not echoed whole."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(value) if isinstance(value, str) else len(text)} characters)"


class PrivcheckError(Exception):
    """Base class of the library's own errors."""


class InvalidParameter(PrivcheckError, ValueError):
    """A public parameter is outside its allowed range (or not a finite number). The message shows at most
    SHOWN_MAX characters of the value (`shown`)."""

    def __init__(self, name: str, value, allowed: str):
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {name}={shown(value)}: allowed range is {allowed}")


class CertificationError(PrivcheckError, ArithmeticError):
    """Ball arithmetic could not decide a bound within the precision limit (fail closed)."""


class CalibrationMismatch(PrivcheckError, ValueError):
    """A calibration record (or a claimed ε) does not belong to the plan it is attached to: its event or δ differ
    from the plan's own public parameters, so the ε it carries is not the plan's ε."""


class CannotObserve(PrivcheckError):
    """A check cannot observe a quantity it needs through the bindings it was given (a loader whose batches cannot
    be rebuilt, a step that never reaches the optimizer, ...). The check reports it as a failure, with the message
    "cannot observe <what>: <reason>": an unverified property is never a pass."""

    def __init__(self, what: str, reason: str):
        self.what = what
        self.reason = reason
        super().__init__(f"cannot observe {what}: {reason}")


class CanariesNotObserved(PrivcheckError):
    """An audit's canaries never reached what the audit reads (no step logged, no canary ever included, an included
    canary the trainer did not treat as one, reserved coordinates never nonzero): the audit cannot see, so it
    refuses to report a bound, which would read ε_lower = 0 for a mechanism it never measured. `what` names what
    was not observed, `why` the likely cause."""

    def __init__(self, what: str, why: str):
        self.what = what
        self.why = why
        super().__init__(f"the audit cannot see its canaries: {what} was not observed ({why})")
