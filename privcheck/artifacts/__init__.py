"""Verification artifacts: records, JSON Schema validation, sealing (sha256), integrity checks, the one artifact
writer, output directories, reports.

Every artifact kind is written by `write_artifact` (one sealed JSON file) or `ArtifactDirectory` (several files
moved into place together) and read back through `load_artifact` and `check_artifact`; see docs/artifacts.md.
"""

from privcheck.artifacts.integrity import (
                                           ArtifactInconsistent,
                                           ArtifactUnreadable,
                                           check_artifact,
                                           count_checks,
                                           load_artifact,
)
from privcheck.artifacts.outdir import OutputBusy, check_output_directory, claim_output_directory
from privcheck.artifacts.records import CheckResult, Claim, SuiteResult
from privcheck.artifacts.report import render_markdown, render_report
from privcheck.artifacts.schema import available_schemas, load_schema, validate
from privcheck.artifacts.writer import (
                                        ArtifactDirectory,
                                        canonical_json,
                                        dump_json,
                                        seal,
                                        sha256_of,
                                        verify_seal,
                                        write_artifact,
                                        write_atomic,
)
from privcheck.interrupts import terminate_as_interrupt

__all__ = ["ArtifactDirectory", "ArtifactInconsistent", "ArtifactUnreadable", "CheckResult", "Claim", "OutputBusy",
           "SuiteResult", "available_schemas", "canonical_json", "check_artifact", "check_output_directory",
           "claim_output_directory", "count_checks", "dump_json", "load_artifact", "load_schema", "render_markdown",
           "render_report", "seal", "sha256_of", "terminate_as_interrupt", "validate", "verify_seal",
           "write_artifact", "write_atomic"]
