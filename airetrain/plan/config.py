"""Load, validate and resolve the configuration: defaults + per-run overrides, each run's sweep
expanded (sweep.py), evaluation runs and init_from edges checked.

Validation errors name the offending key, where it is, and what is allowed, because
jsonschema's own messages ("Additional properties are not allowed") do not.
"""
from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import yaml

from ..errors import ConfigError
from ..run_config import RunConfig, Settings
from ..schema import complete, deep_merge, defaults_from_schema, load_schema, numbers, resolve_ref as _resolve_ref
from ..text import did_you_mean
from . import sweep

SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def load_yaml(path: str | Path) -> dict:
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping, got {type(data).__name__}")
    return data


# Where Snakemake looks for a workflow's Snakefile, in its order.
SNAKEFILES = ("Snakefile", "snakefile", "workflow/Snakefile", "workflow/snakefile")
CONFIGFILE_DIRECTIVE = re.compile(r"""^configfile:\s*["']([^"']+)["']\s*(?:#.*)?$""", re.M)


def workflow_configfiles(workdir: Path = Path(".")) -> list[Path]:
    """The files the project's Snakefile names with `configfile:` (config/config.yaml in a project from
    `airetrain init`, and in this checkout); without a Snakefile here, that file."""
    for name in SNAKEFILES:
        if (workdir / name).is_file():
            return [workdir / path for path in CONFIGFILE_DIRECTIVE.findall((workdir / name).read_text())]
    return [workdir / "config" / "config.yaml"]


def workflow_config(configfiles=(), config_args=(), replace: bool = False, workdir: Path = Path(".")) -> dict:
    """The config exactly as Snakemake builds it for this project: the Snakefile's configfile: files, each
    updated with what the command line gives, --configfile's files in order and then --config's values
    (with --replace-workflow-config, replaced by it). A file the Snakefile names may be missing only where
    the command line gives one, as Snakemake allows."""
    given: dict = {}
    for path in configfiles:
        if not Path(path).is_file():
            raise ConfigError(f"--configfile {path}: no such file (run from the workflow's directory, or name it)")
        given = deep_merge(given, load_yaml(path))
    if config_args:
        # Snakemake's own reading of KEY=VALUE: a user who passes --config runs Snakemake, so it is installed
        from snakemake.cli import parse_config
        try:
            given = deep_merge(given, parse_config(list(config_args)))
        except ValueError as e:
            raise ConfigError(f"--config: {e}") from None
    config = given   # where Snakemake starts: so the command line's runs come first in the table, as there
    for path in workflow_configfiles(workdir):
        if path.is_file():
            config = deep_merge(config, load_yaml(path))
        elif not given:
            raise ConfigError(f"{path}: no such file: run from the project's directory (`airetrain init` writes "
                              "one), or give --configfile")
        if given:
            config = deep_merge({} if replace else config, given)
    return config


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
    if error.validator == "anyOf":  # a built-in name, or an import path where one is allowed
        branches = [_resolve_ref(sub, root) for sub in error.validator_value]
        names = [v for sub in branches for v in sub.get("enum", [])]
        null = ", null" if any(sub.get("type") == "null" for sub in branches) else ""
        path = ", or an import path 'package.module:function'" if any("pattern" in sub for sub in branches) else ""
        count = "".join(f", or a whole number of at least {sub.get('minimum', 0)}" for sub in branches
                        if sub.get("type") == "integer")
        return (f"{where} = {error.instance!r} is not allowed{did_you_mean(error.instance, names)}; allowed values: "
                + ", ".join(map(repr, names)) + null + path + count)
    if error.validator == "type" and error.validator_value == "string" and isinstance(error.instance, (int, float)):
        return f"{where} = {error.instance!r} must be text: quote it: '{error.instance}'"
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


def grids_of(config: dict, schema: dict) -> tuple[dict, dict[str, dict]]:
    """(the config without its runs' own grids and seeds, its numbers read and validated; {run: the grid
    that expands it: the top-level sweep, its own, its seeds})."""
    config = _pruner_null_is_none(config)
    config, own = sweep.own_grids(config)
    config, seeds = sweep.seed_grids(config)
    config = numbers(config, schema)   # lr: 1e-4, which YAML 1.1 reads as a string
    validate(config, schema)
    grid = sweep.grid(config.get("sweep") or {}, schema)
    return config, {name: {**grid, **sweep.grid(own.get(name, {}), schema, f"runs.{name}.sweep"),
                           **sweep.grid(seeds[name], schema, f"runs.{name}.seeds")}
                    for name in config["runs"]}


def _pruner_null_is_none(config: dict) -> dict:
    """tune.pruner written as null means no pruner, as none does; a tune without the key gets the default."""
    def fixed(run):
        tune = run.get("tune") if isinstance(run, dict) else None
        if isinstance(tune, dict) and "pruner" in tune and tune["pruner"] is None:
            return {**run, "tune": {**tune, "pruner": "none"}}
        return run
    out = {**config, "defaults": fixed(config.get("defaults"))} if "defaults" in config else dict(config)
    if isinstance(config.get("runs"), dict):
        out["runs"] = {name: fixed(run) for name, run in config["runs"].items()}
    return out


def sweep_points(config: dict, runs: dict[str, RunConfig]) -> dict[str, dict]:
    """{run: the dotted keys its grid set (train.seed aside: its group names the seeds), with its values}:
    a run's own point, whatever the other runs are, so that a change to one run changes no other's plan."""
    _, grids = grids_of(config, load_schema())
    points = {}
    for name, grid in grids.items():
        keys = [k for k in grid if k != "train.seed"]
        for new in sweep.expand({name: {}}, grid):
            tree = runs[new].to_dict()
            points[new] = {k: _dotted(tree, k) for k in keys}
    return points


def _dotted(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def resolve(config: dict) -> tuple[Settings, dict[str, RunConfig]]:
    """Validate, expand the sweeps, and return (the settings every run shares, {run name: its config}),
    as typed records made from the complete config."""
    schema = load_schema()
    config, grids = grids_of(config, schema)
    expanded = {**config, "runs": sweep.expanded(config["runs"], grids)}
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
    check_tunes(runs, grids)
    return Settings.from_dict({"roots": top["roots"], "site": top["site"]}), runs


def check_tunes(runs: dict[str, RunConfig], grids: dict[str, dict]) -> None:
    """A tuned run is not also a grid (sweep: or seeds:, whose runs would each be searched), and no run is
    named as its trials are: refused before anything is submitted."""
    from .search import colliding_names

    problems = colliding_names(runs)
    for name, grid in grids.items():
        expanded = sweep.expand({name: {}}, grid) if grid else {}
        if any(runs[new].tune for new in expanded):
            kinds = " and ".join(sorted({"seeds" if k == "train.seed" else "sweep" for k in grid}))
            problems.append(f"runs.{name}.tune beside {kinds} ({', '.join(grid)}): a search proposes its own trials; "
                            "tune one run, or give each grid point its own run with its own tune")
    if problems:
        raise ConfigError("\n".join(problems))


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
