"""Right-sized requests (`resources: measured`): a run asks for what earlier runs of its profile used.

For a run whose profile (report.history) matches finished runs in the durable history, the plan
sets memory per node, cores per rank and time as airetrain.sizing computes them from those runs
(the report's advice quotes the same figures), capped by the site's node and wall-time limits. A
profile without history keeps the configured requests, and the plan says so. The history only grows
when a report rule runs, after the jobs: the plan, parsed again inside every job, comes out the same
there.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..rundir.history import of_profile, profile, profile_id
from ..records import Plan
from ..run_config import Site
from ..sizing import requests as sized


def measured_requests(plan: Plan, site: Site, scratch: Path,
                      earlier: dict | None = None) -> tuple[dict | None, str | None]:
    """(the requests from history with how each was found, or None; a warning, or None).

    earlier: the requests the run was planned with before (its plan.json). With the same profile
    they stand: the history grows as runs finish, and a changed plan would train a finished run
    again (Snakemake compares the plans)."""
    name, pid = plan.run, profile_id(profile(plan))
    if earlier is not None and earlier.get("profile_id") == pid:
        return earlier, None
    lines = of_profile(scratch, plan)
    if not lines:
        return None, (f"run {name}: resources: measured, but no finished run has this profile ({pid}: model, "
                      "dataset, batch, precision, strategy, layout): the configured requests stand")
    source = ", ".join(f"job {line['job_id'] or 'local'} of {line['run']} "
                       f"({time.strftime('%Y-%m-%d', time.localtime(line['recorded']))})" for line in lines[-3:])
    return {"profile_id": pid, "from": source, "runs_measured": len(lines),
            "sources": [{"run": line["run"], "job_id": line["job_id"]} for line in lines[-3:]],
            **sized(lines, plan, site)}, None
