"""Evaluation on the held-out split, spread over the ranks: the loss, and each metric."""
from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, Subset

from . import batches
from .parallel import process_group as distributed
from .step import autocast

EVAL_BATCH = 512


@torch.no_grad()
def evaluate(par, objective, dataset, d: distributed.Dist, precision: str, on_batch=lambda: None) -> dict:
    """{"loss": mean over the test set, "metrics": {name: sum / count}}; None without a test set.
    on_batch is called after every forward pass (the hang watchdog's heartbeat).

    Each rank scores every world_size-th sample. Every rank runs the same number of forward passes
    (FSDP's all-gathers are collectives): a rank whose share is used up runs an empty batch.
    """
    if dataset is None or len(dataset) == 0:
        return None
    par.model.eval()
    shard = Subset(dataset, range(d.rank, len(dataset), d.world_size))
    passes = math.ceil(math.ceil(len(dataset) / d.world_size) / EVAL_BATCH)
    loader = iter(DataLoader(shard, batch_size=EVAL_BATCH))
    empty = batches.first_rows(next(iter(DataLoader(dataset, batch_size=1))), 0)
    loss_sum = samples = 0.0
    sums: dict[str, list[float]] = {}
    for _ in range(passes):
        batch = batches.to_device(next(loader, empty), d.device)
        with autocast(d.device, precision, par.autocast_needed()):
            output = objective.forward(par.wrapped, batch)
            n = batches.size(batch)
            if n:
                loss_sum += objective.loss(output, batch).item() * n
                samples += n
                for name, (value, count) in objective.metrics(output, batch).items():
                    total = sums.setdefault(name, [0.0, 0.0])
                    total[0] += value
                    total[1] += count
        on_batch()
    names = _agreed_names(sorted(sums), d)   # every rank reduces the same list
    reduced = distributed.reduce([loss_sum, samples, *(v for n in names for v in sums.get(n, [0.0, 0.0]))])
    par.model.train()
    loss_sum, samples, rest = reduced[0], reduced[1], reduced[2:]
    return {"loss": loss_sum / samples,
            "metrics": {n: rest[2 * i] / rest[2 * i + 1] for i, n in enumerate(names) if rest[2 * i + 1]}}


def _agreed_names(names: list[str], d: distributed.Dist) -> list[str]:
    """The metric names of rank 0, which always has samples, known to every rank (a collective)."""
    if d.world_size == 1:
        return names
    shared = [names]
    torch.distributed.broadcast_object_list(shared, src=0)
    return shared[0]
