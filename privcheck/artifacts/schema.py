"""Loading the packaged JSON Schemas and validating documents against them."""

from __future__ import annotations

import functools
import json
from importlib import resources

import jsonschema

VERIFICATION_SCHEMA = "verification.schema.json"


@functools.lru_cache(maxsize=None)
def load_schema(name: str = VERIFICATION_SCHEMA) -> dict:
    return json.loads(resources.files("privcheck.schemas").joinpath(name).read_text("utf-8"))


def validate(document: dict, name: str = VERIFICATION_SCHEMA) -> None:
    """Raise jsonschema.ValidationError if `document` does not conform."""
    schema = load_schema(name)
    jsonschema.validate(document, schema, format_checker=jsonschema.FormatChecker())
