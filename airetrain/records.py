"""The files that pass between the steps, each defined once.

Each record below is what one step writes and the next ones read: the writer and every reader go
through write_record/read_record, which refuse a file whose keys differ from the definition. The
field docs are the documentation: docs/outputs.md is generated from them (`python -m airetrain.records`).

The plan is a tree of typed records (dataclasses: plan.nodes, plan.config.train.seed); the other files
are TypedDicts, dicts with a fixed set of keys. The durable logs of a run and the run record are made
in run_log.py.
"""
import dataclasses
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated as Doc, NotRequired, Optional, TypedDict

from .fsutil import read_json, write_json_atomic
from .run_config import RunConfig
from .typed import RecordError, from_dict, to_dict

STOPPED = "STOPPED"   # in results/<run>/: the run stopped early with a durable checkpoint and will resume

__all__ = ["RecordError"]


@dataclass(frozen=True)
class BatchPlan:
    global_: Doc[int, "samples per optimizer step, all ranks"]
    per_device: Doc[int, "samples per forward pass on one rank"]
    grad_accum: Doc[Optional[int], "micro-batches per optimizer step: global / (per_device x world_size)"]


@dataclass(frozen=True)
class Minutes:
    stage: Doc[int, "minutes for the stage step"]
    train: Doc[int, "minutes for the train step"]
    promote: Doc[int, "minutes for the promote step"]
    total: Doc[int, "their sum: the job's time limit"]


@dataclass(frozen=True)
class PlanRoots:
    scratch: Doc[Path, "the durable root: roots.scratch, else $SCRATCH, else ./.airetrain/scratch"]
    scratch_source: Doc[str, "where the durable root came from (roots.scratch, $SCRATCH, working directory)"]
    tmp_shared: Doc[Optional[str], "roots.tmp_shared as configured; the fast root itself is resolved in the job"]


@dataclass(frozen=True)
class SlurmRequest:
    partition: Doc[str, "SLURM partition"]
    account: Doc[Optional[str], "account: runs.<run>.slurm.account, else $SBATCH_ACCOUNT, else none"]
    nodes: Doc[int, "nodes"]
    tasks: Doc[int, "tasks: one per node (torchrun starts the ranks)"]
    cpus_per_task: Doc[int, "cores per node"]
    mem_mb: Doc[int, "memory per node, MB"]
    gres: Doc[Optional[str], "gpu:<n> per node, or none"]
    mpi: Doc[str, "'srun' on several nodes (the launch runs its own srun); empty on one"]
    extra: Doc[str, "further sbatch options (--open-mode=append, --requeue)"]
    qos: Doc[Optional[str], "quality of service, or none (the account's default)"]


@dataclass(frozen=True)
class Script:
    path: Doc[Path, "the user's script, absolute"]
    args: Doc[list, "its arguments"]


