"""The trackers a run logs to, as sinks, and the trainer's start of them (rank 0 only).

Nothing here runs at the workflow's parse: the tracker run is created or continued by the trainer's
first session that logs, and ended by the promote step."""
from __future__ import annotations

from pathlib import Path

from ..records import Plan
from .identity import Identity
from .mlflow_sink import MlflowSink
from .opening import of_plan
from .sender import Sender
from .wandb_sink import WandbSink


def named(plan: Plan) -> list[str]:
    """The trackers a run's config names."""
    t = plan.config.tracking
    return [name for name, cfg in (("wandb", t.wandb), ("mlflow", t.mlflow)) if cfg is not None]


def sinks(plan: Plan, project_dir: Path, job_type: str = "train") -> list:
    """A sink per tracker the run names, all of the run's one tracker run (created by the first)."""
    if not named(plan):
        return []
    identity = Identity(plan.durable_dir, plan.run)
    opening = of_plan(plan, identity.generation, project_dir)
    t, out = plan.config.tracking, []
    if t.wandb is not None:
        out.append(WandbSink(t.wandb, identity, plan.durable_dir, opening, job_type))
    if t.mlflow is not None:
        out.append(MlflowSink(t.mlflow, identity, opening))
    return out


def start(plan: Plan, project_dir: Path) -> Sender | None:
    """The sending thread of this session (rank 0), opening the trackers in the background; None
    where the run names none."""
    found = sinks(plan, project_dir)
    return Sender(found) if found else None


IDS = ("id", "project", "entity", "mode", "run_id", "experiment", "experiment_id", "url")


def closed(sender: Sender) -> dict:
    """Send what is queued, close the trackers, and train.json's record of each: its run's ids, the
    figures logged, skipped (held already) and lost, and the first error."""
    counts = sender.close()
    return {sink.name: {**{k: v for k, v in sink.identity.of(sink.name).items() if k in IDS}, **counts[sink.name]}
            for sink in sender.sinks}
