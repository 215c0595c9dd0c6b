"""The hang watchdog: when no rank finishes a step for train.hang_timeout_min, dump and restart.

A rank stuck in a collective (or in user code before one) blocks every other rank in the next
collective, so a hang shows as no rank advancing. Each rank counts its heartbeats (finished steps,
evaluation batches, saves) and a thread publishes them to torchrun's key-value store, which is a
TCP connection apart from gloo and NCCL and keeps working while they hang. Rank 0's thread decides;
when it declares a hang, every rank's thread:

1. writes its Python stacks, all threads, to <scratch>/airetrain/<run>/hangs/<UTC time>/rank<N>-stacks.txt
   (faulthandler: it walks the frames from another thread, the blocked main one included);
2. on NCCL, writes its flight recorder's record of the collectives next to them;
3. and exits with EXIT_HUNG, so that torchrun's --max-restarts restarts the group, which resumes
   from the newest checkpoint.

Rank 0 records the hang in stops.jsonl (the run record lists it) and in hang.json beside the
stacks. A second hang in the same launch is not restarted: every rank ends its torchrun agent, the
job fails and the launch names the dump. The collectives' own timeout is set above the watchdog's
(distributed.setup), so that the watchdog speaks first.
"""
from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from ..cluster import slurm
from ..records import Plan
from ..rundir.run_log import LAUNCH_ID, hangs, record_stop
from .parallel.process_group import Dist

log = logging.getLogger("airetrain.watchdog")

EXIT_HUNG = 124         # as timeout(1) exits
HANGS = "hangs"
DUMP_WAIT_S = 30        # how long rank 0 waits for every rank's stacks before it records the hang


def poll_seconds(timeout_s: float) -> float:
    """How often the thread looks: a few times per timeout, at most every 10 s."""
    return min(10.0, max(0.5, timeout_s / 6))


