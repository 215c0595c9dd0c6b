"""`airetrain run-pack`: several runs side by side in one allocation (plan/packing.py decides which), each on GPUs of
its own.

The node is checked once (health.preflight, as a run's own job does first), and the first run stages the
dataset; the others are given its stage record, since they read the same dataset from the same fast root.
Then every run's launch starts at once, each its own SLURM step with --exact and its own GPUs, memory and
rendezvous port (launch.srun_command); outside SLURM, its own processes with its share of this machine's GPUs,
or, where they do not hold every run at once (a workstation of one GPU), one run after another.
Each run is promoted as soon as it finished. A run stopped at the job's deadline does not requeue the job itself, as
the runs beside it may still be saving: once every run has ended, the job is requeued once, and each run
resumes from its own checkpoint.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..plan.step_commands import command, run_paths


def run_pack(runs: list[str], python: str, script: str, project_dir: str) -> int:
    """Stage once, train every run at once, promote each that finished; the exit code of the pack."""
    from ..records import STOPPED, Plan, read_record
    from ..train.launcher.launch import EXIT_STOPPED
    paths = {run: run_paths(run) for run in runs}
    plans = {run: read_record(paths[run]["plan"], Plan) for run in runs}
    first = runs[0]
    if plans[first].config.health.preflight:   # the node they share, checked once (as each run's own job does)
        _step(command("health", python=python, plan=paths[first]["plan"], out=paths[first]["health"]), first,
              "health")
    _step(command("stage", python=python, plan=paths[first]["plan"], out=paths[first]["stage"]), first, "stage")
    staged = Path(paths[first]["stage"]).read_text()
    for run in runs[1:]:   # the same dataset on the same fast root: the first run's copy serves
        Path(paths[run]["stage"]).write_text(staged)
    def train_and_promote(slot: int, run: str) -> int:   # each run promoted as soon as it finished
        p = paths[run]
        code = _launch(slot, run, p, (shares or {}).get(slot), python, script).wait()
        if code == 0:
            code = _step(command("promote", python=python, plan=p["plan"], train=p["train"], out=p["checkpoint"],
                                 record=p["record"], project_dir=project_dir), run, "promote", check=False)
        return code

    shares = device_shares([plans[run].gpus for run in runs], os.environ)
    with ThreadPoolExecutor(len(runs) if shares is not None else 1) as pool:
        codes = dict(zip(runs, pool.map(train_and_promote, range(len(runs)), runs)))
    print("pack: " + ", ".join(f"{run} exit {code}" for run, code in codes.items()), flush=True)
    stopped = [run for run in runs if (Path(paths[run]["out"]) / STOPPED).exists()]
    if stopped and all(codes[r] in (0, EXIT_STOPPED) for r in runs):
        return _requeue(stopped, plans)
    return next((code for code in codes.values() if code != 0), 0)


def _step(cmd: str, run: str, name: str, check: bool = True) -> int:
    """One of a run's steps, its output in the run's log of that step (where the rules put it)."""
    log = Path(f"logs/{run}/{name}.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        return subprocess.run(shlex.split(cmd), stdout=out, stderr=subprocess.STDOUT, check=check).returncode


def device_shares(gpus: list[int], env) -> dict[int, str] | None:
    """Outside SLURM, {slot: its CUDA_VISIBLE_DEVICES} where this machine's GPUs hold every run at once, else
    None (the runs go one after another, each seeing them all). In SLURM, {}: each step is given its own."""
    if env.get("SLURM_JOB_ID"):
        return {}
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d] if "CUDA_VISIBLE_DEVICES" in env \
        else _nvidia_devices()
    if len(visible) < sum(gpus):
        return None
    starts = [sum(gpus[:slot]) for slot in range(len(gpus))]
    return {slot: ",".join(visible[start:start + n]) for slot, (start, n) in enumerate(zip(starts, gpus))}


def _nvidia_devices() -> list[str]:
    """The GPUs nvidia-smi lists, by index; none where it is absent or fails."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def _launch(slot: int, run: str, p: dict, devices: str | None, python: str, script: str) -> subprocess.Popen:
    from ..cluster.slurm import PACK_SLOT
    env = {**os.environ, PACK_SLOT: str(slot)}
    if devices is not None:   # outside SLURM: this run's share of the machine's GPUs
        env["CUDA_VISIBLE_DEVICES"] = devices
    log = Path(f"logs/{run}/train.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = command("launch", python=python, plan=p["plan"], stage=p["stage"], out=p["out"], script=script)
    with open(log, "a") as out:   # the child keeps its own copy of the file
        return subprocess.Popen(shlex.split(cmd), env=env, stdout=out, stderr=subprocess.STDOUT)


def _requeue(stopped: list[str], plans: dict) -> int:
    """Every run ended and some stopped at the deadline with a checkpoint: requeue the job once."""
    from ..cluster.slurm import job_restarts, requeue
    from ..train.launcher.launch import EXIT_STOPPED
    job_id = os.environ.get("SLURM_JOB_ID")
    cap = min(plans[r].config.checkpoint.max_requeues for r in stopped)
    # SLURM's count, as the launch reads it: the rule's shell has lost SLURM_RESTART_COUNT
    restarts = job_restarts(job_id) if job_id else 0
    if not job_id or restarts >= cap or not all(plans[r].config.checkpoint.requeue for r in stopped):
        print(f"pack: {', '.join(stopped)} stopped with a checkpoint; not requeued: exiting {EXIT_STOPPED}", flush=True)
        return EXIT_STOPPED
    if refused := requeue(job_id):
        print(f"pack: scontrol requeue {job_id} was refused ({refused}): exiting {EXIT_STOPPED}", flush=True)
        return EXIT_STOPPED
    print(f"pack: {', '.join(stopped)} stopped at the deadline: requeued job {job_id} "
          f"(restart {restarts + 1} of at most {cap})", flush=True)
    print(json.dumps({"requeued": job_id, "runs": stopped}), flush=True)
    time.sleep(600)   # SLURM ends this job now
    return EXIT_STOPPED


def add_parsers(sub) -> None:
    p = sub.add_parser("run-pack", help="stage, train and promote several runs side by side in one allocation")
    p.add_argument("--runs", nargs="+", required=True, help="the pack's runs, the first staging for all")
    p.add_argument("--python", required=True, help="the rules' interpreter")
    p.add_argument("--script", required=True, help="the training script torchrun runs")
    p.add_argument("--project-dir", default=".", help="the project's git checkout, for the run records")
    p.set_defaults(func=lambda a: run_pack(a.runs, a.python, a.script, a.project_dir))
