"""Time limits and scancel on the real SLURM test cluster (tests/slurm/up.sh).

One Snakemake invocation runs three copies of the same training:
- stop: a 4-minute job that stops at its deadline, checkpoints, requeues itself and finishes;
- ref: the same training with time to spare (the uninterrupted result);
- victim: cancelled with scancel mid-training; a second invocation resumes it, and only it;
- script-stop: a user's own script (script mode) that stops at its deadline through airetrain.job;
- pl: a Lightning script with airetrain's callback on two nodes of a rank each, stopped at its deadline
  and requeued in the same way.
stop and ref also log to a real MLflow server on 127.0.0.1 and to W&B offline: a requeued run is one
tracker run, each step once.

stop and victim train at a second per step while the test holds them (tests/user_code.py's paced
model, the same network as ref's), so that no machine is fast enough to finish them before their
deadline or their cancellation; the hold ends once the deadline stop has happened. Every job gets
a $TMPDIR of its own that the cluster purges when the job ends, as Aire's: a requeued job finds
its fast root empty and must resume from the durable copy on scratch.
"""
import csv
import json
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from airetrain.rundir import metrics_log
from airetrain.rundir.run_log import stops
from conftest import (assert_identical, ending_what_it_starts, flatten, make_plan, newest_step, read_json, run,
                      snakemake_cmd, spawn, wait_for, write_config)
from trackers import MlflowServer, each_step_once, histories, wandb_sessions
from test_slurm import SLURM_ARGS
from user_code import write_ownlab
from jobs import sbatch, state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torchrun"))
from script_mode import WITH_JOB  # noqa: E402
from frameworks import LIGHTNING  # noqa: E402

pytestmark = pytest.mark.slurm

# fp32: bf16 on a CPU without native bf16 (AVX2 only) is several times slower, and the sessions
# here must make progress within a short job
TRAINING = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 16}, "model": {"dropout": 0.2},
            "train": {"epochs": 5, "log_every_steps": 100}, "checkpoint": {"every_steps": 10}}
