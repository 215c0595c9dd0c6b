"""Users' own torchrun scripts, as they write them to the usual DDP checklist, for script mode's tests.

    with_job.py    deadline-aware checkpoints through airetrain.job (load_latest, save, should_stop,
                   stop_and_requeue); rank 0 writes metrics.jsonl and, at the end, final.pt
    plain.py       knows nothing of airetrain: torch.save into $AIRETRAIN_CHECKPOINT_DIR
"""
COMMON = '''
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return sampler, DataLoader(data, batch_size=16, sampler=sampler), model, optimizer


steps = int(sys.argv[sys.argv.index("--steps") + 1])
pause = float(sys.argv[sys.argv.index("--step-seconds") + 1]) if "--step-seconds" in sys.argv else 0.0   # slow
hold = os.environ.get("HOLD")   # the pause lasts while this file exists (where it is set)
results = os.environ["AIRETRAIN_RESULTS_DIR"]
'''

WITH_JOB = COMMON + '''
from airetrain import job

sampler, loader, model, opt = setup()
rank, step = dist.get_rank(), 0
state = job.load_latest()
if state:
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    step = state["step"]
    print(f"resumed from step {step}", flush=True)
metrics = open(os.path.join(results, "metrics.jsonl"), "a") if rank == 0 else None
epoch = step // len(loader)
while step < steps:
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        if epoch * len(loader) + i < step:   # done before the resume
            continue
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if not hold or os.path.exists(hold):
            time.sleep(pause)
        if metrics:
            metrics.write(json.dumps({"step": step, "loss": loss.item(), "samples_per_s": 32.0}) + "\\n")
            metrics.flush()
        stop = job.should_stop()
        if step % 4 == 0 or step == steps or stop:
            job.save({"model": model.module.state_dict(), "optim": opt.state_dict(), "step": step}, step)
        if stop:
            job.stop_and_requeue(step, steps)
        if step == steps:
            break
    epoch += 1
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(results, "final.pt"))
dist.barrier()
os._exit(0)
'''

PLAIN = COMMON + '''
sampler, loader, model, opt = setup()
ckpt = os.environ["AIRETRAIN_CHECKPOINT_DIR"]
for epoch in range(steps // len(loader)):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "epoch": epoch}, os.path.join(ckpt, f"epoch{epoch}.pt"))
dist.barrier()
os._exit(0)
'''

# What most scripts save and restore: their argparse arguments and every random state (numpy's and
# Python's among them), which torch.load(weights_only=True) refuses. Each step draws from all three, so
# only a resume that restores them all ends with an uninterrupted run's weights. A checkpoint at each
# epoch's end (8 steps of 2 ranks x 16), the metrics through job.log (and so to the run's trackers).
SAVES_EVERYTHING = '''
import argparse
import os
import random
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from airetrain import job

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(job.seed())
np.random.seed(job.seed())
random.seed(job.seed())
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 4, generator=g)
data = TensorDataset(x, x.sum(1, keepdim=True))
sampler = DistributedSampler(data, shuffle=True, seed=job.seed())
loader = DataLoader(data, batch_size=16, sampler=sampler)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
epoch = step = 0
state = job.load_latest()
if state:
    assert state["args"].epochs == args.epochs
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    epoch, step = state["epoch"], state["step"]
    np.random.set_state(state["numpy_rng"])
    random.setstate(state["python_rng"])
    torch.set_rng_state(state["torch_rng"])
    print(f"resumed from step {step}", flush=True)
hold = os.environ.get("HOLD")   # while this file exists, a step takes half a second
while epoch < args.epochs:
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        noise = float(np.random.rand()) * random.random() * 1e-2 + torch.rand(1) * 1e-2
        loss = nn.functional.mse_loss(model(xb + noise), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        job.log({"step": step, "epoch": epoch, "loss": loss.item()})
        if hold and os.path.exists(hold):
            time.sleep(0.5)
    epoch += 1
    with torch.no_grad():
        eval_loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).item()
    job.log({"step": step, "epoch": epoch, "eval_loss": eval_loss})
    job.save({"model": model.module.state_dict(), "optim": opt.state_dict(), "epoch": epoch, "step": step, "args": args,
              "numpy_rng": np.random.get_state(), "python_rng": random.getstate(), "torch_rng": torch.get_rng_state()},
             step)
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), os.path.join(os.environ["AIRETRAIN_RESULTS_DIR"], "final.pt"))
dist.barrier()
os._exit(0)
'''
