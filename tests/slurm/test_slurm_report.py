"""The report on live jobs of the SLURM test cluster: known efficiencies, every kind of ending, one sacct."""
import csv
import os
import re
import sys

import pytest

from airetrain.cluster.units import duration_s
from conftest import ending_what_it_starts, run, wait_for
from jobs import run_all, sbatch, state

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def live_jobs(slurm_cluster):
    with ending_what_it_starts(slurm_cluster):
        return run_all(env={**os.environ, **slurm_cluster}), slurm_cluster


def test_live_jobs_get_their_known_figures_from_one_sacct_call(live_jobs, tmp_path):
    ids, env = live_jobs
    out = run(["airetrain", "report", "--jobs", ",".join(ids.values()), "--out", str(tmp_path)], env=env).stdout
    rows = {r["run"] + ("" if r["run"] != "array" else r["job_id"]): r
            for r in csv.DictReader(open(tmp_path / "efficiency.csv"))}
    # the burner's efficiency is SLURM's own CPU time over its elapsed time and cores, and that CPU time
    # holds the 8 s the burner spun for
    burner = rows["burner"]
    accounted = [line.split("|") for line in run(["sacct", "-n", "-P", "-j", ids["burner"], "-o",
                                                  "JobID,TotalCPU,Elapsed,AllocCPUS"], env=env).stdout.split()]
    (_, _, elapsed, cpus), steps = accounted[0], accounted[1:]   # the allocation, then its steps
    cpu_s = sum(duration_s(total) for _, total, _, _ in steps)   # each step's CPU time (the batch script's)
    assert cpu_s >= 8 and float(burner["cpus"]) == int(cpus) == 2
    assert float(burner["cpu_eff"]) == pytest.approx(cpu_s / (duration_s(elapsed) * 2), rel=0.02)
    # the toucher held 500 MiB of its 1000 MB: its peak holds them, and its efficiency is that share
    toucher = rows["toucher"]
    assert float(toucher["mem_alloc_mb"]) == 1000 and float(toucher["mem_used_mb"]) >= 500
    assert float(toucher["mem_eff"]) == pytest.approx(float(toucher["mem_used_mb"]) / 1000, rel=1e-3)
    multinode = rows["multinode"]
    assert multinode["job_state"] == "COMPLETED" and float(multinode["mem_used_mb"]) > 350   # 2 x 200 MB summed
    assert rows["requeued"]["requeues"] == "1" and rows["requeued"]["job_state"] == "COMPLETED"
    assert rows["cancelled"]["job_state"] == "CANCELLED"
    assert rows["timeout"]["job_state"] == "TIMEOUT" and float(rows["timeout"]["time_eff"]) >= 1
    assert rows["oom"]["job_state"] == "OUT_OF_MEMORY" and "ran out of memory" in rows["oom"]["advice"]
    assert sum(1 for k in rows if k.startswith("array")) == 2
    assert "| burner |" in out and (tmp_path / "efficiency.html").stat().st_size > 10_000


def test_a_run_trained_in_an_array_task_gets_that_tasks_row_once(slurm_cluster, tmp_path):
    """Inside a real array task the trainer's job id (airetrain.cluster.slurm.job_id, what train.json records)
    is the task's own: sacct's JobIDRaw for it, not the array's. A run's train.json with that id gets
    that task's row in the report, once."""
    env, client = slurm_cluster, {**os.environ, **slurm_cluster}   # run() adds the venv's PATH; sbatch does not
    record = "from airetrain.cluster.slurm import job_id; print(job_id())"
    array = sbatch("recorded", ["-p", "standard", "-c", "1", "--mem=200M", "-t", "5", "--array=1-2",
                                f"--output={tmp_path}/task-%a.out", f"--wrap={sys.executable} -c '{record}'"], client)

    def tasks() -> dict[str, list[str]]:
        out = run(["sacct", "-X", "-n", "-P", "-j", array, "-o", "JobID,JobIDRaw,State"], env=env).stdout
        return {line.split("|")[0]: line.split("|") for line in out.split()}
    wait_for(lambda: not state(array, client) and {f"{array}_1", f"{array}_2"} <= set(tasks()), 120,
             "the array's tasks to end and be in accounting", every=0.5)
    task, raw, ended = tasks()[f"{array}_1"]
    recorded = (tmp_path / "task-1.out").read_text().strip()
    assert recorded == raw != array and ended == "COMPLETED", (recorded, tasks())   # the task's own id
    (tmp_path / "results" / "in_array").mkdir(parents=True)
    (tmp_path / "results" / "in_array" / "train.json").write_text(f'{{"slurm_job_id": "{recorded}"}}')
    run(["airetrain", "report", "--results", str(tmp_path / "results"), "--out", str(tmp_path), "in_array"],
        env=env)
    rows = list(csv.DictReader(open(tmp_path / "efficiency.csv")))
    assert [(r["run"], r["job_id"], r["job_state"]) for r in rows] == [("in_array", raw, "COMPLETED")], rows
    assert float(rows[0]["timelimit_s"]) == 300 and "not in accounting" not in rows[0]["status"]   # the task's -t 5
    jobs = run(["airetrain", "report", "--jobs", raw, "--out", str(tmp_path / "by_id")], env=env).stdout
    rows = list(csv.DictReader(open(tmp_path / "by_id" / "efficiency.csv")))
    assert [(r["job_id"], r["job_state"]) for r in rows] == [(task, "COMPLETED")], jobs


def test_since_finds_the_same_jobs(live_jobs):
    ids, env = live_jobs
    out = run(["airetrain", "report", "--since", "now-1hour"], env=env).stdout
    for name in ("burner", "toucher", "timeout", "oom"):
        assert re.search(rf"\| {name} \|", out), name


def test_a_running_job_and_an_unknown_id_get_a_status_not_a_crash(slurm_cluster, tmp_path):
    env = {**os.environ, **slurm_cluster}
    job_id = sbatch("still_running", ["-p", "standard", "-c", "1", "--mem=200M", "-t", "5", "--wrap=sleep 120"], env)
    try:
        # squeue says RUNNING a moment before slurmdbd has the start: wait for accounting to say so
        accounted = ["sacct", "-X", "-n", "-P", "-o", "State", "-j", job_id]
        wait_for(lambda: state(job_id, env) == "RUNNING"
                 and run(accounted, env=slurm_cluster).stdout.strip() == "RUNNING",
                 120, "the job to start", every=0.5)
        run(["airetrain", "report", "--jobs", f"{job_id},999999", "--out", str(tmp_path)], env=slurm_cluster)
    finally:
        run(["scancel", job_id], env=slurm_cluster)
    rows = {r["job_id"]: r for r in csv.DictReader(open(tmp_path / "efficiency.csv"))}
    assert rows[job_id]["job_state"] == "RUNNING" and rows[job_id]["status"] == "running: figures so far"
    # elapsed may still be 0 s when accounting has just recorded the start
    assert float(rows[job_id]["timelimit_s"]) == 300 and 0 <= float(rows[job_id]["time_eff"]) < 1
    assert rows[job_id]["advice"] == ""
    assert rows["999999"]["job_state"] == "MISSING" and "not in accounting" in rows["999999"]["status"]
