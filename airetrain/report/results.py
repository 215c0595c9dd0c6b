"""The results table: what an experiment found, one row per group of runs (the runs whose configs
are equal but for train.seed), each metric as mean ± standard deviation with a 95 % confidence
interval over the group's finished runs; and one row per run.

Read from each run's plan.json (its group and config), train.json (the final and best
evaluation, throughput) and metrics.jsonl (when the best came), beside the efficiency table's
rows (GPU-hours, requeues included). A run still training, or failed, counts as planned and is
never averaged.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..fsutil import read_json
from ..text import did_you_mean, markdown_table
from .collection import evaluates_label

PER_GROUP = ("n_finished", "n_planned")


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def compare(results: Path, names: list[str]) -> dict:
    """`airetrain compare`: the config keys that differ between the named runs or groups (a group:
    its first run's config), and their figures side by side (a group's: its means)."""
    from ..errors import ConfigError

    known = sorted(p.name for p in Path(results).iterdir() if (p / "plan.json").exists()) \
        if Path(results).is_dir() else []
    rows = run_rows(Path(results), known)
    by_run = {r["run"]: r for r in rows}
    by_group = {g["group"]: g for g in group_rows(rows)}
    unknown = [n for n in names if n not in by_run and n not in by_group]
    if unknown:
        named = ", ".join(f"{n!r}{did_you_mean(n, [*known, *by_group])}" for n in unknown)
        raise ConfigError(f"compare: unknown run or group {named}; runs: "
                          f"{', '.join(known) or 'none in ' + str(results)}; groups: {', '.join(sorted(by_group))}")
    configs = {n: by_run[n]["config"] if n in by_run else next(r["config"] for r in rows if r["group"] == n)
               for n in names}
    flat = {n: {k: v for k, v in _flat(c).items()} for n, c in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differ = {k: {n: flat[n].get(k) for n in names} for k in keys
              if len({json.dumps(flat[n].get(k), sort_keys=True) for n in names}) > 1}
    columns = [*metric_columns(rows), "best", "best_epoch", "samples_per_s", "gpu_hours"]
    figures = {n: {c: (by_run.get(n) or by_group[n]).get(c) for c in columns} for n in names}
    return {"differs": differ, "figures": figures}


def format_compare(found: dict) -> str:
    """compare's answer as two aligned tables: the differing keys, then the figures."""
    names = list(found["figures"])
    columns = list(found["figures"][names[0]])
    width = max(len(k) for k in [*found["differs"], *columns]) + 2

    def cell(value) -> str:
        text = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
        return f"{text:>22}"

    head = f"{'':{width}}" + "".join(f"{n:>22}" for n in names)
    out = ["config keys that differ:" if found["differs"] else "no config key differs", head]
    out += [f"{k:{width}}" + "".join(cell(v) for v in values.values()) for k, values in found["differs"].items()]
    out += ["", "figures:", head]
    out += [f"{c:{width}}" + "".join(cell(found["figures"][n][c]) for n in names) for c in columns]
    return "\n".join(out)


def differing_keys(configs: dict[str, dict]) -> dict[str, str]:
    """{group: "key=value, ..."}: the resolved config keys (train.seed aside) in which the groups
    differ from each other."""
    flat = {group: {k: v for k, v in _flat(config).items() if k != "train.seed"} for group, config in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differ = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat.values()}) > 1]
    return {group: ", ".join(f"{k}={f.get(k)}" for k in differ) for group, f in flat.items()}


def _time_to_best(run_dir: Path, best_step: int | None) -> float | None:
    """Seconds of training until the best evaluation's step: the log line at or just before it."""
    path = run_dir / "metrics.jsonl"
    if best_step is None or not path.exists():
        return None
    seconds = None
    for line in path.read_text().splitlines():
        m = json.loads(line)
        if "elapsed_s" in m and m.get("step", 0) <= best_step:
            seconds = m["elapsed_s"]
    return seconds


def run_rows(results: Path, runs: list[str], efficiency: pd.DataFrame | None = None) -> list[dict]:
    """One row per run: its group, whether it finished, its final and best figures."""
    gpu_hours = {} if efficiency is None or "gpu_hours" not in efficiency else \
        dict(zip(efficiency["run"], efficiency["gpu_hours"]))
    rows = []
    for run in runs:
        run_dir = results / run
        plan = read_json(run_dir / "plan.json") if (run_dir / "plan.json").exists() else {}
        train = read_json(run_dir / "train.json") if (run_dir / "train.json").exists() else None
        row = {"run": run, "group": plan.get("group") or run, "finished": train is not None,
               "config": plan.get("config", {}), "evaluates": evaluates_label(plan.get("config", {}).get("evaluate"))}
        if train:
            row["eval_loss"] = train.get("eval_loss")
            for name, value in (train.get("eval_metrics") or {}).items():
                row[f"eval_{name}"] = value
            best = train.get("best") or {}
            row.update(best_metric=best.get("metric"), best=best.get("value"),
                       best_epoch=best["epoch"] + 1 if best else None,
                       time_to_best_s=_time_to_best(run_dir, best.get("step")),
                       samples_per_s=train.get("steady_samples_per_s") or train.get("samples_per_s"),
                       stopped_early=(train.get("stopped_early") or {}).get("step"))
        hours = gpu_hours.get(run)
        row["gpu_hours"] = None if hours is None or (isinstance(hours, float) and math.isnan(hours)) else hours
        rows.append(row)
    return rows


