"""Load, validate and resolve the configuration: defaults + per-run overrides.

Validation errors name the offending key, where it is, and what is allowed, because
jsonschema's own messages ("Additional properties are not allowed") do not.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import yaml

from ..errors import ConfigError
from ..run_config import RunConfig, Settings
from ..schema import complete, defaults_from_schema, load_schema, numbers, resolve_ref as _resolve_ref
from ..text import did_you_mean

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
SLURM_NAME = SAFE_NAME   # accounts and QoS, also where they come from the environment ($SBATCH_ACCOUNT)


def load_yaml(path: str | Path) -> dict:
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping, got {type(data).__name__}")
    return data


def check_name(name: str, what: str = "run name") -> str:
    """Names reach shells and paths: allow only [A-Za-z0-9_.-]+ (and not '.' or '..')."""
    if not isinstance(name, str) or not SAFE_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"{what} {name!r} is not allowed: use only letters, digits, '_', '.' and '-' "
            "(it becomes a SLURM job name, a directory and a shell argument)"
        )
    return name


def _subschema(root: dict, path: list) -> dict:
    """The schema that applies at an instance path (enough of JSON Schema for ours)."""
    node = _resolve_ref(root, root)
    for part in path:
        props = node.get("properties", {})
        if part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return {}
        node = _resolve_ref(node, root)
    return node


def _where(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _friendly(error: jsonschema.ValidationError, root: dict) -> str:
    where = _where(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(_subschema(root, list(error.absolute_path)).get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        keys = ", ".join(f"{k!r}{did_you_mean(k, allowed)}" for k in extra)
        return f"unknown key {keys} in {where}; allowed keys: {', '.join(allowed)}"
    if error.validator == "enum":
        return (f"{where} = {error.instance!r} is not allowed{did_you_mean(error.instance, error.validator_value)}; "
                "allowed values: " + ", ".join(repr(v) for v in error.validator_value))
    if error.validator == "anyOf" and isinstance(error.instance, dict):   # the object form's own errors
        objects = {i for i, sub in enumerate(error.validator_value) if sub.get("type") == "object"}
        inner = [e for e in error.context if e.relative_schema_path and e.relative_schema_path[0] in objects]
        if inner:
            return "; ".join(_friendly(e, root) for e in inner)
    if error.validator == "anyOf":  # a built-in name or an import path
        names = [v for sub in error.validator_value for v in sub.get("enum", [])]
        return (f"{where} = {error.instance!r} is not allowed{did_you_mean(error.instance, names)}; allowed values: "
                + ", ".join(map(repr, names)) + ", or an import path 'package.module:function'")
    if error.validator == "pattern" and "x-allowed" in error.schema:  # strings that reach SLURM or a shell
        return f"{where} = {error.instance!r} is not allowed: {error.schema['x-allowed']}"
    if error.validator == "pattern":  # names that reach shells and paths
        return f"name {error.instance!r} in {where} is not allowed: use only letters, digits, '_', '.' and '-'"
    if error.validator == "minimum":
        return f"{where} = {error.instance!r} is too small: it must be at least {error.validator_value}"
    if error.validator == "exclusiveMinimum":
        return f"{where} = {error.instance!r} must be greater than {error.validator_value}"
    return f"{where}: {error.message}"


def validate(config: dict, schema: dict | None = None) -> None:
    """Raise ConfigError listing every problem, each with its key and the allowed values."""
    schema = schema or load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [_friendly(e, schema) for e in errors]
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(lines))


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def run_key_schema(schema: dict, dotted: str) -> dict | None:
    """The schema of a dotted run key (optim.lr), or None: no such key."""
    node = _resolve_ref(schema["$defs"]["run"], schema)
    for part in dotted.split("."):
        if part not in node.get("properties", {}):
            return None
        node = _resolve_ref(node["properties"][part], schema)
    return node


def run_keys(schema: dict) -> list[str]:
    """Every dotted run key (optim, optim.lr, ...): what run_key_schema finds."""
    def walk(node: dict, prefix: str) -> list[str]:
        properties = _resolve_ref(node, schema).get("properties", {})
        return [k for key, sub in properties.items() for k in (prefix + key, *walk(sub, f"{prefix}{key}."))]
    return walk(schema["$defs"]["run"], "")


def resolve(config: dict) -> tuple[Settings, dict[str, RunConfig]]:
    """Validate, expand the sweeps, and return (the settings every run shares, {run name: its config}),
    as typed records made from the complete config."""
    schema = load_schema()
    config, own = _own_sweeps(config)
    config, seeds = _seeds(config)
    config = numbers(config, schema)   # lr: 1e-4, which YAML 1.1 reads as a string
    validate(config, schema)
    grid = _grid(config.get("sweep") or {}, schema)
    grids = {name: {**grid, **_grid(own.get(name, {}), schema, f"runs.{name}.sweep"),
                    **_grid(seeds[name], schema, f"runs.{name}.seeds")}
             for name in config["runs"]}
    expanded = {**config, "runs": _expanded(config["runs"], grids)}
    if any(grids.values()):
        validate(expanded, schema)  # the grid's values, checked where they land
    top = deep_merge(defaults_from_schema(schema), {k: v for k, v in expanded.items() if k not in ("runs", "sweep")})
    base = top.pop("defaults")
    runs = {}
    for name, overrides in expanded["runs"].items():
        check_name(name)
        runs[name] = RunConfig.from_dict(complete(deep_merge(base, overrides or {}), schema["$defs"]["run"], schema),
                                         f"runs.{name}")
    runs = evaluation_runs(runs)
    check_init_from(runs)
    return Settings.from_dict({"roots": top["roots"], "site": top["site"]}), runs


def _own_sweeps(config: dict) -> tuple[dict, dict]:
    """(the config without the runs' own `sweep:` keys, {run: its grid}): a run may carry a grid
    that expands it alone, beside the top-level one that expands every run."""
    runs = config.get("runs")
    if not isinstance(runs, dict):
        return config, {}
    own = {name: run["sweep"] for name, run in runs.items() if isinstance(run, dict) and "sweep" in run}
    if not own:
        return config, {}
    return {**config, "runs": {name: ({k: v for k, v in run.items() if k != "sweep"} if name in own else run)
                               for name, run in runs.items()}}, own


def _seeds(config: dict) -> tuple[dict, dict]:
    """(the config without `seeds:` keys, {run: its train.seed grid}): `seeds: [0, 1, 2]` on
    `defaults:` or on a run repeats each run once per seed, named as a sweep over train.seed names it
    (<run>-seed0), after every other sweep key."""
    runs, defaults = config.get("runs"), config.get("defaults")
    if not isinstance(runs, dict):
        return config, {}
    common = defaults.get("seeds") if isinstance(defaults, dict) else None
    seeds = {name: run.get("seeds", common) if isinstance(run, dict) else common for name, run in runs.items()}
    for where, value in [("defaults.seeds", common), *((f"runs.{n}.seeds", s) for n, s in seeds.items())]:
        if value is not None and not (isinstance(value, list) and value):
            raise ConfigError(f"{where} must be a list of seeds, e.g. [0, 1, 2]")
    if common is None and all(s is None for s in seeds.values()):
        return config, {name: {} for name in runs}
    stripped = {**config, "runs": {n: ({k: v for k, v in r.items() if k != "seeds"} if isinstance(r, dict) else r)
                                   for n, r in runs.items()}}
    if isinstance(defaults, dict):
        stripped["defaults"] = {k: v for k, v in defaults.items() if k != "seeds"}
    return stripped, {name: {"train.seed": s} if s is not None else {} for name, s in seeds.items()}


def groups(runs: dict[str, RunConfig]) -> dict[str, str]:
    """{run: its group}: the runs whose configs are equal but for train.seed form one group, named as
    the run without its seed part (base-lr1e-3-seed2 -> base-lr1e-3). Where that name would join
    runs of different configs, each keeps its own name."""
    def key(run: RunConfig) -> str:
        config = run.to_dict()
        config["train"] = {k: v for k, v in config["train"].items() if k != "seed"}
        return json.dumps(config, sort_keys=True)

    named = {name: re.sub(r"-seed\d+(?=-|$)", "", name) for name in runs}
    configs: dict[str, set] = {}
    for name, group in named.items():
        configs.setdefault(group, set()).add(key(runs[name]))
    return {name: group if len(configs[group]) == 1 else name for name, group in named.items()}


def _grid(grid, schema: dict, where: str = "sweep") -> dict:
    """A sweep grid checked (known dotted keys, a list of values each) and its numbers read."""
    from . import sweep

    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{where} must map dotted run keys to lists of values, e.g. {{optim.lr: [1e-3, 3e-4]}}")
    sweep.check_keys(grid, run_keys(schema), where)
    return {key: numbers(values, {"type": "array", "items": run_key_schema(schema, key)}, schema)
            for key, values in grid.items()}   # a run's name shows the number, as written in any form


def _expanded(runs: dict, grids: dict[str, dict]) -> dict:
    """Every run expanded by its grid; two runs that expand to one name are refused."""
    from . import sweep

    out: dict = {}
    for name, overrides in runs.items():
        for new, merged in sweep.expand({name: overrides}, grids[name], deep_merge).items():
            if new in out:
                raise ConfigError(f"sweep: two runs expand to {new!r}; rename one of them")
            out[new] = merged
    return out


def starts_from(run: RunConfig) -> str | None:
    """The run whose weights this run starts from (model.init_from: {run: ...}), or None."""
    init = run.model.init_from
    return init["run"] if isinstance(init, dict) else None


def evaluation_runs(runs: dict[str, RunConfig]) -> dict[str, RunConfig]:
    """Each run with `evaluate: {run, which}` becomes what it is: the source run's model, started from
    its promoted weights (exactly: init_strict), trained for no step, with no best to keep. Refused
    before anything is submitted: an unknown source, a source that is an evaluation or a script of its
    own (no weights of the built-in trainer's), and evaluate beside train.script."""
    out = dict(runs)
    for name, run in runs.items():
        if run.evaluate is None:
            continue
        source, which = run.evaluate["run"], run.evaluate.get("which", "best")
        where = f"runs.{name}.evaluate"
        if source not in runs or source == name:
            others = sorted(set(runs) - {name})
            raise ConfigError(f"{where}.run: {source!r} is not another run of this config"
                              f"{did_you_mean(source, others)}; its runs: {', '.join(others) or 'none'}")
        if runs[source].evaluate is not None or runs[source].train.script:
            raise ConfigError(f"{where}.run: {source!r} trains no weights of its own (it is "
                              f"{'an evaluation run' if runs[source].evaluate else 'a script of its own'})")
        if run.train.script:
            raise ConfigError(f"{where} and train.script: an evaluation run evaluates with the built-in trainer; "
                              "remove one of them")
        model = runs[source].model.replace(init_from={"run": source, "which": which}, init_strict=True, freeze=[])
        out[name] = run.replace(evaluate={"run": source, "which": which}, model=model,
                                train=run.train.replace(epochs=0, early_stop=None),
                                checkpoint=run.checkpoint.replace(monitor=None))
    return out


def check_init_from(runs: dict[str, RunConfig]) -> None:
    """Each model.init_from: {run: NAME} names another run of this config, and no run starts, through
    a chain of them, from itself: refused before anything is submitted."""
    for name, run in runs.items():
        other = starts_from(run)
        if other is not None and other not in runs:
            raise ConfigError(f"runs.{name}.model.init_from.run: {other!r} is not a run of this config"
                              f"{did_you_mean(other, runs)}; its runs: {', '.join(sorted(runs))}")
        chain, at = [name], other
        while at is not None:
            chain.append(at)
            if at == name:
                raise ConfigError(f"runs.{name}.model.init_from: the runs start from each other in a cycle: "
                                  f"{' -> '.join(chain)}")
            at = starts_from(runs[at])
