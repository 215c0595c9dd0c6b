"""Retraining and rerunning a finished run: removing results/<run>/ keeps its figures (it resumes at
its end, trains nothing, and train.json is its training's own record), `airetrain restart` asks,
then removes its checkpoints and results, and the next invocation trains it from step 0."""
import pytest

from airetrain.rundir import metrics_log
from conftest import BIN, read_json, run, snakemake, write_config

pytestmark = pytest.mark.e2e


def test_a_rerun_keeps_a_finished_runs_figures_and_restart_trains_it_from_step_0(tmp_path):
    import shutil

    cfg = write_config(tmp_path / "c.yaml", {"roots": {"scratch": str(tmp_path / "scratch")}, "runs": {"r": {
        "processes": 1, "precision": "fp32", "train": {"epochs": 1, "log_every_steps": 10}}}})
    snakemake(tmp_path, cfg, "--cores", "2")
    first = read_json(tmp_path / "results/r/train.json")
    assert first["steps_this_session"] == first["steps"] > 0 and first["final_loss"] is not None

    def figures(lines: list[dict]) -> list[tuple]:
        return [(line["step"], line.get("loss"), line.get("eval_loss")) for line in lines]

    history = metrics_log.read(tmp_path / "results/r/metrics.jsonl")
    shutil.rmtree(tmp_path / "results/r")
    snakemake(tmp_path, cfg, "--cores", "2")
    again = read_json(tmp_path / "results/r/train.json")
    assert again == first   # not a record of the empty session that found the run trained
    restored = metrics_log.read(tmp_path / "results/r/metrics.jsonl")   # restored from scratch, each step once
    assert figures(restored) == figures(history) != []
    assert "already trained: r resumed at its last step" in (tmp_path / "logs/r/train.log").read_text()

    restart = [str(BIN / "airetrain"), "restart", "r", "--configfile", str(cfg)]
    asked = run(restart, cwd=tmp_path, env={"PYTHONUNBUFFERED": "1"}, input_text="n\n")
    durable = tmp_path / "scratch/airetrain/r/checkpoints"
    assert f"  {durable}" in asked.stdout and "nothing removed" in asked.stdout and durable.is_dir()
    done = run([*restart, "--yes"], cwd=tmp_path)
    assert "the next invocation trains r from step 0" in done.stdout
    assert not durable.exists() and not (tmp_path / "results/r").exists()
    assert not (tmp_path / "scratch/airetrain/r/code").exists()   # the next start captures the code anew
    assert (tmp_path / "scratch/airetrain/r/history.jsonl").exists()   # its history stays
    snakemake(tmp_path, cfg, "--cores", "2")
    retrained = read_json(tmp_path / "results/r/train.json")
    assert retrained["resumed_from_step"] == 0 and retrained["steps_this_session"] == first["steps"]
    superseded = list((tmp_path / "scratch/airetrain/r").glob("metrics.superseded-*.jsonl"))
    assert len(superseded) == 1 and figures(metrics_log.read(superseded[0])) == figures(history)   # kept aside
    steps = [line["step"] for line in metrics_log.read(tmp_path / "results/r/metrics.jsonl")]
    assert steps == [line["step"] for line in history]   # a new history: the retraining's lines, once
