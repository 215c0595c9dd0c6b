"""For your own torchrun script (script mode): deadline-aware checkpoints in a few lines.

    from airetrain import job
    state = job.load_latest()                       # None on a fresh start
    start = state["step"] if state else 0
    for step in range(start + 1, steps + 1):
        ...                                         # your training step
        if step % 100 == 0 or job.should_stop():
            job.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, step)
        if job.should_stop():
            job.stop_and_requeue(step)              # the run resumes from that checkpoint

Everything goes through the environment the pipeline sets (AIRETRAIN_CHECKPOINT_DIR,
AIRETRAIN_DURABLE_DIR, AIRETRAIN_RESULTS_DIR, AIRETRAIN_END_TIME, AIRETRAIN_STOP_MARGIN_S); the
launcher makes the checkpoint directory durable on scratch while the script runs and at its end.
This module imports nothing of the built-in trainer's loop.
"""
from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .fsutil import write_bytes_atomic
from .records import STOPPED, StopRecord, write_record
from .train.deadline import Stopper

_stopper: Stopper | None = None
_last_saved: Path | None = None


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def checkpoint_dir() -> Path:
    return Path(os.environ["AIRETRAIN_CHECKPOINT_DIR"])


def should_stop() -> bool:
    """True once the job's deadline (less the stop margin) has come or SIGTERM arrived, on every
    rank at the same call: a collective, so every rank must call it at the same points."""
    global _stopper
    if _stopper is None:
        _stopper = Stopper(_rank() == 0, margin_s=float(os.environ.get("AIRETRAIN_STOP_MARGIN_S", "300")))
    if not dist.is_initialized():
        return _stopper.signalled or bool(_stopper.end_time and time.time() > _stopper.end_time - _stopper.margin_s)
    return _stopper.check(_device()) is not None


def save(state: dict, step: int) -> Path | None:
    """Rank 0 writes state to step-<step>.pt in the checkpoint directory, atomically (temporary
    name, fsync, rename); the launcher copies it to scratch. Returns the path on rank 0."""
    global _last_saved
    path = None
    if _rank() == 0:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        path = checkpoint_dir() / f"step-{step:08d}.pt"
        write_bytes_atomic(path, buffer.getvalue())
        _last_saved = path
    if dist.is_initialized():
        dist.barrier()
    return path


def load_latest(map_location="cpu"):
    """The newest checkpoint that loads (weights_only=True): on the fast root, else the durable
    copy on scratch (a requeued job may run where the fast root is empty). None if there is none."""
    dirs = [checkpoint_dir(), durable_dir()]
    candidates = sorted({p.name: p for d in reversed(dirs) if d.is_dir() for p in d.glob("step-*.pt")}.items(),
                        reverse=True)
    for _, path in candidates:
        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except Exception as e:   # truncated or corrupt: try the next older one
            print(f"airetrain.job: skipping {path}: {e}", file=sys.stderr)
    return None


def stop_and_requeue(step: int, of_steps: int | None = None) -> None:
    """Stop now, after a save: rank 0 leaves the STOPPED marker; the launcher requeues the SLURM job
    (or exits 75 for Snakemake's --retries, or outside SLURM), and the rerun resumes."""
    if _rank() == 0:
        reason = "signal" if _stopper and _stopper.signalled else "deadline"
        path = str(_last_saved) if _last_saved else None
        write_record(Path(os.environ["AIRETRAIN_RESULTS_DIR"]) / STOPPED, StopRecord,
                     {"reason": reason, "step": step, "of_steps": of_steps or step, "checkpoint": {"path": path},
                      "time": time.time()})
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    os._exit(0)   # as scripts/train.py: skip gloo's teardown


def log(figures: dict) -> None:
    """Rank 0 appends figures ({"step": ..., "loss": ..., "samples_per_s": ..., "eval_loss": ...}) as a
    line of results/<run>/metrics.jsonl, which `airetrain status`, the report and the results table read."""
    results = os.environ.get("AIRETRAIN_RESULTS_DIR")
    if _rank() == 0 and results:
        with open(Path(results) / "metrics.jsonl", "a") as f:
            f.write(json.dumps({**figures, "time": time.time()}) + "\n")


def durable_dir() -> Path:
    """Where the launcher keeps the durable copies of the checkpoint directory's files (scratch)."""
    return Path(os.environ.get("AIRETRAIN_DURABLE_DIR", checkpoint_dir()))


def resume_dirs() -> list[Path]:
    """Where a framework's resume looks, the preferred first: the fast root (this job's copy) on one
    node; on several, scratch alone, which every rank sees (a node-local fast root is not: every rank
    must load the same checkpoint)."""
    one_node = os.environ.get("LOCAL_WORLD_SIZE", "1") == os.environ.get("WORLD_SIZE", "1")
    return [checkpoint_dir(), durable_dir()] if one_node else [durable_dir()]
