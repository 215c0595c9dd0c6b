"""Right-sized requests (`resources: measured`): a run asks for what earlier runs of its profile used.

For a run whose profile (report.history) matches finished runs in the durable history, the plan
sets, from the largest peak and the slowest step among them:
- memory per node: the measured peak x 1.25;
- cores per rank: the measured busy cores per node x 1.25, over the ranks of a node (the busy cores
  include the loader's workers), at least data.workers + 1 where the workers are set, and as
  configured where the measured run waited for data (its loader needs the cores it had);
- time: stage and promote as measured x 1.3; train as seconds per step x this run's steps x 1.3,
  plus the measured start-up (the train step's wall time beyond its training loop), plus the stop
  margin.
Each is capped by the site's node and wall-time limits and never below a floor (1 GB per node,
1 core per rank, 1 minute per step). A profile without history keeps the configured requests, and
the plan says so. The history only grows when a report rule runs, after the jobs: the plan, parsed
again inside every job, comes out the same there.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

from ..history import everything, profile, profile_id
from ..records import Plan
from ..run_config import Site

MEM_HEADROOM, CPU_HEADROOM, TIME_HEADROOM = 1.25, 1.25, 1.3
DATA_BOUND = 0.1   # a measured run waiting for data longer than this keeps its cores: its loader needs them
MIN_MEM_GB, MIN_MINUTES = 1.0, 1


def largest(lines: list[dict], key: str) -> float | None:
    values = [line["measured"].get(key) for line in lines if line["measured"].get(key) is not None]
    return max(values) if values else None


def planned_steps(lines: list[dict], plan: Plan) -> int | None:
    """The optimizer steps this run will take: the newest measured run's steps per epoch x its epochs
    (the same profile, hence the same global batch and dataset, makes the same steps per epoch)."""
    newest = lines[-1]
    if not newest.get("epochs"):
        return None
    return round(newest["measured"]["steps"] / newest["epochs"]) * plan.config.train.epochs


def measured_requests(plan: Plan, site: Site, scratch: Path,
                      earlier: dict | None = None) -> tuple[dict | None, str | None]:
    """(the requests from history with how each was found, or None; a warning, or None).

    earlier: the requests the run was planned with before (its plan.json). With the same profile
    they stand: the history grows as runs finish, and a changed plan would train a finished run
    again (Snakemake compares the plans)."""
    name, pid = plan.run, profile_id(profile(plan))
    if earlier is not None and earlier.get("profile_id") == pid:
        return earlier, None
    lines = [line for line in everything(scratch) if line["profile_id"] == pid]
    if not lines:
        return None, (f"run {name}: resources: measured, but no finished run has this profile ({pid}: model, "
                      "dataset, batch, precision, strategy, layout): the configured requests stand")
    source = ", ".join(f"job {line['job_id'] or 'local'} of {line['run']} "
                       f"({time.strftime('%Y-%m-%d', time.localtime(line['recorded']))})" for line in lines[-3:])
    nproc = plan.nproc_per_node
    requests: dict = {"profile_id": pid, "from": source, "runs_measured": len(lines),
                      "sources": [{"run": line["run"], "job_id": line["job_id"]} for line in lines[-3:]]}

    peak = largest(lines, "mem_peak_mb_per_node")
    if peak is not None:
        gb = min(max(math.ceil(peak * MEM_HEADROOM / 1024 * 10) / 10, MIN_MEM_GB), site.mem_gb_per_node)
        requests["mem_gb_per_node"] = {"value": gb, "how": f"peak {peak:.0f} MB per node x {MEM_HEADROOM}"}
    busy = largest(lines, "busy_cores_per_node")
    wait = largest(lines, "data_wait_frac")
    if busy is not None and wait is not None and wait > DATA_BOUND:
        requests["cpus_per_rank"] = {"value": plan.cpus_per_rank,
                                     "how": f"as configured: the measured run waited for data {wait:.0%} of its "
                                            "step time, so its loader needs the cores it had"}
    elif busy is not None:
        per_rank = min(max(math.ceil(busy * CPU_HEADROOM / nproc), 1), site.cores_per_node // nproc)
        how = f"{busy:.2f} busy cores per node x {CPU_HEADROOM} over {nproc} ranks"
        workers = plan.config.data.workers
        if workers is not None and workers + 1 > per_rank:   # the loader's workers and the rank itself
            per_rank, how = min(workers + 1, site.cores_per_node // nproc), f"{how}, raised to data.workers + 1"
        elif workers is None:
            how += f"; data.workers follows: {per_rank - 1} (cpus_per_rank - 1)"
        requests["cpus_per_rank"] = {"value": per_rank, "how": how}
    step_s = largest(lines, "seconds_per_step")
    steps = planned_steps(lines, plan)
    if step_s is not None and steps is not None:
        startup = largest(lines, "startup_s") or 0.0
        margin = plan.config.checkpoint.stop_margin_min
        train_min = math.ceil((step_s * steps * TIME_HEADROOM + startup) / 60 + margin)
        minutes = {"train": max(train_min, MIN_MINUTES)}
        for step in ("stage", "promote"):
            seconds = largest(lines, f"{step}_s")
            if seconds is not None:
                minutes[step] = max(math.ceil(seconds * TIME_HEADROOM / 60), MIN_MINUTES)
        configured = {"stage": plan.time_min.stage, "train": plan.time_min.train, "promote": plan.time_min.promote}
        excess = sum({**configured, **minutes}.values()) - site.max_wall_hours * 60
        if excess > 0:   # the site's longest job: the run resumes from its checkpoint in the next
            minutes["train"] = max(minutes["train"] - excess, MIN_MINUTES)
        requests["time_min"] = {"value": minutes, "how": f"{step_s:.3g} s per step x {steps} steps x {TIME_HEADROOM}"
                                                         f" + {startup:.0f} s start-up + {margin:g} min stop margin; "
                                                         f"stage and promote as measured x {TIME_HEADROOM}"}
    return requests, None
