"""What every rank's process gets from the plan: its environment variables and torchrun's arguments."""
from __future__ import annotations


def job_env(run: dict, nodes: int, cpus_per_rank: int, device: str, run_dir: str) -> dict:
    """Environment every rank gets: what Aire's guidance asks of multi-GPU jobs (README, "On Aire"), and
    on GPUs NCCL's flight recorder, which the hang watchdog dumps (and NCCL itself on a timeout)."""
    env = {
        "OMP_NUM_THREADS": str(cpus_per_rank),
        "MKL_NUM_THREADS": str(cpus_per_rank),
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        # without it torchrun's restarted workers reconnect to the dead worker's store (README, "Dead workers")
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    if run["train"]["deterministic"]:   # cuBLAS reads it when CUDA starts: it must be in the environment
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if device == "cuda" and run["train"]["hang_timeout_min"]:
        env.update({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                    "TORCH_FR_DUMP_TEMP_FILE": f"{run_dir}/hangs/nccl-timeout/rank_"})
    if nodes > 1:
        env.update({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"})
        if run["slurm"]["nccl_socket_ifname"]:
            env["NCCL_SOCKET_IFNAME"] = run["slurm"]["nccl_socket_ifname"]
    return env


def torchrun_args(plan: dict) -> list[str]:
    """torchrun's arguments. Multi-node ones hold shell variables that each SLURM task expands."""
    args = [f"--nnodes={plan['nodes']}", f"--nproc_per_node={plan['nproc_per_node']}",
            f"--max-restarts={plan['config']['checkpoint']['max_restarts']}"]
    if plan["nodes"] == 1:
        return ["--standalone", *args]
    return [
        *args,
        "--node_rank=$SLURM_NODEID",
        "--rdzv_backend=c10d",
        "--rdzv_id=$SLURM_JOB_ID",
        "--rdzv_endpoint=$AIRETRAIN_MASTER_ADDR:$AIRETRAIN_MASTER_PORT",
    ]
