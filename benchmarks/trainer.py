"""airetrain's trainer against a plain reference loop: same model, data, global batch, 2 ranks, gloo.

All run under torchrun with 2 processes on CPU and report samples/s over their training loops
(start-up excluded for each; airetrain's includes its logging all-reduces, its stop flag and its
end-of-training checkpoint's stall). Four arms per repeat, back to back, in an order that rotates
from repeat to repeat (so that neither side always runs first):
- the plain loop (torch's default AdamW);
- airetrain with its defaults (on CPU the fused AdamW, measured faster);
- airetrain with `optim.fused: false`, the plain loop's optimizer;
- the plain loop with airetrain's allocator settings for CPU training (GLIBC_TUNABLES): against the
  arm above, what is left is the loop's own cost.
Each repeat's ratios against its plain run are the measurement; their median, mean and standard
error state the noise. Goal: ratio >= 1.00. Two figures each: the whole loop, and the steps after
the warm-up (the same number of steps on both sides; airetrain's `steady_samples_per_s`): what a
step costs, without the one-off costs at the ends (the first steps, airetrain's last save).

With --profile STEPS, two arms instead: airetrain as above, and the same with a train.profile window of
STEPS steps from step 10 (rank 0): the ratio is what a profile costs the whole run.

With --tracking, two arms instead: airetrain as above, and airetrain logging every line to W&B
(offline, its files on the same disk) and MLflow (a SQLite store on the same disk), every
--log-every steps: the ratio is what tracking costs the training loop.

    python benchmarks/trainer.py [--repeats 8] [--epochs 2] [--tracking --log-every 10] [--profile 10]
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
sys.path.insert(0, str(REPO))
from airetrain.environment import CPU_MALLOC  # noqa: E402
from airetrain.workflow import TRAIN_SCRIPT  # noqa: E402
MODEL = {"name": "small_cnn", "width": 64, "depth": 6, "heads": 4, "patch_size": 4}
DATA = {"name": "synthetic", "samples": 4096, "shape": [1, 28, 28], "classes": 10, "vocab": None, "seq_len": 256,
        "path": None, "workers": 0, "verify_sha256": False}
PER_DEVICE, WORLD = 64, 2


def plain(epochs: int, env: dict | None = None) -> dict:
    cfg = {"model": MODEL, "data": DATA, "per_device": PER_DEVICE, "epochs": epochs}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
                          str(REPO / "benchmarks" / "plain_ddp.py"), json.dumps(cfg)], check=True, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}).stdout
    return json.loads(out.strip().splitlines()[-1])


def ours(tmp: Path, epochs: int, optim: dict | None = None, tracking: dict | None = None, log_every: int = 20,
         train: dict | None = None) -> float:
    from airetrain.plan.planner import plan_all
    from airetrain.roots import Root
    from airetrain.records import Plan, StageRecord, write_record
    from airetrain.stage.staging import stage_record

    config = {"roots": {"scratch": str(tmp / "scratch"), "tmp_shared": str(tmp / "fast")},
              "runs": {"bench": {"processes": WORLD, "strategy": "ddp", "precision": "bf16", "model": MODEL,
                                 "data": {k: DATA[k] for k in ("name", "samples", "shape", "classes", "workers")},
                                 "batch": {"global": PER_DEVICE * WORLD, "per_device": PER_DEVICE},
                                 "train": {"epochs": epochs, "log_every_steps": log_every, **(train or {})},
                                 "checkpoint": {"every_epochs": 1000}, "optim": optim or {},
                                 "tracking": tracking or {}}}}
    plan = plan_all(config, env={"HOME": "/nonexistent"})["bench"]
    out = tmp / "results"
    for old in (tmp / "fast").rglob("*"):  # never resume: every repeat trains from scratch
        if old.is_file():
            old.unlink()
    for old in (tmp / "scratch").rglob("*"):
        if old.is_file() and old.name != "mlflow.db":   # a tracked run's MLflow store stays, as a user's would
            old.unlink()
    write_record(out / "plan.json", Plan, plan)
    write_record(out / "stage.json", StageRecord, stage_record(None, Root(tmp / "fast", "config"), None))
    subprocess.run([sys.executable, "-m", "airetrain", "launch", "--plan", str(out / "plan.json"), "--stage",
                    str(out / "stage.json"), "--out", str(out), "--script", str(TRAIN_SCRIPT)],
                   check=True, capture_output=True)
    return last_record(tmp)["samples_per_s"]


def last_record(tmp: Path) -> dict:
    """The train.json of the last run `ours` trained."""
    return json.loads((tmp / "results" / "train.json").read_text())


PLAIN_TUNED = "plain loop + allocator settings"
FIGURES = ("samples_per_s", "steady_samples_per_s")
ARMS = {"plain DDP loop": None, "airetrain": {}, "airetrain, optim.fused: false": {"fused": False}, PLAIN_TUNED: None}


def stats(values: list[float]) -> str:
    spread = (f", mean {statistics.mean(values):.3f} +- {statistics.stdev(values) / len(values) ** 0.5:.3f} "
              f"(standard error), range {min(values):.3f}-{max(values):.3f}") if len(values) > 1 else ""
    return f"median {statistics.median(values):.3f}{spread}"


def tracking_arms(tmp: Path, repeats: int, epochs: int, log_every: int) -> None:
    """airetrain with and without its trackers, back to back in a rotating order: the ratio per repeat."""
    trackers = {"wandb": {"project": "bench"}, "mlflow": {"tracking_uri": f"sqlite:///{tmp / 'scratch' / 'mlflow.db'}"}}
    paired_arms(tmp, repeats, epochs, {"airetrain": {}, "airetrain + W&B offline + MLflow": {"tracking": trackers}},
                log_every, f"a line every {log_every} steps")


def paired_arms(tmp: Path, repeats: int, epochs: int, arms: dict[str, dict], log_every: int, what: str) -> None:
    """Two arms of airetrain (ours()'s options each), back to back in a rotating order: the ratio per repeat."""
    names = list(arms)
    # the whole run (the trackers' start-up included: MLflow's import, W&B's service), and the steps
    # after the warm-up: what each logged step costs
    rates = {(arm, fig): [] for arm in names for fig in ("samples_per_s", "steady_samples_per_s")}
    for r in range(repeats):
        for arm in names[r % 2:] + names[:r % 2]:
            rates[arm, "samples_per_s"].append(ours(tmp, epochs, log_every=log_every, **arms[arm]))
            rates[arm, "steady_samples_per_s"].append(last_record(tmp)["steady_samples_per_s"])
        print(f"  repeat {r}: " + ", ".join(f"{arm} {rates[arm, 'samples_per_s'][-1]:.0f} "
                                            f"(steady {rates[arm, 'steady_samples_per_s'][-1]:.0f})" for arm in names)
              + " samples/s")
    steps = epochs * DATA["samples"] // (PER_DEVICE * WORLD)
    print(f"{repeats} repeats of {epochs} epochs ({steps} steps, {what})")
    for fig in ("samples_per_s", "steady_samples_per_s"):
        ratios = [x / y for x, y in zip(rates[names[1], fig], rates[names[0], fig])]
        print(f"ratio {names[1]} / {names[0]}, {fig}: {stats(ratios)}; per repeat "
              + ", ".join(f"{x:.3f}" for x in ratios))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--tracking", action="store_true", help="airetrain with and without W&B and MLflow")
    p.add_argument("--log-every", type=int, default=10, help="with --tracking: train.log_every_steps")
    p.add_argument("--profile", type=int, metavar="STEPS", help="airetrain with and without a train.profile window "
                                                                "of STEPS steps from step 10")
    args = p.parse_args()
    if args.tracking:
        with tempfile.TemporaryDirectory() as tmp:
            return tracking_arms(Path(tmp), args.repeats, args.epochs, args.log_every)
    if args.profile:
        window = {"profile": {"start_step": 10, "steps": args.profile}}
        with tempfile.TemporaryDirectory() as tmp:
            return paired_arms(Path(tmp), args.repeats, args.epochs,
                               {"airetrain": {}, "airetrain, profiled": {"train": window}}, 20,
                               f"a window of {args.profile} steps profiled")
    rates = {(arm, fig): [] for arm in ARMS for fig in FIGURES}
    names = list(ARMS)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for arm in order:
                optim = ARMS[arm]
                if optim is not None:
                    ours(Path(tmp), args.epochs, optim)
                    got = last_record(Path(tmp))
                else:
                    got = plain(args.epochs, {"GLIBC_TUNABLES": CPU_MALLOC} if arm == PLAIN_TUNED else None)
                for fig in FIGURES:
                    rates[arm, fig].append(got[fig])
            print(f"  repeat {r}: " + ", ".join(f"{arm} {rates[arm, FIGURES[0]][-1]:.0f} (steady "
                                                f"{rates[arm, FIGURES[1]][-1]:.0f})" for arm in names) + " samples/s")
    print(f"model small_cnn(width 64) on 1x28x28, global batch {PER_DEVICE * WORLD}, {WORLD} ranks gloo, bf16, "
          f"{args.repeats} repeats of {args.epochs} epochs")
    for arm in names:
        for fig in FIGURES:
            got = rates[arm, fig]
            print(f"{arm:31s} {fig:21s}: {statistics.median(got):.0f} samples/s "
                  f"(median; {min(got):.0f}-{max(got):.0f})")
    pairs = [(arm, names[0]) for arm in names[1:]] + [("airetrain, optim.fused: false", PLAIN_TUNED)]
    for fig in FIGURES:
        for arm, against in pairs:
            ratios = [x / y for x, y in zip(rates[arm, fig], rates[against, fig])]   # each repeat's arms back to back
            print(f"{fig}: ratio {arm} / {against}: {stats(ratios)}; per repeat "
                  + ", ".join(f"{x:.3f}" for x in ratios))

if __name__ == "__main__":
    main()
