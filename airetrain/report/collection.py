"""The collection: one row per run (or per SLURM job), what it used of what it asked for, and advice.

Sources, per run directory results/<run>/:
    train.json         the trainer's own figures (throughput, MFU, GPU use, data wait, job id)
    plan.json          what was asked for, and the strategy's memory estimate
    SLURM accounting   ONE `sacct` call for every run's job (query.py, fold.py), where there is sacct
    benchmarks/*.tsv   Snakemake `benchmark:` files: wall time, CPU time, peak RSS of each step
                       (the fallback without SLURM accounting: a laptop)
`airetrain report --jobs/--since` builds the same table for any SLURM jobs (accounting columns only).
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from .. import sizing
from ..fsutil import read_json
from ..rundir.history import entry, of_profile
from ..records import STOPPED, Plan, read_plan
from ..rundir import batch_changes, memory_raises
from ..rundir.run_log import hangs, left_out, straggler_text
from .jobs import Job, lookup, parse
from .query import UNAVAILABLE, AccountingUnavailable, Started, query
from .seff import seff_check
from .advice import advise, learned
from .energy import job_energy

if TYPE_CHECKING:   # pandas costs a fifth of a second to import: not for the printed table of jobs_rows
    import pandas as pd

STEPS = ("stage", "train", "promote")
COLUMNS = {
    "run": "run name (for --jobs/--since: the job's name)",
    "state": ("done: trained and promoted; trained: not promoted; stopped: stopped early, will resume; "
              "missing: no train.json; pack: the whole job that packed runs shared (their rows are their shares)"),
    "job_id": "SLURM job id (empty outside SLURM)",
    "job_state": "SLURM's final state (COMPLETED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, FAILED, RUNNING, MISSING)",
    "status": "what to know about the figures (running: so far; requeued N x; not in accounting; accounting "
              "unavailable: sacct could not answer, run the report again once it can)",
    "elapsed_s": "wall seconds of the job (last run of a requeued job); stage + train + promote locally",
    "timelimit_s": "the job's time limit, seconds",
    "time_eff": "elapsed / time limit (0-1): TimeEff",
    "cpus": "allocated cores, all nodes",
    "cpu_eff": "CPU time of all steps / (elapsed x allocated cores), seff's CPU efficiency (0-1): CPUEff",
    "mem_used_mb": "the largest step's memory, every task's peak summed (seff's 'Memory Utilized'), MB",
    "mem_alloc_mb": "allocated memory, all nodes, MB",
    "mem_eff": "mem_used / mem_alloc (0-1), seff's memory efficiency: MemEff",
    "gpus": "allocated GPUs",
    "gpu_type": ("the GPU: its name as CUDA reported it to the trainer, else SLURM's gres type; its memory and peak "
                 "come from the GPU table (airetrain/cluster/hardware.py)"),
    "gpu_hours": "GPUs x elapsed, every run of a requeued job included",
    "energy_kwh": ("energy at the data centre, kWh: SLURM's energy TRES where the site measures it, else the Green "
                   "Algorithms estimate (cores x W per core x CPU usage + GPUs x board power x GPU use + requested "
                   "memory x W per GB, x hours); both x PUE (site.energy)"),
    "co2e_kg": "energy_kwh x the grid's carbon intensity (site.energy.carbon_g_per_kwh), kg CO2e",
    "energy_source": ("measured, node (SLURM's energy TRES), measured, GPUs only (the trainer's NVML counter), "
                      "estimated (Green Algorithms), or unknown (why)"),
    "gpu_util": "GPU utilisation: the trainer's NVML mean, else SLURM's gres/gpuutil peak (0-1)",
    "gpu_mem_peak_mb": "GPU memory peak: the trainer's NVML figure, else SLURM's gres/gpumem, MB",
    "world_size": "training ranks",
    "device": "cuda or cpu: what the ranks trained on",
    "strategy": "ddp or fsdp",
    "samples_per_s": "training throughput over all ranks",
    "mfu": "model FLOPs utilisation against the GPU's bf16 peak after the warm-up steps (0-1; GPU only)",
    "data_wait_frac": "share of step time spent waiting for the data loader (0-1)",
    "stage_files": "files the stage step copied onto the fast root, or found unchanged (packed: its shards)",
    "stage_mb": "MB of the staged dataset",
    "stage_s": "wall seconds of the stage step (the copy and its verification)",
    "stage_frac": "stage seconds / the job's elapsed seconds (0-1): above a few percent, pack the dataset",
    "eval_loss": "mean loss on the held-out split (empty without a test split)",
    "eval_accuracy": "accuracy on the held-out split (classification and segmentation)",
    "eval_<metric>": "each further metric on the held-out split: dice for segmentation, or train.metrics' own",
    "best": "the best value of the monitored metric (checkpoint.monitor) over the run's evaluations",
    "best_epoch": "the epoch of that best evaluation, counted from 1; its checkpoint is kept and promoted",
    "evaluates": "an evaluation run (evaluate:): the run whose weights it evaluated, and which (best or last)",
    "stopped_early": "the step where early stopping (train.early_stop) ended training; empty: it trained to the end",
    "requeues": "times SLURM requeued the job",
    "hangs": "hangs the watchdog caught (each one's stacks: <scratch>/airetrain/<run>/hangs/)",
    "health": ("nodes the run's jobs left out and why (the node check before staging, or a straggler), and the "
               "stragglers named: `straggler: rank 4 on labgpu2, 1.4× the median step`"),
    "step_spread": "the slowest rank's median compute time per step / the median rank's (1: even; train.json)",
    "allreduce_gbps": "the links' all-reduce bus bandwidth over every rank, GB/s, measured as training started",
    "seff_check": ("where seff is installed, for the first 10 runs (for --jobs/--since: the first N of "
                   "--seff-check N): 'agrees' (within 0.1 point) or what differs"),
    "source": "where elapsed, cpu_eff and memory come from: sacct, or benchmark (Snakemake's, local runs)",
    "learned_from": "resources: measured: the finished jobs whose measurements set this run's requests",
    "right_sizing": "a right-sized run: how much of its requests it used (MemEff, TimeEff), next to the jobs it "
                    "learned from",
    "advice": "what to ask for next time, with the numbers behind it",
}

def evaluates_label(source: dict | None) -> str:
    """An evaluation run's source as both tables mark it: 'pretrain (best)'; '' for a training run."""
    return f"{source['run']} ({source.get('which', 'best')})" if source else ""


