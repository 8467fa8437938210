"""Black-box pair audits of the selection bug zoo (docs/selection.md "Bug zoo", docs/audits.md).

Each broken variant of tests/bug_zoo/test_selection_zoo.py is rebuilt here as a runnable mechanism (the zoo
expresses most of them as exact laws) and audited with `audits.blackbox.pair_audit` on a worst-case pair of
`audits.selection_pairs`. The reference implementation is audited on the same pair. A variant is caught by
the audit when its ε_lower exceeds the ε the implementation claims; the "check" side is the zoo's own test
(exact law, tightness, public-constants probe, filter check), called here for the variants that no pair
audit can catch.

Pair configurations differ from the zoo's constants where those make the extremal event too rare to sample
(e.g. PrivBoN at Δ = 0.1, σ = 0.2: P_D′(candidate 1) ≈ 1e-7 at σ/2); they were chosen from the exact laws,
and the power preconditions are asserted from those laws before sampling.

Error rates: every audit runs at confidence 1 − 5e-7, so a correct implementation is "caught" with
probability ≤ 5e-7 per audit. Each broken variant's bound exceeds its claim by ≥ 10 standard
deviations of the bound (over 10 other seeds; `python -m tests.bug_zoo.test_selection_audits` prints the
table, docs/audits.md shows it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import tests.bug_zoo.test_selection_zoo as zoo
from audits.selection_pairs import (
    privbon_pair,
    privbon_worst_pair,
    privitp_independence_probe,
    privitp_phase1_pair,
    privitp_phase2_pair,
)
from mechanisms.selection import PrivBoN, PrivITP, SelectionResult
from mechanisms.selection.privitp import run_phase2
from privcheck.accounting import PrivITPParams

CONFIDENCE = 1 - 5e-7
SEED = 20240605


# --- the broken variants as runnable mechanisms -------------------------------------------------------------------

class HalfNoisePrivBoN(PrivBoN):
    """privbon_half_noise: Gumbel scale σ/2 while the record charges the ε of σ."""

    def select(self, scores, rng=None):
        noisy = PrivBoN(self.sensitivity, self.sigma / 2, self.r_max, self.r_lo).select(scores, rng)
        return dataclasses.replace(noisy, record=self.epsilon_record(np.shape(scores)[-1], noisy.prompts))


class UnclippedPrivBoN(PrivBoN):
    """privbon_unclipped: Gumbel-max on the raw scores (no clipping to the public range)."""

    def select(self, scores, rng=None):
        s = np.asarray(scores, dtype=np.float64)
        idx = np.argmax(s + rng.gumbel(0.0, self.sigma, size=s.shape), axis=1)
        return SelectionResult(mechanism="privbon", indices=idx, record=self.epsilon_record(s.shape[1], s.shape[0]),
                               randomness_mode="caller_generator", privacy_release=False)


class DataDependentRmaxPrivBoN(PrivBoN):
    """data_dependent_rmax: R_max taken from the observed scores (so the charged ε depends on the data)."""

    def select(self, scores, rng=None):
        s = np.asarray(scores, dtype=np.float64)
        return PrivBoN(self.sensitivity, self.sigma, float(s.max()), self.r_lo).select(s, rng)


class ReusedPoolPrivITP(PrivITP):
    """privitp_reused_pool: Phase 2 runs on the Phase-1 candidates (as in the zoo)."""

    def select(self, phase1_scores, phase2_scores, rng=None, **kw):
        return super().select(phase1_scores, np.array(phase1_scores, copy=True), rng, **kw)


def less_phase2_noise(scores, lambda_tilde, c, sigma_z, gen):
    """privitp_phase2_sigma_mismatch (the unsafe direction): Phase-2 noise σ_Z/2, M and accountant at σ_Z."""
    return run_phase2(scores, lambda_tilde, c, sigma_z / 2, gen)


# --- audited pairs ------------------------------------------------------------------------------------------------

BON_SIGMA = 2.0                               # Δ = R = 1: claimed ε_BoN(16) = 0.935, true loss at σ/2 = 1.857
ITP_SIGMA = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.05, sigma_z=0.25, headroom=0.5, sensitivity=0.25,
                          delta=1e-5, r_max=zoo.R)
ITP_C = PrivITPParams(candidates=4, beta=0.05, sigma_x=0.05, sigma_z=0.5, headroom=1.0, sensitivity=1.0,
                      delta=1e-5, r_max=zoo.R)  # at λ̃ = 0.8 the headroom-free accountant under-reports κ_acc
ITP_C_LAMBDA = 0.8
MU_ONE = dataclasses.replace(zoo.PARAMS, sigma_x=0.01)      # the zoo's μ = Δ/σ_X = 1 configuration
OUT_OF_RANGE = dict(scores_D=[1.0, zoo.R + 2.0 - 1.0], scores_Dprime=[0.0, zoo.R + 2.0], sensitivity=1.0,
                    sigma=1.0, r_max=zoo.R)           # the zoo's out-of-range pattern with n = 2, Δ = R = 1
RMAX_PAIR = dict(scores_D=[1.0, 2.0], scores_Dprime=[0.0, 3.0], sensitivity=1.0, sigma=1.0, r_max=3.0)
PROBE = (zoo.PARAMS, [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.5] * 4)


@dataclass(frozen=True)
class ZooAudit:
    variant: str
    defect: str
    pair: Callable            # broken=False/True -> SelectionPair
    samples: int
    claim_note: str
    criterion: str = "plugin_ratio"
    min_margin: float = 0.0   # exact (reference-law) ln-ratio of the broken variant minus its claim, asserted


AUDITS = [
    ZooAudit("privbon_half_noise", "Gumbel scale σ/2, record charges ε of σ",
             lambda broken: privbon_worst_pair(1.0, BON_SIGMA, zoo.N, zoo.R,
                                               mechanism=HalfNoisePrivBoN(1.0, BON_SIGMA, zoo.R) if broken else None),
             100_000, "ε_BoN(16), Δ = R = 1, σ = 2"),
    ZooAudit("privbon_unclipped", "scores not clipped to [0, R_max]",
             lambda broken: privbon_pair(**OUT_OF_RANGE,
                                         mechanism=UnclippedPrivBoN(1.0, 1.0, zoo.R) if broken else None),
             100_000, "ε_BoN(2), Δ = R = 1, σ = 1, scores 2 above the range"),
    ZooAudit("data_dependent_rmax", "R_max = max of the observed scores",
             lambda broken: privbon_pair(**RMAX_PAIR, mechanism=DataDependentRmaxPrivBoN(1.0, 1.0, 3.0) if broken
                                         else None),
             200_000, "ε_BoN(2) the variant reports on D (R = max = 2); public R = 3 gives 1.736"),
    ZooAudit("privitp_reused_pool", "Phase 2 reuses the Phase-1 candidates",
             lambda broken: privitp_independence_probe(*PROBE, mechanism=ReusedPoolPrivITP(zoo.PARAMS) if broken
                                                       else None),
             20_000, "ε = 0 between permuted Phase-1 lists (same law)"),
    ZooAudit("privitp_accountant_c_mismatch", "accountant c = R − λ̃, mechanism c = R + σ_Z·L − λ̃",
             lambda broken: privitp_phase2_pair(ITP_C, ITP_C_LAMBDA, 1, accountant_params=dataclasses.replace(
                 ITP_C, headroom=0.0) if broken else None),
             200_000, "ε2(t = 1) = κ_acc at λ̃ = 0.8, σ_Z = 0.5, Δ = 1, L = 1", min_margin=0.3),
    ZooAudit("privitp_phase2_sigma_mismatch", "Phase-2 noise σ_Z/2, M and accountant at σ_Z",
             lambda broken: privitp_phase2_pair(ITP_SIGMA, 0.0, 1, phase2=less_phase2_noise if broken else None),
             100_000, "ε2(t = 1) = κ_acc at λ̃ = 0, σ_Z = 0.25, Δ = 0.25"),
    ZooAudit("mu_charged_as_eps1", "Phase 1 charged μ = Δ/σ_X instead of the analytic ε1",
             lambda broken: privitp_phase1_pair(MU_ONE, phase1_epsilon=(MU_ONE.sensitivity / MU_ONE.sigma_x)
                                                if broken else None),
             100_000, "(ε1, 1e-5) of the λ̃ release; analytic ε1 = 4.377", criterion="predicted_bound"),
]

# Every variant of the selection bug zoo (docs/selection.md) with the zoo test that catches it by a check.
CHECKS = {"privbon_half_noise": "test_privbon_half_noise_is_caught",
          "privbon_unclipped": "test_privbon_unclipped_is_caught",
          "privitp_reused_pool": "test_privitp_reused_pool_is_caught",
          "privitp_accountant_c_mismatch": "test_privitp_accountant_c_mismatch_is_caught",
          "privitp_phase2_sigma_mismatch": "test_privitp_phase2_sigma_mismatch_is_caught",
          "mu_charged_as_eps1": "test_mu_charged_as_eps1_is_caught",
          "data_dependent_rmax": "test_data_dependent_rmax_is_caught",
          "charge_after_run_filter": "test_charge_after_run_filter_is_caught"}
NOT_AUDITABLE = {
    "charge_after_run_filter": "a budget-bookkeeping defect across queries: one query's output law is unchanged",
}


def run(case: ZooAudit, broken: bool):
    return case.pair(broken).audit(case.samples, seed=SEED, confidence=CONFIDENCE, criterion=case.criterion)


@pytest.mark.parametrize("case", AUDITS, ids=[c.variant for c in AUDITS])
def test_audit_catches_variant_and_passes_reference(case):
    reference, broken = case.pair(False), case.pair(True)
    if case.min_margin:     # power precondition from the exact law: the under-reported loss is really lower
        assert broken.exact_log_ratio() - broken.certified_epsilon >= case.min_margin
    ref = run(case, broken=False)
    assert ref.result["eps_lower"] <= ref.claim["epsilon"] and ref.result["rejects_nominal"] is False
    bad = run(case, broken=True)
    assert bad.result["eps_lower"] > bad.claim["epsilon"] and bad.result["rejects_nominal"] is True, \
        (case.variant, bad.result["eps_lower"], bad.claim["epsilon"])
    assert reference.pair_id == broken.pair_id


def test_privbon_pair_is_the_zoo_extremal_pair():
    pair = privbon_worst_pair(1.0, BON_SIGMA, zoo.N, zoo.R)
    on_d, on_dp, index = zoo.bon_extremal(n=zoo.N, d=1.0)
    assert np.array_equal(pair.scores_D, on_d) and np.array_equal(pair.scores_Dprime, on_dp)
    assert pair.target == (index,)


def test_every_zoo_variant_is_caught_by_a_check_or_an_audit():
    """The audit side is the parametrised test above; the check side is the zoo's own test, called here for
    the variants no pair audit can catch."""
    audited = {c.variant for c in AUDITS}
    assert set(CHECKS) == audited | set(NOT_AUDITABLE)
    for variant, name in CHECKS.items():
        check = getattr(zoo, name)             # the zoo test exists under its documented name
        if variant not in audited:
            check()                            # raises if the check no longer catches the variant


# --- the table for the docs (not a test) ----------------------------------------------------------------------------

def zoo_table() -> str:
    rows = ["| variant | defect | caught by check (zoo test) | caught by audit | audit pair, draws per side | claim "
            "audited | ε claimed | ε_lower, broken | ε_lower, reference ≤ its claim |",
            "|---|---|---|---|---|---|---|---|---|"]
    by_name = {c.variant: c for c in AUDITS}
    for variant, check in CHECKS.items():
        case = by_name.get(variant)
        if case is None:
            rows.append(f"| `{variant}` | {NOT_AUDITABLE[variant]} | yes (`{check}`) | no | — | — | — | — | — |")
            continue
        bad, ref = run(case, True), run(case, False)
        caught = "**yes**" if bad.result["rejects_nominal"] else "no"
        rows.append(f"| `{variant}` | {case.defect} | yes (`{check}`) | {caught} | `{bad.result['pair_id']}`, "
                    f"{case.samples:,} | {case.claim_note} | {bad.claim['epsilon']:.3f} | "
                    f"{bad.result['eps_lower']:.3f} | {ref.result['eps_lower']:.3f} ≤ {ref.claim['epsilon']:.3f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(f"confidence {CONFIDENCE}, seed {SEED}\n")
    print(zoo_table())
