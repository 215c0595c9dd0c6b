"""Evaluation runs at plan time: what `evaluate: {run, which}` becomes, what is refused before anything is
submitted (an unknown source, one without weights, weights that do not fit the data), and the plan's
record of its source."""
import pytest

from airetrain.commands.resolve import resolve_plan
from airetrain.errors import ConfigError
from airetrain.plan import config as cfg
from airetrain.plan.planner import plan_all
from conftest import ENV

SYNTHETIC = {"name": "synthetic", "shape": [1, 8, 8], "classes": 10, "samples": 64}


def config(**evaluation):
    return {"defaults": {"precision": "fp32"},
            "runs": {"pretrain": {"model": {"width": 16}, "train": {"epochs": 3}},
                     "check": {"evaluate": {"run": "pretrain"}, **evaluation}}}


def test_an_evaluation_run_is_its_sources_model_from_its_weights_trained_for_no_step():
    _, runs = cfg.resolve(config(data=SYNTHETIC))
    run = runs["check"]
    assert run.evaluate == {"run": "pretrain", "which": "best"}
    assert run.model.width == 16 and run.model.init_from == {"run": "pretrain", "which": "best"}
    assert run.model.init_strict and run.train.epochs == 0 and run.checkpoint.monitor is None
    assert run.data.name == "synthetic" and runs["pretrain"].train.epochs == 3


def test_its_plan_records_the_source_and_its_data_for_the_shape_check(tmp_path):
    plans = plan_all({"roots": {"scratch": str(tmp_path)}, **config(data=SYNTHETIC)}, env=ENV)
    evaluates = plans["check"].evaluates
    assert evaluates["run"] == "pretrain" and evaluates["which"] == "best"
    assert evaluates["data"]["name"] == "digits" and evaluates["dataset"].endswith("datasets/digits")
    assert plans["pretrain"].evaluates is None


@pytest.mark.parametrize("evaluation, message", [
    ({"evaluate": {"run": "nope"}},
     r"runs\.check\.evaluate\.run: 'nope' is not another run of this config; its runs: pretrain"),
    ({"evaluate": {"run": "check"}}, r"runs\.check\.evaluate\.run: 'check' is not another run"),
    ({"evaluate": {"run": "pretrain", "which": "first"}}, r"first"),
])
def test_an_unknown_source_is_refused_naming_the_runs(evaluation, message):
    with pytest.raises(ConfigError, match=message):
        cfg.resolve({"runs": {"pretrain": {}, "check": evaluation}})


def test_a_source_without_weights_and_a_script_beside_evaluate_are_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(ConfigError, match=r"'mine' trains no weights of its own \(it is a script of its own\)"):
        cfg.resolve({"runs": {"mine": {"train": {"script": str(script)}}, "check": {"evaluate": {"run": "mine"}}}})
    with pytest.raises(ConfigError, match=r"'check' trains no weights of its own \(it is an evaluation run\)"):
        cfg.resolve({"runs": {"a": {}, "check": {"evaluate": {"run": "a"}}, "again": {"evaluate": {"run": "check"}}}})
    with pytest.raises(ConfigError, match=r"runs\.check\.evaluate and train\.script"):
        cfg.resolve({"runs": {"a": {}, "check": {"evaluate": {"run": "a"}, "train": {"script": str(script)}}}})


def test_weights_that_do_not_fit_the_data_are_refused_on_the_meta_device(tmp_path):
    plans = plan_all({"roots": {"scratch": str(tmp_path)}, **config(data={**SYNTHETIC, "classes": 5})}, env=ENV)
    with pytest.raises(ConfigError, match=r"runs\.check\.evaluate: run pretrain's weights do not fit this run's "
                                          r"data: .*weight is \(10, .*\) in the model trained .* but \(5, "):
        resolve_plan(plans["check"])
    fits = plan_all({"roots": {"scratch": str(tmp_path)}, **config(data=SYNTHETIC)}, env=ENV)
    assert resolve_plan(fits["check"]).evaluates["run"] == "pretrain"   # same shape and classes: it fits
