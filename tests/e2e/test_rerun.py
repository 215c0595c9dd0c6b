"""Nothing lost when Snakemake runs a training again after it was killed (`--rerun-incomplete`, as the
profiles run it), which removes the train rule's declared outputs first: for the built-in trainer, a
script that logs with job.log, and the Hugging Face Trainer. Each victim is killed after its first durable
checkpoint with its MLflow run behind that checkpoint (the server held with SIGSTOP), so that its next
session must send what the killed one trained and never delivered. Every claim is checked on data
airetrain did not write: the victims' values against uninterrupted twins', MLflow's own history from its
server, W&B's offline files, TensorBoard's reading of its event files."""
import os
import signal
import sys

import pytest
import yaml

from airetrain.rundir import metrics_log
from airetrain.tracking import wandb_files

from conftest import BIN, REPO, end_all, newest_step, read_json, run, spawn, wait_for
from trackers import MlflowServer, each_step_once, histories, wandb_sessions
from user_code import write_ownlab

sys.path.insert(0, str(REPO / "tests" / "torchrun"))   # the users' scripts of the torchrun tests
from frameworks import HF_TRAINER  # noqa: E402
from script_mode import SAVES_EVERYTHING  # noqa: E402

pytestmark = pytest.mark.e2e
# (the twin trained without a kill, the victim), each long enough (held at 0.5-1 s a step) to be mid-run when
# the slowest reaches its first durable checkpoint: 3 epochs of 22 steps saved every 15, a line each step; a
# script saving at each of its 12 epochs of 8 steps; the HF Trainer saving every 10 of 80 steps, a line every 5
# One rank each but the script's: what a rerun keeps is rank 0's, and each rank costs a PyTorch start per session
# (the HF Trainer's about 5 s of CPU).
BUILT_IN = {"processes": 1, "precision": "fp32", "batch": {"global": 64, "per_device": 64}, "model": {"dropout": 0.2},
            "train": {"epochs": 3, "log_every_steps": 1}, "checkpoint": {"every_steps": 15}}
SCRIPT = {"processes": 2, "data": {"name": "synthetic"}}
PAIRS = {"builtin": ({**BUILT_IN}, {**BUILT_IN, "model": {"name": "ownlab.lab:paced", "dropout": 0.2}}),
         "script": ({**SCRIPT, "train": {"script": "own.py", "args": ["--epochs", "12"]}},) * 2,
         "hf": ({**SCRIPT, "processes": 1, "train": {"script": "hf.py", "args": ["--steps", "80"]}},) * 2}
