"""The training, read top to bottom: set up a session, train it, finish it.

Run by torchrun (scripts/train.py): every rank executes this file; rank 0 logs and writes.
The loop hands off to: session (the model, optimizer, schedule and data, and where training
stands), step (one optimizer step), checkpoint.manager (when to save, saving and resuming),
stopping (deadline, SIGTERM), progress (log lines, metrics.jsonl, TensorBoard curves), watchdog
(hangs), evaluate and summary (train.json).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import run_log
from ..hardware import NATIVE_BF16_FLAGS, cpu_bf16_native
from ..checkpoint.manager import Checkpointer
from ..fsutil import write_json_atomic
from ..records import STOPPED, Plan, StageRecord, StopRecord, TrainRecord, read_record, write_record
from ..restart import trained_record_path
from . import efficiency, finetune, session as sessions, summary, watchdog
from .curves import Curves
from .evaluate import Evaluator
from .parallel import process_group as distributed
from .parallel.wrap import Parallel
from .progress import Progress
from .session import Session
from .step import train_step
from .deadline import Stopper

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


def main(argv=None) -> Trained:
    args = parse_args(argv)
    s, ckpt = set_up(read_record(args.plan, Plan), read_record(args.stage, StageRecord), Path(args.out))
    stopper = Stopper(s.d.is_main, 60 * s.plan.config.checkpoint.stop_margin_min)
    progress = progress_of(s, Path(args.out))
    hang = watchdog.start(s.d, s.plan)   # every rank's heartbeat: steps, saves, evaluation batches
    evaluator = Evaluator(s, progress, hang)
    stopped = train(s, ckpt, stopper, progress, hang, evaluator)
    stopper.close()
    finish(s, ckpt, stopped, progress, hang, evaluator, Path(args.out))
    # Every rank is done and every file is written. The process group is not destroyed here:
    # tearing gloo down has deadlocked on the GIL (its worker thread freeing a finished
    # all-gather while the main thread joined it); scripts/train.py ends the process instead.
    torch.distributed.barrier()
    return Trained(s.par, s.optimizer, s.d)


def train(s: Session, ckpt: Checkpointer, stopper: Stopper, progress: Progress, hang,
          evaluator: Evaluator) -> str | None:
    """The loop: optimizer steps to the end of the last epoch, each followed by the evaluation and
    the save their schedules ask for; the reason if it stopped early."""
    per_epoch = s.data.steps_per_epoch
    while not s.finished:
        batches = s.data.epoch(s.position.epoch, s.position.step_in_epoch, s.plan.batch.grad_accum,
                               s.plan.batch.per_device)
        progress.new_epoch()
        while s.position.step_in_epoch < per_epoch:
            t0 = time.perf_counter()
            loss, wait_s, norm = train_step(s, batches, progress.logs(s.position.step + 1))
            s.position = s.position.stepped()
            progress.step_done(s.position.step, s.position.epoch, loss, wait_s, time.perf_counter() - t0, norm)
            hang.beat(s.position.step)
            best = evaluator.after_step()
            # stop (deadline, SIGTERM: to resume; early stopping: trained) with a durable checkpoint;
            # otherwise save on schedule, and at every new best
            if stopped := stopper.poll():
                log.warning("stopping (%s) after step %d", stopped, s.position.step)   # every rank says it
                ckpt.save(s.trainer_state(), blocking=True)
                hang.beat()
                return stopped
            if s.stops_early:
                log.info("early stopping after step %d: %s has not improved for %d evaluations (best: %s)",
                         s.position.step, s.monitor.metric, s.monitor.since, s.monitor.best)
                ckpt.save(s.trainer_state(), blocking=True)
                hang.beat()
                return None
            if ckpt.save_if_due(s.position, per_epoch, s.trainer_state, now=best):
                hang.beat()
        s.position = s.position.next_epoch()
    return None


def start_process(plan: Plan) -> distributed.Dist:
    """Join the process group; logging (rank 0 at INFO), threads and determinism as the plan says."""
    # the collectives' timeout outlasts the hang watchdog's, so that the watchdog reports a hang first
    hang_min = plan.config.train.hang_timeout_min
    d = distributed.setup(plan.device, 60 * hang_min + 300 if hang_min else None)
    logging.basicConfig(level=logging.INFO if d.is_main else logging.WARNING, stream=sys.stdout,
                        format=f"[rank {d.rank}] %(message)s")
    torch.set_num_threads(plan.cpus_per_rank)
    if d.is_main and plan.device == "cpu" and plan.precision == "bf16" and cpu_bf16_native() is False:
        log.warning("precision bf16 on a CPU without native bf16 (no %s): autocast emulates it, several times "
                    "slower than fp32 here; precision: fp32 trains faster on this machine",
                    " or ".join(NATIVE_BF16_FLAGS))
    if plan.config.train.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)   # a warning names any op that cannot be
        torch.backends.cudnn.benchmark = False
    return d


def set_up(plan: Plan, staged: StageRecord, out: Path) -> tuple[Session, Checkpointer]:
    """The session, resumed from the newest checkpoint that verifies (on the fast root or on scratch)."""
    d = start_process(plan)
    s = sessions.build(plan, staged, d)
    init = init_source(plan, d)
    ckpt = Checkpointer(d, s.par, s.optimizer, plan, Path(staged["fast_root"]),
                        fast_node_local=staged["fast_root_source"] == "$TMPDIR", init_sha256=init and init[1])
    sessions.seed_all(plan.config.train.seed + 1000 * d.rank)   # dropout differs per rank; a resume restores it
    trainer = ckpt.restore()
    s.resume(trainer)
    if init and trainer is None:   # a fresh start of a fine-tune; a resumed one has its own weights
        s.init = finetune.load(s.par, init[0], init[1], plan.config.model.init_strict, d)
    s.par.settle_buckets(s.objective, s.probe, plan.precision)   # a resumed session reduces as a fresh one does
    s.hosts = distributed.hostnames()
    if d.is_main:
        run_log.record_session(plan.durable_dir, os.environ.get("SLURM_JOB_ID"), s.position.step, s.hosts,
                               ckpt.latest["path"] if ckpt.latest and s.position.step else None)
        (out / STOPPED).unlink(missing_ok=True)
    b = plan.batch
    if plan.config.evaluate:
        log.info("evaluating %s: run %s's weights, world %d, %s", plan.run, plan.config.evaluate["run"],
                 d.world_size, plan.precision)
        return s, ckpt
    log.info("training %s: world %d, %d steps/epoch x %d epochs, global batch %d = %d x %d x %d, %s", plan.run,
             d.world_size, s.data.steps_per_epoch, plan.config.train.epochs, b.global_, b.per_device, d.world_size,
             b.grad_accum, plan.precision)
    return s, ckpt


def init_source(plan: Plan, d: distributed.Dist) -> tuple[Path, str] | None:
    """model.init_from's file and its sha256 (hashed by rank 0, known to every rank); None without one."""
    path = finetune.source_path(plan.config.model.init_from, plan.roots.scratch)
    if path is None:
        return None
    found = [None]
    if d.is_main:
        found = [finetune.digest(path) if path.exists() else f"missing: {path} does not exist"]
    torch.distributed.broadcast_object_list(found, src=0)
    if found[0].startswith("missing: "):
        raise FileNotFoundError(f"model.init_from: {found[0].removeprefix('missing: ')}")
    return path, found[0]


