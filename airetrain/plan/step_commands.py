"""The `airetrain` command each step runs: one table for the Snakemake rules and `airetrain sbatch`.

The rules pass their own input and output paths; the batch script passes the same paths under
results/<run>/. A flag changed here changes both, so the two cannot drift apart.
"""
from __future__ import annotations

import shlex

STEPS = {
    "resolve": ("resolve", "--plan-json", "{plan_json}", "--out", "{out}"),
    "prepare": ("prepare", "--dataset", "{name}", "{dataset}"),
    "health": ("health", "--plan", "{plan}", "--out", "{out}"),
    "stage": ("stage", "--plan", "{plan}", "--out", "{out}"),
    "launch": ("launch", "--plan", "{plan}", "--stage", "{stage}", "--out", "{out}", "--script", "{script}"),
    "promote": ("promote", "--plan", "{plan}", "--train", "{train}", "--out", "{out}", "--record", "{record}",
                "--project-dir", "{project_dir}"),
    "report": ("report", "--results", "{results}", "--out", "{out}"),
    "tune_step": ("tune-step", "--plan", "{plan}", "--settings-json", "{settings_json}", "--slot", "{slot}",
                  "--step", "{index}", "--out", "{out}"),
    "tune_wave": ("tune-wave", "--plan", "{plan}", "--settings-json", "{settings_json}", "--group", "{group}",
                  "--wave", "{index}", "--out", "{out}"),
    "tune_table": ("tune-table", "--plan", "{plan}", "--out", "{out}"),
}


def argv(step: str, *extra: str, **values) -> list[str]:
    """The arguments after `python -m airetrain` for step, with its paths filled in."""
    return [word.format(**values) for word in STEPS[step]] + list(extra)


def command(step: str, *extra: str, python: str = "python", **values) -> str:
    """The step's whole command line, each word quoted for the shell."""
    return shlex.join([python, "-m", "airetrain", *argv(step, *extra, **values)])


def run_paths(run: str, results: str = "results") -> dict[str, str]:
    """The files of a run's steps: what the rules declare, and what the batch script writes."""
    out = f"{results}/{run}"
    return {"out": out, "plan": f"{out}/plan.json", "health": f"{out}/health.json", "stage": f"{out}/stage.json",
            "train": f"{out}/train.json", "metrics": f"{out}/metrics.jsonl", "checkpoint": f"{out}/checkpoint.json",
            "record": f"{out}/run.json"}
