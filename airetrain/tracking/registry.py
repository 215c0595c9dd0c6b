"""The trackers, one row each: a run's `tracking:` key, and the sink class that is that tracker. What differs
between trackers is the class's own (sender.Sink): its package (and pip extra), what it preloads while the
trainer sets up, its plan-time checks (of a run, and of several runs together), and its part of a run's label
in the results table. The trainer, the promote step, the plan and the results table go through this table and
nothing else.

Adding a tracker: a sink class written to sender.Sink, its row here, its key under `tracking:` in the schema
and in run_config.Tracking.
"""
from __future__ import annotations

from .mlflow_sink import MlflowSink
from .wandb_sink import WandbSink

TRACKERS: dict[str, type] = {"wandb": WandbSink, "mlflow": MlflowSink}


def label(tracking: dict | None) -> str | None:
    """A run's tracker runs, as the results table and `airetrain compare` show them (each tracker's own
    words: W&B's project/run id, MLflow's run page), from train.json's tracking record."""
    parts = [part for name, record in (tracking or {}).items()
             if name in TRACKERS and (part := TRACKERS[name].label(record or {}))]
    return "; ".join(parts) or None
