"""The links between the ranks, measured once they have connected: a short all-reduce over the run's own
backend (NCCL on GPUs, gloo on CPUs), timed as nccl-tests time it, and compared with the site's floor.

The figure is the bus bandwidth, nccl-tests' busbw: the bytes each rank sends and receives in a ring
all-reduce, 2 (n - 1) / n times the buffer, per second. It does not depend on the number of ranks, so
one floor serves every size of run. It names no node: a slow link is the job's.
"""
from __future__ import annotations

import logging
import time

import torch
import torch.distributed as dist

from .parallel.process_group import Dist

log = logging.getLogger("airetrain.train")

BUFFER_MB = {"cuda": 64, "cpu": 16}   # large enough to measure bandwidth, not latency; a second or less
REPEATS = 5


def allreduce_bandwidth(d: Dist, floor_gbps: float | None) -> dict | None:
    """{allreduce_gbps, allreduce_mb, allreduce_s, allreduce_floor_gbps, allreduce_below_floor}, the same on
    every rank; None for a world of one (no link to measure). A collective: every rank calls it."""
    if d.world_size < 2:
        return None
    mb = BUFFER_MB[d.device.type]
    buffer = torch.ones(mb * 2 ** 20 // 4, dtype=torch.float32, device=d.device)
    dist.all_reduce(buffer)   # the first one sets up the connections: not timed
    _drain(d)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(REPEATS):
        dist.all_reduce(buffer)
    _drain(d)
    seconds = torch.tensor([(time.perf_counter() - t0) / REPEATS], dtype=torch.float64,
                           device=d.device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)   # the slowest rank's time is the collective's
    per_op = float(seconds.item())
    gbps = buffer.numel() * 4 * 2 * (d.world_size - 1) / d.world_size / per_op / 1e9
    below = floor_gbps is not None and gbps < floor_gbps
    if d.is_main:
        floor = f" (the floor is {floor_gbps:g} GB/s)" if floor_gbps is not None else ""
        (log.warning if below else log.info)("links: all-reduce of %d MB over %d ranks: %.2f GB/s bus bandwidth%s%s",
                                             mb, d.world_size, gbps, floor, ": BELOW IT, the links are slow"
                                             if below else "")
    return {"allreduce_gbps": round(gbps, 3), "allreduce_mb": mb, "allreduce_s": round(per_op, 6),
            "allreduce_floor_gbps": floor_gbps, "allreduce_below_floor": below}


def _drain(d: Dist) -> None:
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
