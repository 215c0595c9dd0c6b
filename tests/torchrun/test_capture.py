"""The code a run runs: captured at its first launch, run by every later session. A user model's file
is edited between a kill and the resume to build another network: the run finishes bit-identical to
an uninterrupted run of the original code, and the plan says the code changed. A capture over
code.max_mb is refused, naming the limit and the key."""
import json
from pathlib import Path

import pytest

from airetrain.rundir.capture import MANIFEST, capture_dir, changed, ensure
from airetrain.errors import ConfigError

from conftest import (assert_identical, final_state, launch_training, make_plan, newest_step, prepare_training,
                      read_json, run, wait_for)
from test_checkpoint import durable_dir, kill_all, planned, start
from test_own_training import REGRESSION, ownlab  # noqa: F401  (the fixture)


def test_a_run_resumed_after_its_code_was_edited_runs_the_code_it_started_with(tmp_path, ownlab):  # noqa: F811
    from airetrain.plan.config import resolve
    from airetrain.plan.planner import plan_warnings

    cfg = {**REGRESSION, "checkpoint": {"every_steps": 3}}
    ref_out, _ = launch_training(tmp_path / "ref", cfg, env=ownlab)
    out, cmd = prepare_training(tmp_path / "cut", cfg, env=ownlab)
    proc = start(cmd, tmp_path / "cut.log", env=ownlab)
    wait_for(lambda: newest_step(durable_dir(tmp_path / "cut")) >= 6, what="a checkpoint at step 6")
    kill_all(proc)
    assert not (out / "train.json").exists()

    lab = Path(ownlab["PYTHONPATH"]) / "ownlab" / "lab.py"
    original = lab.read_text()
    lab.write_text(original.replace("nn.Linear(32, 32), nn.ReLU(), ", ""))   # one hidden layer fewer
    assert lab.read_text() != original
    plan = planned(out)
    assert changed(plan) == ["ownlab/lab.py"]
    (warning,) = plan_warnings({"t": plan}, resolve({"runs": {"t": {}}})[0])
    assert warning.startswith("run t: code changed since this run started (ownlab/lab.py): it keeps its captured "
                              "code until it finishes")

    run(cmd, env=ownlab)
    summary = read_json(out / "train.json")
    assert 6 <= summary["resumed_from_step"] < summary["steps"]
    assert_identical(final_state(out, tmp_path), final_state(ref_out, tmp_path))   # the original network
    manifest = json.loads((capture_dir(plan) / MANIFEST).read_text())
    assert sorted(manifest["files"]) == ["ownlab/__init__.py", "ownlab/lab.py"]
    assert (capture_dir(plan) / "ownlab/lab.py").read_text() == original and manifest["bytes"] > 0


def test_a_capture_over_code_max_mb_is_refused_with_the_limit_and_the_key(tmp_path, monkeypatch):
    package = tmp_path / "code" / "bulky"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("def build(meta, cfg):\n    pass\n" + "#" * 300_000 + "\n")
    plan = make_plan({"model": {"name": "bulky.model:build"}, "code": {"max_mb": 0.1}}, tmp_path)
    with pytest.raises(ConfigError, match=r"runs.t: the code to capture is 0.3 MB, over code.max_mb = 0.1"):
        ensure(plan, {"PYTHONPATH": str(tmp_path / "code")})
    assert not capture_dir(plan).exists()
