"""report/results.py: groups of seeds, their means, standard deviations and confidence intervals, the
keys groups differ in, runs still training counted but not averaged, and `compare`."""
import json
import statistics

import pytest

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.report import compare, results, results_render
from airetrain.typed import to_dict

from conftest import ENV

T_975_2 = 4.302652729911275   # Student's t, 97.5 % quantile, 2 degrees of freedom


def experiment(tmp_path, finished: dict[str, tuple[float, float]]) -> list[str]:
    """2 settings x 3 seeds planned; train.json (eval_loss, eval_accuracy) for the finished ones."""
    plans = plan_all({"roots": {"scratch": str(tmp_path / "scratch")}, "defaults": {"seeds": [0, 1, 2]},
                      "sweep": {"optim.lr": ["1e-3", "3e-4"]}, "runs": {"base": {}}}, env=ENV)
    for name, plan in plans.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.json").write_text(json.dumps(to_dict(plan)))
        if name in finished:
            loss, acc = finished[name]
            (tmp_path / name / "train.json").write_text(json.dumps({
                "eval_loss": loss, "eval_metrics": {"accuracy": acc}, "steady_samples_per_s": 100.0,
                "best": {"step": 20, "epoch": 1, "metric": "eval_loss", "value": loss - 0.01}}))
            (tmp_path / name / "metrics.jsonl").write_text(
                "\n".join(json.dumps(m) for m in [{"step": 10, "elapsed_s": 5.0, "loss": 1.0},
                                                  {"step": 20, "epoch": 1, "eval_loss": loss - 0.01},
                                                  {"step": 20, "elapsed_s": 9.5, "loss": 0.8}]))
    return list(plans)


def test_groups_mean_sd_and_t_interval_over_finished_seeds_and_what_differs(tmp_path):
    finished = {"base-lr1e-3-seed0": (0.30, 0.91), "base-lr1e-3-seed1": (0.34, 0.93),
                "base-lr1e-3-seed2": (0.29, 0.95), "base-lr3e-4-seed0": (0.50, 0.80)}
    runs = experiment(tmp_path, finished)
    rows = results.run_rows(tmp_path, runs)
    groups = {g["group"]: g for g in results.group_rows(rows)}
    a, b = groups["base-lr1e-3"], groups["base-lr3e-4"]
    losses = [0.30, 0.34, 0.29]
    sd = statistics.stdev(losses)
    assert (a["n_finished"], a["n_planned"]) == (3, 3) and (b["n_finished"], b["n_planned"]) == (1, 3)
    assert a["eval_loss"] == pytest.approx(statistics.mean(losses)) and a["eval_loss_sd"] == pytest.approx(sd)
    assert a["eval_loss_ci95"] == pytest.approx(T_975_2 * sd / 3 ** 0.5)
    assert a["eval_accuracy"] == pytest.approx(0.93) and a["best_epoch"] == 2 and a["time_to_best_s"] == 9.5
    assert b["eval_loss"] == 0.50 and b["eval_loss_sd"] is None   # one run: no spread, never the unfinished
    assert a["differs"] == "optim.lr=0.001" and b["differs"] == "optim.lr=0.0003"
    text = results_render.results_markdown(list(groups.values()), rows)
    assert f"| base-lr1e-3 | 3/3 | {a['eval_loss']:.4g} ± {sd:.2g} (95 % CI " in text
    assert "| base-lr3e-4 | 1/3 | 0.5 (n = 1) |" in text
    paths = results_render.write_results(tmp_path, runs, tmp_path / "report")
    assert paths["results_eval_loss_png"].stat().st_size > 1000 and "results.csv" in str(paths["results_csv"])


def test_compare_names_the_differing_key_and_refuses_an_unknown_name(tmp_path):
    experiment(tmp_path, {"base-lr1e-3-seed0": (0.3, 0.9), "base-lr3e-4-seed0": (0.5, 0.8)})
    found = compare.compare(tmp_path, ["base-lr1e-3-seed0", "base-lr3e-4-seed0"])
    assert found["differs"] == {"optim.lr": {"base-lr1e-3-seed0": 0.001, "base-lr3e-4-seed0": 0.0003}}
    assert found["figures"]["base-lr3e-4-seed0"]["eval_loss"] == 0.5
    assert "optim.lr" in compare.format_compare(found)
    groups = compare.compare(tmp_path, ["base-lr1e-3", "base-lr3e-4"])
    assert list(groups["differs"]) == ["optim.lr"] and groups["figures"]["base-lr1e-3"]["eval_loss"] == 0.3
    seeds = compare.compare(tmp_path, ["base-lr1e-3-seed0", "base-lr1e-3-seed1"])
    assert list(seeds["differs"]) == ["train.seed"]
    with pytest.raises(ConfigError, match=r"compare: unknown run or group 'nope'; runs: base-lr1e-3-seed0, "):
        compare.compare(tmp_path, ["nope"])
    with pytest.raises(ConfigError, match=r"group 'base-lr1e-3-sed0' \(did you mean 'base-lr1e-3-seed0'\?\)"):
        compare.compare(tmp_path, ["base-lr1e-3-sed0"])