@dataclass(frozen=True)
class Plan:
    """results/<run>/plan.json: the resolved run, written by the plan step."""
    run: Doc[str, "run name"]
    device: Doc[str, "cuda or cpu"]
    backend: Doc[str, "nccl or gloo"]
    gpus: Doc[int, "GPUs, all nodes"]
    nodes: Doc[int, "nodes"]
    nproc_per_node: Doc[int, "ranks per node"]
    world_size: Doc[int, "ranks"]
    strategy: Doc[str, "ddp or fsdp (auto is decided when plan.json is written), or script"]
    activation_checkpointing: Doc[bool, "whether blocks recompute their activations in the backward pass"]
    memory_estimate: Doc[Optional[dict], "the per-GPU memory estimate behind strategy: auto"]
    warnings: Doc[list, "what the plan accepted but would not advise"]
    precision: Doc[str, "bf16, fp16 or fp32"]
    batch: Doc[BatchPlan, "the batch arithmetic"]
    cpus_per_rank: Doc[int, "cores per rank"]
    cpus_per_node: Doc[int, "cores per node"]
    mem_gb_per_node: Doc[float, "memory per node, GB"]
    time_min: Doc[Minutes, "minutes per step (stage, train, promote) and their total, the job's limit"]
    roots: Doc[PlanRoots, "the storage roots"]
    dataset: Doc[Optional[Path], "the dataset directory on the durable root, or none (synthetic)"]
    dataset_size: Doc[Optional[dict], "files, bytes and format of what staging copies, from the dataset's shard "
                                      "index or files.json, or counted by the plan step's walk (from: walk); "
                                      "none: a dataset the workflow prepares itself"]
    fast_root_quota: Doc[dict, "the fast root's per-job quotas (max_files, max_gb) the dataset is checked against"]
    durable_dir: Doc[Path, "<scratch>/airetrain/<run>: the run's durable directory (checkpoints, logs, history)"]
    checkpoints_dir: Doc[Path, "<scratch>/airetrain/<run>/checkpoints: where the durable checkpoints are kept"]
    results_dir: Doc[Path, "results/<run>: the run's results, beside the workflow"]
    slurm: Doc[SlurmRequest, "what the job asks SLURM for"]
    env: Doc[dict, "environment variables set for the training processes"]
    script: Doc[Optional[Script], "script mode: the user's script and its arguments; none: the built-in trainer"]
    config: Doc[RunConfig, "the run's complete config, defaults filled in"]
    right_sized: Doc[Optional[dict], "resources: measured: each request taken from the history (value, how it "
                                     "was found), the profile and the jobs it came from; none: as configured"]
    forecast: Doc[Optional[dict], "forecast.choose: the layouts forecast (start, duration, finish, each with how "
                                  "it was found), the GPU count chosen and why; none: the configured gpus"]
    torchrun: Doc[list, "torchrun's arguments"]
    group: Doc[str, "the runs whose configs are equal but for train.seed: the run name without its seed part "
                    "(results.md averages them)"] = ""
    sweep: Doc[dict, "the dotted config keys its sweep grid set (train.seed aside: the group names the seeds), and "
                     "their values: its point, as the trackers tag it"] = \
        dataclasses.field(default_factory=dict)
    evaluates: Doc[Optional[dict], "an evaluation run (evaluate:): the run whose weights it evaluates (run, which), "
                                   "and that run's data section and dataset, for the plan step's shape check; "
                                   "none: a training run"] = None
    tune_keys: Doc[Optional[list], "a tuned run (tune:): its space's keys in the config's order, the order the "
                                   "study suggests them in (plan.json sorts its keys); none: not tuned"] = None

    def replace(self, **changes) -> "Plan":
        return dataclasses.replace(self, **changes)


class StageRecord(TypedDict):
    """results/<run>/stage.json: where the data was staged, written by the stage step."""
    source: Doc[Optional[str], "the dataset on the durable root (none: synthetic, nothing staged)"]
    target: Doc[Optional[str], "its copy on the fast root, which the trainer reads"]
    format: Doc[Optional[str], "folder (file by file), shards (packed: tar shards and their index), or none"]
    files: Doc[int, "files in the dataset"]
    bytes: Doc[int, "bytes in the dataset"]
    copied_files: Doc[int, "files copied this time (the others were unchanged)"]
    copied_bytes: Doc[int, "bytes copied this time"]
    seconds: Doc[float, "wall seconds of the stage"]
    mb_per_s: Doc[Optional[float], "copy rate, MB/s"]
    mode: Doc[str, "copied, unchanged, or none (synthetic)"]
    engine: Doc[Optional[str], "cp (parallel GNU cp), python, or shards (hashing threads); none: nothing copied"]
    sha256_verified: Doc[bool, "whether every copied byte was checked against the sha256s"]
    fast_root: Doc[str, "the fast root used: roots.tmp_shared, $TMP_SHARED, the job's $TMPDIR, or a fallback"]
    fast_root_source: Doc[str, "where the fast root came from"]
    host: Doc[Optional[str], "the host that staged (the first node's, when every node staged)"]
    nodes: Doc[Optional[dict], "per host, its own stage record, when node-local storage was staged on each node"]