STEPS = 5 * (1437 // 64)
PACED = {"name": "ownlab.lab:paced", "dropout": 0.2}   # ref's small_cnn, a second per step while held
SCRIPT_STEPS = 150
PL_EPOCHS, PL_STEPS_PER_EPOCH = 6, 45   # 1437 digits over 2 ranks: 719 each, in batches of 16


def durable(work, run_name):
    return work / "scratch" / "airetrain" / run_name / "checkpoints"


def final_state(work, run_name):
    path = read_json(work / "results" / run_name / "checkpoint.json")["path"]
    state = torch.load(path, weights_only=True)
    return flatten({"model": state["model"], "optimizer": state["optimizer"]})


def sessions(work, run_name):
    from airetrain.rundir.run_log import sessions as read
    return read(work / "scratch" / "airetrain" / run_name)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    started = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def interrupted(slurm_cluster, mlflow_server, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("requeue")
        tracked = {"wandb": {"project": "requeue"}, "mlflow": {"tracking_uri": mlflow_server.url,
                                                               "experiment": "requeue"}}
        hold = work / "hold"
        cfg = write_config(work / "config.yaml", {
            "roots": {"scratch": str(work / "scratch")},
            "site": {"gpus_per_node": 1},   # pl: two nodes of a rank each (the GPU plan on CPU processes)
            "defaults": TRAINING,
            "runs": {
                # a 4-minute job that stops 2.5 minutes before its end, 90 s after it starts, held at a second
                # a step until then: its first session cannot finish; a later one, no longer held, can (on a
                # slow machine after more than one: max_requeues leaves room for it)
                "stop": {"model": PACED, "time_min": {"stage": 1, "train": 2, "promote": 1},
                         "checkpoint": {"every_steps": 10, "stop_margin_min": 2.5, "max_requeues": 20},
                         "tracking": tracked},
                "ref": {"time_min": {"stage": 2, "train": 10, "promote": 2}, "tracking": tracked},
                "victim": {"model": PACED, "time_min": {"stage": 2, "train": 10, "promote": 2}},
                # a second a step while held (150 s, longer than the session's 90 s): the same 4-minute job and
                # margin stop it part-way
                "script-stop": {"data": {"name": "synthetic"}, "time_min": {"stage": 1, "train": 2, "promote": 1},
                                "checkpoint": {"stop_margin_min": 2.5, "max_requeues": 20},
                                "train": {"script": str(work / "train.py"),
                                          "args": ["--steps", str(SCRIPT_STEPS), "--step-seconds", "1"]}},
                # the staged digits, a second a step while held: the same 4-minute job and margin stop it
                "pl": {"device": "cpu", "gpus": 2, "cpus_per_rank": 1, "mem_gb_per_rank": 2, "data": {"name": "digits"},
                       "batch": {"global": 32, "per_device": 16}, "time_min": {"stage": 1, "train": 2, "promote": 1},
                       "checkpoint": {"stop_margin_min": 2.5, "max_requeues": 20},
                       "train": {"script": str(work / "train_pl.py"),
                                 "args": ["--epochs", str(PL_EPOCHS), "--batch", "16"]}},
            },
        })
        (work / "train.py").write_text(WITH_JOB)
        (work / "train_pl.py").write_text(LIGHTNING)
        write_ownlab(work)
        hold.touch()
        # each job's own $TMPDIR, purged when it ends (the cluster's TaskProlog and Epilog)
        env = {**slurm_cluster, "AIRETRAIN_LAB_JOB_TMPDIR": "1", "HOLD": str(hold)}
        # --retries 0: the cancelled run is left failed, for the second invocation to resume
        first = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--retries", "0"), work / "first.log", cwd=work, env=env)
        runs = work / "scratch" / "airetrain"
        # stop's model file edited the moment its deadline stop is recorded, while SLURM restarts its job: the
        # resumed session would build a network twice as wide from the working tree, and imports the code
        # captured at its first launch. A thread of its own, so that the waits below never delay the edit
        # past the restart.
        lab = work / "ownlab" / "lab.py"
        original = lab.read_text()
        wider = original.replace('build_model({**cfg, "name": "small_cnn"}, meta)',
                                 'build_model({**cfg, "name": "small_cnn", "width": 2 * cfg["width"]}, meta)')
        edited = []

        def edit_at_the_stop():
            wait_for(lambda: stops(runs / "stop"), timeout=600, what="the deadline stop of stop", every=0.01)
            lab.write_text(wider)
            edited.append(time.time())
        editor = threading.Thread(target=edit_at_the_stop, daemon=True)
        editor.start()
        # pl's state while it trains, as `airetrain status` shows it
        pl_metrics = work / "results" / "pl" / "metrics.jsonl"
        wait_for(lambda: pl_metrics.exists() and '"loss"' in pl_metrics.read_text(), timeout=400, what="pl's step")
        pl_status = json.loads(run([sys.executable, "-m", "airetrain", "status", "--configfile", str(cfg), "--json"],
                                   cwd=work, env=env).stdout)
        # cancel the victim once it has a durable checkpoint
        wait_for(lambda: newest_step(durable(work, "victim")) >= 10, timeout=400, what="victim's checkpoint")
        victim_job = sessions(work, "victim")[-1]["slurm_job_id"]
        run(["scancel", victim_job], env=env)
        editor.join(timeout=600)
        assert edited, "stop recorded no deadline stop"
        edited_at = edited[0]
        assert lab.read_text() != original
        wait_for(lambda: stops(runs / "script-stop"), timeout=400, what="the deadline stop of script-stop")
        status = json.loads(run([sys.executable, "-m", "airetrain", "status", "--configfile", str(cfg), "--json"],
                                cwd=work, env=env).stdout)   # stop is still held: it has not finished
        wait_for(lambda: stops(runs / "pl"), timeout=400, what="the deadline stop of pl")
        hold.unlink()   # the stops happened: the rest trains at full speed
        assert first.wait(timeout=900) == 1, (work / "first.log").read_text()[-5000:]   # victim failed (--retries 0)
        lab.write_text(original)   # the second invocation's new run captures the original code
        # the profile's settings: resumes what did not finish, and trains "retried", stopped by a SIGTERM
        retried = retry_a_stop_the_job_cannot_requeue(work, cfg, env)
        return (work, env, victim_job, (work / "first.log").read_text(), (work / "second.log").read_text(), retried,
                {row["run"]: row for row in status}, edited_at, mlflow_server,
                {row["run"]: row for row in pl_status})


def retry_a_stop_the_job_cannot_requeue(work, cfg, env) -> str:
    """The second invocation, with the run "retried" added (held at a second a step): its training step
    gets a SIGTERM (as a preemption without requeue sends it) once it has a checkpoint. Returns the
    job that got it."""
    config = yaml.safe_load(cfg.read_text())
    config["runs"]["retried"] = {"model": PACED, "time_min": {"stage": 2, "train": 10, "promote": 2},
                                 "tracking": config["runs"]["ref"]["tracking"]}
    cfg2 = write_config(work / "config-retried.yaml", config)
    hold = work / "hold-retried"
    hold.touch()
    second = spawn(snakemake_cmd(work, cfg2, *SLURM_ARGS), work / "second.log", cwd=work,
                   env={**env, "HOLD": str(hold)})
    # past the first epoch's evaluation (step 22): the job that fails has lines Snakemake removes before its retry
    wait_for(lambda: newest_step(durable(work, "retried")) >= 30, timeout=400, what="retried's checkpoint")
    job = sessions(work, "retried")[-1]["slurm_job_id"]
    steps = run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], env=env).stdout.split("\n")
    torchrun_step = next(line.split()[0] for line in steps if line.endswith(" bash"))   # srun bash -c 'exec torchrun'
    run(["scancel", "--signal=TERM", torchrun_step], env=env)
    wait_for(lambda: stops(work / "scratch" / "airetrain" / "retried"), timeout=300, what="retried's stop")
    hold.unlink()
    assert second.wait(timeout=900) == 0, (work / "second.log").read_text()[-5000:]
    return job


