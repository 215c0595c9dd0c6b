"""Script mode: the user's own torchrun script, launched exactly as the built-in trainer is.

The script is not modified. It learns where things are from the environment (script_env), and
whatever it writes to AIRETRAIN_CHECKPOINT_DIR is made durable on scratch while it runs and when
it ends (checkpoint/mirror.py). train.json then records the launch and what the script's own
metrics.jsonl says, and names the mirrored checkpoint directory for the promote step.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ...checkpoint import store
from ...checkpoint.mirror import Mirror
from ...environment import expand_script_args
from ...records import STOPPED, Plan, StageRecord, TrainRecord, read_record, write_record
from ...roots import run_dir
from ...run_log import record_session
from ... import slurm
from ...slurm import remaining_seconds
from . import launch


def script_env(plan: Plan, staged: dict, out: Path, checkpoints: Path) -> dict:
    env = {
        "AIRETRAIN_RUN": plan.run,
        "AIRETRAIN_DATA_DIR": staged["target"] or "",
        "AIRETRAIN_CHECKPOINT_DIR": str(checkpoints),
        "AIRETRAIN_DURABLE_DIR": str(plan.checkpoints_dir),
        "AIRETRAIN_RESULTS_DIR": str(Path(out).absolute()),
        "AIRETRAIN_STOP_MARGIN_S": str(60 * plan.config.checkpoint.stop_margin_min),
    }
    job = os.environ.get("SLURM_JOB_ID")
    left = remaining_seconds(job) if job else None
    if left is not None:   # airetrain.job keeps it current from squeue; this is the value at the start
        env["AIRETRAIN_END_TIME"] = str(time.time() + left)
    return env


def _metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip().startswith("{")]


def run_script(plan: Plan, stage_path: str, out: str) -> int:
    staged = read_record(stage_path, StageRecord)
    out = Path(out)
    checkpoints = run_dir(Path(staged["fast_root"]), plan.run) / "checkpoints"   # the fast root staging used
    checkpoints.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").touch()
    mirror = Mirror(checkpoints, plan.checkpoints_dir)
    # this start of the script, with the newest durable file it may resume from (a requeued job's fast
    # root is new and empty): the script alone knows its step
    durable = sorted(mirror.files)
    record_session(plan.durable_dir, slurm.job_id(), None, [socket.gethostname()],
                   str(plan.checkpoints_dir / durable[-1]) if durable else None)
    mirror.start()
    result: dict = {}
    t0 = time.time()

    def after_exit():
        result["files"] = mirror.finish()
        print(f"checkpoint directory {checkpoints}: {len(result['files'])} file(s) durable in "
              f"{plan.checkpoints_dir}, sha256 verified", flush=True)

    script, env = plan.script, script_env(plan, staged, out, checkpoints)
    code = launch.run(plan, str(script.path), expand_script_args(script.args, env), str(out), env, after_exit)
    if code == 0 and not (out / STOPPED).exists():
        write_record(out / "train.json", TrainRecord, script_train_record(plan, _metrics(out), time.time() - t0,
                                                                          result["files"]))
    return code


def script_train_record(plan: Plan, metrics: list[dict], seconds: float, files: dict) -> TrainRecord:
    """train.json of a script run: the plan's layout, the script's own last metrics line, and the
    mirrored checkpoint directory. The trainer's own figures (FLOPs, GPU sampling) are not known."""
    last = next((m for m in reversed(metrics) if "step" in m), {})
    evaluated = next((m for m in reversed(metrics) if m.get("eval_loss") is not None), {})

    def latest(key: str):   # a line has some figures (a step's, an evaluation's): each from its newest line
        return next((m[key] for m in reversed(metrics) if m.get(key) is not None), None)
    batch = plan.batch
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
        steps_this_session=None, seed=plan.config.train.seed, epochs=plan.config.train.epochs, resumed_from_step=None,
        train_seconds=round(seconds, 3), samples_per_s=latest("samples_per_s"),
        memory_estimate=None, activation_checkpointing=False, parallel_units={}, final_loss=latest("loss"),
        eval_loss=evaluated.get("eval_loss"), eval_accuracy=evaluated.get("eval_accuracy"),
        checkpoint_writer="script", checkpoint_writer_reason="the script writes its own checkpoints; the launcher "
                                                            "mirrors them to scratch",
        eval_metrics={k[5:]: v for k, v in evaluated.items() if k.startswith("eval_") and k != "eval_loss"},
        slurm_job_id=slurm.job_id(), hostnames=[], launch_host=socket.gethostname(),
        torch_version=None, environment={k: os.environ.get(k) for k in plan.env}, checkpoint=checkpoint,
        checkpoint_saves=len(files), checkpoint_final_wait_s=0.0)
