"""Accounting: every call returns a frozen `AccountingRecord` (or `Calibration`) with `to_json()`."""

from privcheck.accounting.calibration import Calibration, CalibrationInfeasible, calibrate_sigma, calibrate_steps
from privcheck.accounting.conversions import group_privacy, replace_one
from privcheck.accounting.dpsgd import (DEFAULT_INTERVAL, DEFAULT_ORDERS, composed_delta_quadrature,
                                        epsilon_pld, epsilon_quadrature, epsilon_rdp,
                                        epsilon_single_round_certified, single_round_delta_ball,
                                        single_round_delta_integral)
from privcheck.accounting.gaussian import dp_to_gdp, gaussian_epsilon, gaussian_sigma, gdp_to_dp
from privcheck.accounting.composition import BudgetExceeded, ExPostFilter, basic_composition
from privcheck.accounting.lebensold import gaussian_at_expost_eps, gaussian_rnm_eps
from privcheck.accounting.records import AccountingRecord, EpsilonResult
from privcheck.accounting.selection import (KappaPair, PrivITPParams, privbon_epsilon,
                                            privbon_sigma, privitp_kappa, privitp_kappa_batch, privitp_loss,
                                            privitp_loss_batch, privitp_phase1_epsilon, privitp_worst_phase2)

__all__ = [
    "AccountingRecord", "BudgetExceeded", "Calibration", "ExPostFilter", "KappaPair", "PrivITPParams",
    "basic_composition", "privitp_loss_batch", "gaussian_at_expost_eps", "gaussian_rnm_eps", "privbon_epsilon", "privbon_sigma", "privitp_kappa",
    "privitp_kappa_batch", "privitp_loss", "privitp_phase1_epsilon", "privitp_worst_phase2", "CalibrationInfeasible", "DEFAULT_INTERVAL", "DEFAULT_ORDERS",
    "EpsilonResult", "calibrate_sigma", "calibrate_steps", "composed_delta_quadrature", "dp_to_gdp",
    "epsilon_pld", "epsilon_quadrature", "epsilon_rdp", "epsilon_single_round_certified", "gaussian_epsilon",
    "gaussian_sigma", "gdp_to_dp", "group_privacy", "replace_one", "single_round_delta_ball",
    "single_round_delta_integral",
]
