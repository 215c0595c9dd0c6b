"""What to ask for next time: advice for one row of the efficiency table, each with its numbers.

A row holds the job's accounting figures (cpu_eff, mem_*, time_eff, gpu_*), and for pipeline runs
the trainer's (data_wait_frac, gpu_util, gpu_mem_peak_mb, strategy, per-rank settings from the
plan) and next_request: what `resources: measured` would ask for in the next plan, computed by
airetrain.sizing from the run's history, this job included. The advice quotes that request; for any
other SLURM job it applies the same headrooms to the job's own figures. A request is worth changing
where under half of it was used (LOW).
"""
from __future__ import annotations

import math
from pathlib import Path

from ..cluster.hardware import gpu_memory_gb
from ..rundir.history import everything
from ..quota import pack_command
from ..records import Plan
from ..sizing import CPU_HEADROOM, LOADER_BOUND, MEM_HEADROOM, TIME_HEADROOM
from ..text import human_mb
from ..cluster.units import format_duration

LOW = 0.5               # below this share of a request, ask for less
SCALING_BOUND = 0.3     # data wait share above which the loader, not the GPU count, sets the pace
STAGE_SLOW = 0.03       # staging above this share of the job: worth packing the dataset


def _num(row: dict, key: str):
    value = row.get(key)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _cores(n: int) -> str:
    return f"{n} core" if n == 1 else f"{n} cores"


def _minutes(value: dict) -> str:
    return "{" + ", ".join(f"{step}: {value[step]}" for step in ("stage", "train", "promote") if step in value) + "}"


def _cpu(row: dict, wait: float | None, planned: dict | None) -> str:
    cpu_eff, cpus = row["cpu_eff"], row["cpus"]
    said = f"CPU efficiency {cpu_eff:.0%} of {_cores(cpus)}"
    if wait is not None and wait > LOADER_BOUND:
        return (f"{said}, yet {wait:.0%} of step time waits for data: raise data.workers so the cores you have "
                "feed the GPUs")
    said += f" (about {cpu_eff * cpus:.1f} busy)"
    if planned:
        return f"{said}: ask for cpus_per_rank: {planned['value']} ({planned['how']})"
    used = max(1, math.ceil(round(cpu_eff * cpus * CPU_HEADROOM, 6)))
    return f"{said}: ask for {_cores(used)} (--cpus-per-task={used} on one node)"


def _memory(row: dict, planned: dict | None) -> str:
    used = row["mem_used_mb"]
    said = f"memory: peak {used:.0f} MB of {row['mem_alloc_mb']:.0f} MB ({row['mem_eff']:.0%})"
    if planned:
        return f"{said}: ask for mem_gb_per_node: {planned['value']:g} ({planned['how']})"
    return f"{said}: --mem={math.ceil(used * MEM_HEADROOM / 1024)}G would do (peak x {MEM_HEADROOM})"


def _time(row: dict, planned: dict | None) -> str:
    said = f"time: used {row['elapsed_s'] / 60:.1f} of {row['timelimit_s'] / 60:.0f} min ({row['time_eff']:.0%})"
    if planned:
        return f"{said}: ask for time_min: {_minutes(planned['value'])} ({planned['how']}); shorter jobs start sooner"
    minutes = math.ceil(row["elapsed_s"] * TIME_HEADROOM / 60)
    return (f"{said}: ask for --time={format_duration(minutes * 60)} (x {TIME_HEADROOM}); shorter jobs start "
            "sooner (backfill)")


def _requests(row: dict, wait: float | None) -> list[str]:
    """A finished job's cores, memory and time, where it used under half of what it asked for: the next
    plan's request where the row has one (a pipeline run), else the job's figures with the same headroom."""
    planned = row.get("next_request") or {}
    cpu_eff, mem_eff, time_eff = _num(row, "cpu_eff"), _num(row, "mem_eff"), _num(row, "time_eff")
    tips = []
    if cpu_eff is not None and _num(row, "cpus") and cpu_eff < LOW:
        tips.append(_cpu(row, wait, planned.get("cpus_per_rank")))
    if mem_eff is not None and mem_eff < LOW and _num(row, "mem_used_mb"):   # never --mem=0: all of a node
        tips.append(_memory(row, planned.get("mem_gb_per_node")))
    if time_eff is not None and time_eff < LOW:
        tips.append(_time(row, planned.get("time_min")))
    return tips


