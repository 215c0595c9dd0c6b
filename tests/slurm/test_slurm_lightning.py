"""A Lightning script with airetrain's callback on the SLURM test cluster: two nodes of two ranks
(gloo), the staged digits, a deadline stop, a requeue of the same job, and a finish at the planned
step from the stopped session's durable checkpoint; `airetrain status` shows its step while it
trains, and the report its samples/s."""
import csv
import json
import sys
from pathlib import Path

import pytest

from airetrain.run_log import sessions, stops
from conftest import ending_what_it_starts, read_json, run, snakemake_cmd, spawn, wait_for, write_config
from test_slurm import SLURM_ARGS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torchrun"))
from frameworks import LIGHTNING  # noqa: E402

pytestmark = pytest.mark.slurm
EPOCHS, STEPS_PER_EPOCH = 6, 23   # 1437 samples over 4 ranks: 360 each, in batches of 16


@pytest.fixture(scope="module")
def lightning_run(slurm_cluster, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("lightning")
        (work / "train.py").write_text(LIGHTNING)
        hold = work / "hold"
        cfg = write_config(work / "config.yaml", {
            "roots": {"scratch": str(work / "scratch")},
            "site": {"gpus_per_node": 2},   # two nodes of two ranks: the GPU plan on CPU processes
            "runs": {"pl": {
                "device": "cpu", "gpus": 4, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
                "batch": {"global": 64, "per_device": 16}, "data": {"name": "digits"},
                # a 4-minute job that stops 2.5 minutes before its end, held at a second a step until then
                "time_min": {"stage": 1, "train": 2, "promote": 1},
                "checkpoint": {"stop_margin_min": 2.5, "max_requeues": 20},
                "train": {"script": str(work / "train.py"), "args": ["--epochs", str(EPOCHS), "--batch", "16"]}}},
        })
        hold.touch()
        # each job's own $TMPDIR, purged when it ends (the cluster's TaskProlog and Epilog), as Aire's
        env = {**slurm_cluster, "AIRETRAIN_LAB_JOB_TMPDIR": "1", "HOLD": str(hold)}
        pipeline = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS), work / "pipeline.log", cwd=work, env=env)
        metrics = work / "results" / "pl" / "metrics.jsonl"
        wait_for(lambda: metrics.exists() and '"loss"' in metrics.read_text(), timeout=400, what="a logged step")
        status = json.loads(run([sys.executable, "-m", "airetrain", "status", "--configfile", str(cfg), "--json"],
                                cwd=work, env=env).stdout)
        wait_for(lambda: stops(work / "scratch" / "airetrain" / "pl"), timeout=400, what="the deadline stop")
        hold.unlink()
        assert pipeline.wait(timeout=900) == 0, (work / "pipeline.log").read_text()[-5000:]
        return work, env, {row["run"]: row for row in status}


def test_a_lightning_script_on_two_nodes_stops_requeues_and_finishes_from_its_durable_checkpoint(lightning_run):
    work = lightning_run[0]
    durable = work / "scratch" / "airetrain" / "pl"
    stopped = stops(durable)
    assert [(s["reason"], s["action"]) for s in stopped] == [("deadline", "requeued")], stopped
    starts = sessions(durable)
    assert len(starts) == 2 and len({s["slurm_job_id"] for s in starts}) == 1   # the same job, requeued
    worlds = [json.loads(line) for line in (work / "results/pl/sessions.jsonl").read_text().splitlines()]
    assert [w["world_size"] for w in worlds] == [4, 4] and worlds[0]["resumed_from"] is None
    assert worlds[1]["resumed_from"] == str(durable / "checkpoints" / f"step-{stopped[0]['step']:08d}.ckpt")
    final = read_json(work / "results/pl/final.json")
    assert final["step"] == EPOCHS * STEPS_PER_EPOCH == read_json(work / "results/pl/train.json")["steps"]


def test_status_showed_its_step_and_the_report_its_samples_per_second(lightning_run):
    work, _, status = lightning_run
    assert status["pl"]["state"] == "training" and f"/{EPOCHS * STEPS_PER_EPOCH}" in status["pl"]["detail"], status
    with open(work / "results" / "report" / "efficiency.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["run"] == "pl")
    assert float(row["samples_per_s"]) > 0
