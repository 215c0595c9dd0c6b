"""Script mode: the user's own torchrun script, launched exactly as the built-in trainer is.

The script is not modified. It learns where things are from the environment (script_env), and
whatever it writes to AIRETRAIN_CHECKPOINT_DIR is made durable on scratch while it runs and when
it ends (checkpoint/mirror.py). train.json then records the launch and what the script's own
metrics.jsonl says, and names the mirrored checkpoint directory for the promote step.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ...rundir import metrics_log
from ...checkpoint import store
from ...checkpoint.mirror import Mirror
from ...environment import expand_script_args, gives_batch
from ...fsutil import write_json_atomic
from ...records import STOPPED, Plan, StageRecord, TrainRecord, read_record, write_record
from ...roots import run_dir
from ...rundir.run_log import record_session, starts
from ...cluster import slurm
from ...cluster.slurm import remaining_seconds
from ...tracking import trackers
from . import launch

PARAMS = "params.json"   # in results/<run>/: the run's params: ($AIRETRAIN_PARAMS, job.params())


def script_env(plan: Plan, staged: dict, out: Path, checkpoints: Path, resumable: str | None = None) -> dict:
    """resumable: the newest durable checkpoint file at the launch (a script that starts from step 0 beside it
    is named)."""
    config, out = plan.config, Path(out).absolute()
    env = {
        "AIRETRAIN_RUN": plan.run,
        "AIRETRAIN_DATA_DIR": staged["target"] or "",
        "AIRETRAIN_CHECKPOINT_DIR": str(checkpoints),
        "AIRETRAIN_DURABLE_DIR": str(plan.checkpoints_dir),
        "AIRETRAIN_RESULTS_DIR": str(out),
        "AIRETRAIN_STOP_MARGIN_S": str(60 * config.checkpoint.stop_margin_min),
        "AIRETRAIN_SEED": str(config.train.seed),
        "AIRETRAIN_PARAMS": str(out / PARAMS),
        "AIRETRAIN_RUN_DIR": str(plan.durable_dir),
        "AIRETRAIN_RESUMABLE": resumable or "",
    }
    if out.name != plan.run:   # a search's rung (results/<trial>-e<epochs>/): the epochs it trains to
        env["AIRETRAIN_MAX_EPOCHS"] = str(config.train.epochs)
    if gives_batch(config.train.args):   # the batch maths was checked only where the script is given the batch
        b = plan.batch
        env.update({"AIRETRAIN_BATCH_PER_DEVICE": str(b.per_device), "AIRETRAIN_BATCH_GLOBAL": str(b.global_),
                    "AIRETRAIN_GRAD_ACCUM": str(b.grad_accum)})
    job = os.environ.get("SLURM_JOB_ID")
    left = remaining_seconds(job) if job else None
    if left is not None:   # airetrain.job keeps it current from squeue; this is the value at the start
        env["AIRETRAIN_END_TIME"] = str(time.time() + left)
    return env


def _metrics(out: Path) -> list[dict]:
    return metrics_log.read(out / metrics_log.NAME)


def run_script(plan: Plan, stage_path: str, out: str) -> int:
    staged = read_record(stage_path, StageRecord)
    out = Path(out)
    checkpoints = run_dir(Path(staged["fast_root"]), plan.run) / "checkpoints"   # the fast root staging used
    checkpoints.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / PARAMS, plan.config.params)
    mirror = Mirror(checkpoints, plan.checkpoints_dir)
    # this start of the script, with the newest durable file it may resume from (a requeued job's fast
    # root is new and empty): the script alone knows its step (airetrain.job records it in starts.jsonl)
    durable = sorted(mirror.files, key=lambda rel: mirror.files[rel]["mtime_ns"])
    newest = str(plan.checkpoints_dir / durable[-1]) if durable else None
    record_session(plan.durable_dir, slurm.job_id(), None, [socket.gethostname()], newest)
    mirror.start()
    # the workflow's folder is the project's, as for the built-in trainer's trackers
    follower = trackers.follow(plan, Path.cwd(), out / "metrics.jsonl")
    result: dict = {}
    t0 = time.time()

    def after_exit():
        result["files"] = mirror.finish()
        print(f"checkpoint directory {checkpoints}: {len(result['files'])} file(s) durable in "
              f"{plan.checkpoints_dir}, sha256 verified", flush=True)
        if follower:   # every line the script logged: sent, or counted lost
            result["tracking"] = trackers.closed(follower.finish())
            print(f"tracking: {result['tracking']}", flush=True)

    script, env = plan.script, script_env(plan, staged, out, checkpoints, newest)
    code = launch.run(plan, str(script.path), expand_script_args(script.args, env), str(out), env, after_exit)
    if code == 0 and not (out / STOPPED).exists():
        record = script_train_record(plan, _metrics(out), time.time() - t0, result["files"])
        write_record(out / "train.json", TrainRecord, {**record, **({"tracking": result["tracking"]}
                                                                    if result.get("tracking") else {})})
    return code


def script_sessions(plan: Plan) -> list[dict]:
    """The run's script sessions as airetrain.job recorded their starts: the step each resumed from."""
    try:
        found = starts(plan.durable_dir)
    except ValueError:   # a line cut by a kill
        found = []
    return [{k: s.get(k) for k in ("slurm_job_id", "step", "checkpoint", "started_over")} for s in found]


