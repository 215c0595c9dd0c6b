"""`airetrain status`: where every run of a config is, one line each, from the login node.

Query: ONE `squeue` call for all your jobs (state, reason, start: for a pending job the expected
start `squeue --start` shows) and ONE `sacct` call for the jobs the runs recorded (their final state
and requeues). Fold per run, with the run's files: plan.json, stage.json, the last line of
metrics.jsonl, STOPPED, train.json, checkpoint.json, the logs, and <scratch>/airetrain/<run>/
sessions.jsonl (every job that trained it). Outside SLURM the files alone decide.

A job belongs to a run through the comment Snakemake's SLURM executor gives it (the run's rule group,
run_<run>, and its rules); the job name is the executor's run id, which changes with every snakemake.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from ..cluster import slurm
from ..fsutil import read_json
from ..text import clock
from ..rundir.capture import changed
from ..records import STOPPED, Plan, read_plan
from ..rundir.run_log import LOCK, hangs, left_out, sessions, starts, straggler_text
from .jobs import lookup
from .query import UNAVAILABLE, AccountingUnavailable, query

SQUEUE_FORMAT = "%i|%T|%r|%S|%k"
FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED")
EXCEPTION = re.compile(r"(?:^|\]:\s*)((?:[A-Za-z_][\w.]*)?(?:Error|Exception)\b: .+)")
ERROR_LINE = re.compile(r"Error|Exception|error:|Traceback|Killed|exited with|refused")
RULES = ("plan", "health", "stage", "train", "promote")   # the rules of a run's group


ACCOUNTING_WAIT_S = 15   # sacct's answer, at most: a stalled slurmdbd would keep it waiting 45 s and more


def squeue_jobs(runs: list[str]) -> dict[str, dict] | None:
    """{run: its newest queued or running job} from one squeue call; None without SLURM."""
    out = slurm.query(["squeue", "--me", "-h", "-o", SQUEUE_FORMAT])
    return None if out is None else parse_squeue(out, runs)


def parse_squeue(text: str, runs: list[str]) -> dict[str, dict]:
    """squeue's lines (SQUEUE_FORMAT) matched to the runs; other jobs are left out. The executor's
    comment is rule_<group>_<its rules>, e.g. rule_run_demo_promote_stage_train for the group run_demo."""
    names = "|".join(re.escape(run) for run in sorted(runs, key=len, reverse=True))
    comment = re.compile(rf"rule_run_(?P<run>{names})(?:_(?:{'|'.join(RULES)}))*(?:_wildcards_.*)?")
    jobs: dict[str, dict] = {}
    for line in text.splitlines():
        parts = line.split("|", 4)
        if not runs or len(parts) != 5 or not (m := comment.fullmatch(parts[4].strip())):
            continue
        job = {"job_id": parts[0], "state": parts[1], "reason": parts[2], "start": parts[3]}
        previous = jobs.get(m.group("run"))
        if previous is None or int(job["job_id"].split("_")[0]) > int(previous["job_id"].split("_")[0]):
            jobs[m.group("run")] = job
    return jobs


def _last_line(path: Path, key: str = "loss") -> dict | None:
    """The last complete line of a JSON-lines file that has key (a line being written is skipped, and
    so is an evaluation's line of metrics.jsonl, which has no training loss)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and key in parsed:
            return parsed
    return None


def last_error(logs: Path) -> tuple[str, str] | None:
    """(the error, its log) from the run's newest log that has one: the last Python exception line
    (`RuntimeError: ...`, without torchrun's `[rank0]:` prefix and its ChildFailedError wrapper), else
    the last line that reads as an error."""
    candidates = sorted((p for p in logs.glob("*.log") if p.is_file()), key=lambda p: p.stat().st_mtime)
    for path in reversed(candidates):
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        raised = [(line, m.group(1)) for line in lines if (m := EXCEPTION.search(line))
                  and not m.group(1).split(":")[0].endswith("ChildFailedError")]
        # rank 0's own error, where it has one: the others' are often only "connection closed by peer"
        first_rank = [error for line, error in raised if line.startswith("[rank0]:")]
        errors = first_rank or [error for _, error in raised] or [line for line in lines if ERROR_LINE.search(line)]
        if errors:
            return errors[-1][:300], str(path)
    return None


def _sessions(plan: Plan | None) -> list[dict]:
    if not plan:
        return []
    try:
        return sessions(plan.durable_dir)
    except ValueError:   # a line being written this instant
        return []


def run_status(name: str, results: Path, logs: Path, queued: dict | None, accounting: dict) -> dict:
    """One run's row: state and what to know about it."""
    out = results / name
    plan = read_plan(out)
    row = {"run": name, "state": "planned", "job_id": None, "detail": ""}
    job_ids = [s["slurm_job_id"] for s in _sessions(plan) if s.get("slurm_job_id")]
    if job_ids:
        row["job_id"] = job_ids[-1]
        job = lookup(accounting, str(job_ids[-1]))
        if job is not None and job.runs > 1:
            row["requeues"], row["requeued_after"] = job.runs - 1, job.requeued_after
    train = read_json(out / "train.json") if (out / "train.json").exists() else None
    progress = _last_line(out / "metrics.jsonl")
    if (out / "checkpoint.json").exists() and train:
        metrics = {"eval_loss": train.get("eval_loss"), "eval_accuracy": train.get("eval_accuracy"),
                   **{f"eval_{k}": v for k, v in (train.get("eval_metrics") or {}).items()}}
        row.update(state="done", eval={k: v for k, v in metrics.items() if v is not None},
                   job_id=train.get("slurm_job_id") or row["job_id"])
        row["detail"] = " ".join(f"{k} {v:.4g}" for k, v in row["eval"].items())
        return _left_out(row, plan)
    if queued and queued.get("state") in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD"):
        row.update(state="pending", job_id=queued["job_id"], reason=queued["reason"], start=queued["start"])
        start = f", expected start {queued['start']}" if queued["start"] not in ("N/A", "") else ""
        row["detail"] = f"({queued['reason']}){start}"
    elif queued and queued.get("state") in ("RUNNING", "COMPLETING"):
        _running(row, queued, plan, out, progress)
    elif (out / STOPPED).exists():
        stop = read_json(out / STOPPED)
        row.update(state="stopped", step=stop["step"], of_steps=stop["of_steps"])
        row["detail"] = f"at step {stop['step']}/{stop['of_steps']} ({stop['reason']}): waiting to resume"
    else:
        job = lookup(accounting, str(row["job_id"])) if row["job_id"] else None
        error = last_error(logs / name)
        if (job is not None and job.state in FAILED) or (queued is None and error and not train):
            row["state"] = "failed"
            if job is not None:
                row["job_state"] = job.state
            if error:
                row.update(error=error[0], log=error[1])
                row["detail"] = f"{error[0]} ({error[1]})"
        elif progress and "step" in progress and queued is None and not train:
            _training(row, progress)   # a local run: the files alone say it
        elif train:
            row.update(state="trained", detail="not promoted yet")
    if row.get("requeues"):
        row["detail"] = (row["detail"] + f" [requeued {row['requeues']}x{row['requeued_after']}]").strip()
    if plan and row["state"] != "done" and (edited := changed(plan)):   # it keeps its capture until it finishes
        row["code_changed"] = edited
        row["detail"] = (row["detail"] + " [code changed since this run started]").strip()
    _left_out(row, plan)
    _started_over(row, plan)
    hung = len(hangs(plan.durable_dir)) if plan else 0
    if hung:
        row["hangs"] = hung
        row["detail"] = (row["detail"] + f" [{hung} hang{'s' if hung > 1 else ''}: see hangs/]").strip()
    return row


def _started_over(row: dict, plan: Plan | None) -> None:
    """A script whose newest session started from step 0 beside durable checkpoints (it never asked
    job.load_latest): named, since it trains again what the run had trained."""
    try:
        newest = starts(plan.durable_dir)[-1:] if plan and plan.script else []
    except ValueError:   # a line being written this instant
        return
    if newest and newest[0].get("started_over"):
        row["started_over"] = newest[0]["newest"]
        row["detail"] = (row["detail"] + f" [started over at step 0 beside {Path(newest[0]['newest']).name}: the "
                         "script never called job.load_latest()]").strip()


def _left_out(row: dict, plan: Plan | None) -> dict:
    """The nodes the run's jobs left out, and why (the node check, a straggler), added to its row."""
    if plan and (gone := left_out(plan.durable_dir)):
        row["left_out"] = gone
        row["detail"] = (row["detail"] + "".join(f" [left out {node}: {why}]" for node, why in gone.items())).strip()
    return row


def _running(row: dict, queued: dict, plan: Plan | None, out: Path, progress: dict | None) -> None:
    """A run whose job runs: waiting for the run's lock, training, starting, or staging."""
    row["job_id"] = queued["job_id"]
    started = _epoch(queued["start"])
    since = (started or 0) - 5   # this job's own files, not an earlier job's
    holder = _lock_holder(plan)
    if holder and holder != str(queued["job_id"]):   # the run's lock: another job trains it
        row.update(state="waiting", detail=f"for SLURM job {holder}, which trains this run (its lock)")
    elif progress and "step" in progress and progress.get("time", 0) >= since:
        _training(row, progress)
    elif (out / "stage.json").exists() and (out / "stage.json").stat().st_mtime >= since:
        row.update(state="training", detail="starting: staged, torchrun is starting")
    else:
        row.update(state="staging", detail=f"since {queued['start']}")


def _lock_holder(plan: Plan | None) -> str | None:
    """The SLURM job that holds the run's trainer lock, if a job does."""
    if not plan:
        return None
    try:
        return json.loads((plan.durable_dir / LOCK).read_text()).get("slurm_job_id")
    except (OSError, ValueError):
        return None


def _training(row: dict, progress: dict) -> None:
    eta = progress.get("eta_s")
    row.update(state="training", step=progress["step"], of_steps=progress.get("of_steps"),
               epoch=progress.get("epoch"), loss=progress.get("loss"), samples_per_s=progress.get("samples_per_s"),
               eta_s=eta)
    of = f"/{progress['of_steps']}" if progress.get("of_steps") else ""
    row["detail"] = (f"step {progress['step']}{of} epoch {progress.get('epoch')} loss {progress.get('loss', 0):.4f} "
                     f"{progress.get('samples_per_s', 0):.0f} samples/s"
                     + (f" ETA {clock(eta)}" if eta is not None else ""))
    if progress.get("stragglers"):   # ranks slower than the median at the last log line
        row["stragglers"] = progress["stragglers"]
        row["detail"] += "".join(f" [{straggler_text(s)}]" for s in progress["stragglers"])


def _epoch(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def status(runs: list[str], results: str | Path = "results", logs: str | Path = "logs") -> list[dict]:
    """Every run's row, from one squeue and one sacct call."""
    results, logs = Path(results), Path(logs)
    queued = squeue_jobs(runs)
    job_ids = []
    for name in runs:
        started = _sessions(read_plan(results / name))
        job_ids += [str(s["slurm_job_id"]) for s in started[-1:] if s.get("slurm_job_id")]
    unavailable = None
    try:
        accounting = (query(job_ids, timeout=ACCOUNTING_WAIT_S) or {}) if queued is not None and job_ids else {}
    except AccountingUnavailable as e:   # squeue still knows the queued and running jobs
        accounting, unavailable = {}, str(e)
    rows = [run_status(name, results, logs, (queued or {}).get(name), accounting) for name in runs]
    if unavailable:
        for row in rows:
            row["accounting"] = f"{UNAVAILABLE}: {unavailable}"
    return rows


def format_status(rows: list[dict]) -> str:
    width = max([len(r["run"]) for r in rows] + [3])
    lines = [f"{'run':<{width}}  {'state':<9} {'job':<9} detail"]
    if rows and rows[0].get("accounting"):
        lines.insert(0, f"SLURM {rows[0]['accounting']}: states are squeue's (queued and running jobs); a job that "
                        "has ended shows no final state until accounting answers again")
    for r in rows:
        lines.append(f"{r['run']:<{width}}  {r['state']:<9} {r['job_id'] or '-':<9} {r['detail']}".rstrip())
    return "\n".join(lines)
