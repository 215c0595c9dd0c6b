"""Build and run the torchrun command for a plan: locally, or as a SLURM step on the allocation.

Inside SLURM one path serves every size: `srun -N <nodes> --ntasks-per-node=1 bash -c 'exec torchrun ...'`.
It makes torchrun each step's task leader, so SLURM's SIGTERM reaches it and it forwards it to the
workers; the Snakemake executor strips SLURM_* from the rule's shell, so each task reads its own
node rank and the node list from the environment srun gives it.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys


def torchrun_command(plan: dict, script: str, script_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *plan["torchrun"], script, *script_args]


def srun_per_node(plan: dict) -> list[str]:
    """A step of one task on every node of the job (the rule's shell has lost SLURM_* but the job id)."""
    return [
        "srun", f"--jobid={os.environ['SLURM_JOB_ID']}", f"--nodes={plan['nodes']}",
        f"--ntasks={plan['nodes']}", "--ntasks-per-node=1", f"--cpus-per-task={plan['cpus_per_node']}",
        "--kill-on-bad-exit=1",
    ]


def srun_command(plan: dict, inner: list[str]) -> list[str]:
    """One task per node runs torchrun; shell variables in the torchrun args expand in each task."""
    exports = "export AIRETRAIN_MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1); "
    # rendezvous port from the job id, as Aire users do: distinct jobs rarely collide on a node
    exports += "export AIRETRAIN_MASTER_PORT=$((10000 + SLURM_JOB_ID % 20000)); "
    # our own torchrun args carry $VARIABLES meant for the task's shell; everything else is quoted
    words = [w if w.startswith("--") and "$" in w else shlex.quote(w) for w in inner]
    return [*srun_per_node(plan), "bash", "-c", exports + "exec " + " ".join(words)]


def command(plan: dict, script: str, script_args: list[str], env=None) -> list[str]:
    env = os.environ if env is None else env
    inner = torchrun_command(plan, script, script_args)
    return srun_command(plan, inner) if env.get("SLURM_JOB_ID") else inner


def on_every_node(plan: dict, argv: list[str]) -> None:
    """Run `python -m airetrain <argv>` once on each node of the job (e.g. staging to node-local disk)."""
    subprocess.run([*srun_per_node(plan), sys.executable, "-m", "airetrain", *argv], check=True)


def export_python_path(directory: str) -> None:
    """Put directory first on PYTHONPATH, so every job (local, SLURM, conda) imports this package."""
    current = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [directory, current]))


def run(plan: dict, script: str, script_args: list[str]) -> None:
    """Replace this process with the launch, so signals reach srun/torchrun directly."""
    env = {**os.environ, **plan["env"]}
    cmd = command(plan, script, script_args, env)
    print("launch:", shlex.join(cmd), flush=True)
    os.execvpe(cmd[0], cmd, env)
