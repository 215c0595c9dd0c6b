"""checkpoint/writer.py and the checkpointer's use of it: DDP checkpoints written by a process of their
own, at the lowest priority, fed through shared memory; a failed write reported to the trainer; the
writer gone with the trainer; a thread where shared memory is short."""
import multiprocessing
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from airetrain.checkpoint import background, store, writer
from airetrain.checkpoint.manager import Checkpointer
from airetrain.plan.planner import plan_all
from airetrain.records import Plan
from airetrain.train.parallel.process_group import Dist
from airetrain.train.parallel.wrap import Parallel

from conftest import spawn, wait_for

CPU = torch.device("cpu")


def checkpointer(tmp_path) -> tuple[Checkpointer, Plan]:
    config = {"roots": {"scratch": str(tmp_path / "scratch"), "tmp_shared": str(tmp_path / "fast")},
              "runs": {"w": {"processes": 1, "strategy": "ddp", "precision": "fp32",
                             "checkpoint": {"keep": 2, "every_steps": 1, "writer": "process"}}}}
    plan = plan_all(config, env={"HOME": "/nonexistent"})["w"]
    net = nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(net.parameters())
    net(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    return Checkpointer(Dist(0, 0, 1, CPU), Parallel(net, plan, CPU), optimizer, plan, tmp_path / "fast", False), plan


def trainer(step: int, plan: Plan) -> dict:
    return {"step": step, "epoch": 0, "step_in_epoch": step, "config": plan.config.to_dict(), "scheduler": {},
            "scaler": None}


def test_the_writer_process_writes_and_promotes_at_the_lowest_priority(process_group, tmp_path):
    ckpt, plan = checkpointer(tmp_path)
    pid = ckpt._writer._proc.pid
    assert pid != os.getpid()
    wait_for(lambda: os.getpriority(os.PRIO_PROCESS, pid) == 19, 60, "the writer at nice 19", every=0.1)
    ckpt.save(trainer(1, plan))
    first = {path: t.data_ptr() for path, t in ckpt._buffers.items()}
    for step in (2, 3):
        ckpt.save(trainer(step, plan))
    latest = ckpt.finish()
    assert ckpt._shared is True and latest["step"] == 3 and latest["mode"] == "linked"   # one filesystem
    assert latest["path"].startswith(str(tmp_path / "scratch")) and store.verify(latest["path"], latest)
    # the buffers it read are the training process's shared-memory copies, reused by each save
    assert all(t.is_shared() for t in ckpt._buffers.values()) and ("model", "weight") in ckpt._buffers
    assert {path: t.data_ptr() for path, t in ckpt._buffers.items()} == first
    assert ckpt._writer is None and not any(p.name == "airetrain-checkpoint-writer"
                                            for p in multiprocessing.active_children())
    assert [e["step"] for e in store.entries(tmp_path / "scratch/airetrain/w/checkpoints")] == [2, 3]   # keep: 2


def test_a_failed_write_is_reported_at_the_next_save(process_group, tmp_path):
    import shutil

    ckpt, plan = checkpointer(tmp_path)
    ckpt.save(trainer(1, plan))
    ckpt.wait()
    shutil.rmtree(ckpt.durable)
    ckpt.durable.write_text("a file where the durable directory was")   # the promotion cannot write there
    ckpt.save(trainer(2, plan))
    with pytest.raises(RuntimeError, match="saving a checkpoint failed: .*Error"):
        ckpt.save(trainer(3, plan))
    assert ckpt.latest["step"] == 1   # the last durable checkpoint stands


def test_the_writer_dies_with_the_trainer(tmp_path):
    script = ("import os, sys, time\nfrom airetrain.checkpoint.writer import Writer\n"
              "if __name__ == '__main__':\n    w = Writer()\n    print(w._proc.pid, flush=True)\n    time.sleep(600)\n")
    (tmp_path / "trainer.py").write_text(script)
    log = tmp_path / "trainer.log"
    proc = spawn([sys.executable, str(tmp_path / "trainer.py")], log, env={"PYTHONPATH": os.pathsep.join(sys.path)})
    wait_for(lambda: log.read_text().endswith("\n"), 60, "the trainer to name its writer", every=0.1)
    pid = int(log.read_text())
    wait_for(lambda: os.getpriority(os.PRIO_PROCESS, pid) == 19, 60, "the writer to be serving", every=0.1)
    proc.kill()   # SIGKILL: no exit handler of the trainer runs; the kernel's parent-death signal ends the writer
    proc.wait()

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[1].split()[0] == "Z"   # a zombie awaiting its reaper is gone
        except FileNotFoundError:
            return True
    wait_for(gone, 30, "the writer to end with the trainer", every=0.1)


def test_short_shared_memory_falls_back_to_a_thread(process_group, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(writer, "shm_free_bytes", lambda: 1000)
    ckpt, plan = checkpointer(tmp_path)
    ckpt.save(trainer(1, plan))
    assert ckpt._shared is False and ckpt._writer is None and ckpt._thread is not None
    assert ckpt.finish()["step"] == 1
    assert "checkpoints are written by a thread: /dev/shm has 0 MB free" in caplog.text
    assert ckpt.latest["verified"]


def with_writer(plan: Plan, writer_kind: str) -> Plan:
    return plan.replace(config=plan.config.replace(checkpoint=plan.config.checkpoint.replace(writer=writer_kind)))


def test_the_thread_writes_into_buffers_kept_from_save_to_save(process_group, tmp_path):
    ckpt, plan = checkpointer(tmp_path)
    ckpt._writer.close()
    plan = with_writer(plan, "thread")
    threaded = Checkpointer(Dist(0, 0, 1, CPU), ckpt.par, ckpt.optimizer, plan, tmp_path / "fast", False)
    assert threaded._writer is None and threaded.path.kind == "thread"
    threaded.save(trainer(1, plan))
    assert threaded._thread is not None
    first = {path: t.data_ptr() for path, t in threaded._buffers.items()}
    threaded.save(trainer(2, plan))   # into the same buffers: a state-sized allocation per save faults every page
    assert {path: t.data_ptr() for path, t in threaded._buffers.items()} == first and ("model", "weight") in first
    latest = threaded.finish()
    assert latest["step"] == 2 and store.verify(latest["path"], latest)["model"]["weight"].equal(
        ckpt.par.model.weight)


def test_auto_takes_a_thread_on_busy_cores_or_for_a_small_model_and_the_process_where_a_core_is_free(
        process_group, tmp_path, monkeypatch):
    ckpt, plan = checkpointer(tmp_path)
    ckpt._writer.close()
    plan = with_writer(plan, "auto")
    monkeypatch.setattr(background, "cores_here", lambda: plan.cpus_per_rank)   # one rank, its cores: all
    busy = Checkpointer(Dist(0, 0, 1, CPU), ckpt.par, ckpt.optimizer, plan, tmp_path / "fast", False)
    assert busy.path.kind == "thread" and "busy" in busy.path.reason and busy._writer is None
    busy.save(trainer(1, plan))
    assert busy._thread is not None and busy.finish()["step"] == 1
    monkeypatch.setattr(background, "cores_here", lambda: plan.cpus_per_rank + 1)   # a core to spare
    small = Checkpointer(Dist(0, 0, 1, CPU), ckpt.par, ckpt.optimizer, plan, tmp_path / "fast", False)
    assert small.path.kind == "thread" and small._writer is None   # a model of 0.017 MB
    assert "a thread writes its saves as cheaply" in small.path.reason
    monkeypatch.setattr(background, "SMALL_MODEL_MB", 0)   # the same model, as if it were a large one
    spare = Checkpointer(Dist(0, 0, 1, CPU), ckpt.par, ckpt.optimizer, plan, tmp_path / "fast", False)
    assert spare.path.kind == "process" and spare._writer is not None and "1 of" in spare.path.reason
    spare.finish()


def test_without_async_the_save_is_durable_before_it_returns_from_the_live_state(process_group, tmp_path):
    ckpt, plan = checkpointer(tmp_path)
    ckpt._writer.close()
    plan = plan.replace(config=plan.config.replace(checkpoint=plan.config.checkpoint.replace(async_=False)))
    sync = Checkpointer(Dist(0, 0, 1, CPU), ckpt.par, ckpt.optimizer, plan, tmp_path / "fast", False)
    assert sync.path.kind == "synchronous" and sync._writer is None
    sync.save(trainer(1, plan))
    # written, verified and durable before save returned, and no staging copy made
    assert sync._thread is None and not sync._buffers
    assert sync.latest["step"] == 1 and sync.latest["verified"] and Path(sync.latest["path"]).is_relative_to(
        plan.checkpoints_dir)
    assert sync.stalls[0] > 0 and sync.finish()["step"] == 1
