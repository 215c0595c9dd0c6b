"""The health step: every node of the job checked (one task per node) before staging, and the verdict.

- Every node passes: results/<run>/health.json, and staging follows.
- Some fail: each is named with its reason (this log, <scratch>/airetrain/<run>/health.jsonl, which
  `airetrain status` and the report read) and the job requeues itself without them (ExcNodeList,
  kept across requeues), to train elsewhere. No step of training runs on a node that failed.
- A setting that no node of the job meets (an interface that none has; a shared fast root that is
  full or read-only from every node of a multi-node job) is not a node's fault: the run fails at once.
- No node left to try (the partition's usable nodes, less those left out), or no requeue left
  (checkpoint.max_requeues): the run fails, listing every node left out and why.

Outside SLURM there is one node, this one, and nothing to exclude: a problem fails the run.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..rundir import run_log
from ..cluster import slurm
from ..environment import with_user_settings
from ..fsutil import write_json_atomic
from ..records import HealthRecord, Plan, read_record, write_record
from ..roots import fast_root
from .checks import ANSWER_S, check_node

SETTINGS = ("interfaces",)                      # what every node lacking is the config's fault, not a node's
SHARED = ("fast_root", "durable_root")          # ... or, where every node of several sees the same storage


# How the line that fails the run begins: an exception's name, which `airetrain status` takes as the run's error
FAILURE = "NodeCheckError"


def node_reports(plan: Plan, folder: Path, env) -> dict[str, dict]:
    """{host: its report}: the check on every node of this job (srun, one task each), or on this host."""
    if not env.get("SLURM_JOB_ID"):
        return {socket.gethostname(): check_node(plan, env)}
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    nodes = slurm.hostnames(slurm.job_fields(env["SLURM_JOB_ID"]).get("NodeList", ""))
    argv = [*slurm.srun_per_node(plan.nodes, plan.cpus_per_node, env), sys.executable, "-m", "airetrain",
            "health-node", "--plan", str(plan.results_dir / "plan.json"), "--out", str(folder)]
    try:   # every check is bounded; a node that never answers is one that failed
        proc = subprocess.run(argv, env=env, timeout=4 * ANSWER_S + 120, capture_output=True, text=True)
        said = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    except subprocess.TimeoutExpired:
        said = ["no answer within the check's time"]
    reports = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    for node in nodes:
        reports.setdefault(node, {"host": node, "ok": False, "seconds": None, "interfaces": [], "problems": [
            {"check": "node", "reason": f"its check did not report ({said[0]})"}]})
    return reports


def setting_problem(plan: Plan, reports: dict[str, dict], env) -> str | None:
    """The reason the run fails whatever node it gets, or None: a check that every node of the job failed
    where the cause is a setting (an interface) or storage every node shares."""
    shared = not fast_root(plan.roots.tmp_shared, env).node_local and len(reports) > 1
    for check in SETTINGS + (SHARED if shared else ()):
        reasons = [p["reason"] for r in reports.values() for p in r["problems"] if p["check"] == check]
        failing = {host for host, r in reports.items() if any(p["check"] == check for p in r["problems"])}
        if reasons and failing == set(reports):
            return f"every node of the job failed the {check} check, so no node would do: {reasons[0]}"
    return None


def reasons_of(report: dict) -> str:
    return "; ".join(f"{p['check']}: {p['reason']}" for p in report["problems"])


def preflight(plan: Plan, out: Path, env=None) -> int:
    """The health step; writes out (health.json) where every node passed. Returns the exit code."""
    env = with_user_settings(plan.env, os.environ if env is None else env)
    job = env.get("SLURM_JOB_ID")
    t0 = time.perf_counter()
    reports = node_reports(plan, out.parent / "health", env)
    seconds = round(time.perf_counter() - t0, 3)
    failing = {host: r for host, r in sorted(reports.items()) if not r["ok"]}
    for host, report in sorted(reports.items()):
        print(f"health: {host}: " + ("ok" if report["ok"] else f"FAILED: {reasons_of(report)}")
              + (f" ({report['seconds']:.2f} s)" if report.get("seconds") is not None else ""), flush=True)
    if not failing:
        record = {"preflight": True, "slurm_job_id": job, "seconds": seconds, "nodes": reports,
                  "left_out": run_log.left_out(plan.durable_dir)}
        write_record(out, HealthRecord, record)
        print(f"health: {len(reports)} node{'s' if len(reports) > 1 else ''} passed in {seconds:.2f} s", flush=True)
        return 0
    if reason := setting_problem(plan, reports, env):
        return failed(plan, job, failing, reason)
    if not job:
        return failed(plan, job, failing, "not in a SLURM job, so no other node to try")
    return exclude(plan, job, failing)


def exclude(plan: Plan, job: str, failing: dict[str, dict]) -> int:
    """Requeue the job without the failing nodes, or fail where no node or no requeue is left."""
    left, partition = slurm.nodes_left(job, sorted(failing), plan.slurm.partition)
    restarts = slurm.job_restarts(job)
    if len(left) < plan.nodes:
        return failed(plan, job, failing, f"no node left to try: the run needs {plan.nodes}, and partition "
                                          f"{partition} has {len(left)} not left out ({', '.join(left) or 'none'})")
    if restarts >= plan.config.checkpoint.max_requeues:
        return failed(plan, job, failing, f"job {job} was requeued {restarts} times already "
                                          f"(checkpoint.max_requeues = {plan.config.checkpoint.max_requeues})")
    for host, report in failing.items():
        for p in report["problems"]:
            run_log.record_health(plan.durable_dir, job, host, p["check"], p["reason"], "excluded")
    print(f"health: requeuing job {job} without {', '.join(failing)}; {len(left)} node{'s' if len(left) > 1 else ''} "
          f"left to try ({', '.join(left)})", flush=True)
    _, said = slurm.requeue_without(job, sorted(failing))   # where it returns, SLURM refused
    return failed(plan, job, failing, f"SLURM refused the requeue ({said})")


def failed(plan: Plan, job: str | None, failing: dict[str, dict], reason: str) -> int:
    """The run fails: each failing node recorded, and one line that names them all (status reads it)."""
    for host, report in failing.items():
        for p in report["problems"]:
            run_log.record_health(plan.durable_dir, job, host, p["check"], p["reason"], "failed")
    earlier = {node: why for node, why in run_log.left_out(plan.durable_dir).items() if node not in failing}
    nodes = [f"{host} ({reasons_of(r)})" for host, r in failing.items()] + \
        [f"{node} (left out earlier: {why})" for node, why in earlier.items()]
    print(f"{FAILURE}: {reason}. Nodes: {'; '.join(nodes)}", flush=True)
    return 1


def preflight_step(plan_path: str, out: str) -> int:
    return preflight(read_record(plan_path, Plan), Path(out))


def node_step(plan_path: str, folder: str) -> None:
    """One node's part: its report, as <folder>/<host>.json."""
    plan = read_record(plan_path, Plan)
    report = check_node(plan, with_user_settings(plan.env, os.environ))
    write_json_atomic(Path(folder) / f"{report['host']}.json", report)   # the collector reads only whole reports