class Watchdog:
    """Every rank makes one (a collective: rank 0 names the session's keys), calls watch() once its
    session has started (a long restore is no hang), and beat() at each sign of progress."""

    def __init__(self, rank: int, world_size: int, timeout_s: float, run_dir: Path, job_id: str | None):
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.run_dir, self.job_id = Path(run_dir), job_id
        self.beats, self.step = 0, 0
        self._stopped = threading.Event()
        session = [f"{time.time_ns()}"] if rank == 0 else [None]
        dist.broadcast_object_list(session, src=0)   # keys of an earlier group (a restart) are not ours
        client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                               timeout=timedelta(seconds=60), wait_for_workers=False)
        self.store = dist.PrefixStore(f"airetrain-watchdog/{session[0]}/", client)
        self.store.set(f"beat/{rank}", "0")
        if os.environ.get("TORCH_FR_DUMP_TEMP_FILE"):   # NCCL's own dump on a collective timeout goes there
            Path(os.environ["TORCH_FR_DUMP_TEMP_FILE"]).parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)

    def watch(self) -> None:
        """Start watching: from here on, timeout_s without a beat on any rank is a hang."""
        self._thread.start()
        if self.rank == 0:
            log.info("hang watchdog: a hang is declared after %.0f s without a finished step on any rank",
                     self.timeout_s)

    def beat(self, step: int | None = None) -> None:
        """Progress on this rank: a finished step (with its number), an evaluation batch, a save."""
        self.beats += 1
        if step is not None:
            self.step = step

    def stop(self) -> None:
        self._stopped.set()

    # the thread ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        every, published, seen, since = poll_seconds(self.timeout_s), 0, None, time.monotonic()
        while not self._stopped.wait(every):
            try:
                if self.beats != published:
                    published = self.beats
                    self.store.set(f"beat/{self.rank}", str(published))
                if self.store.check(["hang"]):
                    self._respond(self.store.get("hang").decode())
                if self.rank != 0:
                    continue
                beats = self._all_beats()
                if beats != seen:
                    seen, since = beats, time.monotonic()
                elif time.monotonic() - since > self.timeout_s:
                    self.store.set("hang", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
            except Exception as e:   # the store went away: torchrun is tearing the group down
                if not self._stopped.is_set():
                    log.warning("hang watchdog on rank %d stops: %s", self.rank, e)
                return

    def _all_beats(self) -> tuple | None:
        keys = [f"beat/{r}" for r in range(self.world_size)]
        if not self.store.check(keys):
            return None   # a rank is still starting
        return tuple(self.store.get(k) for k in keys)

    def _respond(self, name: str) -> None:
        """Dump this rank's stacks (and NCCL's record), agree on restart or failure, exit."""
        folder = self.run_dir / HANGS / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / f"rank{self.rank}-stacks.txt", "w") as f:
                f.write(f"rank {self.rank} of {self.world_size} on {socket.gethostname()}, pid {os.getpid()}: "
                        f"last finished step {self.step}; no rank advanced for {self.timeout_s:.0f} s\n\n")
                f.flush()
                faulthandler.dump_traceback(f, all_threads=True)
            if dist.is_initialized() and dist.get_backend() == "nccl":
                self._dump_nccl(folder)
        except OSError as e:   # no dump (a full disk): the group is still stuck, so restart it anyway
            log.error("rank %d: could not write the hang's stacks to %s: %s", self.rank, folder, e)
        try:
            self.store.set(f"dumped/{self.rank}", "1")
            if self.rank == 0:
                self.store.set("action", self._record(folder))
            self.store.wait(["action"], timedelta(seconds=2 * DUMP_WAIT_S))
            action = self.store.get("action").decode()
        except Exception as e:   # rank 0 could not decide: exit all the same, and let torchrun restart
            log.error("rank %d: no decision from rank 0 about the hang (%s)", self.rank, e)
            action = "restart"
        if action == "fail":
            log.error("rank %d: the run hung again in this launch: not restarting; stacks in %s", self.rank,
                      folder)
            if os.environ.get("TORCHELASTIC_RUN_ID"):   # end torchrun itself, so that it does not restart us
                os.kill(os.getppid(), signal.SIGTERM)
        else:
            log.error("rank %d: hang (no step for %.0f s after step %d): stacks in %s; torchrun restarts the "
                      "group from the newest checkpoint", self.rank, self.timeout_s, self.step, folder)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_HUNG)

    def _dump_nccl(self, folder: Path) -> None:
        """NCCL's flight recorder: the last collectives each rank issued and which completed
        (TORCH_NCCL_TRACE_BUFFER_SIZE is set by the plan). Read it with torch's fr_trace tool."""
        try:
            from torch._C._distributed_c10d import _dump_fr_trace
            (folder / f"rank{self.rank}-nccl-flight-recorder.pkl").write_bytes(_dump_fr_trace())
        except Exception as e:   # a torch without it, or a recorder switched off
            log.warning("no NCCL flight recorder dump on rank %d: %s", self.rank, e)

    def _record(self, folder: Path) -> str:
        """Rank 0: wait for every rank's stacks, then record the hang; returns restart or fail."""
        deadline = time.monotonic() + DUMP_WAIT_S
        keys = [f"dumped/{r}" for r in range(self.world_size)]
        while not self.store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.2)
        dumped = [r for r in range(self.world_size) if self.store.check([f"dumped/{r}"])]
        launch = os.environ.get(LAUNCH_ID)
        earlier = hangs(self.run_dir, launch) if launch else []
        action = "fail" if earlier else "restart"
        details = {"launch": launch, "dump": str(folder), "timeout_s": self.timeout_s, "ranks_dumped": dumped}
        (folder / "hang.json").write_text(json.dumps({"step": self.step, "slurm_job_id": self.job_id,
                                                      "action": action, **details}, indent=1))
        record_stop(self.run_dir, {"reason": "hang", "step": self.step}, self.job_id,
                    "restart" if action == "restart" else "failed: second hang in this launch", details)
        return action


class Off:
    """The watchdog where train.hang_timeout_min is 0."""
    def watch(self) -> None:
        pass

    def beat(self, step: int | None = None) -> None:
        pass

    def stop(self) -> None:
        pass


def start(d: Dist, plan: Plan) -> Watchdog | Off:
    """A collective: every rank's watchdog for this run, or Off."""
    minutes = plan.config.train.hang_timeout_min
    if not minutes or d.world_size == 1 and not os.environ.get("MASTER_PORT"):
        return Off()
    return Watchdog(d.rank, d.world_size, 60 * minutes, plan.durable_dir, slurm.job_id())
