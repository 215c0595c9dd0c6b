"""`snakemake -n` on a 200-run sweep, against a plain Snakefile with the same number of jobs; and with
--tune, a search of 300 trials.

Goal: the dry run of 200 runs takes at most 10 s on 2 cores. The baseline is the same
DAG shape (plan, stage, train, promote per run, one report) with trivial rules and no airetrain,
so the ratio shows what planning and validation add on top of Snakemake itself.

--tune: one tuned run of 300 trials, 15 at once, successive halving by 3 over 27 epochs. The study is
driven to its end by the workflow's own step (tune/steps.decide, real Optuna: TPE and the pruner), with
each rung's result written here (synthetic losses, as the trainer's files lay them out). Measured: each
step's work after a rung result (in the process, and the real `airetrain tune-step` command for the
300th trial, Python's start included), and `snakemake -n` at the start and with every step decided
(every rung's files written, in the order its steps make them: the whole DAG of ~600 steps to walk).
Goals: under 2 s a step, under 10 s a dry run.

    python benchmarks/dag.py [--runs 200] [--tune [--trials 300]]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")

BASELINE = """
RUNS = [f"r{i}" for i in range(config["runs"])]
rule all:
    input: "report.txt"
rule plan:
    output: "results/{run}/plan.json"
    shell: "touch {output}"
rule stage:
    input: "results/{run}/plan.json"
    output: "results/{run}/stage.json"
    shell: "touch {output}"
rule train:
    input: "results/{run}/stage.json"
    output: "results/{run}/train.json"
    shell: "touch {output}"
rule promote:
    input: "results/{run}/train.json"
    output: "results/{run}/checkpoint.json"
    shell: "touch {output}"
rule report:
    input: expand("results/{run}/checkpoint.json", run=RUNS)
    output: "report.txt"
    shell: "touch {output}"
"""


def timed(cmd: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t


def tune(trials: int, repeats: int) -> None:
    import json
    import statistics

    from airetrain.plan.planner import plan_all
    from airetrain.records import Plan, write_record
    from airetrain.typed import to_dict
    from airetrain.tune.steps import decide

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run = {"train": {"epochs": 27}, "tune": {
            "space": {"optim.lr": {"loguniform": [1e-5, 1e-1]}, "optim.weight_decay": {"uniform": [0.0, 0.1]},
                      "model.width": {"choice": [16, 32, 64]}},
            "trials": trials, "parallel": 15, "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 3}}}}
        config = {"roots": {"scratch": str(tmp / "scratch")}, "runs": {"cnn": run}}
        (tmp / "tune.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        results = tmp / "results"
        plans = plan_all(config, results=results)
        tuned = plans["cnn"]
        Path(tuned.dataset).mkdir(parents=True)   # prepared, as the workflow's first job leaves it
        write_record(results / "cnn" / "plan.json", Plan, tuned)
        dry = [SNAKEMAKE, "-n", "-q", "-s", str(REPO / "Snakefile"), "-d", str(tmp), "--configfile",
               str(tmp / "tune.yaml"), "--cores", "2"]
        start = min(timed(dry, tmp) for _ in range(repeats))
        settings = json.dumps(to_dict(plans.settings))
        slots = {s: [decide(tuned, s, 0, results)] for s in range(15)}
        seconds, command = [], None
        while any(not chain[-1].get("done") for chain in slots.values()):
            for slot, chain in slots.items():
                last = chain[-1]
                if last.get("done"):
                    continue
                _rung_results(results, last)
                asked = len(list((results / "cnn/tune/trials").iterdir()))
                if asked == trials - 1 and command is None:   # the real command tells a rung and asks the last trial
                    out = results / f"cnn/tune/slot{slot}/step{len(chain)}.json"
                    command = timed([sys.executable, "-m", "airetrain", "tune-step", "--plan",
                                     str(results / "cnn/plan.json"), "--settings-json", settings, "--slot", str(slot),
                                     "--step", str(len(chain)), "--out", str(out)], tmp)
                    chain.append(json.loads(out.read_text()))
                    continue
                t = time.perf_counter()
                chain.append(decide(tuned, slot, len(chain), results))
                seconds.append((asked, time.perf_counter() - t))
        steps = sum(len(c) for c in slots.values())
        full = min(timed(dry, tmp) for _ in range(repeats))
        late = [s for asked, s in seconds if asked >= trials * 0.8]
        print(f"tune: {trials} trials, 15 at once, rungs 1/3/9/27: {steps} steps")
        print(f"step's work in the process : median {statistics.median(late):.3f} s, max {max(late):.3f} s "
              f"(the steps after {int(trials * 0.8)} trials; goal < 2 s)")
        print(f"airetrain tune-step command: {command:.2f} s (the {trials}th trial asked; Python's start included)")
        print(f"snakemake -n at the start  : {start:.2f} s (best of {repeats})")
        print(f"snakemake -n, all decided  : {full:.2f} s (best of {repeats}; goal < 10 s)")
        print(f"plain Snakefile -n, {steps * 5} jobs : {plain(tmp, steps, repeats):.2f} s (best of {repeats})")


def plain(tmp: Path, rungs: int, repeats: int) -> float:
    """The baseline: a plain Snakefile of as many rungs' jobs (plan, stage, train, promote) and no airetrain."""
    (tmp / "Baseline.smk").write_text(BASELINE)
    return min(timed([SNAKEMAKE, "-n", "-q", "-s", str(tmp / "Baseline.smk"), "-d", str(tmp / "b"),
                      "--config", f"runs={rungs}", "--cores", "2"], tmp) for _ in range(repeats))