def mean_sd_ci(values: list[float]) -> dict:
    """mean, sample standard deviation (n - 1), and the 95 % confidence interval's half-width from
    Student's t; with one value, the mean alone."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n if n else None
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "ci95": None}
    sd = pd.Series(values).std(ddof=1)
    return {"n": n, "mean": mean, "sd": float(sd), "ci95": float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n))}


def metric_columns(rows: list[dict]) -> list[str]:
    names = sorted({k for r in rows for k in r if k.startswith("eval_") and r.get(k) is not None})
    return (["eval_loss"] if "eval_loss" in names else []) + [n for n in names if n != "eval_loss"]


def group_rows(rows: list[dict]) -> list[dict]:
    """One row per group: finished and planned runs; each metric's mean, sd and 95 % CI over the finished
    runs; the best (value, epoch, time to it), steady samples/s, and the group's GPU-hours."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    differs = differing_keys({g: members[0]["config"] for g, members in groups.items()})
    out = []
    for group, members in groups.items():
        done = [m for m in members if m["finished"]]
        row = {"group": group, "n_finished": len(done), "n_planned": len(members),
               "runs": ", ".join(m["run"] for m in members), "differs": differs[group],
               "evaluates": members[0].get("evaluates", "")}
        for column in [*metric_columns(rows), "best", "best_epoch", "time_to_best_s", "samples_per_s"]:
            values = [m[column] for m in done if m.get(column) is not None]
            if values:
                figures = mean_sd_ci(values)
                row.update({column: figures["mean"], f"{column}_sd": figures["sd"], f"{column}_ci95": figures["ci95"]})
        if any(m.get("best_metric") for m in done):
            row["best_metric"] = next(m["best_metric"] for m in done if m.get("best_metric"))
        hours = [m["gpu_hours"] for m in members if m.get("gpu_hours") is not None]
        row["gpu_hours"] = sum(hours) if hours else None
        out.append(row)
    return out


def _figure(row: dict, column: str) -> str:
    mean = row.get(column)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    sd, ci = row.get(f"{column}_sd"), row.get(f"{column}_ci95")
    if sd is None or (isinstance(sd, float) and math.isnan(sd)):
        return f"{mean:.4g} (n = 1)" if row["n_finished"] == 1 else f"{mean:.4g}"
    return f"{mean:.4g} ± {sd:.2g} (95 % CI {mean - ci:.4g} to {mean + ci:.4g})"


def markdown(groups: list[dict], runs: list[dict]) -> str:
    metrics = metric_columns(runs)
    shown = [*metrics, "best", "best_epoch", "time_to_best_s", "samples_per_s"]
    marked = any(g.get("evaluates") for g in groups)   # evaluation runs: the column says of which run
    header = ["group", *(["evaluates"] if marked else []), "runs (finished/planned)", *shown, "GPU-hours", "differs"]
    lines = markdown_table(header, [[g["group"], *([g.get("evaluates", "")] if marked else []),
                                f"{g['n_finished']}/{g['n_planned']}", *(_figure(g, c) for c in shown),
                                "" if g["gpu_hours"] is None else f"{g['gpu_hours']:.2f}", g["differs"]]
                               for g in groups])
    lines += ["", "Runs:", ""] + markdown_table(
        ["run", "group", "finished", *metrics, "best", "best_epoch"],
        [[r["run"], r["group"], "yes" if r["finished"] else "no",
          *("" if r.get(c) is None else f"{r[c]:.4g}" for c in [*metrics, "best"]),
          "" if r.get("best_epoch") is None else str(r["best_epoch"])] for r in runs])
    lines += ["", "Each figure: the mean over a group's finished runs ± their sample standard deviation (n − 1), "
              "with the 95 % confidence interval of the mean (Student's t); n = 1: one run, no spread. best: the "
              "monitored metric's best value (checkpoint.monitor), best_epoch counted from 1; time_to_best_s: "
              "training seconds until it; differs: the config keys in which the groups differ."]
    return "\n".join(lines) + "\n"


def curves(results: Path, rows: list[dict], metric: str) -> pd.DataFrame:
    """The metric's evaluation curve of each group: mean and sd over its finished runs, per step."""
    points = []
    for row in rows:
        path = Path(results) / row["run"] / "metrics.jsonl"
        if row["finished"] and path.exists():
            points += [{"group": row["group"], "run": row["run"], "step": m["step"], "value": m[metric]}
                       for m in map(json.loads, path.read_text().splitlines()) if m.get(metric) is not None]
    if not points:
        return pd.DataFrame(columns=["group", "step", "mean", "sd"])
    frame = pd.DataFrame(points).drop_duplicates(["run", "step"], keep="last")
    return frame.groupby(["group", "step"])["value"].agg(mean="mean", sd="std").reset_index()


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


def write(results: Path, runs: list[str], out_dir: Path, efficiency: pd.DataFrame | None = None) -> dict[str, Path]:
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
    text = markdown(groups, rows)
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
