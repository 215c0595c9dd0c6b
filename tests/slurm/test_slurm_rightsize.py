"""resources: measured on the real SLURM cluster: a generous first run, then a run of the same profile
that asks for what the first used (sacct shows the smaller request), which suffices."""
import math

import pytest

from airetrain.rundir.history import everything
from airetrain.sizing import MEM_HEADROOM, TIME_HEADROOM
from airetrain.cluster.units import size_mb

from conftest import BIN, read_json, run, slurm_state, write_config
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
    # the smaller request sufficed: the cluster enforces memory (its cgroups end a step that exceeds it
    # OUT_OF_MEMORY, as the test below shows) and SLURM ended the job and every step COMPLETED. Not the
    # report's memory used against the request: that is every process's RSS summed, as jobacct_gather/linux
    # samples it, which counts torch's shared pages once per process and so may exceed what the cgroup
    # charged. The same profile's peak is a larger share of the smaller request.
    config = run(["scontrol", "show", "config"], env=env).stdout
    assert "task/cgroup" in config, "the test cluster does not enforce memory"
    steps = run(["sacct", "-n", "-P", "-o", "JobID,State", "-j", job["JobID"]], env=env).stdout.split()
    assert steps and all(line.endswith("|COMPLETED") for line in steps), steps
    assert rows["sized"]["job_state"] == "COMPLETED" and job["State"] == "COMPLETED"
    assert float(rows["sized"]["mem_eff"]) > float(rows["first"]["mem_eff"])
    assert "results/first/train.json" not in proc.stdout + proc.stderr   # the first run stays done
    # the report closes the loop: the config line for the first, the comparison for the second
    page = (work / "results/report/efficiency.md").read_text()
    print(page.split("Columns")[0])
    assert "set resources: measured in runs.first" in rows["first"]["advice"]
    sized = next(line for line in page.splitlines() if line.startswith("- **sized**: used MemEff"))
    assert f"learned from job {measured['job_id']} of first: MemEff" in sized
    assert f"MemEff {float(rows['sized']['mem_eff']):.1%}" in sized


HOG = '''
import os
from pathlib import Path

import torch

from airetrain.train.models import build_model

HELD = []


def hog(meta, cfg):
    """small_cnn whose process takes `mb` MB more of host memory at its `after`-th training forward pass, and
    keeps it; each training forward pass appends a byte to forwards-<tag>-<SLURM job>."""
    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain, options, seen = model.forward, cfg["options"], [0]

    def forward(x):
        if model.training and torch.is_grad_enabled():
            seen[0] += 1
            with open(Path(options["log"]) / f"forwards-{options['tag']}-{os.environ['SLURM_JOB_ID']}", "ab") as f:
                f.write(b".")
            if seen[0] == options["after"]:
                HELD.append(torch.ones(options["mb"] * 2 ** 18))   # float32: 4 bytes, every page touched
        return plain(x)

    model.forward = forward
    return model
'''


def test_a_run_out_of_host_memory_asks_for_more_and_resumes_and_retry_oom_0_leaves_it_failed(slurm_cluster,
                                                                                            tmp_path):
    """Two runs whose training process takes 2.5 GB more, after 13 of their 66 steps, than their 2 GB allow:
    SLURM ends the step OUT_OF_MEMORY (twice a job: torchrun restarts it once, from its checkpoint). `hog`
    (retry.oom: 1) is submitted again asking for 4 GB, resumes from its checkpoint and finishes; `held`
    (retry.oom: 0) is submitted again as it was, trains nothing, and is left failed, the figure in the advice.
    Which job trained which run is the model's own record; what each asked for and how it ended, sacct's."""
    work, log = tmp_path, tmp_path / "log"
    log.mkdir()
    (work / "hoglab.py").write_text(HOG)

    def run_cfg(tag, **more):
        return {"gpus": 0, "processes": 1, "mem_gb_per_rank": 2, "slurm": {"partition": "standard"},
                "precision": "fp32", "data": {"workers": 0}, "train": {"epochs": 3}, "checkpoint": {"every_steps": 2},
                "model": {"name": "hoglab:hog", "options": {"log": str(log), "tag": tag, "mb": 2560, "after": 26}},
                **more}
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {
        "hog": run_cfg("hog"), "held": run_cfg("held", retry={"oom": 0})}})
    proc = slurm_snakemake(work, cfg, env, "--jobs", "2", "--keep-going", check=False)
    assert proc.returncode != 0, proc.stderr[-3000:]   # held failed
    forwards = {}   # {run: {job: training forward passes}}
    for path in log.iterdir():
        _, tag, job = path.name.split("-")
        forwards.setdefault(tag, {})[job] = path.stat().st_size
    accounting = run(["sacct", "-n", "-P", "-o", "JobID,State,ReqMem", "-j",
                      ",".join(j for jobs in forwards.values() for j in jobs)], env=env).stdout
    state, asked, step_oom = {}, {}, set()
    for line in accounting.splitlines():
        job_id, job_state, req = line.split("|")
        if "." not in job_id:
            state[job_id], asked[job_id] = job_state, size_mb(req)
        elif job_state == "OUT_OF_MEMORY":
            step_oom.add(job_id.split(".")[0])
    first, second = sorted(forwards["hog"], key=int)
    assert first in step_oom and asked[first] == 2048 and state[first] != "COMPLETED", accounting
    assert second not in step_oom and asked[second] == 4096 and state[second] == "COMPLETED", accounting
    trained = read_json(work / "results/hog/train.json")
    assert trained["steps"] == 66 and trained["slurm_job_id"] == second
    # the second job resumed: fewer forward passes than the whole run's 132 (2 a step), and together more
    assert forwards["hog"][second] < 2 * 66 < forwards["hog"][first] + forwards["hog"][second]
    (held,) = forwards["held"]   # held trained in one job only
    assert held in step_oom and asked[held] == 2048, accounting
    # its second job, resubmitted by Snakemake as it was, knew it would run out again and trained nothing
    said = (work / "logs/held/train.log").read_text()
    again = said.split("so it is not trained")[0].rsplit("Job ", 1)[1].split(" ")[0]
    fields = run(["sacct", "-n", "-P", "-o", "JobID,State,ReqMem", "-j", again], env=env).stdout.splitlines()
    assert int(again) > int(held) and fields[0].split("|")[1:] == ["FAILED", "2G"], fields
    assert not any("OUT_OF_MEMORY" in line for line in fields)
    assert not (work / "results/held/train.json").exists()

    run([str(BIN / "airetrain"), "report", "--results", "results", "--out", "report", "hog", "held"], env=env,
        cwd=work)
    rows = {r["run"]: r for r in __import__("csv").DictReader(open(work / "report/efficiency.csv"))}
    assert f"job {first} ran out of host memory with 2.0 GB" in rows["hog"]["advice"]
    assert "the run asked for 4 GB from its next job on" in rows["hog"]["advice"]
    assert f"job {held} ran out of host memory with 2.0 GB" in rows["held"]["advice"]
    assert "not retried with more: retry.oom = 0" in rows["held"]["advice"]
    assert "would do" not in rows["held"]["advice"]   # no smaller request for a run that ran out