def test_a_job_at_its_time_limit_stops_requeues_itself_and_finishes_exactly(interrupted):
    work, env = interrupted[0], interrupted[1]
    runs = sessions(work, "stop")
    job_ids = {s["slurm_job_id"] for s in runs}
    assert len(runs) >= 2 and len(job_ids) == 1, runs          # the same job, started again by SLURM
    assert all(s["resumed_from_step"] > 0 for s in runs[1:])
    shown = run(["scontrol", "show", "job", job_ids.pop()], env=env).stdout
    assert f"Restarts={len(runs) - 1}" in shown and "JobState=COMPLETED" in shown
    stopped = stops(work / "scratch" / "airetrain" / "stop")
    assert len(stopped) == len(runs) - 1 and {s["reason"] for s in stopped} == {"deadline"}
    assert {s["action"] for s in stopped} == {"requeued"}
    assert [s["step"] for s in stopped] == [s["resumed_from_step"] for s in runs[1:]]
    # each resume came from the durable copy on scratch: the job's own fast root was purged at its end
    assert all(Path(s["checkpoint"]).parent == durable(work, "stop") for s in runs[1:]), runs
    summary = read_json(work / "results/stop/train.json")
    assert summary["steps"] == STEPS and summary["resumed_from_step"] > 0
    assert read_json(work / "results/stop/checkpoint.json")["verified"]
    # its model file was edited before the requeued session started: that session ran the captured code
    # (the edited one builds another network), and status said so while the run was unfinished
    edited_at = interrupted[7]
    assert runs[0]["started"] < edited_at < runs[1]["started"], (edited_at, runs)
    assert_identical(final_state(work, "stop"), final_state(work, "ref"))
    status = interrupted[6]["stop"]
    assert status["state"] != "done" and any(f.endswith("lab.py") for f in status["code_changed"]), status
    assert "code changed since this run started" in status["detail"]


def test_a_requeued_run_is_one_tracker_run_each_step_once_ended_with_its_weights(interrupted):
    """stop's sessions (a deadline stop, a requeue, a resume) logged to one MLflow run, every step once with
    ref's values, and to one W&B run id; the promote step ended it with the summary, the job and the weights."""
    work, server = interrupted[0], interrupted[8]
    client = server.client()
    stop, ref = (read_json(work / f"results/{name}/train.json")["tracking"] for name in ("stop", "ref"))
    [found] = client.search_runs([stop["mlflow"]["experiment_id"]], "tags.`airetrain.run` = 'stop'")
    assert found.info.run_id == stop["mlflow"]["run_id"] and found.info.status == "FINISHED"
    assert found.info.run_name == "stop" and found.data.params["checkpoint.stop_margin_min"] == "2.5"
    promoted = read_json(work / "results/stop/checkpoint.json")
    assert found.data.params["weights.final.checkpoint_sha256"] == promoted["sha256"]
    assert found.data.params["weights.final.safetensors"] == promoted["weights"]["path"]
    job = sessions(work, "stop")[0]["slurm_job_id"]
    assert found.data.tags["slurm.job_ids"] == job and found.data.metrics["final/steps"] == STEPS
    resumed, reference = histories(client, found.info.run_id), histories(client, ref["mlflow"]["run_id"])
    for name in ("train/loss", "eval/loss", "eval/accuracy", "train/lr"):
        steps = [s for s, _ in resumed[name]]
        assert steps == sorted(set(steps)) == [s for s, _ in reference[name]], name
        assert [v for _, v in resumed[name]] == pytest.approx([v for _, v in reference[name]], rel=1e-5), name
    assert len(sessions(work, "stop")) >= 2   # the requeue happened: more than one session, one tracker run
    [(run_id, wandb)] = wandb_sessions(work / "scratch", "stop").items()
    assert run_id == stop["wandb"]["id"] and len(wandb) >= 3   # the training's sessions, and the promote step's
    assert each_step_once([row for rows in wandb for row in rows])["eval/loss"] == [s for s, _ in resumed["eval/loss"]]
    compared = json.loads(run([sys.executable, "-m", "airetrain", "compare", "stop", "ref", "--json"], cwd=work,
                              env=interrupted[1]).stdout)["figures"]
    assert stop["mlflow"]["url"] in compared["stop"]["tracker"] and stop["wandb"]["id"] in compared["stop"]["tracker"]