def _benchmarks(run_dir: Path) -> pd.DataFrame | None:
    import pandas as pd
    frames = [pd.read_csv(p, sep="\t").assign(step=p.stem)
              for step in STEPS if (p := run_dir / "benchmarks" / f"{step}.tsv").exists()]
    return pd.concat(frames, ignore_index=True) if frames else None


def _rounded(figures: dict) -> dict:
    """6 significant digits: enough for a small job's GPU-hours, without float noise in the CSV."""
    rounded = dict(figures)
    for k, v in figures.items():
        # a whole number below a million is its own 6-digit form: most figures are, and formatting costs
        if isinstance(v, float) and not (v.is_integer() and -1e6 < v < 1e6):
            rounded[k] = float(f"{v:.6g}")
    return rounded


def job_row(job: Job) -> dict:
    """Accounting columns of one job: what seff shows, and more."""
    f = job.figures()
    row = {k: f[k] for k in ("elapsed_s", "timelimit_s", "time_eff", "cpus", "cpu_eff", "mem_used_mb",
                             "mem_alloc_mb", "mem_eff", "gpus", "gpu_hours", "requeues", "status")}
    row.update({"job_state": f["state"], "job_id": job.job_id, "source": "sacct"})
    if f["gpu_util_max"] is not None:
        row["gpu_util"] = f["gpu_util_max"]
    if f["gpu_mem_max_mb"] is not None:
        row["gpu_mem_peak_mb"] = f["gpu_mem_max_mb"]
    if f["gpu_type"]:
        row["gpu_type"] = f["gpu_type"]
    row.update(energy_j=f["energy_j"], elapsed_all_runs_s=f["elapsed_all_runs_s"])
    return _rounded(row)


def benchmark_row(bench: pd.DataFrame, plan: Plan | None) -> dict:
    """Without SLURM: the same columns from Snakemake's benchmark files (cores and memory from the plan)."""
    elapsed, cpu = float(bench["s"].sum()), float(bench["cpu_time"].sum())
    cores = plan.cpus_per_node * plan.nodes if plan else 1
    used = float(bench["max_rss"].max())
    alloc = plan.mem_gb_per_node * 1024 * plan.nodes if plan else None
    return _rounded({"source": "benchmark", "elapsed_s": elapsed, "cpus": cores,
                     "cpu_eff": cpu / (elapsed * cores) if elapsed > 0 else None,
                     "mem_used_mb": used, "mem_alloc_mb": alloc, "mem_eff": used / alloc if alloc else None})


def _stage_figures(run_dir: Path, elapsed_s: float | None) -> dict:
    """What staging cost: its files, bytes and seconds, and its share of the job (the advice reads
    stage_format and stage_source, which the table does not show)."""
    path = run_dir / "stage.json"
    stage = read_json(path) if path.exists() else None
    if not stage or stage.get("mode") == "none":
        return {}
    return {"stage_files": stage["files"], "stage_mb": round(stage["bytes"] / 1e6, 1), "stage_s": stage["seconds"],
            "stage_frac": round(stage["seconds"] / elapsed_s, 4) if elapsed_s else None,
            "stage_format": stage.get("format"), "stage_source": stage["source"]}