class HealthRecord(TypedDict):
    """results/<run>/health.json: the check of every node before staging, written when every node passed."""
    preflight: Doc[bool, "whether the check ran (health.preflight)"]
    slurm_job_id: Doc[Optional[str], "the job it checked (none outside SLURM)"]
    seconds: Doc[float, "wall seconds of the check, every node's task included"]
    nodes: Doc[dict, "per host: ok, seconds, problems (check, reason) and the node's network interfaces"]
    left_out: Doc[dict, "nodes the run's earlier jobs left out, and why (<scratch>/airetrain/<run>/health.jsonl)"]


class TrainRecord(TypedDict):
    """results/<run>/train.json: what the trainer did and measured, written by rank 0 at the end."""
    run: Doc[str, "run name"]
    world_size: Doc[int, "ranks"]
    nodes: Doc[int, "nodes"]
    strategy: Doc[str, "ddp or fsdp"]
    precision: Doc[str, "bf16, fp16 or fp32"]
    device: Doc[str, "cuda or cpu"]
    global_batch: Doc[int, "samples per optimizer step"]
    per_device_batch: Doc[int, "samples per forward pass on one rank"]
    grad_accum: Doc[int, "micro-batches per optimizer step"]
    steps: Doc[int, "optimizer steps done, all sessions"]
    steps_this_session: Doc[int, "optimizer steps done in this session (after a resume: since it)"]
    seed: NotRequired[Doc[int, "train.seed: the seed this run trained with (each rank's streams derive from it)"]]
    epochs: Doc[int, "epochs configured"]
    steps_per_epoch: NotRequired[Doc[int, "optimizer steps in one epoch: an evaluation at step k x this is the one "
                                          "after k epochs (a tune reports it there)"]]
    resumed_from_step: Doc[int, "the step this session resumed from (0: a fresh start)"]
    sessions: NotRequired[Doc[list, "a script's sessions, each as airetrain.job saw its start: step (where it "
                                    "resumed, 0: from the start), checkpoint, started_over (true: it started from 0 "
                                    "beside durable checkpoints, never asking job.load_latest), slurm_job_id"]]
    train_seconds: Doc[float, "seconds of the training loop, save stalls included"]
    samples_per_s: Doc[Optional[float], "training throughput, all ranks"]
    tokens_per_s: Doc[Optional[float], "tokens per second, for sequence models"]
    step_time_s: Doc[Optional[float], "seconds per optimizer step"]
    data_wait_s_per_step: Doc[Optional[float], "seconds per step waiting for the data loader (rank 0)"]
    compute_s_per_step: Doc[Optional[float], "seconds per step not waiting for data (rank 0)"]
    flops_per_step: Doc[int, "model FLOPs of one optimizer step, all ranks"]
    achieved_tflops: Doc[Optional[float], "model TFLOP/s achieved, all ranks"]
    mfu: Doc[Optional[float], "model FLOPs utilisation against the GPUs' bf16 peak (0-1; GPU only), over the "
                              "whole session (warm-up included)"]
    warmup_steps: Doc[Optional[int], "the session's first steps, kept out of the steady-state figures (a fifth, "
                                     "at most 10; none: a user's script)"]
    warmup_s: Doc[Optional[float], "seconds of the warm-up steps (compilation, first iterations)"]
    steady_steps: Doc[Optional[int], "steps after the warm-up"]
    steady_s: Doc[Optional[float], "seconds of the steady steps (checkpoint stalls included)"]
    steady_samples_per_s: Doc[Optional[float], "throughput after the warm-up, all ranks"]
    steady_tokens_per_s: Doc[Optional[float], "tokens per second after the warm-up, for sequence models"]
    steady_achieved_tflops: Doc[Optional[float], "model TFLOP/s after the warm-up, all ranks"]
    steady_mfu: Doc[Optional[float], "MFU after the warm-up: what the run sustains (GPU only)"]
    peak_tflops_per_gpu: Doc[Optional[float], "the GPU's dense bf16 peak, TFLOP/s"]
    gpu_name: NotRequired[Doc[Optional[str], "the GPU's name as CUDA reports it: its memory and peaks come from "
                                             "hardware.py's table (none on CPU)"]]
    gpu_util_mean: Doc[Optional[float], "mean GPU utilisation from NVML, %, all ranks"]
    gpu_energy_j: NotRequired[Doc[Optional[float], "the session's GPU energy from NVML's counter, J, every rank's GPU "
                                                   "summed (none on CPU, or where a GPU has no counter)"]]
    gpu_mem_peak_bytes: Doc[Optional[int], "GPU memory peak from NVML, bytes"]
    memory_estimate: Doc[Optional[dict], "the plan's per-GPU memory estimate"]
    activation_checkpointing: Doc[bool, "whether activation checkpointing was on"]
    parallel_units: Doc[dict, "the units FSDP shards and activation checkpointing wraps: how they were chosen, "
                              "how many, their classes"]
    data_wait_frac: Doc[float, "share of step time waiting for the data loader, mean over ranks (0-1)"]
    peak_mem_bytes: Doc[int, "peak memory of the busiest rank: CUDA allocator peak, or peak RSS on CPU"]
    final_loss: Doc[Optional[float], "training loss over the last logged window, mean over ranks"]
    eval_loss: Doc[Optional[float], "mean loss on the held-out split (none without a test split)"]
    eval_accuracy: Doc[Optional[float], "accuracy on the held-out split, for classification (none otherwise)"]
    eval_metrics: Doc[dict, "every metric on the held-out split: accuracy, or train.metrics' own"]
    eval_samples: NotRequired[Doc[Optional[int], "the samples the final evaluation scored: the test split's"]]
    eval_s: NotRequired[Doc[float, "seconds this session spent evaluating (train.eval_every_epochs, eval_every_steps), "
                                   "kept out of train_seconds, throughput and MFU"]]
    evaluations: NotRequired[Doc[int, "evaluations this session made (each a metrics.jsonl line with eval_loss)"]]
    best: NotRequired[Doc[Optional[dict], "the best evaluation by checkpoint.monitor: step, epoch, metric, value "
                                          "(none without monitor or an evaluation split)"]]
    init: NotRequired[Doc[Optional[dict], "what model.init_from loaded: source, sha256, missing and unexpected "
                                          "keys (none without init_from)"]]
    parameters: NotRequired[Doc[dict, "parameter counts: trainable, frozen (model.freeze)"]]
    evaluates: NotRequired[Doc[Optional[dict], "an evaluation run: the run whose weights it evaluated (run, which); "
                                               "none: a training run"]]
    stopped_early: NotRequired[Doc[Optional[dict], "where early stopping ended training: step, epoch, best_step, "
                                                   "best_value (none where it trained every epoch)"]]
    slurm_job_id: Doc[Optional[str], "the SLURM job (none outside SLURM)"]
    slurm_step: NotRequired[Doc[Optional[str], "a packed run's own SLURM step, <job>.<step>: its share of the job "
                                               "(pack), which the report shows; none: it had the job to itself"]]
    hostnames: Doc[list, "the hosts of every rank"]
    launch_host: Doc[str, "the host of rank 0"]
    torch_version: Doc[str, "torch's version"]
    environment: Doc[dict, "the environment variables the plan set, as the trainer saw them"]
    checkpoint: Doc[dict, "the final checkpoint: path, kind (file or dcp), size, sha256(s), step"]
    checkpoint_saves: Doc[int, "checkpoints saved this session"]
    checkpoint_writer: Doc[str, "where saves were written: process, thread, dcp_async, synchronous, or script"]
    checkpoint_writer_reason: Doc[str, "why: checkpoint.writer or .async, or what auto found (free cores, a GPU)"]
    checkpoint_stall_s_mean: Doc[Optional[float], "seconds training waited per save"]
    checkpoint_final_wait_s: Doc[float, "the last save's background tail, outside train_seconds"]
    health: NotRequired[Doc[dict, "slow or sick nodes: preflight_s (the node check's seconds, none where it did not "
                                  "run), allreduce_gbps (the links' all-reduce bus bandwidth over every rank; "
                                  "allreduce_mb, allreduce_s, allreduce_floor_gbps, allreduce_below_floor; absent for "
                                  "one rank), rank_step_s (each rank's median compute seconds per step over the log "
                                  "intervals), rank_hosts (each rank's host) and stragglers (rank, host, ratio to the "
                                  "median, the step it was named at)"]]
    batch_changes: NotRequired[Doc[list, "each time the run ran out of GPU memory and went on with a smaller batch: "
                                         "the step, from_per_device and from_grad_accum, per_device and grad_accum "
                                         "after it, the global batch (held), why, the rank and SLURM job"]]
    tracking: NotRequired[Doc[dict, "each tracker the run logs to (wandb, mlflow): its run's ids (W&B id, project, "
                                    "mode; MLflow run_id, experiment, url), and this session's figures logged, skipped "
                                    "(the tracker held them already: a resumed session's repeat) and lost, with "
                                    "the first error"]]


