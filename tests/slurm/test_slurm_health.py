"""Slow and sick nodes on the real SLURM test cluster, in partition gpu3 (labgpu1, labgpu2 and labgpu3, so that
a node can be left out and a 2-node run still find two):

- a straggler: a user model that sleeps in every forward pass on labgpu2 only. Its rank and node are named
  in `airetrain status` while the run trains; the run stops at its next checkpoint, requeues without
  labgpu2 and finishes on the other two nodes (sacct's NodeList), resuming where it stopped;
- a sick node: labgpu1's node-local fast root is a 64 kB tmpfs inside that node's namespace alone (full for
  the run). A 1-node run that SLURM places there fails its check, is requeued without labgpu1 and
  finishes elsewhere; no step trained on labgpu1; status and the report name it and why;
- a wrong interface: GLOO_SOCKET_IFNAME names an interface no node has. The check fails on every node
  before any rendezvous, naming it and the node's interfaces, and the run fails with that reason.

The all-reduce bandwidth and the check's seconds are in train.json for the 2-node and the 1-node run.
"""
import csv
import json
import os
import re
import subprocess
import time

import pytest

from airetrain.rundir.run_log import health_events, sessions
from conftest import BIN, read_json, run, slurm_state, snakemake, snakemake_cmd, spawn, wait_for, write_config
from test_slurm import SLURM_ARGS, STAND_IN
from test_slurm_node_fail import allocations
from user_code import write_ownlab

pytestmark = pytest.mark.slurm

PARTITION = {"slurm": {"partition": "gpu3"}}
# 2 nodes of 3 stand-in GPUs, 14 steps an epoch, a log line every step
TWO_NODES = {**STAND_IN, **PARTITION, "gpus": 6, "batch": {"global": 96, "per_device": 16},
             "train": {"epochs": 2, "log_every_steps": 1}}


def status_rows(work, cfg, env) -> dict:
    out = run([str(BIN / "airetrain"), "status", "--configfile", str(cfg), "--json"], cwd=work, env=env).stdout
    return {r["run"]: r for r in json.loads(out)}


def report_row(work, name) -> dict:
    with open(work / "results" / "report" / "efficiency.csv") as f:
        return next(r for r in csv.DictReader(f) if r["run"] == name)


def assert_links_and_check_measured(train: dict) -> None:
    health = train["health"]
    print(f"{train['run']}: the node check took {health['preflight_s']:.2f} s on {train['nodes']} node(s); "
          f"all-reduce {health['allreduce_gbps']:.2f} GB/s over {train['world_size']} ranks")
    assert health["preflight_s"] > 0 and health["allreduce_gbps"] > 0 and health["allreduce_mb"] > 0, health
    assert len(health["rank_step_s"]) == train["world_size"] == len(health["rank_hosts"])


def test_a_straggler_is_named_and_its_node_left_out(slurm_cluster, tmp_path):
    work = tmp_path
    write_ownlab(work)
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {"slow": {
        **TWO_NODES, "model": {"name": "ownlab.lab:slow_on"},
        "health": {"straggler_intervals": 3, "exclude_stragglers": True}}}})
    # each job's own node-local $TMPDIR, purged when it ends (the cluster's TaskProlog and Epilog), as Aire's
    env = {**slurm_cluster, "SLOW_NODE": "labgpu2", "SLOW_S": "1", "AIRETRAIN_LAB_JOB_TMPDIR": "1"}
    pipeline = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS), work / "snakemake.log", cwd=work, env=env)
    seen = {}

    def status_names_the_straggler():
        row = status_rows(work, cfg, env)["slow"]
        if row["state"] == "training" and row.get("stragglers"):
            seen.update(row)
        return bool(seen) or pipeline.poll() is not None
    wait_for(status_names_the_straggler, timeout=600, what="status naming the straggler", every=0.5)
    assert seen, (work / "snakemake.log").read_text()[-3000:]
    print("status while it trains:", seen["detail"])
    straggler = seen["stragglers"][0]
    # torchrun's rendezvous numbers the nodes as they join: labgpu2's ranks may be any three of the six
    assert straggler["host"] == "labgpu2" and 0 <= straggler["rank"] < 6 and straggler["ratio"] > 1.2
    assert f"straggler: rank {straggler['rank']} on labgpu2, " in seen["detail"]
    assert pipeline.wait(timeout=900) == 0, (work / "snakemake.log").read_text()[-5000:]

    train = read_json(work / "results" / "slow" / "train.json")
    job = train["slurm_job_id"]
    runs = allocations(slurm_cluster, job)
    assert runs[0]["NodeList"] == "labgpu[1-2]" and "labgpu2" not in runs[-1]["NodeList"], runs
    assert runs[-1]["NodeList"] == "labgpu[1,3]" and runs[-1]["State"] == "COMPLETED", runs
    # it stopped at its checkpoint at the end of the first epoch and resumed there
    assert train["resumed_from_step"] == 14 and train["steps"] == 28
    assert sorted(train["health"]["rank_hosts"]) == ["labgpu1"] * 3 + ["labgpu3"] * 3
    assert_links_and_check_measured(train)
    events = health_events(work / "scratch" / "airetrain" / "slow")
    named = [e for e in events if e["action"] == "named"]
    assert [e["node"] for e in events if e["action"] == "excluded"] == ["labgpu2"], events
    assert named and named[0]["reason"].startswith(f"straggler: rank {straggler['rank']} on labgpu2"), events
    print(f"the straggler was named at step {named[0]['step']}, a log line every step: log interval "
          f"{named[0]['step']}")
    assert named[0]["step"] == 3   # straggler_intervals: named as soon as the setting allows
    assert "labgpu2 left out (straggler: rank" in report_row(work, "slow")["health"]


