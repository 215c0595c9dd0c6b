"""The training, read top to bottom: set up a session, train it, finish it.

Run by torchrun (scripts/train.py): every rank executes this file; rank 0 logs and writes.
The loop hands off to the collaborators a Trainer holds: the session (the model, optimizer, schedule
and data, and where training stands), checkpoint.manager (when to save, saving and resuming),
deadline (the job's end, SIGTERM), evaluate, progress (log lines, metrics.jsonl, TensorBoard curves)
and the watchdog (hangs); step is one optimizer step, summary writes train.json.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..rundir import batch_changes, run_log
from ..cluster import slurm
from ..cluster.hardware import NATIVE_BF16_FLAGS, cpu_bf16_native
from ..checkpoint.manager import Checkpointer
from ..fsutil import write_json_atomic
from ..records import STOPPED, HealthRecord, Plan, StageRecord, StopRecord, TrainRecord, read_record, write_record
from ..rundir.run_log import trained_record_path
from ..tracking import trackers
from ..tracking.sender import Sender
from . import batch_fit, efficiency, finetune, session, summary, watchdog
from .curves import Curves
from .deadline import Stopper
from .evaluate import Evaluator
from .parallel import process_group
from .parallel.process_group import Dist
from .parallel.wrap import Parallel
from .progress import Progress
from .session import Session
from .step import train_step
from .links import allreduce_bandwidth
from .profiler import NotProfiled, StepProfiler
from .stragglers import Stragglers
from .watchdog import Off, Watchdog

log = logging.getLogger("airetrain.train")
STRAGGLER = "straggler"   # a stop to requeue without a straggler's node (health.exclude_stragglers)


@dataclass
class Trained:
    """What main returns to a caller that runs it in-process: the model, its optimizer, the process."""
    par: Parallel
    optimizer: torch.optim.Optimizer
    d: Dist


@dataclass
class Trainer:
    """The loop's collaborators, held in one place: the session (model, optimizer, data, where training
    stands) and what watches it, saves it and reports it."""
    session: Session
    checkpointer: Checkpointer      # when to save, saving in the background, resuming; beats the watchdog
    deadline: Stopper               # the job's end or SIGTERM: stop to resume later
    evaluator: Evaluator            # evaluations on schedule, the monitor's best
    progress: Progress              # log lines, metrics.jsonl, TensorBoard curves
    watchdog: Watchdog | Off        # hangs: every rank's heartbeat
    gpu: efficiency.GpuSampler      # this rank's GPU use, sampled while it trains
    stragglers: Stragglers          # each rank's own compute time, gathered at each log line
    profiler: StepProfiler | NotProfiled   # train.profile's window of steps, on the ranks it names
    health: dict                    # train.json's health: the node check's seconds, the links' bandwidth
    tracker: Sender | None          # rank 0: W&B and MLflow, sent from a thread (tracking.trackers)
    hosts: list[str]                # every rank's host
    out: Path                       # results/<run>: train.json, metrics.jsonl, STOPPED


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="airetrain trainer (run under torchrun)")
    p.add_argument("--plan", required=True, help="results/<run>/plan.json")
    p.add_argument("--stage", required=True, help="results/<run>/stage.json (where the data was staged)")
    p.add_argument("--out", required=True, help="directory for train.json and metrics.jsonl")
    return p.parse_args(argv)


def main(argv=None) -> Trained:
    args = parse_args(argv)
    plan = batch_changes.with_changes(read_record(args.plan, Plan))   # what earlier sessions out of GPU memory left
    t = None
    try:
        t = set_up(plan, read_record(args.stage, StageRecord), Path(args.out))
        stopped = train(t)
    except torch.OutOfMemoryError as e:   # on any device: this rank ends, the next session takes a smaller batch
        batch_fit.fit_smaller(plan, t.session.position.step + 1 if t else 0, e, t.checkpointer.wait if t else None)
    finish(t, stopped)
    # Every rank is done and every file is written. The process group is not destroyed here:
    # tearing gloo down has deadlocked on the GIL (its worker thread freeing a finished
    # all-gather while the main thread joined it); scripts/train.py ends the process instead.
    torch.distributed.barrier()
    return Trained(t.session.par, t.session.optimizer, t.session.d)


def train(t: Trainer) -> str | None:
    """The loop: optimizer steps to the end of the last epoch, each followed by the evaluation and
    the save their schedules ask for; the reason if it stopped early."""
    s, per_epoch = t.session, t.session.data.steps_per_epoch
    while not s.finished:
        batches = s.data.epoch(s.position.epoch, s.position.step_in_epoch, s.plan.batch.grad_accum,
                               s.plan.batch.per_device)
        t.progress.new_epoch()
        while s.position.step_in_epoch < per_epoch:
            t0 = time.perf_counter()
            t.profiler.before(s.position.step + 1)
            loss, wait_s, norm = train_step(s, batches, t.progress.logs(s.position.step + 1), t.stragglers.timer)
            s.position = s.position.stepped()
            t.profiler.after(s.position.step, wait_s)
            t.stragglers.step_done()
            if t.progress.logs(s.position.step):   # the ranks' compute times, before the log line that shows them
                t.stragglers.interval(s.position.step)
            t.progress.step_done(s.position.step, s.position.epoch, loss, wait_s, time.perf_counter() - t0, norm)
            t.watchdog.beat(s.position.step)
            best = t.evaluator.after_step()
            # stop (deadline, SIGTERM: to resume; early stopping: trained) with a durable checkpoint;
            # otherwise save on schedule, and at every new best
            if stopped := t.deadline.poll():
                log.warning("stopping (%s) after step %d", stopped, s.position.step)   # every rank says it
                t.checkpointer.save(s.trainer_state(), blocking=True)
                return stopped
            if s.stops_early:
                log.info("early stopping after step %d: %s has not improved for %d evaluations (best: %s)",
                         s.position.step, s.monitor.metric, s.monitor.since, s.monitor.best)
                t.checkpointer.save(s.trainer_state(), blocking=True)
                return None
            saved = t.checkpointer.save_if_due(s.position, per_epoch, s.trainer_state, now=best)
            if saved and t.stragglers.leave_out and not s.finished:   # every rank sees the same verdict
                log.warning("stopping after step %d, at this checkpoint, to requeue without %s", s.position.step,
                            ", ".join(t.stragglers.leave_out))
                return STRAGGLER
        s.position = s.position.next_epoch()
    return None


def start_process(plan: Plan) -> Dist:
    """Join the process group; logging (rank 0 at INFO), threads and determinism as the plan says."""
    # the collectives' timeout outlasts the hang watchdog's, so that the watchdog reports a hang first
    hang_min = plan.config.train.hang_timeout_min
    d = process_group.setup(plan.device, 60 * hang_min + 300 if hang_min else None)
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


def set_up(plan: Plan, staged: StageRecord, out: Path) -> Trainer:
    """The session, resumed from the newest checkpoint that verifies (on the fast root or on scratch),
    and its collaborators."""
    d = start_process(plan)
    if d.is_main:
        trackers.preload(plan)   # while the session is built: the trackers' imports and W&B's service
    hosts = process_group.hostnames()
    s = session.build(plan, staged, d)
    hang = watchdog.start(d, plan)   # every rank's heartbeat: steps, saves, evaluation batches
    init = init_source(plan, d)
    ckpt = Checkpointer(d, s.par, s.optimizer, plan, Path(staged["fast_root"]),
                        fast_node_local=staged["fast_root_source"] == "$TMPDIR", init_sha256=init and init[1],
                        heartbeat=hang.beat)
    session.seed_all(plan.config.train.seed + 1000 * d.rank)   # dropout differs per rank; a resume restores it
    s.start(ckpt.restore(), init)
    hang.watch()   # from here: a long restore is not a hang
    if d.is_main:
        run_log.record_session(plan.durable_dir, slurm.job_id(), s.position.step, hosts,
                               ckpt.latest["path"] if ckpt.latest and s.position.step else None)
        (out / STOPPED).unlink(missing_ok=True)
    b = plan.batch
    if plan.config.evaluate:
        log.info("evaluating %s: run %s's weights, world %d, %s", plan.run, plan.config.evaluate["run"],
                 d.world_size, plan.precision)
    else:
        log.info("training %s: world %d, %d steps/epoch x %d epochs, global batch %d = %d x %d x %d, %s", plan.run,
                 d.world_size, s.data.steps_per_epoch, plan.config.train.epochs, b.global_, b.per_device,
                 d.world_size, b.grad_accum, plan.precision)
    gpu = efficiency.GpuSampler(d.device)
    stragglers = Stragglers(d, plan)
    health = {"preflight_s": preflight_seconds(out), **(allreduce_bandwidth(d, plan.config.health.allreduce_floor_gbps)
                                                        or {})}
    # the workflow's folder is the project's; what earlier sessions logged, the trackers may lack
    tracker = trackers.start(plan, Path.cwd(), out / "metrics.jsonl", s.position.step, ckpt.fingerprint) \
        if d.is_main else None
    progress = progress_of(s, gpu, stragglers, out, tracker)
    return Trainer(s, ckpt, Stopper(d.is_main, 60 * plan.config.checkpoint.stop_margin_min),
                   Evaluator(s, progress, hang.beat), progress, hang, gpu, stragglers,
                   StepProfiler.of(plan, d.rank, d.device, out), health, tracker, hosts, out)


def preflight_seconds(out: Path) -> float | None:
    """The node check's seconds, from health.json beside train.json (None: it did not run)."""
    path = out / "health.json"
    return read_record(path, HealthRecord)["seconds"] if path.exists() else None


