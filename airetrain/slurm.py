"""What the steps ask of SLURM from inside a job: its id, a step on every node, the job's remaining time,
how often it was requeued, whether a job is still queued or running.

Each answers None (or a plain default) where SLURM's commands are missing or fail, and never raises
for that: outside a cluster the steps go on without SLURM.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from .units import duration_s


def job_id(env=None) -> str | None:
    """This job's id as accounting knows it, or None outside SLURM: $SLURM_JOB_ID, which in an array
    task is the task's own (sacct's JobIDRaw; the array's is $SLURM_ARRAY_JOB_ID). What train.json,
    the session log and the stops record, and what the report looks up."""
    return (os.environ if env is None else env).get("SLURM_JOB_ID") or None


def srun_per_node(nodes: int, cpus_per_node: int, env=None) -> list[str]:
    """A step of one task on every node of the job (the rule's shell has lost SLURM_* but the job id)."""
    env = os.environ if env is None else env
    return ["srun", f"--jobid={env['SLURM_JOB_ID']}", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={cpus_per_node}", "--kill-on-bad-exit=1"]


def on_every_node(nodes: int, cpus_per_node: int, argv: list[str]) -> None:
    """Run `python -m airetrain <argv>` once on each node of the job (e.g. staging to node-local disk)."""
    subprocess.run([*srun_per_node(nodes, cpus_per_node), sys.executable, "-m", "airetrain", *argv], check=True)


def remaining_seconds(job_id: str) -> float | None:
    """The job's time left (`squeue -h -j JOB -o %L`, so that an extended limit counts); None: not known."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return duration_s(out.splitlines()[0]) if out.strip() else None


def job_restarts(job_id: str) -> int:
    """How many times SLURM has requeued this job (`scontrol show job`'s Restarts=)."""
    try:
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    match = re.search(r"\bRestarts=(\d+)", out)
    return int(match.group(1)) if match else 0


def job_alive(job_id: str) -> bool | None:
    """Whether squeue still lists the job (pending, running, completing, requeued); None: no squeue."""
    try:
        proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.returncode == 0 and bool(proc.stdout.strip())   # a job gone from squeue is refused or empty
