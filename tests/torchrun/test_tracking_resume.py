"""Trackers with real training (torchrun, gloo on CPU), a real MLflow server on 127.0.0.1 and real W&B
in offline mode: a run killed with SIGKILL and resumed is one tracker run with every step once and
the values of an uninterrupted run; a server that stops mid-run costs figures, never the training;
no credential reaches a file."""
import json
import sys

import pytest

from airetrain.tracking import wandb_files

from conftest import (end_all, launch_training, make_plan, newest_step, prepare_training, read_json, run, spawn,
                      wait_for)
from trackers import SECRETS, MlflowServer, each_step_once, files_holding, histories, wandb_sessions
from user_code import write_ownlab

# 2 ranks, 22 steps an epoch; a line every 5 steps and a save every 20: a resume starts on a log line,
# so that its first line's loss window is the uninterrupted run's, and W&B (which writes a step's row
# once the next one is logged, and its file every 2 s) can hold steps past a save before the next.
# paced: small_cnn, a second a step while $HOLD exists (the same network and numbers as small_cnn).
TRAINING = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 32}, "model": {"dropout": 0.2},
            "train": {"epochs": 3, "log_every_steps": 5}, "checkpoint": {"every_steps": 20, "keep": 2}}
STEPS = 3 * (1437 // 64)
COMPARED = ("train/loss", "train/lr", "train/grad_norm", "train/epoch", "eval/loss", "eval/accuracy")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield started
    started.stop()


def tracked(server: MlflowServer, experiment: str) -> dict:
    return {"wandb": {"project": experiment}, "mlflow": {"tracking_uri": server.url, "experiment": experiment}}


def held_by_trackers(client, tmp, run_id_of) -> tuple[int, int]:
    """The last train/loss step MLflow's server and W&B's offline files hold now (-1: none yet)."""
    ids = read_json(tmp / "scratch" / "airetrain" / "t" / "tracking" / "run.json") \
        if (tmp / "scratch" / "airetrain" / "t" / "tracking" / "run.json").exists() else {}
    mlflow_id, wandb_id = (ids.get("mlflow") or {}).get("run_id"), (ids.get("wandb") or {}).get("id")
    held_mlflow = max((m.step for m in client.get_metric_history(mlflow_id, "train/loss")), default=-1) \
        if mlflow_id else -1
    folder = tmp / "scratch" / "airetrain" / "t" / "tracking" / "wandb" / "wandb"
    held_wandb = wandb_files.last_steps(folder, wandb_id).get("train/loss", -1) if wandb_id else -1
    return held_mlflow, held_wandb


def test_a_killed_and_resumed_run_is_one_tracker_run_with_each_step_once_and_no_secret_in_a_file(tmp_path, server):
    env = {**SECRETS, "PYTHONPATH": str(write_ownlab(tmp_path / "code"))}
    ref_out, _ = launch_training(tmp_path / "ref", {**TRAINING, "tracking": tracked(server, "ref")}, env=env)
    cut = tmp_path / "cut"
    hold = tmp_path / "hold"
    hold.touch()
    out, cmd = prepare_training(cut, {**TRAINING, "model": {"name": "ownlab.lab:paced", "dropout": 0.2},
                                      "tracking": tracked(server, "cut")}, env=env)
    proc = spawn(cmd, tmp_path / "cut.log", env={**env, "HOLD": str(hold)})
    client = server.client()
    saved = lambda: max(newest_step(cut / "scratch" / "airetrain" / "t" / "checkpoints"),   # noqa: E731
                        newest_step(cut / "fast" / "airetrain" / "t" / "checkpoints"))

    def past_the_checkpoint() -> bool:   # both trackers hold steps after the newest checkpoint
        newest = saved()
        return newest >= 20 and min(held_by_trackers(client, cut, None)) >= newest + 5

    wait_for(past_the_checkpoint, timeout=300, what="tracked steps past a checkpoint", every=0.2)
    end_all(proc)   # SIGKILL: the launcher, torchrun, the workers, W&B's service
    held = held_by_trackers(client, cut, None)
    hold.unlink()
    run(cmd, env=env)
    record = read_json(out / "train.json")
    assert min(held) > record["resumed_from_step"] >= 20   # the trackers held steps the resume trains again
    for tracker in ("mlflow", "wandb"):
        t = record["tracking"][tracker]
        assert t["skipped"] > 0 and t["lost"] == 0 and t["error"] is None, t

    # MLflow: one run, each metric's every step once, the uninterrupted run's values
    reference = histories(client, read_json(ref_out / "train.json")["tracking"]["mlflow"]["run_id"])
    resumed = histories(client, record["tracking"]["mlflow"]["run_id"])
    assert len(client.search_runs([record["tracking"]["mlflow"]["experiment_id"]])) == 1
    for name in COMPARED:
        steps = [s for s, _ in resumed[name]]
        assert steps == sorted(set(steps)) == [s for s, _ in reference[name]], name
        assert [v for _, v in resumed[name]] == pytest.approx([v for _, v in reference[name]], rel=1e-5), name
    assert [s for s, _ in resumed["train/loss"]] == [*range(5, STEPS, 5), STEPS]
    params = client.get_run(record["tracking"]["mlflow"]["run_id"]).data.params
    assert params["optim.lr"] == "0.003" and params["model.name"] == "ownlab.lab:paced"

    # W&B offline: one run id over both sessions, every step once across them, the config
    [(run_id, sessions)] = wandb_sessions(cut / "scratch", "t").items()
    assert run_id == record["tracking"]["wandb"]["id"] and len(sessions) == 2
    steps = each_step_once([row for rows in sessions for row in rows])
    assert steps["train/loss"] == [s for s, _ in resumed["train/loss"]]
    folder = cut / "scratch" / "airetrain" / "t" / "tracking" / "wandb" / "wandb"
    assert wandb_files.config(wandb_files.sessions(folder, run_id)[0])["optim.lr"] == 0.003

    # no credential in any file the runs wrote (results, scratch, the fast root, W&B's files and logs)
    assert files_holding(tmp_path, SECRETS.values()) == []
    sbatch = run([sys.executable, "-m", "airetrain", "sbatch", "t", "--configfile",
                  str(write_sbatch_config(tmp_path, server))], env=env, cwd=tmp_path).stdout
    assert "#SBATCH" in sbatch and not any(v in sbatch for v in SECRETS.values())


def write_sbatch_config(tmp_path, server):
    path = tmp_path / "sbatch.yaml"
    path.write_text(json.dumps({"roots": {"scratch": str(tmp_path / "scratch")},
                                "runs": {"t": {**TRAINING, "tracking": tracked(server, "sbatch")}}}))
    return path


def test_a_server_that_stops_mid_run_costs_figures_not_the_training(tmp_path):
    stopping = MlflowServer(tmp_path / "mlflow")
    env = {"PYTHONPATH": str(write_ownlab(tmp_path / "code"))}
    hold = tmp_path / "hold"
    hold.touch()
    out, cmd = prepare_training(tmp_path, {**TRAINING, "train": {"epochs": 1, "log_every_steps": 2},
                                           "model": {"name": "ownlab.lab:paced", "dropout": 0.2},
                                           "tracking": {"mlflow": {"tracking_uri": stopping.url}}}, env=env)
    proc = spawn(cmd, tmp_path / "train.log", env={**env, "HOLD": str(hold)})
    client = stopping.client()
    wait_for(lambda: held_by_trackers(client, tmp_path, None)[0] >= 4, timeout=300, what="logged steps", every=0.2)
    stopping.stop()
    hold.unlink()
    assert proc.wait(timeout=600) == 0, (tmp_path / "train.log").read_text()[-3000:]
    record = read_json(out / "train.json")
    t = record["tracking"]["mlflow"]
    assert record["steps"] == 1437 // 64 and t["logged"] > 0 and t["lost"] > 0 and "Error" in t["error"], t
    assert (tmp_path / "train.log").read_text().count("tracking: mlflow failed") == 1   # warned once

    from airetrain.report.advice import advise
    from airetrain.report.collection import run_row
    tips = advise(run_row(out))
    assert any(tip.startswith(f"tracking: {t['lost']} figures did not reach mlflow") for tip in tips), tips


def test_a_restart_starts_a_new_tracker_run_and_tags_the_old_one_superseded(tmp_path, server, wandb_in_this_process):
    """`airetrain restart` keeps the old tracker runs and marks them; the next training's first session
    creates new ones and tags the old: MLflow's tags, and a W&B offline session of the old run id."""
    from airetrain.restart import restart
    from airetrain.tracking.wandb_files import SESSION
    from airetrain.tracking.trackers import sinks

    plan = make_plan({"device": "cpu", "data": {"name": "synthetic"}, "tracking": tracked(server, "restart")}, tmp_path)

    def session() -> dict:
        found = sinks(plan, tmp_path, fingerprint="fp")
        for sink in found:
            sink.open()
            sink.log(1, {"train/loss": 1.0})
            sink.close()
        return {sink.name: sink.identity.of(sink.name) for sink in found}

    old = session()
    (tmp_path / "results" / "t").mkdir(parents=True)
    assert restart({"t": plan}, ["t"], tmp_path / "results", confirm=lambda paths: True)
    new = session()
    assert new["mlflow"]["run_id"] != old["mlflow"]["run_id"] and new["wandb"]["id"] != old["wandb"]["id"]
    tags = server.client().get_run(old["mlflow"]["run_id"]).data.tags
    assert tags["airetrain.superseded"] == "true" and tags["airetrain.superseded_by"] == new["mlflow"]["run_id"]
    folder = tmp_path / "scratch" / "airetrain" / "t" / "tracking" / "wandb" / "wandb"
    marked = wandb_files.sessions(folder, old["wandb"]["id"])
    assert len(marked) == 2 and wandb_files.config(marked[-1])["airetrain.superseded_by"] == new["wandb"]["id"]
    assert all(SESSION.match(p.parent.name) for p in marked)
