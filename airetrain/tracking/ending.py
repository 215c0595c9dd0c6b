"""The end of a run's tracker run, told by the promote step once its checkpoints are durable: the
training's summary (train.json), the SLURM jobs it took, and where its weights are (paths and sha256,
as params; uploaded as artifacts only where tracking.log_weights asks: they are gigabytes, and
already durable on scratch). A tracker that fails here is reported and costs nothing else."""
from __future__ import annotations

import logging
from pathlib import Path

from ..records import Plan
from .sender import short_error
from .trackers import sinks

log = logging.getLogger("airetrain.promote")

SUMMARY = ("steps", "epochs", "eval_loss", "eval_accuracy", "eval_samples", "stopped_early", "samples_per_s",
           "steady_samples_per_s", "steady_tokens_per_s", "mfu", "steady_mfu", "train_seconds", "world_size")


def summary_of(train: dict) -> dict:
    """train.json's figures for the tracker's summary: the final evaluation, the best (value, step),
    whether it stopped early, the steady throughput and MFU."""
    out = {k: train.get(k) for k in SUMMARY if train.get(k) is not None}
    out.update({f"eval_{k}": v for k, v in (train.get("eval_metrics") or {}).items() if isinstance(v, (int, float))})
    if best := train.get("best"):
        out.update({"best_metric": best.get("metric"), "best_value": best.get("value"), "best_step": best.get("step")})
    if isinstance(out.get("stopped_early"), dict):
        out["stopped_early"] = True
    return out


def weights_of(checkpoint: dict) -> dict:
    """The durable checkpoint's and weights' paths and sha256, final and best, as params."""
    out = {}
    for which, record in (("final", checkpoint), ("best", checkpoint.get("best"))):
        if not record:
            continue
        out[f"weights.{which}.checkpoint"] = record["path"]
        out[f"weights.{which}.checkpoint_sha256"] = record["sha256"]
        if w := record.get("weights"):
            out[f"weights.{which}.safetensors"] = w["path"]
            out[f"weights.{which}.safetensors_sha256"] = w["sha256"]
    return out


def uploads(plan: Plan, checkpoint: dict) -> list[Path]:
    """The weights tracking.log_weights asks to upload: best or last (none by default)."""
    which = plan.config.tracking.log_weights
    record = checkpoint.get("best") if which == "best" else checkpoint if which == "last" else None
    weights = (record or {}).get("weights")
    return [Path(weights["path"])] if weights else []


def end(plan: Plan, train: dict, checkpoint: dict, job_ids: list[str], project_dir: Path) -> dict:
    """Every tracker's run ended with the run's figures; {tracker: {ended, error}}."""
    results = {}
    for sink in sinks(plan, project_dir, job_type="promote"):
        try:
            sink.open()
            sink.end(summary_of(train), weights_of(checkpoint), job_ids, uploads(plan, checkpoint))
            sink.close()
            results[sink.name] = {"ended": True, "error": None}
        except Exception as error:   # the checkpoints are durable whatever the tracker says
            message = short_error(error)
            log.warning("tracking: %s could not be told the run's end (%s); the run's files are complete", sink.name,
                        message)
            results[sink.name] = {"ended": False, "error": message}
    return results
