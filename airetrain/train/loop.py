"""The training loop, read top to bottom: set-up, data, model, resume, loop, evaluate, train.json.

Run by torchrun (scripts/train.py): every rank executes this file; rank 0 logs and writes.
The loop hands off to: loader (the data, resumable mid-epoch), optim (optimizer and LR schedule),
step (one optimizer step), progress (log lines, metrics.jsonl, TensorBoard curves), checkpoint.policy (when to save),
checkpoint.manager (saving and resuming), stopping (deadline, SIGTERM), evaluate and summary.
"""
from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import run_log
from ..checkpoint.manager import Checkpointer
from ..checkpoint.policy import Position, SavePolicy
from ..records import STOPPED, PlanRecord, StageRecord, StopRecord, TrainRecord, read_record, write_record
from . import efficiency, summary, watchdog
from .parallel import process_group as distributed
from .batches import first_batch
from .curves import Curves
from .evaluate import evaluate
from .loader import training_data
from .models import build_model
from .objective import Objective
from .optim import make_optimizer, make_scheduler
from .parallel.wrap import Parallel
from .progress import Progress
from .step import train_step
from .stopping import Stopper

log = logging.getLogger("airetrain.train")


@dataclass
class Trained:
    """What main returns to a caller that runs it in-process: the model, its optimizer, the process."""
    par: Parallel
    optimizer: torch.optim.Optimizer
    d: distributed.Dist


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="airetrain trainer (run under torchrun)")
    p.add_argument("--plan", required=True, help="results/<run>/plan.json")
    p.add_argument("--stage", required=True, help="results/<run>/stage.json (where the data was staged)")
    p.add_argument("--out", required=True, help="directory for train.json and metrics.jsonl")
    return p.parse_args(argv)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start_process(plan: dict) -> distributed.Dist:
    """Join the process group; logging (rank 0 at INFO), threads and determinism as the plan says."""
    # the collectives' timeout outlasts the hang watchdog's, so that the watchdog reports a hang first
    hang_min = plan["config"]["train"]["hang_timeout_min"]
    d = distributed.setup(plan["device"], 60 * hang_min + 300 if hang_min else None)
    logging.basicConfig(level=logging.INFO if d.is_main else logging.WARNING, stream=sys.stdout,
                        format=f"[rank {d.rank}] %(message)s")
    torch.set_num_threads(plan["cpus_per_rank"])
    if plan["config"]["train"]["deterministic"]:
        torch.use_deterministic_algorithms(True, warn_only=True)   # a warning names any op that cannot be
        torch.backends.cudnn.benchmark = False
    return d


def resume(ckpt: Checkpointer, scheduler, scaler, steps_per_epoch: int) -> Position:
    """Load the newest checkpoint that verifies, if any, into the model, optimizer, scheduler and scaler."""
    resumed = ckpt.restore()
    if resumed:
        scheduler.load_state_dict(resumed["scheduler"])
        if resumed["scaler"]:
            scaler.load_state_dict(resumed["scaler"])
    return Position.resumed(resumed, steps_per_epoch)


