"""The efficiency table: one row per run, from what the job used and what the trainer measured.

Sources, per run directory results/<run>/:
    train.json         the trainer's own figures (throughput, data wait, accuracy, job id)
    plan.json          what was asked for (cores, memory, time)
    SLURM accounting   one `sacct` call for every run's job (airetrain.sacct), where there is sacct
    benchmarks/*.tsv   Snakemake `benchmark:` files: wall time, CPU time, peak RSS of each step
                       (the fallback without SLURM accounting)
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .fsutil import read_json

STEPS = ("stage", "train", "promote")
COLUMNS = {
    "run": "run name",
    "state": "done: trained and the checkpoint promoted; trained: not promoted; missing: no train.json",
    "elapsed_s": "wall seconds of stage + train + promote",
    "cpu_eff": "CPU time / (elapsed x allocated cores), as seff's CPU efficiency (0-1)",
    "max_rss_mb": "peak resident memory of any step, MB",
    "mem_eff": "max_rss / requested memory (0-1)",
    "samples_per_s": "training throughput over all ranks",
    "data_wait_frac": "share of step time spent waiting for the data loader (0-1)",
    "eval_accuracy": "accuracy on the held-out split",
    "world_size": "ranks",
    "slurm_job_id": "SLURM job id (empty outside SLURM)",
    "source": "where elapsed, cpu_eff and memory come from: sacct, or benchmark (Snakemake's, local runs)",
}


def _benchmarks(run_dir: Path) -> pd.DataFrame | None:
    frames = [pd.read_csv(p, sep="\t").assign(step=p.stem)
              for step in STEPS if (p := run_dir / "benchmarks" / f"{step}.tsv").exists()]
    return pd.concat(frames, ignore_index=True) if frames else None


def run_row(run_dir: Path, accounting: dict | None = None) -> dict:
    row = {"run": run_dir.name}
    plan = read_json(run_dir / "plan.json") if (run_dir / "plan.json").exists() else {}
    train = read_json(run_dir / "train.json") if (run_dir / "train.json").exists() else None
    promoted = (run_dir / "checkpoint.json").exists()
    row["state"] = "missing" if train is None else ("done" if promoted else "trained")
    bench = _benchmarks(run_dir)
    job = (accounting or {}).get(str((train or {}).get("slurm_job_id")))
    if job:  # the whole allocation, every node: what seff would show
        row.update({"elapsed_s": job["elapsed_s"], "cpu_eff": _round(job["cpu_eff"]),
                    "max_rss_mb": round(job["max_rss_mb"], 1), "mem_eff": _round(job["mem_eff"]),
                    "source": "sacct"})
    elif bench is not None:
        row["source"] = "benchmark"
        elapsed, cpu = bench["s"].sum(), bench["cpu_time"].sum()
        cores = plan.get("cpus_per_node", 1) * plan.get("nodes", 1)
        row["elapsed_s"] = round(float(elapsed), 2)
        row["cpu_eff"] = round(float(cpu / (elapsed * cores)), 4) if elapsed > 0 else None
        row["max_rss_mb"] = round(float(bench["max_rss"].max()), 1)
        if plan:
            row["mem_eff"] = round(float(bench["max_rss"].max() / (plan["mem_gb_per_node"] * 1024)), 4)
    if train:
        for key in ("samples_per_s", "data_wait_frac", "eval_accuracy", "world_size", "slurm_job_id"):
            row[key] = train.get(key)
    return row


def _round(value):
    return round(value, 4) if value is not None else None


def table(results: str | Path, runs: list[str]) -> pd.DataFrame:
    from .sacct import query

    job_ids = [read_json(p).get("slurm_job_id") for run in runs
               if (p := Path(results) / run / "train.json").exists()]
    accounting = query(job_ids)  # one call for all runs
    rows = [run_row(Path(results) / run, accounting) for run in runs]
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS))


def to_markdown(df: pd.DataFrame) -> str:
    shown = df.astype(object).where(df.notna(), "")
    header = "| " + " | ".join(df.columns) + " |"
    rule = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    legend = ["", "Columns:", *(f"- `{k}`: {v}" for k, v in COLUMNS.items())]
    return "\n".join([header, rule, *body, *legend]) + "\n"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write(results: str | Path, runs: list[str], out_dir: str | Path) -> pd.DataFrame:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = table(results, runs)
    df.to_csv(out_dir / "efficiency.csv", index=False)
    (out_dir / "efficiency.md").write_text(to_markdown(df))
    return df
