"""`airetrain submit`: the pipeline's Snakemake in a small SLURM job of its own, so that the pipeline outlives
the login session. Snakemake must run as long as the pipeline does: it submits each run's job when its inputs
are ready, and runs the search's steps and the report itself. A login session, or an SSH connection, ends
first; a job does not.

    airetrain submit     the command: the plan refuses first, then submit() queues the job
    submit(...)          sbatch the workflow's job: 1 core, a little memory, the site's longest wall time, on
                         site.workflow_partition (else SLURM's default); it prints the job id and the log
    run_in_job(argv)     inside that job: unlock what a killed predecessor left, run Snakemake, and requeue the
                         job before its own limit, so that the next session picks the pipeline up where it was
    status_lines()       the job's state and the last lines of its log, for `airetrain status`

A job that ends (its limit, a cancel, a node that fails) kills its Snakemake, which leaves its directory lock
behind. Snakemake's jobs train on in their own allocations; the next session runs Snakemake with
--rerun-incomplete, whose jobs for runs still training wait in the queue behind them (the trainer's lock names
the job: rules/common.smk gives the new job a dependency) and then resume or find the run trained.

How the job tells that no other Snakemake of the project is alive before it unlocks: once its Snakemake holds
the lock, it records the lock files it took (their names and times) in logs/workflow/locks.json with its job id.
A later session unlocks only when the lock files are exactly those, and that job is this one (requeued) or one
SLURM no longer lists; it then cancels the jobs that Snakemake had queued and that have not started (they hold
nothing; the new Snakemake queues their runs again). A Snakemake started by hand takes lock files of its own,
which differ: they are left alone, and Snakemake says the directory is locked. `airetrain submit` refuses a
second workflow job of the project while one is queued or running (the job name is the project's).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..cluster import slurm
from ..errors import ConfigError
from ..profiles import ACCOUNT_NAME as SLURM_NAME
from ..cluster.units import format_duration

FOLDER = Path("logs") / "workflow"
RECORD = FOLDER / "job.json"          # the job submit queued: id, name, log
LOG = FOLDER / "workflow.log"         # the job's output, every session appended
SCRIPT = FOLDER / "workflow.sbatch"
HELD = FOLDER / "locks.json"          # the lock files this project's workflow job took, and which job
LOCKS = Path(".snakemake") / "locks"
MEMORY = "4G"                         # Snakemake and the plan of a few hundred runs
WARN_S = 300                          # SIGUSR1 this long before the limit: Snakemake stops, the job requeues
STOP_WAIT_S = 20                      # after SIGTERM, before SIGKILL: Snakemake would wait for running jobs


def job_name(project: Path) -> str:
    """The workflow job's name: the same for a project however it is reached, another for another project."""
    return "airetrain-workflow-" + hashlib.sha1(str(project.resolve()).encode()).hexdigest()[:8]


def queued(name: str) -> list[str]:
    """The ids of this user's jobs of that name that SLURM still lists."""
    jobs = slurm.user_jobs("%i", "-n", name)
    if jobs is None:
        raise ConfigError("airetrain submit needs SLURM's squeue and sbatch here (a login node): squeue does not "
                          "answer")
    return [fields[0] for fields in jobs]


def batch_script(project: Path, argv: list[str], minutes: int, partition: str | None, account: str | None) -> str:
    """The workflow job's batch script: Snakemake's arguments, each quoted for the shell."""
    options = [f"--job-name={job_name(project)}", "--cpus-per-task=1", f"--mem={MEMORY}",
               f"--time={format_duration(minutes * 60)}", f"--signal=B:USR1@{WARN_S}", "--requeue",
               "--open-mode=append", *([f"--partition={partition}"] if partition else []),
               *([f"--account={account}"] if account else [])]
    return "\n".join([
        "#!/bin/bash",
        *(f"#SBATCH {option}" for option in options),
        "# The pipeline's Snakemake, in a job of its own (airetrain submit): it unlocks what a killed predecessor",
        "# left, runs Snakemake with --rerun-incomplete, and requeues this job before its limit.",
        "# exec: this process is the batch shell, which SLURM's warning (--signal=B:USR1) reaches",
        "exec " + shlex.join([sys.executable, "-m", "airetrain", "workflow-job", "--", *argv]), ""])


