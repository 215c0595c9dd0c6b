"""A search on the real SLURM cluster: 9 trials, 3 at once, successive halving by 3. The submitting Snakemake is
killed mid-search and run again: the same study finishes with 9 trials, none lost or duplicated; promoted
trials resume from their checkpoints; never more than 3 trials hold an allocation at once."""
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
TRIALS, PARALLEL, LADDER = 9, 3, (1, 3, 9)
SEARCHED = {"device": "cpu", "gpus": 1, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
            "model": {"name": "ownlab.lab:tunable", "options": {"hidden": 16}},
            "data": {"name": "ownlab.lab:regression_data"}, "batch": {"global": 64, "per_device": 64},
            "optim": {"name": "adamw", "lr": 0.01}, "train": {"epochs": 9, "loss": "ownlab.lab:mse"},
            "time_min": {"stage": 5, "train": 10, "promote": 5},
            "tune": {"space": {"optim.lr": {"loguniform": [1.0e-3, 1.0e-1]},
                               "model.options.hidden": {"choice": [4, 16, 32]}},
                     "trials": TRIALS, "parallel": PARALLEL, "sampler": {"tpe": {"seed": 0}},
                     "pruner": {"successive_halving": {"min_epochs": 1, "reduction": 3}}}}


def sacct_times(env, job_ids: list[str]) -> dict[str, dict]:
    fields = ["JobID", "Submit", "Start", "End", "State"]
    out = run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", ",".join(fields)], env=env).stdout
    return {row["JobID"]: row for row in (dict(zip(fields, line.split("|"))) for line in out.splitlines())}


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
        wait_for(lambda: trials.exists() and len(list(trials.iterdir())) >= 5, timeout=600,
                 what="five trials asked", every=0.5)
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
    assert 5 <= killed_with < TRIALS   # the kill landed mid-search
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
    assert resumed >= 2


def allocations(env, work) -> list[dict]:
    """Every job SLURM accounted for the search's project since it began, by its working directory: those of
    the killed Snakemake too, whatever the trials' records say."""
    fields = ["JobID", "WorkDir", "Submit", "Start", "End", "State"]
    out = run(["sacct", "-X", "-n", "-P", "--allusers", "-S", (work / "started").read_text(), "-o", ",".join(fields)],
              env=env).stdout
    found = [dict(zip(fields, line.split("|"))) for line in out.splitlines()]
    return [job for job in found if job["WorkDir"] == str(work) and job["Start"] not in ("Unknown", "None", "")]


def test_never_more_than_parallel_trials_hold_an_allocation(search):
    work, env, _ = search
    jobs = {}
    for row in rows(work):
        for e in rungs_trained(work, row["run"]):
            jobs[read_json(work / f"results/{row['run']}-e{e}/train.json")["slurm_job_id"]] = (row["run"], e)
    held_by = allocations(env, work)
    assert set(jobs) <= {job["JobID"] for job in held_by}   # the trials' own jobs are among them
    times = sacct_times(env, list(jobs))
    events = sorted([(datetime.fromisoformat(t["Start"]), 1) for t in held_by]
                    + [(datetime.fromisoformat(t["End"]), -1) for t in held_by], key=lambda e: (e[0], e[1]))
    held, most = 0, 0
    for _, change in events:
        held += change
        most = max(most, held)
    assert 1 < most <= PARALLEL, most
    about = read_json(work / "results/sr/tune/best.json")
    gaps = []   # each slot: from a rung's job ending to the slot's next job being submitted
    for slot in range(PARALLEL):
        chain = [json.loads((work / f"results/sr/tune/slot{slot}/step{k}.json").read_text())
                 for k in range(len(list((work / f"results/sr/tune/slot{slot}").glob("step*.json"))))]
        ids = [read_json(work / f"results/{d['trial']}-e{d['epochs']}/train.json")["slurm_job_id"]
               for d in chain if not d.get("done")]
        gaps += [(datetime.fromisoformat(times[b]["Submit"]) - datetime.fromisoformat(times[a]["End"])).total_seconds()
                 for a, b in zip(ids, ids[1:])]
    print(f"device-hours used {about['device_hours']:.4f} against {about['device_hours_all_to_the_end']:.4f} "
          f"all to the end; rung end to next submission: median {sorted(gaps)[len(gaps) // 2]:.0f} s, "
          f"max {max(gaps):.0f} s over {len(gaps)}")


def test_the_table_and_the_best_weights_are_there(search):
    work, _, _ = search
    about = read_json(work / "results/sr/tune/best.json")
    best = about["best"]
    assert best["state"] == "complete" and int(best["epochs"]) == 9
    assert about["weights"]["path"] == str(work / "scratch/airetrain/sr/best.safetensors")
    assert (work / "scratch/airetrain/sr/best.safetensors").stat().st_size > 0
    assert f"Best: trial {best['trial']} ({best['run']})" in (work / "results/sr/tune.md").read_text()
    assert (work / "results/report/results.md").exists()
