"""The runs' history: what each finished run was (its profile) and what it measured, one line per job.

Kept in <scratch>/airetrain/<run>/history.jsonl, beside its checkpoints and session log: durable,
and not in results/, which a user may clean. The report rule writes it after the jobs have ended,
from the report's own figures: SLURM accounting where there is some (the largest step's memory, all
steps' CPU time: seff's figures), else Snakemake's benchmark files, with the trainer's step time and
the stage and promote steps' seconds.

A profile is what must match for a measurement to apply to another run: the model and its sizes,
the dataset, the global and per-GPU batch, precision, the configured strategy, world size, nodes and
device (and a user's script). Its id is a hash of those, so that equal profiles are found without comparing dicts.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

from ..fsutil import read_json
from ..records import Plan, read_plan
from ..text import aligned, human_mb

HISTORY = "history.jsonl"


def profile(plan: Plan) -> dict:
    data = plan.config.data
    return {"model": plan.config.model.to_dict(), "data": {"name": data.name, "path": data.path, "format": data.format},
            "global_batch": plan.batch.global_, "per_device_batch": plan.batch.per_device,
            "precision": plan.precision, "strategy": plan.config.strategy,   # as configured: auto is decided later
            "world_size": plan.world_size, "nodes": plan.nodes, "device": plan.device,
            "script": str(plan.script.path) if plan.script else None}


def profile_id(prof: dict) -> str:
    return hashlib.sha256(json.dumps(prof, sort_keys=True).encode()).hexdigest()[:12]


def _number(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _step_s(run_dir: Path, step: str) -> float | None:
    """The wall seconds of a step from its Snakemake benchmark file."""
    bench = run_dir / "benchmarks" / f"{step}.tsv"
    try:
        return float(bench.read_text().splitlines()[1].split("\t")[0])
    except (OSError, IndexError, ValueError):
        return None


def entry(run_dir: Path, row: dict) -> dict | None:
    """One finished run's line: its profile and its measurements (row: the report's row of the run)."""
    plan, train_path = read_plan(run_dir), run_dir / "train.json"
    if plan is None or not train_path.exists():
        return None
    train = read_json(train_path)
    nodes = plan.nodes
    used, cpus, cpu_eff = (_number(row.get(k)) for k in ("mem_used_mb", "cpus", "cpu_eff"))
    prof = profile(plan)
    train_rule_s = _step_s(run_dir, "train")
    return {
        "run": plan.run, "job_id": train.get("slurm_job_id"), "recorded": time.time(),
        "epochs": plan.config.train.epochs,
        "profile_id": profile_id(prof), "profile": prof,
        "requested": {"mem_mb_per_node": plan.slurm.mem_mb, "cpus_per_node": plan.cpus_per_node,
                      "time_min": plan.time_min.total},
        "measured": {
            "source": row.get("source"),
            "mem_peak_mb_per_node": round(used / nodes, 1) if used is not None else None,
            "busy_cores_per_node": round(cpu_eff * cpus / nodes, 2) if None not in (cpu_eff, cpus) else None,
            "seconds_per_step": train.get("step_time_s"), "steps": train["steps"],
            "steps_this_session": train["steps_this_session"], "samples_per_s": train.get("samples_per_s"),
            "train_s": train["train_seconds"], "stage_s": _number(row.get("stage_s")),
            "promote_s": _step_s(run_dir, "promote"), "elapsed_s": _number(row.get("elapsed_s")),
            # the train step beyond its loop: interpreter, torch, process group, data, model
            "startup_s": round(max(train_rule_s - train["train_seconds"], 0.0), 1) if train_rule_s else None,
            "data_wait_frac": train.get("data_wait_frac"),
        },
    }


def _key(line: dict) -> tuple:
    """One line per job (per local training session without one)."""
    m = line["measured"]
    return (line["run"], line["job_id"]) if line["job_id"] else (line["run"], m["steps"], m["train_s"])


def read(run_dir: Path) -> list[dict]:
    path = run_dir / HISTORY
    if not path.exists():
        return []
    return [json.loads(s) for s in path.read_text().splitlines() if s.strip()]


def record(results: Path, rows: list[dict]) -> list[dict]:
    """Append each finished run's line to its durable history, once per job; returns the new lines."""
    added = []
    for row in rows:
        run_dir = results / str(row["run"])
        line = entry(run_dir, row)
        if line is None:
            continue
        durable = read_plan(run_dir).durable_dir
        if _key(line) in {_key(old) for old in read(durable)}:
            continue
        durable.mkdir(parents=True, exist_ok=True)
        with open(durable / HISTORY, "a") as f:
            f.write(json.dumps(line) + "\n")
        added.append(line)
    return added


def of_profile(scratch: Path, plan: Plan, newest: dict | None = None) -> list[dict]:
    """The history of the plan's profile, oldest first, as right-sizing reads it; with newest (a line
    entry() made that may not be recorded yet), as the next plan will read it once it is."""
    pid = profile_id(profile(plan))
    lines = [line for line in everything(scratch) if line["profile_id"] == pid]
    if newest is not None and newest["profile_id"] == pid:
        lines = [line for line in lines if _key(line) != _key(newest)] + [newest]
    return lines


def everything(scratch: Path) -> list[dict]:
    """Every run's history under <scratch>/airetrain/, oldest first."""
    lines = [line for path in sorted((scratch / "airetrain").glob(f"*/{HISTORY}")) for line in read(path.parent)]
    return sorted(lines, key=lambda line: line["recorded"])


def format_history(lines: list[dict]) -> str:
    """One line per run and job: when, the profile's id and layout, what it used of what it asked for."""
    header = ["run", "job", "recorded", "profile", "layout", "mem/node", "of", "busy cores", "s/step", "steps",
              "stage s", "promote s"]
    table = [header]
    for line in lines:
        p, m, r = line["profile"], line["measured"], line["requested"]
        table.append([
            line["run"], line["job_id"] or "-", time.strftime("%Y-%m-%d %H:%M", time.localtime(line["recorded"])),
            line["profile_id"], f"{p['world_size']}x{p['device']} on {p['nodes']}",
            _mb(m["mem_peak_mb_per_node"]), _mb(r["mem_mb_per_node"]),
            _fmt(m["busy_cores_per_node"]) + f"/{r['cpus_per_node']}", _fmt(m["seconds_per_step"]), str(m["steps"]),
            _fmt(m["stage_s"]), _fmt(m["promote_s"])])
    return "\n".join(aligned(table))


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _mb(value) -> str:
    return "-" if value is None else human_mb(value)