def run_row(run_dir: Path, accounting: dict | None = None, unavailable: str | None = None) -> dict:
    """One run's row; unavailable: why sacct could not answer (its figures are then marked missing)."""
    row = {"run": run_dir.name}
    plan = read_plan(run_dir)
    train = read_json(run_dir / "train.json") if (run_dir / "train.json").exists() else None
    promoted = (run_dir / "checkpoint.json").exists()
    stopped = (run_dir / STOPPED).exists()
    row["state"] = "stopped" if stopped and train is None else \
        "missing" if train is None else ("done" if promoted else "trained")
    job = lookup(accounting or {}, str((train or {}).get("slurm_job_id")))
    job = packed_share(job, train or {}, run_dir.name) or job   # a packed run: its share of the job
    bench = _benchmarks(run_dir)
    if job:
        row.update(job_row(job))
    elif bench is not None:
        row.update(benchmark_row(bench, plan))
    if unavailable and (train or {}).get("slurm_job_id"):
        row.update(job_state="UNKNOWN", status=f"{UNAVAILABLE} ({unavailable}): the sacct figures are missing; "
                                               "run the report again once accounting answers")
    row.update(_stage_figures(run_dir, row.get("elapsed_s")))
    if plan:
        row["hangs"] = len(hangs(plan.durable_dir))
        row["out_of_memory"] = [memory_raises.described(j) for j in memory_raises.judged(plan.durable_dir)
                                if j["state"] == "OUT_OF_MEMORY"] or None
        row.update(health_figures(plan, train))
    if plan and plan.right_sized:
        row["learned_from"] = plan.right_sized["from"]
        row["right_sizing"] = learned(plan, row, plan.roots.scratch)
    if train:
        for key in ("samples_per_s", "mfu", "data_wait_frac", "eval_loss", "eval_accuracy", "world_size",
                    "device", "strategy"):
            row[key] = train.get(key)
        for name, value in (train.get("eval_metrics") or {}).items():
            row.setdefault(f"eval_{name}", value)
        if best := train.get("best"):
            row.update(best=best["value"], best_epoch=best["epoch"] + 1)
        if stop := train.get("stopped_early"):
            row["stopped_early"] = stop["step"]
        if source := train.get("evaluates"):
            row["evaluates"] = evaluates_label(source)
        row["mfu"] = train.get("steady_mfu") or train.get("mfu")   # what the run sustains, not its compilation
        row["job_id"] = train.get("slurm_job_id") or row.get("job_id")
        if train.get("gpu_util_mean") is not None:
            row["gpu_util"] = row["gpu_use"] = round(train["gpu_util_mean"] / 100 if train["gpu_util_mean"] > 1
                                                     else train["gpu_util_mean"], 4)   # the energy's GPU use
        if train.get("gpu_mem_peak_bytes"):
            row["gpu_mem_peak_mb"] = round(train["gpu_mem_peak_bytes"] / 2 ** 20, 1)
        row["memory_estimate"] = train.get("memory_estimate")
        row["batch_changes"] = [batch_changes.described(c) for c in train.get("batch_changes", [])] or None
        row["gpu_energy_j"] = train.get("gpu_energy_j")   # NVML's: the energy's source where SLURM measures none
        row["gpu_type"] = train.get("gpu_name") or row.get("gpu_type")   # CUDA's name, else SLURM's gres type
        row["tracking_lost"] = {name: {"lost": t["lost"], "error": t["error"]}
                                for name, t in (train.get("tracking") or {}).items() if t.get("lost")} or None
        row["next_request"] = next_request(run_dir, plan, row) if plan else None
    return row


def packed_share(job: Job | None, train: dict, run: str) -> Job | None:
    """A packed run's own step of its job: the one its trainer recorded, else (a script's train.json is written
    outside the step) the step named after the run; None for a run with a job of its own."""
    if job is None:
        return None
    if (step := train.get("slurm_step")) in job.steps:
        return job.steps[step]
    return next((share for share in reversed(job.steps.values()) if share.step_name == run), None)


def pack_rows(results: str | Path, runs: list[str], accounting: dict) -> list[dict]:
    """A row for each job that packed runs shared (each run's row is its share): the whole allocation's figures,
    named after its first run as the plan names the pack."""
    packed: dict[str, list[str]] = {}
    for run in runs:
        train = read_json(p) if (p := Path(results) / run / "train.json").exists() else {}
        job = lookup(accounting, str(train.get("slurm_job_id")))
        if packed_share(job, train, run):
            packed.setdefault(job.job_id, []).append(run)
    rows = []
    for job_id, members in packed.items():
        row = job_row(lookup(accounting, job_id))
        row.update(run=f"pack-{members[0]}", state="pack",
                   status="; ".join(filter(None, [f"shared by {', '.join(members)}", row.get("status")])))
        rows.append(row)
    return rows