class StopRecord(TypedDict):
    """results/<run>/STOPPED: present while a run that stopped early (deadline, SIGTERM) waits to resume."""
    reason: Doc[str, "deadline, signal, or straggler (health.exclude_stragglers)"]
    step: Doc[int, "the step the run stopped after"]
    of_steps: Doc[int, "the run's total steps"]
    checkpoint: Doc[dict, "the durable checkpoint it resumes from"]
    time: Doc[float, "when it stopped (Unix time)"]
    exclude: NotRequired[Doc[dict, "a straggler's stop: {node: why}, the nodes the requeued job leaves out"]]


class CheckpointRecord(TypedDict):
    """results/<run>/checkpoint.json: the durable checkpoint, written by the promote step."""
    file: Doc[str, "file or directory name"]
    kind: Doc[str, "file (one torch.save file) or dcp (a torch.distributed.checkpoint directory)"]
    step: Doc[int, "optimizer step"]
    epoch: Doc[int, "epoch"]
    size: Doc[int, "bytes"]
    sha256: Doc[str, "the file's sha256; for dcp, the sha256 of its files' sha256s"]
    files: NotRequired[Doc[dict, "each file's sha256 (kind dcp)"]]
    fingerprint: Doc[str, "sha256 of the config it was trained with: a changed config does not resume from it"]
    path: Doc[str, "the durable copy on the scratch root"]
    source: Doc[str, "where it was copied from"]
    mode: Doc[str, "copied, linked (a hard link: the fast root and scratch are one filesystem), already durable, "
                   "or written there"]
    verified: Doc[bool, "its bytes were hashed and it loaded with weights_only=True"]
    weights: NotRequired[Doc[dict, "model.safetensors beside it: the model's weights alone, unsharded, under the "
                                   "module's own names (file, path, sha256, size, step); not for script mode"]]
    best: NotRequired[Doc[dict, "the best checkpoint by checkpoint.monitor, durable and verified: path, step, "
                                "epoch, metric, value, sha256, and weights (best.safetensors beside it)"]]


