"""The monitored metric: the best evaluation, its direction, early stopping, and its state in a checkpoint."""
import math

import pytest

from airetrain.plan import config, refusals
from airetrain.train.monitor import Monitor, direction


def evaluation(loss, **metrics):
    return {"loss": loss, "metrics": metrics}


@pytest.mark.parametrize("metric, declared, expected", [
    ("eval_loss", {}, "min"), ("eval_accuracy", {}, "max"), ("eval_dice", {}, "max"), ("eval_iou", {}, "max"),
    ("eval_mae", {}, "min"), ("eval_val_error", {}, "min"), ("eval_perplexity", {}, "min"),
    ("eval_score", {"score": "min"}, "min")])
def test_auto_is_min_for_losses_and_errors_max_for_the_rest_unless_declared(metric, declared, expected):
    assert direction(metric, "auto", declared) == expected
    assert direction(metric, "max", declared) == "max"


def test_the_best_is_the_lowest_loss_and_each_new_one_says_so():
    m = Monitor("eval_loss", "min")
    assert [m.update(s, s // 10, evaluation(v)) for s, v in [(10, 1.0), (20, 0.7), (30, 0.8), (40, 0.6)]] \
        == [True, True, False, True]
    assert m.best == {"step": 40, "epoch": 4, "metric": "eval_loss", "value": 0.6}
    assert not m.should_stop   # no early stopping configured


def test_a_max_metric_and_a_missing_one_named_with_what_there_is():
    m = Monitor("eval_accuracy", "max")
    m.update(1, 0, evaluation(2.0, accuracy=0.5))
    assert not m.update(2, 0, evaluation(1.0, accuracy=0.4)) and m.best["value"] == 0.5
    with pytest.raises(ValueError, match="eval_dice is not measured by this run's evaluation; it measures: "
                                         "eval_loss, eval_accuracy"):
        Monitor("eval_dice", "max").update(1, 0, evaluation(1.0, accuracy=0.5))


def test_early_stopping_after_patience_evaluations_that_beat_the_best_by_no_more_than_min_delta():
    m = Monitor("eval_loss", "min", patience=2, min_delta=0.1)
    m.update(1, 0, evaluation(1.0))
    m.update(2, 0, evaluation(0.95))   # a new best, but not by more than min_delta
    assert m.best["step"] == 2 and m.since == 1 and not m.should_stop
    m.update(3, 0, evaluation(0.85))   # by more than min_delta from the reference (1.0): the count restarts
    assert m.since == 0
    m.update(4, 0, evaluation(0.9))
    m.update(5, 0, evaluation(float("nan")))   # a NaN never improves
    assert m.should_stop and m.stopped_early(5, 0) == {"step": 5, "epoch": 0, "best_step": 3, "best_value": 0.85}


def test_the_state_resumes_and_a_changed_metric_starts_afresh():
    m = Monitor("eval_loss", "min", patience=3)
    m.update(1, 0, evaluation(1.0))
    m.update(2, 0, evaluation(2.0))
    resumed = Monitor("eval_loss", "min", patience=3)
    assert resumed.load(m.state()) and resumed.state() == m.state()
    other = Monitor("eval_accuracy", "max", patience=3)
    assert not other.load(m.state()) and other.best is None and other.since == 0
    assert not Monitor("eval_loss", "min").load(None)
    assert math.isclose(resumed.best["value"], 1.0)


def test_config_builds_the_monitor_and_refuses_early_stopping_without_one():
    _, runs = config.resolve({"runs": {"a": {"train": {"early_stop": {"patience": 2, "min_delta": "1e-3"}}},
                                       "b": {"checkpoint": {"monitor": None}}}})
    m = Monitor.from_config(runs["a"], {})
    assert (m.metric, m.mode, m.patience, m.min_delta) == ("eval_loss", "min", 2, 0.001)
    assert Monitor.from_config(runs["b"], {}) is None
    with pytest.raises(config.ConfigError, match=r"runs.a.checkpoint.monitor = 'loss' is not allowed: eval_loss, "
                                                 r"or eval_ and a metric's name"):
        config.resolve({"runs": {"a": {"checkpoint": {"monitor": "loss"}}}})
    _, runs = config.resolve({"runs": {"c": {"checkpoint": {"monitor": None},
                                             "train": {"early_stop": {"patience": 1}}}}})
    problems = []
    refusals.trainer("c", runs["c"], "cpu", problems)
    assert problems == ["runs.c.train.early_stop watches checkpoint.monitor, which is null: set checkpoint.monitor "
                        "(eval_loss, or eval_<metric>) or remove early_stop"]
