"""Build and run the torchrun command for a plan: locally, or as a SLURM step on the allocation.

Inside SLURM one path serves every size: `srun -N <nodes> --ntasks-per-node=1 bash -c 'exec torchrun ...'`.
It makes torchrun each step's task leader, so SLURM's SIGTERM reaches it and it forwards it to the
workers; the Snakemake executor strips SLURM_* from the rule's shell, so each task reads its own
node rank and the node list from the environment srun gives it.

After the launch: a run the trainer stopped at its deadline (results/<run>/STOPPED) requeues its own
job with `scontrol requeue`, or exits 75 where it cannot, so that Snakemake's --retries resubmits it.
"""
from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ...environment import with_user_settings
from ...records import STOPPED, Plan, StopRecord, read_record
from ...rundir.run_log import LAUNCH_ID, hangs, record_health, record_stop
from ...cluster.slurm import PACK_SLOT, job_restarts, requeue, requeue_without, srun_per_node
from ...rundir import batch_changes, capture, memory_raises, metrics_log
from .lock import RunLock


def torchrun_command(plan: Plan, script: str, script_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *plan.torchrun, script, *script_args]


def srun_command(plan: Plan, inner: list[str], env=None) -> list[str]:
    """One task per node runs torchrun; shell variables in the torchrun args expand in each task.

    A packed run's step takes only its own share of the allocation (--exact, its GPUs and memory), so
    that the runs beside it get theirs, and its rendezvous port is its own."""
    env = os.environ if env is None else env
    slot = int(env.get(PACK_SLOT, "0") or 0)
    exports = "export AIRETRAIN_MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1); "
    # rendezvous port from the job id, as Aire users do: distinct jobs rarely collide on a node
    # (a packed run's moved by its slot: the runs of one job listen on one node)
    exports += f"export AIRETRAIN_MASTER_PORT=$((10000 + (SLURM_JOB_ID + {slot * 4001}) % 20000)); "
    # our own torchrun args carry $VARIABLES meant for the task's shell; everything else is quoted
    words = [w if w.startswith("--") and "$" in w else shlex.quote(w) for w in inner]
    # named after the run's results folder: sacct lists each run's step by name (the report finds a script's so)
    share = ["--exact", f"--mem={plan.slurm.mem_mb}M", *([f"--gres=gpu:{plan.gpus}"] if plan.gpus else []),
             f"--job-name={plan.results_dir.name}"] if PACK_SLOT in env else []
    return [*srun_per_node(plan.nodes, plan.cpus_per_node, env), *share, "bash", "-c",
            exports + "exec " + " ".join(words)]


def command(plan: Plan, script: str, script_args: list[str], env=None) -> list[str]:
    env = os.environ if env is None else env
    inner = torchrun_command(plan, script, script_args)
    return srun_command(plan, inner, env) if env.get("SLURM_JOB_ID") else inner


EXIT_STOPPED = 75   # EX_TEMPFAIL: stopped with a durable checkpoint, not requeued; run it again to resume


def continue_stopped(plan: Plan, stopped: dict, env) -> int:
    """The trainer stopped early with a durable checkpoint: requeue this job, or say how to go on."""
    code, action = _continue(plan, stopped, env)
    record_stop(plan.durable_dir, stopped, env.get("SLURM_JOB_ID"), action)
    if action == "requeued":
        time.sleep(600)   # SLURM ends this job now; nothing more to do until then
    return code


def _continue(plan: Plan, stopped: dict, env) -> tuple[int, str]:
    cfg = plan.config.checkpoint
    job_id = env.get("SLURM_JOB_ID")
    print(f"training stopped ({stopped['reason']}) at step {stopped['step']} of {stopped['of_steps']}; "
          f"checkpoint {stopped['checkpoint']['path']} is durable", flush=True)
    if not job_id:
        print("not in a SLURM job: run the same command again to resume", flush=True)
        return EXIT_STOPPED, f"exit {EXIT_STOPPED}"
    if stopped["reason"] == "straggler":
        return _leave_out(plan, stopped, job_id)
    if stopped["reason"] != "deadline":   # scancel or preemption: SLURM decides what happens next
        return EXIT_STOPPED, f"exit {EXIT_STOPPED}"
    if PACK_SLOT in env:   # the runs beside it may still be saving: the pack's driver requeues the job once
        return EXIT_STOPPED, "stopped: its pack requeues the job"
    if not cfg.requeue:
        print(f"checkpoint.requeue is false: exiting {EXIT_STOPPED}; Snakemake's --retries resubmits it", flush=True)
        return EXIT_STOPPED, f"exit {EXIT_STOPPED}"
    if (restarts := _requeues_so_far(plan, job_id)) is None:
        return 1, "exit 1: max_requeues reached"
    if refused := requeue(job_id):
        print(f"scontrol requeue {job_id} was refused ({refused}): exiting {EXIT_STOPPED} "
              "so that Snakemake's --retries resubmits the run", flush=True)
        return EXIT_STOPPED, f"exit {EXIT_STOPPED}: requeue refused"
    print(f"requeued job {job_id} (restart {restarts + 1} of at most {cfg.max_requeues}); "
          "SLURM ends this run of it now", flush=True)
    return EXIT_STOPPED, "requeued"