STEPS = {"builtin": 3 * (1437 // 64), "script": 96, "hf": 80}
# each victim's durable checkpoint before the kill: past what MLflow can hold (the HF Trainer logs every 5 steps,
# and its sender may have one more line on its way when the server stops)
SAVED = {"builtin": 15, "script": 8, "hf": 20}


def snakemake(work, config: str, *args, env=None, background=False):
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--configfile", config, *args]
    return spawn(cmd, work / "victims.log", cwd=work, env=env) if background else \
        run(cmd, cwd=work, env=env, timeout=1200)


def durable_step(work, kind: str) -> int:
    folder = work / "scratch/airetrain" / f"{kind}-vic" / "checkpoints"
    if kind == "hf":
        saved = folder.glob("checkpoint-*/trainer_state.json")
        return max((int(p.parent.name.split("-")[1]) for p in saved), default=0)
    return newest_step(folder) if kind == "builtin" else max(
        (int(p.stem.split("-")[1]) for p in folder.glob("step-*.pt")), default=0)


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    work = tmp_path_factory.mktemp("rerun")
    server = MlflowServer(work / "mlflow")
    env = {"PYTHONPATH": str(write_ownlab(work / "code")), "WANDB_SILENT": "true"}
    (work / "own.py").write_text(SAVES_EVERYTHING)
    (work / "hf.py").write_text(HF_TRAINER)
    tracked = {"mlflow": {"tracking_uri": server.url, "experiment": "rerun"}, "wandb": {"project": "rerun"}}
    for which, index in (("refs", 0), ("victims", 1)):
        (work / f"{which}.yaml").write_text(yaml.safe_dump({
            "roots": {"scratch": str(work / "scratch")}, "defaults": {"tracking": tracked},
            "runs": {f"{kind}-{'ref' if index == 0 else 'vic'}": pair[index] for kind, pair in PAIRS.items()}}))
    snakemake(work, "refs.yaml", "--cores", "2", env=env)
    client = server.client()

    def mlflow_step(kind: str) -> int:
        ids = work / "scratch/airetrain" / f"{kind}-vic" / "tracking/run.json"
        run_id = (read_json(ids).get("mlflow") or {}).get("run_id") if ids.exists() else None
        return max((m.step for m in client.get_metric_history(run_id, "train/loss")), default=0) if run_id else 0

    hold = work / "hold"
    hold.touch()
    proc = snakemake(work, "victims.yaml", "--cores", "6", env={**env, "HOLD": str(hold)}, background=True)
    wait_for(lambda: all(mlflow_step(kind) > 0 for kind in PAIRS), timeout=600, what="every victim in MLflow",
             every=0.5)
    os.killpg(server.proc.pid, signal.SIGSTOP)   # the server and its workers: the senders' queues fill
    try:
        logged = lambda kind: max((line.get("step", 0) for line in metrics_log.read(  # noqa: E731
            work / "results" / f"{kind}-vic" / "metrics.jsonl")), default=0)
        wait_for(lambda: all(durable_step(work, kind) >= SAVED[kind] and logged(kind) > SAVED[kind] for kind in PAIRS),
                 timeout=600, what="every victim past its first durable checkpoint", every=0.5)
        end_all(proc)   # SIGKILL: Snakemake, the launchers, torchrun, the ranks, W&B's services
    finally:
        os.killpg(server.proc.pid, signal.SIGCONT)
    behind = {kind: (mlflow_step(kind), durable_step(work, kind)) for kind in PAIRS}
    hold.unlink()
    snakemake(work, "victims.yaml", "--unlock", env=env)   # the killed Snakemake's lock
    snakemake(work, "victims.yaml", "--cores", "2", "--rerun-incomplete", env=env)
    yield work, client, behind
    server.stop()


@pytest.mark.parametrize("kind", list(PAIRS))
def test_a_killed_and_rerun_training_keeps_every_step_once_in_its_history_and_its_trackers(rerun, kind):
    work, client, behind = rerun
    held, saved = behind[kind]
    assert held < saved, f"MLflow was not behind the checkpoint at the kill: {behind}"   # the resend was needed
    ref, vic = (read_json(work / "results" / f"{kind}-{w}" / "train.json") for w in ("ref", "vic"))
    sessions = read_json(work / "results" / f"{kind}-vic" / "run.json")["sessions"]
    assert len(sessions) == 2   # the killed session and the rerun

    # metrics.jsonl: Snakemake removed it before the rerun; the history on scratch brought it back whole
    lines = {w: [line for line in metrics_log.read(work / "results" / f"{kind}-{w}" / "metrics.jsonl")
                 if "loss" in line] for w in ("ref", "vic")}
    assert [line["step"] for line in lines["vic"]] == [line["step"] for line in lines["ref"]]
    assert len({line["step"] for line in lines["vic"]}) == len(lines["vic"]) and lines["vic"][-1]["step"] == STEPS[kind]
    assert [line["loss"] for line in lines["vic"]] == [line["loss"] for line in lines["ref"]]

    # MLflow's server: one run, every step once, the uninterrupted twin's values
    runs = client.search_runs([vic["tracking"]["mlflow"]["experiment_id"]], f"tags.`airetrain.run` = '{kind}-vic'")
    assert [r.info.run_id for r in runs] == [vic["tracking"]["mlflow"]["run_id"]]
    theirs, ours = (histories(client, t["tracking"]["mlflow"]["run_id"]) for t in (ref, vic))
    assert [s for s, _ in ours["train/loss"]] == [s for s, _ in theirs["train/loss"]] == \
        [line["step"] for line in lines["ref"]]
    assert [v for _, v in ours["train/loss"]] == pytest.approx([v for _, v in theirs["train/loss"]], rel=1e-6)

    # W&B's offline files: one run id over both sessions, every step once
    [(run_id, files)] = wandb_sessions(work / "scratch", f"{kind}-vic").items()
    assert run_id == vic["tracking"]["wandb"]["id"]
    steps = each_step_once([row for rows in files for row in rows])
    assert steps["train/loss"] == [line["step"] for line in lines["ref"]]


def test_tensorboard_reads_one_curve_across_the_sessions(rerun):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    work, _, _ = rerun
    curves = {}
    for w in ("ref", "vic"):
        events = EventAccumulator(str(work / "results" / f"builtin-{w}" / "tensorboard"))
        events.Reload()
        curves[w] = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert len(list((work / "results/builtin-vic/tensorboard").glob("events.*"))) == 2   # a file per session
    assert [s for s, _ in curves["vic"]] == list(range(1, STEPS["builtin"] + 1))   # each step once
    assert [s for s, _ in curves["vic"]] == [s for s, _ in curves["ref"]]
    assert [v for _, v in curves["vic"]] == pytest.approx([v for _, v in curves["ref"]])


def test_the_wandb_files_read_here_are_the_ones_the_runs_wrote(rerun):
    """wandb_files reads W&B's own format: the victim's files hold its run id and config as W&B wrote them."""
    work, _, _ = rerun
    folder = work / "scratch/airetrain/builtin-vic/tracking/wandb/wandb"
    vic = read_json(work / "results/builtin-vic/train.json")
    first = wandb_files.sessions(folder, vic["tracking"]["wandb"]["id"])[0]
    assert wandb_files.config(first)["model.name"] == "ownlab.lab:paced"
