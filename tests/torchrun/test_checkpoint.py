"""Checkpoints that survive anything, with real torchrun processes (gloo on CPU).

Every interruption here (SIGKILL of everything, the deadline, SIGTERM, one dead worker) must end,
after resuming, with the same parameters and optimizer state as an uninterrupted run, bit for bit.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from airetrain.checkpoint import store
from airetrain.checkpoint.store import CheckpointError
from airetrain.rundir.fingerprints import fingerprint as config_fingerprint

from conftest import (assert_identical, descendants, end_all, final_state, launch_training, newest_step,
                      prepare_training, read_json, run, spawn, wait_for)

# 2 ranks x 2 micro-batches of 16; dropout, so that the random streams matter; a save every 3 steps.
# fp32: what is tested here is the checkpoint, not the precision (docs/development.md)
LONG = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 16}, "model": {"dropout": 0.2},
        "train": {"epochs": 10, "log_every_steps": 10}, "checkpoint": {"every_steps": 3, "keep": 3}}
STEPS = 10 * (1437 // 64)


def start(cmd, log: Path, env=None) -> subprocess.Popen:
    """`airetrain launch` in the background, its output in log."""
    return spawn(cmd, log, env=env)


def durable_dir(tmp: Path, name="t") -> Path:
    return tmp / "scratch" / "airetrain" / name / "checkpoints"


def kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher, torchrun, every worker and loader process, at once."""
    end_all(proc)


def planned(out: Path):
    """The run's plan, as the trainer reads it."""
    from airetrain.records import read_plan
    return read_plan(out)


def every_listed_checkpoint_verifies(*directories: Path) -> int:
    """Each checkpoint a manifest lists hashes and loads; returns how many there were."""
    count = 0
    for directory in directories:
        for entry in store.entries(directory):
            store.verify(directory / entry["file"], entry)
            count += 1
    return count


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """LONG, uninterrupted."""
    tmp = tmp_path_factory.mktemp("reference")
    out, _ = launch_training(tmp, LONG)
    return final_state(out, tmp)


