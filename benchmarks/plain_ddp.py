"""The plain reference loop (pytorch/examples style): DDP, DistributedSampler, nothing else.

Run by benchmarks/trainer.py under torchrun; prints one JSON line with its samples/s.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from airetrain.run_config import Data
from airetrain.train.progress import warmup_steps
from airetrain.train.datasets import Synthetic
from airetrain.train.models import build_model


def main():
    cfg = json.loads(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    dataset = Synthetic(Data.with_defaults("data", cfg["data"]), "train")
    sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)
    loader = DataLoader(dataset, batch_size=cfg["per_device"], sampler=sampler, drop_last=True)
    model = DDP(build_model(cfg["model"], dataset.meta))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps = 0
    warmup = warmup_steps(cfg["epochs"] * len(loader))   # the steps airetrain's steady state leaves out
    start = time.perf_counter()
    steady_from = start if warmup == 0 else None
    for epoch in range(cfg["epochs"]):
        sampler.set_epoch(epoch)
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x).float(), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == warmup:
                steady_from = time.perf_counter()
    end = time.perf_counter()
    if rank == 0:
        batch = cfg["per_device"] * world
        print(json.dumps({"samples_per_s": steps * batch / (end - start), "steps": steps,
                          "steady_samples_per_s": (steps - warmup) * batch / (end - steady_from)
                          if steady_from is not None and steps > warmup else None}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
