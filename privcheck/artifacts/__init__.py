"""Verification artifacts: records, JSON Schema validation, sealing (sha256), the one artifact writer, reports.

Every artifact kind is written by `write_artifact` (one sealed JSON file) or `ArtifactDirectory` (several files
moved into place together); see docs/artifacts.md.
"""

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

__all__ = ["ArtifactDirectory", "CheckResult", "Claim", "OutputBusy", "SuiteResult", "available_schemas",
           "canonical_json", "check_output_directory", "claim_output_directory", "dump_json", "load_schema",
           "render_markdown", "render_report", "seal", "sha256_of", "validate", "verify_seal", "write_artifact",
           "write_atomic"]
