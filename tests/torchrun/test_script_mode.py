"""Script mode with real torchrun (gloo, 2 processes): the user's script runs as it is, its
checkpoint directory becomes durable and verified, and airetrain.job gives it the deadline stop."""
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import assert_identical, end_all, flatten, prepare_training, read_json, run, spawn, wait_for
from script_mode import PLAIN, SAVES_EVERYTHING, WITH_JOB
from trackers import MlflowServer, histories


def script_run(tmp_path, source: str, steps: int, name="s"):
    script = tmp_path / "train.py"
    tmp_path.mkdir(parents=True, exist_ok=True)
    script.write_text(source)
    cfg = {"processes": 2, "precision": "fp32", "batch": {"global": 32, "per_device": 16},
           "data": {"name": "synthetic"}, "train": {"script": str(script), "args": ["--steps", str(steps)]}}
    return prepare_training(tmp_path, cfg, name)


def promote(out):
    run([sys.executable, "-m", "airetrain", "promote", "--plan", str(out / "plan.json"), "--train",
         str(out / "train.json"), "--out", str(out / "checkpoint.json"), "--record", str(out / "run.json")])
    return read_json(out / "checkpoint.json")


def test_a_script_using_airetrain_job_runs_and_its_checkpoints_are_durable(tmp_path):
    out, cmd = script_run(tmp_path, WITH_JOB, steps=24)
    proc = run(cmd)
    assert "launch:" in proc.stdout and "6 file(s) durable" in proc.stdout, proc.stdout   # a save every 4 steps
    train = read_json(out / "train.json")
    assert train["strategy"] == "script" and train["steps"] == 24 and train["final_loss"] is not None
    durable = tmp_path / "scratch/airetrain/s/checkpoints"
    assert sorted(p.name for p in durable.glob("step-*.pt")) == [f"step-{s:08d}.pt" for s in range(4, 25, 4)]
    checkpoint = promote(out)
    assert checkpoint["kind"] == "mirror" and checkpoint["verified"] and len(checkpoint["files"]) == 6
    assert torch.load(durable / "step-00000024.pt", weights_only=True)["step"] == 24


def test_a_script_stopped_at_its_deadline_resumes_to_the_same_parameters_with_its_captured_code(tmp_path):
    reference, ref_cmd = script_run(tmp_path / "ref", WITH_JOB, steps=40)
    run(ref_cmd)
    out, cmd = script_run(tmp_path / "cut", WITH_JOB, steps=40)
    stopped = run(cmd, env={"AIRETRAIN_END_TIME": str(time.time() - 1)}, check=False)
    assert stopped.returncode == 75, stopped.stdout + stopped.stderr   # stopped with a checkpoint: run again
    assert "training stopped (deadline) at step 1 of 40" in stopped.stdout
    assert not (out / "train.json").exists()
    script = tmp_path / "cut" / "train.py"   # edited between the sessions: the resume runs the captured one
    script.write_text('raise SystemExit("the edited script ran")\n' + script.read_text())
    resumed = run(cmd)
    assert "resumed from step 1" in resumed.stdout and "the edited script ran" not in resumed.stdout + resumed.stderr
    assert "/code/" in resumed.stdout.split("launch:", 1)[1].splitlines()[0]   # torchrun ran the capture
    assert_identical(flatten(torch.load(out / "final.pt", weights_only=True)),
                     flatten(torch.load(reference / "final.pt", weights_only=True)), at_least=2)


def test_a_script_that_ignores_airetrain_still_has_its_checkpoints_promoted(tmp_path):
    out, cmd = script_run(tmp_path, PLAIN, steps=24)   # 8 steps per epoch: 3 epochs
    run(cmd)
    checkpoint = promote(out)
    assert sorted(checkpoint["files"]) == ["epoch0.pt", "epoch1.pt", "epoch2.pt"] and checkpoint["verified"]
    durable = tmp_path / "scratch/airetrain/s/checkpoints"
    assert torch.load(durable / "epoch2.pt", weights_only=True)["epoch"] == 2


READS_ITS_DATA = '''
import json, os, sys
from pathlib import Path

import torch.distributed as dist

data, out = Path(sys.argv[1]), Path(sys.argv[sys.argv.index("--out") + 1])   # as pytorch/examples' scripts take them
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    out.write_text(json.dumps({"data": str(data), "files": sorted(p.name for p in data.iterdir()),
                               "argv": sys.argv[1:]}))
dist.destroy_process_group()
'''


