"""A run that SLURM ended OUT_OF_MEMORY asks for more host memory when Snakemake submits it again.

Snakemake's answer to a failed job is to scale its resources by the attempt, which guesses. Here the train
rule's mem_mb asks SLURM's accounting instead: from the second attempt on, about the run's jobs that trained
(the run lock's log names each one). A job ended OUT_OF_MEMORY shows only that it needed more than it had,
since the kernel stopped it at its limit: its MaxRSS is a lower bound. So the next request is the larger of
twice the old one and that peak x the right-sizing headroom, in whole GB, capped at what a node can give
(a GPU run: its GPUs' share of the node). At most retry.oom raises; each is kept in the durable run
directory (memory.jsonl), so every later request of the run, the next pipeline's included, starts from it.

Snakemake calls mem_mb on the submitting side for each attempt, and again in the job's own parse of the
workflow: a job already judged is read from memory.jsonl, so both come to the same figure.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from ..cluster import slurm
from ..cluster.units import size_mb
from ..records import Plan
from ..run_config import Site
from .run_log import LOCK_LOG
from ..sizing import MEM_HEADROOM

RUNNING = ("RUNNING", "PENDING", "REQUEUED", "COMPLETING")   # not ended: judged at a later attempt
RECORD = "memory.jsonl"     # in the durable run directory: every job judged, and each raise


def judged(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / RECORD
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def raises(run_dir: str | Path) -> list[dict]:
    """The raises made for the run: {job, state, req_mb, peak_mb, mem_mb, time}, oldest first."""
    return [j for j in judged(run_dir) if j.get("mem_mb")]


def trained_jobs(run_dir: str | Path) -> list[str]:
    """The SLURM jobs that took the run's lock, in order."""
    path = Path(run_dir) / LOCK_LOG
    if not path.exists():
        return []
    jobs = [json.loads(line).get("slurm_job_id") for line in path.read_text().splitlines() if line.strip()]
    return list(dict.fromkeys(j for j in jobs if j))


def ceiling_mb(plan: Plan, site: Site) -> int:
    """The most a job of this run may ask for: the node's memory, or its GPUs' share of it."""
    node = site.mem_gb_per_node
    if plan.device == "cuda" and site.gpus_per_node:
        node *= min(plan.nproc_per_node, site.gpus_per_node) / site.gpus_per_node
    return int(node * 1024)


def accounting(job_ids: list[str]) -> dict[str, dict] | None:
    """{job: {state, req_mb, peak_mb}} from sacct: the allocation's state, or OUT_OF_MEMORY where any of its
    steps was (the training step runs out, and the job then fails), its request and its steps' largest
    MaxRSS; None where SLURM does not answer."""
    text = slurm.query(slurm.sacct_argv(["JobID", "State", "ReqMem", "MaxRSS"], job_ids))
    if text is None:
        return None
    jobs: dict[str, dict] = {}
    for line in text.splitlines():
        job_id, state, req, rss = (line.split("|") + ["", "", "", ""])[:4]
        base = job_id.split(".")[0]
        job = jobs.setdefault(base, {"state": "", "req_mb": 0.0, "peak_mb": 0.0, "oom": False})
        if job_id == base:
            job.update(state=state.split()[0] if state else "", req_mb=size_mb(req))
        job["oom"] = job["oom"] or state.startswith("OUT_OF_MEMORY")
        job["peak_mb"] = max(job["peak_mb"], size_mb(rss))
    for job in jobs.values():
        if job.pop("oom") and job["state"] not in RUNNING:
            job["state"] = "OUT_OF_MEMORY"
    return jobs


def request_mb(plan: Plan, site: Site, attempt: int) -> int:
    """The memory per node the run's next job asks for, in MB."""
    run_dir = plan.durable_dir
    done = judged(run_dir)
    current = max([plan.slurm.mem_mb, *(r["mem_mb"] for r in done if r.get("mem_mb"))])
    if attempt <= 1:   # a first attempt: no failure of this pipeline to learn from
        return current
    new = [j for j in trained_jobs(run_dir) if j not in {d["job"] for d in done}]
    found = accounting(new) if new else None
    for job in new:
        facts = (found or {}).get(job)
        if not facts or facts["state"] in ("", *RUNNING):
            continue   # not ended, or SLURM does not know it: judged at a later attempt
        line = {"job": job, "state": facts["state"], "req_mb": facts["req_mb"], "peak_mb": facts["peak_mb"],
                "time": time.time()}
        if facts["state"] == "OUT_OF_MEMORY":
            line.update(raised(plan, site, current, facts, len(raises(run_dir))))
            current = line.get("mem_mb") or current
        with open(Path(run_dir) / RECORD, "a") as f:
            f.write(json.dumps(line) + "\n")
    return current


def raised(plan: Plan, site: Site, current: int, facts: dict, so_far: int) -> dict:
    """What a job out of memory changes: {mem_mb} of the raise, or {refused} saying why there is none."""
    if so_far >= plan.config.retry.oom:
        return {"refused": f"retry.oom = {plan.config.retry.oom}: no more memory asked for"}
    wanted = max(2 * max(facts["req_mb"], current), facts["peak_mb"] * MEM_HEADROOM)
    wanted = math.ceil(wanted / 1024) * 1024
    ceiling = ceiling_mb(plan, site)
    if current >= ceiling:
        return {"refused": f"it already asked for {current / 1024:.0f} GB, the most a node gives this run"}
    return {"mem_mb": min(wanted, ceiling)}


def not_again(plan: Plan, job_id: str | None) -> str | None:
    """Why this job should not train the run (None: it should): the run's last job ran out of host memory,
    it was given no more (retry.oom, or the node's memory), and this job has no more than that one had, so
    it would run out again after the same training."""
    done = judged(plan.durable_dir)
    if not job_id or not done or not done[-1].get("refused"):
        return None
    if done[-1]["refused"].startswith("retry.oom") and len(raises(plan.durable_dir)) < plan.config.retry.oom:
        return None   # retry.oom was raised since: this job may train, and a later one be given more
    has = size_mb(slurm.job_fields(job_id).get("MinMemoryNode"))
    if not has or has > done[-1]["req_mb"]:
        return None
    return (f"{described(done[-1])}. Job {job_id} has the same {has / 1024:.1f} GB, so it is not trained: raise "
            f"mem_gb_per_rank, or retry.oom, and run the pipeline again")


def described(line: dict) -> str:
    """A judged job out of memory, as the report's advice names it."""
    said = (f"job {line['job']} ran out of host memory with {line['req_mb'] / 1024:.1f} GB "
            f"(peak at least {line['peak_mb'] / 1024:.1f} GB)")
    if line.get("mem_mb"):
        return f"{said}: the run asked for {line['mem_mb'] / 1024:.0f} GB from its next job on"
    return f"{said}; not retried with more: {line['refused']}"
