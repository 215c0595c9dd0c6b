"""Forecasting a run's layouts: the duration from history (measured at the count, or scaled from the
nearest), the choice and its record in the plan, a chosen layout kept in later parses, and the fallback
where SLURM cannot be asked. The scheduler's own start times are tested on the SLURM test cluster."""
import json
import os

import pytest

from airetrain.typed import to_dict
from airetrain.errors import ConfigError
from airetrain.plan.forecast import format_forecast, predicted_duration
from airetrain.plan.planner import plan_all, plan_workflow

from conftest import BIN, ENV, run, synthetic_history, write_config

BASE = {"gpus": 3, "batch": {"global": 48, "per_device": 4}, "train": {"epochs": 2}}


def planned(scratch, gpus: int, **extra) -> dict:
    name = f"g{gpus}"
    config = {"roots": {"scratch": str(scratch)}, "runs": {name: {**BASE, "gpus": gpus, **extra}}}
    return plan_all(config, env=ENV)[name]


def lines(scratch):
    from airetrain.rundir.history import everything
    return everything(scratch)


def test_the_duration_at_a_measured_count_is_its_step_time_times_the_steps_plus_the_rest(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    synthetic_history(scratch, planned(scratch, 3), "12", seconds_per_step=1.2, steps=100)   # the slowest counts
    seconds, how = predicted_duration(planned(scratch, 3), lines(scratch))
    assert seconds == pytest.approx(1.2 * 100 + 20 + 10 + 5)
    assert "measured at 3 GPUs (job 11, job 12)" in how
    longer, _ = predicted_duration(planned(scratch, 3, train={"epochs": 4}), lines(scratch))   # twice the steps
    assert longer == pytest.approx(1.2 * 200 + 35)


def test_another_count_is_scaled_from_the_nearest_by_the_measured_efficiency(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    synthetic_history(scratch, planned(scratch, 6), "12", seconds_per_step=0.6, steps=100)
    eff = (1.0 * 3) / (0.6 * 6)   # throughput per GPU at 6 over that at 3
    one, how = predicted_duration(planned(scratch, 1), lines(scratch))
    assert one == pytest.approx(1.0 * 3 * eff * 100 + 35)   # fewer GPUs: each does more, at 3's rate / eff
    assert f"scaled from 3 GPUs: 1 s/step x 3/1 x {eff:.2f}, the scaling efficiency measured from 3 to 6" in how
    twelve, how = predicted_duration(planned(scratch, 12), lines(scratch))
    assert twelve == pytest.approx(0.6 * 6 / 12 / eff * 100 + 35)
    assert f"scaled from 6 GPUs: 0.6 s/step x 6/12 / {eff:.2f}" in how


def test_one_measured_count_scales_linearly_and_says_so(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    six, how = predicted_duration(planned(scratch, 6), lines(scratch))
    assert six == pytest.approx(0.5 * 100 + 35) and "assuming linear scaling" in how


def test_a_changed_profile_has_no_duration(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    seconds, how = predicted_duration(planned(scratch, 6, model={"width": 64}), lines(scratch))
    assert seconds is None and how == "no finished run of this profile at any layout"


def choosing(scratch, **forecast) -> dict:
    return {"roots": {"scratch": str(scratch)},
            "runs": {"r": {**BASE, "forecast": {"gpus": [3, 6, 4], "choose": "earliest_finish", **forecast}}}}


def test_without_sbatch_the_choice_is_by_duration_alone_and_recorded_in_the_plan(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    synthetic_history(scratch, planned(scratch, 6), "12", seconds_per_step=0.6, steps=100)
    plan = plan_all(choosing(scratch), env=ENV)["r"]   # ENV has no PATH: no sbatch
    assert (plan.gpus, plan.nodes, plan.batch.grad_accum) == (6, 2, 2)   # the global batch held
    forecast = plan.forecast
    assert forecast["chosen_gpus"] == 6 and forecast["configured_gpus"] == 3
    assert forecast["why"].startswith("earliest_finish: 6 GPUs take 00:01:35 (by duration alone), against 3 GPUs")
    rows = {row["gpus"]: row for row in forecast["layouts"]}
    assert rows[3]["start"] is None and rows[3]["start_how"].startswith("sbatch is not available here")
    assert rows[4]["refused"].startswith("runs.r.gpus = 4 is impossible") and "earliest" not in rows[4]
    assert [rows[g]["earliest"] for g in (3, 6)] == [False, True]
    table = format_forecast("r", forecast["layouts"])
    assert [line.split()[0] for line in table.splitlines()[2:4]] == ["3", "*"] and "refused: runs.r.gpus = 4" in table


def test_a_chosen_layout_stands_in_later_parses_and_in_jobs_until_the_config_changes(tmp_path):
    scratch, results = tmp_path / "scratch", tmp_path / "results"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    synthetic_history(scratch, planned(scratch, 6), "12", seconds_per_step=0.6, steps=100)
    first = plan_all(choosing(scratch), env=ENV)["r"]
    (results / "r").mkdir(parents=True)
    (results / "r" / "plan.json").write_text(json.dumps(to_dict(first)))
    synthetic_history(scratch, planned(scratch, 6), "13", seconds_per_step=5.0, steps=100)   # 6 is now slower
    again = plan_all(choosing(scratch), env=ENV, results=results)["r"]
    assert json.dumps(to_dict(again), sort_keys=True) == json.dumps(to_dict(first), sort_keys=True)   # no change
    with pytest.MonkeyPatch.context() as mp:   # inside a job: the same, and the scheduler is never asked
        mp.setattr("airetrain.plan.forecast.predicted_start", lambda *a, **k: pytest.fail("asked inside a job"))
        in_job = plan_workflow(choosing(scratch), in_job=True, results=results)["r"]
    assert in_job.gpus == 6 and in_job.forecast == first.forecast
    changed = choosing(scratch)
    changed["runs"]["r"]["train"] = {"epochs": 3}
    assert plan_all(changed, env=ENV, results=results)["r"].gpus == 3   # forecast again, with 6's slow step


def test_inside_a_job_without_the_chosen_plan_the_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="plan.json with the chosen layout is missing inside the job"):
        plan_workflow(choosing(tmp_path / "scratch"), in_job=True, results=tmp_path / "results")


@pytest.mark.parametrize("forecast, extra, message", [
    ({"choose": "earliest_finish"}, {}, "runs.r.forecast.choose = earliest_finish needs forecast.gpus"),
    ({"gpus": [3, 6]}, {"nodes": 1}, "runs.r.nodes = 1 is set, but forecast.gpus compares layouts"),
    ({"gpus": [4, 5], "choose": "earliest_finish"}, {}, "no layout of forecast.gpus can run"),
    ({"gpus": [3, "six"]}, {}, "runs.r.forecast.gpus.1"),
    ({"choose": "fastest"}, {}, "earliest_finish"),
])
def test_forecast_settings_that_cannot_work_are_refused(tmp_path, forecast, extra, message):
    from airetrain.plan import config as cfg
    from airetrain.plan.planner import forecast_run
    from airetrain.roots import durable_root

    config = {"runs": {"r": {**BASE, **extra, "forecast": forecast}}}
    with pytest.raises(ConfigError, match=message):
        plans = plan_all(config, env=ENV)
        top, runs = cfg.resolve(config)
        forecast_run("r", runs["r"], top, durable_root(None, ENV), ENV)
        assert plans


def test_the_plan_command_forecasts_right_sizes_and_refuses_json_alone(tmp_path):
    scratch = tmp_path / "scratch"
    synthetic_history(scratch, planned(scratch, 3), "11", seconds_per_step=1.0, steps=100)
    cfg = write_config(tmp_path / "c.yaml", {"roots": {"scratch": str(scratch)},
                                             "runs": {"g3": {**BASE, "forecast": {"gpus": [3, 6]}}}})
    env = {"PATH": str(BIN), "HOME": "/home/user", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # no sbatch
    cmd = [str(BIN / "python"), "-m", "airetrain", "plan", "--configfile", str(cfg)]
    shown = run([*cmd, "--forecast", "--right-size"], cwd=tmp_path, env=env, exact_env=True).stdout
    assert "run g3: forecast at" in shown and "sbatch is not available here" in shown
    assert "g3: resources measured, from job 11 of g3" in shown   # --right-size: resources: measured
    data = json.loads(run([*cmd, "--forecast", "--json"], cwd=tmp_path, env=env, exact_env=True).stdout)
    assert [row["gpus"] for row in data["runs"]["g3"]] == [3, 6] and data["runs"]["g3"][1]["earliest"]
    refused = run([*cmd, "--json"], cwd=tmp_path, env=env, exact_env=True, check=False)
    assert refused.returncode == 2 and "--json prints the forecast as data" in refused.stderr
