"""The query: ONE `sacct` call for the accounting records of many jobs (report/jobs.py folds them)."""
from __future__ import annotations

import shutil
import subprocess

from .jobs import FIELDS, Job, parse


def command(job_ids: list[str] | None = None, since: str | None = None) -> list[str]:
    cmd = ["sacct", "--noheader", "--parsable2", "--duplicates", "--format", ",".join(FIELDS)]
    if job_ids:
        cmd += ["--jobs", ",".join(job_ids)]
    if since:
        cmd += ["--starttime", since]
    return cmd


UNAVAILABLE = "accounting unavailable"   # a row's status while sacct cannot answer for its job


class AccountingUnavailable(RuntimeError):
    """sacct is installed, but accounting does not answer (slurmdbd stopped, unreachable or stalled)."""


def query(job_ids: list[str] | None = None, since: str | None = None,
          timeout: float = 60) -> dict[str, Job] | None:
    """Every job's figures from ONE sacct call; None where there is no sacct (a laptop).

    Raises AccountingUnavailable where sacct fails or gives no answer within timeout seconds: a
    stalled slurmdbd keeps sacct waiting 45 s and more, never a reason for the caller to hang."""
    ids = sorted({str(j) for j in job_ids or [] if j})
    if (not ids and not since) or shutil.which("sacct") is None:
        return None
    try:
        proc = subprocess.run(command(ids, since), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AccountingUnavailable(f"sacct gave no answer within {timeout:g} s") from None
    if proc.returncode != 0:
        said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        raise AccountingUnavailable(said[-1] if said else f"sacct exited {proc.returncode}")
    return parse(proc.stdout, ids)
