"""The promote step: what `airetrain promote` does at the end of a run's SLURM job."""
from __future__ import annotations

from pathlib import Path

from . import store
from .promote import promote, promote_best
from .weights import BEST_WEIGHTS, write_weights
from ..records import CheckpointRecord, Plan, RunRecord, TrainRecord, read_record, write_record
from ..roots import fast_run_dir
from ..rundir.run_log import run_record
from ..tracking import ending, trackers


def evaluated(plan: Plan) -> dict:
    """An evaluation run's checkpoint.json: its source run's durable checkpoint (not copied again), which
    its train step loaded the weights from (train.json's init names the file and its sha256)."""
    source = plan.config.evaluate["run"]
    record = read_record(plan.results_dir.parent / source / "checkpoint.json", CheckpointRecord)
    return {**record, "mode": f"evaluated: run {source}'s checkpoint, not copied"}


def promote_run(plan_path: str, train_path: str, out: str, record_path: str | None, project_dir: str) -> list[str]:
    """The promote step: the final checkpoint (and the best) made durable and verified, their weights as
    safetensors, checkpoint.json, and the run record; what it did, as lines for the step's log."""
    plan, train = read_record(plan_path, Plan), read_record(train_path, TrainRecord)
    if plan.config.evaluate:   # it trained nothing: its checkpoint is the one it evaluated
        result = evaluated(plan)
    else:
        result = promote(train["checkpoint"], plan.checkpoints_dir, plan.config.checkpoint.keep)
    if result["kind"] != store.MIRROR and not plan.config.evaluate:   # a script's checkpoints are its own format
        result["weights"] = write_weights(result)
        fast = lambda: fast_run_dir(plan.roots.tmp_shared, plan.run) / "checkpoints"   # noqa: E731
        if best := promote_best(result, plan.checkpoints_dir, plan.config.checkpoint.keep, fast, plan.run):
            result["best"] = {"path": best["path"], **result["best"], "sha256": best["sha256"],
                              "weights": write_weights(best, BEST_WEIGHTS)}
    write_record(out, CheckpointRecord, result)
    record = run_record(plan, train, project_dir)
    if trackers.named(plan):   # after the checkpoints are durable: a tracker's failure costs them nothing
        record["tracking"] = ending.end(plan, train, result, record["slurm_job_ids"], Path(project_dir))
    if record_path:
        write_record(record_path, RunRecord, record)
    lines = [f"promoted {result['path']} ({result['size']} bytes, sha256 {result['sha256'][:12]}…): {result['mode']}"]
    if "weights" in result:
        lines.append(f"weights: {result['weights']['path']} ({result['weights']['size']} bytes, safetensors)")
    if "best" in result:
        b = result["best"]
        lines.append(f"best: step {b['step']} (epoch {b['epoch']}), {b['metric']} {b['value']:.6g}: {b['path']}, "
                     f"weights {b['weights']['path']}")
    return lines
