"""`airetrain submit` on the real SLURM cluster: the pipeline's Snakemake runs in a job of its own, and nothing is
left running on the submitting side. The workflow's job is cancelled while both runs train; their jobs go on.
Submitted again, the new workflow job unlocks the lock its predecessor left (and only because it was that job's),
and its jobs for the two runs wait in the queue behind the ones still training (a dependency, holding nothing).
Then SLURM's warning before the job's limit is sent: the job stops its Snakemake, requeues itself, unlocks its own
lock, cancels the jobs its Snakemake had queued, and queues the runs again. The pipeline finishes with nothing
trained twice: the model's own count of training forward passes is each run's optimizer steps and no more."""
import json
import os

import pytest
import yaml

from conftest import BIN, descendants, read_json, run, slurm_state, wait_for
from test_slurm import unique

pytestmark = pytest.mark.slurm

COUNTED = '''
import os
import time
from pathlib import Path

from airetrain.train.models import build_model


def counted(meta, cfg):
    """The built-in small_cnn; each training forward pass appends a byte to forwards-<tag>-<rank>, and takes a
    second while $HOLD exists."""
    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain, tag = model.forward, cfg["options"]["tag"]

    def forward(x):
        if model.training:
            with open(Path(os.environ["COUNT_DIR"]) / f"forwards-{tag}-{os.environ['RANK']}", "ab") as f:
                f.write(b".")
            if os.path.exists(os.environ["HOLD"]):
                time.sleep(1)
        return plain(x)

    model.forward = forward
    return model
'''
STATUS_ARGS = ["--", "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "1",
               "--jobs", "4"]


def queue(env) -> dict[str, dict]:
    """{job id: {name, state, reason, dependency}} of the jobs SLURM lists."""
    out = run(["squeue", "-h", "-o", "%i|%j|%T|%r|%E"], env=env).stdout
    return {line.split("|")[0]: dict(zip(("name", "state", "reason", "dependency"), line.split("|")[1:]))
            for line in out.splitlines()}


def lock_owner(project, name):
    path = project / "scratch/airetrain" / name / "trainer.lock"
    return json.loads(path.read_text())["slurm_job_id"] if path.exists() else None


def test_the_workflow_job_outlives_a_cancel_and_nothing_is_trained_twice(slurm_cluster, tmp_path):
    project = tmp_path / "project"
    env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}", "SCRATCH": str(project / "scratch"),
           "HOLD": str(tmp_path / "hold"), "COUNT_DIR": str(tmp_path),
           "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(tmp_path))}
    run([str(BIN / "airetrain"), "init", str(project), "--account", "lab"], env=env)
    (project / "countlab.py").write_text(COUNTED)
    config = yaml.safe_load((project / "config/config.yaml").read_text())
    config["defaults"].update({"precision": "fp32", "train": {"epochs": 6, "log_every_steps": 1},
                               "checkpoint": {"every_steps": 4}, "slurm": {"partition": "standard"}})
    config["runs"] = {name: {"model": {"name": "countlab:counted", "options": {"tag": name}}} for name in ("a", "b")}
    (project / "config/config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "hold").touch()   # a second a step until the test removes it: 132 steps, longer than the steps below

    first = run([str(BIN / "airetrain"), "submit", *STATUS_ARGS], env=env, cwd=project).stdout
    job1 = first.split("SLURM job ")[1].split(":")[0]
    assert "its log: logs/workflow/workflow.log" in first
    assert descendants(os.getpid()) == []   # the submitting side runs nothing: Snakemake is in the job
    assert queue(env)[job1]["name"].startswith("airetrain-workflow-")
    wait_for(lambda: lock_owner(project, "a") and lock_owner(project, "b"), timeout=300,
             what="both runs training in their jobs", every=0.5)
    trainers = {name: lock_owner(project, name) for name in ("a", "b")}
    status = run([str(BIN / "airetrain"), "status"], env=env, cwd=project).stdout
    assert f"workflow job {job1} (airetrain submit): running" in status, status

    run(["scancel", job1], env=env)
    wait_for(lambda: job1 not in queue(env), timeout=120, what="the workflow job gone", every=0.5)
    assert all(queue(env)[job]["state"] == "RUNNING" for job in trainers.values())   # its runs train on
    assert (project / ".snakemake/locks").is_dir() and any((project / ".snakemake/locks").iterdir())

    second = run([str(BIN / "airetrain"), "submit", *STATUS_ARGS], env=env, cwd=project).stdout
    job2 = second.split("SLURM job ")[1].split(":")[0]
    log = project / "logs/workflow/workflow.log"
    wait_for(lambda: f"unlocking the project: they were left by workflow job {job1}" in log.read_text(),
             timeout=120, what="the second workflow job unlocking", every=0.5)

    def waiting():   # {the job it waits for: the new job} of both runs, queued behind the ones still training
        return {info["dependency"].split("(")[0].removeprefix("afterany:"): job for job, info in queue(env).items()
                if info["reason"] == "Dependency"}
    wait_for(lambda: sorted(waiting()) == sorted(trainers.values()), timeout=180,
             what="the resubmitted runs waiting on their trainers", every=0.5)
    queued_before = set(waiting().values())
    # SLURM's warning before the limit (--signal=B:USR1@300), sent now: Snakemake is stopped, the job requeued
    run(["scancel", "--batch", "--signal=USR1", job2], env=env)
    wait_for(lambda: "SLURM's restarts of this job: 1" in log.read_text(), timeout=400,
             what="the workflow job requeued and started again", every=1)
    wait_for(lambda: "cancelled the jobs that Snakemake had queued" in log.read_text(), timeout=120,
             what="its own lock removed, and its Snakemake's queued jobs cancelled", every=0.5)
    text = log.read_text()
    assert f"requeueing job {job2}" in text and "unlocking the project: they are this job's own" in text
    assert all(job in text.split("cancelled the jobs")[1].splitlines()[0] for job in queued_before)
    wait_for(lambda: sorted(waiting()) == sorted(trainers.values()) and not set(waiting().values()) & queued_before,
             timeout=180, what="the runs queued again behind their trainers", every=0.5)
    again = {name: waiting()[job] for name, job in trainers.items()}
    (tmp_path / "hold").unlink()
    wait_for(lambda: job2 not in queue(env), timeout=600, what="the pipeline finishing", every=1)
    text = log.read_text()
    assert (project / "results/report/efficiency.md").exists(), text[-3000:]

    jobs = [job1, job2, *trainers.values(), *again.values()]
    states = dict(line.split("|") for line in run(["sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o",
                                                   "JobID,State"], env=env).stdout.splitlines())
    assert states[job1].startswith("CANCELLED") and states[job2] == "COMPLETED", states
    assert all(states[job] == "COMPLETED" for job in [*trainers.values(), *again.values()]), states
    for name in ("a", "b"):
        train = read_json(project / "results" / name / "train.json")
        assert train["slurm_job_id"] == trainers[name] and train["steps_this_session"] == train["steps"] > 0
        assert read_json(project / "results" / name / "checkpoint.json")["verified"]
        # The model's own count of training forward passes: each step's once, and in each of the run's two jobs
        # the two that train nothing (the FLOP count, DDP's bucket settling). A step trained again would add.
        for rank in range(train["world_size"]):
            assert (tmp_path / f"forwards-{name}-{rank}").stat().st_size == train["steps"] + 2 * 2, (name, rank)
