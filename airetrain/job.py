"""For your own torchrun script (script mode): deadline-aware checkpoints in a few lines.

    from airetrain import job
    torch.manual_seed(job.seed())                   # the run's seed (seeds: [0, 1, 2] gives each its own)
    lr = job.params().get("lr", 0.1)                # the run's params: (a search's trial values)
    state = job.load_latest()                       # None on a fresh start
    start = state["step"] if state else 0
    for step in range(start + 1, steps + 1):
        ...                                         # your training step
        job.log({"step": step, "loss": loss.item()})
        if step % 100 == 0 or job.should_stop():
            job.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, step)
        if job.should_stop():
            job.stop_and_requeue(step)              # the run resumes from that checkpoint

Everything goes through the environment the pipeline sets (AIRETRAIN_CHECKPOINT_DIR,
AIRETRAIN_DURABLE_DIR, AIRETRAIN_RESULTS_DIR, AIRETRAIN_END_TIME, AIRETRAIN_STOP_MARGIN_S, ...); the
launcher makes the checkpoint directory durable on scratch while the script runs and at its end.
This module imports nothing of the built-in trainer's loop.

A checkpoint is trusted, and loaded with everything a script saves (an argparse.Namespace, numpy's
random state), when its bytes match the sha256 this run recorded as it wrote it (job.save) or as the
launcher made it durable (the mirror's index). Any other file is loaded with weights_only=True.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .rundir import metrics_log
from .checkpoint.mirror import MIRROR_INDEX
from .fsutil import read_json, sha256_file, write_bytes_atomic
from .records import STOPPED, StopRecord, write_record
from .rundir.run_log import record_start
from .train.deadline import Agreement, Stopper

SAVES = ".saves.jsonl"   # in the durable directory: each file job.save wrote, with its sha256, before it exists

_stopper: Stopper | None = None
_agreement: Agreement | None = None
_last_saved: Path | None = None
_started: dict | None = None   # how this session started: from which checkpoint's step, or over
_writer = None                 # rank 0's metrics writer (metrics_log.Writer)


class CheckpointRefused(RuntimeError):
    """A checkpoint that is intact but holds a type weights_only=True refuses, and that this run has no
    record of writing: loading it could run its code, and starting over would lose the run."""


def _rank() -> int:
    """This process's rank, also before the process group exists (a framework makes it inside fit): torchrun's."""
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def checkpoint_dir() -> Path:
    return Path(os.environ["AIRETRAIN_CHECKPOINT_DIR"])


def seed() -> int:
    """The run's seed: train.seed, one of seeds: for each of the runs they make (0 outside the pipeline)."""
    return int(os.environ.get("AIRETRAIN_SEED") or 0)


def params() -> dict:
    """The run's params: ({name: value}): a search's trial values, a sweep's point, or the config's own;
    {} where it sets none."""
    path = os.environ.get("AIRETRAIN_PARAMS")
    return dict(read_json(path)) if path else {}


def max_epochs(default: int | None = None) -> int | None:
    """The epochs to train to: train.epochs (a search's rung sets it), else default."""
    value = os.environ.get("AIRETRAIN_MAX_EPOCHS")
    return int(value) if value else default


def should_stop() -> bool:
    """True once the job's deadline (less the stop margin) has come or SIGTERM arrived, on every
    rank at the same call: every rank must call it at the same points. The ranks agree every few
    calls (deadline.Agreement: as many as fit in a few seconds), so that asking at every step costs
    nothing; once True, it stays True."""
    global _stopper, _agreement
    if _stopper is None:
        _stopper = Stopper(_rank() == 0, margin_s=float(os.environ.get("AIRETRAIN_STOP_MARGIN_S", "300")))
    if not dist.is_initialized():
        return _stopper.signalled or bool(_stopper.end_time and time.time() > _stopper.end_time - _stopper.margin_s)
    if _agreement is None:
        _agreement = Agreement(_stopper, _device())
    return _agreement.stop()


