"""Verification artifacts: records, JSON Schema validation, sealing (sha256), atomic writes, reports."""

from privcheck.artifacts.records import CheckResult, Claim, SuiteResult
from privcheck.artifacts.report import render_markdown, render_report
from privcheck.artifacts.schema import load_schema, validate
from privcheck.artifacts.writer import canonical_json, seal, sha256_of, verify_seal, write_atomic

__all__ = ["CheckResult", "Claim", "SuiteResult", "canonical_json", "load_schema", "render_markdown",
           "render_report", "seal", "sha256_of", "validate", "verify_seal", "write_atomic"]
