"""A slot's steps: what the study decides each time one of its trials' rungs ends.

A tune runs `parallel` slots, each a chain of steps that Snakemake follows as checkpoints:

    step 0: ask the study for a trial          -> train it to its first rung
    step k: tell the study that rung's metric  -> the pruner keeps it: train it to its next rung
                                                  it is pruned or complete: ask for the next trial
                                                  every trial asked: the slot is done

which is what `parallel` workers of a plain Optuna loop do, each trial's report and should_prune at every
evaluation, with the epochs trained as the step. Nothing waits for a whole rung: each slot goes on as soon
as its own rung ends. The chains only grow: each decision is kept in the study, and a step taken again
(Snakemake reruns it) decides what it decided. A step that died half way is taken again: a trial asked
for this step is found by its slot and step, and a rung already told is not told twice.

A search that packs (plan/packing.py) goes in waves: a group of slots takes its step k together (decide_wave),
and the rungs it decided train side by side in one allocation. Each slot's chain is the same as above.
"""
from __future__ import annotations

from pathlib import Path

from ..rundir import metrics_log
from ..direction import direction
from ..fsutil import read_json, write_json_atomic
from ..records import Plan
from ..search_space import (ladder, parameters, parse_trial, rung_name, step_path, trial_file, trial_name,
                            tune_folder, wave_path)
from .study import open_study, suggest


def metric_of(tuned: Plan) -> tuple[str, str]:
    """(the metric the trials report, min or max)."""
    config = tuned.config
    metric = config.tune.metric or config.checkpoint.monitor
    return metric, direction(metric, config.checkpoint.mode, {})


def decide(tuned: Plan, slot: int, index: int, results: str | Path = "results", refused=None) -> dict:
    """The step's decision, written to its file: {trial, number, rung, epochs} to train next, or {done}.
    refused(trial name, its parameters): why its plan refuses it, or None."""
    import optuna

    folder = tune_folder(tuned.run, results)
    metric, mode = metric_of(tuned)
    rungs = ladder(tuned.config)
    key = f"step {slot} {index}"
    with open_study(folder, tuned.config.tune, mode) as study:
        decision = study.user_attrs.get(key)   # a step taken again (Snakemake reran it) decides what it decided
        if decision is None and index > 0:
            previous = read_json(step_path(folder, slot, index - 1))
            decision = _tell(optuna, study, previous, Path(results), metric, rungs)
        if decision is None:
            decision = _ask(optuna, study, tuned, slot, index, results, rungs, refused)
        if not decision.get("done"):   # a slot found done goes on if the config asks for more trials
            study.set_user_attr(key, decision)
    write_json_atomic(step_path(folder, slot, index), decision)
    return decision


def decide_wave(tuned: Plan, group: int, slots: range, index: int, results: str | Path = "results",
                refused=None) -> dict:
    """A wave's decisions, written to its file: {rungs: [the rung runs to train side by side], done}. Each slot of
    the group still going takes its step `index` (decide); a slot whose chain ended earlier takes none."""
    folder = tune_folder(tuned.run, results)
    rungs = []
    for slot in slots:
        earlier = chain(folder, slot)[:index]
        if index and (len(earlier) < index or earlier[-1].get("done")):
            continue
        decision = decide(tuned, slot, index, results, refused)
        if not decision.get("done"):
            rungs.append(rung_name(decision["trial"], decision["epochs"]))
    wave = {"rungs": rungs, "done": not rungs}
    write_json_atomic(wave_path(folder, group, index), wave)
    return wave


def evaluations(folder: Path, metric: str, after: int, upto: int) -> tuple[list[tuple[int, float]], bool]:
    """([(epochs trained, metric)] of a rung's evaluations at epoch ends after `after` epochs, up to `upto`, the
    newest line of each (a killed session's are logged again); whether early stopping ended it). The built-in
    trainer's epoch is its step over train.json's steps_per_epoch; a script's, the line's own "epoch" (the
    epochs trained: a whole number)."""
    train = read_json(folder / "train.json")
    per_epoch = train.get("steps_per_epoch")
    by_epoch = {}
    for record in metrics_log.read(folder / metrics_log.NAME):
        if record.get(metric) is not None and (epoch := _epoch_of(record, per_epoch)) is not None:
            by_epoch[epoch] = record[metric]
    out = [(epoch, value) for epoch, value in sorted(by_epoch.items()) if after < epoch <= upto]
    stopped = train.get("stopped_early")
    return out, bool(stopped)