def save(state: dict, step: int) -> Path | None:
    """Rank 0 writes state to step-<step>.pt in the checkpoint directory, atomically (temporary
    name, fsync, rename), its sha256 recorded first; the launcher copies it to scratch. Returns the
    path on rank 0."""
    global _last_saved
    _note_start(0, asked=False)
    path = None
    if _rank() == 0:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        path = checkpoint_dir() / f"step-{step:08d}.pt"
        # the record before the file: a file killed right after its rename is still this run's own
        _append(durable_dir() / SAVES, {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "step": step})
        write_bytes_atomic(path, data)
        _last_saved = path
    if dist.is_initialized():
        dist.barrier()
    return path


def recorded_digests() -> dict[str, set[str]]:
    """{file name: the sha256s this run recorded for it}: as job.save wrote it, as the launcher made it durable."""
    out: dict[str, set[str]] = {}
    saves = durable_dir() / SAVES
    for text in saves.read_text().splitlines() if saves.exists() else []:
        try:
            line = json.loads(text)
        except ValueError:   # a line cut by a kill
            continue
        out.setdefault(line["file"], set()).add(line["sha256"])
    index = durable_dir() / MIRROR_INDEX
    for rel, entry in (read_json(index)["files"] if index.exists() else {}).items():
        out.setdefault(rel, set()).add(entry["sha256"])
    return out


