"""A search through the pipeline (tune:, one slot), killed mid-search and run again: each trial a run of its
own trained rung by rung, the promoted ones resumed from their checkpoints, and the study the same, trial by
trial, as a plain Optuna study over the same space fed the same figures, past TPE's start-up trials. A user
model's own hyperparameter (model.options) is in the space."""
import csv
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from airetrain.rundir import metrics_log
from airetrain.rundir.run_log import sessions
from conftest import end_all, plain_study, read_json, snakemake, snakemake_cmd, spawn, wait_for
from user_code import write_ownlab

pytestmark = pytest.mark.e2e
SPACE = {"optim.lr": {"loguniform": [1.0e-3, 1.0e-1]}, "model.options.hidden": {"choice": [4, 32]}}
TUNED = {"gpus": 0, "processes": 1, "precision": "fp32",
         "model": {"name": "ownlab.lab:tunable", "options": {"hidden": 16}},
         "data": {"name": "ownlab.lab:regression_data"}, "batch": {"global": 64, "per_device": 32},
         "optim": {"name": "adamw", "lr": 0.01}, "train": {"epochs": 4, "loss": "ownlab.lab:mse", "seed": 0},
         "checkpoint": {"keep": 10},   # every rung's last checkpoint kept, for the test to read its bytes
         "tune": {"space": SPACE, "trials": 4, "sampler": {"tpe": {"seed": 3, "n_startup_trials": 2}},
                  "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 2}}, "parallel": 1}}


def evaluations(folder) -> dict[int, float]:
    """{epochs trained: eval_loss} of a rung's results folder, at epoch ends."""
    per_epoch = read_json(folder / "train.json")["steps_per_epoch"]
    lines = [json.loads(line) for line in open(folder / "metrics.jsonl")]
    return {line["step"] // per_epoch: line["eval_loss"] for line in lines
            if "eval_loss" in line and line["step"] % per_epoch == 0}


def plain_study_of(reported: dict[tuple, dict[int, float]]):
    """The search as Optuna's own loop (conftest.plain_study): TPE seeded 3, 2 start-up trials, halving by 2."""
    import optuna

    def suggest(trial) -> tuple:
        return (trial.suggest_float("optim.lr", 1e-3, 1e-1, log=True),
                trial.suggest_categorical("model.options.hidden", [4, 32]))
    # 2 at random, then TPE's model proposes
    return plain_study(suggest, reported, 4, 4, optuna.samplers.TPESampler(seed=3, n_startup_trials=2), 2)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    work = tmp_path_factory.mktemp("tune")
    write_ownlab(work)
    cfg = work / "c.yaml"   # the space's keys in the order written: the order the study suggests them in
    cfg.write_text(yaml.safe_dump({"roots": {"scratch": str(work / "scratch")}, "runs": {"reg": TUNED}},
                                  sort_keys=False))
    # killed mid-search, after the second trial's first rung (Snakemake and all it started), then run again
    proc = spawn(snakemake_cmd(work, cfg, "--cores", "2"), work / "killed.log", cwd=work)
    wait_for(lambda: (work / "results/reg-t001-e1/train.json").exists(), timeout=600, what="trial 1's first rung")
    end_all(proc)
    snakemake(work, cfg, "--unlock")   # the killed Snakemake's lock
    snakemake(work, cfg, "--cores", "2", "--rerun-incomplete")
    return work


def test_each_trial_trains_rung_by_rung_and_a_promoted_one_resumes_from_its_checkpoint(searched):
    rows = list(csv.DictReader(open(searched / "results/reg/tune.csv")))
    assert [int(r["trial"]) for r in rows] == list(range(4))
    assert {r["state"].split(" ")[0] for r in rows} <= {"complete", "pruned"}
    assert any(r["state"].startswith("pruned") for r in rows) and any(r["state"] == "complete" for r in rows)
    for row in rows:
        trained = [e for e in (1, 2, 4) if (searched / f"results/{row['run']}-e{e}/train.json").exists()]
        assert trained[-1] == int(row["epochs"])   # the last rung it trained is the epochs it reached
        for before, after in zip(trained, trained[1:]):   # each later rung resumed where the earlier one ended
            first = read_json(searched / f"results/{row['run']}-e{before}/train.json")
            then = read_json(searched / f"results/{row['run']}-e{after}/train.json")
            assert then["resumed_from_step"] == first["steps"] > 0
            assert then["steps_this_session"] == then["steps"] - first["steps"]
            # it loaded the checkpoint the earlier rung ended with: its bytes are those recorded at that rung's end
            ended = read_json(searched / f"results/{row['run']}-e{before}/checkpoint.json")
            session = next(s for s in sessions(searched / "scratch/airetrain" / row["run"])
                           if s["resumed_from_step"] == first["steps"])
            assert Path(session["checkpoint"]).name == Path(ended["path"]).name   # the fast root's copy, or scratch's
            assert hashlib.sha256(open(session["checkpoint"], "rb").read()).hexdigest() == ended["sha256"]
            lines = metrics_log.parse((searched / f"results/{row['run']}-e{after}/metrics.jsonl").read_text())
            begun = max(i for i, line in enumerate(lines) if metrics_log.BEGIN in line)   # this rung's session
            assert lines[begun][metrics_log.BEGIN] == first["steps"]
            assert min(line["step"] for line in lines[begun + 1:]) > first["steps"]   # no step trained again
        plan = read_json(searched / f"results/{row['run']}-e{trained[-1]}/plan.json")
        assert plan["run"] == row["run"]   # the rung trains as its trial: the trial's checkpoints, lock and trackers
        assert plan["config"]["model"]["options"]["hidden"] == int(row["model.options.hidden"])


def test_the_study_is_a_plain_optuna_studys_trial_by_trial(searched):
    rows = list(csv.DictReader(open(searched / "results/reg/tune.csv")))
    reported = {}
    for row in rows:
        curve = {}
        for e in (1, 2, 4):
            folder = searched / f"results/{row['run']}-e{e}"
            if folder.exists():
                curve.update(evaluations(folder))
        reported[(float(row["optim.lr"]), int(row["model.options.hidden"]))] = curve
    plain = plain_study_of(reported)
    assert [(t.params["optim.lr"], t.params["model.options.hidden"]) for t in plain.trials] == list(reported)
    assert [t.state.name for t in plain.trials] == [r["state"].split(" ")[0].upper() for r in rows]
    assert [max(t.intermediate_values) for t in plain.trials] == [int(r["epochs"]) for r in rows]
    best = min((r for r in rows if r["state"] == "complete"), key=lambda r: float(r["value"]))
    assert plain.best_trial.number == int(best["trial"]) and plain.best_value == pytest.approx(float(best["value"]))


def test_the_table_names_the_best_and_its_weights_are_the_tunes(searched):
    about = read_json(searched / "results/reg/tune/best.json")
    text = (searched / "results/reg/tune.md").read_text()
    assert f"Best: trial {about['best']['trial']} ({about['best']['run']})" in text
    assert "```yaml\noptim:\n  lr: " in text and "options:\n    hidden: " in text
    last = read_json(searched / f"results/{about['best']['run']}-e4/checkpoint.json")["weights"]
    assert about["weights"]["sha256"] == last["sha256"]
    assert about["weights"]["path"] == str(searched / "scratch/airetrain/reg/best.safetensors")
    assert about["device_hours"] < about["device_hours_all_to_the_end"]   # pruning saved training
    results = list(csv.DictReader(open(searched / "results/report/results-runs.csv")))
    assert sorted(r["group"] for r in results) == [f"reg-t{n:03d}" for n in range(4)]   # a row per trial
