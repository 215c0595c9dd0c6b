"""One trainer per run on the real SLURM cluster: the submitting Snakemake dies while its job trains,
a second Snakemake submits the run again, and the second job waits for the first: in the queue, holding
nothing (a dependency on the job the run's lock names), and the lock itself guards the rest."""
import json
import os

import pytest

from airetrain.train.launcher.lock import LOG

from conftest import BIN, read_json, run, slurm_state, snakemake_cmd, spawn, wait_for, write_config
from test_slurm import SLURM_ARGS, unique
from user_code import write_ownlab

pytestmark = pytest.mark.slurm


def lock_events(run_dir):
    path = run_dir / LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_second_snakemake_after_the_first_died_waits_for_the_job_still_training(slurm_cluster, tmp_path):
    work = tmp_path
    write_ownlab(work)   # ownlab.lab:paced: a second per forward pass while $HOLD exists
    hold = work / "hold"
    hold.touch()
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        "runs": {"long": {"gpus": 0, "processes": 2, "precision": "fp32", "slurm": {"partition": "standard"},
                          "model": {"name": "ownlab.lab:paced"}, "train": {"epochs": 2, "log_every_steps": 1},
                          "checkpoint": {"every_steps": 5}}}})
    env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}", "HOLD": str(hold),
           "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    run_dir, results = work / "scratch/airetrain/long", work / "results/long"

    def pipeline(log):
        return spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "1"), work / log, cwd=work, env=env,
                     exact_env=True)

    first = pipeline("first.log")
    wait_for(lambda: (results / "metrics.jsonl").exists() and (results / "metrics.jsonl").read_text().strip(),
             timeout=300, what="the first job training", every=0.5)
    first.kill()   # SIGKILL, as a dropped SSH connection can leave it: its job trains on
    first.wait()
    (took,) = lock_events(run_dir)
    job1 = took["slurm_job_id"]
    assert took["event"] == "took the lock" and job1
    run(snakemake_cmd(work, cfg, "--unlock"), cwd=work, env=env)
    second = pipeline("second.log")

    def waiting():   # the second job: queued behind the first, which the run's lock names
        return [job for job, why, after in (line.split("|") for line in run(
            ["squeue", "-h", "-o", "%i|%r|%E"], env=env).stdout.splitlines())
            if why == "Dependency" and after.startswith(f"afterany:{job1}")]
    wait_for(waiting, timeout=300, what="the second job queued behind the first", every=0.5)
    (job2,) = waiting()
    states = run(["squeue", "-h", "-j", f"{job1},{job2}", "-o", "%i %T"], env=env).stdout.split()
    assert sorted(zip(states[::2], states[1::2])) == sorted([(job1, "RUNNING"), (job2, "PENDING")])
    assert not (results / "train.json").exists()   # the first is still training, the second waits
    hold.unlink()   # the first finishes now
    assert second.wait(timeout=600) == 0, (work / "second.log").read_text()
    # the lock's log: the second took the lock only after the first released it
    log = [(e["slurm_job_id"], e["event"]) for e in lock_events(run_dir)]
    assert log == [(job1, "took the lock"), (job1, "released the lock"), (job2, "took the lock"),
                   (job2, "released the lock")]
    released = next(e["time"] for e in lock_events(run_dir) if e["event"] == "released the lock")
    sessions = [json.loads(line) for line in (run_dir / "sessions.jsonl").read_text().splitlines()]
    assert [s["slurm_job_id"] for s in sessions] == [job1, job2] and sessions[1]["started"] > released
    # the second found the run trained: train.json is the first job's training, not the empty session's
    summary = read_json(results / "train.json")
    assert summary["slurm_job_id"] == job1 and summary["steps_this_session"] == summary["steps"] > 0
    assert "already trained: long resumed at its last step" in (work / "logs/long/train.log").read_text()
    assert read_json(results / "checkpoint.json")["verified"]
