"""The config schema (airetrain/workflow/schemas/config.schema.yaml, shipped with the workflow):
loaded once, and the defaults it gives every key.

It is the one source of the configuration's keys, defaults and descriptions: the planner validates
against it, the typed records of run_config.py are checked against it by a test.
"""
from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import yaml

SCHEMA_PATH = Path(__file__).parent / "workflow" / "schemas" / "config.schema.yaml"


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
    if "properties" in schema and schema.get("default", {}) is not None:   # null: an option off by default
        out = {}
        for key, sub in schema["properties"].items():
            value = defaults_from_schema(sub, root)
            if value is not _MISSING:
                out[key] = value
        return out
    return copy.deepcopy(schema["default"]) if "default" in schema else _MISSING


def _types(schema: dict, root: dict) -> set[str]:
    """The JSON types a schema allows, through $ref and anyOf/oneOf (an enum allows its values' types)."""
    schema = resolve_ref(schema, root)
    kind = schema.get("type")
    types = set([kind] if isinstance(kind, str) else kind or [])
    for value in schema.get("enum", []):
        types.add("string" if isinstance(value, str) else "number" if isinstance(value, (int, float)) else "other")
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        types |= _types(branch, root)
    return types


def _number(text: str, integer: bool) -> int | float | None:
    """The number a string means ('1e-4', '5E-2', '1_000', '.5'), or None: not one (nor nan or inf)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if integer:
        return int(value) if value.is_integer() else None
    return value


def object_schema(schema: dict, root: dict) -> dict:
    """The branch of a schema that describes an object (its properties), through $ref and anyOf/oneOf."""
    schema = resolve_ref(schema, root)
    if "properties" in schema or "additionalProperties" in schema:
        return schema
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        if (found := object_schema(branch, root)) is not None:
            return found
    return None


# What YAML 1.2 reads as a number and YAML 1.1 does not: an exponent without a dot, or without a sign.
YAML_1_2_EXPONENT = re.compile(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$")


def numbers(value: Any, schema: dict, root: dict | None = None) -> Any:
    """value, with each string the schema wants as a number read as one.

    YAML 1.1, which PyYAML (and so Snakemake) follows, reads `1e-4` and `5E-2` as strings: a float
    needs a dot there. Researchers write learning rates that way, so wherever the schema says number
    or integer (and not string), a string that means a number is that number; any other string is
    left for validation to refuse. Where the schema leaves the value to the user (params:, model.options:,
    a search's choices), a string YAML 1.2 reads as a number (1e-4) is that number."""
    root = root or schema
    schema = resolve_ref(schema, root)
    types = _types(schema, root)
    free = not types and object_schema(schema, root) is None   # any value: a user's own
    if isinstance(value, str):
        if "string" not in types and types & {"number", "integer"}:
            number = _number(value.strip(), "number" not in types)
            return value if number is None else number
        return float(value) if free and YAML_1_2_EXPONENT.match(value) else value
    if isinstance(value, dict):
        node = object_schema(schema, root)
        if node is None:
            return {key: numbers(item, {}, root) for key, item in value.items()} if free or _open(schema) else value
        properties, extra = node.get("properties", {}), node.get("additionalProperties")
        return {key: numbers(item, properties[key] if key in properties else extra, root)
                if key in properties or isinstance(extra, dict) else item for key, item in value.items()}
    if isinstance(value, list):
        items = resolve_ref(schema, root).get("items")
        if free:
            items = {}
        return [numbers(item, items, root) for item in value] if isinstance(items, dict) else value
    return value


def _open(schema: dict) -> bool:
    """An object whose keys and values are the user's own (params:, model.options:, a search's
    distribution): no properties and no schema for the rest."""
    kinds = schema.get("type")
    return "object" in ([kinds] if isinstance(kinds, str) else kinds or []) and "properties" not in schema \
        and not isinstance(schema.get("additionalProperties"), dict)


def complete(value: Any, schema: dict, root: dict | None = None) -> Any:
    """value with the schema's defaults filled in wherever an object is given without some of its
    keys, also under an option that is off (null) by default: train.early_stop: {patience: 3}."""
    root = root or schema
    schema = resolve_ref(schema, root)
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    out = dict(value)
    for key, sub in schema["properties"].items():
        if key in out:
            out[key] = complete(out[key], sub, root)
        elif (default := defaults_from_schema(sub, root)) is not _MISSING:
            out[key] = default
    return out


def run_defaults() -> dict:
    """A complete run, every key at its default."""
    schema = _schema()
    return defaults_from_schema(schema["$defs"]["run"], schema)


def deep_merge(base: dict, override: dict) -> dict:
    """base with override's keys merged in, at every depth (a run's overrides onto the defaults)."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def flatten(tree: dict, prefix: str = "") -> dict:
    """A config under dotted keys (optim.lr), as `airetrain compare`, the results table and the trackers
    show it."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out