def init_source(plan: Plan, d: Dist) -> tuple[Path, str] | None:
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


def progress_of(s: Session, gpu: efficiency.GpuSampler, stragglers: Stragglers, out: Path,
                tracker: Sender | None) -> Progress:
    """This session's log lines, metrics.jsonl and (rank 0) TensorBoard curves and trackers."""
    curves = Curves(out / "tensorboard", s.position.step) if s.d.is_main and s.plan.config.train.tensorboard \
        else None
    return Progress(s.d, s.plan, s.total_steps, out / "metrics.jsonl", curves,
                    lambda: {"lr": s.optimizer.param_groups[0]["lr"], **gpu.latest(), **stragglers.line()},
                    start_step=s.position.step,
                    tracker=tracker)


def finish(t: Trainer, stopped: str | None) -> None:
    """The last save made durable, then STOPPED (to resume later) or the evaluation and train.json."""
    t.deadline.close()
    # throughput counts the training steps and the save stalls, not the last write's background tail
    train_s = efficiency.now(t.session.d.device) - t.progress.t_start
    t.profiler.close()
    saved = t.checkpointer.finish()
    final_wait_s = efficiency.now(t.session.d.device) - t.progress.t_start - train_s
    if stopped:
        _stopped(t, stopped, saved)
    else:
        _finished(t, saved, train_s, final_wait_s)
    t.progress.close()
    t.watchdog.stop()


