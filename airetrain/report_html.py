"""efficiency.html: the table, the advice and three plots, in one self-contained file (images inline).

The plots are also written as PNG files, for Snakemake's `--report` (rule report registers them).
"""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

EFFICIENCIES = {"cpu_eff": "CPU", "mem_eff": "memory", "time_eff": "time", "gpu_util": "GPU"}


def efficiency_plot(df: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(df) + 2), 3.5))
    present = [c for c in EFFICIENCIES if c in df and df[c].notna().any()]
    width = 0.8 / max(len(present), 1)
    for i, col in enumerate(present):
        values = pd.to_numeric(df[col], errors="coerce").fillna(0)
        ax.bar([x + i * width for x in range(len(df))], values, width, label=EFFICIENCIES[col])
    ax.set_xticks([x + width * (len(present) - 1) / 2 for x in range(len(df))], df["run"], rotation=30, ha="right")
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_ylabel("used / requested")
    ax.set_title("Efficiency per run")
    ax.legend(fontsize=8)
    return fig


def throughput_plot(df: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    rows = df.dropna(subset=["world_size", "samples_per_s"]) if "world_size" in df else df.iloc[0:0]
    ax.scatter(rows["world_size"], rows["samples_per_s"])
    for _, r in rows.iterrows():
        ax.annotate(r["run"], (r["world_size"], r["samples_per_s"]), fontsize=7)
    ax.set_xlabel("GPUs (ranks)")
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput against GPUs")
    return fig


def loss_plot(df: pd.DataFrame, results: Path | None):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for run in df["run"]:
        path = results / str(run) / "metrics.jsonl" if results else None
        if path and path.exists():
            points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            ax.plot([p["step"] for p in points], [p["loss"] for p in points], label=str(run))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("Loss curves")
    if ax.lines:
        ax.legend(fontsize=8)
    return fig


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def write_html(df: pd.DataFrame, out_dir: Path, results: str | Path | None) -> dict[str, Path]:
    results = Path(results) if results else None
    images = {"efficiency": _png(efficiency_plot(df)), "throughput": _png(throughput_plot(df)),
              "loss": _png(loss_plot(df, results))}
    paths = {}
    for name, data in images.items():
        paths[f"{name}_png"] = out_dir / f"{name}.png"
        paths[f"{name}_png"].write_bytes(data)
    shown = df.drop(columns=["advice"]).dropna(axis=1, how="all")
    advice = "".join(f"<li><b>{html.escape(str(r['run']))}</b>: {html.escape(r['advice'])}</li>"
                     for _, r in df.iterrows() if r.get("advice"))
    figures = "".join(f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
                      f"</figure>" for name, data in images.items())
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>airetrain efficiency report</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}} figure{{display:inline-block;margin:0 1em 1em 0}}</style>
</head><body><h1>Efficiency report</h1>
{shown.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}")}
<h2>Advice</h2><ul>{advice or "<li>nothing to change</li>"}</ul>
<h2>Plots</h2>{figures}
</body></html>
"""
    paths["html"] = out_dir / "efficiency.html"
    paths["html"].write_text(page)
    return paths
