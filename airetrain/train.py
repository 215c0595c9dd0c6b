"""The training loop, read top to bottom: set-up, data, model, resume, loop, evaluate, save.

Run by torchrun (scripts/train.py): every rank executes this file; rank 0 logs and writes.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import random
import socket
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, Subset

from . import data, dist as D, manifest, metrics
from .checkpoint.manager import Checkpointer
from .fsutil import read_json, write_json_atomic
from .models import build as build_model
from .parallel import Parallel
from .stopping import Stopper

STOPPED = "STOPPED"   # marker in --out: the run stopped early, with a durable checkpoint, and will resume

log = logging.getLogger("airetrain.train")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="airetrain trainer (run under torchrun)")
    p.add_argument("--plan", required=True, help="results/<run>/plan.json")
    p.add_argument("--stage", required=True, help="results/<run>/stage.json (where the data was staged)")
    p.add_argument("--out", required=True, help="directory for train.json and metrics.jsonl")
    p.add_argument("--dump-params", metavar="DIR", default=os.environ.get("AIRETRAIN_DUMP_PARAMS"),
                   help="debugging aid: each rank saves its final parameters to DIR/rank<N>.pt, "
                        "to check that the replicas agree (or $AIRETRAIN_DUMP_PARAMS)")
    return p.parse_args(argv)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(cfg: dict, params):
    if cfg["name"] == "sgd":
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"], weight_decay=cfg["weight_decay"])
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_scheduler(cfg: dict, optimizer, total_steps: int):
    """Linear warm-up, then a constant rate or a cosine decay to zero at the last step."""
    warmup = cfg["warmup_steps"]

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg["schedule"] == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total_steps - warmup))))
        return 1.0
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can begin an epoch part-way: after a mid-epoch resume it skips the
    samples already trained on, without loading them. With keyed, it yields epoch * len + index
    (what data.PerSampleSeeds takes)."""
    start = 0
    keyed = False

    def __iter__(self):
        indices = itertools.islice(super().__iter__(), self.start, None)
        if self.keyed:
            return (self.epoch * len(self.dataset) + i for i in indices)
        return indices

    def __len__(self):
        return super().__len__() - self.start


def autocast(device: torch.device, precision: str, enabled: bool = True):
    if precision in ("bf16", "fp16") and enabled:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    return nullcontext()


def loss_fn(logits, y):
    """Cross entropy over classes, or over every position of a sequence (GPT)."""
    return F.cross_entropy(logits.flatten(0, -2).float(), y.flatten())


@torch.no_grad()
def evaluate(par: Parallel, dataset, d: D.Dist, precision: str) -> tuple[float, float]:
    """(accuracy, mean loss) over the whole test set; each rank scores every world_size-th sample.

    Every rank runs the same number of forward passes (FSDP's all-gathers are collectives):
    a rank whose share is used up runs an empty batch.
    """
    par.model.eval()
    shard = Subset(dataset, range(d.rank, len(dataset), d.world_size))
    batch = 512
    passes = math.ceil(math.ceil(len(dataset) / d.world_size) / batch)
    batches = iter(DataLoader(shard, batch_size=batch))
    x0, y0 = dataset[0]
    y0 = torch.as_tensor(y0)
    correct = total = loss_sum = 0.0
    for _ in range(passes):
        x, y = next(batches, (torch.empty(0, *x0.shape, dtype=x0.dtype), torch.empty(0, *y0.shape, dtype=torch.long)))
        x, y = x.to(d.device), y.to(d.device)
        with autocast(d.device, precision, par.autocast_needed()):
            logits = par(x).float()
        if len(y):
            loss_sum += loss_fn(logits, y).item() * y.numel()
            correct += (logits.argmax(-1) == y).sum().item()
            total += y.numel()
    correct, total, loss_sum = D.reduce([correct, total, loss_sum])
    par.model.train()
    return correct / total, loss_sum / total


