"""The tune's Optuna study, opened by one process at a time on the submitting side: the workflow's steps
(steps.py) and the table. Compute nodes never open it: SQLite and journal files on a shared filesystem
lock or corrupt under many writers.

    with open_study(folder, tune, direction) as study:   # an exclusive lock for the whole transaction
        trial = study.ask() ...

The study lives in results/<tune>/tune/: study.journal (Optuna's JournalStorage, its whole history)
and sampler.pkl. Each step is a process of its own, and a seeded sampler draws from its random state:
kept between steps (pickled, as Optuna's documentation advises for resuming a study), the state makes
the trials the same as a plain study's in one process. The pickle is the study's own, written here only.

    suggest(trial, params)     Optuna's suggestions, in the space's order, under the dotted names
    grid(params)               the space as Optuna's GridSampler reads it
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
from pathlib import Path

from ..fsutil import write_bytes_atomic
from ..run_config import Tune
from ..search_space import Parameter, parameters

STUDY_NAME = "airetrain"


def sampler_of(tune: Tune):
    """Optuna's sampler the config names, seeded."""
    import optuna

    name, seed = tune.sampler_name, tune.seed
    options = (tune.sampler or {}).get(name) or {}
    if name == "grid":
        return optuna.samplers.GridSampler(grid(parameters(tune.space, "tune")), seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = {"n_startup_trials": options["n_startup_trials"]} if "n_startup_trials" in options else {}
    return optuna.samplers.TPESampler(seed=seed, **startup)


def pruner_of(tune: Tune):
    """Optuna's pruner: asynchronous successive halving on epochs, or none."""
    import optuna

    halving = tune.halving
    if halving is None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=halving["min_epochs"],
                                                  reduction_factor=halving["reduction"])


def storage_of(folder: Path):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(folder / "study.journal")))


@contextlib.contextmanager
def open_study(folder: Path, tune: Tune, direction: str, write: bool = True):
    """The study, under an exclusive lock (a shared one with write=False); its sampler's state saved after."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        pickled = folder / "sampler.pkl"
        sampler = pickle.loads(pickled.read_bytes()) if pickled.exists() else sampler_of(tune)
        study = optuna.create_study(study_name=STUDY_NAME, storage=storage_of(folder), sampler=sampler,
                                    pruner=pruner_of(tune), direction="minimize" if direction == "min" else "maximize",
                                    load_if_exists=True)
        yield study
        if write:
            write_bytes_atomic(pickled, pickle.dumps(study.sampler))


def exists(folder: Path) -> bool:
    return (folder / "study.journal").exists() and os.path.getsize(folder / "study.journal") > 0


def suggest(trial, params: list[Parameter]) -> dict:
    """{dotted key: value} suggested by an Optuna trial, one call per parameter in the space's order: what a
    plain Optuna objective written over the same space asks, so that the two studies draw alike."""
    values = {}
    for p in params:
        if p.kind == "choice":
            values[p.key] = trial.suggest_categorical(p.key, list(p.choices))
        elif p.kind == "int":
            values[p.key] = trial.suggest_int(p.key, int(p.low), int(p.high), step=p.step, log=p.log)
        else:
            values[p.key] = trial.suggest_float(p.key, p.low, p.high, log=p.kind == "loguniform")
    return values


def grid(params: list[Parameter]) -> dict[str, list]:
    """Optuna's GridSampler space: every value of each parameter (a choice's, or an int range's steps)."""
    return {p.key: list(p.choices) if p.kind == "choice" else list(range(int(p.low), int(p.high) + 1, p.step))
            for p in params}
