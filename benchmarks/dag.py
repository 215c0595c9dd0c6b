"""`snakemake -n` on a 200-run sweep, against a plain Snakefile with the same number of jobs.

Goal: the dry run of 200 runs takes at most 10 s on 2 cores. The baseline is the same
DAG shape (plan, stage, train, promote per run, one report) with trivial rules and no airetrain,
so the ratio shows what planning and validation add on top of Snakemake itself.

    python benchmarks/dag.py [--runs 200]
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
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