def _stopped(t: Trainer, why: str, saved: dict) -> None:
    """A session stopped before the end: its trackers closed, and STOPPED naming the checkpoint it resumes from."""
    s = t.session
    if t.tracker:
        log.info("tracking until the stop: %s", trackers.closed(t.tracker))
    if s.d.is_main:
        leave_out = {"exclude": t.stragglers.leave_out} if why == STRAGGLER else {}
        write_record(t.out / STOPPED, StopRecord, {"reason": why, "step": s.position.step, "of_steps": s.total_steps,
                                                  "checkpoint": saved, "time": time.time(), **leave_out})
        log.info("stopped (%s) at step %d of %d; checkpoint %s is durable: the run resumes from it",
                 why, s.position.step, s.total_steps, saved["path"])


def _finished(t: Trainer, saved: dict, train_s: float, final_wait_s: float) -> None:
    """The run trained to its end: the final evaluation, the figures gathered from every rank, the trackers
    closed, and train.json (kept on scratch too, for a later rerun)."""
    s, d = t.session, t.session.d
    gpu_figures = t.gpu.summary()
    evaluation = t.evaluator.final()
    t.progress.write_held()   # the history whole before train.json: a kill between them loses nothing
    figures = summary.gathered_figures(d, t.progress, gpu_figures)
    health = {**t.health, **t.stragglers.summary()}
    tracked = t.tracker and trackers.closed(t.tracker)   # every figure is queued: sent, or counted lost
    if not d.is_main:
        return
    record = summary.train_record(s, t.progress, t.checkpointer, summary.Finish(
        train_s, final_wait_s, figures, evaluation, t.hosts, t.evaluator.seconds, t.evaluator.count, tracked, health))
    record = _kept_if_already_trained(s, record)
    write_record(t.out / "train.json", TrainRecord, record)
    write_json_atomic(trained_record_path(s.plan), record)
    _say_done(s, record, saved)


def _kept_if_already_trained(s, record: dict) -> dict:
    """A session that resumed at the run's last step trained nothing: train.json keeps its training's figures."""
    if kept := summary.already_trained(s.plan, record):
        log.info("already trained: %s resumed at its last step (%d) and trained nothing; train.json keeps its "
                 "training's figures (airetrain restart %s trains it again from step 0)", s.plan.run,
                 s.position.step, s.plan.run)
        return kept
    return record


def _say_done(s, record: dict, saved: dict) -> None:
    loss = f"{record['eval_loss']:.4f}" if record["eval_loss"] is not None else "- (no test split)"
    if s.plan.config.evaluate:   # an evaluation run trained nothing and saved nothing
        log.info("done: evaluated run %s's weights (%s): eval loss %s", s.plan.config.evaluate["run"],
                 s.plan.config.evaluate["which"], loss)
    else:
        log.info("done: %d steps, eval loss %s, %.0f samples/s, checkpoint %s", s.position.step, loss,
                 record["samples_per_s"] or 0, saved["path"])
