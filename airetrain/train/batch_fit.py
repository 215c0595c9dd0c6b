"""A run out of GPU memory goes on with half the per-device batch and twice the accumulation steps.

The global batch is held, so the run's optimizer sees the same samples at every step and its loss curve
stays comparable; only the order of the additions changes (the gradients of two halves are summed where one
batch's were), so a run that changed is no longer bit-exact against one that did not.

The rank that runs out records the change in the durable run directory (batch_changes.jsonl), lets the
checkpoint being written in the background land, then ends: an out-of-memory error leaves the allocator
fragmented and the other ranks waiting in a collective, so the group is started again rather than recovered
in place. torchrun's restart, or the launch's, starts it in the same
job; Snakemake's retry in the next. Every session applies the changes recorded so far before it builds its
data loader (rundir/batch_changes.py), and resumes from the newest checkpoint.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from collections.abc import Callable

from ..records import Plan
from ..rundir import batch_changes
from .evaluate import EVAL_BATCH, __file__ as evaluate_file

log = logging.getLogger("airetrain.train")
EXIT_OUT_OF_MEMORY = 76           # a rank ended so that the group restarts with a smaller batch


def halved(per_device: int, global_: int, world: int) -> tuple[int, int] | None:
    """(per_device, grad_accum) at most half the per-device batch with the same global batch: the largest
    divisor of a rank's share of the global batch up to half of per_device; None at per_device 1."""
    share = global_ // world
    smaller = [d for d in range(per_device // 2, 0, -1) if share % d == 0]
    return (smaller[0], share // smaller[0]) if smaller else None


def fit_smaller(plan: Plan, step: int, error: BaseException, saving: Callable[[], None] | None = None) -> None:
    """Record the smaller batch for the next session and end this rank; re-raise where none is smaller.
    `saving` waits for the checkpoint being written in the background, so the next session resumes from it."""
    b = plan.batch
    if _in_evaluation(error):   # its batch is its own: a smaller training batch would not help
        log.error("out of GPU memory in an evaluation at step %d (its forward passes are of %d samples): the "
                  "run stops; evaluate less often, or on a smaller split", step, EVAL_BATCH)
        raise error
    smaller = halved(b.per_device, b.global_, plan.world_size)
    if smaller is None:
        advice = _advice(plan)
        log.error("out of GPU memory at step %d with batch.per_device 1: nothing smaller to try; %s", step, advice)
        raise error
    per_device, accum = smaller
    change = {"step": step, "from_per_device": b.per_device, "from_grad_accum": b.grad_accum,
              "per_device": per_device, "grad_accum": accum, "global": b.global_,
              "why": f"out of GPU memory: {str(error).splitlines()[0][:200]}", "rank": int(os.environ.get("RANK", 0)),
              "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "time": time.time()}
    batch_changes.record(plan.durable_dir, change)   # before this rank ends: the next session reads it
    log.error("out of GPU memory at step %d with batch.per_device %d: the run goes on from its last checkpoint "
              "with per_device %d x %d accumulation steps (global batch %d held)", step, b.per_device, per_device,
              accum, b.global_)
    if saving is not None:
        _let_land(saving)
    logging.shutdown()
    os._exit(EXIT_OUT_OF_MEMORY)   # not a clean exit: the other ranks may be waiting in a collective


def _let_land(saving: Callable[[], None], timeout_s: float = 300.0) -> None:
    """Wait, up to a bound, for the save in flight: ending at once killed its writer, and the next session
    started over from an older checkpoint, or from step 0. Its own error is the next session's to find."""
    def wait():
        try:
            saving()
        except BaseException as e:   # the save failed: the checkpoints before it are intact
            log.warning("the checkpoint being written when the run ran out of memory did not land: %s", e)
    waiter = threading.Thread(target=wait, name="last-save", daemon=True)
    waiter.start()
    waiter.join(timeout_s)   # a save that hangs (a peer gone from its collective) must not keep the rank


def _in_evaluation(error: BaseException) -> bool:
    return any(frame.f_code.co_filename == evaluate_file for frame, _ in traceback.walk_tb(error.__traceback__))


def _advice(plan: Plan) -> str:
    """What to try once the batch cannot shrink, from the plan's memory estimate where it has one."""
    memory = plan.memory_estimate or {}
    if plan.strategy == "ddp":
        fsdp = f" (the estimate: {memory['fsdp_per_gpu_gb']} GB a GPU under FSDP, {memory['ddp_per_gpu_gb']} GB " \
               "under DDP)" if "fsdp_per_gpu_gb" in memory else ""
        return f"try strategy: fsdp{fsdp}, which shards the weights and optimizer state, or " \
               "activation_checkpointing: true"
    if not plan.activation_checkpointing:
        return "try activation_checkpointing: true (blocks recompute their activations in the backward pass)"
    return "the model does not fit this GPU sharded and recomputed: more GPUs, or a GPU with more memory"
