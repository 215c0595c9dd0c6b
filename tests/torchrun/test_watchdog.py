"""The hang watchdog with real torchrun (gloo on CPU, 3 ranks): a user's model blocks forever on rank 1."""
import json
from pathlib import Path

import pytest

from conftest import assert_identical, final_state, launch_training, read_json
from user_code import write_ownlab

TIMEOUT_MIN = 0.1   # 6 s: the watchdog looks every second
# 3 ranks: a sum over 3 depends on its order (over 2 it does not), so an identical end also shows that
# the restarted group reduces its first step as the uninterrupted run did (Parallel.settle_buckets)
HANGING = {"processes": 3, "precision": "fp32", "batch": {"global": 48, "per_device": 16},
           "model": {"name": "ownlab.lab:hangs_once"}, "optim": {"lr": 0.01},
           "train": {"epochs": 1, "log_every_steps": 5, "hang_timeout_min": TIMEOUT_MIN},
           "checkpoint": {"every_steps": 3, "stop_margin_min": 0.05}}
STEPS = 1437 // 48


@pytest.fixture
def ownlab(tmp_path):
    return {"PYTHONPATH": str(write_ownlab(tmp_path / "code"))}


def hangs(tmp: Path) -> list[dict]:
    path = tmp / "scratch" / "airetrain" / "t" / "stops.jsonl"
    return [s for s in map(json.loads, path.read_text().splitlines()) if s["reason"] == "hang"]


def test_a_hang_on_rank_1_is_dumped_restarted_and_the_run_ends_as_if_uninterrupted(tmp_path, ownlab):
    ref_out, _ = launch_training(tmp_path / "ref", HANGING, env=ownlab)   # no marker given: no hang
    marker = tmp_path / "blocked"
    out, proc = launch_training(tmp_path / "hang", HANGING, env={**ownlab, "HANG_MARKER": str(marker),
                                                                  "HANG_AT": "9"})
    # the hang happened: rank 1 blocked in its 9th forward pass (the first two measure FLOPs and settle
    # DDP's buckets), in step 7
    assert marker.exists()
    (hang,) = hangs(tmp_path / "hang")
    assert hang["action"] == "restart" and hang["step"] == 6 and hang["ranks_dumped"] == [0, 1, 2]
    dump = Path(hang["dump"])
    for rank in range(3):   # no step finished on any rank from the block to the hang's declaration
        assert "last finished step 6;" in (dump / f"rank{rank}-stacks.txt").read_text(), rank
    assert dump.parent.name == "hangs" and dump.parent.parent == tmp_path / "hang" / "scratch" / "airetrain" / "t"
    stacks = (dump / "rank1-stacks.txt").read_text()
    assert "in block_forever" in stacks and "lab.py" in stacks   # the blocking frame, in the user's code
    assert "in train_step" in (dump / "rank0-stacks.txt").read_text()   # rank 0 waited in the step
    assert read_json(dump / "hang.json")["action"] == "restart"
    assert "torchrun restarts the group" in proc.stdout
    # the restarted group resumed from the checkpoint of step 6 and ended as the uninterrupted run did
    summary = read_json(out / "train.json")
    assert summary["resumed_from_step"] == 6 and summary["steps"] == STEPS
    assert_identical(final_state(out, tmp_path), final_state(ref_out, tmp_path))


def test_a_second_hang_in_the_same_launch_fails_it_and_names_the_dump(tmp_path, ownlab):
    out, proc = launch_training(tmp_path, HANGING, check=False, env={
        **ownlab, "HANG_MARKER": str(tmp_path / "blocked"), "HANG_AT": "9", "HANG_ALWAYS": "1"})
    assert proc.returncode != 0 and not (out / "train.json").exists()
    first, second = hangs(tmp_path)
    assert (first["action"], second["action"]) == ("restart", "failed: second hang in this launch")
    assert (first["step"], second["step"]) == (6, 6 + 6)   # the restart resumed from step 6
    assert f"every rank's stacks are in {second['dump']}" in proc.stdout
    assert "in block_forever" in (Path(second["dump"]) / "rank1-stacks.txt").read_text()
