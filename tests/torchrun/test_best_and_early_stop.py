"""The best checkpoint and early stopping, on real torchrun runs: the best is the evaluation the
monitor picks, kept through pruning, promoted and verified, with best.safetensors; a run built to
stop early stops after `patience` evaluations, and a kill -9 and resume stop at the same step
with bit-identical parameters."""
import json
import shutil
import sys
from pathlib import Path

import torch

from airetrain.checkpoint import store
from airetrain.workflow import TRAIN_SCRIPT

from conftest import BIN, read_json, run
from test_checkpoint import durable_dir, killed_and_resumed_equals_uninterrupted

EVERY, PATIENCE = 10, 5
# The curve falls, so with mode max on eval_loss the first evaluation is the best and stays so; no
# evaluation can beat it by min_delta: the run stops after PATIENCE more, at step EVERY * (PATIENCE + 1),
# long before its 10 epochs (220 steps) end. keep 1: only the monitor keeps the best one.
STOPS = {"processes": 2, "precision": "fp32", "batch": {"global": 64, "per_device": 16}, "model": {"dropout": 0.2},
         "train": {"epochs": 10, "log_every_steps": 10, "eval_every_steps": EVERY, "eval_every_epochs": 10,
                   "early_stop": {"patience": PATIENCE, "min_delta": "1e2"}},
         "checkpoint": {"every_steps": 3, "keep": 1, "monitor": "eval_loss", "mode": "max"}}
STOP_STEP = EVERY * (PATIENCE + 1)


def evaluations(out: Path) -> list[tuple[int, float]]:
    return [(m["step"], m["eval_loss"]) for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "eval_loss" in m]


def test_a_run_built_to_stop_early_stops_at_the_same_step_after_a_kill_and_keeps_its_best(tmp_path):
    summary = killed_and_resumed_equals_uninterrupted(tmp_path, STOPS, steps=STOP_STEP)
    out, durable = tmp_path / "cut" / "results" / "t", durable_dir(tmp_path / "cut")
    reference = read_json(tmp_path / "ref" / "results" / "t" / "train.json")
    curve = evaluations(out)
    assert [step for step, _ in curve] == list(range(EVERY, STOP_STEP + 1, EVERY))   # one point per step
    best_step, best_value = max(curve, key=lambda p: p[1])
    assert best_step < STOP_STEP   # the curve fell: the best is not the last checkpoint
    for record in (summary, reference):
        assert record["stopped_early"] == {"step": STOP_STEP, "epoch": STOP_STEP // 22, "best_step": best_step,
                                           "best_value": best_value}
        assert record["best"] == {"step": best_step, "epoch": best_step // 22, "metric": "eval_loss",
                                  "value": best_value}
    # keep 1 kept the newest and the best, on the fast root and on scratch, through the resume
    assert [e["step"] for e in store.entries(durable)] == [best_step, STOP_STEP]

    cmd = [str(BIN / "airetrain"), "promote", "--plan", str(out / "plan.json"), "--train", str(out / "train.json"),
           "--out", str(out / "checkpoint.json")]
    promoted = run(cmd)
    assert f"best: step {best_step}" in promoted.stdout
    best = read_json(out / "checkpoint.json")["best"]
    entry = next(e for e in store.entries(durable) if e["step"] == best_step)
    assert best["path"] == str(durable / entry["file"]) and best["sha256"] == entry["sha256"]
    assert (best["step"], best["metric"], best["value"]) == (best_step, "eval_loss", best_value)
    checkpoint = store.verify(best["path"], entry)
    from safetensors.torch import load_file
    weights = load_file(best["weights"]["path"])
    assert weights.keys() == checkpoint["model"].keys()
    assert all(torch.equal(weights[k], checkpoint["model"][k]) for k in weights)
    last = load_file(read_json(out / "checkpoint.json")["weights"]["path"])
    assert any(not torch.equal(weights[k], last[k]) for k in weights)   # the best, not the last

    # The run's folder on scratch removed, its fast root's kept, the run again: the session that finds
    # it trained makes both kept checkpoints durable again, the best included, and promote finds both.
    fast = tmp_path / "cut" / "fast" / "airetrain" / "t" / "checkpoints"
    assert [e["step"] for e in store.entries(fast)] == [best_step, STOP_STEP]
    shutil.rmtree(durable.parent)
    run([sys.executable, "-m", "airetrain", "launch", "--plan", str(out / "plan.json"), "--stage",
         str(out / "stage.json"), "--out", str(out), "--script", str(TRAIN_SCRIPT)])
    assert [e["step"] for e in store.entries(durable)] == [best_step, STOP_STEP]
    assert all(store.same(a, b) for a, b in zip(store.entries(durable), store.entries(fast)))
    assert f"best: step {best_step}" in run(cmd).stdout
    assert read_json(out / "checkpoint.json")["best"]["sha256"] == entry["sha256"]