def node_namespace(node: str) -> str:
    return str(int((slurm_state() / "run" / f"slurmd-{node}.pid").read_text()))


def test_a_sick_node_fails_its_check_and_the_run_trains_elsewhere(slurm_cluster, tmp_path):
    work = tmp_path
    local = slurm_state() / "nodetmp" / "local"
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {
        "sick": {**STAND_IN, **PARTITION, "gpus": 3, "batch": {"global": 48, "per_device": 16},
                 "train": {"epochs": 1, "log_every_steps": 5}}}})
    # each job's own $TMPDIR, node-local (the cluster's TaskProlog); on labgpu1 a 64 kB tmpfs over it
    env = {**slurm_cluster, "AIRETRAIN_LAB_JOB_TMPDIR": "1"}
    enter = ["nsenter", "--target", node_namespace("labgpu1"), "--mount", "--"]
    subprocess.run([*enter, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(local)], check=True)
    try:
        snakemake(work, cfg, *SLURM_ARGS, env=env)
    finally:   # every tmpfs there, one left by an interrupted session included: the node as later tests expect
        while subprocess.run([*enter, "findmnt", "-t", "tmpfs", str(local)], capture_output=True).returncode == 0:
            subprocess.run([*enter, "umount", str(local)], check=True)
    train = read_json(work / "results" / "sick" / "train.json")
    runs = allocations(slurm_cluster, train["slurm_job_id"])
    assert runs[0]["NodeList"] == "labgpu1" and runs[-1]["NodeList"] != "labgpu1", runs
    trained_on = [host for s in sessions(work / "scratch" / "airetrain" / "sick") for host in s["hostnames"]]
    assert trained_on and "labgpu1" not in trained_on   # no step ran there: no session started on it
    events = health_events(work / "scratch" / "airetrain" / "sick")
    assert [(e["node"], e["kind"], e["action"]) for e in events] == [("labgpu1", "fast_root", "excluded")], events
    assert "kB free; the run needs" in events[0]["reason"]
    assert_links_and_check_measured(train)
    detail = status_rows(work, cfg, env)["sick"]["detail"]
    assert "[left out labgpu1: fast_root: " in detail, detail
    assert "labgpu1 left out (fast_root: " in report_row(work, "sick")["health"]


def test_an_interface_no_node_has_fails_the_run_before_any_rendezvous(slurm_cluster, tmp_path):
    work = tmp_path
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, "runs": {
        "wrongif": {**TWO_NODES, "train": {"epochs": 1}}}})
    env = {**slurm_cluster, "GLOO_SOCKET_IFNAME": "nope0"}
    t0 = time.time()
    # the profile's one retry would fail the same way: not here
    proc = snakemake(work, cfg, *SLURM_ARGS, "--retries", "0", env=env, check=False)
    assert proc.returncode != 0
    log = (work / "logs" / "wrongif" / "health.log").read_text()
    assert "NodeCheckError: every node of the job failed the interfaces check" in log, log
    # the node's own interfaces are listed (the test cluster's nodes share the host's network: lo among them)
    assert re.search(r"GLOO_SOCKET_IFNAME=nope0: no interface nope0 on this node; its interfaces are [^\n]*\blo\b",
                     log), log
    for node in ("labgpu1", "labgpu2"):
        assert f"health: {node}: FAILED: interfaces: GLOO_SOCKET_IFNAME=nope0" in log
    assert not sessions(work / "scratch" / "airetrain" / "wrongif")   # no training started: no rendezvous
    assert not (work / "results" / "wrongif" / "stage.json").exists()
    row = status_rows(work, cfg, env)["wrongif"]
    assert row["state"] == "failed" and "no interface nope0" in row["detail"], row
    print(f"the wrong interface failed the run in {time.time() - t0:.0f} s")
    assert os.path.exists(work / "scratch" / "airetrain" / "wrongif" / "health.jsonl")
