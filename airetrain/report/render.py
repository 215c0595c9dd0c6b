"""Renderers of the collection: efficiency.csv (every column, for machines), efficiency.md (the key
columns, the advice, what each column means) and efficiency.html (self-contained, plots inline).

The plots are also written as PNG files, for Snakemake's `--report` (rule report registers them).
"""
from __future__ import annotations

import base64
import html
import os
from pathlib import Path

import pandas as pd

from .table import COLUMNS

SHOWN = ["run", "state", "job_id", "job_state", "elapsed_s", "time_eff", "cpu_eff", "mem_eff", "gpu_hours",
         "gpu_util", "samples_per_s", "data_wait_frac", "stage_s", "stage_frac", "eval_loss", "eval_accuracy",
         "eval_<metric>", "source"]


def to_markdown(df: pd.DataFrame) -> str:
    at = SHOWN.index("eval_<metric>")
    metrics = [c for c in df.columns if c.startswith("eval_") and c not in SHOWN]
    shown_cols = [c for c in SHOWN[:at] + metrics + SHOWN[at + 1:] if c in df.columns and df[c].notna().any()]
    shown = df[shown_cols].astype(object).where(df[shown_cols].notna(), "")
    header = "| " + " | ".join(shown_cols) + " |"
    rule = "| " + " | ".join("---" for _ in shown_cols) + " |"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    advice = [f"- **{r['run']}**: {r['advice']}" for _, r in df.iterrows() if r.get("advice")]
    parts = [header, rule, *body]
    if advice:
        parts += ["", "Advice:", *advice]
    parts += ["", "Columns (efficiency.csv has them all):", *(f"- `{k}`: {v}" for k, v in COLUMNS.items())]
    return "\n".join(parts) + "\n"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write(df: pd.DataFrame, out_dir: str | Path, results: str | Path | None = None) -> dict[str, Path]:
    """efficiency.csv, efficiency.md, efficiency.html and the plots as PNG files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / "efficiency.csv", "md": out_dir / "efficiency.md"}
    df.to_csv(paths["csv"], index=False)
    paths["md"].write_text(to_markdown(df))
    paths.update(write_html(df, out_dir, results))
    return paths


def _curves_links(df: pd.DataFrame, out_dir: Path, results: str | Path | None) -> str:
    """Where each run's TensorBoard curves are, and the command that shows them all."""
    if results is None:
        return ""
    results = Path(results)
    logdirs = [(run, results / str(run) / "tensorboard") for run in df["run"]]
    links = "".join(f'<li><a href="{html.escape(os.path.relpath(path, out_dir))}/">{html.escape(str(run))}</a></li>'
                    for run, path in logdirs if path.is_dir())
    if not links:
        return ""
    return (f"<h2>Curves</h2><p>TensorBoard event files, one directory per run: "
            f"<code>tensorboard --logdir {html.escape(str(results))}</code> shows them side by side.</p>"
            f"<ul>{links}</ul>")


def write_html(df: pd.DataFrame, out_dir: Path, results: str | Path | None) -> dict[str, Path]:
    from .plots import figures   # matplotlib: only when a page is written, not for every table

    images = figures(df, results)
    paths = {}
    for name, data in images.items():
        paths[f"{name}_png"] = out_dir / f"{name}.png"
        paths[f"{name}_png"].write_bytes(data)
    shown = df.drop(columns=["advice"]).dropna(axis=1, how="all")
    advice = "".join(f"<li><b>{html.escape(str(r['run']))}</b>: {html.escape(r['advice'])}</li>"
                     for _, r in df.iterrows() if r.get("advice"))
    inline = "".join(f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
                     f"</figure>" for name, data in images.items())
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>airetrain efficiency report</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}} figure{{display:inline-block;margin:0 1em 1em 0}}</style>
</head><body><h1>Efficiency report</h1>
{shown.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}")}
<h2>Advice</h2><ul>{advice or "<li>nothing to change</li>"}</ul>
<h2>Plots</h2>{inline}
{_curves_links(df, out_dir, results)}
</body></html>
"""
    paths["html"] = out_dir / "efficiency.html"
    paths["html"].write_text(page)
    return paths
