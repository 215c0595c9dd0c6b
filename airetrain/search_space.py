"""A tune's search space and its trials' names: what the plan checks and what each trial's run is. No
Optuna here: the plan and every job read this module; what asks Optuna (its suggestions, its grid) is
the study's (tune/study.py).

    parameters(space)          the space's keys, in order, each with its distribution (or ConfigError)
    trial_config(run, ...)     the trial's run: the tuned run with its parameters and a rung's epochs
    rungs(epochs, halving)     the epochs at which successive halving decides: 1, 3, 9, ..., epochs
    ladder(run), slots(...)    a tuned run's rungs, and its trials at once

A trial is a run named <tune>-t<NNN> (Optuna's number). Each rung it trains is a Snakemake run of
its own, <tune>-t<NNN>-e<epochs>, with its own results folder: Snakemake makes each file once per
invocation, and a promoted trial trains again. Its checkpoints stay the trial's (the plan's run is
the trial), so the next rung resumes where the last one stopped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

KINDS = {"loguniform": "a float drawn on a log scale, [low, high]", "uniform": "a float, [low, high]",
         "int": "an integer, [low, high] (step: 1, log: false)", "choice": "one of a list of values"}
RUNG = re.compile(r"^(?P<tune>.+)-t(?P<number>\d{3,})-e(?P<epochs>\d+)$")
TRIAL = re.compile(r"^(?P<tune>.+)-t(?P<number>\d{3,})$")


@dataclass(frozen=True)
class Parameter:
    key: str                     # a dotted run key: optim.lr, model.options.depth
    kind: str                    # loguniform, uniform, int or choice
    low: float | None = None
    high: float | None = None
    step: int | None = None      # int only
    log: bool = False            # int only (loguniform is a float's)
    choices: tuple = ()


def parameters(space: dict, where: str) -> list[Parameter]:
    """The space's parameters in the order it lists them; ConfigError naming the key for a distribution
    that is not one of KINDS, or a range that is empty or reversed."""
    out = []
    for key, spec in space.items():
        at = f"{where}.space.{key}"
        if not isinstance(spec, dict) or len(set(spec) & set(KINDS)) != 1:
            kinds = "; ".join(f"{{{k}: ...}}: {v}" for k, v in KINDS.items())
            raise ConfigError(f"{at}: give one distribution: {kinds}")
        kind = next(k for k in spec if k in KINDS)
        extra = set(spec) - {kind} - ({"step", "log"} if kind == "int" else set())
        if extra:
            raise ConfigError(f"{at}: unknown key(s) {', '.join(sorted(extra))} beside {kind}"
                              + ("; allowed: step, log" if kind == "int" else ""))
        out.append(_parameter(key, kind, spec, at))
    return out


def _parameter(key: str, kind: str, spec: dict, at: str) -> Parameter:
    value = spec[kind]
    if kind == "choice":
        if not isinstance(value, list) or not value or len({repr(v) for v in value}) != len(value):
            raise ConfigError(f"{at}.choice must be a list of distinct values, e.g. [32, 64, 128]")
        return Parameter(key, kind, choices=tuple(value))
    if not (isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value)):
        raise ConfigError(f"{at}.{kind} must be [low, high], two numbers")
    low, high = value
    if kind == "int":
        step, log = spec.get("step", 1), spec.get("log", False)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step)) or step < 1:
            raise ConfigError(f"{at}: int takes integers [low, high] and a step of at least 1")
        if log and (step != 1 or low < 1):
            raise ConfigError(f"{at}: int with log: true needs low >= 1 and step 1 (Optuna's rule)")
        if low >= high:
            raise ConfigError(f"{at}.int = [{low}, {high}] is an empty or reversed range: low must be below high")
        return Parameter(key, kind, low=low, high=high, step=step, log=bool(log))
    if low >= high:
        raise ConfigError(f"{at}.{kind} = [{low}, {high}] is an empty or reversed range: low must be below high")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{at}.loguniform = [{low}, {high}]: a log scale needs low > 0")
    return Parameter(key, kind, low=float(low), high=float(high))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rungs(epochs: int, halving: dict | None) -> list[int]:
    """The epochs each rung trains to: min_epochs x reduction^k below train.epochs, then train.epochs (Optuna's
    SuccessiveHalvingPruner decides at min_resource x reduction_factor^k steps; the step is epochs)."""
    if halving is None:
        return [epochs]
    out, at = [], halving["min_epochs"]
    while at < epochs:
        out.append(at)
        at *= halving["reduction"]
    return [*out, epochs]


def ladder(run) -> list[int]:
    """A tuned run's rungs (run: its RunConfig)."""
    return rungs(run.train.epochs, run.tune.halving)


def tune_folder(tune: str, results: str | Path = "results") -> Path:
    """Where the study, its steps and its trials' files are: results/<tune>/tune/ (on the submitting side)."""
    return Path(results) / tune / "tune"


def trial_file(tune: str, number: int, results: str | Path = "results") -> Path:
    """A trial's parameters, written once by the step that asked for it: every parse plans its rungs from it."""
    return tune_folder(tune, results) / "trials" / f"t{number:03d}.json"


def step_path(folder: Path, slot: int | str, index: int | str) -> Path:
    """A slot's step's decision, under tune_folder: what the workflow's chains follow."""
    return folder / f"slot{slot}" / f"step{index}.json"


def wave_path(folder: Path, group: int | str, index: int | str) -> Path:
    """A packed search's wave (a group of slots taking their step `index` together), under tune_folder."""
    return folder / f"group{group}" / f"wave{index}.json"


def trial_name(tune: str, number: int) -> str:
    return f"{tune}-t{number:03d}"


def parse_trial(name: str) -> tuple[str, int]:
    """(tune, number) of a trial's run name."""
    match = TRIAL.match(name)
    return match["tune"], int(match["number"])


def rung_name(trial: str, epochs: int) -> str:
    return f"{trial}-e{epochs}"


def parse_rung(name: str, tunes) -> tuple[str, int, int] | None:
    """(tune, trial number, epochs) of a rung's run name whose tune is one of tunes, else None."""
    match = RUNG.match(name)
    if match and match["tune"] in tunes:
        return match["tune"], int(match["number"]), int(match["epochs"])
    return None


def set_dotted(tree: dict, key: str, value) -> dict:
    """A copy of a config tree with one dotted key set (the parents it lacks created)."""
    head, _, rest = key.partition(".")
    out = dict(tree)
    out[head] = set_dotted(out.get(head) or {}, rest, value) if rest else value
    return out


def trial_config(run: dict, params: dict, epochs: int) -> dict:
    """The config tree of a trial's rung: the tuned run's, with its parameters, train.epochs and no tune."""
    for key, value in params.items():
        run = set_dotted(run, key, value)
    run = set_dotted(run, "train.epochs", epochs)
    return {**run, "tune": None}


def slots(run, max_gpus: int) -> int:
    """A tuned run's trials at once (run: its RunConfig): tune.parallel, else as many as the GPU cap holds (one on
    CPU), at most the trials."""
    tune = run.tune
    return tune.parallel or max(1, min(tune.trials, max_gpus // run.gpus if run.gpus else 1))
