"""What a run asks for, sized from what runs of its profile measured: the one set of headrooms and
floors that both right-sizing (`resources: measured`, plan/rightsize.py) and the report's advice
(report/advice.py) use, so that the advice quotes the request the next plan will make.

From the largest peak and the slowest step among the measured runs (report.history's lines):
- memory per node: the measured peak x MEM_HEADROOM;
- cores per rank: the measured busy cores per node x CPU_HEADROOM, over the ranks of a node (the busy
  cores include the loader's workers), at least data.workers + 1 where the workers are set, and as
  configured where the measured run waited for data longer than LOADER_BOUND (its loader needs them);
- time: stage and promote as measured x TIME_HEADROOM; train as seconds per step x the run's steps x
  TIME_HEADROOM, plus the measured start-up (the train step's wall time beyond its training loop), plus
  the stop margin.
Each is never below a floor (MIN_MEM_GB per node, 1 core per rank, MIN_MINUTES per step) and, where
the site is given, capped by its node and wall-time limits.
"""
from __future__ import annotations

import math

from .records import Plan
from .run_config import Site

MEM_HEADROOM = 1.25    # memory: the peak + 25 %
CPU_HEADROOM = 1.25    # cores: busy cores at 80 % load
TIME_HEADROOM = 1.3    # time: what was used + 30 %
LOADER_BOUND = 0.1     # a run waiting for data longer than this share of its step time keeps its cores
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


def memory(lines: list[dict], site: Site | None) -> dict | None:
    peak = largest(lines, "mem_peak_mb_per_node")
    if peak is None:
        return None
    gb = max(math.ceil(peak * MEM_HEADROOM / 1024 * 10) / 10, MIN_MEM_GB)
    return {"value": min(gb, site.mem_gb_per_node) if site else gb,
            "how": f"peak {peak:.0f} MB per node x {MEM_HEADROOM}"}


def cores(lines: list[dict], plan: Plan, site: Site | None) -> dict | None:
    busy, wait = largest(lines, "busy_cores_per_node"), largest(lines, "data_wait_frac")
    if busy is None:
        return None
    if wait is not None and wait > LOADER_BOUND:
        return {"value": plan.cpus_per_rank, "how": f"as configured: the measured run waited for data {wait:.0%} "
                                                    "of its step time, so its loader needs the cores it had"}
    nproc = plan.nproc_per_node
    most = site.cores_per_node // nproc if site else math.inf
    per_rank = min(max(math.ceil(busy * CPU_HEADROOM / nproc), 1), most)
    how = f"{busy:.2f} busy cores per node x {CPU_HEADROOM} over {nproc} ranks"
    workers = plan.config.data.workers
    if workers is not None and workers + 1 > per_rank:   # the loader's workers and the rank itself
        per_rank, how = min(workers + 1, most), f"{how}, raised to data.workers + 1"
    elif workers is None:
        how += f"; data.workers follows: {per_rank - 1} (cpus_per_rank - 1)"
    return {"value": per_rank, "how": how}


def minutes(lines: list[dict], plan: Plan, site: Site | None) -> dict | None:
    step_s, steps = largest(lines, "seconds_per_step"), planned_steps(lines, plan)
    if step_s is None or steps is None:
        return None
    startup = largest(lines, "startup_s") or 0.0
    margin = plan.config.checkpoint.stop_margin_min
    found = {"train": max(math.ceil((step_s * steps * TIME_HEADROOM + startup) / 60 + margin), MIN_MINUTES)}
    for step in ("stage", "promote"):
        seconds = largest(lines, f"{step}_s")
        if seconds is not None:
            found[step] = max(math.ceil(seconds * TIME_HEADROOM / 60), MIN_MINUTES)
    configured = {"stage": plan.time_min.stage, "train": plan.time_min.train, "promote": plan.time_min.promote}
    excess = sum({**configured, **found}.values()) - site.max_wall_hours * 60 if site else 0
    if excess > 0:   # the site's longest job: the run resumes from its checkpoint in the next
        found["train"] = max(found["train"] - excess, MIN_MINUTES)
    return {"value": found, "how": f"{step_s:.3g} s per step x {steps} steps x {TIME_HEADROOM} + {startup:.0f} s "
                                   f"start-up + {margin:g} min stop margin; stage and promote as measured x "
                                   f"{TIME_HEADROOM}"}


def requests(lines: list[dict], plan: Plan, site: Site | None = None) -> dict:
    """{mem_gb_per_node, cpus_per_rank, time_min: {value, how}}, each where the lines measured it.
    lines: the history of the run's profile, oldest first; site: its caps (None: no caps)."""
    found = {"mem_gb_per_node": memory(lines, site), "cpus_per_rank": cores(lines, plan, site),
             "time_min": minutes(lines, plan, site)}
    return {key: value for key, value in found.items() if value is not None}
