"""When to stop early: the job's deadline, or SIGTERM (scancel, preemption, the time limit itself).

Every rank calls `Stopper.check()` after each optimizer step; one all_reduce(MAX) of a small flag
makes every rank agree, so all stop after the same step (README, "Checkpoints, time limits,
requeue"). Rank 0 learns the remaining time from `squeue -h -j $SLURM_JOB_ID -o %L` (so an
extended time limit counts), refreshed in a background thread; outside SLURM, from
$AIRETRAIN_END_TIME (Unix seconds) where a user or a test sets one.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

import torch
import torch.distributed as dist

from ..units import duration_s

log = logging.getLogger("airetrain.stopping")

NONE, DEADLINE, SIGNAL = 0, 1, 2
REASONS = {DEADLINE: "deadline", SIGNAL: "signal"}


def remaining_seconds(job_id: str) -> float | None:
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("squeue failed (%s): the deadline is not known this time", e)
        return None
    return duration_s(out.splitlines()[0]) if out.strip() else None


class Stopper:
    def __init__(self, is_main: bool, margin_s: float, refresh_s: float = 60.0, env=None):
        env = os.environ if env is None else env
        self.margin_s = margin_s
        self.end_time: float | None = None    # Unix time the job ends (rank 0)
        self.signalled = False
        signal.signal(signal.SIGTERM, self._on_signal)
        job_id = env.get("SLURM_JOB_ID")
        if is_main and job_id:
            self._refresh(job_id)
            threading.Thread(target=self._poll, args=(job_id, refresh_s), name="deadline", daemon=True).start()
        elif is_main and env.get("AIRETRAIN_END_TIME"):
            self.end_time = float(env["AIRETRAIN_END_TIME"])
        if self.end_time:
            log.info("stopping %.0f s before the job ends, in %.0f s", margin_s, self.end_time - time.time())

    def _on_signal(self, signum, frame) -> None:
        # only a flag: the step in progress finishes, then every rank checkpoints together
        self.signalled = True

    def _refresh(self, job_id: str) -> None:
        left = remaining_seconds(job_id)
        if left is not None:
            self.end_time = time.time() + left

    def _poll(self, job_id: str, every: float) -> None:
        while True:
            time.sleep(every)
            self._refresh(job_id)

    def check(self, device: torch.device) -> str | None:
        """A collective: None to go on, else why every rank stops now ("deadline" or "signal")."""
        flag = SIGNAL if self.signalled else NONE
        if not flag and self.end_time is not None and time.time() > self.end_time - self.margin_s:
            flag = DEADLINE
        tensor = torch.tensor([flag], dtype=torch.int32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return REASONS.get(int(tensor.item()))
