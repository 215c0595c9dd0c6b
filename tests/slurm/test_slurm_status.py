"""`airetrain status` on the real SLURM cluster: a run pending behind a blocker job while another
trains, then both done and a failed one with its last error line; one squeue and one sacct call."""
import json
import os

import pytest

from conftest import BIN, run, slurm_state, snakemake_cmd, spawn, wait_for, write_config
from user_code import write_ownlab
from test_slurm import SLURM_ARGS, STAND_IN, unique

pytestmark = pytest.mark.slurm

BOOM = 'raise RuntimeError("boom: the script failed on purpose")\n'


def counting(bin_dir, env, *tools):
    """Wrappers that log each call, then run the real tool: how many calls status makes."""
    bin_dir.mkdir()
    for tool in tools:
        real = run(["which", tool], env=env).stdout.strip()
        (bin_dir / tool).write_text(f'#!/bin/sh\necho {tool} >> "{bin_dir}/calls"\nexec {real} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir / "calls"


def status(work, cfg, env):
    out = run([str(BIN / "airetrain"), "status", "--configfile", str(cfg), "--json"], cwd=work, env=env).stdout
    return {row["run"]: row for row in json.loads(out)}


def test_status_shows_pending_training_done_and_failed(slurm_cluster, tmp_path, monkeypatch):
    from airetrain.report.status import status as status_rows

    work = tmp_path
    (work / "boom.py").write_text(BOOM)
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        "runs": {
            # held at a second a step (tests/user_code.py's paced model) until the test has seen it train
            "a": {**STAND_IN, "gpus": 3, "batch": {"global": 96, "per_device": 32},
                  "model": {"name": "ownlab.lab:paced"}, "train": {"epochs": 2, "log_every_steps": 1}},
            "b": {"gpus": 0, "processes": 2, "precision": "fp32", "slurm": {"partition": "standard"},
                  "train": {"epochs": 1}},
            "c": {"gpus": 0, "processes": 1, "slurm": {"partition": "standard"}, "train": {"script": "boom.py"}},
        }})
    # node-local, fresh for this session (as Aire's per-job $TMPDIR): no fast root left by an earlier run
    write_ownlab(work)
    hold = work / "hold"
    hold.touch()
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work)), "HOLD": str(hold)}
    calls = counting(tmp_path / "bin", env, "squeue", "sacct")
    counted = {**env, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    # the CPU node taken: b (and c) wait for it, a trains on a GPU node meanwhile
    blocker = run(["sbatch", "--parsable", "-p", "standard", "-w", "labcpu1", "--exclusive", "-t", "60",
                   "-o", str(tmp_path / "blocker-%j.out"), "--wrap", "sleep 900"], env=env).stdout.strip()
    try:
        pipeline = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "3", "--keep-going"), work / "snakemake.log",
                         cwd=work, env=env)
        seen = {}
        # polled in this process (what the command runs, without its start-up), with the counting tools
        monkeypatch.setenv("PATH", counted["PATH"])
        monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])

        def a_trains_while_b_waits():
            calls.unlink(missing_ok=True)
            seen.update({r["run"]: r for r in status_rows(["a", "b", "c"], work / "results", work / "logs")})
            return seen["a"]["state"] == "training" and seen["a"].get("step") and seen["b"]["state"] == "pending"

        try:
            wait_for(a_trains_while_b_waits, timeout=300, what="a training while b is pending", every=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}; the last status: {seen}") from None
        assert sorted(calls.read_text().split()) in (["squeue"], ["sacct", "squeue"])   # one call each at most
        a, b = seen["a"], seen["b"]
        print(run([str(BIN / "airetrain"), "status", "--configfile", str(cfg)], cwd=work, env=env).stdout)
        assert 0 < a["step"] < a["of_steps"] and a["loss"] > 0 and a["eta_s"] >= 0 and "ETA" in a["detail"]
        assert b["reason"] and b["job_id"] and b["detail"].startswith(f"({b['reason']})")
    finally:
        run(["scancel", blocker], env=env)
        hold.unlink()
    pipeline.wait(timeout=600)
    rows = status(work, cfg, env)
    assert rows["a"]["state"] == rows["b"]["state"] == "done" and rows["a"]["eval"]["eval_accuracy"] > 0.5
    assert rows["c"]["state"] == "failed", rows["c"]
    assert rows["c"]["error"] == "RuntimeError: boom: the script failed on purpose"
    assert rows["c"]["log"].endswith("logs/c/train.log")
    text = run([str(BIN / "airetrain"), "status", "--configfile", str(cfg)], cwd=work, env=env).stdout
    print(text)   # the README shows this table
    assert text.splitlines()[0].split() == ["run", "state", "job", "detail"]