def advise(row: dict) -> list[str]:
    tips = []
    state = row.get("job_state") or ""
    wait = _num(row, "data_wait_frac")
    tips += [f"a smaller batch from {change}" for change in row.get("batch_changes") or []]
    tips += row.get("out_of_memory") or []
    if state == "OUT_OF_MEMORY":
        tips.append(f"ran out of memory with {row.get('mem_alloc_mb', 0):.0f} MB: ask for more memory "
                    "(mem_gb_per_rank), or lower batch.per_device")
    if state == "TIMEOUT":
        tips.append(f"hit its time limit after {row.get('elapsed_s', 0) / 60:.0f} min: raise time_min.train, "
                    "or keep checkpoint.requeue on so it continues from its checkpoint")
    # a run that ran out of memory and never finished: its last figures say nothing of what it needs
    finished = state == "COMPLETED" or (state == "" and not row.get("out_of_memory"))
    if state == "COMPLETED" and row.get("source") == "sacct" and not _num(row, "mem_used_mb"):
        tips.append("memory: accounting recorded no memory figure for this job (no MaxRSS or TRES usage), "
                    "so there is nothing to size --mem from: keep the request as it is")
    resized = _requests(row, wait) if finished else []
    tips += resized
    if resized and row.get("world_size"):   # a pipeline run: one config line does all of it
        tips.append(f"to ask for what this run used, set resources: measured in runs.{row.get('run', '<run>')} "
                    "(or in defaults): the next plan then asks for these (airetrain plan --right-size shows them)"
                    if not row.get("learned_from") else
                    "its requests were already right-sized from history; they stand while its profile is the same")
    util = _num(row, "gpu_util")
    if util is not None and util < LOW and wait is not None and wait > LOADER_BOUND:
        tips.append(f"GPU busy {util:.0%} while {wait:.0%} of step time waits for data: more data.workers, "
                    "or stage the dataset to $TMP_SHARED")
    gpu_mem, memory_gb = _num(row, "gpu_mem_peak_mb"), gpu_memory_gb(row.get("gpu_type"))   # None: not known
    if gpu_mem is not None and memory_gb and gpu_mem < 0.3 * memory_gb * 1024:
        tips.append(f"GPU memory peak {gpu_mem / 1024:.1f} GB of {memory_gb:g} GB ({row['gpu_type']}): a larger "
                    "batch.per_device would use the GPU better")
    estimate = row.get("memory_estimate") or {}
    if row.get("strategy") == "fsdp" and estimate.get("ddp_per_gpu_gb") is not None and memory_gb \
            and estimate["ddp_per_gpu_gb"] < 0.8 * memory_gb:
        tips.append(f"FSDP was used, but DDP's estimated {estimate['ddp_per_gpu_gb']:.1f} GB per GPU fits: "
                    "strategy: ddp avoids the all-gathers")
    stage_frac = _num(row, "stage_frac")
    if stage_frac is not None and stage_frac > STAGE_SLOW and row.get("stage_format") == "folder":
        tips.append(f"staging {row['stage_files']:,} files took {row['stage_s']:.0f} s, {stage_frac:.0%} of the job: "
                    f"pack this dataset into shards and stage those: {pack_command(row['stage_source'])}")
    if wait is not None and wait > SCALING_BOUND:
        tips.append(f"more GPUs would not help: {wait:.0%} of step time is spent waiting for data")
    for tracker, lost in (row.get("tracking_lost") or {}).items():
        tips.append(f"tracking: {lost['lost']} figures did not reach {tracker} ({lost['error']}); training went on, "
                    "and the run's metrics.jsonl and TensorBoard curves hold them all")
    return tips


def _used(mem_eff, time_eff, mem_mb, minutes) -> str:
    parts = [f"MemEff {mem_eff:.1%} of {human_mb(mem_mb)}" if mem_eff is not None and mem_mb else None,
             f"TimeEff {time_eff:.1%} of {minutes:g} min" if time_eff is not None and minutes else None]
    return ", ".join(p for p in parts if p) or "no accounting figures"


def learned(plan: Plan, row: dict, scratch: Path) -> str | None:
    """A right-sized run next to the jobs it learned from: how much of each request each used
    (row: the report's row of the right-sized run)."""
    sized = plan.right_sized
    if not sized:
        return None
    mine = _used(row.get("mem_eff"), row.get("time_eff"), row.get("mem_alloc_mb") or plan.slurm.mem_mb * plan.nodes,
                 plan.time_min.total)
    wanted = {(s["run"], s["job_id"]) for s in sized.get("sources", [])}
    theirs = []
    for line in everything(scratch):
        if (line["run"], line["job_id"]) not in wanted:
            continue
        m, r = line["measured"], line["requested"]
        peak, asked = m.get("mem_peak_mb_per_node"), r["mem_mb_per_node"]
        elapsed = m.get("elapsed_s")
        theirs.append(f"job {line['job_id'] or 'local'} of {line['run']}: "
                      + _used(peak / asked if peak is not None and asked else None,
                              elapsed / (r["time_min"] * 60) if elapsed is not None else None,
                              asked * line["profile"]["nodes"], r["time_min"]))
    return f"used {mine}; learned from " + ("; ".join(theirs) or sized["from"])
