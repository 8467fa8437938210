"""The observed sampling scheme's figures beside the user's Poisson claim (docs/integrations/opacus.md, "Loaders
that are not Poisson").

`SuiteBindings.sampling_scheme` is what an integration observed the loop to iterate (duck-typed: `scheme`, `line()`,
`to_json()`, `event()` → (event or None, note, whether the event is the whole run);
`privcheck.integrations.sampling_scheme.ObservedScheme`). `scheme_report(b)` gives the JSON block and the message
line the `poisson_sampling` check adds to its result: the scheme, and for a scheme that is not Poisson its figures
from `privcheck.accounting.epsilon(event, δ)` (an upper bound, or +inf with the reason and the certified lower
bound) next to `user_epsilon`, the user's claim, which describes Poisson sampling. The claim is never replaced, and
no Poisson figure is reported as the scheme's.
"""

from __future__ import annotations

import math

from privcheck.errors import PrivcheckError

__all__ = ["scheme_report"]


def scheme_report(b) -> tuple[dict | None, str]:
    """({"observed": scheme JSON, "figures": ... or None, "user_epsilon", "why_no_figures"}, message line), or
    (None, "") when the bindings observed no scheme."""
    scheme = getattr(b, "sampling_scheme", None)
    if scheme is None:
        return None, ""
    block = {"observed": scheme.to_json(), "figures": None, "user_epsilon": None, "why_no_figures": None}
    if scheme.scheme == "poisson":
        return block, f"observed sampling scheme: {scheme.line()}"
    user = _user_epsilon(b)
    block["user_epsilon"] = user
    claim = ("the user's Poisson claim: no user_epsilon bound" if user is None else
             f"the user's Poisson claim ε = {user:.6g} (q = {b.q}) describes Poisson sampling, not this loader")
    try:
        event, note, whole = scheme.event()
        if event is None:
            block["why_no_figures"] = note
            return block, f"observed sampling scheme: {scheme.line()}: no figures ({note}); {claim}"
        if b.delta is None:
            block["why_no_figures"] = "no delta bound"
            return block, f"observed sampling scheme: {scheme.line()}: no figures (no delta bound); {claim}"
        from privcheck.accounting import epsilon

        record = epsilon(event, b.delta)
    except PrivcheckError as exc:        # an event or accountant that refuses these parameters says why
        block["why_no_figures"] = str(exc)
        return block, f"observed sampling scheme: {scheme.line()}: no figures ({exc}); {claim}"
    lower = record.certified.lower if record.certified is not None else None
    upper, reason = record.value, record.reason
    if not whole and math.isfinite(upper):    # part of the run: its upper bound is not the run's
        upper, reason = math.inf, f"the event covers part of the run, so only its lower bound is the run's ({note})"
    block["figures"] = {"event": event.to_json(), "delta": b.delta, "epsilon": upper, "epsilon_lower": lower,
                        "neighboring": record.neighboring, "method": record.method, "reason": reason, "note": note,
                        "whole_run": whole}
    # the user's claim is add/remove: a figure under another relation says so
    relation = "" if record.neighboring == "add_remove" else f" ({record.neighboring} neighbours)"
    if math.isfinite(upper):
        enclosure = "" if lower is None else f" (certified enclosure [{lower:.6g}, {upper:.6g}])"
        figure = f"ε ≤ {upper:.6g}{enclosure} at δ = {b.delta:g}{relation} ({note})"   # with what it assumes
    elif lower is not None and lower > 0:
        figure = (f"certified lower bound ε ≥ {lower:.6g} at δ = {b.delta:g}{relation}, no upper bound "
                  f"claimed ({reason or note})")
    else:
        figure = f"no figure ({reason})"
    return block, f"observed sampling scheme: {scheme.line()}: {figure}; {claim}"


def _user_epsilon(b) -> float | None:
    raw = getattr(b, "user_epsilon", None)
    if raw is None:
        return None
    raw = raw() if callable(raw) else raw
    return float(getattr(raw, "value", raw))
