"""The runs' durable history: one line per finished run and job, its profile and what it measured."""
import json

from airetrain.typed import to_dict
from airetrain.plan.planner import plan_all
from airetrain.rundir.history import HISTORY, everything, format_history, profile, profile_id, record

from conftest import ENV, finished_run


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


def test_the_report_puts_a_right_sized_run_next_to_the_job_it_learned_from(tmp_path):
    from airetrain.report.render import efficiency_markdown
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
    shown = efficiency_markdown([{**row, "right_sizing": text}], ["run", "right_sizing"])
    assert f"Right-sized runs (resources: measured):\n- **b**: {text}" in shown
