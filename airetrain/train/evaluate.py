"""Evaluation on the held-out split, spread over the ranks."""
from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, Subset

from . import distributed
from .step import autocast, loss_fn

EVAL_BATCH = 512


@torch.no_grad()
def evaluate(par, dataset, d: distributed.Dist, precision: str) -> tuple[float, float]:
    """(accuracy, mean loss) over the whole test set; each rank scores every world_size-th sample.

    Every rank runs the same number of forward passes (FSDP's all-gathers are collectives):
    a rank whose share is used up runs an empty batch.
    """
    par.model.eval()
    shard = Subset(dataset, range(d.rank, len(dataset), d.world_size))
    passes = math.ceil(math.ceil(len(dataset) / d.world_size) / EVAL_BATCH)
    batches = iter(DataLoader(shard, batch_size=EVAL_BATCH))
    x0, y0 = dataset[0]
    y0 = torch.as_tensor(y0)
    empty = (torch.empty(0, *x0.shape, dtype=x0.dtype), torch.empty(0, *y0.shape, dtype=torch.long))
    correct = total = loss_sum = 0.0
    for _ in range(passes):
        x, y = next(batches, empty)
        x, y = x.to(d.device), y.to(d.device)
        with autocast(d.device, precision, par.autocast_needed()):
            logits = par(x).float()
        if len(y):
            loss_sum += loss_fn(logits, y).item() * y.numel()
            correct += (logits.argmax(-1) == y).sum().item()
            total += y.numel()
    correct, total, loss_sum = distributed.reduce([correct, total, loss_sum])
    par.model.train()
    return correct / total, loss_sum / total
