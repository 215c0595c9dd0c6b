"""The trackers a run logs to, as sinks, and the trainer's start of them (rank 0 only).

Nothing here runs at the workflow's parse: the tracker run is created or continued by the trainer's
first session that logs, and ended by the promote step."""
from __future__ import annotations

from pathlib import Path

from ..rundir import metrics_log
from ..records import Plan
from .identity import Identity
from .opening import of_plan
from .registry import TRACKERS
from .sender import Sender


def named(plan: Plan) -> list[str]:
    """The trackers a run's config names."""
    return list(plan.config.tracking.named)


def sinks(plan: Plan, project_dir: Path, job_type: str = "train", fingerprint: str | None = None) -> list:
    """A sink per tracker the run names, all of the run's one tracker run (created by the first);
    fingerprint: the session's checkpoints' (identity.py)."""
    if not named(plan):
        return []
    identity = Identity(plan.durable_dir, plan.run, fingerprint)
    opening = of_plan(plan, identity.generation, project_dir)
    return [TRACKERS[name](cfg, identity, plan.durable_dir, opening, job_type)
            for name, cfg in plan.config.tracking.named.items()]


def preload(plan: Plan) -> None:
    """Import the run's trackers' packages (MLflow's takes seconds) and start W&B's service in a thread,
    while the trainer sets up, so that the training's first steps do not share the cores with them."""
    import threading

    def load() -> None:
        try:
            for name in named(plan):
                TRACKERS[name].preload()
        except Exception:   # the sending thread meets it again, and counts it
            pass

    if named(plan):
        threading.Thread(target=load, name="airetrain-tracking-preload", daemon=True).start()


def start(plan: Plan, project_dir: Path, metrics: Path, resumed_step: int, fingerprint: str) -> Sender | None:
    """The sending thread of this session (rank 0), opening the trackers in the background; None
    where the run names none. metrics: the run's metrics.jsonl, whose lines up to resumed_step the
    trackers are sent where they lack them; fingerprint: the checkpoints' (a new one: a new tracker run)."""
    found = sinks(plan, project_dir, fingerprint=fingerprint)
    return Sender(found, backlog=backlog(metrics, resumed_step)) if found else None


def follow(plan: Plan, project_dir: Path, metrics: Path):
    """A script's trackers (rank 0 of the built-in trainer sends its own): the launcher follows the script's
    metrics.jsonl (follow.Follower, started here); None where the run names none."""
    from .follow import Follower

    found = sinks(plan, project_dir)
    if not found:
        return None
    follower = Follower(metrics, Sender(found))
    follower.start()
    return follower


def backlog(metrics: Path, upto: int) -> list[tuple[int, dict]]:
    """The figures of the earlier sessions' lines of metrics.jsonl at steps up to upto, one entry a step
    (a step's log line and its evaluation's merged; a step logged again by a resume: its last line)."""
    if not upto or not metrics.exists():
        return []
    by_step: dict[int, dict] = {}
    for line in metrics_log.read(metrics):
        if isinstance(line.get("step"), int) and 0 < line["step"] <= upto:
            by_step[line["step"]] = {**by_step.get(line["step"], {}), **line}
    return sorted(by_step.items())


BOOKKEEPING = ("opened",)   # what a sink notes in its identity for itself, not the tracker run's ids


def closed(sender: Sender) -> dict:
    """Send what is queued, close the trackers, and train.json's record of each: its run's ids (whatever the
    sink keeps in the run's identity), the figures logged, skipped (held already) and lost, and the first error."""
    counts = sender.close()
    return {sink.name: {**{k: v for k, v in sink.identity.of(sink.name).items() if k not in BOOKKEEPING},
                        **counts[sink.name]} for sink in sender.sinks}
