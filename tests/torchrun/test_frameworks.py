"""The frameworks' callbacks with real torchrun (gloo, 2 processes) and the real packages: a Hugging
Face Trainer killed with SIGKILL resumes from its durable checkpoint to an uninterrupted run's
weights; a callback's module without its framework says how to install it."""
import shutil
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

from airetrain.rundir import metrics_log
from conftest import end_all, prepare_training, read_json, run, spawn, wait_for
from frameworks import HF_TRAINER, LIGHTNING



def hf_run(tmp_path, steps: int):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.py").write_text(HF_TRAINER)
    train = {"script": str(tmp_path / "train.py"), "args": ["--steps", str(steps)]}
    return prepare_training(tmp_path, {"processes": 2, "data": {"name": "synthetic"}, "train": train}, name="hf")


def test_a_killed_hf_trainer_resumes_from_its_durable_checkpoint_to_the_uninterrupted_weights(tmp_path):
    ref_out, ref_cmd = hf_run(tmp_path / "ref", 60)
    run(ref_cmd, cwd=tmp_path / "ref")
    # the Trainer makes its default output_dir before any callback runs: the callback leaves no empty folder
    assert not (tmp_path / "ref" / "trainer_output").exists()
    out, cmd = hf_run(tmp_path / "cut", 60)
    hold = tmp_path / "hold"
    hold.touch()
    proc = spawn(cmd, tmp_path / "cut.log", env={"HOLD": str(hold)})
    durable = tmp_path / "cut" / "scratch" / "airetrain" / "hf" / "checkpoints"
    wait_for(lambda: (durable / "checkpoint-20" / "trainer_state.json").exists(), timeout=300,
             what="a durable checkpoint-20", every=0.2)
    end_all(proc)   # SIGKILL: the launcher, torchrun, both ranks
    assert not (out / "final.json").exists()
    shutil.rmtree(tmp_path / "cut" / "fast" / "airetrain" / "hf" / "checkpoints")   # as at a job's end
    hold.unlink()
    run(cmd)
    final, reference = read_json(out / "final.json"), read_json(ref_out / "final.json")
    assert final["step"] == 60 and final["output_dir"].endswith("/airetrain/hf/checkpoints")   # unset: airetrain's
    assert final["resumed_from"].startswith(str(durable)) and int(final["resumed_from"].rsplit("-", 1)[1]) >= 20
    assert reference["last_loss"] < reference["first_loss"] - 0.5   # it learns
    a, b = load_file(out / "final" / "model.safetensors"), load_file(ref_out / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the resume is not exact"
    assert final["last_loss"] == reference["last_loss"]
    steps = [line["step"] for line in metrics_log.read(out / "metrics.jsonl")]
    assert steps[-1] == 60 and 20 in steps   # its lines reached metrics.jsonl, for status and the report


def test_an_hf_trainer_stops_at_its_deadline_with_a_checkpoint_and_resumes_to_the_planned_step(tmp_path):
    """The deadline sets should_save and should_training_stop on both ranks: checkpoint-<N>/ is saved at
    the step the ranks agreed on, STOPPED names it, the launch exits 75 (outside SLURM: run it again),
    and the next session resumes there and ends at the planned step."""
    out, cmd = hf_run(tmp_path, 60)
    hold = tmp_path / "hold"   # a second a step: the 60 steps outlast the deadline, which falls while it trains
    hold.touch()
    margin_s = 60 * read_json(out / "plan.json")["config"]["checkpoint"]["stop_margin_min"]
    stopped = run(cmd, env={"AIRETRAIN_END_TIME": str(time.time() + margin_s + 45), "HOLD": str(hold)}, check=False)
    assert stopped.returncode == 75, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    stop = read_json(out / "STOPPED")
    assert stop["reason"] == "deadline" and 1 < stop["step"] < 60 and stop["of_steps"] == 60
    logged = [line["step"] for line in metrics_log.read(out / "metrics.jsonl") if "step" in line]
    assert 0 < max(logged) <= stop["step"]   # it had trained before the deadline came
    durable = tmp_path / "scratch" / "airetrain" / "hf" / "checkpoints"
    assert (durable / f"checkpoint-{stop['step']}" / "trainer_state.json").exists()   # saved at the stop, durable
    hold.unlink()
    run(cmd)
    final = read_json(out / "final.json")
    assert final["step"] == 60 and final["resumed_from"].endswith(f"/checkpoint-{stop['step']}")


def test_a_callback_without_its_framework_names_the_pip_command(tmp_path):
    """Run where the framework cannot be imported (a finder that refuses it: this machine has it)."""
    hide = ("import sys\nclass Hide:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('transformers', 'lightning', 'pytorch_lightning'):\n"
            "            raise ModuleNotFoundError(name)\nsys.meta_path.insert(0, Hide())\n")
    for module, pip in (("airetrain.hf", "pip install 'transformers[torch]'"),
                        ("airetrain.lightning", "pip install lightning")):
        done = subprocess.run([sys.executable, "-c", hide + f"import {module}"], capture_output=True, text=True)
        assert done.returncode == 1 and pip in done.stderr, done.stderr[-2000:]


def lightning_run(tmp_path, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.py").write_text(LIGHTNING)
    train = {"script": str(tmp_path / "train.py"), "args": ["--epochs", "3", *args]}
    return prepare_training(tmp_path, {"processes": 2, "data": {"name": "digits"}, "train": train}, name="pl")


def test_lightning_trains_in_torchruns_world_stops_at_its_deadline_and_resumes_from_scratch(tmp_path):
    """devices left unset: the plan's 2 ranks train one model (Lightning alone would train two copies);
    a deadline stop saves step-N.ckpt and exits 75 (outside SLURM: run again); the fast root purged as
    at a job's end, the next session resumes from the durable copy and finishes at the planned step."""
    ref_out, ref_cmd = lightning_run(tmp_path / "ref")
    run(ref_cmd)
    out, cmd = lightning_run(tmp_path)
    stopped = run(cmd, env={"AIRETRAIN_END_TIME": str(time.time() - 1)}, check=False)
    assert stopped.returncode == 75, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    stop = read_json(out / "STOPPED")
    assert stop["reason"] == "deadline" and stop["step"] >= 1 and stop["of_steps"] == 3 * 23
    shutil.rmtree(tmp_path / "fast" / "airetrain" / "pl" / "checkpoints")
    run(cmd)
    final = read_json(out / "final.json")
    durable = tmp_path / "scratch" / "airetrain" / "pl" / "checkpoints"
    assert final["resumed_from"] == str(durable / f"step-{stop['step']:08d}.ckpt")
    assert final["world_size"] == 2 and final["step"] == 3 * 23 and final["val_loss"] < 2.0
    a, b = torch.load(out / "final.pt", weights_only=True), torch.load(ref_out / "final.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the resume is not exact"
    # ModelCheckpoint's own file, given no dirpath, went to the checkpoint directory and is durable
    assert list(durable.glob("epoch=*-step=*.ckpt"))
    train = read_json(out / "train.json")   # the callback's lines, as the report and the results table read them
    assert train["samples_per_s"] > 0 and train["steps"] == 3 * 23 and train["eval_loss"] == final["val_loss"]
    assert 0.5 < train["eval_accuracy"] == train["eval_metrics"]["accuracy"]


def test_lightning_with_devices_that_disagree_with_the_plan_fails_at_the_start_naming_both(tmp_path):
    out, cmd = lightning_run(tmp_path, "--devices=1")
    failed = run(cmd, check=False)
    assert failed.returncode != 0 and not (out / "final.json").exists()
    assert "airetrain launched 2 ranks (2 per node on 1 nodes), but this Trainer has devices=1, num_nodes=1" in \
        failed.stdout + failed.stderr


def as_rung(tmp_path, name: str, source: str, data: str, args: list[str]):
    """The script trained as a search's rung of 2 epochs (results/<trial>-e2/, which sets AIRETRAIN_MAX_EPOCHS);
    its results folder."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "train.py").write_text(source)
    train = {"script": str(tmp_path / name / "train.py"), "args": args, "epochs": 2}
    out, cmd = prepare_training(tmp_path / name, {"processes": 2, "data": {"name": data}, "train": train}, name=name)
    rung = out.parent / f"{out.name}-e2"
    shutil.copytree(out, rung)
    run([c.replace(str(out), str(rung)) for c in cmd])
    return rung


def test_as_a_searchs_rung_both_callbacks_stop_at_its_epochs_and_report_each_whole_epoch(tmp_path):
    """A rung of 2 epochs: the Trainers' own 60 steps and 6 epochs give way to train.epochs."""
    out = as_rung(tmp_path, "hf", HF_TRAINER, "synthetic", ["--steps", "60"])
    assert read_json(out / "final.json")["step"] == 2 * 512 // 16   # 2 epochs of 512 sequences, 2 ranks x 8
    out = as_rung(tmp_path, "pl", LIGHTNING, "digits", ["--epochs", "6"])
    evaluations = [line for line in metrics_log.read(out / "metrics.jsonl") if "eval_loss" in line]
    assert [e["epoch"] for e in evaluations] == [1, 2]   # the epochs trained: what a search reports at
    assert read_json(out / "final.json")["step"] == evaluations[-1]["step"] == 2 * 23   # 719 a rank, 32 a batch
