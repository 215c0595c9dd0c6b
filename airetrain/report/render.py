"""Renderers of the collection: efficiency.csv (every column, for machines), efficiency.md (the key
columns, the advice, what each column means) and efficiency.html (self-contained, plots inline).

The plots are also written as PNG files, for Snakemake's `--report` (rule report registers them).
"""
from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..text import human_mb, markdown_table
from ..cluster.units import format_duration
from .collection import COLUMNS

if TYPE_CHECKING:
    import pandas as pd

SHOWN = ["run", "evaluates", "state", "job_id", "job_state", "elapsed_s", "time_eff", "cpu_eff", "mem_eff",
         "gpu_hours", "energy_kwh", "co2e_kg", "gpu_util", "samples_per_s", "data_wait_frac", "stage_s", "stage_frac",
         "eval_loss", "eval_accuracy", "eval_<metric>", "best", "best_epoch", "stopped_early", "source"]


def to_markdown(df: pd.DataFrame) -> str:
    return efficiency_markdown(df.to_dict("records"), list(df.columns))


def efficiency_markdown(rows: list[dict], columns: list[str]) -> str:
    """The key columns that have a value in some row, the advice, and what each column means."""
    at = SHOWN.index("eval_<metric>")
    metrics = [c for c in columns if c.startswith("eval_") and c not in SHOWN]
    candidates = [c for c in SHOWN[:at] + metrics + SHOWN[at + 1:] if c in columns]
    cells = [[_fmt(row.get(c)) for c in candidates] for row in rows]
    kept = [i for i in range(len(candidates)) if any(line[i] for line in cells)]   # a column with a value
    table = markdown_table([candidates[i] for i in kept], [[line[i] for i in kept] for line in cells])
    advice = [f"- **{row['run']}**: {row['advice']}" for row in rows if row.get("advice")]
    sized = [f"- **{row['run']}**: {row['right_sizing']}" for row in rows if _fmt(row.get("right_sizing"))]
    checked = [f"- **{row['run']}** (job {row['job_id']}): {row['seff_check']}" for row in rows
               if _fmt(row.get("seff_check"))]
    parts = table
    if advice:
        parts += ["", "Advice:", *advice]
    if checked:
        parts += ["", "seff's figures against these (CPU and memory efficiency):", *checked]
    if sized:
        parts += ["", "Right-sized runs (resources: measured):", *sized]
    parts += ["", "Columns (efficiency.csv has them all):", *(f"- `{k}`: {v}" for k, v in COLUMNS.items())]
    return "\n".join(parts) + "\n"


