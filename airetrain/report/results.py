"""The results table's rows: what an experiment found, one row per group of runs (the runs whose
configs are equal but for train.seed), each metric as mean ± standard deviation with a 95 % confidence
interval over the group's finished runs; and one row per run. results_render.py writes them.

Read from each run's plan.json (its group and config), train.json (the final and best
evaluation, throughput) and metrics.jsonl (when the best came, the evaluation curves), beside the
efficiency table's rows (GPU-hours, requeues included). A run still training, or failed, counts as
planned and is never averaged.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..rundir import metrics_log
from ..fsutil import read_json
from ..schema import flatten
from ..tracking.registry import label
from .collection import evaluates_label


def differing_keys(configs: dict[str, dict]) -> dict[str, str]:
    """{group: "key=value, ..."}: the resolved config keys (train.seed aside) in which the groups
    differ from each other."""
    flat = {group: {k: v for k, v in flatten(config).items() if k != "train.seed"}
            for group, config in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differ = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat.values()}) > 1]
    return {group: ", ".join(f"{k}={f.get(k)}" for k in differ) for group, f in flat.items()}


def _time_to_best(run_dir: Path, best_step: int | None) -> float | None:
    """Seconds of training until the best evaluation's step: the log line at or just before it."""
    path = run_dir / "metrics.jsonl"
    if best_step is None or not path.exists():
        return None
    seconds = None
    for m in metrics_log.read(path):
        if "elapsed_s" in m and m.get("step", 0) <= best_step:
            seconds = m["elapsed_s"]
    return seconds


ENERGY = ("energy_kwh", "co2e_kg")   # each run's, from the efficiency table; a group's mean ± sd over its seeds


def run_rows(results: Path, runs: list[str], efficiency: pd.DataFrame | None = None) -> list[dict]:
    """One row per run: its group, whether it finished, its final and best figures."""
    per_run = {column: {} if efficiency is None or column not in efficiency else
               dict(zip(efficiency["run"], efficiency[column])) for column in ("gpu_hours", *ENERGY)}
    rows = []
    for run in runs:
        run_dir = results / run
        plan = read_json(run_dir / "plan.json") if (run_dir / "plan.json").exists() else {}
        train = read_json(run_dir / "train.json") if (run_dir / "train.json").exists() else None
        row = {"run": run, "group": plan.get("group") or run, "finished": train is not None,
               "config": plan.get("config", {}), "evaluates": evaluates_label(plan.get("config", {}).get("evaluate"))}
        if train:
            row["eval_loss"] = train.get("eval_loss")
            for name, value in (train.get("eval_metrics") or {}).items():
                row[f"eval_{name}"] = value
            best = train.get("best") or {}
            row.update(best_metric=best.get("metric"), best=best.get("value"),
                       best_epoch=best["epoch"] + 1 if best else None,
                       time_to_best_s=_time_to_best(run_dir, best.get("step")),
                       samples_per_s=train.get("steady_samples_per_s") or train.get("samples_per_s"),
                       stopped_early=(train.get("stopped_early") or {}).get("step"),
                       tracker=label(train.get("tracking")))
        for column, values in per_run.items():   # from the efficiency table: SLURM's figures, or the benchmarks'
            value = values.get(run)
            row[column] = None if value is None or (isinstance(value, float) and math.isnan(value)) else value
        rows.append(row)
    return rows


def mean_sd_ci(values: list[float]) -> dict:
    """mean, sample standard deviation (n - 1), and the 95 % confidence interval's half-width from
    Student's t; with one value, the mean alone."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n if n else None
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "ci95": None}
    sd = pd.Series(values).std(ddof=1)
    return {"n": n, "mean": mean, "sd": float(sd), "ci95": float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n))}


def metric_columns(rows: list[dict]) -> list[str]:
    names = sorted({k for r in rows for k in r if k.startswith("eval_") and r.get(k) is not None})
    return (["eval_loss"] if "eval_loss" in names else []) + [n for n in names if n != "eval_loss"]


def group_rows(rows: list[dict]) -> list[dict]:
    """One row per group: finished and planned runs; each metric's mean, sd and 95 % CI over the finished
    runs; the best (value, epoch, time to it), steady samples/s, and the group's GPU-hours."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    differs = differing_keys({g: members[0]["config"] for g, members in groups.items()})
    out = []
    for group, members in groups.items():
        done = [m for m in members if m["finished"]]
        row = {"group": group, "n_finished": len(done), "n_planned": len(members),
               "runs": ", ".join(m["run"] for m in members), "differs": differs[group],
               "evaluates": members[0].get("evaluates", "")}
        for column in [*metric_columns(rows), "best", "best_epoch", "time_to_best_s", "samples_per_s", *ENERGY]:
            values = [m[column] for m in done if m.get(column) is not None]
            if values:
                figures = mean_sd_ci(values)
                row.update({column: figures["mean"], f"{column}_sd": figures["sd"], f"{column}_ci95": figures["ci95"]})
        if any(m.get("best_metric") for m in done):
            row["best_metric"] = next(m["best_metric"] for m in done if m.get("best_metric"))
        hours = [m["gpu_hours"] for m in members if m.get("gpu_hours") is not None]
        row["gpu_hours"] = sum(hours) if hours else None
        out.append(row)
    return out


def curves(results: Path, rows: list[dict], metric: str) -> pd.DataFrame:
    """The metric's evaluation curve of each group: mean and sd over its finished runs, per step."""
    points = []
    for row in rows:
        path = Path(results) / row["run"] / "metrics.jsonl"
        if row["finished"] and path.exists():
            points += [{"group": row["group"], "run": row["run"], "step": m["step"], "value": m[metric]}
                       for m in metrics_log.read(path) if m.get(metric) is not None]
    if not points:
        return pd.DataFrame(columns=["group", "step", "mean", "sd"])
    frame = pd.DataFrame(points).drop_duplicates(["run", "step"], keep="last")
    return frame.groupby(["group", "step"])["value"].agg(mean="mean", sd="std").reset_index()
