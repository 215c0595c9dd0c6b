"""A run's metric history: every session's metrics lines, kept where its checkpoints are.

Each session appends its lines to <scratch>/airetrain/<run>/metrics.jsonl (the durable history) and then
to results/<run>/metrics.jsonl, which `airetrain status`, the report, the results table, a search and the
trackers read. Snakemake deletes results/<run>/metrics.jsonl (a declared output of the train rule) before
it reruns a job after a kill or retries a failed one: the next session restores it from the history
before it appends (restore). A requeue of the same job, which keeps it, changes nothing.

A session begins with a line {"resumed_from_step": S}: the earlier sessions' lines after step S are
superseded, since the session trains those steps again. read() gives a reader the history as it stands,
each step's lines the newest session's; the raw file keeps every line ever written.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

NAME = "metrics.jsonl"
BEGIN = "resumed_from_step"   # the key of a session's first line


def durable_path(run_dir: str | Path) -> Path:
    """The durable history of the run whose durable directory is run_dir."""
    return Path(run_dir) / NAME


def parse(text: str) -> list[dict]:
    """Every whole line of a metrics file, a session's first lines included (a line cut by a kill is skipped)."""
    out = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            out.append(line)
    return out


def current(lines: list[dict]) -> list[dict]:
    """The lines that stand: each session's first line drops the earlier lines after the step it resumed from;
    a line it writes at a step it did not train (a finished run's evaluation again) joins the earlier line of
    that step, its figures the newer."""
    out: list[dict] = []
    resumed, first_new = None, 0
    for line in lines:
        step = line.get("step")
        if BEGIN in line and "step" not in line:
            resumed = line[BEGIN] or 0
            out = [kept for kept in out if not isinstance(kept.get("step"), int) or kept["step"] <= resumed]
            first_new = len(out)   # the session's own lines follow
            continue
        if resumed is not None and isinstance(step, int) and step <= resumed:
            earlier = next((i for i in range(first_new - 1, -1, -1) if out[i].get("step") == step), None)
            if earlier is not None:
                out[earlier] = {**out[earlier], **line}
                continue
        out.append(line)
    return out


def read(path: str | Path) -> list[dict]:
    """A metrics file as it stands ([] where there is none): what every reader of metrics.jsonl reads."""
    path = Path(path)
    return current(parse(path.read_text())) if path.exists() else []


def restore(durable: Path | None, results: Path) -> None:
    """Before a session appends: results/<run>/metrics.jsonl as the durable history holds it, where it holds
    more (Snakemake removed the file, or it is a copy from before a kill). Lines a script wrote to results/
    by itself, with no history beside them, are left as they are."""
    results.parent.mkdir(parents=True, exist_ok=True)
    if durable is not None and durable.exists() and \
            (not results.exists() or results.stat().st_size < durable.stat().st_size):
        tmp = results.with_name(f".{results.name}.restore")
        shutil.copyfile(durable, tmp)
        os.replace(tmp, results)
    results.touch()


def supersede(run_dir: str | Path) -> Path | None:
    """A restart: the history moves aside (metrics.superseded-<time>.jsonl), kept; the next training starts
    a new one. None where there was none."""
    path = durable_path(run_dir)
    if not path.exists():
        return None
    kept = path.with_name(f"metrics.superseded-{time.strftime('%Y%m%dT%H%M%S')}.jsonl")
    os.replace(path, kept)
    return kept


def _appending(path: Path):
    """path opened to append lines, after the end of a line a kill cut (so that the next line stands apart)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+b")
    if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
        f.write(b"\n")
    return f


class Writer:
    """One session's lines (rank 0), each written to the durable history first, then to results/."""

    def __init__(self, durable: Path | None, results: Path):
        self.files = [_appending(p) for p in (durable, results) if p is not None]

    def begin(self, resumed_from_step: int) -> None:
        self.write({BEGIN: resumed_from_step, "time": time.time()})

    def write(self, line: dict) -> None:
        text = (json.dumps(line) + "\n").encode()
        for f in self.files:
            f.write(text)
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
