"""A disk that fills, for real: a size-limited tmpfs as the fast root (during a checkpoint) or as the
durable root (at promotion). The write fails with ENOSPC; the error names the root, its free space
and the size needed; nothing half-written has a checkpoint's name; the checkpoint before is intact,
and the run goes on from it once space is freed."""
import errno
import os
import re
from pathlib import Path

import pytest

from airetrain.checkpoint import store
from airetrain.errors import NoSpaceError

from conftest import (BIN, assert_identical, final_state, launch_training, newest_step, prepare_training,
                      read_json, run, spawn, wait_for)

# 2 ranks (the thread writer on this machine's busy cores), a save every 10 steps, 44 steps in all
CFG = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 16}, "model": {"dropout": 0.2},
       "train": {"epochs": 2, "log_every_steps": 10}, "checkpoint": {"every_steps": 10, "keep": 2}}
STEPS = 2 * (1437 // 64)


def fill(root: Path, leave: int) -> Path:
    """A ballast file that leaves `leave` bytes free on root's filesystem. The trainer may be writing there
    at the same time (its next checkpoint): the room is measured again, and the ballast grown again, until
    it fits."""
    ballast = root / "ballast"
    with open(ballast, "wb") as f:
        for _ in range(100):
            free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
            if free <= leave:
                break
            try:
                os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, free - leave)
                break
            except OSError as e:   # the writer took some of the room meanwhile
                if e.errno != errno.ENOSPC:
                    raise
        else:
            raise AssertionError(f"could not fill {root} to {leave} bytes free")
    return ballast


def no_partial_checkpoints(directory: Path) -> list[str]:
    """The checkpoint-named files there, each listed in the manifest and verifying; no temporary file."""
    listed = {e["file"]: e for e in store.entries(directory)}
    names = sorted(p.name for p in directory.iterdir() if p.name.startswith("step-"))
    assert set(names) <= set(listed), f"a checkpoint's name the manifest does not list: {names}"
    for name in names:
        store.verify(directory / name, listed[name])
    assert not [p.name for p in directory.glob(".*")], "a temporary file was left behind"
    return names


