"""airetrain status, folded from a run's files (outside SLURM): planned, training, stopped, done, failed;
and squeue's lines matched to runs by the executor's comment."""
import json

from airetrain.report.status import format_status, parse_squeue, run_status

from conftest import write_plan


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))


def test_each_state_from_the_files(tmp_path):
    results, logs = tmp_path / "results", tmp_path / "logs"
    for name in ("training", "stopped", "done", "failed"):
        write_plan(results, tmp_path, name)
    write(results / "training" / "metrics.jsonl",
          '{"step": 40, "of_steps": 220, "eta_s": 75.0, "epoch": 1, "loss": 0.41, "samples_per_s": 510.0}\n{"step": 5')
    write(results / "stopped" / "STOPPED", {"reason": "deadline", "step": 40, "of_steps": 220})
    write(results / "done" / "train.json", {"eval_loss": 0.06, "eval_accuracy": 0.97, "eval_metrics": {"dice": 0.8},
                                            "slurm_job_id": "77"})
    write(results / "done" / "checkpoint.json", {})
    write(logs / "failed" / "train.log", "starting\nTraceback (most recent call last):\n  File x\n"
                                         "[rank0]: ValueError: data.path has no images\n"
                                         "[rank1]: RuntimeError: Connection closed by peer\n"
                                         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    rows = {name: run_status(name, results, logs, None, {})
            for name in ("planned", "training", "stopped", "done", "failed")}
    assert {n: r["state"] for n, r in rows.items()} == {n: n for n in rows}
    assert rows["training"]["detail"] == "step 40/220 epoch 1 loss 0.4100 510 samples/s ETA 0:01:15"
    assert rows["stopped"]["detail"] == "at step 40/220 (deadline): waiting to resume"
    assert rows["done"]["eval"] == {"eval_loss": 0.06, "eval_accuracy": 0.97, "eval_dice": 0.8}
    assert rows["done"]["job_id"] == "77"
    assert rows["failed"]["error"] == "ValueError: data.path has no images"
    assert rows["failed"]["detail"].endswith(f"({logs / 'failed' / 'train.log'})")
    table = format_status(list(rows.values())).splitlines()
    assert table[0].split() == ["run", "state", "job", "detail"] and len(table) == 6


def test_squeue_lines_are_matched_to_runs_by_the_executors_comment():
    text = ("101|RUNNING|None|2026-12-01T10:00:00|rule_run_demo_promote_stage_train\n"   # as seen on SLURM
            "102|PENDING|Resources|2026-12-01T11:30:00|rule_run_g6_wildcards_run=g6\n"
            "103|RUNNING|None|2026-12-01T10:00:00|an unrelated job\n"
            "104|RUNNING|None|2026-12-01T10:00:00|rule_run_demo_x_stage\n"               # another run's name
            "99|COMPLETING|None|2026-12-01T09:00:00|rule_run_demo_promote_stage_train\n")
    assert parse_squeue(text, ["demo", "g6", "demo_y"]) == {
        "demo": {"job_id": "101", "state": "RUNNING", "reason": "None", "start": "2026-12-01T10:00:00"},
        "g6": {"job_id": "102", "state": "PENDING", "reason": "Resources", "start": "2026-12-01T11:30:00"}}


def test_a_job_waiting_for_the_runs_lock_and_a_run_that_hung_say_so(tmp_path):
    results, logs = tmp_path / "results", tmp_path / "logs"
    run_dir = tmp_path / "scratch/airetrain/x"
    write_plan(results, tmp_path, "x")
    write(run_dir / "trainer.lock", {"slurm_job_id": "812", "host": "n1", "pid": 7, "since": 0})
    write(run_dir / "stops.jsonl", '{"reason": "hang", "step": 6, "action": "restart"}\n'
                                   '{"reason": "deadline", "step": 9, "action": "requeued"}\n')
    running = {"job_id": "815", "state": "RUNNING", "reason": "None", "start": "2026-12-01T10:00:00"}
    row = run_status("x", results, logs, running, {})
    assert row["state"] == "waiting" and row["hangs"] == 1
    assert row["detail"] == "for SLURM job 812, which trains this run (its lock) [1 hang: see hangs/]"
    write(run_dir / "trainer.lock", {"slurm_job_id": "815", "host": "n1", "pid": 7, "since": 0})   # its own
    assert run_status("x", results, logs, running, {})["state"] == "staging"


def test_while_accounting_is_unavailable_the_table_says_so_above_squeues_states(tmp_path):
    write_plan(tmp_path / "results", tmp_path, "a")
    row = {**run_status("a", tmp_path / "results", tmp_path / "logs", None, {}),
           "accounting": "accounting unavailable: sacct gave no answer within 15 s"}
    first, header = format_status([row]).splitlines()[:2]
    assert first == ("SLURM accounting unavailable: sacct gave no answer within 15 s: states are squeue's (queued "
                     "and running jobs); a job that has ended shows no final state until accounting answers again")
    assert header.split() == ["run", "state", "job", "detail"]


def test_a_run_whose_code_changed_since_it_started_says_so_until_it_is_done(tmp_path):
    from airetrain.rundir.capture import ensure

    results, logs = tmp_path / "results", tmp_path / "logs"
    package = tmp_path / "code" / "mylab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("def build(meta, cfg):\n    return None\n")
    plan = write_plan(results, tmp_path, "x", {"model": {"name": "mylab.models:build"}})
    ensure(plan, {"PYTHONPATH": str(tmp_path / "code")})   # its first launch
    write(results / "x" / "STOPPED", {"reason": "deadline", "step": 4, "of_steps": 10, "checkpoint": {}})
    assert "code changed" not in run_status("x", results, logs, None, {})["detail"]
    (package / "models.py").write_text("def build(meta, cfg):\n    return 1\n")
    row = run_status("x", results, logs, None, {})
    assert row["code_changed"] == ["mylab/models.py"]
    assert row["detail"] == "at step 4/10 (deadline): waiting to resume [code changed since this run started]"


def test_a_script_that_started_over_beside_its_durable_checkpoints_is_named(tmp_path):
    from airetrain.rundir.run_log import record_start

    results, script = tmp_path / "results", tmp_path / "train.py"
    script.write_text("")
    write_plan(results, tmp_path, "mine", {"train": {"script": str(script)}})
    run_dir = tmp_path / "scratch/airetrain/mine"
    newest = str(run_dir / "checkpoints/step-00000400.pt")
    record_start(run_dir, {"step": 400, "checkpoint": newest, "started_over": False, "newest": newest})
    assert "started over" not in run_status("mine", results, tmp_path / "logs", None, {})["detail"]
    record_start(run_dir, {"step": 0, "checkpoint": None, "started_over": True, "newest": newest})
    row = run_status("mine", results, tmp_path / "logs", None, {})
    assert row["started_over"] == newest
    assert "[started over at step 0 beside step-00000400.pt: the script never called job.load_latest()]" \
        in row["detail"]
