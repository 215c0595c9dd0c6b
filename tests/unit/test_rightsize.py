"""plan/rightsize.py: resources: measured asks for what finished runs of the same profile used, and a
right-sized run keeps its requests while its profile is the same."""
import json

from airetrain.rundir.history import record
from airetrain.plan.planner import plan_all
from airetrain.records import Minutes
from airetrain.typed import to_dict

from conftest import ENV, finished_run


def test_resources_measured_asks_for_what_the_same_profile_used(tmp_path):
    import math

    results, scratch = tmp_path / "results", tmp_path / "scratch"
    first = {"processes": 2, "time_min": {"stage": 10, "train": 60, "promote": 10}, "train": {"epochs": 10}}
    finished_run(results, scratch, "a", first, "4242")
    (results / "a" / "benchmarks" / "train.tsv").write_text("s\th:m:s\tmax_rss\n140.0\t0:02:20\t900\n")
    record(results, [{"run": "a", "source": "sacct", "mem_used_mb": 2000.0, "cpus": 2, "cpu_eff": 0.6,
                      "stage_s": 30.0}])
    config = {"roots": {"scratch": str(scratch)}, "runs": {
        "b": {**first, "resources": "measured", "train": {"epochs": 20}},   # the same profile, twice the epochs
        "wider": {**first, "resources": "measured", "model": {"width": 64}},
        "as_asked": first}}
    plans = plan_all(config, env=ENV)
    b = plans["b"]
    assert b.mem_gb_per_node == math.ceil(2000 * 1.25 / 1024 * 10) / 10 == 2.5 and b.slurm.mem_mb == 2560
    assert b.cpus_per_rank == math.ceil(0.6 * 2 * 1.25 / 2) == 1
    train_min = math.ceil((0.5 * 440 * 1.3 + (140 - 110)) / 60 + 5)   # 0.5 s/step, 22 steps/epoch x 20, start-up 30 s
    assert b.time_min == Minutes(stage=1, train=train_min, promote=1, total=train_min + 2)
    assert b.right_sized["from"].startswith("job 4242 of a (") and b.right_sized["runs_measured"] == 1
    assert "peak 2000 MB per node x 1.25" in b.right_sized["mem_gb_per_node"]["how"]
    # another profile uses no history, and says so; without resources: measured nothing changes
    assert plans["wider"].right_sized is None and plans["wider"].time_min.total == 80
    assert any("no finished run has this profile" in w for w in plans["wider"].warnings)
    assert plans["as_asked"].right_sized is None and plans["as_asked"].mem_gb_per_node == 4
    from airetrain.plan.overview import format_table
    assert "b: resources measured, from job 4242 of a" in format_table(plans)


def test_a_right_sized_run_keeps_its_requests_as_the_history_grows(tmp_path):
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    first = {"processes": 2, "train": {"epochs": 10}}
    finished_run(results, scratch, "a", first, "1")
    record(results, [{"run": "a", "source": "sacct", "mem_used_mb": 2000.0, "cpus": 2, "cpu_eff": 0.6}])
    config = {"roots": {"scratch": str(scratch)}, "runs": {"b": {**first, "resources": "measured"}}}
    planned = plan_all(config, env=ENV, results=results)["b"]
    (results / "b").mkdir()
    (results / "b" / "plan.json").write_text(json.dumps(to_dict(planned)))   # as the plan rule writes it
    finished_run(results, scratch, "c", first, "2")   # later, another run of the profile peaks higher
    record(results, [{"run": "c", "source": "sacct", "mem_used_mb": 6000.0, "cpus": 2, "cpu_eff": 0.6}])
    assert plan_all(config, env=ENV, results=results)["b"] == planned   # parsed again (in a job, or later)
    fresh = plan_all(config, env=ENV)["b"]   # planned anew: the larger peak counts
    assert fresh.mem_gb_per_node == 7.4 > planned.mem_gb_per_node == 2.5


def test_right_sized_cores_leave_the_loader_what_it_needs(tmp_path):
    from conftest import synthetic_history

    scratch = tmp_path / "scratch"
    base = {"gpus": 3, "cpus_per_rank": 8, "batch": {"global": 96}, "train": {"epochs": 2}}

    def sized(extra: dict, data_wait: float) -> dict:
        config = {"roots": {"scratch": str(scratch)}, "runs": {"r": {**base, **extra}}}
        (scratch / "airetrain").mkdir(parents=True, exist_ok=True)
        for old in (scratch / "airetrain").glob("*/history.jsonl"):
            old.unlink()
        line = synthetic_history(scratch, plan_all(config, env=ENV)["r"], "7", seconds_per_step=0.5, steps=100)
        line["measured"].update(busy_cores_per_node=3.0, data_wait_frac=data_wait)
        (scratch / "airetrain/r/history.jsonl").write_text(json.dumps(line) + "\n")
        config["runs"]["r"]["resources"] = "measured"
        return plan_all(config, env=ENV)["r"].right_sized["cpus_per_rank"]

    fed = sized({}, 0.02)   # 3 busy cores x 1.25 over 3 ranks: 2 each, and the workers follow
    assert fed["value"] == 2 and fed["how"].endswith("data.workers follows: 1 (cpus_per_rank - 1)")
    assert sized({"data": {"workers": 4}}, 0.02) == {
        "value": 5, "how": "3.00 busy cores per node x 1.25 over 3 ranks, raised to data.workers + 1"}
    starved = sized({}, 0.3)   # the loader could not keep up with 8 cores a rank: they stay
    assert starved["value"] == 8 and "waited for data 30%" in starved["how"]