def test_after_scancel_a_new_invocation_resumes_only_the_cancelled_run(interrupted):
    work, _, victim_job, first_log, out, *_ = interrupted
    assert f"SLURM jobid {victim_job}" in first_log and "Error in group run_victim" in first_log
    assert "results/victim/train.json" in out
    assert "results/ref/train.json" not in out and "results/stop/train.json" not in out   # not rerun
    summary = read_json(work / "results/victim/train.json")
    assert summary["steps"] == STEPS and summary["resumed_from_step"] >= 10
    assert summary["slurm_job_id"] != victim_job
    resumed = sessions(work, "victim")[-1]   # a new job, with a new fast root: from scratch's copy
    assert Path(resumed["checkpoint"]).parent == durable(work, "victim") and resumed["slurm_job_id"] != victim_job
    assert_identical(final_state(work, "victim"), final_state(work, "ref"))


def test_a_stop_the_job_cannot_requeue_exits_75_and_the_profiles_retries_resume_it(interrupted):
    """A SIGTERM to the training step (as a preemption without requeue sends it) stops the run with a
    checkpoint; SLURM decides what follows, so launch exits 75, the job fails, and the profile's
    `retries: 1` resubmits the run in the same invocation: a new job, which resumes and finishes."""
    work, first_job = interrupted[0], interrupted[5]
    stopped = stops(work / "scratch" / "airetrain" / "retried")
    assert [(s["slurm_job_id"], s["action"]) for s in stopped] == [(first_job, "exit 75")], stopped
    jobs = [s["slurm_job_id"] for s in sessions(work, "retried")]
    assert jobs[0] == first_job and len(set(jobs)) == 2, jobs   # resubmitted by Snakemake, not requeued
    summary = read_json(work / "results/retried/train.json")
    assert summary["steps"] == STEPS and summary["resumed_from_step"] == stopped[0]["step"] >= 30
    assert_identical(final_state(work, "retried"), final_state(work, "ref"))
    # the failed job's lines (the first epoch's evaluation) survive Snakemake's removal of metrics.jsonl, once
    lines = {name: [(line["step"], line.get("loss"), line.get("eval_loss")) for line in
                    metrics_log.read(work / "results" / name / "metrics.jsonl") if "step" in line]
             for name in ("retried", "ref")}
    assert lines["retried"] == lines["ref"] and lines["ref"][0][0] == 1437 // 64
    ours, theirs = (read_json(work / "results" / name / "train.json")["tracking"] for name in ("retried", "ref"))
    client = interrupted[8].client()
    retried, ref = (histories(client, t["mlflow"]["run_id"]) for t in (ours, theirs))
    assert [s for s, _ in retried["eval/loss"]] == [s for s, _ in ref["eval/loss"]] == [22, 44, 66, 88, 110]
    assert [v for _, v in retried["eval/loss"]] == pytest.approx([v for _, v in ref["eval/loss"]])
    [(run_id, files)] = wandb_sessions(work / "scratch", "retried").items()
    assert run_id == ours["wandb"]["id"]
    assert each_step_once([row for rows in files for row in rows])["eval/loss"] == [s for s, _ in ref["eval/loss"]]


