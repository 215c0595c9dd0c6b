"""The config schema (workflow/schemas/config.schema.yaml, packaged as airetrain/plan/config.schema.yaml):
loaded once, and the defaults it gives every key.

It is the one source of the configuration's keys, defaults and descriptions: the planner validates
against it, the typed records of run_config.py are checked against it by a test.
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

SCHEMA_PATH = Path(__file__).parent / "plan" / "config.schema.yaml"


@functools.cache
def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def load_schema() -> dict:
    """The schema, as a fresh copy (callers may not share nested dicts)."""
    return copy.deepcopy(_schema())


def resolve_ref(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"]
        node = root
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        merged = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **merged}
    return schema


_MISSING = object()


def defaults_from_schema(schema: dict, root: dict | None = None) -> Any:
    """A complete default value built from the schema's `default:` entries."""
    root = root or schema
    schema = resolve_ref(schema, root)
    if "properties" in schema:
        out = {}
        for key, sub in schema["properties"].items():
            value = defaults_from_schema(sub, root)
            if value is not _MISSING:
                out[key] = value
        return out
    return copy.deepcopy(schema["default"]) if "default" in schema else _MISSING


def run_defaults() -> dict:
    """A complete run, every key at its default."""
    schema = _schema()
    return defaults_from_schema(schema["$defs"]["run"], schema)
