"""A run's changes of batch after running out of GPU memory (train/batch_fit.py makes them), kept in its
durable run directory: every session applies those recorded so far before it builds its data loader, and
train.json and the report list them. Several ranks that run out at once record the same change; a change
applies only to the batch it was made from, so it counts once.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..records import Plan

CHANGES = "batch_changes.jsonl"   # in the durable run directory


def changes(run_dir: str | Path) -> list[dict]:
    """The changes recorded for the run, each once, in the order they were made."""
    path = Path(run_dir) / CHANGES
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    kept, seen = [], set()
    for line in lines:
        if line["from_per_device"] not in seen:
            seen.add(line["from_per_device"])
            kept.append(line)
    return kept


def record(run_dir: str | Path, change: dict) -> None:
    """Append a change, on disk before the caller goes on: the next session reads it."""
    path = Path(run_dir) / CHANGES
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(change) + "\n")
        f.flush()
        os.fsync(f.fileno())


def with_changes(plan: Plan) -> Plan:
    """The plan with the per-device batch and accumulation its recorded changes left."""
    batch = plan.batch
    for change in changes(plan.durable_dir):
        if change["from_per_device"] == batch.per_device:
            batch = dataclasses.replace(batch, per_device=change["per_device"], grad_accum=change["grad_accum"])
    return plan if batch is plan.batch else dataclasses.replace(plan, batch=batch)


def described(change: dict) -> str:
    """A change as the launch's log and the report's advice name it."""
    return (f"step {change['step']}: per_device {change['from_per_device']} -> {change['per_device']}, "
            f"accumulation {change['from_grad_accum']} -> {change['grad_accum']} ({change['why']})")