def main(argv=None) -> Trained:
    args = parse_args(argv)
    plan, staged = read_record(args.plan, PlanRecord), read_record(args.stage, StageRecord)
    cfg, out, precision = plan["config"], Path(args.out), plan["precision"]
    d = start_process(plan)
    seed, epochs = cfg["train"]["seed"], cfg["train"]["epochs"]
    per_device, accum = plan["batch"]["per_device"], plan["batch"]["grad_accum"]
    data = training_data(plan, staged["target"], d)

    seed_all(seed)   # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = build_model(cfg["model"], data.meta).to(d.device)
    objective = Objective(cfg["train"], cfg["model"])
    probe = first_batch(data.train_set, per_device, d.device)
    flops_per_micro = efficiency.micro_batch_flops(model, objective, probe, d.device, precision)
    par = Parallel(model, plan, d.device)
    optimizer = make_optimizer(cfg["optim"], model.parameters(), d.device.type)
    total_steps = data.steps_per_epoch * epochs
    scheduler = make_scheduler(cfg["optim"], optimizer, total_steps)
    scaler = torch.amp.GradScaler(d.device.type, enabled=precision == "fp16")

    # resume from the newest checkpoint that verifies, on the fast root or on scratch
    ckpt = Checkpointer(d, par, optimizer, plan, Path(staged["fast_root"]), staged["fast_root_source"] == "$TMPDIR")
    seed_all(seed + 1000 * d.rank)   # dropout differs per rank; a resume restores each rank's state
    position = resume(ckpt, scheduler, scaler, data.steps_per_epoch)
    par.settle_buckets(objective, probe, precision)   # a resumed session reduces as an uninterrupted one does
    step, step_in_epoch, hosts = position.step, position.step_in_epoch, distributed.hostnames()
    if d.is_main:
        run_log.record_session(Path(plan["durable_dir"]).parent, os.environ.get("SLURM_JOB_ID"), step, hosts)
        (out / STOPPED).unlink(missing_ok=True)
    policy, stopper = SavePolicy.from_config(cfg), Stopper(d.is_main, 60 * cfg["checkpoint"]["stop_margin_min"])

    def trainer_state(epoch: int, step_in_epoch: int) -> dict:
        return {"step": step, "epoch": epoch, "step_in_epoch": step_in_epoch, "config": cfg,
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler.is_enabled() else None}

    log.info("training %s: world %d, %d steps/epoch x %d epochs, global batch %d = %d x %d x %d, %s", plan["run"],
             d.world_size, data.steps_per_epoch, epochs, plan["batch"]["global"], per_device, d.world_size, accum,
             precision)
    gpu = efficiency.GpuSampler(d.device)
    curves = Curves(out / "tensorboard", step) if d.is_main and cfg["train"]["tensorboard"] else None
    progress = Progress(d, plan, total_steps, out / "metrics.jsonl", curves,
                        lambda: {"lr": optimizer.param_groups[0]["lr"], **gpu.latest()}, start_step=step)
    hang = watchdog.start(d, plan)   # every rank's heartbeat: steps, saves, evaluation batches
    stopped = None
    for epoch in range(position.epoch, epochs):
        batches = data.epoch(epoch, step_in_epoch, accum, per_device)
        progress.new_epoch()
        for step_in_epoch in range(step_in_epoch + 1, data.steps_per_epoch + 1):
            t0 = time.perf_counter()
            loss, wait_s = train_step(par, objective, batches, optimizer, scaler, scheduler, accum, d.device, precision)
            step += 1
            progress.step_done(step, epoch, loss, wait_s, time.perf_counter() - t0)
            hang.beat(step)
            # stop early (deadline, SIGTERM) with a durable checkpoint; otherwise save on schedule
            if stopped := stopper.poll():
                log.warning("stopping (%s) after step %d", stopped, step)   # every rank says it
                ckpt.save(trainer_state(epoch, step_in_epoch), blocking=True)
                hang.beat()
                break
            if policy.due(step, epoch, epoch_end=step_in_epoch == data.steps_per_epoch):
                ckpt.save(trainer_state(epoch, step_in_epoch))
                hang.beat()
        step_in_epoch = 0
        if stopped:
            break
    stopper.close()
    # throughput counts the training steps and the save stalls, not the last write's background tail
    train_s = efficiency.now(d.device) - progress.t_start
    saved = ckpt.finish()
    hang.beat()
    final_wait_s = efficiency.now(d.device) - progress.t_start - train_s
    if stopped:
        if d.is_main:
            write_record(out / STOPPED, StopRecord, {"reason": stopped, "step": step, "of_steps": total_steps,
                                                    "checkpoint": saved, "time": time.time()})
            log.info("stopped (%s) at step %d of %d; checkpoint %s is durable: the run resumes from it",
                     stopped, step, total_steps, saved["path"])
    else:
        gpu_figures = gpu.summary()
        evaluation = evaluate(par, objective, data.test_set, d, precision, hang.beat)
        figures = summary.gathered_figures(d, progress, gpu_figures)
        progress.evaluated(evaluation)
        if d.is_main:
            record = summary.train_record(plan, data.meta, progress, step, figures, flops_per_micro,
                                          efficiency.peak_flops(d.device), train_s, ckpt, final_wait_s, evaluation,
                                          hosts, par.units.describe())
            write_record(out / "train.json", TrainRecord, record)
            log.info("done: %d steps, eval loss %s, %.0f samples/s, checkpoint %s", step,
                     f"{record['eval_loss']:.4f}" if evaluation else "- (no test split)",
                     record["samples_per_s"] or 0, saved["path"])
    progress.close()
    hang.stop()
    # Every rank is done and every file is written. The process group is not destroyed here:
    # tearing gloo down has deadlocked on the GIL (its worker thread freeing a finished
    # all-gather while the main thread joined it); scripts/train.py ends the process instead.
    torch.distributed.barrier()
    return Trained(par, optimizer, d)
