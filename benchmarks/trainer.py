"""airetrain's trainer against a plain reference loop: same model, data, global batch, 2 ranks, gloo.

Both run under torchrun with 2 processes on CPU, alternating, and report samples/s over their
training loops (start-up excluded for both; airetrain's includes its logging all-reduces, its
stop flag and its end-of-training checkpoint's stall). Each repeat runs the two back to back, and the
spread of the per-repeat ratios states the noise. Goal: ratio >= 1.00.

    python benchmarks/trainer.py [--repeats 3] [--epochs 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = {"name": "small_cnn", "width": 64, "depth": 6, "heads": 4, "patch_size": 4}
DATA = {"name": "synthetic", "samples": 4096, "shape": [1, 28, 28], "classes": 10, "vocab": None, "seq_len": 256,
        "path": None, "workers": 0, "verify_sha256": False}
PER_DEVICE, WORLD = 64, 2


def plain(epochs: int) -> float:
    cfg = {"model": MODEL, "data": DATA, "per_device": PER_DEVICE, "epochs": epochs}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
                          str(REPO / "benchmarks" / "plain_ddp.py"), json.dumps(cfg)],
                         check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def ours(tmp: Path, epochs: int) -> float:
    from airetrain.plan.planner import plan_all
    from airetrain.plan.roots import Root
    from airetrain.records import PlanRecord, StageRecord, write_record
    from airetrain.stage.staging import stage_record

    config = {"roots": {"scratch": str(tmp / "scratch"), "tmp_shared": str(tmp / "fast")},
              "runs": {"bench": {"processes": WORLD, "strategy": "ddp", "precision": "bf16", "model": MODEL,
                                 "data": {k: DATA[k] for k in ("name", "samples", "shape", "classes", "workers")},
                                 "batch": {"global": PER_DEVICE * WORLD, "per_device": PER_DEVICE},
                                 "train": {"epochs": epochs, "log_every_steps": 20},
                                 "checkpoint": {"every_epochs": 1000}}}}
    plan = plan_all(config, env={"HOME": "/nonexistent"})["bench"]
    out = tmp / "results"
    for old in (tmp / "fast").rglob("*"):  # never resume: every repeat trains from scratch
        if old.is_file():
            old.unlink()
    for old in (tmp / "scratch").rglob("*"):
        if old.is_file():
            old.unlink()
    write_record(out / "plan.json", PlanRecord, plan)
    write_record(out / "stage.json", StageRecord, stage_record(None, Root(tmp / "fast", "config"), None))
    subprocess.run([sys.executable, "-m", "airetrain", "launch", "--plan", str(out / "plan.json"), "--stage",
                    str(out / "stage.json"), "--out", str(out), "--script", str(REPO / "scripts/train.py")],
                   check=True, capture_output=True)
    return json.loads((out / "train.json").read_text())["samples_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    a, b = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            a.append(ours(Path(tmp), args.epochs))
            b.append(plain(args.epochs))
            print(f"  repeat {r}: airetrain {a[-1]:.0f} samples/s, plain loop {b[-1]:.0f} samples/s")
    ratios = [x / y for x, y in zip(a, b)]   # each repeat's pair ran back to back: the fairest comparison
    print(f"model small_cnn(width 64) on 1x28x28, global batch {PER_DEVICE * WORLD}, {WORLD} ranks gloo, bf16")
    print(f"airetrain trainer : {statistics.median(a):.0f} samples/s (median of {args.repeats}; "
          f"{min(a):.0f}-{max(a):.0f})")
    print(f"plain DDP loop    : {statistics.median(b):.0f} samples/s (median of {args.repeats}; "
          f"{min(b):.0f}-{max(b):.0f})")
    print(f"ratio             : {statistics.median(a) / statistics.median(b):.3f} of the medians (goal >= 1.00); "
          f"per repeat {', '.join(f'{r:.3f}' for r in ratios)}: median {statistics.median(ratios):.3f}, "
          f"spread {min(ratios):.3f}-{max(ratios):.3f}"
          + (f", stdev {statistics.stdev(ratios):.3f}" if len(ratios) > 1 else ""))


if __name__ == "__main__":
    main()