def paths(project: Path) -> list[str]:
    """sbatch's options that name the project's paths: given on its command line, one argument each, so that a
    path with a space in it stays one path (a #SBATCH line is split at spaces)."""
    return [f"--output={(project / LOG).resolve()}", f"--chdir={project.resolve()}"]


def submit(project: Path, argv: list[str], minutes: int, partition: str | None, account: str | None) -> str:
    """Queue the workflow's job (refused while one of this project is queued or running); returns its id."""
    if partition is not None and not SLURM_NAME.match(partition):   # it reaches the batch script
        raise ConfigError(f"--partition {partition!r}: a SLURM name is letters, digits, '_', '.' and '-'")
    name = job_name(project)
    if running := queued(name):
        raise ConfigError(f"this project's workflow already runs as SLURM job {', '.join(running)} ({name}): "
                          f"`airetrain status` shows it, `scancel {running[0]}` stops it")
    (project / FOLDER).mkdir(parents=True, exist_ok=True)
    script = project / SCRIPT
    script.write_text(batch_script(project, argv, minutes, partition, account))
    job, refused = slurm.submit(str(script), paths(project))
    if job is None:
        raise ConfigError(f"sbatch refused the workflow's job: {refused}")
    (project / RECORD).write_text(json.dumps({"job": job, "name": name, "log": str(LOG), "argv": argv,
                                              "submitted": time.time()}))
    return job


def _locks(project: Path) -> dict[str, int]:
    """Snakemake's lock files of the project: {name: mtime in ns}."""
    folder = project / LOCKS
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.lock")} if folder.is_dir() else {}


def stale_locks_of_ours(project: Path, job: str | None) -> str | None:
    """Why the project's lock files may be removed (they are those this project's workflow job took, and that
    job is this one, requeued, or has ended), or None: leave them."""
    held = _locks(project)
    try:
        record = json.loads((project / HELD).read_text())
    except (OSError, ValueError):
        return None
    if not held or record.get("locks") != held:
        return None
    if record.get("job") == job:
        return f"they are this job's own, from before it was requeued (job {job})"
    if record.get("job") and slurm.job_alive(record["job"]) is False:
        return f"they were left by workflow job {record['job']}, which SLURM no longer lists"
    return None


def cancel_orphans(project: Path) -> list[str]:
    """Cancel the project's pending jobs (its working directory's, but for the workflow job) once the Snakemake
    that queued them is gone: none follows them, and the next one queues their runs again. Running jobs are left
    to finish; they are waited for (rules/common.smk)."""
    here, name = str(project.resolve()), job_name(project)
    ids = [fields[0] for fields in slurm.user_jobs("%i|%Z|%j", "-t", "PENDING") or []
           if len(fields) == 3 and fields[1] == here and fields[2] != name]
    slurm.cancel(ids)
    return ids


def run_in_job(argv: list[str], project: Path = Path("."), say=print) -> int:
    """The workflow job's body: Snakemake with argv and --rerun-incomplete, until it ends or the job's time does."""
    job = slurm.job_id()
    # Without the job's SLURM_* variables Snakemake's SLURM executor sees a login shell, as it should: its jobs
    # are allocations of their own, not steps of this one (SLURM_CONF names the cluster and stays).
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    say(f"airetrain workflow job {job}, started {time.strftime('%Y-%m-%d %H:%M:%S')} (SLURM's restarts of this "
        f"job: {slurm.job_restarts(job) if job else 0}): snakemake {shlex.join(argv)}", flush=True)
    if _locks(project):
        if why := stale_locks_of_ours(project, job):
            say(f"unlocking the project: {why}", flush=True)
            subprocess.run([snakemake, "--unlock", *argv], env=env, check=False)
            if orphans := cancel_orphans(project):
                say(f"cancelled the jobs that Snakemake had queued and no Snakemake follows now, {', '.join(orphans)}: "
                    "they held nothing, and their runs are submitted again", flush=True)
        else:
            say("the project is locked by a Snakemake that is not this workflow's job: not unlocking "
                "(if none runs, `snakemake --unlock` once)", flush=True)
    requeue = []
    signal.signal(signal.SIGUSR1, lambda *_: requeue.append(True))
    # Snakemake ignores SIGUSR1: the warning is this process's to act on, whoever SLURM signals (scancel --batch
    # signals the batch shell's children too), and Snakemake would die of it
    proc = subprocess.Popen([snakemake, *argv, "--rerun-incomplete"], env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN))
    recorded = False
    while True:
        try:
            return proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        if not recorded and (held := _locks(project)):
            (project / HELD).write_text(json.dumps({"job": job, "locks": held}))
            recorded = True
        if requeue:
            return _requeue(proc, job, say)