def test_a_fast_root_that_fills_during_a_checkpoint_fails_clearly_and_the_run_resumes(tmp_path, small_filesystem):
    ref_out, _ = launch_training(tmp_path / "ref", CFG)
    fast = small_filesystem(tmp_path / "fast", "40m")
    out, cmd = prepare_training(tmp_path, CFG)
    durable = tmp_path / "scratch" / "airetrain" / "t" / "checkpoints"
    checkpoints = fast / "airetrain" / "t" / "checkpoints"
    proc = spawn(cmd, tmp_path / "train.log")
    wait_for(lambda: newest_step(durable) >= 10, timeout=300, what="the first durable checkpoint")
    size = store.entries(durable)[-1]["size"]
    ballast = fill(fast, size // 4)   # the next save has a quarter of the room it needs
    assert proc.wait(timeout=300) != 0
    log = (tmp_path / "train.log").read_text()
    assert "OSError: [Errno 28] No space left on device" in log, log[-3000:]   # the fault happened
    assert "Bus error" not in log and "SIGBUS" not in log and "ickl" not in log   # and nothing else first
    failed = re.search(r"saving a checkpoint failed: the fast root is full \(No space left on device\): "
                       r"writing (\S+) needs about ([\d.]+ [kM]B), "
                       rf"and {fast} has ([\d.]+ [kM]?B) free; the newest durable checkpoint, (\S+) \(step (\d+)\), "
                       "is intact: run again to resume from it", log)
    assert failed, log[-3000:]
    assert Path(failed[1]).parent == checkpoints and not Path(failed[1]).exists()
    kept = int(failed[5])
    assert kept >= 10 and Path(failed[4]) == durable / store.file_name(kept)
    assert no_partial_checkpoints(checkpoints) and no_partial_checkpoints(durable)[-1] == store.file_name(kept)
    assert not (out / "train.json").exists()

    ballast.unlink()   # space freed: the run goes on from the durable checkpoint, and ends as if never stopped
    run(cmd)
    summary = read_json(out / "train.json")
    assert summary["resumed_from_step"] >= kept and summary["steps"] == STEPS
    assert_identical(final_state(out, tmp_path), final_state(ref_out, tmp_path / "ref"))


def test_the_writer_process_reports_a_full_fast_root_the_same_way(tmp_path, small_filesystem):
    """The other background path (a writer process, where a core is free), driven directly."""
    import torch

    from airetrain.checkpoint.writer import Writer

    fast = small_filesystem(tmp_path / "fast", "1m")
    state = {"model": {"w": torch.zeros(1 << 19)}, "optimizer": {}, "trainer": {"step": 5, "epoch": 0}}   # 2 MB
    writer = Writer()
    try:
        writer.submit(state, fast / "checkpoints", 5, "f", 2, tmp_path / "durable")
        with pytest.raises(RuntimeError, match=rf"NoSpaceError: the fast root is full \(No space left on device\): "
                                               rf"writing {fast}/checkpoints/"
                                               rf"step-00000005.pt needs about 2.1 MB, and {fast} has 1.0 MB free"):
            writer.wait()
    finally:
        writer.close()
    assert list((fast / "checkpoints").iterdir()) == []


def test_a_durable_root_that_fills_at_promotion_fails_clearly_and_a_rerun_completes(tmp_path, small_filesystem):
    """The promote rule's own command (`airetrain promote`) on a finished run whose scratch is then full."""
    cfg = {**CFG, "processes": 1, "train": {"epochs": 1, "log_every_steps": 10}}
    out, _ = launch_training(tmp_path, cfg)
    train = read_json(out / "train.json")
    durable = tmp_path / "scratch" / "airetrain" / "t" / "checkpoints"
    earlier = store.entries(durable)
    # scratch's copy of the final checkpoint is lost, and scratch is now a full filesystem of its own
    scratch = small_filesystem(tmp_path / "full-scratch", "8m")
    moved = scratch / "checkpoints"
    moved.mkdir()
    for entry in earlier[:-1]:
        (moved / entry["file"]).write_bytes((durable / entry["file"]).read_bytes())
        store.record(moved, entry)
    plan = read_json(out / "plan.json")
    plan["checkpoints_dir"] = str(moved)
    (out / "plan.json").write_text(__import__("json").dumps(plan))
    ballast = fill(scratch, 1000)
    cmd = [str(BIN / "airetrain"), "promote", "--plan", str(out / "plan.json"), "--train", str(out / "train.json"),
           "--out", str(out / "checkpoint.json")]
    proc = run(cmd, check=False)
    assert proc.returncode != 0
    assert (f"airetrain: the durable root (scratch) is full (No space left on device): writing "
            f"{moved / earlier[-1]['file']} needs about") in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    assert no_partial_checkpoints(moved) == [e["file"] for e in earlier[:-1]]   # the earlier ones intact
    assert not (out / "checkpoint.json").exists()

    ballast.unlink()
    promoted = run(cmd)   # no retraining: the fast root's copy is promoted
    assert "copied" in promoted.stdout and read_json(out / "train.json") == train
    assert no_partial_checkpoints(moved)[-1] == earlier[-1]["file"]
    assert (moved / "model.safetensors").is_file()   # and the weights beside it


def test_no_space_error_names_the_filesystem_and_the_sizes(tmp_path, small_filesystem):
    from airetrain.fsutil import room_for, write_bytes_atomic

    disk = small_filesystem(tmp_path / "disk", "64k")
    with pytest.raises(NoSpaceError) as e:
        with room_for(disk / "big", 100_000, "the fast root"):
            write_bytes_atomic(disk / "big", b"x" * 100_000)
    assert str(e.value) == (f"the fast root is full (No space left on device): writing {disk}/big needs about "
                            f"100.0 kB, and {disk} has 65.5 kB free")
    assert e.value.__cause__.errno == 28 and list(disk.iterdir()) == []
