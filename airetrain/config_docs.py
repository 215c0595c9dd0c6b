"""docs/configuration.md, generated from the config schema, so the reference never disagrees with what
the plan accepts: `python -m airetrain.config_docs > docs/configuration.md` (a test fails when it is stale)."""
from __future__ import annotations

import json

from .schema import load_schema, object_schema, resolve_ref
from .text import markdown_table

HEADER = """# Configuration

Generated from the schema (`airetrain/workflow/schemas/config.schema.yaml`) by
`python -m airetrain.config_docs > docs/configuration.md`; a test fails when this file is stale.

{description}

Numbers may be written as people write them (`lr: 1e-4`, `1_000`). A wrong key is refused with the key
and its allowed values, before anything is submitted. `airetrain plan` checks a config and prints
every run's layout and SLURM request.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(schema: dict) -> str:
    if "default" not in schema:
        return ""
    return f"`{json.dumps(schema['default'])}`"


def allowed(schema: dict, root: dict) -> str:
    """What a key takes, in words: its values, its type and bounds, or the schema's own x-allowed text."""
    schema = resolve_ref(schema, root)
    if "x-allowed" in schema:
        return schema["x-allowed"]
    if "enum" in schema:
        return ", ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in schema["enum"])
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return " or ".join(filter(None, (allowed(b, root) for b in branches)))
    kinds = schema.get("type", "")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    words = []
    for kind in kinds:
        if kind == "null":
            words.append("`null`")
        elif kind == "string" and "pattern" in schema:
            words.append(f"text matching `{schema['pattern']}`")
        elif kind in ("integer", "number"):
            bounds = [f"≥ {schema['minimum']}" if "minimum" in schema else "",
                      f"> {schema['exclusiveMinimum']}" if "exclusiveMinimum" in schema else "",
                      f"≤ {schema['maximum']}" if "maximum" in schema else ""]
            words.append(" ".join([kind, *filter(None, bounds)]))
        elif kind == "array" and "items" in schema:
            words.append(f"a list of {allowed(schema['items'], root) or 'values'}")
        else:
            words.append(kind)
    return " or ".join(words)


def rows(schema: dict, root: dict, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, default, allowed, description) for every key under schema; an object with keys of
    its own is described by its keys, and has a row itself only where it says what it is."""
    schema = resolve_ref(schema, root)
    out = []
    for key, sub in schema.get("properties", {}).items():
        name, sub = f"{prefix}{key}", resolve_ref(sub, root)
        body = object_schema(sub, root)
        if body is not None and body.get("properties"):
            if sub.get("description"):
                others = [allowed(b, root) for b in sub.get("anyOf", []) if object_schema(b, root) is None]
                others += ["`null`"] * ("null" in str(sub.get("type", "")))
                out.append((name, _default(sub), " or ".join(["an object", *others]), sub["description"]))
            out += rows(body, root, f"{name}.")
        else:
            out.append((name, _default(sub), allowed(sub, root), sub.get("description", "")))
    return out


def _table(found: list[tuple[str, str, str, str]]) -> list[str]:
    return markdown_table(["key", "default", "allowed", "what"],
                          [[f"`{k}`", _cell(d), _cell(a), _cell(w)] for k, d, a, w in found])


def built_ins() -> list[str]:
    """The built-in models, datasets and losses, from their tables (airetrain.builtin_models, airetrain.catalog)."""
    from .builtin_models import LOSSES, MODELS
    from .catalog import DATASETS, data_names

    return ["## Built-in models, datasets and losses", "",
            "`model.name`, `data.name` and `train.loss` take these names, or an import path of your own.", "",
            *markdown_table(["model.name", "what", "its keys", "default loss"],
                            [[f"`{n}`", _cell(m.about), ", ".join(f"`model.{k}`" for k in m.keys),
                              f"`{m.loss or 'cross_entropy'}`"] for n, m in MODELS.items()]), "",
            *markdown_table(["data.name", "what"], [[f"`{n}`", _cell(DATASETS[n].about)] for n in data_names()]), "",
            *markdown_table(["train.loss", "what"], [[f"`{n}`", _cell(about)] for n, about in LOSSES.items()]), ""]


def markdown() -> str:
    schema = load_schema()
    top = {k: v for k, v in schema["properties"].items() if k != "defaults"}
    run = schema["$defs"]["run"]
    lines = [HEADER.format(description=" ".join(schema["description"].split())).rstrip(), "",
             "## The file", "", *_table(rows({"properties": top}, schema)), "",
             "## A run", "",
             "The keys of `defaults:`, and of each entry of `runs:` (which changes only what differs).", "",
             *_table(rows(run, schema)), "", *built_ins()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