def progress_of(s: Session, out: Path) -> Progress:
    """This session's log lines, metrics.jsonl and (rank 0) TensorBoard curves."""
    s.gpu = efficiency.GpuSampler(s.d.device)
    curves = Curves(out / "tensorboard", s.position.step) if s.d.is_main and s.plan.config.train.tensorboard \
        else None
    return Progress(s.d, s.plan, s.total_steps, out / "metrics.jsonl", curves,
                    lambda: {"lr": s.optimizer.param_groups[0]["lr"], **s.gpu.latest()}, start_step=s.position.step)


def finish(s: Session, ckpt: Checkpointer, stopped: str | None, progress: Progress, hang, evaluator: Evaluator,
           out: Path) -> None:
    """The last save made durable, then STOPPED (to resume later) or the evaluation and train.json."""
    d, step = s.d, s.position.step
    # throughput counts the training steps and the save stalls, not the last write's background tail
    train_s = efficiency.now(d.device) - progress.t_start
    saved = ckpt.finish()
    hang.beat()
    final_wait_s = efficiency.now(d.device) - progress.t_start - train_s
    if stopped:
        if d.is_main:
            write_record(out / STOPPED, StopRecord, {"reason": stopped, "step": step, "of_steps": s.total_steps,
                                                    "checkpoint": saved, "time": time.time()})
            log.info("stopped (%s) at step %d of %d; checkpoint %s is durable: the run resumes from it",
                     stopped, step, s.total_steps, saved["path"])
    else:
        gpu_figures = s.gpu.summary()
        evaluation = evaluator.final()
        figures = summary.gathered_figures(d, progress, gpu_figures)
        if d.is_main:
            record = summary.train_record(s, progress, ckpt, summary.Finish(train_s, final_wait_s, figures,
                                                                            evaluation, s.hosts, evaluator.seconds,
                                                                            evaluator.count))
            if kept := summary.already_trained(s.plan, record):
                log.info("already trained: %s resumed at its last step (%d) and trained nothing; train.json keeps "
                         "its training's figures (airetrain restart %s trains it again from step 0)",
                         s.plan.run, step, s.plan.run)
                record = kept
            write_record(out / "train.json", TrainRecord, record)
            write_json_atomic(trained_record_path(s.plan), record)   # kept on scratch, for a later rerun
            loss = f"{record['eval_loss']:.4f}" if record["eval_loss"] is not None else "- (no test split)"
            if s.plan.config.evaluate:   # an evaluation run trained nothing and saved nothing
                log.info("done: evaluated run %s's weights (%s): eval loss %s", s.plan.config.evaluate["run"],
                         s.plan.config.evaluate["which"], loss)
            else:
                log.info("done: %d steps, eval loss %s, %.0f samples/s, checkpoint %s", step, loss,
                         record["samples_per_s"] or 0, saved["path"])
    progress.close()
    hang.stop()
