"""privcheck: verification-first privacy accounting and auditing.

Every figure the library reports is on the safe side and carries its record: certified numerics
(`privcheck.numerics`), accounting (`privcheck.accounting`), reusable checks (`privcheck.checks`),
verification artifacts (`privcheck.artifacts`) and the `privcheck` command line (`privcheck.cli`).
"""

from privcheck.errors import CertificationError, InvalidParameter, PrivcheckError

__version__ = "0.1.0"
__all__ = ["CertificationError", "InvalidParameter", "PrivcheckError", "__version__"]
