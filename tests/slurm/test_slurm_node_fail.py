"""A node dies mid-run, on the real SLURM test cluster: one node of a 2-node run dies while it trains
(its slurmd and every process of the job on it killed) and is set DOWN, as a health check sets it.

SLURM ends the job NODE_FAIL and requeues it (the pipeline submits with --requeue); the job waits
while the node is down (SLURM never allocates a DOWN node), runs again once the node is back,
resumes from the newest durable checkpoint (its node-local fast root is gone, as on Aire) and
finishes with the parameters of the same training uninterrupted. `airetrain status` shows the
requeue while it waits, and the report shows the node failure on the run's row.
"""
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airetrain.rundir.run_log import sessions
from conftest import (BIN, SLURM_DIR, assert_identical, newest_step, read_json, run, slurm_state, snakemake_cmd, spawn,
                      wait_for, write_config)
from user_code import write_ownlab
from test_slurm import SLURM_ARGS, STAND_IN
from test_slurm_requeue import final_state

pytestmark = pytest.mark.slurm

NODE = "labgpu2"
# 6 stand-in GPUs: 2 nodes of 3; a save every 3 steps; 2 epochs of 14 steps
TRAINING = {**STAND_IN, "gpus": 6, "batch": {"global": 96, "per_device": 16}, "model": {"dropout": 0.2},
            "checkpoint": {"every_steps": 3}, "train": {"epochs": 2, "log_every_steps": 1}}


def node_state(env) -> str:
    return run(["sinfo", "-h", "-n", NODE, "-o", "%T"], env=env).stdout.strip()


def kill_node(node: str) -> int:
    """The node dies: its slurmd and every process on it (all that share its UTS namespace: the job's
    slurmstepd, torchrun and ranks there), at once. Returns how many were killed."""
    daemon = int((slurm_state() / "run" / f"slurmd-{node}.pid").read_text())
    namespace = os.readlink(f"/proc/{daemon}/ns/uts")
    killed = 0
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/ns/uts") == namespace:
                os.kill(pid, signal.SIGKILL)
                killed += 1
        except OSError:   # gone meanwhile, or not ours to read (the container's init)
            pass
    return killed


def revive_node(node: str, env) -> None:
    """Its slurmd started again (tests/slurm/slurmd.sh) and the node resumed: the cluster as later tests expect."""
    daemon = slurm_state() / "run" / f"slurmd-{node}.pid"
    alive = daemon.exists() and os.path.exists(f"/proc/{daemon.read_text().strip()}")
    if not alive:
        subprocess.run(["bash", str(SLURM_DIR / "slurmd.sh"), node], check=True,
                       env={**os.environ, "AIRETRAIN_SLURM_STATE": str(slurm_state())})
    run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env, check=False)


def allocations(env, job: str) -> list[dict]:
    """Each run of the job as accounting has it (a requeued job has one row per run)."""
    fields = ["JobID", "State", "NodeList"]
    out = run(["sacct", "-X", "-n", "-P", "--duplicates", "-j", job, "-o", ",".join(fields)], env=env).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]


def test_a_node_that_dies_mid_run_requeues_the_job_and_it_resumes_exactly(slurm_cluster, tmp_path):
    work = tmp_path
    hold = work / "hold"
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        "runs": {
            # held at a second a step (tests/user_code.py's paced model, ref's network) until the node is down
            "victim": {**TRAINING, "model": {"name": "ownlab.lab:paced", "dropout": 0.2}},
            "ref": TRAINING,
        }})
    write_ownlab(work)
    hold.touch()
    # each job's own $TMPDIR, purged when it ends (the cluster's TaskProlog and Epilog), as Aire's
    env = {**slurm_cluster, "AIRETRAIN_LAB_JOB_TMPDIR": "1", "HOLD": str(hold)}
    status_cmd = [str(BIN / "airetrain"), "status", "--configfile", str(cfg), "--json"]
    pipeline = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "2"), work / "snakemake.log", cwd=work, env=env)
    durable = work / "scratch" / "airetrain" / "victim" / "checkpoints"
    try:
        wait_for(lambda: newest_step(durable) >= 6, timeout=600, what="the victim's checkpoint at step 6")
        job = sessions(work / "scratch" / "airetrain" / "victim")[-1]["slurm_job_id"]
        assert allocations(env, job)[0]["NodeList"] == "labgpu[1-2]"
        died = time.time()
        assert kill_node(NODE) >= 5   # slurmd, the job's slurmstepd, torchrun and its 3 ranks, at least
        run(["scontrol", "update", f"nodename={NODE}", "state=down", "reason=airetrain-test"], env=env)
        assert node_state(env).startswith("down")
        wait_for(lambda: [a["State"] for a in allocations(env, job)][:1] == ["NODE_FAIL"], timeout=120,
                 what="the job's first run to end NODE_FAIL", every=0.5)
        killed_at = newest_step(durable)
        # requeued, and waiting while the node is down: never started on it
        wait_for(lambda: run(["squeue", "-h", "-j", job, "-o", "%T"], env=env).stdout.strip() == "PENDING",
                 timeout=120, what="the requeued job pending", every=0.5)
        rows = {}

        def status_shows_the_requeue():
            rows.update({r["run"]: r for r in json.loads(run(status_cmd, cwd=work, env=env).stdout)})
            return rows["victim"]["state"] == "pending" and rows["victim"].get("requeues") == 1
        wait_for(status_shows_the_requeue, timeout=120, what="status showing the requeue", every=1)
        assert "[requeued 1x after NODE_FAIL]" in rows["victim"]["detail"], rows["victim"]
        print("status while the node is down:", rows["victim"]["detail"])
        assert [a["State"] for a in allocations(env, job)][0] == "NODE_FAIL"
    finally:
        back = time.time()
        revive_node(NODE, env)
        hold.unlink(missing_ok=True)
    wait_for(lambda: node_state(env) in ("idle", "mixed", "allocated"), timeout=120, what=f"{NODE} back",
             every=0.5)
    assert pipeline.wait(timeout=900) == 0, (work / "snakemake.log").read_text()[-5000:]

    train = read_json(work / "results" / "victim" / "train.json")
    assert train["slurm_job_id"] == job   # the same job, requeued by SLURM, not a second submission
    assert 6 <= train["resumed_from_step"] <= killed_at and train["steps"] == 28
    assert_identical(final_state(work, "victim"), final_state(work, "ref"))
    last = sessions(work / "scratch" / "airetrain" / "victim")[-1]
    # the resume came from the durable copy on scratch: the dead node's fast root went with it
    assert Path(last["checkpoint"]).parent == durable and last["resumed_from_step"] == train["resumed_from_step"]
    resumed = last["started"]
    print(f"node died -> training resumed: {resumed - died:.0f} s, of which the node was down {back - died:.0f} s "
          f"and the requeued job took {resumed - back:.0f} s from the node's return to its resumed training")
    runs = allocations(env, job)
    assert [a["State"] for a in runs] == ["NODE_FAIL", "COMPLETED"], runs
    with open(work / "results" / "report" / "efficiency.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["run"] == "victim")
    assert row["requeues"] == "1" and row["status"] == "completed; requeued 1x after NODE_FAIL", row
