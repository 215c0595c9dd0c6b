"""A search on the real SLURM cluster: 7 trials, 3 at once, one GPU each, successive halving by 3, packed as by
default: in waves, the rungs its 3 slots decide together trained side by side in one allocation. The submitting
Snakemake is killed mid-search and run again: the same study finishes with 7 trials, none lost or duplicated;
promoted trials resume from their checkpoints; SLURM accounted fewer allocations than rungs, each rung a step
of its own with one GPU, and never more than 3 rungs at once."""
import csv
import json
import os
import time
from datetime import datetime

import pytest
import yaml

from conftest import BIN, ending_what_it_starts, read_json, run, slurm_state, snakemake_cmd, spawn, wait_for
from test_slurm import SLURM_ARGS, unique
from user_code import write_ownlab

pytestmark = pytest.mark.slurm
TRIALS, PARALLEL, LADDER = 7, 3, (1, 3)
SEARCHED = {"device": "cpu", "gpus": 1, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
            "model": {"name": "ownlab.lab:tunable", "options": {"hidden": 16}},
            "data": {"name": "ownlab.lab:regression_data"}, "batch": {"global": 64, "per_device": 64},
            "optim": {"name": "adamw", "lr": 0.01}, "train": {"epochs": 3, "loss": "ownlab.lab:mse"},
            "time_min": {"stage": 5, "train": 10, "promote": 5},
            "tune": {"space": {"optim.lr": {"loguniform": [1.0e-3, 1.0e-1]},
                               "model.options.hidden": {"choice": [4, 16, 32]}},
                     "trials": TRIALS, "parallel": PARALLEL, "sampler": {"tpe": {"seed": 0}},
                     "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 3}}}}


@pytest.fixture(scope="module")
def search(slurm_cluster, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("tune")
        write_ownlab(work)
        cfg = work / "config.yaml"
        cfg.write_text(yaml.safe_dump({"roots": {"scratch": str(work / "scratch")}, "runs": {"sr": SEARCHED}},
                                      sort_keys=False))
        env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}",
               "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
        command = snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "8")
        t0 = time.monotonic()
        (work / "started").write_text(datetime.now().strftime("%Y-%m-%dT%H:%M:%S"))   # for sacct's window
        first = spawn(command, work / "first.log", cwd=work, env=env, exact_env=True)
        trials = work / "results/sr/tune/trials"
        wait_for(lambda: trials.exists() and len(list(trials.iterdir())) >= 4, timeout=600,
                 what="four trials asked", every=0.5)
        first.kill()   # SIGKILL mid-search: its jobs train on
        first.wait()
        killed_with = len(list(trials.iterdir()))
        run(snakemake_cmd(work, cfg, "--unlock"), cwd=work, env=env)
        second = spawn(command, work / "second.log", cwd=work, env=env, exact_env=True)
        assert second.wait(timeout=1500) == 0, (work / "second.log").read_text()[-5000:]
        print(f"search of {TRIALS} trials, {PARALLEL} at once, killed after {killed_with} asked: "
              f"{time.monotonic() - t0:.0f} s")
        return work, env, killed_with


def rows(work):
    return list(csv.DictReader(open(work / "results/sr/tune.csv")))


def rungs_trained(work, trial: str) -> list[int]:
    return [e for e in LADDER if (work / f"results/{trial}-e{e}/train.json").exists()]


def test_the_study_finishes_with_every_trial_once_after_the_workflow_was_killed(search):
    work, _, killed_with = search
    assert 4 <= killed_with < TRIALS   # the kill landed mid-search
    table = rows(work)
    assert [int(r["trial"]) for r in table] == list(range(TRIALS))
    assert all(r["state"] == "complete" or r["state"].startswith("pruned") for r in table)
    assert any(r["state"].startswith("pruned") for r in table)
    started = [json.loads(p.read_text()) for p in sorted((work / "results/sr/tune").glob("slot*/step*.json"))]
    firsts = [d["trial"] for d in started if d.get("rung") == 0]
    assert sorted(firsts) == [f"sr-t{n:03d}" for n in range(TRIALS)]   # each trial started once, in one slot
    assert len(list((work / "results/sr/tune/trials").iterdir())) == TRIALS


def test_promoted_trials_resume_from_their_rungs_checkpoint(search):
    work, _, _ = search
    resumed = 0
    for row in rows(work):
        trained = rungs_trained(work, row["run"])
        assert trained[-1] == int(row["epochs"])
        for before, after in zip(trained, trained[1:]):
            ended = read_json(work / f"results/{row['run']}-e{before}/train.json")["steps"]
            record = read_json(work / f"results/{row['run']}-e{after}/train.json")
            assert record["resumed_from_step"] == ended > 0   # no retraining: it went on from the rung's end
            resumed += 1
    assert resumed >= 1   # the first trial to end its first rung is always promoted


def allocations(env, work) -> list[dict]:
    """Every job SLURM accounted for the search's project since it began, by its working directory: those of
    the killed Snakemake too, whatever the trials' records say."""
    fields = ["JobID", "WorkDir", "Submit", "Start", "End", "State"]
    out = run(["sacct", "-X", "-n", "-P", "--allusers", "-S", (work / "started").read_text(), "-o", ",".join(fields)],
              env=env).stdout
    found = [dict(zip(fields, line.split("|"))) for line in out.splitlines()]
    return [job for job in found if job["WorkDir"] == str(work) and job["Start"] not in ("Unknown", "None", "")]


def rung_steps(env, work, jobs: list[dict]) -> list[dict]:
    """The SLURM steps the jobs ran for the search's rungs (each named after its rung by the launch), as
    accounting has them."""
    fields = ["JobID", "JobName", "AllocTRES", "Start", "End"]
    out = run(["sacct", "-n", "-P", "--allusers", "-j", ",".join(j["JobID"] for j in jobs), "-o", ",".join(fields)],
              env=env).stdout
    found = [dict(zip(fields, line.split("|"))) for line in out.splitlines()]
    return [step for step in found if "." in step["JobID"] and step["JobName"].startswith("sr-t")]


def test_the_ready_rungs_share_allocations_each_a_step_with_a_gpu_never_more_than_parallel(search):
    work, env, _ = search
    rungs = {f"{row['run']}-e{e}" for row in rows(work) for e in rungs_trained(work, row["run"])}
    held_by = allocations(env, work)
    steps = rung_steps(env, work, held_by)
    assert rungs <= {step["JobName"] for step in steps}   # each rung trained in a step of its own
    assert all("gres/gpu=1," in step["AllocTRES"] for step in steps)   # with a GPU of its own
    trained_in = {step["JobID"].split(".")[0] for step in steps}
    assert len(held_by) < len(rungs) and len(trained_in) < len(rungs)   # unpacked, a job per rung
    assert max(sum(1 for s in steps if s["JobID"].startswith(f"{job}.")) for job in trained_in) == PARALLEL
    events = sorted([(datetime.fromisoformat(s["Start"]), 1) for s in steps]
                    + [(datetime.fromisoformat(s["End"]), -1) for s in steps], key=lambda e: (e[0], e[1]))
    held, most = 0, 0
    for _, change in events:
        held += change
        most = max(most, held)
    assert 1 < most <= PARALLEL, most
    about = read_json(work / "results/sr/tune/best.json")
    print(f"{len(rungs)} rungs in {len(held_by)} allocations; device-hours used {about['device_hours']:.4f} against "
          f"{about['device_hours_all_to_the_end']:.4f} all to the end")


def test_the_table_and_the_best_weights_are_there(search):
    work, _, _ = search
    about = read_json(work / "results/sr/tune/best.json")
    best = about["best"]
    assert best["state"] == "complete" and int(best["epochs"]) == LADDER[-1]
    assert about["weights"]["path"] == str(work / "scratch/airetrain/sr/best.safetensors")
    assert (work / "scratch/airetrain/sr/best.safetensors").stat().st_size > 0
    assert f"Best: trial {best['trial']} ({best['run']})" in (work / "results/sr/tune.md").read_text()
    assert (work / "results/report/results.md").exists()
