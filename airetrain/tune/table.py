"""What a search found: results/<tune>/tune.{csv,md,html}, a row per trial, and the best trial's weights.

    rows(tuned)        a row per trial: its parameters, state, epochs, last value, each rung's value, hours
    summary(...)       the best trial and its config, the hours used against training every trial to the end,
                       Optuna's parameter importances
    write_table(...)   the three files, and the best trial's weights copied (verified) to the tune's
                       best.safetensors on scratch
"""
from __future__ import annotations

import html
import logging
from pathlib import Path

import pandas as pd
import yaml

from ..fsutil import copy_atomic, read_json, write_json_atomic
from ..records import Plan
from ..search_space import ladder, rung_name, set_dotted, tune_folder
from ..text import markdown_table
from .steps import metric_of
from .study import exists, open_study

log = logging.getLogger("airetrain.tune")
STATES = {"COMPLETE": "complete", "PRUNED": "pruned", "RUNNING": "running", "WAITING": "running", "FAIL": "failed"}


def rows(tuned: Plan, results: str | Path = "results") -> list[dict]:
    """A row per trial of the study, in Optuna's numbering."""
    folder = tune_folder(tuned.run, results)
    if not exists(folder):
        return []
    rungs = ladder(tuned.config)
    with open_study(folder, tuned.config.tune, metric_of(tuned)[1], write=False) as study:
        trials = study.trials
    out = []
    for t in trials:
        values = t.intermediate_values
        epochs = max(values, default=0)
        row = {"trial": t.number, **t.params, "state": STATES.get(t.state.name, t.state.name.lower()),
               "epochs": epochs, "value": t.value if t.value is not None else values.get(epochs),
               "run": t.user_attrs.get("run")}
        if row["state"] == "pruned":
            row["state"] = f"pruned at rung {sum(1 for e in rungs if e <= epochs) - 1}"
        row.update({f"at_{e}_epochs": values.get(e) for e in rungs})
        row["device_hours"] = _hours(Path(results), row["run"], rungs, tuned)
        row["error"] = t.user_attrs.get("error")
        out.append(row)
    return out


def _hours(results: Path, run: str | None, rungs: list[int], tuned: Plan) -> float:
    """The trial's train steps' wall hours x the devices each held (GPUs; ranks on CPU), from Snakemake's
    benchmark of each rung's train step; for a rung trained in a wave (no step of its own), its trainer's seconds."""
    devices, hours = tuned.gpus or tuned.world_size, 0.0
    for epochs in rungs if run else []:
        bench = results / rung_name(run, epochs) / "benchmarks" / "train.tsv"
        if bench.exists():
            hours += float(pd.read_csv(bench, sep="\t")["s"].iloc[-1]) / 3600 * devices
        elif (train := results / rung_name(run, epochs) / "train.json").exists():
            hours += (read_json(train).get("train_seconds") or 0) / 3600 * devices
    return round(hours, 5)


def summary(table: list[dict], tuned: Plan, results: str | Path = "results") -> dict:
    """The best complete trial, its config, the hours used against every trial trained to the end, the importances."""
    metric, mode = metric_of(tuned)
    done = [r for r in table if r["state"] == "complete" and r["value"] is not None]
    best = (min if mode == "min" else max)(done, key=lambda r: r["value"]) if done else None
    used = sum(r["device_hours"] for r in table)
    epochs = tuned.config.train.epochs
    full = sum(r["device_hours"] / r["epochs"] * epochs for r in table if r["epochs"])
    config = None
    if best:
        config = {}
        for key in tuned.tune_keys:
            config = set_dotted(config, key, best[key])
        config = set_dotted(config, "train.epochs", epochs)
    return {"metric": metric, "mode": mode, "best": best, "config": config, "device_hours": round(used, 4),
            "device_hours_all_to_the_end": round(full, 4), "importances": _importances(tuned, results, len(done))}


def _importances(tuned: Plan, results, complete: int) -> dict | None:
    """Optuna's parameter importances (fANOVA), once four trials have completed: None before, or where it fails."""
    if complete < 4 or len(tuned.config.tune.space) < 2:
        return None
    import optuna

    try:
        with open_study(tune_folder(tuned.run, results), tuned.config.tune, metric_of(tuned)[1], write=False) as s:
            return {k: round(v, 3) for k, v in optuna.importance.get_param_importances(s).items()}
    except Exception as e:   # an importance that cannot be computed costs the table nothing
        log.warning("parameter importances not computed: %s", e)
        return None


def markdown(table: list[dict], about: dict, tuned: Plan) -> str:
    rungs = ladder(tuned.config)
    keys = tuned.tune_keys
    columns = ["trial", *keys, "state", "epochs", "value", *(f"at_{e}_epochs" for e in rungs), "device_hours", "run"]
    best, lines = about["best"], [f"# Tune {tuned.run}", ""]
    if best:
        lines += [f"Best: trial {best['trial']} ({best['run']}), {about['metric']} = {best['value']:.6g} "
                  f"({about['mode']}). Its config:", "", "```yaml", yaml.safe_dump(about["config"], sort_keys=False)
                  .rstrip(), "```", ""]
    else:
        lines += ["No trial has completed yet.", ""]
    states = pd.Series([r["state"].split(" ")[0] for r in table]).value_counts().to_dict()
    lines += [f"Trials: {len(table)} ({', '.join(f'{n} {s}' for s, n in states.items())}). Device-hours used: "
              f"{about['device_hours']:.4g}, against {about['device_hours_all_to_the_end']:.4g} had every trial "
              f"trained all {tuned.config.train.epochs} epochs.", ""]
    if about["importances"]:
        lines += ["Parameter importances (Optuna, fANOVA): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in about["importances"].items()), ""]
    lines += markdown_table(columns, [[_cell(r.get(c)) for c in columns] for r in table])
    lines += ["", "value: the last reported metric; at_N_epochs: the metric after N epochs (a rung); device_hours: "
              "the train steps' wall hours x GPUs (ranks on CPU)."]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def write_table(tuned: Plan, out_dir: Path, results: str | Path = "results") -> dict:
    """tune.csv, tune.md and tune.html in out_dir; the best trial's weights to the tune's best.safetensors."""
    table = rows(tuned, results)
    about = summary(table, tuned, results)
    keys = tuned.tune_keys
    frame = pd.DataFrame(table, columns=["trial", *keys, "state", "epochs", "value", "run", "device_hours",
                                         *(k for k in (table[0] if table else {}) if k.startswith("at_")), "error"])
    out_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out_dir / "tune.csv", index=False)
    text = markdown(table, about, tuned)
    (out_dir / "tune.md").write_text(text)
    (out_dir / "tune.html").write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>airetrain tune</title></head><body><pre>"
        + html.escape(text) + "</pre></body></html>\n")
    if about["best"]:
        about["weights"] = best_weights(tuned, about["best"], results)
    write_json_atomic(tune_folder(tuned.run, results) / "best.json", about)
    return about


def best_weights(tuned: Plan, best: dict, results) -> dict | None:
    """The best trial's last weights copied to <scratch>/airetrain/<tune>/best.safetensors, verified by sha256."""
    record = read_json(Path(results) / rung_name(best["run"], best["epochs"]) / "checkpoint.json")
    weights = record.get("weights")
    if not weights:
        return None
    target = Path(tuned.durable_dir) / "best.safetensors"
    digest = copy_atomic(weights["path"], target, expected_sha256=weights["sha256"])
    return {"path": str(target), "sha256": digest, "from": weights["path"]}