def _fmt(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


def write_efficiency(df: pd.DataFrame, out_dir: str | Path, results: str | Path | None = None) -> dict[str, Path]:
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


# The page's main table: the columns a person reads first, each with its header and format; the
# rest are behind "All columns". Efficiencies are percentages, coloured as reportseff colours them.
KEY_COLUMNS = {"run": "run", "state": "state", "job_id": "job", "job_state": "SLURM state", "elapsed_s": "elapsed",
               "time_eff": "time eff", "cpus": "cores", "cpu_eff": "CPU eff", "mem_used_mb": "memory used",
               "mem_eff": "mem eff", "gpus": "GPUs", "gpu_util": "GPU busy", "gpu_hours": "GPU-hours",
               "samples_per_s": "samples/s", "data_wait_frac": "data wait", "hangs": "hangs", "health": "health",
               "eval_loss": "eval loss", "eval_accuracy": "accuracy", "best": "best", "best_epoch": "best epoch"}
GOOD, LOW = 0.7, 0.3   # a share of a request used: at least GOOD is green, under LOW red, amber between


def cell_text(column: str, value) -> str:
    """A value as a person reads it: percentages, H:MM:SS, GB or MB, thousands separated."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if column.endswith(("_eff", "_frac")) or column in ("gpu_util", "mfu", "eval_accuracy"):
            return f"{100 * value:.1f} %"
        if column.endswith("_mb"):
            return human_mb(value)
        if column in ("elapsed_s", "timelimit_s", "stage_s"):
            return format_duration(value)
        if column == "gpu_hours":
            return f"{value:.2f}"
        if float(value).is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def cell_class(column: str, value) -> str:
    """good, fair or poor for an efficiency; '' for the other columns."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        return ""
    if column == "time_eff":   # close to the limit is the risk: the job may be cut off
        return "poor" if value > 0.9 else "fair" if value < LOW else "good"
    if column == "data_wait_frac":
        return "poor" if value > 0.3 else "fair" if value > 0.1 else "good"
    if column in ("cpu_eff", "mem_eff", "gpu_util"):
        return "good" if value >= GOOD else "poor" if value < LOW else "fair"
    return ""


def html_table(df: pd.DataFrame, columns: list[str], headers: dict[str, str], css: str) -> str:
    head = "".join(f'<th title="{html.escape(COLUMNS.get(c, c))}">{html.escape(headers.get(c, c))}</th>'
                   for c in columns)
    rows = []
    for _, row in df.iterrows():
        cells = []
        for c in columns:
            value = row.get(c)
            klass = cell_class(c, value)
            cells.append(f'<td{f" class={klass!r}" if klass else ""}>{html.escape(cell_text(c, value))}</td>')
        anchor = f' id="run-{html.escape(str(row.get("run")))}"' if css == "key" else ""   # results.html links here
        rows.append(f"<tr{anchor}>" + "".join(cells) + "</tr>")
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}
th{background:#f3f3f3;font-weight:600}
td:first-child,th:first-child{text-align:left;overflow-wrap:anywhere;max-width:14em}
.good{background:#d9f2d9} .fair{background:#fff2cc} .poor{background:#f8d0d0}
.wide{overflow-x:auto;max-width:100%} details{margin:0.5em 0 1.5em} summary{cursor:pointer;font-weight:600}
figure{display:inline-block;margin:0 1em 1em 0} img{max-width:100%}
.legend span{padding:1px 6px;margin-right:0.5em;font-size:12px}"""


def write_html(df: pd.DataFrame, out_dir: Path, results: str | Path | None) -> dict[str, Path]:
    from .plots import figures   # matplotlib: only when a page is written, not for every table

    images = figures(df, results)
    paths = {}
    for name, data in images.items():
        paths[f"{name}_png"] = out_dir / f"{name}.png"
        paths[f"{name}_png"].write_bytes(data)
    present = [c for c in df.columns if df[c].notna().any()
               and c not in ("advice", "memory_estimate", "right_sizing")]
    key = [c for c in KEY_COLUMNS if c in present]
    advice = "".join(f"<li><b>{html.escape(str(r['run']))}</b>: {html.escape(r['advice'])}</li>"
                     for _, r in df.iterrows() if r.get("advice"))
    sized = "".join(f"<li><b>{html.escape(str(r['run']))}</b>: {html.escape(r['right_sizing'])}</li>"
                    for _, r in df.iterrows() if isinstance(r.get("right_sizing"), str))
    inline = "".join(f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
                     f"</figure>" for name, data in images.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>airetrain efficiency report</title>
<style>{STYLE}</style>
</head><body><h1>Efficiency report</h1>
<p class="legend">Used of what was asked for: <span class="good">70 % or more</span><span class="fair">30 to 70 %
</span><span class="poor">under 30 %</span> (time: over 90 % of the limit is red). Hover a header for its meaning.</p>
{html_table(df, key, KEY_COLUMNS, "key")}
<details><summary>All columns (as in efficiency.csv, in human units)</summary>
<div class="wide">{html_table(df, present, {}, "all")}</div></details>
<h2>Advice</h2><ul>{advice or "<li>nothing to change</li>"}</ul>
{f"<h2>Right-sized runs</h2><ul>{sized}</ul>" if sized else ""}
<h2>Plots</h2>{inline}
{_curves_links(df, out_dir, results)}
</body></html>
"""
    paths["html"] = out_dir / "efficiency.html"
    paths["html"].write_text(page)
    return paths
