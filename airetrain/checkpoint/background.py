"""Where a checkpoint's writing happens: in the background (a writer process, a thread, DCP's
async_save) or in the training loop itself, and why (train.json records both).

A background save costs training its stall, plus whatever its CPU work (serialize, hash, copy to
scratch, hash the copy) takes from the training steps. Where a core is free (always on GPUs, where
each rank drives its GPU from a core or two), the writer process does that work on it at nice 19,
out of the training's way. Where the ranks keep every core busy, as CPU training does, the writer
process gets no core and the next save waits for it; a thread of the trainer costs least in all
there, less than writing in the loop, which adds the hash to the save's time. For a model of under
SMALL_MODEL_MB a thread measured as cheap as the process, or cheaper, so there the process would
only add its start: PyTorch imported again beside every rank, each session, a second or two of a
core and some hundred MB of memory. benchmarks/checkpoint.py measures each shape and size; the
figures are in benchmarks/README.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

PROCESS, THREAD, DCP_ASYNC, SYNCHRONOUS = "process", "thread", "dcp_async", "synchronous"
# Below this many MB of weights and buffers, auto writes with a thread (the module's docstring says why)
SMALL_MODEL_MB = 64


@dataclass(frozen=True)
class WritePath:
    kind: str     # process | thread | dcp_async | synchronous
    reason: str

    @property
    def background(self) -> bool:
        return self.kind != SYNCHRONOUS


def cores_here() -> int:
    """The cores this process may run on: its affinity (a SLURM job's cgroup), and at most what
    SLURM allocated on this node where it says so (a cluster without CPU binding)."""
    cores = len(os.sched_getaffinity(0))
    allocated = os.environ.get("SLURM_CPUS_ON_NODE", "")
    return min(cores, int(allocated)) if allocated.isdigit() and int(allocated) > 0 else cores


def cores_busy(ranks_on_node: int, cpus_per_rank: int, workers: int | None) -> int:
    """The cores the ranks of one node keep busy: each rank's threads, or its loader's workers and
    itself where those are more (workers unset: cpus_per_rank - 1 of them, train/loader.py)."""
    per_rank = cpus_per_rank if workers is None else max(cpus_per_rank, workers + 1)
    return ranks_on_node * per_rank


def model_mb(model) -> float:
    """A model's weights and buffers, in MB: what a save of it holds besides its optimizer's state."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())) / 1e6


def choose(writer: str, async_: bool, sharded: bool, on_gpu: bool, busy: int, cores: int,
           weights_mb: float) -> WritePath:
    """checkpoint.writer and checkpoint.async, resolved for this machine: busy of cores in use, and
    a model of weights_mb."""
    if not async_:
        return WritePath(SYNCHRONOUS, "checkpoint.async is false")
    if writer != "auto":
        kind = DCP_ASYNC if sharded else writer
        return WritePath(kind, f"checkpoint.writer is {writer}" + (" (FSDP saves with DCP's async_save)"
                                                                   if sharded else ""))
    path = _by_cores(sharded, on_gpu, busy, cores)
    if path.kind == PROCESS and weights_mb < SMALL_MODEL_MB:
        return WritePath(THREAD, f"auto: a model of {weights_mb:.2g} MB (under {SMALL_MODEL_MB} MB): a thread writes "
                                 "its saves as cheaply, without a writer process's start (a PyTorch import per rank)")
    return path


def _by_cores(sharded: bool, on_gpu: bool, busy: int, cores: int) -> WritePath:
    background = DCP_ASYNC if sharded else PROCESS
    if on_gpu:
        return WritePath(background, "auto: on GPUs the training leaves cores free for the writing")
    if busy >= cores:
        return WritePath(DCP_ASYNC if sharded else THREAD,
                         f"auto: the ranks keep all {cores} cores busy ({busy} in use): a writer process would get "
                         "no core, and a thread costs less in all than writing in the loop")
    return WritePath(background, f"auto: {cores - busy} of {cores} cores free for the writing")
