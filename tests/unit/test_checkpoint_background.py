"""checkpoint/background.py: where a checkpoint is written (background or in the loop) and why."""
import os

import pytest

from torch import nn

from airetrain.checkpoint.background import SMALL_MODEL_MB, choose, cores_busy, cores_here, model_mb

BIG, SMALL = 100.0, 0.05   # MB of weights: a model worth a writer process, and one of the suite's


@pytest.mark.parametrize("writer,async_,sharded,on_gpu,busy,cores,weights,kind,reason", [
    ("auto", True, False, True, 3, 24, BIG, "process", "on GPUs"),
    ("auto", True, True, True, 3, 24, BIG, "dcp_async", "on GPUs"),
    ("auto", True, False, False, 2, 2, BIG, "thread", "all 2 cores busy"),       # this machine's suite
    ("auto", True, True, False, 4, 2, BIG, "dcp_async", "all 2 cores busy"),
    ("auto", True, False, False, 1, 2, BIG, "process", "1 of 2 cores free"),
    # a small model: a thread, with a core free and on GPUs; FSDP's DCP whatever its size
    ("auto", True, False, False, 1, 2, SMALL, "thread", "a model of 0.05 MB"),
    ("auto", True, False, True, 3, 24, SMALL, "thread", f"under {SMALL_MODEL_MB} MB"),
    ("auto", True, True, True, 3, 24, SMALL, "dcp_async", "on GPUs"),
    ("thread", True, False, False, 2, 2, BIG, "thread", "checkpoint.writer is thread"),  # asked for: honoured
    ("process", True, False, False, 1, 2, SMALL, "process", "checkpoint.writer is process"),
    ("process", True, True, False, 2, 2, BIG, "dcp_async", "FSDP saves with DCP"),
    ("auto", False, False, True, 1, 24, BIG, "synchronous", "checkpoint.async is false"),
])
def test_the_write_path_and_its_reason(writer, async_, sharded, on_gpu, busy, cores, weights, kind, reason):
    path = choose(writer, async_, sharded, on_gpu, busy, cores, weights)
    assert path.kind == kind and reason in path.reason and path.background == (kind != "synchronous")


def test_a_models_size_counts_its_weights_and_buffers():
    net = nn.Sequential(nn.Linear(1000, 1000), nn.BatchNorm1d(1000))   # 1,001,000 + 2,000 weights, 2,001 buffers
    assert model_mb(net) == pytest.approx((1_001_000 + 2_000 + 2_000) * 4 / 1e6 + 8 / 1e6)


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