class RunRecord(TypedDict):
    """results/<run>/run.json: the run record, written by the promote step."""
    run: Doc[str, "run name"]
    config: Doc[dict, "the resolved config"]
    config_sha256: Doc[str, "its sha256 (sorted-key JSON)"]
    seed: Doc[int, "train.seed"]
    project: Doc[dict, "the project's git commit (the working directory's) and whether tracked files differed from it"]
    airetrain: Doc[dict, "airetrain's version, and its checkout's commit and dirty flag (null when installed)"]
    versions: Doc[dict, "python, torch, CUDA, NCCL, Snakemake, its SLURM plugin, airetrain"]
    hostnames: Doc[list, "every host the run used, all sessions"]
    slurm_job_ids: Doc[list, "every SLURM job of the run, requeues included"]
    sessions: Doc[list, "every start of the training: job id, time, step it resumed from, hosts"]
    stops: Doc[list, "every early stop: job id, reason, step, time, and what followed"]
    checkpoint: Doc[Optional[dict], "the final checkpoint"]
    code: NotRequired[Doc[Optional[dict], "the code the run ran, captured at its first launch: fingerprint, path, "
                                          "files and their sha256s, bytes, airetrain's version and commit"]]
    tracking: NotRequired[Doc[dict, "each tracker's end of the run (its summary, the job ids and the weights' paths "
                                    "sent): ended, and the error where it could not be"]]


