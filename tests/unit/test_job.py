"""airetrain.job (a user's script's side of the contract), in this process as a script outside torchrun:
which checkpoints it trusts, what it refuses, and how a session's start is recorded."""
import argparse
import importlib
import json
import os
import pickle
import random

import numpy as np
import pytest
import torch

from airetrain.checkpoint.mirror import Mirror
from airetrain.rundir.run_log import starts


@pytest.fixture
def job(tmp_path, monkeypatch):
    """airetrain.job as a fresh script session sees it: its folders in the environment, nothing yet asked."""
    for name, folder in (("AIRETRAIN_CHECKPOINT_DIR", "fast"), ("AIRETRAIN_DURABLE_DIR", "run/checkpoints"),
                         ("AIRETRAIN_RESULTS_DIR", "results"), ("AIRETRAIN_RUN_DIR", "run")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(tmp_path / folder))
    monkeypatch.setenv("AIRETRAIN_RUN", "mine")
    import airetrain.job
    return importlib.reload(airetrain.job)


def what_scripts_save(step: int) -> dict:
    """What most training scripts save: their argparse arguments and every random state, numpy's included."""
    return {"model": {"w": torch.full((3,), float(step))}, "step": step, "args": argparse.Namespace(lr=0.1),
            "numpy_rng": np.random.get_state(), "python_rng": random.getstate(), "torch_rng": torch.get_rng_state()}


def test_a_checkpoint_the_run_saved_loads_whole_on_the_fast_root_and_after_the_launcher_made_it_durable(job, tmp_path):
    job.save(what_scripts_save(100), 100)
    state = job.load_latest()
    assert state["step"] == 100 and state["args"].lr == 0.1 and state["numpy_rng"][0] == "MT19937"
    # a requeued job: the fast root is new and empty, the mirror's durable copy is what there is
    Mirror(tmp_path / "fast", tmp_path / "run/checkpoints").sync(settled_only=False)
    (tmp_path / "fast" / "step-00000100.pt").unlink()
    (tmp_path / "run/checkpoints" / job.SAVES).unlink()   # the mirror's record alone vouches for it
    assert importlib.reload(job).load_latest()["args"] == argparse.Namespace(lr=0.1)


class Exploit:
    """A pickle that runs code where it is unpickled without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_file_whose_bytes_are_not_the_recorded_ones_is_never_unpickled_whole(job, tmp_path):
    job.save(what_scripts_save(4), 4)
    job.save(what_scripts_save(8), 8)
    newest, marker = tmp_path / "fast" / "step-00000008.pt", tmp_path / "ran"
    newest.write_bytes(pickle.dumps(Exploit(marker)))   # replaced after it was recorded
    state = importlib.reload(job).load_latest()
    assert state["step"] == 4 and not marker.exists()   # the next older one, and the replacement never ran


def test_an_intact_file_the_run_never_wrote_is_refused_naming_the_type_not_skipped(job, tmp_path):
    torch.save(what_scripts_save(7), tmp_path / "fast" / "step-00000007.pt")   # no record of this run's
    with pytest.raises(job.CheckpointRefused, match=r"step-00000007.pt holds .*argparse.Namespace.*add_safe_globals"):
        job.load_latest()
    torch.save({"model": {"w": torch.zeros(3)}, "step": 7}, tmp_path / "fast" / "step-00000007.pt")
    assert importlib.reload(job).load_latest()["step"] == 7   # plain tensors and numbers: weights_only loads them


def test_a_truncated_file_falls_back_and_none_that_loads_fails_rather_than_start_over(job, tmp_path):
    job.save(what_scripts_save(4), 4)
    job.save(what_scripts_save(8), 8)
    newest = tmp_path / "fast" / "step-00000008.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    assert importlib.reload(job).load_latest()["step"] == 4
    older = tmp_path / "fast" / "step-00000004.pt"
    older.write_bytes(older.read_bytes()[:100])
    with pytest.raises(RuntimeError, match="(?s)will not start over.*airetrain restart mine"):
        importlib.reload(job).load_latest()


def test_each_sessions_start_is_recorded_and_a_start_from_zero_beside_durable_checkpoints_is_named(
        job, tmp_path, monkeypatch, capsys):
    assert job.load_latest() is None
    job.save(what_scripts_save(4), 4)
    monkeypatch.setenv("AIRETRAIN_RESUMABLE", str(tmp_path / "run/checkpoints/step-00000004.pt"))
    job = importlib.reload(job)
    job.load_latest()   # a resumed session
    job = importlib.reload(job)
    job.log({"step": 1, "loss": 1.0})   # a session that never asked: it trains from the start again
    assert "started from step 0 without job.load_latest()" in capsys.readouterr().err
    found = [(s["step"], s["started_over"]) for s in starts(tmp_path / "run")]
    assert found == [(0, False), (4, False), (0, True)]


def test_seed_params_and_a_rungs_epochs_come_from_the_environment(job, tmp_path, monkeypatch):
    assert (job.seed(), job.params(), job.max_epochs(20)) == (0, {}, 20)
    (tmp_path / "params.json").write_text(json.dumps({"lr": 0.01, "width": 64}))
    monkeypatch.setenv("AIRETRAIN_PARAMS", str(tmp_path / "params.json"))
    monkeypatch.setenv("AIRETRAIN_SEED", "2")
    monkeypatch.setenv("AIRETRAIN_MAX_EPOCHS", "3")
    assert (job.seed(), job.params(), job.max_epochs(20)) == (2, {"lr": 0.01, "width": 64}, 3)
