"""seff, where a site installs it: its printed figures, to show any disagreement with ours (report/jobs.py)."""
from __future__ import annotations

import re
import shutil
import subprocess

from .jobs import Job

SEFF_LINES = {"cpu_eff": r"CPU Efficiency:\s+([\d.]+)%", "mem_eff": r"Memory Efficiency:\s+([\d.]+)%"}


def parse_seff(text: str) -> dict[str, float]:
    """seff's printed CPU and memory efficiency, as fractions."""
    found = {}
    for key, pattern in SEFF_LINES.items():
        if m := re.search(pattern, text):
            found[key] = float(m.group(1)) / 100
    return found


def seff_disagreement(job: Job, seff: dict[str, float], tolerance: float = 0.001) -> str:
    """'' when seff agrees to 0.1 percentage point, else what differs."""
    ours = {"cpu_eff": job.cpu_eff, "mem_eff": job.mem_eff}
    diffs = [f"{key} seff {value:.2%} vs {ours[key] or 0:.2%}" for key, value in seff.items()
             if abs(value - (ours[key] or 0)) > tolerance]
    return "; ".join(diffs)


SEFF_CHECKS = 10   # seff is one process and one database query per job: a sample, not thousands


def seff_check(jobs: dict[str, Job], at_most: int = SEFF_CHECKS) -> dict[str, str]:
    """Run seff for the first at_most jobs where it is installed: {job id: disagreement or 'agrees'}."""
    if shutil.which("seff") is None:
        return {}
    checks = {}
    for job_id, job in jobs.items():
        if job.state == "MISSING":
            continue
        if len(checks) == at_most:
            break
        out = subprocess.run(["seff", job_id], capture_output=True, text=True, timeout=60).stdout
        seff = parse_seff(out)
        checks[job_id] = (seff_disagreement(job, seff) or "agrees") if seff else "seff printed no figures"
    return checks