def test_a_scripts_arguments_name_airetrains_folders_and_nothing_else_is_expanded(tmp_path):
    """A script that takes its data folder as a positional argument runs unchanged: the staged copy's
    path replaces $AIRETRAIN_DATA_DIR; ${...} and a name inside a word are replaced too, other $ text
    stays literal, and no shell is involved."""
    (tmp_path / "train.py").write_text(READS_ITS_DATA)
    args = ["$AIRETRAIN_DATA_DIR", "--out", "${AIRETRAIN_RESULTS_DIR}/seen.json", "--tag", "run-$AIRETRAIN_RUN",
            "--literal", "$HOME ${USER} $(id) `id` ;"]
    out, cmd = prepare_training(tmp_path, {"processes": 2, "data": {"name": "digits"},
                                           "train": {"script": str(tmp_path / "train.py"), "args": args}}, name="reads")
    run(cmd)
    seen = read_json(out / "seen.json")
    staged = read_json(out / "stage.json")["target"]
    assert seen["data"] == staged and seen["files"] == sorted(p.name for p in Path(staged).iterdir()) != []
    assert seen["argv"] == [staged, "--out", f"{out.absolute()}/seen.json", "--tag", "run-reads",
                            "--literal", "$HOME ${USER} $(id) `id` ;"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    yield started
    started.stop()


def test_a_script_saving_a_namespace_and_numpys_state_resumes_after_a_kill_to_the_same_weights_and_mlflow_run(
        tmp_path, server):
    """SIGKILL after the first durable checkpoint, with MLflow holding steps past it: the resume loads that
    checkpoint whole (it is the run's own, by its recorded sha256), ends bit for bit where an uninterrupted run
    ends, and its one MLflow run holds every step once, with the uninterrupted run's values."""
    config = {"processes": 2, "data": {"name": "synthetic"}, "train": {"script": None, "args": ["--epochs", "4"]}}

    def prepared(where: Path, experiment: str):
        where.mkdir(parents=True)
        (where / "train.py").write_text(SAVES_EVERYTHING)
        tracked = {"mlflow": {"tracking_uri": server.url, "experiment": experiment}}
        return prepare_training(where, {**config, "train": {**config["train"], "script": str(where / "train.py")},
                                        "tracking": tracked}, "s")

    ref, ref_cmd = prepared(tmp_path / "ref", "ref")
    run(ref_cmd)
    out, cmd = prepared(tmp_path / "cut", "cut")
    hold = tmp_path / "hold"
    hold.touch()
    proc = spawn(cmd, tmp_path / "cut.log", env={"HOLD": str(hold)})
    client, durable = server.client(), tmp_path / "cut/scratch/airetrain/s/checkpoints"

    def mlflow_steps() -> list[int]:
        ids = durable.parent / "tracking/run.json"
        run_id = (read_json(ids).get("mlflow") or {}).get("run_id") if ids.exists() else None
        return [m.step for m in client.get_metric_history(run_id, "train/loss")] if run_id else []

    wait_for(lambda: (durable / "step-00000008.pt").exists() and max(mlflow_steps(), default=0) >= 11, timeout=300,
             what="a durable checkpoint and MLflow past it", every=0.2)
    end_all(proc)   # SIGKILL: the launcher, torchrun, the workers
    assert "resumed" not in (tmp_path / "cut.log").read_text()
    saved = max(int(p.stem.split("-")[1]) for d in (durable, tmp_path / "cut/fast/airetrain/s/checkpoints")
                for p in d.glob("step-*.pt"))   # the newest, on scratch or still only on the fast root
    hold.unlink()
    resumed = run(cmd)
    assert f"resumed from step {saved}" in resumed.stdout and 8 <= saved < 32
    assert_identical(flatten(torch.load(out / "final.pt", weights_only=True)),
                     flatten(torch.load(ref / "final.pt", weights_only=True)), at_least=2)
    train = read_json(out / "train.json")
    assert [s["step"] for s in train["sessions"]] == [0, saved]
    assert not any(s["started_over"] for s in train["sessions"])
    reference = histories(client, read_json(ref / "train.json")["tracking"]["mlflow"]["run_id"])
    cut = histories(client, train["tracking"]["mlflow"]["run_id"])
    assert [step for step, _ in cut["train/loss"]] == list(range(1, 33))   # each step once
    assert cut == reference and train["tracking"]["mlflow"]["skipped"] > 0