def _rung_results(results: Path, decision: dict) -> None:
    """Synthetic: the files a rung's train step leaves, a loss that falls with the epochs and depends on the lr."""
    import json
    import math

    folder = results / f"{decision['trial']}-e{decision['epochs']}"
    folder.mkdir(parents=True, exist_ok=True)
    params = json.loads((results / f"cnn/tune/trials/t{decision['number']:03d}.json").read_text())["params"]
    for name in ("plan.json", "stage.json"):   # every file of the rung's steps, in the order they are made
        (folder / name).write_text("{}")
    (folder / "train.json").write_text(json.dumps({"steps_per_epoch": 10, "stopped_early": None}))
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": 10 * e, "eval_loss": abs(math.log10(params["optim.lr"]) + 3) + 1 / e}) + "\n"
        for e in range(1, decision["epochs"] + 1)))
    for name in ("checkpoint.json", "run.json"):
        (folder / name).write_text("{}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tune", action="store_true", help="a search of --trials trials instead of a sweep")
    p.add_argument("--trials", type=int, default=300)
    args = p.parse_args()
    if args.tune:
        return tune(args.trials, args.repeats)
    seeds = args.runs // 10
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config = {"roots": {"scratch": str(tmp / "scratch")}, "runs": {"base": {}},
                  "sweep": {"optim.lr": [round(1e-4 * (i + 1), 6) for i in range(10)],
                            "train.seed": list(range(seeds))}}
        (tmp / "sweep.yaml").write_text(yaml.safe_dump(config))
        (tmp / "Baseline.smk").write_text(BASELINE)
        ours, base = [], []
        for _ in range(args.repeats):  # alternate the two
            ours.append(timed([SNAKEMAKE, "-n", "-q", "-s", str(REPO / "Snakefile"), "-d", str(tmp / "a"),
                               "--configfile", str(tmp / "sweep.yaml"), "--cores", "2"], tmp))
            base.append(timed([SNAKEMAKE, "-n", "-q", "-s", str(tmp / "Baseline.smk"), "-d", str(tmp / "b"),
                               "--config", f"runs={10 * seeds}", "--cores", "2"], tmp))
        print(f"runs: {10 * seeds} ({5 * 10 * seeds + 2} jobs)")
        print(f"airetrain snakemake -n : {min(ours):.2f} s (best of {args.repeats}; goal <= 10 s)")
        print(f"plain Snakefile -n     : {min(base):.2f} s (best of {args.repeats})")
        print(f"ratio                  : {min(ours) / min(base):.2f}x")


if __name__ == "__main__":
    main()