def test_seeds_repeat_a_run_once_per_seed_after_the_sweep_and_a_run_may_choose_its_own():
    from airetrain.plan import config, sweep

    _, runs = config.resolve({"defaults": {"seeds": [0, 1]}, "sweep": {"optim.lr": [1e-3]},
                              "runs": {"a": {}, "b": {"seeds": [7]}}})
    assert sorted(runs) == ["a-lr1e-3-seed0", "a-lr1e-3-seed1", "b-lr1e-3-seed7"]
    assert runs["b-lr1e-3-seed7"].train.seed == 7
    assert sweep.groups(runs) == {"a-lr1e-3-seed0": "a-lr1e-3", "a-lr1e-3-seed1": "a-lr1e-3",
                                   "b-lr1e-3-seed7": "b-lr1e-3"}
    with pytest.raises(ConfigError, match=r"runs.a.seeds must be a list of seeds, e.g. \[0, 1, 2\]"):
        config.resolve({"runs": {"a": {"seeds": 3}}})


def test_each_plan_names_its_sweep_point_and_the_runs_table_its_tracker_runs(tmp_path):
    """The keys a run's sweep grid set are its plan's (what the trackers tag): its own point, the seeds
    aside; a run logged to trackers shows its tracker runs in the table and in compare."""
    runs = experiment(tmp_path, {"base-lr1e-3-seed0": (0.3, 0.9), "base-lr3e-4-seed0": (0.5, 0.8)})
    plans = {name: json.loads((tmp_path / name / "plan.json").read_text()) for name in runs}
    assert plans["base-lr1e-3-seed1"]["sweep"] == {"optim.lr": 0.001}
    assert plans["base-lr3e-4-seed0"]["sweep"] == {"optim.lr": 0.0003}
    train = tmp_path / "base-lr1e-3-seed0" / "train.json"
    url = "http://login1:5000/#/experiments/1/runs/9f8e"
    train.write_text(json.dumps({**json.loads(train.read_text()), "tracking": {
        "wandb": {"id": "base-lr1e-3-seed0-1a2b3c4d", "project": "digits", "logged": 10, "lost": 0},
        "mlflow": {"run_id": "9f8e", "url": url, "logged": 10, "lost": 0}}}))
    rows = results.run_rows(tmp_path, runs)
    text = results_render.results_markdown(results.group_rows(rows), rows)
    assert "| tracker |" in text and f"W&B digits/base-lr1e-3-seed0-1a2b3c4d; MLflow {url} |" in text
    found = compare.compare(tmp_path, ["base-lr1e-3-seed0", "base-lr3e-4-seed0"])
    assert found["figures"]["base-lr1e-3-seed0"]["tracker"].endswith(url)
    assert found["figures"]["base-lr3e-4-seed0"]["tracker"] is None


def test_a_groups_energy_and_co2e_are_the_mean_and_sd_over_its_seeds(tmp_path):
    import pandas as pd

    finished = {"base-lr1e-3-seed0": (0.30, 0.91), "base-lr1e-3-seed1": (0.34, 0.93), "base-lr1e-3-seed2": (0.29, 0.95)}
    runs = experiment(tmp_path, finished)
    kwh = {"base-lr1e-3-seed0": 0.5, "base-lr1e-3-seed1": 0.7, "base-lr1e-3-seed2": 0.6}
    efficiency = pd.DataFrame([{"run": r, "gpu_hours": None, "energy_kwh": kwh.get(r), "co2e_kg": None} for r in runs])
    rows = results.run_rows(tmp_path, runs, efficiency)
    group = {g["group"]: g for g in results.group_rows(rows)}["base-lr1e-3"]
    assert group["energy_kwh"] == pytest.approx(0.6) and group["energy_kwh_sd"] == pytest.approx(0.1)
    assert "| 0.6 ± 0.1 |" in results_render.results_markdown([group], rows)