def main(argv=None) -> None:
    args = parse_args(argv)
    plan, staged = read_json(args.plan), read_json(args.stage)
    cfg = plan["config"]
    out = Path(args.out)
    d = D.setup(plan["device"])
    logging.basicConfig(level=logging.INFO if d.is_main else logging.WARNING, stream=sys.stdout,
                        format=f"[rank {d.rank}] %(message)s")
    torch.set_num_threads(plan["cpus_per_rank"])
    if cfg["train"]["deterministic"]:
        torch.use_deterministic_algorithms(True, warn_only=True)   # a warning names any op that cannot be
        torch.backends.cudnn.benchmark = False

    # ---- data: the staged copy, split across ranks by DistributedSampler
    seed = cfg["train"]["seed"]
    train_set, test_set, meta = data.build(cfg["data"], staged["target"])
    if data.is_user_dataset(cfg["data"]):   # its augmentations replay exactly (the built-ins have none)
        train_set = data.PerSampleSeeds(train_set, seed)
    per_device, accum = plan["batch"]["per_device"], plan["batch"]["grad_accum"]
    sampler = ResumableSampler(train_set, num_replicas=d.world_size, rank=d.rank, shuffle=True,
                               seed=seed, drop_last=True)
    sampler.keyed = isinstance(train_set, data.PerSampleSeeds)
    workers = cfg["data"]["workers"]
    workers = max(plan["cpus_per_rank"] - 1, 0) if workers is None else workers
    # The loader's own generator (the workers' seeds) is reseeded from (seed, epoch, rank) at each
    # epoch, so the position (epoch, step in epoch) is all a resume needs to continue exactly.
    loader_rng = torch.Generator()
    loader = DataLoader(train_set, batch_size=per_device, sampler=sampler, drop_last=True,
                        num_workers=workers, persistent_workers=workers > 0, generator=loader_rng,
                        prefetch_factor=4 if workers > 0 else None, pin_memory=d.device.type == "cuda")
    steps_per_epoch = len(loader) // accum
    if steps_per_epoch == 0:
        raise SystemExit(f"the training set ({len(train_set)} samples) is smaller than one global batch "
                         f"({plan['batch']['global']}): lower batch.global")

    # ---- model and optimizer: same seed on every rank (DDP also broadcasts rank 0's weights)
    seed_all(seed)
    model = build_model(cfg["model"], meta).to(d.device)
    x, y = next(iter(DataLoader(train_set, batch_size=per_device)))  # model FLOPs of one micro-batch
    with autocast(d.device, plan["precision"]):
        flops_per_micro = metrics.count_flops(model, x.to(d.device), y.to(d.device), loss_fn)
    par = Parallel(model, plan, d.device)
    optimizer = make_optimizer(cfg["optim"], model.parameters())
    epochs = cfg["train"]["epochs"]
    total_steps = steps_per_epoch * epochs
    scheduler = make_scheduler(cfg["optim"], optimizer, total_steps)
    scaler = torch.amp.GradScaler(d.device.type, enabled=plan["precision"] == "fp16")

    # ---- resume from the newest checkpoint that verifies, on the fast root or on scratch
    ckpt = Checkpointer(d, par, optimizer, plan, Path(staged["fast_root"]),
                        staged.get("fast_root_source") == "$TMPDIR")
    seed_all(seed + 1000 * d.rank)   # dropout differs per rank; a resume restores each rank's state
    resumed = ckpt.restore()
    step, start_epoch, step_in_epoch = 0, 0, 0
    if resumed:
        step, start_epoch, step_in_epoch = resumed["step"], resumed["epoch"], resumed["step_in_epoch"]
        scheduler.load_state_dict(resumed["scheduler"])
        if resumed["scaler"]:
            scaler.load_state_dict(resumed["scaler"])
        if step_in_epoch >= steps_per_epoch:
            start_epoch, step_in_epoch = start_epoch + 1, 0
    hosts = D.hostnames()
    if d.is_main:
        manifest.record_session(Path(plan["durable_dir"]).parent, os.environ.get("SLURM_JOB_ID"), step, hosts)
        (out / STOPPED).unlink(missing_ok=True)
    every_steps = cfg["checkpoint"]["every_steps"]
    stopper = Stopper(d.is_main, margin_s=60 * cfg["checkpoint"]["stop_margin_min"])

    def trainer_state(epoch: int, step_in_epoch: int) -> dict:
        return {"step": step, "epoch": epoch, "step_in_epoch": step_in_epoch, "config": cfg,
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler.is_enabled() else None}

    # ---- the loop
    log_every = cfg["train"]["log_every_steps"]
    metrics_file = open(out / "metrics.jsonl", "a") if d.is_main else None
    wait_s = step_s = 0.0
    steps_done = 0
    loss_avg = float("nan")
    log.info("training %s: world %d, %d steps/epoch x %d epochs, global batch %d = %d x %d x %d, %s",
             plan["run"], d.world_size, steps_per_epoch, epochs, plan["batch"]["global"], per_device,
             d.world_size, accum, plan["precision"])
    gpu = metrics.GpuSampler(d.device)
    t_start = time.perf_counter()
    stopped = None
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        sampler.start = step_in_epoch * accum * per_device
        loader_rng.manual_seed(seed + 7919 * epoch + d.rank)
        batches = iter(loader)
        window_loss = torch.zeros((), device=d.device)
        window_steps = 0
        for step_in_epoch in range(step_in_epoch + 1, steps_per_epoch + 1):
            t0 = time.perf_counter()
            for micro in range(accum):
                tw = time.perf_counter()
                x, y = next(batches)
                wait_s += time.perf_counter() - tw
                x, y = x.to(d.device, non_blocking=True), y.to(d.device, non_blocking=True)
                last = micro == accum - 1
                with par.grad_sync(last):  # reduce gradients once per optimizer step
                    with autocast(d.device, plan["precision"], par.autocast_needed()):
                        loss = loss_fn(par(x), y) / accum
                    scaler.scale(loss).backward()
                window_loss += loss.detach()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            steps_done += 1
            window_steps += 1
            step_s += time.perf_counter() - t0

            if step % log_every == 0 or step == total_steps:
                if d.device.type == "cuda":
                    torch.cuda.synchronize()
                (loss_sum,) = D.reduce([window_loss.item()])
                loss_avg = loss_sum / d.world_size / window_steps
                window_loss.zero_()
                window_steps = 0
                elapsed = time.perf_counter() - t_start
                rate = steps_done * plan["batch"]["global"] / elapsed
                eta = (total_steps - step) * elapsed / steps_done
                if d.is_main:
                    log.info("step %d/%d | epoch %d | loss %.4f | %.0f samples/s | data wait %.0f%% | ETA %ds",
                             step, total_steps, epoch, loss_avg, rate, 100 * wait_s / step_s, eta)
                    metrics_file.write(json.dumps({
                        "step": step, "epoch": epoch, "loss": loss_avg, "samples_per_s": rate,
                        "data_wait_frac": wait_s / step_s, "elapsed_s": elapsed, "time": time.time(),
                    }) + "\n")
                    metrics_file.flush()

            # stop early (deadline, SIGTERM) with a durable checkpoint; otherwise save on schedule
            stopped = stopper.check(d.device)
            epoch_end = step_in_epoch == steps_per_epoch
            if stopped:
                log.warning("stopping (%s) after step %d", stopped, step)   # every rank says it
                ckpt.save(trainer_state(epoch, step_in_epoch), blocking=True)
                break
            if (every_steps and step % every_steps == 0) or (epoch_end and (
                    (epoch + 1) % cfg["checkpoint"]["every_epochs"] == 0 or epoch == epochs - 1)):
                ckpt.save(trainer_state(epoch, step_in_epoch))
        step_in_epoch = 0
        if stopped:
            break
    # throughput counts the training steps and the save stalls, not the last write's background tail
    train_s = metrics.now(d.device) - t_start
    saved = ckpt.finish()
    final_wait_s = metrics.now(d.device) - t_start - train_s
    if stopped:
        if d.is_main:
            metrics_file.close()
            write_json_atomic(out / STOPPED, {"reason": stopped, "step": step, "of_steps": total_steps,
                                              "checkpoint": saved, "time": time.time()})
            log.info("stopped (%s) at step %d of %d; checkpoint %s is durable: the run resumes from it",
                     stopped, step, total_steps, saved["path"])
        torch.distributed.barrier()
        return
    gpu_figures = gpu.summary()

    if args.dump_params:
        Path(args.dump_params).mkdir(parents=True, exist_ok=True)
        torch.save(par.full_state(optimizer)[0], Path(args.dump_params) / f"rank{d.rank}.pt")

    # ---- evaluate, gather figures, write train.json
    accuracy, eval_loss = evaluate(par, test_set, d, plan["precision"])
    wait_frac = D.reduce([wait_s / step_s if step_s else 0.0])[0] / d.world_size
    peak = D.reduce([D.peak_memory_bytes(d.device)], op=torch.distributed.ReduceOp.MAX)[0]
    flops_per_step = flops_per_micro * accum * d.world_size          # the whole job, one optimizer step
    peak_flops = metrics.peak_flops(d.device)
    achieved = flops_per_step * steps_done / train_s if steps_done else None
    mfu = achieved / (peak_flops * d.world_size) if achieved and peak_flops else None
    gpu_util = D.reduce([gpu_figures["gpu_util_mean"] or 0.0])[0] / d.world_size \
        if gpu_figures["gpu_util_mean"] is not None else None
    if d.is_main:
        metrics_file.close()
        summary = {
            "run": plan["run"],
            "world_size": d.world_size,
            "nodes": plan["nodes"],
            "strategy": plan["strategy"],
            "precision": plan["precision"],
            "device": plan["device"],
            "global_batch": plan["batch"]["global"],
            "per_device_batch": per_device,
            "grad_accum": accum,
            "steps": step,
            "steps_this_session": steps_done,
            "epochs": epochs,
            "resumed_from_step": step - steps_done,
            "train_seconds": round(train_s, 3),
            "samples_per_s": round(steps_done * plan["batch"]["global"] / train_s, 2) if steps_done else None,
            "tokens_per_s": round(steps_done * plan["batch"]["global"] * meta["seq_len"] / train_s, 1)
            if steps_done and "seq_len" in meta else None,
            "step_time_s": round(step_s / steps_done, 6) if steps_done else None,
            "data_wait_s_per_step": round(wait_s / steps_done, 6) if steps_done else None,
            "compute_s_per_step": round((step_s - wait_s) / steps_done, 6) if steps_done else None,
            "flops_per_step": flops_per_step,
            "achieved_tflops": round(achieved / 1e12, 3) if achieved else None,
            "mfu": float(f"{mfu:.4g}") if mfu else None,   # significant digits: a tiny model's MFU is not 0
            "peak_tflops_per_gpu": peak_flops / 1e12 if peak_flops else None,
            "gpu_util_mean": gpu_util,
            "gpu_mem_peak_bytes": gpu_figures["gpu_mem_peak_bytes"],
            "memory_estimate": plan["memory_estimate"],
            "activation_checkpointing": plan["activation_checkpointing"],
            "data_wait_frac": round(wait_frac, 4),
            "peak_mem_bytes": int(peak),
            "final_loss": loss_avg if steps_done else None,
            "eval_loss": eval_loss,
            "eval_accuracy": accuracy,
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "hostnames": hosts,
            "launch_host": socket.gethostname(),
            "torch_version": torch.__version__,
            "environment": {k: os.environ.get(k) for k in (*plan["env"], "NCCL_SOCKET_IFNAME")},
            "checkpoint": saved,
            "checkpoint_saves": len(ckpt.stalls),
            "checkpoint_stall_s_mean": round(sum(ckpt.stalls) / len(ckpt.stalls), 4) if ckpt.stalls else None,
            "checkpoint_final_wait_s": round(final_wait_s, 3),
        }
        write_json_atomic(out / "train.json", summary)
        log.info("done: %d steps, eval accuracy %.4f, %.0f samples/s, checkpoint %s",
                 step, accuracy, summary["samples_per_s"] or 0, saved["path"])
    # Every rank is done and every file is written. The process group is not destroyed here:
    # tearing gloo down has deadlocked on the GIL (its worker thread freeing a finished
    # all-gather while the main thread joined it); scripts/train.py ends the process instead.
    torch.distributed.barrier()
