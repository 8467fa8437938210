"""Certified numerics: Arb ball closed forms, rigorous integration, exact float rounding, mpmath cross-checks."""

from privcheck.numerics.ball import (
                                     decide,
                                     evaluate,
                                     gauss_G,
                                     log_diff_exp,
                                     log_gauss_G,
                                     log_normal_cdf,
                                     normal_cdf,
                                     normal_pdf,
                                     normal_sf,
)
from privcheck.numerics.certified import Certified, float_down, float_up
from privcheck.numerics.integrate import gaussian_tail_bound, integrate, with_tail

__all__ = ["Certified", "decide", "evaluate", "float_down", "float_up", "gauss_G", "gaussian_tail_bound",
           "integrate", "log_diff_exp", "log_gauss_G", "log_normal_cdf", "normal_cdf", "normal_pdf",
           "normal_sf", "with_tail"]