def _epoch_of(record: dict, per_epoch: int | None) -> int | None:
    """The epochs trained at an evaluation line, where it ends an epoch; else None."""
    if per_epoch:
        step = record.get("step")
        return step // per_epoch if isinstance(step, int) and step % per_epoch == 0 else None
    epoch = record.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not float(epoch).is_integer():
        return None
    return int(epoch)


def _tell(optuna, study, previous: dict, results: Path, metric: str, rungs: list[int]) -> dict | None:
    """Report the rung the previous step trained; the next rung of the same trial, or None (it ended)."""
    number, epochs = previous["number"], previous["epochs"]
    frozen = study.trials[number]
    if frozen.state.is_finished():
        return None
    start = rungs[previous["rung"] - 1] if previous["rung"] else 0
    values, stopped = evaluations(results / rung_name(previous["trial"], epochs), metric, start, epochs)
    if not values:   # no evaluation in the rung's epochs: failed, with the reason in the table
        frozen_error = (f"no {metric} after {start} and up to {epochs} epochs in {rung_name(previous['trial'], epochs)}"
                        "/metrics.jsonl (a checkpoint already past them, of an earlier study with the same parameters, "
                        f"resumes there: airetrain restart {parse_trial(previous['trial'])[0]} starts the search anew)")
        optuna.trial.Trial(study, frozen._trial_id).set_user_attr("error", frozen_error)
        study.tell(number, state=optuna.trial.TrialState.FAIL)
        return None
    # The trial was asked for by an earlier step, in another process: Optuna rebuilds it only from its storage id,
    # which FrozenTrial keeps as _trial_id (no public accessor; the other way, study._storage, is private too)
    trial = optuna.trial.Trial(study, frozen._trial_id)
    for at, value in values:
        trial.report(value, at)
        if trial.should_prune():
            trial.set_user_attr("pruned_at_epochs", at)
            study.tell(number, state=optuna.trial.TrialState.PRUNED)
            return None
    if stopped or epochs >= rungs[-1]:
        study.tell(number, values[-1][1])
        return None
    rung = previous["rung"] + 1
    return {"trial": previous["trial"], "number": number, "rung": rung, "epochs": rungs[rung]}


def _ask(optuna, study, tuned: Plan, slot: int, index: int, results, rungs: list[int], refused) -> dict:
    """A new trial for this step (the one asked for it before a crash, if any), or {done: true}."""
    tune = tuned.config.tune
    params = parameters({key: tune.space[key] for key in tuned.tune_keys}, f"runs.{tuned.run}.tune")
    while True:
        for frozen in study.trials:
            if frozen.user_attrs.get("slot") == slot and frozen.user_attrs.get("step") == index \
                    and not frozen.state.is_finished():
                return _first_rung(tuned.run, frozen.number, rungs)
        if len(study.trials) >= tune.trials:
            return {"done": True}
        trial = study.ask()
        values = suggest(trial, params)
        name = trial_name(tuned.run, trial.number)
        for key, value in (("run", name), ("slot", slot), ("step", index)):
            trial.set_user_attr(key, value)
        write_json_atomic(trial_file(tuned.run, trial.number, results),
                          {"number": trial.number, "run": name, "params": values})
        problem = refused(name, values) if refused else None
        if problem is None:
            return _first_rung(tuned.run, trial.number, rungs)
        trial.set_user_attr("error", problem)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _first_rung(tune: str, number: int, rungs: list[int]) -> dict:
    return {"trial": trial_name(tune, number), "number": number, "rung": 0, "epochs": rungs[0]}


def chain(folder: Path, slot: int) -> list[dict]:
    """The slot's decisions so far, in order."""
    out, index = [], 0
    while (path := step_path(folder, slot, index)).exists():
        out.append(read_json(path))
        index += 1
    return out
