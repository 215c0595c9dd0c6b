"""Accounting figures for many SLURM jobs from ONE `sacct` call, folded per job as seff does.

CPU efficiency = TotalCPU / (Elapsed x allocated cores); memory efficiency = the largest MaxRSS
of any step / the memory allocated per node. (The full seff cross-check, GPU TRES and advice are
issue #6.)
"""
from __future__ import annotations

import re
import shutil
import subprocess

FIELDS = ["JobID", "State", "Elapsed", "TotalCPU", "AllocCPUS", "NNodes", "MaxRSS", "AllocTRES"]
UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}


def seconds(text: str) -> float:
    """sacct durations: [D-]HH:MM:SS, MM:SS.mmm, HH:MM:SS.mmm."""
    if not text or text in ("INVALID", "UNLIMITED", "Partition_Limit"):
        return 0.0
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def megabytes(text: str) -> float:
    """'411280K', '1.5G', '4000M', '0' -> MB (MiB, as SLURM counts)."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)", text or "")
    return float(m.group(1)) * UNITS.get(m.group(2) or "M", 1.0) if m else 0.0


def parse(text: str) -> dict[str, dict]:
    """sacct --parsable2 --noheader rows of FIELDS -> {job id: figures}, steps folded in."""
    jobs: dict[str, dict] = {}
    for line in text.splitlines():
        row = dict(zip(FIELDS, line.split("|")))
        if len(row) < len(FIELDS):
            continue
        job_id, _, step = row["JobID"].partition(".")
        job = jobs.setdefault(job_id, {"max_rss_mb": 0.0})
        if not step:  # the allocation's own row
            tres = dict(item.split("=", 1) for item in row["AllocTRES"].split(",") if "=" in item)
            job.update({"state": row["State"].split()[0], "elapsed_s": seconds(row["Elapsed"]),
                        "total_cpu_s": seconds(row["TotalCPU"]), "cpus": int(row["AllocCPUS"] or 0),
                        "nodes": int(row["NNodes"] or 1), "mem_mb": megabytes(tres.get("mem", "0"))})
        else:
            job["max_rss_mb"] = max(job["max_rss_mb"], megabytes(row["MaxRSS"]))
    for job in jobs.values():
        if "elapsed_s" not in job:
            continue
        core_s = job["elapsed_s"] * job["cpus"]
        job["cpu_eff"] = job["total_cpu_s"] / core_s if core_s else None
        per_node = job["mem_mb"] / job["nodes"] if job["mem_mb"] else 0
        job["mem_eff"] = job["max_rss_mb"] / per_node if per_node else None
    return {k: v for k, v in jobs.items() if "elapsed_s" in v}


def query(job_ids: list[str]) -> dict[str, dict] | None:
    """Figures of these jobs from one sacct call; None where there is no sacct (a laptop)."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids or shutil.which("sacct") is None:
        return None
    proc = subprocess.run(["sacct", "--noheader", "--parsable2", "--jobs", ",".join(ids),
                           "--format", ",".join(FIELDS)], capture_output=True, text=True, timeout=120)
    return parse(proc.stdout) if proc.returncode == 0 else None
