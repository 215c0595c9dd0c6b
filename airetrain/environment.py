"""The environment every rank's process gets: what the plan sets, and how a user's own settings join it."""
from __future__ import annotations

import re

from .run_config import RunConfig

# glibc's allocator, for training on CPU. By default it hands every freed block of a few MB or more
# back to the kernel (munmap, or trimming the heap's top), so each step's activations and gradients
# come back as fresh pages: tens of thousands of page faults per optimizer step. Keeping them (blocks
# up to 32 MiB from the heap, the heap's top not trimmed under 4 GiB) took the faults to none and the
# step measurably shorter (benchmarks/README.md has the figures). Other allocators ignore the variable.
CPU_MALLOC = ("glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:"
              "glibc.malloc.top_pad=268435456")
# variables that are lists of settings: the user's own follow the plan's, and so win
APPENDED = ("GLIBC_TUNABLES",)


def with_user_settings(plan_env: dict, user_env) -> dict:
    """The ranks' environment: the user's, with the plan's variables over it, except that the user's
    own settings in a list variable (GLIBC_TUNABLES) are kept after the plan's."""
    env = {**user_env, **plan_env}
    for name in APPENDED:
        ours, theirs = plan_env.get(name), user_env.get(name)
        if ours and theirs:
            env[name] = theirs if theirs.startswith(ours) else f"{ours}:{theirs}"
    return env


def job_env(run: RunConfig, nodes: int, cpus_per_rank: int, device: str, run_dir: str) -> dict:
    """Environment every rank gets: what Aire's guidance asks of multi-GPU jobs (docs/aire.md), and
    on GPUs NCCL's flight recorder, which the hang watchdog dumps (and NCCL itself on a timeout)."""
    env = {
        "OMP_NUM_THREADS": str(cpus_per_rank),
        "MKL_NUM_THREADS": str(cpus_per_rank),
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        # without it torchrun's restarted workers reconnect to the dead worker's store
        # (docs/checkpoints.md, "Dead workers")
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    if device == "cpu":
        env["GLIBC_TUNABLES"] = CPU_MALLOC
    if run.train.deterministic:   # cuBLAS reads it when CUDA starts: it must be in the environment
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if device == "cuda" and run.train.hang_timeout_min:
        env.update({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                    "TORCH_FR_DUMP_TEMP_FILE": f"{run_dir}/hangs/nccl-timeout/rank_"})
    if nodes > 1:
        env.update({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"})
        if run.slurm.nccl_socket_ifname:
            env["NCCL_SOCKET_IFNAME"] = run.slurm.nccl_socket_ifname
    return env


# What a script (train.script) is told of its run, in its environment and in its arguments: a name
# of these in train.args is replaced by its value, as a shell would, and nothing else is.
SCRIPT_VARIABLES = {
    "AIRETRAIN_RUN": "the run's name",
    "AIRETRAIN_DATA_DIR": "the staged copy of the dataset on the fast root",
    "AIRETRAIN_CHECKPOINT_DIR": "where the script writes checkpoints (each is made durable on scratch)",
    "AIRETRAIN_DURABLE_DIR": "their durable copies on scratch",
    "AIRETRAIN_RESULTS_DIR": "results/<run>: metrics.jsonl, train.json",
    "AIRETRAIN_END_TIME": "the job's end, Unix seconds (empty outside SLURM)",
    "AIRETRAIN_STOP_MARGIN_S": "checkpoint.stop_margin_min, in seconds",
    "AIRETRAIN_SEED": "the run's seed: train.seed, or each of seeds: in turn (job.seed())",
    "AIRETRAIN_PARAMS": "a JSON file of the run's params: {name: value}, a search trial's values (job.params())",
    "AIRETRAIN_MAX_EPOCHS": "a search's rung: the epochs to train to (job.max_epochs()); unset in other runs",
    "AIRETRAIN_BATCH_PER_DEVICE": "batch.per_device (only where train.args name a batch variable)",
    "AIRETRAIN_BATCH_GLOBAL": "batch.global (only where train.args name a batch variable)",
    "AIRETRAIN_GRAD_ACCUM": "batch.global / (per_device x ranks) (only where train.args name a batch variable)",
}
# What the launcher tells airetrain.job alone (not for arguments): the run's durable directory, where it
# records each session's start, and the newest durable checkpoint at the launch.
JOB_VARIABLES = ("AIRETRAIN_RUN_DIR", "AIRETRAIN_RESUMABLE")
BATCH_VARIABLES = ("AIRETRAIN_BATCH_PER_DEVICE", "AIRETRAIN_BATCH_GLOBAL", "AIRETRAIN_GRAD_ACCUM")
_NAMED = re.compile(r"\$\{(AIRETRAIN_[A-Za-z0-9_]*)\}|\$(AIRETRAIN_[A-Za-z0-9_]*)")


def unknown_script_variables(args: list[str]) -> list[str]:
    """The $AIRETRAIN_... names in a script's arguments that are not airetrain's."""
    found = [a or b for arg in args for a, b in _NAMED.findall(arg)]
    return [name for name in dict.fromkeys(found) if name not in SCRIPT_VARIABLES]


def gives_batch(args: list[str]) -> bool:
    """Whether a script is given the batch (its arguments name a batch variable): only then is the batch maths
    checked and the batch variables set, since a script that never reads them chooses its own batch."""
    return any(a in BATCH_VARIABLES or b in BATCH_VARIABLES for arg in args for a, b in _NAMED.findall(arg))


def expand_script_args(args: list[str], env: dict) -> list[str]:
    """args with $AIRETRAIN_X and ${AIRETRAIN_X} replaced by env's values (empty where unset), as a
    shell would replace them; any other $ text stays as it is, and no shell is involved."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, "") if name in SCRIPT_VARIABLES else match.group(0)
    return [_NAMED.sub(value, arg) for arg in args]
