"""What a run asks of SLURM and of torchrun: the job's request (as the Snakemake rules pass it, and as
sbatch options for `airetrain sbatch` and the forecast's `sbatch --test-only`), and torchrun's arguments.
"""
from __future__ import annotations

from ..records import Plan, SlurmRequest
from ..run_config import RunConfig, Slurm
from ..cluster.units import format_duration


def _mail(slurm: Slurm) -> str:
    """sbatch's mail options (both validated by the schema: names and an address, nothing a shell reads)."""
    return "".join(f" --mail-{key}={value}" for key, value in (("type", slurm.mail_type), ("user", slurm.mail_user))
                   if value)


def slurm_request(run: RunConfig, nodes: int, nproc: int, cpus_per_node: int, mem_gb_per_node: float,
                  account: str | None) -> SlurmRequest:
    return SlurmRequest(
        partition=run.slurm.partition,
        # sbatch reads $SBATCH_ACCOUNT itself, but the executor would otherwise guess one
        account=account,
        nodes=nodes,
        tasks=nodes,
        cpus_per_task=cpus_per_node,
        mem_mb=int(mem_gb_per_node * 1024),
        gres=f"gpu:{nproc}" if run.gpus else None,
        # The executor runs a rule that has an `mpi` resource unwrapped in the batch step, so
        # the launcher can start its own `srun` across all nodes. Its MPI checks refuse
        # tasks=1, so one node sets the key with an empty value (same launch path).
        mpi="srun" if nodes > 1 else "",
        # a requeued job appends to its log instead of truncating the first run's
        extra="--open-mode=append" + (" --requeue" if run.checkpoint.requeue else "") + _mail(run.slurm),
        # its own resource: the executor refuses --qos in slurm_extra (and then waits forever)
        qos=run.slurm.qos,
    )


def sbatch_options(plan: Plan) -> list[str]:
    """What the run's job asks SLURM for, as sbatch options (the batch script's and the forecast's)."""
    slurm = plan.slurm
    return [
        f"--partition={slurm.partition}",
        *([f"--account={slurm.account}"] if slurm.account else []),
        *([f"--qos={slurm.qos}"] if slurm.qos else []),
        f"--nodes={plan.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={slurm.cpus_per_task}",
        f"--mem={slurm.mem_mb}",
        *([f"--gres={slurm.gres}"] if slurm.gres else []),
        f"--time={format_duration(plan.time_min.total * 60)}",
    ]


def torchrun_args(nodes: int, nproc: int, max_restarts: int) -> list[str]:
    """torchrun's arguments. Multi-node ones hold shell variables that each SLURM task expands."""
    args = [f"--nnodes={nodes}", f"--nproc_per_node={nproc}", f"--max-restarts={max_restarts}"]
    if nodes == 1:
        return ["--standalone", *args]
    return [
        *args,
        "--node_rank=$SLURM_NODEID",
        "--rdzv_backend=c10d",
        "--rdzv_id=$SLURM_JOB_ID",
        "--rdzv_endpoint=$AIRETRAIN_MASTER_ADDR:$AIRETRAIN_MASTER_PORT",
    ]
