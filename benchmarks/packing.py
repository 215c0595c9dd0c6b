"""Many small runs on the SLURM test cluster: six one-GPU seeds of one setting, one allocation per run
(pack: none) against packed (pack: auto: three runs an allocation of a node's three GPUs), under a limit of
two running jobs. With --search N: a search of N one-GPU trials, 3 at once, successive halving by 3 over 9
epochs, a job per rung (pack: none) against waves (pack: auto: the rungs of the 3 slots in one allocation).

Measured from SLURM's accounting and the runs' own records: the number of submissions, the number of
dataset stagings, each allocation's seconds spent not training (its elapsed time less the trainer's
train_seconds: Snakemake's start in the job, the node check, staging, torchrun's start, building the
model and loaders, promotion; a packed run: its allocation's, shared by its runs, over the runs), and the time
from the first submission to the last run's end.

The limit of two running jobs is Snakemake's `--jobs 2`: the test cluster enforces no per-user limits, and
a job held back by Snakemake or pending in SLURM's queue waits the same.

    make slurm-up && source tests/slurm/state/env.sh
    .venv/bin/python benchmarks/packing.py [--seeds 6] [--epochs 2] [--limit 2]
    .venv/bin/python benchmarks/packing.py --search 9 --limit 3
    .venv/bin/python benchmarks/packing.py --step-wait 0.1

The test cluster's GPUs are stand-ins: each run computes on the machine's shared cores, so three runs side
by side each train about three times slower on two cores, which a run on a GPU of its own does not.
--step-wait S adds S seconds to each training step as a wait, not computation (a stand-in for a step on a
GPU of its own, during which the CPU idles): the runs then overlap as they do on a node of GPUs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
SLURM_ARGS = ["--executor", "slurm", "--profile", str(REPO / "aire"), "--slurm-init-seconds-before-status-checks", "2",
              "--seconds-between-status-checks", "1"]
# a one-GPU run on the test cluster: its GPU is a CPU process (the cluster's GPUs are stand-ins)
ONE_GPU = {"device": "cpu", "gpus": 1, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
           "data": {"name": "digits"}, "batch": {"global": 64, "per_device": 64},
           "time_min": {"stage": 5, "train": 10, "promote": 5}}
FIELDS = ["JobID", "JobName", "State", "Submit", "Start", "End", "ElapsedRaw", "WorkDir"]


def sacct(since: str, workdir: Path) -> list[dict]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", since, "-o", ",".join(FIELDS)], capture_output=True,
                         text=True, check=True).stdout
    rows = [dict(zip(FIELDS, line.split("|"))) for line in out.splitlines()]
    return [r for r in rows if r["JobID"] and Path(r["WorkDir"]) == workdir]


WAITING_MODEL = '''
import os
import time

from airetrain.train.models import build_model


def waiting(meta, cfg):
    """small_cnn, each training step $STEP_WAIT seconds longer: a wait, as for a GPU of its own."""
    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain, wait = model.forward, float(os.environ["STEP_WAIT"])

    def forward(x):
        if model.training:
            time.sleep(wait)
        return plain(x)

    model.forward = forward
    return model
'''


def search(trials: int) -> dict:
    """A search's run: one GPU a trial, 3 at once, rungs at 1, 3 and 9 epochs."""
    return {**ONE_GPU, "train": {"epochs": 9},
            "tune": {"space": {"optim.lr": {"loguniform": [1.0e-3, 1.0e-1]}}, "trials": trials, "parallel": 3,
                     "sampler": {"tpe": {"seed": 0}}, "pruner": {"successive_halving": {"min_epochs": 1,
                                                                                      "reduction": 3}}}}


def arm(work: Path, pack: str, run: dict, limit: int, step_wait: float = 0.0) -> dict:
    """The workflow of the run s (seeds, or a search) with pack, its figures from sacct and its runs' records."""
    work.mkdir()
    if step_wait:
        (work / "waitlab.py").write_text(WAITING_MODEL)
        run = {**run, "model": {"name": "waitlab:waiting"}}
    cfg = work / "config.yaml"
    cfg.write_text(yaml.safe_dump({"roots": {"scratch": str(work / "scratch")}, "runs": {"s": {**run, "pack": pack}}}))
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.monotonic()
    subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), "--configfile", str(cfg), *SLURM_ARGS,
                    "--jobs", str(limit)], cwd=work, check=True, capture_output=True,
                   # a fast root of the arm's own: the fallback /tmp/airetrain-tmp_shared outlives a job on the
                   # test cluster, and the other arm's runs of the same names would resume from it
                   env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                        "TMP_SHARED": str(work / "fast"), "STEP_WAIT": str(step_wait),
                        "PYTHONPATH": f"{work}:{os.environ.get('PYTHONPATH', '')}"})
    wall = time.monotonic() - t0
    time.sleep(5)   # slurmdbd records the last ends
    jobs = {j["JobID"]: j for j in sacct(since, work)}
    runs = sorted(p.parent.name for p in (work / "results").glob("s-*/train.json"))   # seeds, or rungs
    trained = {r: json.loads((work / "results" / r / "train.json").read_text()) for r in runs}
    # each allocation's seconds not training, shared out over the runs it held
    per_job: dict[str, list[float]] = {}
    for t in trained.values():
        per_job.setdefault(t["slurm_job_id"], []).append(t["train_seconds"])
    idle = [(int(jobs[j]["ElapsedRaw"]) - max(secs)) / len(secs) for j, secs in per_job.items() for _ in secs]
    stagings = sum(line.startswith("staged ") for log in (work / "logs").glob("s-*/stage.log")
                   for line in log.read_text().splitlines())
    first = min(datetime.fromisoformat(j["Submit"]) for j in jobs.values())
    last = max(datetime.fromisoformat(j["End"]) for j in jobs.values())
    return {"runs": len(runs), "submissions": len(jobs), "stagings": stagings,
            "not_training_s_per_run": {"median": statistics.median(idle), "min": min(idle), "max": max(idle)},
            "train_s_per_run": statistics.median(t["train_seconds"] for t in trained.values()),
            "first_submit_to_last_end_s": (last - first).total_seconds(), "snakemake_wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=2, help="running jobs at once (Snakemake's --jobs)")
    ap.add_argument("--search", type=int, metavar="TRIALS", help="a search of this many trials instead of seeds")
    ap.add_argument("--step-wait", type=float, default=0.0, metavar="S",
                    help="each training step S seconds longer, waiting (a stand-in for a GPU of its own)")
    args = ap.parse_args()
    run = search(args.search) if args.search else {**ONE_GPU, "train": {"epochs": args.epochs},
                                                   "seeds": list(range(args.seeds))}
    if not os.environ.get("SLURM_CONF"):
        sys.exit("no SLURM here: `make slurm-up && source tests/slurm/state/env.sh` first")
    with tempfile.TemporaryDirectory(dir=os.environ.get("AIRETRAIN_BENCH_DIR")) as tmp:
        result = {pack: arm(Path(tmp).resolve() / pack, pack, run, args.limit, args.step_wait)
                  for pack in ("none", "auto")}
    first = {pack: r["first_submit_to_last_end_s"] for pack, r in result.items()}
    result["sooner"] = round(first["none"] / first["auto"], 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
