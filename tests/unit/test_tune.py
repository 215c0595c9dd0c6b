"""A search's pieces: the space and its refusals, the rungs, the trials' plans, and the study's steps with a real
Optuna study fed rung results written here (synthetic figures, named as such: no trainer runs in these tests)."""
import json
from pathlib import Path

import pytest

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all, plan_rung
from airetrain.search_space import parameters, rungs, step_path, trial_file, tune_folder, wave_path
from airetrain.tune.steps import chain, decide, decide_wave
from airetrain.commands.tune_steps import report_names

SPACE = {"optim.lr": {"loguniform": [1.0e-4, 1.0e-1]}, "model.width": {"choice": [8, 16]}}
TUNED = {"train": {"epochs": 9}, "tune": {"space": SPACE, "trials": 3, "parallel": 2,
                                          "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 3}}}}


def plans(tmp_path: Path, runs: dict, **top):
    return plan_all({"roots": {"scratch": str(tmp_path / "scratch")}, "runs": runs, **top},
                    env={"HOME": "/nonexistent"}, results=tmp_path / "results")


def plans_settings(tmp_path: Path):
    from airetrain.plan.config import resolve

    return resolve({"roots": {"scratch": str(tmp_path / "scratch")}, "runs": {"x": {}}})[0]


def refusal(tmp_path: Path, tune: dict, run: dict | None = None, **top) -> str:
    with pytest.raises(ConfigError) as e:
        plans(tmp_path, {"cnn": {**(run or {}), "tune": tune}}, **top)
    return str(e.value)


def test_each_distribution_is_read_in_the_spaces_order():
    params = parameters({"optim.lr": {"loguniform": [1e-4, 1e-1]}, "batch.per_device": {"int": [16, 64], "step": 16},
                         "optim.weight_decay": {"uniform": [0, 0.1]}, "model.width": {"choice": [32, 64]}}, "t")
    assert [(p.key, p.kind) for p in params] == [("optim.lr", "loguniform"), ("batch.per_device", "int"),
                                                 ("optim.weight_decay", "uniform"), ("model.width", "choice")]
    assert (params[1].low, params[1].high, params[1].step) == (16, 64, 16) and params[3].choices == (32, 64)


@pytest.mark.parametrize("spec,message", [
    ({"uniform": [0.1, 0.1]}, r"uniform = \[0.1, 0.1\] is an empty or reversed range"),
    ({"int": [8, 2]}, r"int = \[8, 2\] is an empty or reversed range"),
    ({"loguniform": [0, 1]}, "a log scale needs low > 0"),
    ({"choice": []}, "must be a list of distinct values"),
    ({"normal": [0, 1]}, r"give one distribution: \{loguniform: ...\}"),
    ({"int": [1, 8], "steps": 2}, "unknown key.s. steps beside int; allowed: step, log"),
])
def test_a_distribution_that_cannot_draw_is_refused_naming_its_key(spec, message):
    with pytest.raises(ConfigError, match=r"runs.r.tune.space.k.*" + message):
        parameters({"k": spec}, "runs.r.tune")


def test_the_plan_refuses_what_a_search_cannot_run_naming_each_key(tmp_path):
    text = refusal(tmp_path, {"space": {"optim.lrr": {"uniform": [0, 1]}, "train.seed": {"loguniform": [1, 9]},
                                        "optim.name": {"choice": ["adamw", "lion"]}, "model": {"choice": [1]}},
                              "pruner": {"successive_halving": {"min_epochs": 12, "reduction": 1}}},
                   {"train": {"epochs": 9}})
    assert "runs.cnn.tune.space.optim.lrr: 'optim.lrr' is not a key a trial can set (did you mean 'optim.lr'?)" in text
    assert "runs.cnn.tune.space.train.seed: loguniform draws floats, but train.seed is integer; use {int:" in text
    assert "runs.cnn.tune.space.optim.name.choice: 'lion' cannot be optim.name; allowed values: 'adamw', 'sgd'" in text
    assert "runs.cnn.tune.space.model: 'model' is not a key a trial can set" in text
    assert "successive_halving.reduction = 1: it must be at least 2" in text
    assert "successive_halving.min_epochs = 12 is above train.epochs = 9" in text


def test_a_search_over_a_script_names_its_own_values_and_its_trials_rung_gives_them_to_it(tmp_path):
    """A script reads params.<name> (job.params()); a built-in key it never reads is refused with the fix."""
    from airetrain.train.launcher.script import script_env

    (tmp_path / "train.py").write_text("")
    script = {"train": {"epochs": 9, "script": str(tmp_path / "train.py")}}
    text = refusal(tmp_path, {"space": {"optim.lr": {"loguniform": [1.0e-4, 1.0e-1]}}}, script)
    assert "runs.cnn.tune.space.optim.lr: a script does not read optim.lr; it reads its trial's values with " \
           "job.params(): name it params.lr" in text
    space = {"params.lr": {"loguniform": [1.0e-4, 1.0e-1]}, "params.act": {"choice": ["relu", "gelu"]}}
    assert "sampler.random.n_startup_trials: only tpe" in refusal(
        tmp_path, {"space": space, "sampler": {"random": {"n_startup_trials": 3}}}, script)
    tuned = plans(tmp_path, {"cnn": {**script, "tune": {"space": space, "trials": 2}}})["cnn"]
    decision = decide(tuned, 0, 0, tmp_path / "results")
    rung = plan_rung(tuned, decision["number"], decision["epochs"], plans_settings(tmp_path), tmp_path / "results")
    env = script_env(rung, {"target": None}, tmp_path / "results" / rung.results_dir.name, tmp_path / "ck")
    params = json.loads(trial_file("cnn", 0, tmp_path / "results").read_text())["params"]
    assert rung.config.params == {"lr": params["params.lr"], "act": params["params.act"]}
    assert env["AIRETRAIN_MAX_EPOCHS"] == "1" and env["AIRETRAIN_PARAMS"].endswith("cnn-t000-e1/params.json")


def test_a_sweep_sets_a_scripts_own_values(tmp_path):
    runs = plans(tmp_path, {"s": {"params": {"lr": 0.1, "width": 8}}}, sweep={"params.width": [8, 64]})
    assert [r.config.params for r in runs.values()] == [{"lr": 0.1, "width": 8}, {"lr": 0.1, "width": 64}]


def test_trials_at_once_over_the_gpu_cap_are_refused(tmp_path):
    text = refusal(tmp_path, {"space": SPACE, "parallel": 6}, {"gpus": 3, "batch": {"global": 96, "per_device": 32}})
    assert "runs.cnn.tune.parallel = 6 trials x 3 GPUs = 18 GPUs, over site.max_gpus_per_user = 15: at most 5" in text


def test_a_tune_beside_seeds_or_a_sweep_and_a_run_named_as_a_trial_are_refused(tmp_path):
    assert "runs.cnn.tune beside seeds (train.seed)" in refusal(tmp_path, {"space": SPACE}, {"seeds": [0, 1]})
    assert "runs.cnn.tune beside sweep (optim.momentum)" in refusal(tmp_path, {"space": SPACE},
                                                                      sweep={"optim.momentum": [0.8, 0.9]})
    with pytest.raises(ConfigError, match="run 'cnn-t001' is named as a trial of the tuned run 'cnn'"):
        plans(tmp_path, {"cnn": {"tune": {"space": SPACE}}, "cnn-t001": {}})


def test_rungs_follow_successive_halving_up_to_the_epochs():
    assert rungs(27, {"min_epochs": 1, "reduction": 3}) == [1, 3, 9, 27]
    assert rungs(10, {"min_epochs": 2, "reduction": 2}) == [2, 4, 8, 10]
    assert rungs(5, None) == [5]


def test_a_trials_rung_is_planned_from_its_file_as_the_trial_with_a_folder_of_its_own(tmp_path):
    planned = plans(tmp_path, {"cnn": TUNED})
    assert planned.tunes == {"cnn"} and planned["cnn"].tune_keys == ["optim.lr", "model.width"]
    file = trial_file("cnn", 4, tmp_path / "results")
    file.parent.mkdir(parents=True)
    file.write_text(json.dumps({"number": 4, "run": "cnn-t004", "params": {"optim.lr": 0.01, "model.width": 8}}))
    rung = planned["cnn-t004-e3"]
    assert (rung.run, rung.results_dir.name, rung.config.train.epochs) == ("cnn-t004", "cnn-t004-e3", 3)
    assert (rung.config.optim.lr, rung.config.model.width, rung.config.tune) == (0.01, 8, None)
    assert rung.durable_dir == tmp_path / "scratch/airetrain/cnn-t004"   # the trial's checkpoints, every rung
    assert rung.sweep == {"optim.lr": 0.01, "model.width": 8}
    with pytest.raises(KeyError):
        planned["other-t004-e3"]
    with pytest.raises(ConfigError, match="trial 5 of cnn: its file .* cannot be read"):
        plan_rung(planned["cnn"], 5, 1, planned.settings, tmp_path / "results")


def rung_results(results: Path, decision: dict, losses: dict[int, float]) -> None:
    """Synthetic: the files a rung's train and promote leave, with the evaluation losses given by epochs."""
    folder = results / f"{decision['trial']}-e{decision['epochs']}"
    folder.mkdir(parents=True)
    (folder / "train.json").write_text(json.dumps({"steps_per_epoch": 10, "stopped_early": None}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": 10 * e, "eval_loss": v}) + "\n"
                                                  for e, v in losses.items()))


def test_slots_ask_train_tell_and_prune_until_every_trial_is_asked(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    first, second = decide(tuned, 0, 0, results), decide(tuned, 1, 0, results)
    assert (first["trial"], first["epochs"], second["trial"], second["epochs"]) == ("cnn-t000", 1, "cnn-t001", 1)
    rung_results(results, first, {1: 0.5})
    promoted = decide(tuned, 0, 1, results)    # the first at its rung: nothing to beat, promoted
    assert (promoted["trial"], promoted["rung"], promoted["epochs"]) == ("cnn-t000", 1, 3)
    rung_results(results, second, {1: 0.9})
    third = decide(tuned, 1, 1, results)       # worse than the first at rung 0 with reduction 3: pruned
    assert third["trial"] == "cnn-t002"
    rung_results(results, promoted, {2: 0.4, 3: 0.3})
    assert decide(tuned, 0, 2, results)["epochs"] == 9
    rung_results(results, third, {1: 0.2})
    assert decide(tuned, 1, 2, results)["trial"] == "cnn-t002"   # promoted in turn
    from airetrain.tune.table import rows

    table = {r["trial"]: r for r in rows(tuned, results)}
    assert table[1]["state"] == "pruned at rung 0" and table[0]["at_3_epochs"] == 0.3
    assert [d.get("trial") for d in chain(tune_folder("cnn", results), 0)] == ["cnn-t000"] * 3


def test_a_wave_steps_its_groups_slots_together_as_their_own_steps_would(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    first = decide_wave(tuned, 0, range(2), 0, results)
    assert first == {"rungs": ["cnn-t000-e1", "cnn-t001-e1"], "done": False}
    assert json.loads(wave_path(tune_folder("cnn", results), 0, 0).read_text()) == first
    rung_results(results, chain(tune_folder("cnn", results), 0)[0], {1: 0.5})
    rung_results(results, chain(tune_folder("cnn", results), 1)[0], {1: 0.9})
    # slot 0's trial promoted, slot 1's pruned and the third trial asked in its place: the same as test_slots_...
    assert decide_wave(tuned, 0, range(2), 1, results)["rungs"] == ["cnn-t000-e3", "cnn-t002-e1"]
    assert decide_wave(tuned, 0, range(2), 1, results)["rungs"] == ["cnn-t000-e3", "cnn-t002-e1"]   # taken again
    rung_results(results, chain(tune_folder("cnn", results), 0)[1], {2: 0.4, 3: 0.3})
    rung_results(results, chain(tune_folder("cnn", results), 1)[1], {1: 0.2})
    assert decide_wave(tuned, 0, range(2), 2, results)["rungs"] == ["cnn-t000-e9", "cnn-t002-e3"]
    rung_results(results, chain(tune_folder("cnn", results), 0)[2], {9: 0.1})
    rung_results(results, chain(tune_folder("cnn", results), 1)[2], {3: 0.5})   # pruned: no fourth trial to ask
    assert decide_wave(tuned, 0, range(2), 3, results) == {"rungs": [], "done": True}
    assert [len(chain(tune_folder("cnn", results), slot)) for slot in (0, 1)] == [4, 4]
    assert decide_wave(tuned, 0, range(2), 4, results) == {"rungs": [], "done": True}   # ended slots take no step
    assert [len(chain(tune_folder("cnn", results), slot)) for slot in (0, 1)] == [4, 4]


def test_a_step_taken_again_after_a_crash_neither_loses_nor_duplicates_a_trial(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    asked = decide(tuned, 0, 0, results)
    step_path(tune_folder("cnn", results), 0, 0).unlink()   # the step died after asking, before its file
    assert decide(tuned, 0, 0, results) == asked
    rung_results(results, asked, {1: 0.5})
    promoted = decide(tuned, 0, 1, results)
    step_path(tune_folder("cnn", results), 0, 1).unlink()   # ... after telling
    assert decide(tuned, 0, 1, results) == promoted
    from airetrain.tune.table import rows

    assert [r["trial"] for r in rows(tuned, results)] == [0]


def test_a_trial_whose_plan_is_refused_fails_with_the_reason_and_the_next_is_asked(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    decision = decide(tuned, 0, 0, results, refused=lambda name, params: "no" if name.endswith("t000") else None)
    assert decision["trial"] == "cnn-t001"
    from airetrain.tune.table import rows

    assert [(r["state"], r["error"]) for r in rows(tuned, results)][0] == ("failed", "no")
    assert decide(tuned, 1, 0, results)["trial"] == "cnn-t002"
    assert decide(tuned, 2, 0, results) == {"done": True}   # three trials asked: no fourth


def test_a_report_names_a_tunes_trials_by_their_last_rung(tmp_path):
    (tmp_path / "cnn").mkdir()
    (tmp_path / "cnn" / "tune.csv").write_text("trial,state,epochs,run\n0,complete,9,cnn-t000\n1,pruned at rung 0,1,"
                                                "cnn-t001\n2,failed,0,cnn-t002\n")
    assert report_names(tmp_path, ["a", "cnn"]) == ["a", "cnn-t000-e9", "cnn-t001-e1"]


def test_a_search_whose_every_trial_failed_still_gets_every_table_the_report_rule_declares(tmp_path):
    from airetrain.cli import main

    (tmp_path / "cnn").mkdir()
    (tmp_path / "cnn" / "tune.csv").write_text("trial,state,epochs,run\n0,failed,0,cnn-t000\n")
    main(["report", "cnn", "--results", str(tmp_path), "--out", str(tmp_path / "report")])
    assert {"efficiency.csv", "results.csv", "results.md", "results.html"} <= \
        {p.name for p in (tmp_path / "report").iterdir()}


def test_a_rung_that_trained_nothing_new_fails_its_trial_naming_the_restart(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    asked = decide(tuned, 0, 0, results)
    rung_results(results, asked, {3: 0.5})   # resumed from a checkpoint already past its epoch: nothing at 1
    decide(tuned, 0, 1, results)
    from airetrain.tune.table import rows

    (row,) = rows(tuned, results)[:1]
    assert row["state"] == "failed" and "airetrain restart cnn starts the search anew" in row["error"]


def test_status_shows_each_trials_newest_rung_and_a_line_per_search(tmp_path):
    from airetrain.commands.tune_steps import status_names

    planned, results = plans(tmp_path, {"cnn": TUNED, "other": {}}), tmp_path / "results"
    first = decide(planned["cnn"], 0, 0, results)
    rung_results(results, first, {1: 0.5})
    promoted = decide(planned["cnn"], 0, 1, results)
    (results / "cnn-t000-e3").mkdir()   # its next rung has begun
    names, lines = status_names(planned, results)
    assert names == ["cnn-t000-e3", "other"] and promoted["epochs"] == 3
    assert lines == ["tune cnn: 1 of 3 trials asked, 0 complete, 0 pruned, 1 running, 0 failed"]


def test_without_a_pruner_each_trial_trains_to_the_end_and_importances_come_with_four_complete(tmp_path):
    from airetrain.tune.table import rows, summary

    tuned = plans(tmp_path, {"cnn": {"train": {"epochs": 2}, "tune": {
        "space": SPACE, "trials": 4, "pruner": "none", "sampler": {"random": {"seed": 1}}}}})["cnn"]
    results = tmp_path / "results"
    decision = decide(tuned, 0, 0, results)
    for step in range(1, 5):
        assert decision["epochs"] == 2   # one rung: train.epochs
        params = json.loads(trial_file("cnn", decision["number"], results).read_text())["params"]
        rung_results(results, decision, {1: 1.0, 2: params["optim.lr"] * 10 + params["model.width"] / 100})
        decision = decide(tuned, 0, step, results)
    assert decision == {"done": True}
    table = rows(tuned, results)
    about = summary(table, tuned, results)
    assert [r["state"] for r in table] == ["complete"] * 4
    assert about["best"]["value"] == min(r["value"] for r in table)
    assert set(about["importances"]) == {"optim.lr", "model.width"}
    assert about["config"]["train"]["epochs"] == 2 and "optim" in about["config"]


def test_more_trials_in_the_config_extend_the_same_study(tmp_path):
    tuned, results = plans(tmp_path, {"cnn": TUNED})["cnn"], tmp_path / "results"
    for slot in range(3):
        decide(tuned, slot, 0, results)
    assert decide(tuned, 3, 0, results) == {"done": True}
    more = plans(tmp_path, {"cnn": {**TUNED, "tune": {**TUNED["tune"], "trials": 4}}})["cnn"]
    assert decide(more, 3, 0, results)["trial"] == "cnn-t003"   # the same step, taken again, asks the fourth


def test_restarting_a_search_removes_its_study_and_every_trial_and_nothing_else(tmp_path):
    from airetrain.restart import restart

    planned, results = plans(tmp_path, {"cnn": TUNED, "other": {}}), tmp_path / "results"
    first = decide(planned["cnn"], 0, 0, results)
    rung_results(results, first, {1: 0.5})
    decide(planned["cnn"], 0, 1, results)
    checkpoints = tmp_path / "scratch/airetrain/cnn-t000/checkpoints"
    checkpoints.mkdir(parents=True)
    (results / "other").mkdir()
    (results / "cnn" / "tune.csv").write_text("trial\n")
    removed = restart(planned, ["cnn"], results, lambda paths: True)
    assert sorted(str(p.relative_to(tmp_path)) for p in removed) == [
        "results/cnn-t000-e1", "results/cnn/tune", "results/cnn/tune.csv", "scratch/airetrain/cnn-t000/checkpoints"]
    assert (results / "other").exists() and (results / "cnn").exists()
    assert decide(planned["cnn"], 0, 0, results)["trial"] == "cnn-t000"   # a new study from trial 0
