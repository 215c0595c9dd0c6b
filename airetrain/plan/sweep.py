"""Expand `sweep:` (a grid over dotted run keys) into runs with readable, deterministic names.

    runs: {base: {}}
    sweep: {optim.lr: [0.001, 0.0003], gpus: [1, 6]}
    -> base-lr1e-3-g1, base-lr1e-3-g6, base-lr3e-4-g1, base-lr3e-4-g6
"""
from __future__ import annotations

import itertools
import re

from ..errors import ConfigError
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


def check_keys(sweep: dict, run_keys: list[str], where: str = "sweep") -> None:
    """Every key of a grid is a dotted run key (run_keys: all of them)."""
    unknown = [key for key in sweep if key not in run_keys]
    if unknown:
        named = ", ".join(f"{key!r}{did_you_mean(key, run_keys)}" for key in unknown)
        raise ConfigError(f"{where}: unknown key(s) {named}; sweep keys are dotted run "
                          "keys such as optim.lr, gpus or batch.global")


def expand(runs: dict, sweep: dict, deep_merge) -> dict:
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
