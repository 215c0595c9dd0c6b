"""resources: measured on the real SLURM cluster: a generous first run, then a run of the same profile
that asks for what the first used (sacct shows the smaller request), which suffices."""
import math

import pytest

from airetrain.rundir.history import everything
from airetrain.sizing import MEM_HEADROOM, TIME_HEADROOM
from airetrain.cluster.units import size_mb

from conftest import read_json, slurm_state, write_config
from test_slurm import sacct_jobs, slurm_snakemake, unique

pytestmark = pytest.mark.slurm


def test_a_right_sized_run_asks_for_what_the_first_used_and_it_suffices(slurm_cluster, tmp_path):
    work = tmp_path
    first = {"gpus": 0, "processes": 2, "slurm": {"partition": "standard"}, "mem_gb_per_rank": 4,
             "time_min": {"stage": 5, "train": 30, "promote": 5}, "train": {"epochs": 2}}
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {"first": first}})
    slurm_snakemake(work, cfg, env, "--jobs", "1")
    (measured,) = everything(work / "scratch")
    m = measured["measured"]
    cfg = write_config(work / "config2.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {
        "first": first, "sized": {**first, "resources": "measured"}}})
    since = __import__("time").strftime("%Y-%m-%dT%H:%M:%S")
    proc = slurm_snakemake(work, cfg, env, "--jobs", "1")
    plan = read_json(work / "results/sized/plan.json")
    assert plan["right_sized"]["from"].startswith(f"job {measured['job_id']} of first")
    # the request follows the stated formulas of the first run's measurements
    mem_gb = max(math.ceil(m["mem_peak_mb_per_node"] * MEM_HEADROOM / 1024 * 10) / 10, 1.0)
    train_min = math.ceil((m["seconds_per_step"] * m["steps"] * TIME_HEADROOM + m["startup_s"]) / 60 + 5)
    assert plan["mem_gb_per_node"] == mem_gb and plan["time_min"]["train"] == train_min
    (job,) = sacct_jobs(env, since).values()
    alloc = dict(item.split("=", 1) for item in job["AllocTRES"].split(","))
    assert size_mb(alloc["mem"]) == int(mem_gb * 1024) < 8 * 1024   # the first asked for 8 GB
    rows = {r["run"]: r for r in __import__("csv").DictReader(open(work / "results/report/efficiency.csv"))}
    assert float(rows["sized"]["timelimit_s"]) == plan["time_min"]["total"] * 60 < float(rows["first"]["timelimit_s"])
    # the smaller request sufficed (SLURM ended the job COMPLETED, its peak within its memory), and the
    # same profile's peak is a larger share of it
    assert rows["sized"]["job_state"] == "COMPLETED" and job["State"] == "COMPLETED"
    assert float(rows["sized"]["mem_used_mb"]) <= float(rows["sized"]["mem_alloc_mb"])
    assert float(rows["sized"]["mem_eff"]) > float(rows["first"]["mem_eff"])
    assert "results/first/train.json" not in proc.stdout + proc.stderr   # the first run stays done
    # the report closes the loop: the config line for the first, the comparison for the second
    page = (work / "results/report/efficiency.md").read_text()
    print(page.split("Columns")[0])
    assert "set resources: measured in runs.first" in rows["first"]["advice"]
    sized = next(line for line in page.splitlines() if line.startswith("- **sized**: used MemEff"))
    assert f"learned from job {measured['job_id']} of first: MemEff" in sized
    assert f"MemEff {float(rows['sized']['mem_eff']):.1%}" in sized
