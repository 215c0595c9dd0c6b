"""Accounting goes away, for real: slurmdbd of the test cluster stopped while a run trains, and
started again after the pipeline has finished and reported.

Training goes on (slurmctld keeps the job records for slurmdbd), Snakemake's status checks (squeue,
in the aire profile) go on, `airetrain status` says that accounting is unavailable and shows what
squeue knows, and the report marks the sacct figures missing instead of hanging or failing. Once
slurmdbd is back, the report rule run again fills them in."""
import csv
import subprocess

import pytest

from conftest import BIN, read_json, run, slurm_state, snakemake, snakemake_cmd, spawn, wait_for, write_config
from user_code import write_ownlab
from test_slurm import SLURM_ARGS, STAND_IN, unique

pytestmark = pytest.mark.slurm


def slurmdbd_pid() -> int:
    return int((slurm_state() / "run" / "slurmdbd.pid").read_text())


def start_slurmdbd(env) -> None:
    """slurmdbd started again, and answering: the cluster as later tests expect it."""
    if run(["sacctmgr", "-n", "show", "cluster"], env=env, check=False, timeout=60).returncode == 0:
        return
    subprocess.run(["/usr/sbin/slurmdbd"], env={**env, "PATH": "/usr/sbin:/usr/bin:/bin"}, check=True)
    wait_for(lambda: run(["sacctmgr", "-n", "show", "cluster"], env=env, check=False, timeout=60).returncode == 0,
             timeout=120, what="slurmdbd answering again", every=0.5)


def report_rows(work) -> dict:
    with open(work / "results" / "report" / "efficiency.csv") as f:
        return {row["run"]: row for row in csv.DictReader(f)}


def test_the_pipeline_status_and_report_go_on_while_accounting_is_down(slurm_cluster, tmp_path):
    work = tmp_path
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        # held at a second a step (tests/user_code.py's paced model) until the test has seen it train
        "runs": {"a": {**STAND_IN, "gpus": 0, "processes": 1, "slurm": {"partition": "standard"},
                       "batch": {"global": 96, "per_device": 96}, "model": {"name": "ownlab.lab:paced"},
                       "train": {"epochs": 1, "log_every_steps": 1}}}})
    write_ownlab(work)
    hold = work / "hold"
    hold.touch()
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work)), "HOLD": str(hold)}
    status_cmd = [str(BIN / "airetrain"), "status", "--configfile", str(cfg)]
    pipeline = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "2"), work / "snakemake.log", cwd=work, env=env)
    try:
        wait_for(lambda: "step" in run(status_cmd, cwd=work, env=env).stdout, timeout=300, what="run a training",
                 every=0.5)
        run(["kill", str(slurmdbd_pid())], env=env)
        down = run(["sacct", "-n", "-j", "1"], env=env, check=False)
        assert down.returncode != 0 and "Problem talking to the database" in down.stderr   # slurmdbd is gone
        text = run(status_cmd, cwd=work, env=env).stdout
        print(text)
        header, _, row = text.splitlines()[:3]
        assert header.startswith("SLURM accounting unavailable: sacct: error: Problem talking to the database") \
            and "states are squeue's" in header
        assert row.split()[:2] == ["a", "training"] and "step" in row
        hold.unlink()   # training goes on to its end; Snakemake's status checks read squeue
        assert pipeline.wait(timeout=600) == 0, (work / "snakemake.log").read_text()[-3000:]
        assert run(["sacct", "-n", "-j", "1"], env=env, check=False).returncode != 0   # still down at the end

        row = report_rows(work)["a"]
        assert row["job_state"] == "UNKNOWN" and row["status"].startswith(
            "accounting unavailable (sacct: error: Problem talking to the database"), row
        assert row["source"] == "benchmark" and float(row["samples_per_s"]) > 0   # the run's own figures
        assert "history: 0 new lines" in (work / "logs" / "report.log").read_text()
        job = read_json(work / "results" / "a" / "train.json")["slurm_job_id"]
    finally:
        hold.unlink(missing_ok=True)
        start_slurmdbd(env)

    # slurmctld hands slurmdbd the records it kept; the report rule run again fills the figures in
    wait_for(lambda: "COMPLETED" in run(["sacct", "-n", "-X", "-j", str(job), "-o", "State"], env=env).stdout,
             timeout=120, what="the job's record in accounting", every=0.5)
    snakemake(work, cfg, "--cores", "1", "--forcerun", "report", env=env)
    row = report_rows(work)["a"]
    assert row["job_state"] == "COMPLETED" and row["source"] == "sacct" and float(row["elapsed_s"]) > 0
    assert "history: 1 new line (a)" in (work / "logs" / "report.log").read_text()


def test_a_stalled_slurmdbd_is_given_up_on_after_the_timeout(slurm_cluster, monkeypatch):
    """slurmdbd stopped (SIGSTOP) rather than gone: it takes the connection and never answers, so
    sacct waits (45 s here, longer on a loaded cluster); the report and status give up after theirs."""
    import os
    import signal

    from airetrain.report.query import AccountingUnavailable, query

    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    pid = slurmdbd_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(AccountingUnavailable, match=r"^sacct gave no answer within 2 s$"):   # cut, not awaited
            query(["1"], timeout=2)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert query(["1"]) is not None   # answering again