def rot_one_file(durable: Path) -> tuple[dict, Path]:
    """Change a byte of the newest durable checkpoint (for DCP, of one shard file), as a disk that
    rots after verification would: (its manifest entry, the changed file)."""
    entry = store.entries(durable)[-1]
    path = durable / entry["file"]
    if path.is_dir():
        path = path / next(name for name in sorted(entry["files"]) if name.endswith(".distcp"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256 does not match"):   # the rot is real
        store.verify(durable / entry["file"], entry)
    return entry, path


def killed_and_resumed_equals_uninterrupted(tmp_path, cfg, steps: int, reference_cfg=None, env=None,
                                            rot=False) -> dict:
    """Train cfg (or reference_cfg) uninterrupted; train cfg again, SIGKILL everything after a
    checkpoint at step 12 or later, resume; the final model and optimizer must be identical.
    With rot, the newest durable checkpoint also rots before the resume and the fast root's copies
    are gone (as after the job's end): the resume must name it and go on from the one before.
    Returns the resumed train.json."""
    ref_out, _ = launch_training(tmp_path / "ref", reference_cfg or cfg, env=env)
    out, cmd = prepare_training(tmp_path / "cut", cfg, env=env)
    proc = start(cmd, tmp_path / "cut.log", env=env)
    at_least = 15 if rot else 12   # with rot, the one before the newest is still past step 12
    wait_for(lambda: newest_step(durable_dir(tmp_path / "cut")) >= at_least, what=f"a checkpoint at step {at_least}")
    kill_all(proc)
    assert not (out / "train.json").exists()
    if rot:
        shutil.rmtree(tmp_path / "cut" / "fast" / "airetrain" / "t" / "checkpoints")
        durable = durable_dir(tmp_path / "cut")
        rotten, changed = rot_one_file(durable)
        previous = [e["step"] for e in store.entries(durable)][-2]
    resumed = run(cmd, env=env)
    summary = read_json(out / "train.json")
    assert 12 <= summary["resumed_from_step"] < summary["steps"] == steps
    if rot:
        assert f"skipping checkpoint: {changed}: sha256 does not match" in resumed.stdout, resumed.stdout
        assert summary["resumed_from_step"] == previous < rotten["step"]
    assert summary["checkpoint"]["kind"] == ("dcp" if cfg.get("strategy") == "fsdp" else "file")
    assert_identical(final_state(out, tmp_path), final_state(ref_out, tmp_path))
    return summary


def test_fsdp_resumes_after_a_kill_and_a_rotten_shard_bit_exactly(tmp_path):
    """DDP's resumes are the kill -9 test's below; FSDP's sharded checkpoints (DCP) here, the newest
    with one shard file rotten, so that the resume goes on from the one before."""
    killed_and_resumed_equals_uninterrupted(
        tmp_path, {**LONG, "strategy": "fsdp", "train": {"epochs": 5, "log_every_steps": 10}}, steps=5 * 22,
        rot=True)


def curves_continue_across_the_resumes(logdir, steps: int, sessions: int) -> None:
    """TensorBoard's own reader sees every curve once per logged step, in order, across the sessions."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert len(list(logdir.glob("events.out.tfevents.*"))) == sessions   # the killed ones and the last
    curves = EventAccumulator(str(logdir))
    curves.Reload()
    tags = set(curves.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/samples_per_s", "train/data_wait_frac", "eval/loss",
            "eval/accuracy"} <= tags
    for tag in ("train/loss", "train/lr"):
        assert [e.step for e in curves.Scalars(tag)] == sorted({*range(10, steps + 1, 10), steps}), tag
    # an evaluation at the end of every epoch (train.eval_every_epochs: 1), each once
    per_epoch = 1437 // 64
    assert [e.step for e in curves.Scalars("eval/accuracy")] == list(range(per_epoch, steps + 1, per_epoch))


AUGMENTED = """
import random
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset


class Noisy(Dataset):
    \"\"\"y = 1 when the sum of x is positive; every load adds noise from all three global generators.\"\"\"
    def __init__(self, split):
        g = torch.Generator().manual_seed(0 if split == "train" else 1)
        self.x = torch.randn(512, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()
        self.meta = {"shape": [8], "classes": 2}

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.002)   # a loader with some work to do: the kill lands mid-run
        noise = 0.1 * torch.randn(8) + random.gauss(0, 0.1) + float(np.random.normal(0, 0.1))
        return self.x[i] + noise, int(self.y[i])


def dataset(split, root):
    return Noisy(split)


def model(meta, cfg):
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))
"""


def test_a_user_datasets_random_augmentations_replay_exactly_after_a_kill(tmp_path):
    """The uninterrupted reference loads in the training processes (no workers); the killed and
    resumed run has 2 loader workers per rank. Both end identical: each sample's random draws
    depend on (seed, epoch, index) only."""
    (tmp_path / "code" / "auglab").mkdir(parents=True)
    (tmp_path / "code" / "auglab" / "__init__.py").write_text("")
    (tmp_path / "code" / "auglab" / "noisy.py").write_text(AUGMENTED)
    cfg = {"processes": 2, "precision": "fp32", "model": {"name": "auglab.noisy:model"},
           "data": {"name": "auglab.noisy:dataset", "workers": 2},
           "batch": {"global": 64, "per_device": 16}, "train": {"epochs": 8, "log_every_steps": 10},
           "checkpoint": {"every_steps": 3, "keep": 3}}
    killed_and_resumed_equals_uninterrupted(tmp_path, cfg, steps=8 * 8, env={"PYTHONPATH": str(tmp_path / "code")},
                                            reference_cfg={**cfg, "data": {**cfg["data"], "workers": 0}})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nccl, CUDA RNG, DCP of GPU tensors)")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gpu_resume_after_kill_is_bit_exact(tmp_path, strategy):
    """On a GPU: nccl, bf16, dropout drawing from the CUDA RNG, deterministic kernels."""
    cfg = {"gpus": 1, "strategy": strategy, "precision": "bf16", "model": {"width": 32, "dropout": 0.2},
           "data": {"name": "synthetic", "samples": 4096, "shape": [3, 32, 32], "classes": 10},
           "batch": {"global": 64, "per_device": 32}, "train": {"epochs": 30, "deterministic": True},
           "checkpoint": {"every_steps": 16}}
    summary = killed_and_resumed_equals_uninterrupted(tmp_path, cfg, steps=30 * 64)
    assert summary["device"] == "cuda" and summary["gpu_mem_peak_bytes"] > 0


KILLS = 5


def test_kill_9_at_random_moments_never_loses_the_newest_checkpoint(tmp_path, reference, fast_elsewhere):
    """5 SIGKILLs (KILLS) of the launcher, torchrun and the workers at random moments of training and saving,
    with the fast root on another filesystem than scratch, as on Aire (fast_elsewhere): each checkpoint
    is copied to scratch in the background, and kills land in the copies too.

    Every life trains (a new durable checkpoint, so each resume worked) and is alive until the kill,
    which ends it (SIGKILL): torchrun restarts nothing (max_restarts 0), so a life that crashed by
    itself would fail the test instead of hiding behind a restart. Each is killed at a random moment
    up to 0.5 s after its first new checkpoint, at the latest once the fast root shows it has trained
    its share of the steps: the share keeps the lives well inside the run on any machine."""
    out, cmd = prepare_training(tmp_path, {**LONG, "checkpoint": {**LONG["checkpoint"], "max_restarts": 0}})
    fast = tmp_path / "fast" / "airetrain" / "t" / "checkpoints"
    rng = random.Random(1)
    progress = []
    for kill in range(KILLS):
        # the newest checkpoint anywhere: a life that only promotes the fast root's newest has not trained
        before = max(newest_step(fast), newest_step(durable_dir(tmp_path)))
        share = before + max(3, (STEPS * 6 // 10 - before) // (KILLS - kill))
        proc = start(cmd, tmp_path / "launch.log")
        wait_for(lambda: newest_step(durable_dir(tmp_path)) > before or proc.poll() is not None,
                 what="a new durable checkpoint")
        assert proc.poll() is None, f"life {kill} ended by itself (exit {proc.returncode}) before its kill"
        moment = time.monotonic() + rng.uniform(0, 0.5)
        while time.monotonic() < moment and newest_step(fast) < share and proc.poll() is None:
            time.sleep(0.005)
        assert proc.poll() is None, f"life {kill} ended by itself (exit {proc.returncode}) before its kill"
        kill_all(proc)
        assert proc.returncode == -signal.SIGKILL, proc.returncode   # the kill ended it
        assert not (out / "train.json").exists(), "the run finished before it was killed"
        assert every_listed_checkpoint_verifies(fast, durable_dir(tmp_path)) > 0
        # only the newest checkpoint may be missing from scratch (its copy was in flight)
        fast_steps = [e["step"] for e in store.entries(fast)]
        assert len(fast_steps) < 2 or newest_step(durable_dir(tmp_path)) >= fast_steps[-2], fast_steps
        found = store.load_latest([fast, durable_dir(tmp_path)], config_fingerprint(planned(out).config))
        assert found and found[2]["step"] == max(newest_step(fast), newest_step(durable_dir(tmp_path))) > before
        progress.append(found[2]["step"])
    assert progress == sorted(progress) and len(set(progress)) == KILLS and progress[-1] < STEPS
    shared = {e["file"] for e in store.entries(fast)} & {e["file"] for e in store.entries(durable_dir(tmp_path))}
    assert shared and all(os.stat(fast / name).st_ino != os.stat(durable_dir(tmp_path) / name).st_ino
                          for name in shared)   # copied across filesystems, not linked
    print(f"{KILLS} kills, resumed from steps {progress}; checkpoints copied to scratch")
    run(cmd)
    summary = read_json(out / "train.json")
    assert summary["steps"] == STEPS and summary["resumed_from_step"] == progress[-1]
    assert_identical(final_state(out, tmp_path), reference)
    curves_continue_across_the_resumes(out / "tensorboard", STEPS, sessions=KILLS + 1)


def test_a_checkpoint_only_on_the_fast_root_is_promoted_when_the_run_resumes_from_it(tmp_path):
    """As after a kill between writing a checkpoint and copying it to scratch."""
    cfg = {**LONG, "train": {"epochs": 1, "log_every_steps": 10}, "checkpoint": {"every_steps": 100, "keep": 3}}
    out, _ = launch_training(tmp_path, cfg)
    shutil.rmtree(durable_dir(tmp_path))   # the epoch-end checkpoint (step 22) is on the fast root only
    (out / "train.json").unlink()
    launch_training(tmp_path, {**cfg, "train": {"epochs": 2, "log_every_steps": 10}})
    assert read_json(out / "train.json")["resumed_from_step"] == 22
    assert [e["step"] for e in store.entries(durable_dir(tmp_path))] == [22, 44]
    assert every_listed_checkpoint_verifies(durable_dir(tmp_path)) == 2


def test_truncated_and_bit_flipped_checkpoints_are_skipped(tmp_path):
    """The newest durable checkpoint truncated and the one before it with one bit flipped, after they
    were verified, their fast-root copies gone: the resume names each, goes on from the one before,
    and ends bit-identical to an uninterrupted run."""
    cfg = {**LONG, "train": {"epochs": 1, "log_every_steps": 10}, "checkpoint": {"every_steps": 5, "keep": 3}}
    ref_out, _ = launch_training(tmp_path / "ref", {**cfg, "train": {"epochs": 2, "log_every_steps": 10}})
    out, _ = launch_training(tmp_path, cfg)
    durable = durable_dir(tmp_path)
    fingerprint = config_fingerprint(planned(out).config)
    steps = [e["step"] for e in store.entries(durable)]
    assert steps == [15, 20, 22]
    newest, middle = durable / store.file_name(22), durable / store.file_name(20)
    with open(newest, "r+b") as f:          # truncated: a half-copied file
        f.truncate(newest.stat().st_size // 2)
    data = bytearray(middle.read_bytes())   # one flipped bit
    data[len(data) // 3] ^= 0x10
    middle.write_bytes(bytes(data))
    for path, entry in ((newest, store.entries(durable)[2]), (middle, store.entries(durable)[1])):
        with pytest.raises(CheckpointError, match="sha256 does not match"):
            store.verify(path, entry)
    state, path, _ = store.load_latest([durable], fingerprint)
    assert path.name == store.file_name(15) and state["trainer"]["step"] == 15
    # the trainer falls back the same way (the fast root's copies are gone, as after a requeue)
    shutil.rmtree(tmp_path / "fast" / "airetrain" / "t" / "checkpoints")
    (out / "train.json").unlink()
    _, proc = launch_training(tmp_path, {**cfg, "train": {"epochs": 2, "log_every_steps": 10}})
    for rotten in (newest, middle):
        assert f"skipping checkpoint: {rotten}: sha256 does not match" in proc.stdout, proc.stdout
    assert read_json(out / "train.json")["resumed_from_step"] == 15
    assert_identical(final_state(out, tmp_path), final_state(ref_out, tmp_path / "ref"))


def signal_all(proc: subprocess.Popen, signum: int) -> None:
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def test_deadline_stops_every_rank_at_the_same_step_with_a_durable_checkpoint(tmp_path, reference):
    """No SLURM here: the job's end comes from $AIRETRAIN_END_TIME, with a 3 s margin. Once the run has
    logged a step, every process is held (SIGSTOP) until the stop is due, so that no machine can finish
    the run first; a slower machine may reach the deadline before that, and then stops by itself."""
    cfg = {**LONG, "checkpoint": {**LONG["checkpoint"], "stop_margin_min": 0.05}}
    out, cmd = prepare_training(tmp_path, cfg)
    end = time.time() + 11
    due = end - 3
    log = tmp_path / "launch.log"
    proc = start(cmd, log, env={"AIRETRAIN_END_TIME": str(end)})
    metrics = out / "metrics.jsonl"
    wait_for(lambda: (metrics.exists() and metrics.stat().st_size > 0) or time.time() > due
             or proc.poll() is not None, what="a logged step, or the deadline")
    held = time.time() < due and proc.poll() is None
    if held:
        signal_all(proc, signal.SIGSTOP)
        wait_for(lambda: time.time() > due + 0.5, what="the stop to be due")
        signal_all(proc, signal.SIGCONT)
    assert proc.wait(timeout=300) == 75, log.read_text()
    stopped = read_json(out / "STOPPED")
    assert stopped["reason"] == "deadline" and 0 < stopped["step"] < STEPS
    text = log.read_text()
    lines = [line for line in text.splitlines() if "stopping (deadline) after step" in line]
    assert sorted(line.split()[1] for line in lines) == ["0]", "1]"]          # both ranks said so ...
    assert {int(line.rsplit(" ", 1)[1]) for line in lines} == {stopped["step"]}  # ... at the same step
    assert newest_step(durable_dir(tmp_path)) == stopped["step"]
    assert not (out / "train.json").exists()
    print(f"stopped at step {stopped['step']} of {STEPS}" + (" (held until due)" if held else ""))
    run(cmd)   # no deadline now: it resumes and finishes
    summary = read_json(out / "train.json")
    assert summary["resumed_from_step"] == stopped["step"] and not (out / "STOPPED").exists()
    assert_identical(final_state(out, tmp_path), reference)


def logged_steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip()) if path.exists() else ()
    return [line["step"] for line in lines if "loss" in line]   # the training's lines, not the evaluations'


def state(pid: int) -> str:
    """A process's state letter (R, S, T for stopped, Z)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def sigterm_pending(pid: int) -> bool:
    """Whether SIGTERM waits to be delivered to the process (it is held)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return any(int(fields[key], 16) >> (signal.SIGTERM - 1) & 1 for key in ("SigPnd", "ShdPnd"))


def test_sigterm_to_the_launcher_checkpoints_at_the_next_steps(tmp_path):
    """As scancel or a preemption signals the job step: the step in progress finishes, every rank agrees a
    step later, and they stop with a durable checkpoint of that step. Every step is logged here, and the
    ranks are held while the signal reaches them, so the step it arrived after is known."""
    out, cmd = prepare_training(tmp_path, {**LONG, "train": {**LONG["train"], "log_every_steps": 1},
                                           "checkpoint": {"every_steps": None}})
    proc = start(cmd, tmp_path / "launch.log")
    wait_for(lambda: len(logged_steps(out)) >= 3 or proc.poll() is not None, what="training to start")
    ranks = [worker_pid(proc.pid, rank) for rank in (0, 1)]
    for pid in ranks:   # held, so that the steps around the signal are known on any machine
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(state(pid) == "T" for pid in ranks), what="the ranks to be held")
    signalled_after = logged_steps(out)[-1]
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: all(sigterm_pending(pid) for pid in ranks), what="torchrun to pass SIGTERM to every rank")
    for pid in ranks:
        os.kill(pid, signal.SIGCONT)
    assert proc.wait(timeout=300) == 75, (tmp_path / "launch.log").read_text()
    stopped = read_json(out / "STOPPED")
    assert stopped["reason"] == "signal"
    assert signalled_after < stopped["step"] <= signalled_after + 3 < STEPS   # the next steps, not the end
    assert newest_step(durable_dir(tmp_path)) == stopped["step"]


def worker_pid(launcher: int, rank: int) -> int | None:
    for pid in descendants(launcher):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"scripts/train.py" in cmdline and f"RANK={rank}".encode() in environ \
                and b"torch.distributed.run" not in cmdline:
            return int(pid)
    return None


def test_a_killed_worker_is_restarted_and_resumes_under_max_restarts(tmp_path, reference):
    out, cmd = prepare_training(tmp_path, {**LONG, "checkpoint": {**LONG["checkpoint"], "max_restarts": 1}})
    # without this variable torch 2.13's restarted group mostly fails (README, "Dead workers")
    assert read_json(out / "plan.json")["env"]["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    proc = start(cmd, tmp_path / "launch.log")
    wait_for(lambda: newest_step(durable_dir(tmp_path)) >= 6, what="a checkpoint")
    victim = worker_pid(proc.pid, 1)
    assert victim, "rank 1's process was not found"
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=300) == 0, (tmp_path / "launch.log").read_text()
    summary = read_json(out / "train.json")
    assert 6 <= summary["resumed_from_step"] < STEPS and summary["steps"] == STEPS
    assert_identical(final_state(out, tmp_path), reference)
