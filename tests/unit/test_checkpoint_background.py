"""checkpoint/background.py: where a checkpoint is written (background or in the loop) and why."""
import os

import pytest

from airetrain.checkpoint.background import choose, cores_busy, cores_here


@pytest.mark.parametrize("writer,async_,sharded,on_gpu,busy,cores,kind,reason", [
    ("auto", True, False, True, 3, 24, "process", "on GPUs"),
    ("auto", True, True, True, 3, 24, "dcp_async", "on GPUs"),
    ("auto", True, False, False, 2, 2, "thread", "all 2 cores busy"),       # this machine's suite
    ("auto", True, True, False, 4, 2, "dcp_async", "all 2 cores busy"),
    ("auto", True, False, False, 1, 2, "process", "1 of 2 cores free"),
    ("thread", True, False, False, 2, 2, "thread", "checkpoint.writer is thread"),  # asked for: honoured
    ("process", True, True, False, 2, 2, "dcp_async", "FSDP saves with DCP"),
    ("auto", False, False, True, 1, 24, "synchronous", "checkpoint.async is false"),
])
def test_the_write_path_and_its_reason(writer, async_, sharded, on_gpu, busy, cores, kind, reason):
    path = choose(writer, async_, sharded, on_gpu, busy, cores)
    assert path.kind == kind and reason in path.reason and path.background == (kind != "synchronous")


def test_the_cores_the_ranks_keep_busy_count_their_loader_workers():
    assert cores_busy(2, 1, None) == 2        # unset workers: cpus_per_rank - 1 of them, within the rank's cores
    assert cores_busy(3, 8, None) == 24
    assert cores_busy(2, 1, 3) == 8           # each rank and its 3 workers


def test_the_cores_here_are_at_most_what_slurm_allocated_on_the_node(monkeypatch):
    mine = len(os.sched_getaffinity(0))
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    assert cores_here() == mine
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "1")
    assert cores_here() == 1
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "")
    assert cores_here() == mine
