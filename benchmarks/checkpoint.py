"""How long training stalls per checkpoint: airetrain's async save vs a synchronous torch.save + fsync.

One process (gloo, world size 1) holds a model of 6 x Linear(2048, 2048) (100 MB of weights) and
its AdamW state (200 MB more); --width W makes them Linear(W, W), a smaller or larger state. The
baseline serializes that state with torch.save into a file and fsyncs it, as a training loop
without background saving would, before the next step. Where
airetrain's Checkpointer writes in the background, its save returns once the state is copied to
CPU memory; the write, fsync, manifest and promotion to the durable directory run in the
background (DDP: a writer process or a thread; FSDP: DCP's async_save), and the next save waits
for them (so any wait counts as stall too). Where it writes in the loop, the save returns once the
checkpoint is durable and verified, and all of that is stall. Both save every --every training steps. The
background work also competes with training for the CPU, so the total cost of a save is its stall
plus the slowdown of the training steps between saves, against the steps without saves in flight.
Goals, as ratios of that total to the synchronous save: with every core busy training (the
default, --threads = the cores), checkpoint.writer auto <= 1.0; with a core free (--threads 1 on
2 cores), the background path <= 0.2.

    python benchmarks/checkpoint.py [--saves 5] [--every 10] [--dir PATH] [--strategy ddp|fsdp] [--device cuda]
                                    [--writer auto|process|thread|synchronous] [--threads N] [--width W]

On a GPU (--device cuda) the copy is device to host memory, and the training step runs on the GPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airetrain.checkpoint.manager import Checkpointer  # noqa: E402
from airetrain.train.parallel.process_group import Dist  # noqa: E402
from airetrain.train.parallel.wrap import Parallel  # noqa: E402
from airetrain.plan.planner import plan_all  # noqa: E402


def model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(6)])


def train_step(par, optimizer, device, width: int) -> float:
    t0 = time.perf_counter()
    x = torch.randn(64, width, device=device)
    par(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def sync_save(state: dict, path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--saves", type=int, default=5)
    ap.add_argument("--every", type=int, default=10, help="training steps between saves")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--fast-dir", default=None,
                    help="the fast root (default: DIR/fast, one filesystem with DIR/scratch, where promotion is a "
                         "hard link; on another filesystem, e.g. /dev/shm, each checkpoint is copied as on Aire)")
    ap.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--writer", choices=["auto", "process", "thread", "synchronous"], default="auto",
                    help="checkpoint.writer (auto: in the background where a core is free, else in the loop); "
                         "synchronous: checkpoint.async false")
    ap.add_argument("--threads", type=int, default=None,
                    help="the training's threads (default: every core, the busy-cores shape; 1 on 2 cores leaves one "
                         "core free)")
    ap.add_argument("--width", type=int, default=2048, help="the Linear layers' width (2048: a 302 MB state)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cores = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"})
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(dist.get_default_backend_for_device(device), rank=0, world_size=1)
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="ckpt-bench-"))
    fast = Path(args.fast_dir) if args.fast_dir else tmp / "fast"
    config = {"roots": {"scratch": str(tmp / "scratch"), "tmp_shared": str(fast)},
              "runs": {"bench": {"strategy": args.strategy, "precision": "fp32", "gpus": int(device.type == "cuda"),
                                 "processes": 1,
                                 "cpus_per_rank": threads,
                                 "checkpoint": {"keep": 2, "every_steps": 1,
                                                "writer": "auto" if args.writer == "synchronous" else args.writer,
                                                "async": args.writer != "synchronous"}}}}
    plan = plan_all(config, env={"HOME": "/nonexistent"})["bench"]
    net = model(args.width).to(device)
    par = Parallel(net, plan, device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    train_step(par, optimizer, device, args.width)   # creates the AdamW state
    state_mb = sum(t.numel() * t.element_size() for t in net.state_dict().values()) * 3 / 1e6

    # baseline: the full state, torch.save + fsync, training waits for all of it
    sync_s, quiet_steps = [], []
    for i in range(args.saves):
        state = {"model": net.state_dict(), "optimizer": optimizer.state_dict()}
        sync_s.append(sync_save(state, tmp / f"sync-{i % 2}.pt"))
        quiet_steps += [train_step(par, optimizer, device, args.width) for _ in range(args.every)]

    ckpt = Checkpointer(Dist(0, 0, 1, device), par, optimizer, plan, fast, False)
    if ckpt._writer is not None:
        time.sleep(5)   # the writer process's start-up (imports) happens while a real run loads its data
    busy_steps = []
    for i in range(args.saves):
        ckpt.save({"step": i + 1, "epoch": 0, "step_in_epoch": i + 1, "config": plan.config.to_dict(),
                   "scheduler": {}, "scaler": None})
        busy_steps += [train_step(par, optimizer, device, args.width) for _ in range(args.every)]
    t0 = time.perf_counter()
    latest = ckpt.finish()
    tail_s = time.perf_counter() - t0
    stall = statistics.median(ckpt.stalls)
    base = statistics.median(sync_s)
    quiet, busy = statistics.mean(quiet_steps), statistics.mean(busy_steps)
    print(f"state: {state_mb:.0f} MB (model + AdamW), {args.strategy} on {device.type}, {args.saves} saves, in {tmp} "
          f"(fast root {fast}); promoted to scratch: {latest['mode'] if latest else '?'}")
    print(f"training step: {quiet * 1000:.0f} ms; {busy * 1000:.0f} ms while a save runs in the background "
          f"({(busy * args.every - quiet * args.every) * 1000:.0f} ms more per save interval of {args.every} steps)")
    print(f"synchronous torch.save + fsync: median {base * 1000:.0f} ms per save")
    print(f"airetrain async stall:          median {stall * 1000:.0f} ms per save "
          f"(each: {', '.join(f'{s * 1000:.0f}' for s in ckpt.stalls)} ms; last write + promotion "
          f"finished {tail_s * 1000:.0f} ms after the loop)")
    print(f"  of which waiting for the previous save's background write: "
          f"{', '.join(f'{s * 1000:.0f}' for s in ckpt.waits)} ms (nonzero: saves closer together than one write)")
    slowdown = max(busy - quiet, 0.0) * args.every
    total = stall + slowdown
    how = f"{ckpt.path.kind}: {ckpt.path.reason}; training on {threads} of {cores} cores"
    print(f"ratio stall / synchronous: {stall / base:.3f}")
    print(f"total per save ({how}): stall {stall * 1000:.0f} ms + slowed steps {slowdown * 1000:.0f} ms = "
          f"{total * 1000:.0f} ms; ratio total / synchronous: {total / base:.3f} "
          f"(goal: {'<= 0.2 with a core free' if threads < cores else '<= 1.0 with every core busy'})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
