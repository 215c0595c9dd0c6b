"""Every call of SLURM's commands (sbatch, scontrol, sacct, sacctmgr, sinfo, squeue, srun, scancel): the
only module that runs them, through one runner with one timeout policy (call, query, start), one reader of
scontrol's Key=Value records and one of node lists. A test holds it: no other module names one of those
commands in a subprocess call. What the steps ask from inside a job (its id, a step on every node, its
time left, how often it was requeued, whether a job is still queued), what the plan and `airetrain site`
ask of the cluster, and what `airetrain submit` and the launcher tell it.

Each answers None (or a plain default) where SLURM's commands are missing or fail, and never raises
for that: outside a cluster the steps go on without SLURM.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from .units import duration_s


TIMEOUT_S = 60   # one policy: a controller that has not answered in a minute is not answering


def call(argv: list[str], env=None, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess | None:
    """Run one SLURM command; its outcome, or None where the command is missing or did not answer in time."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None


def query(argv: list[str], env=None, timeout: float = TIMEOUT_S) -> str | None:
    """A SLURM command's output, or None where SLURM is not here, does not answer, or refuses."""
    done = call(argv, env, timeout)
    return done.stdout if done is not None and done.returncode == 0 else None


def start(argv: list[str], stderr) -> subprocess.Popen | None:
    """A query started now and read later (the report's sacct, while the fold's code is imported); None where
    the command is missing."""
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    except FileNotFoundError:
        return None


def sacct_argv(fields: list[str], job_ids: list[str] | None = None, since: str | None = None) -> list[str]:
    """sacct's command line for these fields of these jobs (or those started since), every run of a requeued job."""
    argv = ["sacct", "--noheader", "--parsable2", "--duplicates", "--format", ",".join(fields)]
    if job_ids:
        argv += ["--jobs", ",".join(job_ids)]
    if since:
        argv += ["--starttime", since]
    return argv


def key_values(text: str) -> dict[str, str]:
    """scontrol's one-line records (-o): 'Key=value Key2=value2' -> {Key: value}."""
    return dict(re.findall(r"(\w+)=(\S*)", text))


PACK_SLOT = "AIRETRAIN_PACK_SLOT"   # set by a pack's driver (commands/pack_run.py): a run's place in its allocation


def packed_step(env=None) -> str | None:
    """A packed run's own step, <job>.<step>, from a process inside it; None for a run with the job to itself."""
    env = os.environ if env is None else env
    if PACK_SLOT not in env or not env.get("SLURM_JOB_ID") or not env.get("SLURM_STEP_ID"):
        return None
    return f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"


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
    out = query(["squeue", "-h", "-j", job_id, "-o", "%L"]) or ""
    return duration_s(out.splitlines()[0]) if out.strip() else None


def job_restarts(job_id: str) -> int:
    """How many times SLURM has requeued this job (`scontrol show job`'s Restarts=; 0 where it cannot say)."""
    restarts = job_fields(job_id).get("Restarts", "")
    return int(restarts) if restarts.isdigit() else 0


def job_alive(job_id: str) -> bool | None:
    """Whether squeue still lists the job (pending, running, completing, requeued); None: no squeue."""
    proc = call(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if proc is None:
        return None
    return proc.returncode == 0 and bool(proc.stdout.strip())   # a job gone from squeue is refused or empty


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job`'s Key=Value fields of a job (NodeList, ExcNodeList, Partition, Restarts);
    {} where scontrol cannot answer."""
    return key_values(query(["scontrol", "show", "job", "-o", job_id]) or "")


def hostnames(nodelist: str, env=None) -> list[str]:
    """A SLURM node list (labgpu[1-3]) as its host names; [] for none or where scontrol cannot say."""
    if not nodelist or nodelist == "(null)":
        return []
    return (query(["scontrol", "show", "hostnames", nodelist], env) or "").split()


def usable_nodes(partition: str) -> list[str]:
    """The partition's nodes SLURM may allocate: not down, drained, failing or in maintenance."""
    out = query(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"]) or ""
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
        proc = call(["scontrol", *argv])
        if proc is None:
            return "scontrol did not answer"
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


def requeue(job_id: str) -> str | None:
    """Requeue a job (the launcher's own at its deadline, the workflow job before its limit): None, or why SLURM
    refused."""
    proc = call(["scontrol", "requeue", job_id])
    if proc is None:
        return "scontrol did not answer"
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


def _partitions(env=None) -> list[str] | None:
    """sinfo's partition names, the default one marked with '*'; None where SLURM does not answer."""
    out = query(["sinfo", "-h", "-o", "%P"], env)
    return None if out is None else out.split()


def partitions(env=None) -> list[str] | None:
    """The cluster's partitions, or None where SLURM is not here or does not answer."""
    found = _partitions(env)
    return None if found is None else [p.rstrip("*") for p in found]


def default_partition(env=None) -> str | None:
    return next((p.rstrip("*") for p in _partitions(env) or [] if p.endswith("*")), None)


def user_jobs(fields: str, *options: str) -> list[list[str]] | None:
    """This user's jobs that squeue lists, each its fields (squeue -o, '|' between them); None without squeue."""
    import getpass

    out = query(["squeue", "-h", "-u", getpass.getuser(), *options, "-o", fields])
    return None if out is None else [line.split("|") for line in out.splitlines() if line.strip()]


def submit(script: str, options: list[str] = ()) -> tuple[str | None, str]:
    """sbatch a batch script, with options of its command line: (its job id, '') or (None, why sbatch refused)."""
    proc = call(["sbatch", "--parsable", *options, script], timeout=120)
    if proc is None:
        return None, "sbatch is not here, or did not answer"
    if proc.returncode != 0:
        return None, proc.stderr.strip() or f"exit {proc.returncode}"
    return proc.stdout.strip().split(";")[0], ""


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        call(["scancel", *job_ids], timeout=120)


def test_only(options: list[str], env=None) -> subprocess.CompletedProcess | str:
    """`sbatch --test-only` of a request (nothing is queued): its outcome, or why it was not asked."""
    import shutil

    sbatch = shutil.which("sbatch", path=(os.environ if env is None else env).get("PATH", ""))
    if sbatch is None:
        return "sbatch is not available here"
    return call([sbatch, "--test-only", *options, "--wrap", "true"], env, timeout=30) or "sbatch --test-only failed"
