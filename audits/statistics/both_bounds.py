"""The second bound of a one-run audit of a DP-SGD-style run: the claim-curve f-DP ε_lower of the Steinke test's own
counts (docs/audits.md, "Auditing DP-GRPO in one run", "Two bounds from one test").

`with_claim_curve(report, event)` returns the Steinke report with `result.fdp_claim_curve` added:
{method, eps_lower, assumption, noise_scale, rejects_nominal, search_capped}, from
`audits.statistics.fdp_claim.claim_eps_lower(m_test, guesses, correct, event, claim δ, significance / n_hypotheses)`.
Every input of that call is read from the sealed report itself, i.e. what the Steinke test used: the same counts of
the same pre-registered rule at the same level. So the f-DP bound is a valid test at that level under its one extra
assumption (`claim_family:<event JSON>`: the mechanism's trade-off curve is the audited event's with its noise
scaled), and `rejects_nominal` (the claimed curve itself rejected) needs no extra assumption. The Steinke
`result.eps_lower` stays the headline; nothing else of the report changes.
"""

from __future__ import annotations

import dataclasses

from audits.statistics.fdp_claim import claim_eps_lower, claim_family_label
from audits.statistics.report import FDP_BLOCK, AuditReport
from privcheck.accounting import CompositionHistory, GaussianEvent, PoissonGaussianEvent
from privcheck.errors import InvalidParameter
from privcheck.serialization import thaw

__all__ = ["claim_curve_block", "with_claim_curve"]


def claim_curve_block(report: AuditReport, event) -> dict:
    """The `result.fdp_claim_curve` block of a Steinke one-run report against `event` (module docstring)."""
    if not isinstance(report, AuditReport) or report.method != "steinke_one_run":
        raise InvalidParameter("report", getattr(report, "method", type(report).__name__),
                               "an AuditReport of method steinke_one_run")
    if not isinstance(event, (GaussianEvent, PoissonGaussianEvent, CompositionHistory)):
        raise InvalidParameter("event", type(event).__name__,
                               "the audited GaussianEvent, PoissonGaussianEvent or CompositionHistory")
    res = report.result
    level = res["significance"] / report.guessing["n_hypotheses"]     # the Steinke test's own level
    out = claim_eps_lower(report.canaries["m_test"], res["guesses"], res["correct"], event, report.claim["delta"],
                          level)
    block = {"method": "fdp_claim_curve", "eps_lower": out["eps_lower"], "assumption": claim_family_label(event),
             "noise_scale": out["s"], "rejects_nominal": out["rejects_nominal"],
             "search_capped": out["search_capped"]}
    return block


def with_claim_curve(report: AuditReport, event) -> AuditReport:
    """`report` with `result.fdp_claim_curve` = `claim_curve_block(report, event)`."""
    block = claim_curve_block(report, event)
    return dataclasses.replace(report, result={**thaw(report.result), FDP_BLOCK: block})
