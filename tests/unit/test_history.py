"""The runs' durable history: one line per finished run and job, its profile and what it measured."""
import json
from pathlib import Path

from airetrain.records import Minutes, Plan
from airetrain.typed import to_dict
from airetrain.plan.planner import plan_all
from airetrain.history import HISTORY, everything, format_history, profile, profile_id, record

from conftest import ENV


def finished_run(results: Path, scratch: Path, name: str, run_cfg: dict, job_id: str | None) -> Plan:
    plan = plan_all({"roots": {"scratch": str(scratch)}, "runs": {name: run_cfg}}, env=ENV)[name]
    out = results / name
    (out / "benchmarks").mkdir(parents=True)
    (out / "plan.json").write_text(json.dumps(to_dict(plan)))
    (out / "train.json").write_text(json.dumps({
        "slurm_job_id": job_id, "steps": 220, "steps_this_session": 220, "train_seconds": 110.0,
        "step_time_s": 0.5, "samples_per_s": 128.0, "data_wait_frac": 0.02}))
    (out / "benchmarks" / "promote.tsv").write_text("s\th:m:s\tmax_rss\n3.25\t0:00:03\t120\n")
    return plan


def test_each_finished_job_leaves_one_line_with_its_profile_and_measurements(tmp_path):
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    plan = finished_run(results, scratch, "a", {"gpus": 6, "batch": {"global": 96, "per_device": 16}}, "4242")
    finished_run(results, scratch, "b", {"gpus": 3, "batch": {"global": 96, "per_device": 32}}, None)
    rows = [{"run": "a", "source": "sacct", "mem_used_mb": 200_000.0, "cpus": 48, "cpu_eff": 0.25, "stage_s": 40.0,
             "elapsed_s": 600.0},
            {"run": "b", "source": "benchmark", "mem_used_mb": float("nan"), "cpus": 24, "cpu_eff": float("nan")},
            {"run": "unfinished"}]
    added = record(results, rows)
    assert [line["run"] for line in added] == ["a", "b"]
    (a, ) = [json.loads(s) for s in (scratch / "airetrain/a" / HISTORY).read_text().splitlines()]
    assert a["job_id"] == "4242" and a["profile"] == profile(plan) and a["profile_id"] == profile_id(profile(plan))
    assert a["profile"]["nodes"] == 2 and a["profile"]["world_size"] == 6 and a["profile"]["per_device_batch"] == 16
    assert a["measured"]["mem_peak_mb_per_node"] == 100_000.0 and a["measured"]["busy_cores_per_node"] == 6.0
    assert a["measured"]["seconds_per_step"] == 0.5 and a["measured"]["promote_s"] == 3.25
    assert a["measured"]["stage_s"] == 40.0 and a["requested"]["mem_mb_per_node"] == plan.slurm.mem_mb
    b = everything(scratch)[1]["measured"]
    assert b["mem_peak_mb_per_node"] is None and b["busy_cores_per_node"] is None   # no accounting: unknown
    assert record(results, rows) == []   # the same jobs again: nothing new
    table = format_history(everything(scratch)).splitlines()
    assert table[0].split()[:3] == ["run", "job", "recorded"] and len(table) == 3
    assert "97.66 GB" in table[1] and "6/" in table[1] and "6xcuda on 2" in table[1]


def test_a_changed_profile_has_another_id():
    plans = plan_all({"runs": {"a": {}, "wider": {"model": {"width": 64}}, "bf": {"precision": "fp32"}}}, env=ENV)
    ids = {name: profile_id(profile(p)) for name, p in plans.items()}
    assert len(set(ids.values())) == 3
    again = plan_all({"runs": {"a": {"train": {"epochs": 99}}}}, env=ENV)["a"]   # more epochs: the same profile
    assert profile_id(profile(again)) == ids["a"]


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


def test_the_report_puts_a_right_sized_run_next_to_the_job_it_learned_from(tmp_path):
    from airetrain.report.render import markdown
    from airetrain.report.collection import run_row

    results, scratch = tmp_path / "results", tmp_path / "scratch"
    first = {"processes": 2, "time_min": {"stage": 10, "train": 60, "promote": 10}, "train": {"epochs": 10}}
    finished_run(results, scratch, "a", first, "4242")
    record(results, [{"run": "a", "source": "sacct", "mem_used_mb": 800.0, "cpus": 2, "cpu_eff": 0.6,
                      "elapsed_s": 240.0}])
    sized = plan_all({"roots": {"scratch": str(scratch)}, "runs": {"b": {**first, "resources": "measured"}}},
                     env=ENV)["b"]
    (results / "b").mkdir()
    (results / "b" / "plan.json").write_text(json.dumps(to_dict(sized)))
    row = run_row(results / "b")
    row.update(mem_eff=0.62, time_eff=0.31, mem_alloc_mb=sized.slurm.mem_mb)   # as sacct would fill them
    from airetrain.report.advice import learned
    text = learned(sized, row, scratch)
    assert row["learned_from"].startswith("job 4242 of a (")
    # a asked for 4 GB and 80 min and used 800 MB and 4 min; b asked for 1 GB (the floor)
    assert text == (f"used MemEff 62.0% of 1.00 GB, TimeEff 31.0% of {sized.time_min.total} min; "
                    "learned from job 4242 of a: MemEff 19.5% of 4.00 GB, TimeEff 5.0% of 80 min")
    shown = markdown([{**row, "right_sizing": text}], ["run", "right_sizing"])
    assert f"Right-sized runs (resources: measured):\n- **b**: {text}" in shown


def test_the_advice_names_the_config_line_that_applies_it():
    from airetrain.report.advice import advise

    row = {"run": "a", "world_size": 2, "job_state": "COMPLETED", "mem_eff": 0.1, "mem_used_mb": 100.0,
           "mem_alloc_mb": 1000.0, "time_eff": 0.1, "elapsed_s": 60.0, "timelimit_s": 600.0}
    tips = advise(row)
    assert "(time_min: stage, train and promote add up to it)" in tips[1]
    assert tips[-1].startswith("to ask for what this run used, set resources: measured in runs.a (or in defaults)")
    assert advise({**row, "learned_from": "job 1 of a"})[-1].startswith("its requests were already right-sized")
    assert not any("resources: measured" in tip for tip in advise({**row, "world_size": None}))   # any SLURM job
    assert advise({**row, "mem_eff": 0.9, "time_eff": 0.9}) == []   # nothing to change, nothing to apply


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
