"""The two memory failures that fix themselves, their arithmetic and records: the smaller batch after an
out-of-GPU-memory error (train/batch_fit.py, rundir/batch_changes.py) and the larger request after SLURM's
OUT_OF_MEMORY (rundir/memory_raises.py), with sacct played by a stand-in program on PATH (no SLURM here)."""
import json
import os

import pytest

from airetrain.plan.overview import format_table
from airetrain.rundir import batch_changes, memory_raises
from airetrain.train.batch_fit import halved
from conftest import make_plan


@pytest.mark.parametrize("per_device,global_,world,expected", [
    (64, 128, 2, (32, 2)), (32, 128, 2, (16, 4)), (1, 128, 2, None),
    (24, 96, 4, (12, 2)),      # an even half
    (3, 9, 1, (1, 9)),         # no half of 3 divides a rank's 9: the largest divisor below it
    (10, 30, 3, (5, 2)),
])
def test_a_halved_batch_holds_the_global_batch(per_device, global_, world, expected):
    assert halved(per_device, global_, world) == expected
    if expected:
        assert expected[0] * expected[1] * world == global_


def test_changes_apply_in_order_and_a_change_recorded_by_two_ranks_counts_once(tmp_path):
    plan = make_plan({"processes": 2, "batch": {"global": 128, "per_device": 64}}, tmp_path)
    for rank in (0, 1, 1):   # both ranks ran out at the same step; one wrote twice
        batch_changes.record(plan.durable_dir, {"step": 5, "from_per_device": 64, "from_grad_accum": 1,
                                                "per_device": 32, "grad_accum": 2, "why": "x", "rank": rank})
    batch_changes.record(plan.durable_dir, {"step": 9, "from_per_device": 32, "from_grad_accum": 2,
                                            "per_device": 16, "grad_accum": 4, "why": "x", "rank": 0})
    assert [c["per_device"] for c in batch_changes.changes(plan.durable_dir)] == [32, 16]
    changed = batch_changes.with_changes(plan)
    assert (changed.batch.per_device, changed.batch.grad_accum, changed.batch.global_) == (16, 4, 128)
    assert plan.batch.per_device == 64   # the plan as written is left alone
    assert "t: trains with per_device 16 x accumulation 4: out of GPU memory at step 9" in format_table({"t": plan})


SACCT = """#!/bin/sh
# a stand-in sacct: the answer the test wrote, for any question
cat "$SACCT_ANSWER"
"""
SCONTROL = """#!/bin/sh
# a stand-in scontrol show job: the job has $JOB_MEMORY
echo "JobId=$4 MinMemoryNode=$JOB_MEMORY"
"""


@pytest.fixture
def sacct(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sacct", SACCT), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    answer = tmp_path / "answer"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SACCT_ANSWER", str(answer))
    monkeypatch.setenv("JOB_MEMORY", "")
    return answer


def took_lock(plan, *jobs):
    plan.durable_dir.mkdir(parents=True, exist_ok=True)
    with open(plan.durable_dir / "lock.log", "a") as f:
        for job in jobs:
            f.write(json.dumps({"slurm_job_id": job, "event": "took the lock"}) + "\n")


def test_out_of_memory_asks_for_twice_or_the_peak_and_is_kept_for_every_later_request(tmp_path, sacct):
    plan = make_plan({"processes": 2, "mem_gb_per_rank": 1}, tmp_path)
    site = plan_site(tmp_path)
    asked = plan.slurm.mem_mb
    took_lock(plan, "101")
    # as SLURM says it: the training step ran out, and the job failed after it
    sacct.write_text(f"101|FAILED|{asked}M|\n101.batch|FAILED||900M\n101.0|COMPLETED||1M\n"
                     f"101.1|OUT_OF_MEMORY||{3 * asked}M\n")
    assert memory_raises.request_mb(plan, site, 1) == asked   # a first attempt asks nothing of SLURM
    raised = memory_raises.request_mb(plan, site, 2)
    assert raised == -(-3 * asked * 1.25 // 1024) * 1024   # the peak (3x) x 1.25 beats twice, in whole GB
    sacct.write_text("")   # judged once: no second question, and the next pipeline's first attempt asks as much
    assert memory_raises.request_mb(plan, site, 2) == memory_raises.request_mb(plan, site, 1) == raised
    (line,) = memory_raises.judged(plan.durable_dir)
    assert "job 101 ran out of host memory" in memory_raises.described(line)
    assert f"t: asks for {raised / 1024:g}G a node, not 2G: job 101 ran out" in format_table({"t": plan})


def test_the_raises_stop_at_retry_oom_and_at_the_node(tmp_path, sacct, monkeypatch):
    plan = make_plan({"processes": 2, "mem_gb_per_rank": 1, "retry": {"oom": 0}}, tmp_path)
    site = plan_site(tmp_path)
    took_lock(plan, "201")
    sacct.write_text(f"201|OUT_OF_MEMORY|{plan.slurm.mem_mb}M|\n")
    assert memory_raises.request_mb(plan, site, 2) == plan.slurm.mem_mb
    (line,) = memory_raises.judged(plan.durable_dir)
    assert "not retried with more: retry.oom = 0" in memory_raises.described(line)
    # the job Snakemake submits again as it was is not trained; one given more memory, or more raises, is
    monkeypatch.setenv("JOB_MEMORY", "2G")
    assert "Job 202 has the same 2.0 GB, so it is not trained" in memory_raises.not_again(plan, "202")
    monkeypatch.setenv("JOB_MEMORY", "3G")
    assert memory_raises.not_again(plan, "203") is None
    monkeypatch.setenv("JOB_MEMORY", "2G")
    allowed = make_plan({"processes": 2, "mem_gb_per_rank": 1, "retry": {"oom": 1}}, tmp_path)
    assert memory_raises.not_again(allowed, "204") is None and memory_raises.not_again(plan, None) is None

    big = make_plan({"processes": 2, "mem_gb_per_rank": 100}, tmp_path / "big")
    took_lock(big, "301")
    sacct.write_text(f"301|OUT_OF_MEMORY|{big.slurm.mem_mb}M|{10 * big.slurm.mem_mb}M\n")
    assert memory_raises.request_mb(big, site, 2) == int(site.mem_gb_per_node * 1024)   # the node's, no more


def plan_site(tmp_path):
    from airetrain.plan.planner import plan_all

    return plan_all({"runs": {"x": {}}}, env={"HOME": "/nonexistent"}).settings.site


def test_out_of_memory_in_an_evaluation_is_not_a_batch_to_halve(tmp_path):
    """An evaluation's forward passes have their own size (evaluate.EVAL_BATCH): the run stops, recording
    nothing, where a training step's error would have halved the batch."""
    import torch

    from airetrain.train import batch_fit, evaluate

    def raised(filename):
        scope = {"torch": torch}
        exec(compile("def forward():\n    raise torch.OutOfMemoryError('CUDA out of memory')\n", filename, "exec"),
             scope)
        try:
            scope["forward"]()
        except torch.OutOfMemoryError as e:
            return e

    plan = make_plan({"processes": 2, "batch": {"global": 128, "per_device": 64}}, tmp_path)
    with pytest.raises(torch.OutOfMemoryError):
        batch_fit.fit_smaller(plan, 7, raised(evaluate.__file__))
    assert batch_changes.changes(plan.durable_dir) == []
    assert not batch_fit._in_evaluation(raised(str(tmp_path / "model.py")))
