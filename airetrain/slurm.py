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
    """How many times SLURM has requeued this job (`scontrol show job`'s Restarts=; 0 where it cannot say)."""
    restarts = job_fields(job_id).get("Restarts", "")
    return int(restarts) if restarts.isdigit() else 0


def job_alive(job_id: str) -> bool | None:
    """Whether squeue still lists the job (pending, running, completing, requeued); None: no squeue."""
    try:
        proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.returncode == 0 and bool(proc.stdout.strip())   # a job gone from squeue is refused or empty


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job`'s Key=Value fields of a job (NodeList, ExcNodeList, Partition, Restarts);
    {} where scontrol cannot answer."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", out))


def hostnames(nodelist: str) -> list[str]:
    """A SLURM node list (labgpu[1-3]) as its host names; [] for none or where scontrol cannot say."""
    if not nodelist or nodelist == "(null)":
        return []
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return out.split()


def usable_nodes(partition: str) -> list[str]:
    """The partition's nodes SLURM may allocate: not down, drained, failing or in maintenance."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    unusable = ("down", "drain", "drng", "fail", "maint", "boot", "futr", "npc", "inval")
    return sorted({node for node, state in (line.split() for line in out.splitlines() if len(line.split()) == 2)
                   if not state.rstrip("*~#!%$@^-").startswith(unusable)})


def nodes_left(job_id: str, leaving: list[str], partition: str) -> tuple[list[str], str]:
    """The nodes this job could still run on without `leaving` and its ExcNodeList: its partition's usable
    nodes less those; and the partition's name (scontrol's, else `partition`)."""
    fields = job_fields(job_id)
    partition = fields.get("Partition") or partition
    excluded = set(hostnames(fields.get("ExcNodeList", ""))) | set(leaving)
    return [node for node in usable_nodes(partition) if node not in excluded], partition


def requeue_without(job_id: str, nodes: list[str]) -> tuple[bool, str]:
    """From inside the job: requeue it so that it never runs on `nodes` again, from a job step of its own
    (requeue_excluding, `airetrain requeue-excluding`). Returns only where SLURM refused: (False, why); a
    requeued job ends this process with the rest of the job.

    Why a step: the requeue ends the batch step's processes (Snakemake exits on SIGTERM, and the
    processes left are killed with it), while another step's tasks get SIGTERM, which this one
    ignores, and SLURM's KillWait before SIGKILL: time for the release that must follow."""
    argv = ["srun", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--overlap",
            sys.executable, "-m", "airetrain", "requeue-excluding", "--job", job_id, "--nodes", ",".join(nodes)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"srun: {e}"
    said = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0, said[-1] if said else f"exit {proc.returncode}"


def requeue_excluding(job_id: str, nodes: list[str]) -> tuple[bool, str]:
    """Requeue the running job so that it never runs on `nodes` again: (requeued, what SLURM said).

    SLURM refuses ExcNodeList on a running job, so the job is requeued held, its ExcNodeList grown
    while it is pending, and released. The list is the job's own, kept across every later requeue.
    Run it in a step of its own that ignores SIGTERM (requeue_without): the requeue ends the job's
    processes, and the release must still come."""
    excluded = sorted({*hostnames(job_fields(job_id).get("ExcNodeList", "")), *nodes})

    def scontrol(*argv: str) -> str | None:
        try:
            proc = subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            return str(e)
        return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")

    if refused := scontrol("requeuehold", job_id):
        return False, f"scontrol requeuehold {job_id}: {refused}"
    refused = scontrol("update", f"JobId={job_id}", f"ExcNodeList={','.join(excluded)}")
    released = scontrol("release", job_id)   # never leave the job held, whatever the update did
    said = f"requeued job {job_id} excluding {','.join(excluded)}" if not refused else \
        f"requeued job {job_id}, but SLURM refused its ExcNodeList ({refused})"
    return True, said + (f"; scontrol release: {released}" if released else "")


def training_job(lock_path) -> str | None:
    """The SLURM job that holds a run's trainer lock (train/launcher/lock.py) and is still queued or running, or
    None: no lock, a lock of no job, a job gone, or no squeue to ask."""
    import json
    from pathlib import Path

    try:
        owner = json.loads(Path(lock_path).read_text()).get("slurm_job_id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(owner) if owner and job_alive(str(owner)) else None