RECORDS = {"plan.json": Plan, "health.json": HealthRecord, "stage.json": StageRecord, "train.json": TrainRecord,
           "checkpoint.json": CheckpointRecord, "run.json": RunRecord, STOPPED: StopRecord}


def _nested(kind) -> dict[str, type]:
    """The fields of kind whose values are records of this module themselves."""
    hints = typing.get_type_hints(kind)
    kinds = {k: _record_type(t) for k, t in hints.items()}
    return {k: t for k, t in kinds.items() if t is not None}


def _record_type(tp):
    inner = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) is typing.Union else [tp]
    tp = inner[0] if len(inner) == 1 else None
    if tp is not None and (typing.is_typeddict(tp) or dataclasses.is_dataclass(tp)) and tp.__module__ == __name__:
        return tp
    return None


def check(kind, data: dict, where: str = "") -> dict:
    """data, if its keys are exactly kind's (nested records too); else RecordError naming the keys."""
    if dataclasses.is_dataclass(kind):
        from_dict(kind, data, where)
        return data
    name = where or kind.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{name}: expected an object with the fields of {kind.__name__}, got {type(data).__name__}")
    missing = sorted(kind.__required_keys__ - data.keys())
    unknown = sorted(data.keys() - kind.__required_keys__ - kind.__optional_keys__)
    if missing or unknown:
        raise RecordError(f"{name} is not a {kind.__name__}: " + "; ".join(
            part for part in (missing and f"missing {', '.join(missing)}",
                              unknown and f"unknown {', '.join(unknown)}") if part))
    for key, sub in _nested(kind).items():
        if data.get(key) is not None:
            check(sub, data[key], f"{name}.{key}")
    return data


def write_record(path: str | Path, kind, data) -> None:
    """Write a record: a dict of a TypedDict kind, or a dataclass record."""
    if dataclasses.is_dataclass(data):
        data = to_dict(data)
    write_json_atomic(path, check(kind, data, str(path)))


def read_record(path: str | Path, kind):
    """A record read back: the dict of a TypedDict kind, or the dataclass record (a Plan)."""
    data = read_json(path)
    if dataclasses.is_dataclass(kind):
        return from_dict(kind, data, str(path))
    return check(kind, data, str(path))


def read_plan(results_dir: str | Path) -> Plan | None:
    """The plan of results/<run>/, or None where there is none yet."""
    path = Path(results_dir) / "plan.json"
    return read_record(path, Plan) if path.exists() else None


def fields(kind) -> dict[str, str]:
    """Each field of kind (its key in the file) and its doc."""
    from .typed import key_of

    hints = typing.get_type_hints(kind, include_extras=True)
    plain = {k: typing.get_args(t)[0] if typing.get_origin(t) is NotRequired else t for k, t in hints.items()}
    required = kind.__required_keys__ if typing.is_typeddict(kind) else plain.keys()
    return {key_of(k): t.__metadata__[0] + ("" if k in required else " (not always present)")
            for k, t in plain.items()}


def outputs_markdown() -> str:
    """docs/outputs.md: every record's fields, from the definitions above."""
    lines = ["# Files between the steps", "",
             "Generated from `airetrain/records.py` by `python -m airetrain.records > docs/outputs.md`;",
             "a test fails when the two differ.", ""]
    seen = []
    for filename, kind in RECORDS.items():
        lines += [f"## `{filename}`: {kind.__name__}", "", kind.__doc__.strip(), "", "| field | what |",
                  "| --- | --- |"]
        lines += [f"| `{k}` | {doc} |" for k, doc in fields(kind).items()]
        lines.append("")
        seen += [t for t in _nested(kind).values() if t not in seen]
    for kind in seen:
        lines += [f"### {kind.__name__}", "", "| field | what |", "| --- | --- |"]
        lines += [f"| `{k}` | {doc} |" for k, doc in fields(kind).items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(outputs_markdown())
