"""Sweeps and seeds: `sweep:` (a grid over dotted run keys, at the top or on a run) and `seeds:` expand
runs into runs with readable, deterministic names, and the runs that differ only in their seed form
a group.

    runs: {base: {}}
    sweep: {optim.lr: [0.001, 0.0003], gpus: [1, 6]}
    -> base-lr1e-3-g1, base-lr1e-3-g6, base-lr3e-4-g1, base-lr3e-4-g6
"""
from __future__ import annotations

import itertools
import json
import re

from ..errors import ConfigError
from ..run_config import RunConfig
from ..schema import deep_merge, numbers, resolve_ref
from ..text import did_you_mean

# Short labels for the keys people sweep most; any other key is labelled by its last part.
LABELS = {"gpus": "g", "optim.lr": "lr", "batch.global": "gb", "batch.per_device": "bs", "processes": "p",
          "train.epochs": "ep", "train.seed": "seed", "optim.weight_decay": "wd",
          "model.name": "", "strategy": "", "precision": "", "optim.name": ""}


def format_value(value) -> str:
    """Compact and shell-safe: 0.0003 -> 3e-4, 0.5 -> 0.5, True -> true, 'small cnn' -> small_cnn."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        plain = f"{value:g}"
        mantissa, _, exponent = f"{value:e}".partition("e")
        sci = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return sci if len(sci) < len(plain) else plain
    return re.sub(r"[^A-Za-z0-9_.]", "_", str(value))


def _label(key: str) -> str:
    return LABELS.get(key, key.rsplit(".", 1)[-1])


def _nested(dotted: str, value) -> dict:
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


OWN_VALUE = re.compile(r"^params\.[A-Za-z_][A-Za-z0-9_]*$")   # a script's own values: params.<name>


def check_keys(sweep: dict, run_keys: list[str], where: str = "sweep") -> None:
    """Every key of a grid is a dotted run key (run_keys: all of them)."""
    unknown = [key for key in sweep if key not in run_keys and not OWN_VALUE.match(key)]
    if unknown:
        named = ", ".join(f"{key!r}{did_you_mean(key, run_keys)}" for key in unknown)
        raise ConfigError(f"{where}: unknown key(s) {named}; sweep keys are dotted run "
                          "keys such as optim.lr, gpus or batch.global")


def expand(runs: dict, sweep: dict) -> dict:
    """{name: overrides} for every run x grid point; names must not collide."""
    if not sweep:
        return dict(runs)
    keys = list(sweep)
    out: dict = {}
    for name, overrides in runs.items():
        for point in itertools.product(*(sweep[k] for k in keys)):
            parts = [f"{_label(k)}{format_value(v)}" for k, v in zip(keys, point)]
            new = "-".join([name, *parts])
            if new in out:
                raise ConfigError(f"sweep: runs {out[new]['__from']!r} and {name!r} both expand to {new!r}; "
                                  "rename one of them")
            merged = overrides or {}
            for k, v in zip(keys, point):
                merged = deep_merge(merged, _nested(k, v))
            out[new] = {**merged, "__from": name}
    for run in out.values():
        run.pop("__from")
    return out


def run_key_schema(schema: dict, dotted: str) -> dict | None:
    """The schema of a dotted run key (optim.lr), or None: no such key."""
    node = resolve_ref(schema["$defs"]["run"], schema)
    for part in dotted.split("."):
        if part not in node.get("properties", {}):
            return None
        node = resolve_ref(node["properties"][part], schema)
    return node


def run_keys(schema: dict) -> list[str]:
    """Every dotted run key (optim, optim.lr, ...): what run_key_schema finds."""
    def walk(node: dict, prefix: str) -> list[str]:
        properties = resolve_ref(node, schema).get("properties", {})
        return [k for key, sub in properties.items() for k in (prefix + key, *walk(sub, f"{prefix}{key}."))]
    return walk(schema["$defs"]["run"], "")


def own_grids(config: dict) -> tuple[dict, dict]:
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


def seed_grids(config: dict) -> tuple[dict, dict]:
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


def grid(grid, schema: dict, where: str = "sweep") -> dict:
    """A sweep grid checked (known dotted keys, a list of values each) and its numbers read."""
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{where} must map dotted run keys to lists of values, e.g. {{optim.lr: [1e-3, 3e-4]}}")
    check_keys(grid, run_keys(schema), where)
    return {key: numbers(values, {"type": "array", "items": run_key_schema(schema, key) or {}}, schema)
            for key, values in grid.items()}   # a run's name shows the number, as written in any form


def expanded(runs: dict, grids: dict[str, dict]) -> dict:
    """Every run expanded by its grid; two runs that expand to one name are refused."""
    out: dict = {}
    for name, overrides in runs.items():
        for new, merged in expand({name: overrides}, grids[name]).items():
            if new in out:
                raise ConfigError(f"sweep: two runs expand to {new!r}; rename one of them")
            out[new] = merged
    return out


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