def load_latest(map_location="cpu"):
    """The newest checkpoint that loads: on the fast root, else the durable copy on scratch (a requeued
    job's fast root is empty; on several nodes, scratch alone, which every rank sees). None only where
    there is none.

    A file whose sha256 matches this run's record of it is the run's own, and loads whole; one whose
    bytes differ from its record is corrupt, and the next older is tried. A file with no record loads
    with weights_only=True: one that is intact but refused for a type it holds fails the run
    (CheckpointRefused, naming the type) rather than train from the start."""
    recorded = recorded_digests()
    found = {p.name: p for d in reversed(resume_dirs()) if d.is_dir() for p in d.glob("step-*.pt")}
    skipped = []
    for name, path in sorted(found.items(), reverse=True):
        known = recorded.get(name)
        try:
            digest = sha256_file(path)
        except OSError as e:
            skipped.append(f"{path}: {e}")
            continue
        if known and digest not in known:
            skipped.append(f"{path}: its sha256 is not the one recorded when it was written (corrupt or changed)")
            print(f"airetrain.job: skipping {skipped[-1]}", file=sys.stderr)
            continue
        trusted = bool(known)
        try:
            state = torch.load(path, map_location=map_location, weights_only=not trusted)
        except Exception as e:
            if not trusted:
                _refuse_if_unsafe(path, e)
            skipped.append(f"{path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            print(f"airetrain.job: skipping {skipped[-1]}", file=sys.stderr)   # truncated: try the next older
            continue
        step = state.get("step") if isinstance(state, dict) else None
        _note_start(step if isinstance(step, int) else _step_of(name), str(path))
        return state
    if skipped:
        run = os.environ.get("AIRETRAIN_RUN", "RUN")
        raise RuntimeError("airetrain.job: no checkpoint of this run loads, and it has some, so it will not start "
                           "over:\n  " + "\n  ".join(skipped) + f"\nairetrain restart {run} trains it from the start")
    _note_start(0, None)
    return None


def _refuse_if_unsafe(path: Path, error: Exception) -> None:
    """A file weights_only=True refused for the types it holds (not for its bytes): CheckpointRefused."""
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:   # not a readable archive: corrupt
        return
    if unsafe:
        raise CheckpointRefused(
            f"{path} holds {', '.join(unsafe)}, which torch.load(weights_only=True) refuses, and this run has no "
            f"record of writing it (it was not saved by job.save or made durable by the launcher). If you trust "
            f"it, allow the types (torch.serialization.add_safe_globals) or save plain values (vars(args), "
            f"tensors, lists) instead") from error


def _step_of(name: str) -> int | None:
    digits = name.removeprefix("step-").split(".")[0]
    return int(digits) if digits.isdigit() else None


def note_resume(step: int | None, checkpoint: str | None) -> None:
    """A framework's callback found where it resumes (None: it starts fresh): recorded as this session's start."""
    _note_start(step if checkpoint else 0, checkpoint)


def _note_start(step: int | None, checkpoint: str | None = None, asked: bool = True) -> None:
    """This session's start, once, recorded in the run's durable starts log (rank 0). A session that saves
    or logs before asking for a checkpoint, where the run has durable ones, has started over: said in the
    log, and in `airetrain status`."""
    global _started
    if _started is not None:
        return
    newest = os.environ.get("AIRETRAIN_RESUMABLE") or None   # the newest durable checkpoint at the launch
    over = not asked and newest is not None
    _started = {"step": step, "checkpoint": checkpoint, "started_over": over, "newest": newest}
    if over and _rank() == 0:
        print(f"airetrain.job: run {os.environ.get('AIRETRAIN_RUN')} has durable checkpoints (the newest "
              f"{newest}), but this session started from step 0 without job.load_latest(): it is training "
              "from the start again", file=sys.stderr, flush=True)
    run_dir = os.environ.get("AIRETRAIN_RUN_DIR")
    if _rank() == 0 and run_dir:
        record_start(run_dir, {**_started, "slurm_job_id": os.environ.get("SLURM_JOB_ID")})
    if (writer := _metrics()) is not None:   # the earlier sessions' lines after this step are superseded
        writer.begin(_started["step"] or 0)


def stop_and_requeue(step: int, of_steps: int | None = None) -> None:
    """Stop now, after a save: rank 0 leaves the STOPPED marker; the launcher requeues the SLURM job
    (or exits 75 for Snakemake's --retries, or outside SLURM), and the rerun resumes."""
    if _rank() == 0:
        reason = (_agreement and _agreement.reason) or ("signal" if _stopper and _stopper.signalled else "deadline")
        path = str(_last_saved) if _last_saved else None
        write_record(Path(os.environ["AIRETRAIN_RESULTS_DIR"]) / STOPPED, StopRecord,
                     {"reason": reason, "step": step, "of_steps": of_steps or step, "checkpoint": {"path": path},
                      "time": time.time()})
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    os._exit(0)   # as scripts/train.py: skip gloo's teardown


def log(figures: dict) -> None:
    """Rank 0 appends figures ({"step": ..., "epoch": ..., "loss": ..., "samples_per_s": ..., "eval_loss": ...}) as a
    line of results/<run>/metrics.jsonl, which `airetrain status`, the report, the results table, a search
    (tune.metric, by "epoch") and the run's trackers read."""
    if isinstance(figures.get("step"), int):
        _note_start(0, asked=False)
    if (writer := _metrics()) is not None:
        writer.write({**figures, "time": time.time()})


def _metrics() -> metrics_log.Writer | None:
    """Rank 0's writer of the run's metrics (the durable history, then results/<run>/metrics.jsonl)."""
    global _writer
    results, run_dir = os.environ.get("AIRETRAIN_RESULTS_DIR"), os.environ.get("AIRETRAIN_RUN_DIR")
    if _writer is None and _rank() == 0 and results:
        _writer = metrics_log.Writer(metrics_log.durable_path(run_dir) if run_dir else None,
                                     Path(results) / metrics_log.NAME)
    return _writer


def _append(path: Path, line: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def durable_dir() -> Path:
    """Where the launcher keeps the durable copies of the checkpoint directory's files (scratch)."""
    return Path(os.environ.get("AIRETRAIN_DURABLE_DIR", checkpoint_dir()))


def resume_dirs() -> list[Path]:
    """Where a resume looks, the preferred first: the fast root (this job's copy) on one node; on several,
    scratch alone, which every rank sees (a node-local fast root is not: every rank must load the same
    checkpoint)."""
    one_node = os.environ.get("LOCAL_WORLD_SIZE", "1") == os.environ.get("WORLD_SIZE", "1")
    return [checkpoint_dir(), durable_dir()] if one_node else [durable_dir()]
