"""Rank 0's sending thread: each log line's figures are queued and sent to every tracker from a thread
of their own, as the checkpoint writer saves, so that a tracker's call never holds a training step.

A resumed session first sends what the trackers lack of the earlier sessions' figures (metrics.jsonl
holds every line): a line a tracker had not yet written when its session was killed (W&B's offline
file is flushed every few seconds, MLflow's queue may hold lines) would otherwise be a gap.

A tracker that fails (a server that does not answer, a full disk, an exception in its library) is
warned about once; its figures are then counted as lost while it cools down, and tried again after.
Training never waits on it: a full queue counts the line as lost rather than blocking.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .names import tag

if TYPE_CHECKING:
    from .identity import Identity
    from .opening import Opening

log = logging.getLogger("airetrain.train")

CAPACITY = 10_000      # queued log lines: at one a second, hours of a tracker that does not answer
COOL_DOWN_S = 30.0     # after a failure, a tracker's figures are counted lost this long before it is tried again
_STOP = object()


class Sink(Protocol):
    """A tracker (registry.TRACKERS holds each): made from its config, the run's identity (its tracker run's ids,
    kept on scratch), the durable directory, the opening and the job type; open (the tracker run started or
    continued; what it already holds: {name: last step}), log one line's figures at a step, end (the promote
    step: the run's summary, the weights' paths, the job ids, the files to upload), close. The class also
    says what the plan and the results table ask of it."""
    name: str                    # its key under tracking:
    package: str                 # what it imports; pip install 'airetrain[<name>]' installs it
    identity: Identity

    def __init__(self, cfg, identity: Identity, durable_dir: Path, opening: Opening, job_type: str = "train"): ...

    @classmethod
    def preload(cls) -> None:
        """Import its package (and start its service), in a thread while the trainer sets up."""

    @staticmethod
    def label(record: dict) -> str | None:
        """Its tracker run in a few words (the results table), from train.json's record of it."""

    @staticmethod
    def checks(where: str, cfg, site) -> tuple[list[str], list[str]]:
        """(problems that refuse the run, warnings) of its settings, at plan time."""

    @staticmethod
    def across_runs(runs: dict) -> list[str]:
        """Warnings about several runs together ({run: its RunConfig}), at plan time."""

    def open(self) -> dict[str, int]: ...

    def log(self, step: int, figures: dict[str, float]) -> None: ...

    def end(self, summary: dict, params: dict, job_ids: list[str], artifacts: list[Path]) -> None: ...

    def close(self) -> None: ...


def _points(figures: dict) -> dict[str, float]:
    """The figures a tracker takes, under their names: numbers only."""
    return {name: float(v) for k, v in figures.items()
            if (name := tag(k)) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def short_error(error: BaseException) -> str:
    """A tracker's failure in one line, for the log and train.json."""
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"


class Sender:
    """log(step, figures) as TensorBoard's curves take it; close() returns, per tracker, the figures
    logged, skipped (the tracker held them already: a resumed session's repeat) and lost, and the
    first error."""

    def __init__(self, sinks: list[Sink], capacity: int = CAPACITY, backlog: list[tuple[int, dict]] = ()):
        """backlog: figures of earlier sessions (step, figures), sent first where a tracker lacks them."""
        self.sinks, self.backlog = sinks, [(step, points) for step, f in backlog if (points := _points(f))]
        self.counts = {s.name: {"logged": 0, "skipped": 0, "lost": 0, "error": None} for s in sinks}
        self.held: dict[str, dict[str, int]] = {s.name: {} for s in sinks}
        self._failed_at: dict[str, float | None] = {s.name: None for s in sinks}
        self._open: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.queue: queue.Queue = queue.Queue(capacity)
        self.thread = threading.Thread(target=self._run, name="airetrain-tracking", daemon=True)
        self.thread.start()

    def log(self, step: int, figures: dict) -> None:
        points = _points(figures)
        if not points:
            return
        try:
            self.queue.put_nowait((step, points))
        except queue.Full:
            self._lose(points)

    def close(self, timeout_s: float = 60.0) -> dict:
        """Send what is queued (for at most timeout_s), close every tracker, and the counts."""
        try:
            self.queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass
        self.thread.join(timeout_s)
        while True:   # what the thread could not send in time
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                self._lose(item[1])
        with self._lock:
            return {name: dict(c) for name, c in self.counts.items()}

    def _lose(self, points: dict) -> None:
        with self._lock:
            for c in self.counts.values():
                c["lost"] += len(points)

    def _fail(self, sink: Sink, error: BaseException, lost: int) -> None:
        with self._lock:
            c = self.counts[sink.name]
            c["lost"] += lost
            if c["error"] is None:
                c["error"] = short_error(error)
                log.warning("tracking: %s failed (%s); training goes on, and train.json counts what it did not log",
                            sink.name, c["error"])
        self._failed_at[sink.name] = time.monotonic()

    def _run(self) -> None:
        for sink in self.sinks:
            try:
                self.held[sink.name] = dict(sink.open())
                self._open[sink.name] = True
            except Exception as error:   # a tracker's failure never reaches training
                self._fail(sink, error, 0)
        for item in self.backlog:
            for sink in self.sinks:
                self._send(sink, *item)
        while (item := self.queue.get()) is not _STOP:
            for sink in self.sinks:
                self._send(sink, *item)
        for sink in self.sinks:
            if self._open.get(sink.name):
                try:
                    sink.close()
                except Exception as error:
                    self._fail(sink, error, 0)

    def _send(self, sink: Sink, step: int, points: dict) -> None:
        held = self.held[sink.name]
        fresh = {k: v for k, v in points.items() if step > held.get(k, held.get("*", -1))}
        with self._lock:
            self.counts[sink.name]["skipped"] += len(points) - len(fresh)
        if not fresh:
            return
        failed = self._failed_at[sink.name]
        if not self._open.get(sink.name) or (failed is not None and time.monotonic() - failed < COOL_DOWN_S):
            with self._lock:
                self.counts[sink.name]["lost"] += len(fresh)
            return
        try:
            sink.log(step, fresh)
        except Exception as error:
            self._fail(sink, error, len(fresh))
            return
        held.update(dict.fromkeys(fresh, step))
        with self._lock:
            self.counts[sink.name]["logged"] += len(fresh)