def _requeues_so_far(plan: Plan, job_id: str) -> int | None:
    """How many times SLURM has requeued this job; None, said, where checkpoint.max_requeues allows no more."""
    restarts, cap = job_restarts(job_id), plan.config.checkpoint.max_requeues
    if restarts >= cap:
        print(f"job {job_id} was requeued {restarts} times already (checkpoint.max_requeues = {cap}): not again; "
              "resubmit to continue", flush=True)
        return None
    return restarts


def _leave_out(plan: Plan, stopped: dict, job_id: str) -> tuple[int, str]:
    """A straggler's stop: requeue this job without its node (health.exclude_stragglers)."""
    exclude = stopped["exclude"]
    if _requeues_so_far(plan, job_id) is None:
        return 1, "exit 1: max_requeues reached"
    for node, why in exclude.items():
        record_health(plan.durable_dir, job_id, node, "straggler", why, "excluded")
    print(f"requeuing job {job_id} without {', '.join(exclude)} ({'; '.join(exclude.values())})", flush=True)
    # recorded first: once SLURM requeues the job, this process ends with it
    record_stop(plan.durable_dir, stopped, job_id, f"requeued without {', '.join(exclude)}")
    _, said = requeue_without(job_id, sorted(exclude))   # where it returns, SLURM refused
    print(f"SLURM refused the requeue ({said}): exiting {EXIT_STOPPED} so that Snakemake's --retries resubmits the "
          "run", flush=True)
    return EXIT_STOPPED, f"exit {EXIT_STOPPED}: requeue refused"


def run(plan: Plan, script: str, script_args: list[str], out: str, extra_env: dict | None = None,
        after_exit=None) -> int:
    """Run the launch, then continue a run that stopped early. Returns the exit code.

    Locally a SIGTERM to this process is passed on to torchrun (which passes it to the workers);
    in a SLURM job, SLURM signals the step itself, so it is not sent twice. after_exit runs once the
    ranks have exited, before a stopped run is requeued (script mode's last checkpoint copy)."""
    launch = f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"   # hangs of one launch are counted together
    env = {**with_user_settings(plan.env, os.environ), **(extra_env or {}), LAUNCH_ID: launch}
    code = capture.ensure(plan, env)   # the run's own code, as it was at its first launch
    env.update(code.env(env))
    cmd = command(plan, code.script(script) if plan.script else script, script_args, env)
    marker = Path(out) / STOPPED
    if refused := memory_raises.not_again(plan, env.get("SLURM_JOB_ID")):
        print(refused, flush=True)
        return 1
    lock = RunLock(plan.durable_dir, env.get("SLURM_JOB_ID"))
    lock.acquire()   # one trainer per run: another live job or process training it is waited for
    try:
        marker.unlink(missing_ok=True)
        # the metrics of earlier sessions, where Snakemake removed them before it ran the job again
        metrics_log.restore(metrics_log.durable_path(plan.durable_dir), Path(out) / metrics_log.NAME)
        in_slurm = bool(env.get("SLURM_JOB_ID"))
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C reaches torchrun itself
        while True:
            fits = len(batch_changes.changes(plan.durable_dir))
            print("launch:", shlex.join(cmd), flush=True)
            child = subprocess.Popen(cmd, env=env)
            signal.signal(signal.SIGTERM, signal.SIG_IGN if in_slurm else lambda *_: child.send_signal(signal.SIGTERM))
            code = child.wait()
            # out of GPU memory past torchrun's restarts: again, with the smaller batch a rank recorded
            if code == 0 or len(batch_changes.changes(plan.durable_dir)) == fits or marker.exists():
                break
            change = batch_changes.described(batch_changes.changes(plan.durable_dir)[-1])
            print(f"the run ran out of GPU memory ({change}): launching it again", flush=True)
        if after_exit:
            after_exit()
    finally:
        lock.release()
    if marker.exists():
        return continue_stopped(plan, read_record(marker, StopRecord), env)
    if code != 0 and (hung := hang_failure(plan.durable_dir, launch)):
        print(f"the run hung a second time in this launch (after step {hung['step']}), so it was not restarted: "
              f"every rank's stacks are in {hung['dump']}; the first hang's are beside it", flush=True)
    return code


def hang_failure(run_dir: Path, launch: str) -> dict | None:
    """The hang the watchdog ended this launch for (a second one, not restarted), if there was one."""
    ended = [s for s in hangs(run_dir, launch) if s["action"] != "restart"]
    return ended[-1] if ended else None
