"""Fold sacct's rows into one Job per job id, as seff computes its figures (contribs/seff/seff in SLURM).

- CPU efficiency = the CPU time of all steps / (Elapsed x allocated cores).
- Memory used = the largest, over the job's steps, of the step's TRESUsageInTot memory (the sum
  of the peaks of all its tasks, on every node); memory efficiency = that / the allocated memory
  (AllocTRES mem: --mem per node x nodes, or --mem-per-cpu x cores).
Beyond seff: TimeEff = Elapsed / Timelimit, GPU-hours = GPUs x Elapsed (every run of a requeued
job counts), and the GPU TRES SLURM gathers where it can (TRESUsageInMax gres/gpuutil, gres/gpumem).

A requeued job has one allocation row per run (`sacct --duplicates`); its figures are those of the
last run, with the earlier runs counted. Array tasks (123_4) are jobs of their own; a task asked for
by its raw id (the SLURM_JOB_ID it ran with, sacct's JobIDRaw) is found under that id. A running job
gets figures so far; an id sacct does not know gets state MISSING. A job whose memory sacct did not
record (no MaxRSS, no TRES usage) has no memory figure, never 0 MB. Nothing here raises on odd rows.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from ..cluster.units import SIZE_UNITS_MB, duration_s, size_mb
from .sacct_fields import FIELDS


def seconds(text: str) -> float:
    """A sacct duration in seconds; no duration ('', UNLIMITED) counts as 0."""
    return duration_s(text) or 0.0


_TRES_ITEM = re.compile(r"([^,=]+)=([^,]*)")
_TRES_NUMBER = re.compile(r"([\d.]+)([KMGTP]?)")


@lru_cache(maxsize=8192)   # thousands of jobs share a few allocations, and a step's peak is often its total
def tres(text: str) -> Mapping[str, str]:
    """'cpu=6,mem=12G,gres/gpu=6' -> {'cpu': '6', 'mem': '12G', 'gres/gpu': '6'} (read-only: it is shared)."""
    return MappingProxyType(dict(_TRES_ITEM.findall(text)) if text else {})


def tres_number(value: str | None) -> float | None:
    """A TRES usage value: a count ('87'), a size ('5.2G'), or missing."""
    if value is None or value == "":
        return None
    m = _TRES_NUMBER.fullmatch(value)
    if not m:
        return None
    return float(m.group(1)) * (SIZE_UNITS_MB[m.group(2)] if m.group(2) else 1.0)


STATE_NOTES = {   # what a job's state means for its figures (FAILED's names the exit code)
    "MISSING": "not in accounting (wrong id, or purged)",
    "RUNNING": "running: figures so far",
    "PENDING": "pending: no figures yet",
    "TIMEOUT": "hit its time limit",
    "OUT_OF_MEMORY": "ran out of memory",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "a node failed",
    "PREEMPTED": "preempted",
    "REQUEUED": "requeued: waiting to run again",
    "COMPLETED": "completed",
}


@dataclass
class Job:
    """One SLURM job (or array task), its steps folded in."""
    job_id: str
    raw_id: str = ""                   # sacct's JobIDRaw: an array task's own job id
    name: str = ""
    state: str = "MISSING"
    exit_code: str = ""
    elapsed_s: float = 0.0
    timelimit_s: float | None = None
    cpus: int = 0
    nodes: int = 0
    gpus: int = 0
    gpu_type: str | None = None        # the gres type SLURM allocated (gres/gpu:l40s=3), where the site names one
    mem_alloc_mb: float = 0.0
    total_cpu_s: float = 0.0
    mem_used_mb: float = 0.0
    max_task_rss_mb: float = 0.0
    gpu_util_max: float | None = None
    gpu_mem_max_mb: float | None = None
    energy_j: float | None = None      # SLURM's energy TRES of this run: its largest step's (extern spans the job)
    energy_earlier_j: float = 0.0      # the earlier runs' of a requeued job
    runs: int = 0                      # 1 + times requeued
    earlier_states: list[str] = field(default_factory=list)   # how each earlier run ended (NODE_FAIL, PREEMPTED)
    elapsed_all_runs_s: float = 0.0
    alloc_total_cpu_s: float = 0.0     # the allocation row's TotalCPU: used when there are no step rows
    running_steps: int = 0
    late_start_record: bool = False    # accounting has not yet recorded the job's start
    step_ids: list[str] = field(default_factory=list)
    steps: dict[str, "Job"] = field(default_factory=dict)   # each step folded as a job of its own (a packed run's)
    step_name: str = ""                # a step's own name (a packed run's step is named after the run)

    @property
    def cpu_eff(self) -> float | None:
        core_s = self.elapsed_s * self.cpus
        return self.total_cpu_s / core_s if core_s and self.state != "MISSING" else None

    @property
    def mem_recorded(self) -> bool:
        """Whether accounting holds a memory figure: none for a job whose steps it gathered no usage for
        (JobAcctGather off, or a job that ran no step), which is not the same as using no memory."""
        return self.mem_used_mb > 0

    @property
    def mem_eff(self) -> float | None:
        return self.mem_used_mb / self.mem_alloc_mb if self.mem_alloc_mb and self.mem_recorded else None

    @property
    def time_eff(self) -> float | None:
        return self.elapsed_s / self.timelimit_s if self.timelimit_s else None

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_all_runs_s / 3600

    @property
    def status(self) -> str:
        """What a user should know about this job's figures."""
        text = (f"failed (exit code {self.exit_code})" if self.state == "FAILED"
                else STATE_NOTES.get(self.state, self.state.lower()))
        if self.late_start_record:
            text = "just started: accounting has no figures yet"
        if self.runs > 1:
            text += f"; requeued {self.runs - 1}x{self.requeued_after}"
        return text

    @property
    def requeued_after(self) -> str:
        """' after NODE_FAIL' (or the other ways its earlier runs ended); '' where SLURM recorded none."""
        ended = sorted({state for state in self.earlier_states if state not in ("REQUEUED", "")})
        return f" after {', '.join(ended)}" if ended else ""

    def figures(self) -> dict:
        return {"job_id": self.job_id, "job_name": self.name, "state": self.state, "status": self.status,
                "elapsed_s": self.elapsed_s, "timelimit_s": self.timelimit_s, "cpus": self.cpus,
                "nodes": self.nodes, "gpus": self.gpus, "gpu_type": self.gpu_type,
                "total_cpu_s": self.total_cpu_s,
                "cpu_eff": self.cpu_eff, "mem_used_mb": self.mem_used_mb if self.mem_recorded else None,
                "mem_alloc_mb": self.mem_alloc_mb,
                "mem_eff": self.mem_eff, "time_eff": self.time_eff, "gpu_hours": self.gpu_hours,
                "gpu_util_max": self.gpu_util_max, "gpu_mem_max_mb": self.gpu_mem_max_mb,
                "energy_j": (self.energy_j or 0.0) + self.energy_earlier_j or None,
                "elapsed_all_runs_s": self.elapsed_all_runs_s,
                "requeues": max(self.runs - 1, 0)}


