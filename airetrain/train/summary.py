"""train.json: the figures of the finished session, gathered over the ranks."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch

from ..cluster import slurm
from ..checkpoint.manager import Checkpointer
from ..records import TrainRecord
from ..rundir import batch_changes
from . import efficiency
from .parallel import process_group
from .progress import Progress
from .session import Session


def gathered_figures(d: process_group.Dist, progress: Progress, gpu: dict) -> dict:
    """The figures that need every rank: data wait (mean), peak memory (max), GPU use (mean).
    Collectives: every rank calls this."""
    wait_frac = process_group.reduce([progress.wait_s / progress.step_s if progress.step_s else 0.0])[0]
    peak = process_group.reduce([process_group.peak_memory_bytes(d.device)], op=torch.distributed.ReduceOp.MAX)[0]
    util = gpu["gpu_util_mean"]
    util = process_group.reduce([util or 0.0])[0] / d.world_size if util is not None else None
    # every rank calls it, with or without a counter: the sum where every rank's GPU has one
    energy, counted = process_group.reduce([gpu.get("gpu_energy_j") or 0.0, gpu.get("gpu_energy_j") is not None])
    return {"data_wait_frac": wait_frac / d.world_size, "peak_mem_bytes": int(peak), "gpu_util_mean": util,
            "gpu_mem_peak_bytes": gpu["gpu_mem_peak_bytes"],
            "gpu_energy_j": round(energy, 1) if counted == d.world_size else None}


def _per_step(seconds: float, steps: int) -> float | None:
    return round(seconds / steps, 6) if steps else None


def _steady(progress: Progress, train_s: float, global_batch: int, meta: dict, flops_per_step: int,
            peak_flops: float | None, world: int) -> dict:
    """The figures of the steps after the warm-up (progress.warmup_steps): what the run sustains,
    without compilation and first iterations (the saves' stalls stay in, as they do in training)."""
    steps = progress.steps - progress.warmup_steps
    seconds = train_s - progress.warmup_s if progress.warmup_s is not None else None
    if not steps or not seconds or seconds <= 0:
        return {"warmup_steps": progress.warmup_steps, "warmup_s": None, "steady_steps": 0, "steady_s": None,
                "steady_samples_per_s": None, "steady_tokens_per_s": None, "steady_achieved_tflops": None,
                "steady_mfu": None}
    achieved = flops_per_step * steps / seconds
    mfu = achieved / (peak_flops * world) if peak_flops else None
    return {"warmup_steps": progress.warmup_steps, "warmup_s": round(progress.warmup_s, 3), "steady_steps": steps,
            "steady_s": round(seconds, 3), "steady_samples_per_s": round(steps * global_batch / seconds, 2),
            "steady_tokens_per_s": round(steps * global_batch * meta["seq_len"] / seconds, 1)
            if "seq_len" in meta else None,
            "steady_achieved_tflops": round(achieved / 1e12, 3),
            "steady_mfu": float(f"{mfu:.4g}") if mfu else None}


@dataclass(frozen=True)
class Finish:
    """What the end of a session measured, beside the session itself and its progress."""
    train_s: float               # the training loop's seconds, save stalls included
    final_wait_s: float          # the last save's background tail, after the loop
    figures: dict                # gathered_figures: data wait, peak memory, GPU use over the ranks
    evaluation: dict | None      # evaluate's loss and metrics; None without a test split
    hosts: list[str]             # every rank's host
    eval_s: float = 0.0          # seconds of this session's evaluations, outside train_s
    evaluations: int = 0         # evaluations this session made
    tracking: dict | None = None  # each tracker's run ids and figures logged, skipped and lost (tracking.trackers)
    health: dict | None = None   # the node check's seconds, the links' bandwidth, each rank's step time, stragglers


def already_trained(plan, record: TrainRecord) -> TrainRecord | None:
    """The finished training's own record, where this session resumed at its end and trained nothing
    (results/<run>/ removed, or --forcerun): its figures, not this session's nulls. None otherwise."""
    from ..fsutil import read_json
    from ..rundir.run_log import trained_record_path

    path = trained_record_path(plan)
    if record["steps_this_session"] or not path.exists() or plan.config.evaluate:   # an evaluation trains nothing
        return None
    previous = read_json(path)
    same_end = (previous.get("checkpoint") or {}).get("sha256") == (record["checkpoint"] or {}).get("sha256")
    return previous if previous.get("steps") == record["steps"] and same_end else None


def _final_evaluation(evaluation: dict | None) -> dict:
    """train.json's figures of the final evaluation (on the test split; None: there is none)."""
    evaluated = evaluation or {"loss": None, "metrics": {}}
    return {"eval_loss": evaluated["loss"], "eval_accuracy": evaluated["metrics"].get("accuracy"),
            "eval_metrics": evaluated["metrics"], "eval_samples": evaluated.get("samples")}


def train_record(s: Session, progress: Progress, checkpoints: Checkpointer, end: Finish) -> TrainRecord:
    """What rank 0 writes to train.json, for the session s (train/session.py). progress: this
    session's steps, seconds and last loss; checkpoints: the checkpointer (its final checkpoint and
    the stall of each save)."""
    plan, meta, figures, steps, train_s = s.plan, s.data.meta, end.figures, progress.steps, end.train_s
    batch, world, peak_flops = plan.batch, plan.world_size, efficiency.peak_flops(s.d.device)
    flops_per_step = s.flops_per_micro * batch.grad_accum * world          # the whole job, one optimizer step
    achieved = flops_per_step * steps / train_s if steps else None
    mfu = achieved / (peak_flops * world) if achieved and peak_flops else None
    samples = steps * batch.global_
    steady = _steady(progress, train_s, batch.global_, meta, flops_per_step, peak_flops, world)
    stalls, changed = checkpoints.stalls, batch_changes.changes(plan.durable_dir)
    return TrainRecord(
        run=plan.run, world_size=world, nodes=plan.nodes, strategy=plan.strategy,
        precision=plan.precision, device=plan.device,
        global_batch=batch.global_, per_device_batch=batch.per_device, grad_accum=batch.grad_accum,
        steps=s.position.step, steps_this_session=steps, seed=plan.config.train.seed, epochs=plan.config.train.epochs,
        steps_per_epoch=s.data.steps_per_epoch,
        resumed_from_step=s.position.step - steps,
        train_seconds=round(train_s, 3),
        samples_per_s=round(samples / train_s, 2) if steps else None,
        tokens_per_s=round(samples * meta["seq_len"] / train_s, 1) if steps and "seq_len" in meta else None,
        step_time_s=_per_step(progress.step_s, steps),
        data_wait_s_per_step=_per_step(progress.wait_s, steps),
        compute_s_per_step=_per_step(progress.step_s - progress.wait_s, steps),
        flops_per_step=flops_per_step,
        achieved_tflops=round(achieved / 1e12, 3) if achieved else None,
        mfu=float(f"{mfu:.4g}") if mfu else None,   # significant digits: a tiny model's MFU is not 0
        peak_tflops_per_gpu=peak_flops / 1e12 if peak_flops else None,
        **steady,
        gpu_name=torch.cuda.get_device_name(s.d.device) if s.d.device.type == "cuda" else None,
        **{key: figures[key] for key in ("gpu_util_mean", "gpu_energy_j", "gpu_mem_peak_bytes")},
        memory_estimate=plan.memory_estimate,
        activation_checkpointing=plan.activation_checkpointing,
        parallel_units=s.par.units.describe(),
        data_wait_frac=round(figures["data_wait_frac"], 4),
        peak_mem_bytes=figures["peak_mem_bytes"],
        final_loss=progress.loss if steps else None,
        **_final_evaluation(end.evaluation),
        eval_s=round(end.eval_s, 3),
        evaluations=end.evaluations,
        best=s.monitor.best if s.monitor else None,
        init=s.init, evaluates=s.plan.config.evaluate,
        parameters=s.parameters,
        stopped_early=s.monitor.stopped_early(s.position.step, s.position.epoch) if s.stops_early else None,
        slurm_job_id=slurm.job_id(), slurm_step=slurm.packed_step(),
        hostnames=end.hosts,
        launch_host=socket.gethostname(),
        torch_version=torch.__version__,
        environment={k: os.environ.get(k) for k in (*plan.env, "NCCL_SOCKET_IFNAME")},
        checkpoint=checkpoints.latest,
        checkpoint_saves=len(stalls),
        checkpoint_writer=checkpoints.path.kind,
        checkpoint_writer_reason=checkpoints.path.reason,
        checkpoint_stall_s_mean=round(sum(stalls) / len(stalls), 4) if stalls else None,
        checkpoint_final_wait_s=round(end.final_wait_s, 3),
        **({"tracking": end.tracking} if end.tracking else {}),
        **({"health": end.health} if end.health else {}),
        **({"batch_changes": changed} if changed else {}),
    )