def _requeue(proc: subprocess.Popen, job: str | None, say) -> int:
    """Stop Snakemake without cancelling its jobs, and put this job back in the queue."""
    say(f"the job's time is nearly up: stopping Snakemake (its jobs go on) and requeueing job {job}", flush=True)
    proc.send_signal(signal.SIGTERM)   # Snakemake submits nothing more
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()   # it would wait for the running jobs, which train in their own allocations
        proc.wait()
    if job and (refused := slurm.requeue(job)):
        say(f"scontrol requeue {job} was refused ({refused}): `airetrain submit` again picks the pipeline up",
            flush=True)
    return 0


def status_lines(project: Path = Path("."), last: int = 5) -> list[str]:
    """The workflow job's state and its log's last lines, or nothing where `airetrain submit` queued none."""
    try:
        record = json.loads((project / RECORD).read_text())
    except (OSError, ValueError):
        return []
    out = (slurm.query(["squeue", "-h", "-j", record["job"], "-o", "%T %M %L %R"]) or "").split()
    state = (f"{out[0].lower()}, {out[1]} so far, {out[2]} left" + (f" ({out[3]})" if out[0] == "PENDING" else "")
             if len(out) >= 4 else "not queued or running (ended)")
    lines = [f"workflow job {record['job']} (airetrain submit): {state}; log {record['log']}"]
    try:
        tail = (project / record["log"]).read_text(errors="replace").splitlines()[-last:]
    except OSError:
        tail = []
    return lines + [f"  | {line}" for line in tail]


def add_parsers(sub) -> None:
    from .config_options import config_arguments

    p = sub.add_parser("submit", help="run the pipeline (Snakemake) in a SLURM job of its own, which outlives the "
                                      "login session; Snakemake's own options after --")
    p.add_argument("targets", nargs="*", help="Snakemake's targets (default: the whole pipeline)")
    p.add_argument("--profile", default="profiles/aire", help="Snakemake's profile (default: profiles/aire)")
    p.add_argument("--partition", help="the workflow job's partition (default: site.workflow_partition, else "
                                       "SLURM's default)")
    p.add_argument("--time-min", type=int, help="the workflow job's time limit (default: site.max_wall_hours)")
    config_arguments(p)
    p.set_defaults(func=_submit, snakemake_args=[])

    p = sub.add_parser("workflow-job", help="(the job of `airetrain submit`) run Snakemake; requeue before the limit")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="Snakemake's arguments")
    p.set_defaults(func=_workflow_job)


def _submit(args) -> None:
    from .config_options import load_plans
    from ..profiles import account_of

    account = account_of(args.profile)   # a placeholder is refused here, before anything is queued
    site = load_plans(args).settings.site   # so is every refusal of the plan
    words = ["--configfile", *args.configfile] if args.configfile else []
    words += ["--config", *args.config] if args.config else []
    words += ["--replace-workflow-config"] if args.replace_workflow_config else []
    argv = [*args.targets, "--executor", "slurm", "--profile", args.profile, *words, *args.snakemake_args]
    minutes = args.time_min or int(site.max_wall_hours * 60)
    job = submit(Path("."), argv, minutes, args.partition or site.workflow_partition, account)
    print(f"submitted the workflow as SLURM job {job}: snakemake {shlex.join(argv)}\n"
          f"its log: {LOG}. `airetrain status` shows the job and the runs. It requeues itself before its limit "
          f"({minutes} min); after a cancel, `airetrain submit` again picks the pipeline up where it was.")


def _workflow_job(args) -> None:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    sys.exit(run_in_job(argv))