def _allocation(job: Job, row: dict) -> None:
    """A job's own row (the newest run of a requeued job comes last): what was allocated."""
    alloc = tres(row["AllocTRES"])
    if job.runs:
        job.earlier_states.append(job.state)
        job.energy_earlier_j, job.energy_j = job.energy_earlier_j + (job.energy_j or 0.0), None
    job.runs += 1
    job.raw_id = row["JobIDRaw"]
    job.name = row["JobName"]
    job.state = (row["State"].split() or ["UNKNOWN"])[0]   # "CANCELLED by 1000" -> CANCELLED
    job.exit_code = row["ExitCode"]
    job.elapsed_s = seconds(row["Elapsed"])
    job.elapsed_all_runs_s += job.elapsed_s
    job.timelimit_s = seconds(row["Timelimit"]) or None
    job.cpus = int(row["AllocCPUS"] or 0)
    job.nodes = int(row["NNodes"] or 0) or 1
    job.gpus = int(float(alloc.get("gres/gpu", 0) or 0))
    job.gpu_type = next((key.split(":", 1)[1] for key in alloc if key.startswith("gres/gpu:")), None)
    job.mem_alloc_mb = size_mb(alloc.get("mem", ""))
    if not job.mem_alloc_mb and row["ReqMem"]:   # no AllocTRES (old records): from the request
        per = job.cpus if row["ReqMem"].endswith("c") else job.nodes
        job.mem_alloc_mb = size_mb(row["ReqMem"]) * per
    # a new run starts its step figures afresh
    job.total_cpu_s, job.mem_used_mb, job.max_task_rss_mb, job.step_ids, job.steps = 0.0, 0.0, 0.0, [], {}
    job.running_steps = 0
    job.gpu_util_max = job.gpu_mem_max_mb = None
    job.alloc_total_cpu_s = seconds(row["TotalCPU"])


