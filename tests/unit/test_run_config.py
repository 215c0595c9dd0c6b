"""The typed config records (run_config.py) against the schema, the one source of the keys: the same keys
in every section, types that fit, and the built-in dataset table the schema's enum lists."""
import dataclasses
import types
import typing

import pytest

from airetrain import run_config
from airetrain.catalog import data_names
from airetrain.schema import load_schema, resolve_ref
from airetrain.typed import RecordError, key_of

SCHEMA = load_schema()
PYTHON = {"integer": {int}, "number": {int, float}, "string": {str}, "boolean": {bool}, "null": {type(None)},
          "array": {list}}


def schema_types(node: dict) -> set[type] | None:
    """The Python types a schema node admits (None: an object of named keys, checked as a record; a map of any
    keys, such as model.options, is a dict)."""
    node = resolve_ref(node, SCHEMA)
    if "properties" in node:
        return None
    if node.get("type") == "object":
        return {dict}
    if "anyOf" in node:
        return set().union(*(schema_types(sub) or {dict} for sub in node["anyOf"]))
    if "enum" in node:
        return {type(v) for v in node["enum"]}
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    return set().union(*(PYTHON[k] for k in kinds))


def field_types(tp) -> set[type]:
    """The Python types a field's annotation admits (bool | str -> {bool, str}; float admits int)."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    out = {typing.get_origin(a) or a for a in args}
    return out | ({int} if float in out else set())


def disagreements(record, node: dict, where: str) -> list[str]:
    node = resolve_ref(node, SCHEMA)
    keys = {key_of(f.name): f for f in dataclasses.fields(record)}
    hints = typing.get_type_hints(record)
    known = node["properties"].keys()
    problems = [f"{where}.{k}: in the schema, not in {record.__name__}" for k in sorted(known - keys.keys())]
    problems += [f"{where}.{k}: in {record.__name__}, not in the schema" for k in sorted(keys.keys() - known)]
    for key in node["properties"].keys() & keys.keys():
        sub, tp = node["properties"][key], hints[keys[key].name]
        wanted = schema_types(sub)
        if wanted is None:
            nullable = "null" in (resolve_ref(sub, SCHEMA).get("type") or [])
            inner = [a for a in typing.get_args(tp) if a is not type(None)] if nullable else []
            tp = inner[0] if len(inner) == 1 else tp   # an option off by default: Record | None
            if not dataclasses.is_dataclass(tp):
                problems.append(f"{where}.{key}: an object in the schema, {tp} in {record.__name__}")
            else:
                problems += disagreements(tp, sub, f"{where}.{key}")
        elif not wanted <= field_types(tp):
            problems.append(f"{where}.{key}: the schema admits {sorted(t.__name__ for t in wanted)}, "
                            f"{record.__name__}.{keys[key].name} is {tp}")
    return problems


def test_every_record_has_exactly_the_schemas_keys_with_types_that_fit():
    problems = disagreements(run_config.RunConfig, SCHEMA["$defs"]["run"], "run")
    problems += disagreements(run_config.Roots, SCHEMA["properties"]["roots"], "roots")
    problems += disagreements(run_config.Site, SCHEMA["properties"]["site"], "site")
    assert problems == []


def test_the_check_finds_a_key_missing_on_either_side_and_a_type_that_does_not_fit():
    @dataclasses.dataclass(frozen=True)
    class Wrong:
        name: str
        width: str           # an integer in the schema
        extra: int           # not in the schema

    problems = disagreements(Wrong, {"properties": {k: SCHEMA["$defs"]["run"]["properties"]["model"]["properties"][k]
                                                    for k in ("name", "width", "depth")}}, "model")
    assert problems == ["model.depth: in the schema, not in Wrong", "model.extra: in Wrong, not in the schema",
                        "model.width: the schema admits ['int'], Wrong.width is <class 'str'>"]


def test_keys_that_are_python_keywords_are_fields_with_an_underscore():
    from airetrain.plan.config import resolve

    run = resolve({"runs": {"r": {"batch": {"global": 128}, "checkpoint": {"async": False}}}})[1]["r"]
    assert run.batch.global_ == 128 and run.checkpoint.async_ is False
    assert run.to_dict()["batch"]["global"] == 128 and run.to_dict()["checkpoint"]["async"] is False


def test_a_record_refuses_a_dict_whose_keys_differ_naming_them():
    optim = run_config.Optim.with_defaults("optim", {}).to_dict()
    del optim["lr"]
    with pytest.raises(RecordError, match="runs.r.optim is not a Optim: missing lr; unknown lrr"):
        run_config.Optim.from_dict({**optim, "lrr": 1}, "runs.r.optim")


def test_the_schemas_dataset_enum_is_the_built_in_table():
    enum = next(sub["enum"] for sub in SCHEMA["$defs"]["dataset_name"]["anyOf"] if "enum" in sub)
    assert enum == data_names()


def test_the_schemas_model_and_loss_enums_are_the_built_in_tables():
    """One table per kind of built-in: the schema accepts exactly its names, each model's builder
    exists and reads only model keys, each default loss is a built-in loss, and the trainer has a
    function for every loss of the table."""
    from airetrain.builtin_models import LOSSES, MODELS
    from airetrain.train import models, objective

    model_enum = next(sub["enum"] for sub in SCHEMA["$defs"]["model_name"]["anyOf"] if "enum" in sub)
    assert model_enum == list(MODELS)
    loss_node = resolve_ref(SCHEMA["$defs"]["run"], SCHEMA)["properties"]["train"]["properties"]["loss"]
    assert next(sub["enum"] for sub in loss_node["anyOf"] if "enum" in sub) == list(LOSSES) == list(objective.LOSSES)
    model_keys = set(resolve_ref(SCHEMA["$defs"]["run"], SCHEMA)["properties"]["model"]["properties"])
    for name, row in MODELS.items():
        assert callable(models.builder(name)) and set(row.keys) <= model_keys and row.loss in (None, *LOSSES)
