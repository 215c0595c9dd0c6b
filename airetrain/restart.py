"""`airetrain restart RUN ...`: train a run again from step 0.

A finished run's newest checkpoint is its end: run again, it resumes there and trains nothing. To
retrain it, its checkpoints go (on scratch and on the fast root this shell sees; a job's own fast
root is purged when the job ends), with its captured code, the copy of its finished record on
scratch and its results directory. Its history (history.jsonl, sessions, stops) stays: it is what
right-sizing learns from; its metric history is kept aside, as superseded (metrics_log.py). Its tracker
run (W&B, MLflow) is kept and marked superseded: the retraining starts a new one, and tags the old one so.
Nothing outside the run's own directories is touched. A search (tune:) restarts whole: its study, its
table, and each trial as a run.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .rundir import metrics_log
from .records import Plan
from .rundir.run_log import trained_record_path
from .roots import fast_run_dir, is_under
from .text import did_you_mean
from .tracking.identity import supersede

def removals(plan: Plan, results: Path) -> list[Path]:
    """What restarting the run removes, of what exists."""
    fast = fast_run_dir(plan.roots.tmp_shared, plan.run)
    candidates = [(plan.checkpoints_dir, plan.durable_dir), (trained_record_path(plan), plan.durable_dir),
                  (plan.durable_dir / "code", plan.durable_dir),   # its captured code: the next start takes the tree's
                  (fast / "checkpoints", fast), (results / plan.run, results)]
    return [path for path, root in candidates if path.exists() and is_under(path, root)]


def search_removals(plans: dict[str, Plan], tune: str, results: Path) -> tuple[list[Path], list[Plan]]:
    """What restarting a search removes (its study and table, and each trial as a run: checkpoints, record, code,
    every rung's results folder), and the trials' plans (their tracker runs are superseded)."""
    from .search_space import ladder, parse_rung, rung_name, trial_name, tune_folder

    first = ladder(plans[tune].config)[0]
    trials = []
    for file in sorted((tune_folder(tune, results) / "trials").glob("t*.json")):
        trials.append(plans[rung_name(trial_name(tune, int(file.stem[1:])), first)])
    paths = [p for p in (tune_folder(tune, results), *(results / tune / f"tune.{x}" for x in ("csv", "md", "html")))
             if p.exists()]
    for trial in trials:
        paths += [p for p in removals(trial, results) if p != results / trial.run]
        paths += sorted(p for p in results.glob(f"{trial.run}-e*") if parse_rung(p.name, {tune}))
    return paths, trials


def asking(yes: bool):
    """The confirmation: the paths listed, then a person's yes (or --yes)."""
    def confirm(paths: list[Path]) -> bool:
        print("restarting removes:\n" + "\n".join(f"  {p}" for p in paths), flush=True)
        return yes or input("remove them? [y/N] ").strip().lower() in ("y", "yes")
    return confirm


def restart(plans: dict[str, Plan], names: list[str], results: Path, confirm) -> list[Path]:
    """Remove each named run's checkpoints, finished record and results, once confirm(paths) agrees."""
    from .errors import ConfigError

    unknown = [n for n in names if n not in plans]
    if unknown:
        named = ", ".join(f"{n!r}{did_you_mean(n, plans)}" for n in unknown)
        raise ConfigError(f"restart: unknown run {named}; runs: {', '.join(plans)}")
    paths, superseded = [], []
    for name in names:
        if plans[name].config.tune:   # a search: its study and every trial, so that it starts again from nothing
            found, trials = search_removals(plans, name, results)
            paths += found
            superseded += trials
        else:
            paths += removals(plans[name], results)
            superseded.append(plans[name])
    if not paths or not confirm(paths):
        return []
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for plan in superseded:   # a new tracker run and a new metric history; the old ones kept, as superseded
        supersede(plan.durable_dir)
        metrics_log.supersede(plan.durable_dir)
    return paths
