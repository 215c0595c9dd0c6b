"""The query: ONE `sacct` call for the accounting records of many jobs (report/fold.py folds them)."""
from __future__ import annotations

import shutil
import subprocess

from .fold import FIELDS, Job, parse


def command(job_ids: list[str] | None = None, since: str | None = None) -> list[str]:
    cmd = ["sacct", "--noheader", "--parsable2", "--duplicates", "--format", ",".join(FIELDS)]
    if job_ids:
        cmd += ["--jobs", ",".join(job_ids)]
    if since:
        cmd += ["--starttime", since]
    return cmd


def query(job_ids: list[str] | None = None, since: str | None = None) -> dict[str, Job] | None:
    """Every job's figures from ONE sacct call; None where there is no sacct (a laptop) or it fails."""
    ids = sorted({str(j) for j in job_ids or [] if j})
    if (not ids and not since) or shutil.which("sacct") is None:
        return None
    proc = subprocess.run(command(ids, since), capture_output=True, text=True, timeout=300)
    return parse(proc.stdout, ids) if proc.returncode == 0 else None