def _step_share(job: Job, row: dict) -> None:
    """A step as a job of its own: what it was given (its AllocTRES) and what it used. A packed run's step
    (pack) is its share of the job; its time limit and requeues are the job's."""
    alloc = tres(row["AllocTRES"])
    share = Job(row["JobID"], raw_id=row["JobIDRaw"], name=job.name, state=(row["State"].split() or ["UNKNOWN"])[0],
                exit_code=row["ExitCode"], elapsed_s=seconds(row["Elapsed"]), timelimit_s=job.timelimit_s,
                cpus=int(float(alloc.get("cpu") or row["AllocCPUS"] or 0)), nodes=int(row["NNodes"] or 0) or 1,
                gpus=int(float(alloc.get("gres/gpu", 0) or 0)), gpu_type=job.gpu_type,
                mem_alloc_mb=size_mb(alloc.get("mem", "")), runs=job.runs, step_name=row["JobName"])
    share.elapsed_all_runs_s = share.elapsed_s
    _step(share, row)
    job.steps[row["JobID"]] = share


def _step(job: Job, row: dict) -> None:
    job.step_ids.append(row["JobID"])
    job.running_steps += row["State"] == "RUNNING"
    job.total_cpu_s += seconds(row["TotalCPU"])
    total, peak = tres(row["TRESUsageInTot"]), tres(row["TRESUsageInMax"])
    task_peak = size_mb(peak.get("mem", "")) or size_mb(row["MaxRSS"])
    # seff: TRESUsageInTot's mem is the sum of every task's peak; older records: MaxRSS x tasks
    step_mem = size_mb(total.get("mem", "")) or task_peak * int(row["NTasks"] or 1)
    job.mem_used_mb = max(job.mem_used_mb, step_mem)
    job.max_task_rss_mb = max(job.max_task_rss_mb, task_peak)
    util, gmem = tres_number(peak.get("gres/gpuutil")), tres_number(peak.get("gres/gpumem"))
    if util is not None:
        job.gpu_util_max = max(job.gpu_util_max or 0.0, util / 100)
    if gmem is not None:
        job.gpu_mem_max_mb = max(job.gpu_mem_max_mb or 0.0, gmem)
    if energy := tres_number(total.get("energy")):   # 0: the site records none
        job.energy_j = max(job.energy_j or 0.0, energy)


def parse(text: str | Iterable[str], wanted: list[str] | None = None) -> dict[str, Job]:
    """`sacct --parsable2 --noheader --duplicates --format=FIELDS` -> {job id: Job}. text: its whole output, or
    its lines as they come (sacct's own pipe: each is folded while sacct prints the next).

    wanted: the ids asked for; any that sacct did not return are included with state MISSING."""
    jobs: dict[str, Job] = {}
    for line in text.splitlines() if isinstance(text, str) else text:
        values = line.rstrip("\n").split("|")
        if len(values) < len(FIELDS):
            continue
        row = dict(zip(FIELDS, values))
        job_id, dot, _ = row["JobID"].partition(".")
        job = jobs.get(job_id) or jobs.setdefault(job_id, Job(job_id))
        if dot:
            _step(job, row)
            _step_share(job, row)
        else:
            _allocation(job, row)
    for job in jobs.values():
        if not job.step_ids and job.runs:   # e.g. a job that never started a step
            job.total_cpu_s = job.alloc_total_cpu_s
        if job.state == "PENDING" and job.running_steps:
            # for a moment after the start slurmdbd shows the job PENDING (as "allocation", with no
            # limits) while its batch step already runs: seen on the test cluster
            job.state, job.late_start_record = "RUNNING", True
    # an array's id stands for its tasks, and a task's raw id for that task
    known = set(jobs) | {j.partition("_")[0] for j in jobs} | {job.raw_id for job in jobs.values()}
    for wanted_id in wanted or []:
        if wanted_id not in known:
            jobs[wanted_id] = Job(wanted_id)
    return jobs


def lookup(jobs: dict[str, Job], job_id: str) -> Job | None:
    """The job a run recorded: by its id, or, for an array task, by the raw id it ran with (inside a
    task SLURM_JOB_ID is the raw id, while sacct names the task <array>_<task>)."""
    if job_id in jobs:
        return jobs[job_id]
    return next((job for job in jobs.values() if job.raw_id == job_id), None)
