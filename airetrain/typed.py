"""Typed records to and from JSON: a tree of dataclasses, read from the nested dicts a config or a
record file holds, and written back as the same dicts.

Reading checks the keys: a dict with a key the record lacks, or without one it has, is refused with
the keys named (RecordError); a field with a default may be left out. A field named like a Python
keyword plus `_` (`global_`, `async_`) holds the key without the underscore (`global`, `async`).
Fields typed Path hold a str in JSON.
"""
from __future__ import annotations

import dataclasses
import functools
import keyword
import types
import typing
from pathlib import Path


class RecordError(ValueError):
    pass


def key_of(field_name: str) -> str:
    """The JSON key of a field: `global_` holds `global`."""
    bare = field_name[:-1]
    return bare if field_name.endswith("_") and keyword.iskeyword(bare) else field_name


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _unwrap(tp):
    """(the record class or Path a type refers to, or None) for T, Optional[T], Annotated[T, ...]."""
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else None
    return tp if tp is Path or dataclasses.is_dataclass(tp) else None


def from_dict(cls, data, where: str = ""):
    """The record cls holding data (a dict of its keys; nested records from nested dicts)."""
    name = where or cls.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{name}: expected an object with the fields of {cls.__name__}, got {type(data).__name__}")
    fields = {key_of(f.name): f for f in dataclasses.fields(cls)}
    optional = {k for k, f in fields.items() if f.default is not dataclasses.MISSING}
    missing, unknown = sorted(fields.keys() - data.keys() - optional), sorted(data.keys() - fields.keys())
    if missing or unknown:
        raise RecordError(f"{name} is not a {cls.__name__}: " + "; ".join(
            part for part in (missing and f"missing {', '.join(missing)}",
                              unknown and f"unknown {', '.join(unknown)}") if part))
    values = {}
    for key, f in fields.items():
        if key not in data:
            continue   # its default
        value, kind = data[key], _unwrap(_hints(cls)[f.name])
        if value is not None and kind is Path:
            value = Path(value)
        elif value is not None and kind is not None:
            value = from_dict(kind, value, f"{name}.{key}")
        values[f.name] = value
    return cls(**values)


def to_dict(record) -> dict:
    """The nested dicts of a record, as JSON holds them."""
    return {key_of(f.name): _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
