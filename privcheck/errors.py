"""Typed errors. Every rejection of user input names the parameter and its allowed range."""


class PrivcheckError(Exception):
    """Base class of the library's own errors."""


class InvalidParameter(PrivcheckError, ValueError):
    """A public parameter is outside its allowed range (or not a finite number)."""

    def __init__(self, name: str, value, allowed: str):
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {name}={value!r}: allowed range is {allowed}")


class CertificationError(PrivcheckError, ArithmeticError):
    """Ball arithmetic could not decide a bound within the precision limit (fail closed)."""
