"""Loading the packaged JSON Schemas (privcheck/schemas/<kind>.schema.json) and validating documents."""

from __future__ import annotations

import functools
import json
from importlib import resources

import jsonschema

from privcheck.errors import InvalidParameter

__all__ = ["SCHEMA_SUFFIX", "VERIFICATION_SCHEMA", "available_schemas", "load_schema", "schema_file", "validate"]

SCHEMA_SUFFIX = ".schema.json"
VERIFICATION_SCHEMA = "verification" + SCHEMA_SUFFIX


def available_schemas() -> tuple[str, ...]:
    """The packaged schema kinds, e.g. ("audit", "dpgrpo_run", ..., "verification")."""
    names = (entry.name for entry in resources.files("privcheck.schemas").iterdir())
    return tuple(sorted(n[: -len(SCHEMA_SUFFIX)] for n in names if n.endswith(SCHEMA_SUFFIX)))


def schema_file(name: str) -> str:
    """The file name of schema `name`: a kind ("dpgrpo_run") or its file name ("dpgrpo_run.schema.json")."""
    kinds = available_schemas()
    kind = name[: -len(SCHEMA_SUFFIX)] if isinstance(name, str) and name.endswith(SCHEMA_SUFFIX) else name
    if kind not in kinds:
        raise InvalidParameter("schema", name, "one of " + ", ".join(kinds))
    return kind + SCHEMA_SUFFIX


@functools.lru_cache(maxsize=None)
def load_schema(name: str = VERIFICATION_SCHEMA) -> dict:
    return json.loads(resources.files("privcheck.schemas").joinpath(schema_file(name)).read_text("utf-8"))


def validate(document: dict, name: str = VERIFICATION_SCHEMA) -> None:
    """Raise jsonschema.ValidationError if `document` does not conform to schema `name`."""
    schema = load_schema(name)
    jsonschema.validate(document, schema, format_checker=jsonschema.FormatChecker())
