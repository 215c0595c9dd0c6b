"""train.profile: a window of steps recorded with torch.profiler, on the ranks named and nowhere else, and
where those steps' time went.

    profiler = StepProfiler.of(plan, rank, device, out)   # NotProfiled where this rank records nothing
    profiler.before(step); ...; profiler.after(step, wait_s)

The profiler starts before the window's first step and stops after its last: the steps outside run as
they would without it. Each profiled rank writes its trace, results/<run>/profile/<host>_rank<r>.pt.trace.json
(Chrome's trace format: Perfetto and TensorBoard's profiler view open it), and on CUDA with memory: true
a memory snapshot (rank<r>.memory.pickle, for PyTorch's memory viewer). The first profiled rank writes
profile.md: the top operators, the communication against the compute and how much of it was hidden
behind the compute, the data loader's wait, and a sentence saying which of them bounds the step.
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..records import Plan
from ..text import markdown_table

log = logging.getLogger("airetrain.profile")

FOLDER = "profile"
# a collective's work: gloo's runs on its own threads, NCCL's in kernels on the GPU (the CPU-side records of
# either, c10d::allreduce_ and nccl:all_reduce, only enqueue it)
COLLECTIVE = re.compile(r"^gloo:|nccl(Dev)?Kernel", re.IGNORECASE)
TOP_OPERATORS = 10
DATA_BOUND, COMM_BOUND = 0.2, 0.25   # the shares of a step above which the data or exposed communication bound it


@dataclass
class Window:
    """What the window measured, on one rank."""
    steps: int
    wall_s: float              # the window's steps, end to end
    wait_s: float              # of it, waiting for the data loader
    comm_s: float              # collectives at work (their union)
    overlapped_s: float        # of it, while compute ran
    operators: list[tuple[str, float, int]]   # (name, self seconds, calls), the most first

    def bound(self) -> str:
        """The sentence: what bounds the step."""
        data, exposed = self.wait_s / self.wall_s, (self.comm_s - self.overlapped_s) / self.wall_s
        if data >= DATA_BOUND:
            return (f"The data loader bounds the step: {data:.0%} of it waits for a batch (more data.workers, "
                    "a fast root, or shards would shorten it).")
        if exposed >= COMM_BOUND:
            return (f"Communication bounds the step: {exposed:.0%} of it waits for collectives that the compute "
                    f"does not hide ({self.overlapped_s / self.comm_s:.0%} of their time is overlapped).")
        top = self.operators[0] if self.operators else ("nothing", 0.0, 0)
        return (f"Compute bounds the step: the data wait is {data:.0%} and the exposed communication {exposed:.0%} "
                f"of it; {top[0]} alone takes {top[1] / self.wall_s:.0%}.")


class StepProfiler:
    def __init__(self, start_step: int, steps: int, memory: bool, rank: int, first: bool, device: torch.device,
                 folder: Path):
        self.start_step, self.last_step, self.memory = start_step, start_step + steps - 1, memory
        self.rank, self.first, self.device, self.folder = rank, first, device, folder
        self._profile = None
        self._t0 = 0.0
        self._wait_s, self._steps = 0.0, 0
        self._summary: threading.Thread | None = None

    @classmethod
    def of(cls, plan: Plan, rank: int, device: torch.device, out: Path) -> StepProfiler | NotProfiled:
        cfg = plan.config.train.profile
        if cfg is None or rank not in cfg.ranks:
            return NotProfiled()
        return cls(cfg.start_step, cfg.steps, cfg.memory and device.type == "cuda", rank, rank == min(cfg.ranks),
                   device, out / FOLDER)

    def before(self, step: int) -> None:
        """Before optimizer step `step` (1-based) runs. The profiler starts a step early where it can: that
        step warms it up (torch.profiler's warm-up), and is not recorded."""
        if step == self.start_step:
            if self._profile is None:
                self._start(warmup=0)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._t0 = time.perf_counter()
        elif step == self.start_step - 1:
            self._start(warmup=1)

    def _start(self, warmup: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            if self.memory:
                torch.cuda.memory._record_memory_history(max_entries=100_000)
        steps = self.last_step - self.start_step + 1
        # the schedule numbers the steps (ProfilerStep#N), which TensorBoard's view splits the trace by
        self._profile = torch.profiler.profile(activities=activities, record_shapes=False,
                                               schedule=torch.profiler.schedule(wait=0, warmup=warmup, active=steps))
        self._profile.__enter__()

    def after(self, step: int, wait_s: float) -> None:
        """After optimizer step `step`, which waited wait_s for its data."""
        if self._profile is None:
            return
        if step >= self.start_step:
            self._wait_s += wait_s
            self._steps += 1
        if step >= self.last_step:
            self._finish()
        else:
            self._profile.step()

    def close(self) -> None:
        """At the training's end: the summary written; a window the training ended inside is written all
        the same."""
        if self._profile is not None and self._steps:
            self._finish()
        elif self._profile is not None:   # ended in the warm-up step: nothing recorded
            self._profile.__exit__(None, None, None)
            self._profile = None
        if self._summary is not None:
            self._summary.join()

    def _finish(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        wall_s = time.perf_counter() - self._t0
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        self.folder.mkdir(parents=True, exist_ok=True)
        trace = self.folder / f"{socket.gethostname()}_rank{self.rank}.pt.trace.json"
        profile.export_chrome_trace(str(trace))
        if self.memory:
            torch.cuda.memory._dump_snapshot(str(self.folder / f"rank{self.rank}.memory.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
        # reading the profiler's events back takes a tenth of a second or more: beside the training, not in it
        self._summary = threading.Thread(target=self._summarise, args=(profile, trace, wall_s, self._steps,
                                                                      self._wait_s), name="airetrain-profile")
        self._summary.start()

    def _summarise(self, profile, trace: Path, wall_s: float, steps: int, wait_s: float) -> None:
        window = measure(profile, steps, wall_s, wait_s, self.device)
        if self.first:
            (self.folder / "profile.md").write_text(render(window, self.start_step, self.rank, trace.name))
        log.info("profiled steps %d-%d on rank %d: %s", self.start_step, self.start_step + steps - 1, self.rank,
                 trace)


class NotProfiled:
    """A rank that records nothing."""

    def before(self, step: int) -> None:
        pass

    def after(self, step: int, wait_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def measure(profile, steps: int, wall_s: float, wait_s: float, device: torch.device) -> Window:
    """The window's figures from the profiler's own events."""
    events = profile.events()
    on_gpu = device.type == "cuda"
    comm, compute = [], []
    for e in events:
        span = (e.time_range.start, e.time_range.end)
        if COLLECTIVE.search(e.name):
            comm.append(span)
        elif on_gpu and e.device_type == torch.autograd.DeviceType.CUDA:
            compute.append(span)   # a kernel
        elif not on_gpu and e.name.startswith("aten::") and not _has_aten_parent(e):
            compute.append(span)   # a top-level operator on the CPU
    comm_u, compute_u = _union(comm), _union(compute)
    averages = profile.key_averages()
    self_us = (lambda a: a.self_device_time_total) if on_gpu else (lambda a: a.self_cpu_time_total)
    operators = sorted(((a.key, self_us(a) / 1e6, a.count) for a in averages
                        if not a.key.startswith("ProfilerStep") and self_us(a) > 0), key=lambda o: -o[1])
    return Window(steps, wall_s, wait_s, _length(comm_u) / 1e6, _length(_intersection(comm_u, compute_u)) / 1e6,
                  operators[:TOP_OPERATORS])


def _has_aten_parent(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Two unions' common time."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


def render(w: Window, start_step: int, rank: int, trace: str) -> str:
    per_step = w.wall_s / w.steps
    rows = [[name, f"{1000 * s / w.steps:.2f}", f"{s / w.wall_s:.1%}", str(calls // w.steps or calls)]
            for name, s, calls in w.operators]
    figures = [["a step, end to end", f"{1000 * per_step:.1f}", "100%"],
               ["waiting for the data loader", f"{1000 * w.wait_s / w.steps:.1f}", f"{w.wait_s / w.wall_s:.1%}"],
               ["collectives at work", f"{1000 * w.comm_s / w.steps:.1f}", f"{w.comm_s / w.wall_s:.1%}"],
               ["of them, hidden behind compute", f"{1000 * w.overlapped_s / w.steps:.1f}",
                f"{w.overlapped_s / w.wall_s:.1%}"],
               ["of them, exposed", f"{1000 * (w.comm_s - w.overlapped_s) / w.steps:.1f}",
                f"{(w.comm_s - w.overlapped_s) / w.wall_s:.1%}"]]
    return "\n".join([
        f"# Where a step's time goes: steps {start_step}-{start_step + w.steps - 1}, rank {rank}",
        "", w.bound(), "",
        *markdown_table(["", "ms a step", "share"], figures), "",
        "## The top operators, by their own time", "",
        *markdown_table(["operator", "ms a step", "share of a step", "calls a step"], rows), "",
        f"The trace: `{trace}` (Perfetto: ui.perfetto.dev; TensorBoard: `tensorboard --logdir` this folder, "
        "with torch-tb-profiler).", ""])
