"""The results table rendered: results.csv (a row per group), results-runs.csv (a row per run),
results.md, the sortable results.html, and each metric's curves (mean ± sd over a group's seeds)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..text import markdown_table
from .results import curves, group_rows, metric_columns, run_rows


def _figure(row: dict, column: str) -> str:
    mean = row.get(column)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    sd, ci = row.get(f"{column}_sd"), row.get(f"{column}_ci95")
    if sd is None or (isinstance(sd, float) and math.isnan(sd)):
        return f"{mean:.4g} (n = 1)" if row["n_finished"] == 1 else f"{mean:.4g}"
    return f"{mean:.4g} ± {sd:.2g} (95 % CI {mean - ci:.4g} to {mean + ci:.4g})"


def _energy(group: dict) -> str:
    """A group's energy as mean ± sd (the interval is in results.csv), and its mean CO2e: one compact cell."""
    mean, sd, co2e = group.get("energy_kwh"), group.get("energy_kwh_sd"), group.get("co2e_kg")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    spread = "" if sd is None or (isinstance(sd, float) and math.isnan(sd)) else f" ± {sd:.2g}"
    return f"{mean:.3g}{spread} ({co2e:.2g})" if co2e is not None else f"{mean:.3g}{spread}"


def results_markdown(groups: list[dict], runs: list[dict]) -> str:
    metrics = metric_columns(runs)
    shown = [*metrics, "best", "best_epoch", "time_to_best_s", "samples_per_s"]
    marked = any(g.get("evaluates") for g in groups)   # evaluation runs: the column says of which run
    hours = any(g["gpu_hours"] is not None for g in groups)
    energy = any(g.get("energy_kwh") is not None for g in groups)
    header = ["group", *(["evaluates"] if marked else []), "runs (finished/planned)", *shown,
              *(["GPU-hours"] if hours else []), *(["kWh (kg CO2e)"] if energy else []), "differs"]
    lines = markdown_table(header, [[g["group"], *([g.get("evaluates", "")] if marked else []),
                                f"{g['n_finished']}/{g['n_planned']}", *(_figure(g, c) for c in shown),
                                *(["" if g["gpu_hours"] is None else f"{g['gpu_hours']:.2f}"] if hours else []),
                                *([_energy(g)] if energy else []), g["differs"]]
                               for g in groups])
    tracked = any(r.get("tracker") for r in runs)   # the tracker runs (tracking:), where the config names one
    lines += ["", "Runs:", ""] + markdown_table(
        ["run", "group", "finished", *metrics, "best", "best_epoch", *(["tracker"] if tracked else [])],
        [[r["run"], r["group"], "yes" if r["finished"] else "no",
          *("" if r.get(c) is None else f"{r[c]:.4g}" for c in [*metrics, "best"]),
          "" if r.get("best_epoch") is None else str(r["best_epoch"]),
          *([r.get("tracker") or ""] if tracked else [])] for r in runs])
    lines += ["", "Each figure: the mean over a group's finished runs ± their sample standard deviation (n − 1), "
              "with the 95 % confidence interval of the mean (Student's t); n = 1: one run, no spread. best: the "
              "monitored metric's best value (checkpoint.monitor), best_epoch counted from 1; time_to_best_s: "
              "training seconds until it; kWh (kg CO2e): each run's energy, mean ± sd, and its emissions (the "
              "efficiency table's energy_kwh and co2e_kg); differs: the config keys in which the groups differ."]
    return "\n".join(lines) + "\n"


def curves_plot(curve: pd.DataFrame, metric: str) -> bytes:
    """Each group's mean curve with a band of ± one standard deviation, the groups side by side."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for group, part in curve.groupby("group"):
        line, = ax.plot(part["step"], part["mean"], marker=".", label=group)
        sd = part["sd"].fillna(0)
        ax.fill_between(part["step"], part["mean"] - sd, part["mean"] + sd, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over seeds ± 1 sd")
    ax.legend(fontsize=7)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def write_results(results: Path, runs: list[str], out_dir: Path,
                  efficiency: pd.DataFrame | None = None) -> dict[str, Path]:
    """results.csv (a row per group), results-runs.csv (a row per run), results.md, results.html, and
    results-<metric>.png (each group's evaluation curve, mean ± sd over its seeds)."""
    rows = run_rows(Path(results), runs, efficiency)
    groups = group_rows(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"results_csv": out_dir / "results.csv", "results_runs_csv": out_dir / "results-runs.csv",
             "results_md": out_dir / "results.md", "results_html": out_dir / "results.html"}
    pd.DataFrame(groups).to_csv(paths["results_csv"], index=False)
    pd.DataFrame([{k: v for k, v in r.items() if k != "config"} for r in rows]).to_csv(paths["results_runs_csv"],
                                                                                      index=False)
    images = {}
    for metric in metric_columns(rows):
        curve = curves(results, rows, metric)
        if len(curve):
            images[metric] = curves_plot(curve, metric)
            paths[f"results_{metric}_png"] = out_dir / f"results-{metric}.png"
            paths[f"results_{metric}_png"].write_bytes(images[metric])
    text = results_markdown(groups, rows)
    paths["results_md"].write_text(text)
    paths["results_html"].write_text(_html(text, images))
    return paths


# clicking a column's header sorts the table by it (numbers by their value, the rest as text)
SORTABLE = """<script>document.querySelectorAll("table").forEach(t => t.querySelectorAll("th").forEach((th, i) =>
  th.addEventListener("click", () => {
    const body = t.tBodies[0], rows = [...body.rows], up = th.dataset.up !== "1";
    const key = r => { const s = r.cells[i].textContent, n = parseFloat(s); return isNaN(n) ? s : n; };
    rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1));
    th.dataset.up = up ? "1" : "0"; rows.forEach(r => body.appendChild(r));
  })));</script>"""


def _rows_html(rows: list[list[str]], first_table: bool) -> str:
    """The group table's groups link to their runs below; the runs link to their rows of the efficiency page."""
    out, seen = [], set()
    for cells in rows:
        name = cells[0]
        if first_table:
            cells = [f'<a href="#group-{name}">{name}</a>', *cells[1:]]
            anchor = ""
        else:
            group = cells[1]
            anchor = f' id="group-{group}"' if group not in seen else ""
            seen.add(group)
            cells = [f'<a href="efficiency.html#run-{name}">{name}</a>', *cells[1:]]
        out.append(f"<tr{anchor}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "".join(out)


def _html(text: str, images: dict[str, bytes]) -> str:
    """The page: the markdown's tables as HTML tables (sortable, linked), its paragraphs as paragraphs."""
    import base64
    import html

    body, table, tables = [], [], 0
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append([html.escape(c.strip()) for c in line.strip("|").split("|")])
            continue
        if table:
            head, rest = table[0], table[2:]
            body.append(f"<table{' class=key' if not tables else ''}><thead><tr>"
                        + "".join(f"<th>{c}</th>" for c in head)
                        + f"</tr></thead><tbody>{_rows_html(rest, not tables)}</tbody></table>")
            table, tables = [], tables + 1
        if line:
            body.append(f"<p>{html.escape(line)}</p>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>airetrain results</title><style>"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}th{cursor:pointer}"
            "</style></head><body><h1>Results</h1>" + "".join(body)
            + "".join(f'<figure><img alt="{html.escape(m)}" src="data:image/png;base64,{base64.b64encode(d).decode()}">'
                      "</figure>" for m, d in images.items()) + SORTABLE + "</body></html>\n")
