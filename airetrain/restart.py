"""`airetrain restart RUN ...`: train a run again from step 0.

A finished run's newest checkpoint is its end: run again, it resumes there and trains nothing. To
retrain it, its checkpoints go (on scratch and on the fast root this shell sees; a job's own fast
root is purged when the job ends), with its captured code, the copy of its finished record on
scratch and its results directory. Its history (history.jsonl, sessions, stops) stays: it is what
right-sizing learns from. Its tracker run (W&B, MLflow) is kept and marked superseded: the retraining
starts a new one, and tags the old one so. Nothing outside the run's own directories is touched.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .records import Plan
from .roots import fast_run_dir, is_under
from .text import did_you_mean
from .tracking.identity import supersede

TRAINED = "train.json"   # the finished run's record, kept on scratch beside its checkpoints


def trained_record_path(plan: Plan) -> Path:
    """Where the promote of a finished training keeps a copy of its train.json: the durable run directory."""
    return plan.durable_dir / TRAINED


def removals(plan: Plan, results: Path) -> list[Path]:
    """What restarting the run removes, of what exists."""
    fast = fast_run_dir(plan.roots.tmp_shared, plan.run)
    candidates = [(plan.checkpoints_dir, plan.durable_dir), (trained_record_path(plan), plan.durable_dir),
                  (plan.durable_dir / "code", plan.durable_dir),   # its captured code: the next start takes the tree's
                  (fast / "checkpoints", fast), (results / plan.run, results)]
    return [path for path, root in candidates if path.exists() and is_under(path, root)]


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
    paths = [p for n in names for p in removals(plans[n], results)]
    if not paths or not confirm(paths):
        return []
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for name in names:
        supersede(plans[name].durable_dir)
    return paths
