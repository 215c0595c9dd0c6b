"""checkpoint/manager.py's pieces, in this process as rank 0 of a one-rank gloo group: the random state,
the CPU copy into kept buffers, the save policy applied, and resuming from the newest checkpoint that
verifies."""
import random

import numpy as np
import torch
from torch import nn

from airetrain.checkpoint import store
from airetrain.checkpoint.manager import Checkpointer, cpu_copy, rng_state, set_rng_state
from airetrain.schedule import Position
from airetrain.train.parallel.process_group import Dist
from airetrain.train.parallel.wrap import Parallel

from conftest import make_plan

CPU = torch.device("cpu")


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_the_random_state_of_python_numpy_and_torch_comes_back():
    state = rng_state(CPU)
    first = draws()
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(state, CPU)
    assert draws() == first
    assert isinstance(state["numpy"]["keys"], torch.Tensor)   # loadable with weights_only=True


def test_the_cpu_copy_goes_into_buffers_kept_from_save_to_save():
    buffers = {}
    tree = {"model": {"w": torch.ones(4)}, "optimizer": {"state": [torch.zeros(2)], "lr": 0.1}}
    copy = cpu_copy(tree, buffers)
    pointer = buffers[("model", "w")].data_ptr()
    tree["model"]["w"].add_(1)   # the training step moves on: the copy must not
    assert copy["model"]["w"].tolist() == [1.0] * 4 and copy["optimizer"]["lr"] == 0.1
    again = cpu_copy(tree, buffers)
    assert buffers[("model", "w")].data_ptr() == pointer and again["model"]["w"].tolist() == [2.0] * 4


def checkpointer(tmp_path, **checkpoint):
    plan = make_plan({"processes": 1, "strategy": "ddp", "precision": "fp32", "train": {"epochs": 2},
                      "checkpoint": {"writer": "thread", "keep": 2, **checkpoint}}, tmp_path)
    net = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(3, 8)).sum().backward()
    optimizer.step()   # an optimizer with state, as after a real step
    return Checkpointer(Dist(0, 0, 1, CPU), Parallel(net, plan, CPU), optimizer, plan, tmp_path / "fast", False), plan


def trainer(step: int, per_epoch: int, plan) -> dict:
    return {"step": step, "epoch": (step - 1) // per_epoch, "step_in_epoch": (step - 1) % per_epoch + 1,
            "config": plan.config.to_dict(), "scheduler": {}, "scaler": None}


def test_the_checkpointer_saves_where_the_policy_says_and_keeps_the_newest(process_group, tmp_path):
    ckpt, plan = checkpointer(tmp_path, every_steps=4)   # every 4 steps, and at each epoch end (5 steps)
    saved = []
    position = Position()
    for _ in range(10):
        position = position.stepped() if position.step_in_epoch < 5 else position.next_epoch().stepped()
        if ckpt.save_if_due(position, 5, lambda: trainer(position.step, 5, plan)):
            saved.append(position.step)
    latest = ckpt.finish()
    assert saved == [4, 5, 8, 10] and latest["step"] == 10 and latest["verified"]
    assert [e["step"] for e in store.entries(plan.checkpoints_dir)] == [8, 10]   # keep: 2


def test_restore_takes_the_newest_checkpoint_that_verifies_and_its_weights(process_group, tmp_path):
    ckpt, plan = checkpointer(tmp_path)
    weights = {}
    for step in (1, 2):
        with torch.no_grad():
            ckpt.par.model.weight.fill_(float(step))
        weights[step] = ckpt.par.model.weight.clone()
        ckpt.save(trainer(step, 5, plan), blocking=True)
    ckpt.finish()
    newest = plan.checkpoints_dir / store.file_name(2)
    data = bytearray(newest.read_bytes())   # one byte of the newest changes on scratch; the fast root is gone
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    for path in (tmp_path / "fast").rglob("step-*"):
        path.unlink()
    fresh, _ = checkpointer(tmp_path)
    with torch.no_grad():
        fresh.par.model.weight.zero_()
    resumed = fresh.restore()
    assert resumed["step"] == 1 and torch.equal(fresh.par.model.weight, weights[1])
    assert Position.resumed(resumed, 5) == Position(1, 0, 1)