def test_after_a_deadline_stop_restarts_cap_requeues_and_a_refusal_exits_75(slurm_cluster, monkeypatch, tmp_path):
    """What launch decides after a deadline stop, against a real job: SLURM's Restarts= against
    checkpoint.max_requeues, `scontrol requeue` itself, and SLURM refusing it (a pending job)."""
    from airetrain.cluster.slurm import job_restarts
    from airetrain.train.launcher.launch import EXIT_STOPPED, _continue

    for key, value in slurm_cluster.items():
        monkeypatch.setenv(key, value)
    job = sbatch("stopped", ["-p", "standard", "-c", "1", "--mem=100M", "-t", "5", "--requeue", "--wrap=sleep 300"])
    stopped = {"reason": "deadline", "step": 40, "of_steps": 100, "checkpoint": {"path": "step-00000040.pt"}}

    def decide(max_requeues):
        plan = make_plan({"checkpoint": {"requeue": True, "max_requeues": max_requeues}}, tmp_path)
        return _continue(plan, stopped, {"SLURM_JOB_ID": job})
    try:
        wait_for(lambda: state(job) == "RUNNING", 120, "the job to start", every=0.5)
        assert decide(0) == (1, "exit 1: max_requeues reached")
        assert state(job) == "RUNNING" and job_restarts(job) == 0          # left alone
        assert decide(1) == (EXIT_STOPPED, "requeued") and job_restarts(job) == 1
        assert decide(2) == (EXIT_STOPPED, "exit 75: requeue refused")    # SLURM: "Job is pending execution"
    finally:
        run(["scancel", job])


def test_a_users_script_at_its_time_limit_stops_requeues_and_ends_as_uninterrupted(interrupted, tmp_path):
    """Script mode: airetrain.job's should_stop sees the deadline from squeue, the script saves and
    calls stop_and_requeue, the launcher requeues the job, and the rerun resumes from the durable copy."""
    from test_script_mode import script_run

    work, env = interrupted[0], interrupted[1]
    stopped = stops(work / "scratch" / "airetrain" / "script-stop")
    assert stopped and {(s["reason"], s["action"]) for s in stopped} == {("deadline", "requeued")}, stopped
    assert 0 < stopped[0]["step"] < SCRIPT_STEPS
    job = stopped[0]["slurm_job_id"]
    assert "JobState=COMPLETED" in run(["scontrol", "show", "job", job], env=env).stdout
    starts = sessions(work, "script-stop")   # the script started again in the same job, from scratch's copy
    assert len(starts) == len(stopped) + 1 and {s["slurm_job_id"] for s in starts} == {job}, starts
    assert starts[0]["checkpoint"] is None and starts[1]["checkpoint"] == str(
        durable(work, "script-stop") / f"step-{stopped[0]['step']:08d}.pt")
    assert read_json(work / "results/script-stop/checkpoint.json")["verified"]
    reference, cmd = script_run(tmp_path, WITH_JOB, steps=SCRIPT_STEPS)   # the same script, uninterrupted, locally
    run(cmd)
    assert_identical(flatten(torch.load(work / "results/script-stop/final.pt", weights_only=True)),
                     flatten(torch.load(reference / "final.pt", weights_only=True)), at_least=2)


def test_a_lightning_script_on_two_nodes_stops_requeues_and_finishes_from_its_durable_checkpoint(interrupted):
    """pl's callback: the deadline stop and requeue of the same job, torchrun's world of 2 (a rank on each node) in
    every session, each resume from scratch's step-N.ckpt (the job's own fast root is purged), the planned end."""
    work = interrupted[0]
    stopped, starts = stops(work / "scratch" / "airetrain" / "pl"), sessions(work, "pl")
    assert stopped and {(s["reason"], s["action"]) for s in stopped} == {("deadline", "requeued")}, stopped
    assert len(starts) == len(stopped) + 1 and len({s["slurm_job_id"] for s in starts}) == 1, starts
    worlds = [json.loads(line) for line in (work / "results/pl/sessions.jsonl").read_text().splitlines()]
    assert [w["world_size"] for w in worlds] == [2] * len(starts) and worlds[0]["resumed_from"] is None
    assert [w["resumed_from"] for w in worlds[1:]] == [
        str(durable(work, "pl") / f"step-{s['step']:08d}.ckpt") for s in stopped]
    final = read_json(work / "results/pl/final.json")
    assert final["step"] == PL_EPOCHS * PL_STEPS_PER_EPOCH == read_json(work / "results/pl/train.json")["steps"]
    # while it trained, `airetrain status` showed its step; the report has its samples/s
    status = interrupted[9]["pl"]
    assert status["state"] == "training" and f"/{PL_EPOCHS * PL_STEPS_PER_EPOCH}" in status["detail"], status
    with open(work / "results" / "report" / "efficiency.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["run"] == "pl")
    assert float(row["samples_per_s"]) > 0
