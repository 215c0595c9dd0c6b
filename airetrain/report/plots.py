"""The report's three plots (efficiency per run, throughput against GPUs, loss curves), as PNG bytes."""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402
import pandas as pd  # noqa: E402

from ..rundir import metrics_log  # noqa: E402

EFFICIENCIES = {"cpu_eff": "CPU", "mem_eff": "memory", "time_eff": "time", "gpu_util": "GPU"}


def efficiency_plot(df: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(df) + 2), 3.5))
    present = [c for c in EFFICIENCIES if c in df and df[c].notna().any()]
    width = 0.8 / max(len(present), 1)
    for i, col in enumerate(present):
        values = 100 * pd.to_numeric(df[col], errors="coerce").fillna(0)
        ax.bar([x + i * width for x in range(len(df))], values, width, label=EFFICIENCIES[col])
    ax.set_xticks([x + width * (len(present) - 1) / 2 for x in range(len(df))], df["run"], rotation=30, ha="right")
    ax.axhline(50, color="grey", linestyle=":", linewidth=1)
    ax.yaxis.set_major_formatter(PercentFormatter())
    ax.set_ylabel("used of requested")
    ax.set_title("Efficiency per run")
    if present:   # no run with a figure yet: no bars, and no legend of none
        ax.legend(fontsize=8)
    return fig


def _on_gpus(df: pd.DataFrame) -> pd.Series:
    """Which rows trained on GPUs: the trainer's device, else the GPUs SLURM allocated."""
    device = df["device"] if "device" in df else pd.Series(None, index=df.index, dtype=object)
    gpus = pd.to_numeric(df["gpus"], errors="coerce") if "gpus" in df else pd.Series(0, index=df.index)
    return device.eq("cuda") | (device.isna() & gpus.fillna(0).gt(0))


def throughput_plot(df: pd.DataFrame):
    """Samples/s against GPUs for GPU runs, and against processes for CPU runs, in panels of their own:
    a CPU process is not a GPU."""
    rows = df.dropna(subset=["world_size", "samples_per_s"]) if "world_size" in df else df.iloc[0:0]
    gpu = _on_gpus(rows)
    panels = [(part, label) for part, label in ((rows[gpu], "GPUs"), (rows[~gpu], "CPU processes")) if len(part)]
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5 * max(len(panels), 1), 3.5), squeeze=False)
    for ax, (part, label) in zip(axes[0], panels or [(rows, "GPUs")]):
        ax.scatter(part["world_size"], part["samples_per_s"], marker="o" if label == "GPUs" else "s")
        for _, r in part.iterrows():
            ax.annotate(r["run"], (r["world_size"], r["samples_per_s"]), fontsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel("samples/s")
        ax.set_title(f"Throughput against {label}")
        ax.xaxis.get_major_locator().set_params(integer=True)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no training runs here", ha="center", va="center", transform=axes[0][0].transAxes)
    return fig


def loss_plot(df: pd.DataFrame, results: Path | None):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for run in df["run"]:
        path = results / str(run) / "metrics.jsonl" if results else None
        if path and path.exists():
            lines = metrics_log.read(path)
            points = [p for p in lines if "step" in p and "loss" in p]   # a script's own lines may lack them
            train, = ax.plot([p["step"] for p in points], [p["loss"] for p in points], label=f"{run} (train)")
            evals = sorted({p["step"]: p["eval_loss"] for p in lines if "step" in p and "eval_loss" in p}.items())
            if evals:   # the evaluation curve, in the training curve's colour (a resume's repeats once)
                ax.plot(*zip(*evals), linestyle="--", marker="o", markersize=3, color=train.get_color(),
                        label=f"{run} (eval)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Loss curves")
    if ax.lines:
        ax.legend(fontsize=8)
    return fig


def png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def figures(df: pd.DataFrame, results: str | Path | None) -> dict[str, bytes]:
    """{name: PNG} of the three plots; results/<run>/metrics.jsonl gives the loss curves."""
    results = Path(results) if results else None
    return {"efficiency": png(efficiency_plot(df)), "throughput": png(throughput_plot(df)),
            "loss": png(loss_plot(df, results))}
