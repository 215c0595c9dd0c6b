"""Script mode with real torchrun (gloo, 2 processes): the user's script runs as it is, its
checkpoint directory becomes durable and verified, and airetrain.job gives it the deadline stop."""
import sys
import time
from pathlib import Path

import torch

from conftest import assert_identical, flatten, prepare_training, read_json, run
from script_mode import PLAIN, WITH_JOB


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