def script_train_record(plan: Plan, metrics: list[dict], seconds: float, files: dict) -> TrainRecord:
    """train.json of a script run: the plan's layout, the script's own last metrics line, and the
    mirrored checkpoint directory. The trainer's own figures (FLOPs, GPU sampling) are not known."""
    last = next((m for m in reversed(metrics) if "step" in m), {})
    evaluated = next((m for m in reversed(metrics) if m.get("eval_loss") is not None), {})

    def latest(key: str):   # a line has some figures (a step's, an evaluation's): each from its newest line
        return next((m[key] for m in reversed(metrics) if m.get(key) is not None), None)
    batch, sessions = plan.batch, script_sessions(plan)
    checkpoint = {"file": "", "kind": store.MIRROR, "step": last.get("step"), "epoch": None,
                  "size": sum(f["size"] for f in files.values()),
                  "sha256": store.digest_of({rel: f["sha256"] for rel, f in files.items()}),
                  "files": {rel: f["sha256"] for rel, f in files.items()}, "fingerprint": None,
                  "path": str(plan.checkpoints_dir)}
    unknown = dict.fromkeys(("tokens_per_s", "step_time_s", "data_wait_s_per_step", "compute_s_per_step",
                             "flops_per_step", "achieved_tflops", "mfu", "peak_tflops_per_gpu", "gpu_util_mean",
                             "gpu_mem_peak_bytes", "data_wait_frac", "peak_mem_bytes", "checkpoint_stall_s_mean",
                             "warmup_steps", "warmup_s", "steady_steps",
                             "steady_s", "steady_samples_per_s", "steady_tokens_per_s", "steady_achieved_tflops",
                             "steady_mfu"))
    return TrainRecord(
        **unknown, run=plan.run, world_size=plan.world_size, nodes=plan.nodes, strategy="script",
        precision=plan.precision, device=plan.device, global_batch=batch.global_,
        per_device_batch=batch.per_device, grad_accum=batch.grad_accum, steps=last.get("step"),
        steps_this_session=None, seed=plan.config.train.seed, epochs=plan.config.train.epochs,
        resumed_from_step=sessions[-1]["step"] if sessions else None, sessions=sessions,
        train_seconds=round(seconds, 3), samples_per_s=latest("samples_per_s"),
        memory_estimate=None, activation_checkpointing=False, parallel_units={}, final_loss=latest("loss"),
        eval_loss=evaluated.get("eval_loss"), eval_accuracy=evaluated.get("eval_accuracy"),
        checkpoint_writer="script", checkpoint_writer_reason="the script writes its own checkpoints; the launcher "
                                                            "mirrors them to scratch",
        eval_metrics={k[5:]: v for k, v in evaluated.items() if k.startswith("eval_") and k != "eval_loss"},
        slurm_job_id=slurm.job_id(), hostnames=[], launch_host=socket.gethostname(),
        torch_version=None, environment={k: os.environ.get(k) for k in plan.env}, checkpoint=checkpoint,
        checkpoint_saves=len(files), checkpoint_final_wait_s=0.0)
