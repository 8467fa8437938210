"""Accounting: events describe mechanisms; `epsilon(event, delta)` is the one entry point for every ε.

Every call returns a frozen `AccountingRecord` (or `Calibration`) with `to_json()`. The functions below the
events (`epsilon_pld`, `calibrate_sigma`, `privbon_epsilon`, ...) are the per-mechanism accountants behind the
entry point, kept for direct use; code outside this package goes through `epsilon` / `calibrate` / a plan.
"""

from privcheck.accounting.accountant import METHODS, epsilon, epsilon_lower_bound, epsilon_profile
from privcheck.accounting.calibration import (
                                              Calibration,
                                              CalibrationInfeasible,
                                              calibrate,
                                              calibrate_sigma,
                                              calibrate_steps,
)
from privcheck.accounting.composition import BudgetExceeded, ExPostFilter, basic_composition
from privcheck.accounting.conversions import group_privacy, replace_one
from privcheck.accounting.dpsgd import (
                                              DEFAULT_INTERVAL,
                                              DEFAULT_ORDERS,
                                              composed_delta_quadrature,
                                              epsilon_pld,
                                              epsilon_quadrature,
                                              epsilon_rdp,
                                              epsilon_rdp_history,
                                              epsilon_single_round_certified,
                                              single_round_delta_ball,
                                              single_round_delta_integral,
)
from privcheck.accounting.events import (
                                              BallsInBinsGaussianEvent,
                                              CompositionHistory,
                                              Event,
                                              FixedSizeGaussianEvent,
                                              GaussianAboveThresholdEvent,
                                              GaussianEvent,
                                              GaussianReportNoisyMaxEvent,
                                              NeighboringRelation,
                                              PoissonGaussianEvent,
                                              PrivBoNEvent,
                                              PrivITPEvent,
                                              PrivITPPhase1Event,
                                              PrivITPWorstCaseEvent,
                                              ShuffledGaussianEvent,
                                              TruncatedPoissonGaussianEvent,
                                              event_from_json,
)
from privcheck.accounting.gaussian import dp_to_gdp, gaussian_epsilon, gaussian_sigma, gdp_to_dp
from privcheck.accounting.gaussian_selection import gaussian_at_expost_eps, gaussian_rnm_eps
from privcheck.accounting.plan import DPGRPOPlan, DPSGDPlan
from privcheck.accounting.records import AccountingRecord, EpsilonResult
from privcheck.accounting.selection import (
                                              KappaPair,
                                              PrivITPParams,
                                              privbon_epsilon,
                                              privbon_sigma,
                                              privitp_kappa,
                                              privitp_kappa_batch,
                                              privitp_loss,
                                              privitp_loss_batch,
                                              privitp_phase1_epsilon,
                                              privitp_worst_phase2,
)

__all__ = [
    # the entry points, events and plans
    "epsilon", "epsilon_lower_bound", "epsilon_profile", "calibrate", "METHODS", "Event", "NeighboringRelation",
    "event_from_json",
    "GaussianEvent", "PoissonGaussianEvent", "CompositionHistory", "PrivBoNEvent", "PrivITPEvent", "PrivITPPhase1Event",
    "PrivITPWorstCaseEvent", "GaussianReportNoisyMaxEvent", "GaussianAboveThresholdEvent", "DPSGDPlan",
    "FixedSizeGaussianEvent", "ShuffledGaussianEvent", "BallsInBinsGaussianEvent", "TruncatedPoissonGaussianEvent",
    "DPGRPOPlan",
    # records
    "AccountingRecord", "Calibration", "CalibrationInfeasible", "EpsilonResult", "KappaPair", "PrivITPParams",
    "BudgetExceeded", "ExPostFilter",
    # per-mechanism accountants behind the entry point
    "DEFAULT_INTERVAL", "DEFAULT_ORDERS", "basic_composition", "calibrate_sigma", "calibrate_steps",
    "composed_delta_quadrature", "dp_to_gdp", "epsilon_pld", "epsilon_quadrature", "epsilon_rdp",
    "epsilon_rdp_history", "epsilon_single_round_certified", "gaussian_at_expost_eps", "gaussian_epsilon",
    "gaussian_rnm_eps", "gaussian_sigma", "gdp_to_dp", "group_privacy", "privbon_epsilon", "privbon_sigma",
    "privitp_kappa", "privitp_kappa_batch", "privitp_loss", "privitp_loss_batch", "privitp_phase1_epsilon",
    "privitp_worst_phase2", "replace_one", "single_round_delta_ball", "single_round_delta_integral",
]
