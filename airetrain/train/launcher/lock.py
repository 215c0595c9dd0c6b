"""One trainer per run: a lock in the durable run directory names who trains the run.

If the Snakemake that submitted a run dies (an SSH connection drops), its jobs go on; a second
`snakemake` submits every unfinished run again. Without a lock two jobs would train the same run
into the same checkpoint directory at once. With it, the second launch sees the first's SLURM job
(or host and pid) in <scratch>/airetrain/<run>/trainer.lock, and while that is alive (squeue lists
the job; the pid runs an airetrain launch) it waits. When the first ends, the second takes the lock
and the trainer resumes from the newest checkpoint (or finds the run finished). A lock whose owner
is gone is taken over, with a message. Every event goes to lock.log beside it.

The lock is a file created with O_EXCL, which is atomic on local disks, NFS and Lustre; a stale one
is first renamed away, so that of two launches that find it stale only one takes it over.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ...rundir.run_log import LOCK, LOCK_LOG as LOG
from ...cluster.slurm import job_alive

POLL_S = 10.0


def owner_text(owner: dict) -> str:
    if owner.get("slurm_job_id"):
        return f"SLURM job {owner['slurm_job_id']}"
    return f"pid {owner['pid']} on {owner['host']}"


def _pid_alive(pid: int) -> bool:
    """The pid runs, and runs an airetrain launch (not a later process that was given the same pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return b"airetrain" in cmdline


class RunLock:
    def __init__(self, run_dir: str | Path, job_id: str | None, say=None, poll_s: float = POLL_S):
        self.dir, self.poll_s = Path(run_dir), poll_s
        self.polls = 0   # how often acquire found the lock held by a live trainer
        self.say = say or (lambda message: print(message, flush=True))
        self.path = self.dir / LOCK
        self.me = {"slurm_job_id": job_id, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}

    def _log(self, event: str) -> None:
        with open(self.dir / LOG, "a") as f:
            f.write(json.dumps({"time": time.time(), **{k: self.me[k] for k in ("slurm_job_id", "host", "pid")},
                                "event": event}) + "\n")

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:   # being written this instant: read it again
            time.sleep(0.5)
            try:
                return json.loads(self.path.read_text())
            except (OSError, ValueError):
                return {"slurm_job_id": None, "host": "?", "pid": -1, "since": 0}   # unreadable: stale

    def _mine(self, owner: dict) -> bool:
        """This launch, or this same SLURM job run again (requeued): its lock is its own."""
        if self.me["slurm_job_id"]:
            return owner.get("slurm_job_id") == self.me["slurm_job_id"]
        return owner.get("host") == self.me["host"] and owner.get("pid") == self.me["pid"]

    def _alive(self, owner: dict) -> bool:
        if owner.get("slurm_job_id"):
            alive = job_alive(owner["slurm_job_id"])
            if alive is None:
                self.say(f"cannot ask SLURM about job {owner['slurm_job_id']} (no squeue here): taking it as gone")
            return bool(alive)
        if owner.get("host") == self.me["host"]:
            return _pid_alive(int(owner["pid"]))
        self.say(f"the lock's owner, pid {owner['pid']} on {owner['host']}, cannot be checked from here: waiting; "
                 f"remove {self.path} if that process is gone")
        return True

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(self.me))
            f.flush()
            os.fsync(f.fileno())
        return True

    def acquire(self) -> None:
        """Take the lock, waiting while another live trainer holds it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        waited_for = None
        while not self._create():
            owner = self._read()
            if owner is None:
                continue   # released between our two looks
            if self._mine(owner):
                self.path.write_text(json.dumps(self.me))
                self._log(f"took the lock again from an earlier run of this job ({owner_text(owner)})")
                return
            if self._alive(owner):
                if owner != waited_for:
                    waited_for = owner
                    self.say(f"run {self.dir.name} is being trained by {owner_text(owner)} (since "
                             f"{time.strftime('%H:%M:%S', time.localtime(owner['since']))}): waiting for it to end, "
                             "then resuming from its newest checkpoint")
                    self._log(f"waits for {owner_text(owner)}")
                self.polls += 1
                time.sleep(self.poll_s)
                continue
            stale = self.path.with_name(f"{LOCK}.stale.{self.me['host']}.{self.me['pid']}")
            try:
                os.rename(self.path, stale)   # only one of several launches that found it stale wins this
            except FileNotFoundError:
                continue
            stale.unlink()
            self.say(f"took over the lock of run {self.dir.name} from {owner_text(owner)}, which is gone")
            self._log(f"took over a stale lock of {owner_text(owner)}")
        self._log("took the lock" + (f" after {owner_text(waited_for)} ended" if waited_for else ""))
        if waited_for:
            self.say(f"{owner_text(waited_for)} has finished training: training run {self.dir.name} now")

    def release(self) -> None:
        owner = self._read()
        if owner and self._mine(owner):
            self.path.unlink(missing_ok=True)
            self._log("released the lock")
