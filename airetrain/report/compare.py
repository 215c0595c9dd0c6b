"""`airetrain compare`: the config keys that differ between runs or groups, and their figures side by side."""
from __future__ import annotations

import json
from pathlib import Path

from ..text import did_you_mean
from ..schema import flatten
from .results import group_rows, metric_columns, run_rows


def compare(results: Path, names: list[str]) -> dict:
    """`airetrain compare`: the config keys that differ between the named runs or groups (a group:
    its first run's config), and their figures side by side (a group's: its means)."""
    from ..errors import ConfigError

    known = sorted(p.name for p in Path(results).iterdir() if (p / "plan.json").exists()) \
        if Path(results).is_dir() else []
    rows = run_rows(Path(results), known)
    by_run = {r["run"]: r for r in rows}
    by_group = {g["group"]: g for g in group_rows(rows)}
    unknown = [n for n in names if n not in by_run and n not in by_group]
    if unknown:
        named = ", ".join(f"{n!r}{did_you_mean(n, [*known, *by_group])}" for n in unknown)
        raise ConfigError(f"compare: unknown run or group {named}; runs: "
                          f"{', '.join(known) or 'none in ' + str(results)}; groups: {', '.join(sorted(by_group))}")
    configs = {n: by_run[n]["config"] if n in by_run else next(r["config"] for r in rows if r["group"] == n)
               for n in names}
    flat = {n: {k: v for k, v in flatten(c).items()} for n, c in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differ = {k: {n: flat[n].get(k) for n in names} for k in keys
              if len({json.dumps(flat[n].get(k), sort_keys=True) for n in names}) > 1}
    columns = [*metric_columns(rows), "best", "best_epoch", "samples_per_s", "gpu_hours",
               *(["tracker"] if any(by_run.get(n, {}).get("tracker") for n in names) else [])]
    figures = {n: {c: (by_run.get(n) or by_group[n]).get(c) for c in columns} for n in names}
    return {"differs": differ, "figures": figures}


def format_compare(found: dict) -> str:
    """compare's answer as two aligned tables: the differing keys, then the figures."""
    names = list(found["figures"])
    columns = list(found["figures"][names[0]])
    width = max(len(k) for k in [*found["differs"], *columns]) + 2

    def cell(value) -> str:
        text = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
        return f"{text:>22}"

    head = f"{'':{width}}" + "".join(f"{n:>22}" for n in names)
    out = ["config keys that differ:" if found["differs"] else "no config key differs", head]
    out += [f"{k:{width}}" + "".join(cell(v) for v in values.values()) for k, values in found["differs"].items()]
    out += ["", "figures:", head]
    out += [f"{c:{width}}" + "".join(cell(found["figures"][n][c]) for n in names) for c in columns]
    return "\n".join(out)
