"""The deadline: when a session stops to resume later, at the job's end or on SIGTERM (scancel,
preemption, the time limit itself). Early stopping, which ends a trained run, is monitor.py's.

The trainer calls `Stopper.poll()` after each optimizer step. It makes every rank agree, so that
all stop after the same step (docs/checkpoints.md), without making the
host wait: the step's flag goes out in an asynchronous all_reduce(MAX) of a CPU tensor over gloo,
and the flag sent one step earlier, long since reduced, is read. The reaction comes one step
later than a blocking check's, and no step waits for the GPU to drain or for a network round
trip. `check()` is the blocking form, for scripts that ask at points of their own (airetrain.job).
Rank 0 learns the remaining time from `squeue -h -j $SLURM_JOB_ID -o %L` (so an
extended time limit counts), refreshed in a background thread; outside SLURM, from
$AIRETRAIN_END_TIME (Unix seconds) where a user or a test sets one.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

from ..cluster.slurm import remaining_seconds

log = logging.getLogger("airetrain.deadline")

NONE, DEADLINE, SIGNAL = 0, 1, 2
REASONS = {DEADLINE: "deadline", SIGNAL: "signal"}


class Stopper:
    def __init__(self, is_main: bool, margin_s: float, refresh_s: float = 60.0, env=None):
        env = os.environ if env is None else env
        self.margin_s = margin_s
        self._pending: tuple[dist.Work, torch.Tensor] | None = None   # poll's flag in flight
        self._group = None   # poll's flags travel over gloo, on CPU: with NCCL a group of their own
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

    def _flag(self) -> int:
        if self.signalled:
            return SIGNAL
        if self.end_time is not None and time.time() > self.end_time - self.margin_s:
            return DEADLINE
        return NONE

    def check(self, device: torch.device) -> str | None:
        """A blocking collective: None to go on, else why every rank stops now ("deadline" or "signal")."""
        tensor = torch.tensor([self._flag()], dtype=torch.int32, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return REASONS.get(int(tensor.item()))

    def poll(self) -> str | None:
        """A collective every rank calls after each step: why every rank stops now, as agreed from the
        flags of the previous call, or None to go on. It waits only for that earlier reduction, which
        finished while this step ran."""
        agreed = None
        if self._pending is not None:
            work, tensor = self._pending
            work.wait()
            agreed, self._pending = REASONS.get(int(tensor.item())), None
        if agreed is None:
            if self._group is None and dist.get_backend() != "gloo":
                self._group = dist.new_group(backend="gloo")   # every rank reaches here at its first step
            tensor = torch.tensor([self._flag()], dtype=torch.int32)
            self._pending = (dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._group, async_op=True), tensor)
        return agreed

    def close(self) -> None:
        """Complete the flag still in flight (every rank sent it at its last step)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None


class Agreement:
    """A script's check at every step (airetrain.job.should_stop, the Lightning and HF callbacks) for the
    price of a few all-reduces: the ranks agree on the stop flag every `every` calls, and between two
    agreements every call answers as the last one did. `every` is as many calls as fit in budget_s at
    the calls' own pace, the smallest any rank proposes (so every rank counts alike), starting at 1 and
    at most doubling from one agreement to the next (a slower phase, an evaluation, is met within two).
    A deadline or a signal seen on any rank is acted on within `every` calls, which budget_s, at most a
    tenth of the stop margin, bounds."""

    def __init__(self, stopper: Stopper, device: torch.device, budget_s: float | None = None, most: int = 1000):
        self.stopper, self.device, self.most = stopper, device, most
        self.budget_s = min(5.0, stopper.margin_s / 10) if budget_s is None else budget_s
        self.every, self.left = 1, 0
        self.reason: str | None = None
        self._agreed_at: float | None = None

    def stop(self) -> bool:
        """True once every rank has agreed to stop (and from then on)."""
        if self.reason is not None:
            return True
        self.left -= 1
        if self.left > 0:
            return False
        proposal = 1
        if self._agreed_at is not None:
            per_call = (time.monotonic() - self._agreed_at) / self.every
            fits = int(self.budget_s / per_call) if per_call > 0 else self.most
            proposal = max(1, min(fits, 2 * self.every, self.most))
        # one all-reduce carries both: MAX of the flags, and MAX of -proposal = the smallest proposal
        tensor = torch.tensor([self.stopper._flag(), -proposal], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        flag, negative = tensor.tolist()
        self.every = self.left = -negative
        self._agreed_at = time.monotonic()
        self.reason = REASONS.get(flag)
        return self.reason is not None
