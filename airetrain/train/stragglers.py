"""Stragglers: a rank that computes consistently slower than the others, named with its node.

Each rank times its own forward passes (the loss included): under DDP they involve no collective, so
they measure the rank's own compute, never the time it waits in the gradient all-reduce for a
slower rank (there every rank waits as long as the slowest). Under FSDP a forward pass gathers the
parameters, so a part of that wait is in it, and a straggler shows less. On a GPU the time is taken
with CUDA events, read at the log line, when the step's work has been drained.

At every log line (train.log_every_steps) the ranks' mean times per step over the interval are
gathered; a rank over health.straggler_ratio x the median, at health.straggler_intervals log lines in
a row, is named: `straggler: rank 4 on labgpu2, 1.4x the median step`, in the log, in metrics.jsonl
(which `airetrain status` reads) and in the run's health log. Every rank computes the same verdict
from the same gathered figures, so with health.exclude_stragglers every rank stops at the same
checkpoint, and the job requeues without the node.
"""
from __future__ import annotations

import logging
import socket
import statistics
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist

from ..rundir import run_log
from ..cluster import slurm
from ..rundir.run_log import straggler_text
from ..records import Plan
from .parallel.process_group import Dist

log = logging.getLogger("airetrain.train")


def slow_ranks(times: list[float], ratio: float) -> dict[int, float]:
    """{rank: its time / the median} of the ranks over ratio x the median time."""
    median = statistics.median(times)
    return {rank: t / median for rank, t in enumerate(times) if median > 0 and t > ratio * median}


class Streaks:
    """How many log lines in a row each rank has been slow, and by how much at the last."""

    def __init__(self, world: int, ratio: float, intervals: int):
        self.ratio, self.intervals = ratio, intervals
        self.slow_for = [0] * world
        self.ratios = [1.0] * world

    def add(self, times: list[float]) -> None:
        slow = slow_ranks(times, self.ratio)
        for rank in range(len(self.slow_for)):
            self.slow_for[rank] = self.slow_for[rank] + 1 if rank in slow else 0
            self.ratios[rank] = slow.get(rank, 1.0)

    def current(self, hosts: list[str]) -> list[dict]:
        """The ranks slow at `intervals` log lines in a row, now."""
        return [{"rank": rank, "host": hosts[rank], "ratio": round(self.ratios[rank], 2)}
                for rank, streak in enumerate(self.slow_for) if streak >= self.intervals]


class Stragglers:
    def __init__(self, d: Dist, plan: Plan):
        cfg = plan.config.health
        self.d, self.ratio, self.intervals, self.exclude = d, cfg.straggler_ratio, cfg.straggler_intervals, \
            cfg.exclude_stragglers
        self.durable_dir = plan.durable_dir
        self.hosts = [None] * d.world_size
        dist.all_gather_object(self.hosts, socket.gethostname())
        self._timed: list = []            # this interval's timings: seconds, or (start, end) CUDA events
        self._steps = 0                   # steps in this interval
        self.per_interval: list[list[float]] = []   # every interval's mean seconds per step, of every rank
        self.streaks = Streaks(d.world_size, self.ratio, self.intervals)
        self.named: dict[int, dict] = {}  # rank -> the straggler as first named (rank, host, ratio, step)
        self.leaving: set[str] = set()    # the nodes to requeue without (exclude_stragglers, where nodes are left)
        self.nodes, self.partition = plan.nodes, plan.slurm.partition

    @contextmanager
    def timer(self):
        """Around this rank's own compute (a forward pass and its loss)."""
        if self.d.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._timed.append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._timed.append(time.perf_counter() - t0)

    def step_done(self) -> None:
        self._steps += 1

    def _mine(self) -> float:
        seconds = 0.0
        for timed in self._timed:
            if isinstance(timed, tuple):
                timed[1].synchronize()
                seconds += timed[0].elapsed_time(timed[1]) / 1000
            else:
                seconds += timed
        mean = seconds / self._steps if self._steps else 0.0
        self._timed, self._steps = [], 0
        return mean

    def interval(self, step: int) -> None:
        """The log line's verdict. A collective: every rank calls it at every log line."""
        gathered = torch.tensor([0.0] * self.d.world_size, dtype=torch.float64, device=self.d.device)
        gathered[self.d.rank] = self._mine()
        dist.all_reduce(gathered)   # each rank filled its own place
        times = gathered.tolist()
        self.per_interval.append(times)
        self.streaks.add(times)
        new = [s for s in self.current() if s["rank"] not in self.named]
        for straggler in new:
            self.named[straggler["rank"]] = {**straggler, "step": step}
            if self.d.is_main:
                log.warning("%s (its compute time, %d log intervals in a row)", straggler_text(straggler),
                            self.intervals)
                run_log.record_health(self.durable_dir, slurm.job_id(), straggler["host"], "straggler",
                                      straggler_text(straggler), "named", step)
        if new and self.exclude:
            self._decide_leaving()

    def _decide_leaving(self) -> None:
        """Whether the job can leave the stragglers' nodes out: rank 0 asks SLURM whether enough nodes would
        be left, and every rank hears the same answer (the stop must come at the same step on all)."""
        hosts = sorted({s["host"] for s in self.current()})
        why_not = [None]
        if self.d.is_main:
            why_not = [self._why_not_leave(hosts)]
            log.warning("%s", f"the run stops at its next checkpoint and requeues without {', '.join(hosts)}"
                        if why_not[0] is None else f"{', '.join(hosts)} stays in the run: {why_not[0]}")
        dist.broadcast_object_list(why_not, src=0)
        if why_not[0] is None:
            self.leaving |= set(hosts)

    def _why_not_leave(self, hosts: list[str]) -> str | None:
        job = slurm.job_id()
        if not job:
            return "not in a SLURM job"
        left, partition = slurm.nodes_left(job, hosts, self.partition)
        if len(left) < self.nodes:
            return (f"partition {partition} would have {len(left)} node{'s' if len(left) != 1 else ''} left "
                    f"({', '.join(left) or 'none'}), and the run needs {self.nodes}")
        return None

    def current(self) -> list[dict]:
        return self.streaks.current(self.hosts)

    def line(self) -> dict:
        """What a metrics.jsonl line says of them (nothing while there are none)."""
        now = self.current()
        return {"stragglers": now} if now else {}

    @property
    def leave_out(self) -> dict[str, str]:
        """{node: why} to requeue without: exclude_stragglers is on, a straggler was named there, and SLURM
        has enough nodes besides."""
        return {s["host"]: straggler_text(s) for s in self.named.values() if s["host"] in self.leaving}

    def summary(self) -> dict:
        """train.json's figures: each rank's median time per step over the intervals, its host, and who was named."""
        medians = [round(statistics.median(column), 6) for column in zip(*self.per_interval)] \
            if self.per_interval else []
        return {"rank_step_s": medians, "rank_hosts": self.hosts, "stragglers": list(self.named.values())}