def health_figures(plan: Plan, train: dict | None) -> dict:
    """The nodes left out (the run's health log) and the stragglers named, the ranks' spread and the links."""
    health = (train or {}).get("health") or {}
    notes = [f"{node} left out ({why})" for node, why in left_out(plan.durable_dir).items()]
    notes += [straggler_text(s) for s in health.get("stragglers") or []]
    steps = [t for t in health.get("rank_step_s") or [] if t]
    spread = round(max(steps) / statistics.median(steps), 3) if len(steps) > 1 else None
    return {"health": "; ".join(notes) or None, "step_spread": spread, "allreduce_gbps": health.get("allreduce_gbps")}


def next_request(run_dir: Path, plan: Plan, row: dict) -> dict | None:
    """What `resources: measured` makes the next plan of this run's profile ask for, once this job's
    history line is recorded (the report rule records it): the request the advice quotes."""
    lines = of_profile(plan.roots.scratch, plan, entry(run_dir, row))
    return sizing.requests(lines, plan) if lines else None


def _finished(rows: list[dict], checks: dict[str, str], energy: dict | None = None) -> tuple[list[dict], list[str]]:
    """The rows with their energy, advice and seff's check, and the table's columns in order. energy: the
    config's site.energy (None: its defaults)."""
    for row in rows:
        if row.get("elapsed_s") is not None:
            row.update(job_energy(row, energy, row.get("gpu_use")))
        row["advice"] = "; ".join(advise(row))
        if checks and row.get("job_id") in checks:
            row["seff_check"] = checks[row["job_id"]]
    columns = list(COLUMNS)
    keys = set().union(*rows)
    metrics = sorted(k for k in keys if k.startswith("eval_") and k not in COLUMNS)
    at = columns.index("eval_<metric>")
    return rows, columns[:at] + metrics + columns[at + 1:]


def frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """The rows as the collection: a DataFrame with the columns in order (absent values NaN)."""
    import pandas as pd
    return pd.DataFrame(rows).reindex(columns=columns)


def _finish(rows: list[dict], checks: dict[str, str], energy: dict | None = None) -> pd.DataFrame:
    return frame(*_finished(rows, checks, energy))


def table(results: str | Path, runs: list[str], energy: dict | None = None) -> pd.DataFrame:
    """The pipeline's table: one row per run, one sacct call for all their jobs."""
    job_ids = [str(j) for run in runs if (p := Path(results) / run / "train.json").exists()
               and (j := read_json(p).get("slurm_job_id"))]
    try:
        accounting, unavailable = query(job_ids), None
    except AccountingUnavailable as e:   # the runs' own figures still make the table
        accounting, unavailable = None, str(e)
    rows = [run_row(Path(results) / run, accounting, unavailable) for run in runs]
    rows += pack_rows(results, runs, accounting or {})
    return _finish(rows, seff_check({j: job for j in job_ids if (job := lookup(accounting, j))})
                   if accounting else {}, energy)


def jobs_rows(job_ids: list[str] | None = None, since: str | None = None, text: str | None = None,
              energy: dict | None = None, started: Started | None = None,
              seff_checks: int = 0) -> tuple[list[dict], list[str]]:
    """Any SLURM jobs (by id, or started since a date), from one sacct call (started: the call, begun
    already; or its captured text): the rows and the columns, without pandas (what `airetrain report
    --jobs` prints). seff_checks: how many jobs seff checks, where it is installed (each one a process
    and a database query: none unless asked, or a report of thousands of jobs waits for them)."""
    try:
        jobs = parse(text, job_ids) if text is not None else (started or Started(job_ids, since)).result()
    except AccountingUnavailable as e:
        raise RuntimeError(f"SLURM accounting does not answer ({e}): this needs it; try again later") from None
    if jobs is None:
        raise RuntimeError("sacct is not available here (or it failed): this needs SLURM accounting")
    rows = [{"run": job.name or job.job_id, **job_row(job)} for job in jobs.values()]
    return _finished(rows, seff_check(jobs, seff_checks) if seff_checks and text is None else {}, energy)


def jobs_table(job_ids: list[str] | None = None, since: str | None = None, text: str | None = None,
               energy: dict | None = None) -> pd.DataFrame:
    """jobs_rows as a DataFrame (for the CSV, the page and the plots)."""
    return frame(*jobs_rows(job_ids, since, text, energy))
