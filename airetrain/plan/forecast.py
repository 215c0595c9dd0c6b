"""Forecast: when each layout of a run would start, how long it would take, and when it would finish.

- Start: SLURM's own answer. `sbatch --test-only` with the layout's exact request asks the
  scheduler when it would start the job; nothing is queued. The answer moves as other jobs
  come and go: it is the scheduler's estimate now, from the time limits of the jobs ahead.
- Duration: from the history of this profile (report.history). At a GPU count that was measured:
  its slowest seconds per step x the steps this run takes, plus the measured start-up, stage and
  promote. At another count: scaled from the nearest measured count, with the global batch held
  constant (so the step's samples are shared by more or fewer ranks), by the scaling efficiency
  measured between two counts, or linearly where only one was measured (optimistic; said so).
  Without any history of the profile: unknown, and the job's time limit bounds it.
- Finish: start + duration. Where the start cannot be had (no sbatch, or it refuses the request),
  that is said and the layouts are compared by duration alone.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Callable

from ..cluster import slurm
from ..errors import ConfigError
from ..rundir.history import profile, profile_id
from ..records import Plan
from ..sizing import largest, planned_steps
from ..text import aligned
from ..cluster.units import format_duration
from .request import sbatch_options

LAYOUT_KEYS = ("world_size", "nodes")   # what a profile may differ in and still predict another layout
STARTS_AT = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def family(prof: dict) -> str:
    """The id of a profile with its layout left out: runs that differ only in GPU count."""
    return profile_id({k: v for k, v in prof.items() if k not in LAYOUT_KEYS})


def predicted_start(plan: Plan, env=None, now: datetime | None = None) -> tuple[datetime | None, str]:
    """(when SLURM would start this request, how that was found), or (None, why it could not be had)."""
    now = now or datetime.now().astimezone()
    proc = slurm.test_only(sbatch_options(plan), env)
    if isinstance(proc, str):
        return None, f"{proc}: compared by duration alone"
    found = STARTS_AT.search(proc.stderr + proc.stdout)
    if proc.returncode != 0 or not found:
        said = "; ".join(line.removeprefix("sbatch: ") for line in (proc.stderr + proc.stdout).strip().splitlines()) \
            or f"exit {proc.returncode}"
        return None, f"sbatch --test-only refused the request ({said}): compared by duration alone"
    start = datetime.fromisoformat(found.group(1)).astimezone()   # the controller's local time, as here
    return max(start, now), "sbatch --test-only"


def _scaling(step_s: dict[int, float], world: int) -> tuple[float, str] | None:
    """The scaling efficiency between the two measured counts nearest to `world`: throughput per rank
    at the larger over that at the smaller (1.0: linear). None with one count measured."""
    if len(step_s) < 2:
        return None
    a, b = sorted(sorted(step_s, key=lambda w: abs(math.log(w / world)))[:2])
    return (step_s[a] * a) / (step_s[b] * b), f"the scaling efficiency measured from {a} to {b}"


def predicted_duration(plan: Plan, lines: list[dict]) -> tuple[float | None, str]:
    """(seconds the job would take, how that was found), or (None, why not) without history."""
    world, unit = plan.world_size, "GPUs" if plan.gpus else "ranks"
    prof = profile(plan)
    same = [line for line in lines if line["profile_id"] == profile_id(prof)
            and line["measured"].get("seconds_per_step")]
    if same:
        basis, step_s = same, largest(same, "seconds_per_step")
        jobs = ", ".join(f"job {line['job_id'] or 'local'}" for line in same[-3:])
        how = f"measured at {world} {unit} ({jobs})"
    else:
        kin = [line for line in lines if family(line["profile"]) == family(prof)
               and line["measured"].get("seconds_per_step")]
        if not kin:
            return None, "no finished run of this profile at any layout"
        by_world = {w: largest([line for line in kin if line["profile"]["world_size"] == w], "seconds_per_step")
                    for w in {line["profile"]["world_size"] for line in kin}}
        near = min(by_world, key=lambda w: abs(math.log(w / world)))
        basis = [line for line in kin if line["profile"]["world_size"] == near]
        scaled = f"scaled from {near} {unit}: {by_world[near]:.3g} s/step x {near}/{world}"
        scaling = _scaling(by_world, world)
        if scaling is None:
            eff, how = 1.0, f"{scaled}, assuming linear scaling (one layout measured: optimistic across nodes)"
        else:
            eff, said = scaling
            how = f"{scaled} {'/' if world > near else 'x'} {eff:.2f}, {said}"
        step_s = by_world[near] * near / world * (1 / eff if world > near else eff)
    steps = planned_steps(basis, plan)
    if steps is None:
        return None, "the history has no epochs to count steps from"
    rest = sum(largest(basis, key) or 0.0 for key in ("startup_s", "stage_s", "promote_s"))
    return step_s * steps + rest, f"{steps} steps x {step_s:.3g} s + {rest:.0f} s start-up, stage, promote; {how}"


def layouts(gpus: list[int], plan_for: Callable[[int], Plan], lines: list[dict], env=None,
            now: datetime | None = None) -> list[dict]:
    """One row per GPU count: its layout, predicted start, duration and finish (or why it is refused);
    the earliest finish marked."""
    now = now or datetime.now().astimezone()
    rows = []
    for count in gpus:
        try:
            plan = plan_for(count)
        except ConfigError as e:
            rows.append({"gpus": count, "refused": str(e).split("\n  - ", 1)[-1]})
            continue
        start, start_how = predicted_start(plan, env, now)
        duration, duration_how = predicted_duration(plan, lines)
        limit = plan.time_min.total * 60
        row = {"gpus": count, "nodes": plan.nodes, "world_size": plan.world_size,
               "grad_accum": plan.batch.grad_accum, "refused": None, "time_limit_s": limit,
               "start": start.isoformat(timespec="seconds") if start else None, "start_how": start_how,
               "wait_s": (start - now).total_seconds() if start else None,
               "duration_s": round(duration, 1) if duration is not None else None, "duration_how": duration_how}
        # without history the job's limit bounds it; without a start, the comparison is of durations
        took = duration if duration is not None else limit
        row["finish"] = (start + timedelta(seconds=took)).isoformat(timespec="seconds") if start else None
        row["finish_s"] = (row["wait_s"] or 0.0) + took if start else took
        rows.append(row)
    valid = [row for row in rows if not row["refused"]]
    if valid:
        best = min(valid, key=lambda row: (row["finish_s"], row["gpus"]))   # a tie: the fewer GPUs
        for row in valid:
            row["earliest"] = row is best
    return rows


def choice(rows: list[dict]) -> tuple[dict, str]:
    """The earliest-finishing layout and why, in words for plan.json."""
    valid = [row for row in rows if not row["refused"]]
    if not valid:
        raise ConfigError("forecast: no layout of forecast.gpus can run:\n  - "
                          + "\n  - ".join(f"{_gpus(row['gpus'])}: {row['refused']}" for row in rows))
    best = next(row for row in valid if row["earliest"])
    others = "; ".join(f"{_gpus(row['gpus'])} {_finish_words(row)}" for row in valid if row is not best)
    basis = "by duration alone" if best["start"] is None else "start from sbatch --test-only"
    return best, (f"earliest_finish: {_gpus(best['gpus'])} {_finish_words(best)} ({basis})"
                  + (f", against {others}" if others else ""))


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _finish_words(row: dict) -> str:
    took = format_duration(row["duration_s"] if row["duration_s"] is not None else row["time_limit_s"])
    bound = "" if row["duration_s"] is not None else " at most (no history)"
    if row["start"] is None:
        return f"take {took}{bound}"
    return f"start in {format_duration(row['wait_s'])} and take {took}{bound}: done {row['finish'][11:16]}"


def format_forecast(name: str, rows: list[dict], at: datetime | None = None) -> str:
    """The run's layouts as a table; the earliest finish marked with *."""
    at = at or datetime.now().astimezone()
    header = ["", "gpus", "nodes", "accum", "start", "wait", "duration", "finish", "how"]
    table = []
    for row in rows:
        if row["refused"]:
            table.append(["", str(row["gpus"]), "-", "-", "-", "-", "-", "-", f"refused: {row['refused']}"])
            continue
        duration = format_duration(row["duration_s"]) if row["duration_s"] is not None \
            else f"<={format_duration(row['time_limit_s'])}"
        table.append(["*" if row.get("earliest") else "", str(row["gpus"]), str(row["nodes"]),
                      str(row["grad_accum"]), row["start"][11:16] if row["start"] else "?",
                      format_duration(row["wait_s"]) if row["start"] else "?", duration,
                      row["finish"][11:16] if row["finish"] else "?",
                      row["duration_how"] if row["start"] else f"{row['start_how']}; {row['duration_how']}"])
    title = f"run {name}: forecast at {at.strftime('%Y-%m-%d %H:%M')} (* finishes first; nothing was queued)"
    return "\n".join([title, *aligned([header, *table])])
