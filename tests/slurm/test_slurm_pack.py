"""Many small runs, few allocations, on the SLURM test cluster (Aire's shape: 3 GPUs a node): six one-GPU
seeds with the default pack (auto) share two allocations, each run its own SLURM step with its own GPU; the
same six seeds with pack: none, in the same pipeline, are six jobs and the reference for the weights. A packed
job at its deadline stops every run, requeues once, and each run resumes and finishes, its W&B run whole. Two
seeds of a user's own script share an allocation, and the report finds each one's step.

What each rank saw is written by the test's own model (its CUDA_VISIBLE_DEVICES, SLURM's job and step ids),
and the jobs and steps are SLURM's accounting; the weights are the checkpoints' bytes; the tracker's history
is W&B's own offline files. A search in waves is tests/slurm/test_slurm_tune.py's."""
import csv
import json
import sys
from pathlib import Path

import pytest
import torch

from airetrain.rundir.run_log import sessions, stops
from conftest import (assert_identical, ending_what_it_starts, final_state, read_json, run, slurm_state, snakemake_cmd,
                      spawn, wait_for, write_config)
from test_slurm import SLURM_ARGS, submitted_since, unique
from trackers import each_step_once, wandb_sessions
from user_code import write_ownlab

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torchrun"))
from script_mode import WITH_JOB  # noqa: E402

pytestmark = pytest.mark.slurm
SEEDS = list(range(6))
NOTED = '''
import json
import os
import sys
from pathlib import Path

from airetrain.train.models import build_model


def noted(meta, cfg):
    """small_cnn; each rank notes the GPUs it was given and its SLURM job and step, by its run."""
    if "RANK" in os.environ:   # under torchrun, not the plan step's check of the model
        out = sys.argv[sys.argv.index("--out") + 1]
        seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID", "RANK")}
        with open(Path(cfg["options"]["log"]) / f"{Path(out).name}-{os.environ['RANK']}.json", "w") as f:
            json.dump(seen, f)
    return build_model({**cfg, "name": "small_cnn"}, meta)
'''
ONE_GPU = {"device": "cpu", "gpus": 1, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
           "data": {"name": "digits"}, "batch": {"global": 64, "per_device": 64}, "train": {"epochs": 2},
           "time_min": {"stage": 5, "train": 10, "promote": 5}, "seeds": SEEDS}
SCRIPT = {"device": "cpu", "gpus": 1, "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
          "data": {"name": "synthetic"}, "seeds": [0, 1], "time_min": {"stage": 5, "train": 10, "promote": 5},
          "train": {"script": "train.py", "args": ["--steps", "20"]}}


@pytest.fixture(scope="module")
def packed(slurm_cluster, tmp_path_factory):
    """One pipeline: six seeds packed by default (p) and the same six unpacked (u); two seeds packed into a
    4-minute job that stops them 90 s in (held, tracked by W&B offline), held at a second a step (132 steps,
    tests/user_code.py's paced small_cnn) until both stopped; its job requeues, and both resume and finish.
    ref: held's seed 0 unpacked and unheld, for its weights. sc: two seeds of a user's script. Every job has a
    $TMPDIR of its own, purged when it ends, as Aire's."""
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("pack")
        (work / "gpulab.py").write_text(NOTED)
        (work / "seen").mkdir()
        (work / "train.py").write_text(WITH_JOB)
        write_ownlab(work)
        noted = {"name": "gpulab:noted", "options": {"log": str(work / "seen")}}
        timed = {"time_min": {"stage": 1, "train": 2, "promote": 1}, "train": {"epochs": 6},
                 "checkpoint": {"every_steps": 10, "stop_margin_min": 2.5, "max_requeues": 20}}
        cfg = write_config(work / "config.yaml", {
            "roots": {"scratch": str(work / "scratch")},
            "runs": {"p": {**ONE_GPU, "model": noted}, "u": {**ONE_GPU, "model": noted, "pack": "none"},
                     "held": {**ONE_GPU, **timed, "seeds": [0, 1], "model": {"name": "ownlab.lab:paced"},
                              "tracking": {"wandb": {"project": "pack"}}},
                     "ref": {**ONE_GPU, "seeds": [0], "train": {"epochs": 6}},
                     "sc": SCRIPT}})
        hold = work / "hold"
        hold.touch()
        env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work)),
               "AIRETRAIN_LAB_JOB_TMPDIR": "1", "HOLD": str(hold), "PYTHONPATH": str(work)}
        since = run(["date", "+%Y-%m-%dT%H:%M:%S"]).stdout.strip()
        proc = spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "8"), work / "snakemake.log", cwd=work, env=env)
        runs = work / "scratch" / "airetrain"
        wait_for(lambda: all(stops(runs / f"held-seed{seed}") for seed in (0, 1)), timeout=400,
                 what="both held runs' deadline stops")
        hold.unlink()
        assert proc.wait(timeout=900) == 0, (work / "snakemake.log").read_text()[-5000:]
        return work, submitted_since(env, since, work), env


def seen(work, run_name):
    return json.loads((work / "seen" / f"{run_name}-0.json").read_text())


def test_six_seeds_packed_are_two_jobs_each_run_a_step_with_a_gpu_of_its_own(packed):
    work, jobs, env = packed
    by_job = {}
    for seed in SEEDS:
        by_job.setdefault(seen(work, f"p-seed{seed}")["SLURM_JOB_ID"], []).append(seen(work, f"p-seed{seed}"))
    assert len(by_job) == 2 and all(len(runs) == 3 for runs in by_job.values())
    unpacked = {seen(work, f"u-seed{seed}")["SLURM_JOB_ID"] for seed in SEEDS}
    others = {read_json(work / f"results/{r}/train.json")["slurm_job_id"] for r in ("held-seed0", "held-seed1",
                                                                                     "ref-seed0")}
    scripts = {read_json(work / f"results/sc-seed{seed}/train.json")["slurm_job_id"] for seed in (0, 1)}
    assert len(unpacked) == 6 and len(scripts) == 1
    assert set(jobs) == set(by_job) | unpacked | others | scripts   # nothing else was submitted
    for job_id, runs in by_job.items():
        assert sorted(r["CUDA_VISIBLE_DEVICES"] for r in runs) == ["0", "1", "2"]   # no GPU shared
        assert len({r["SLURM_STEP_ID"] for r in runs}) == 3
        # each run's step, as SLURM accounted it: one GPU, its own cores and memory
        steps = dict(line.split("|") for line in run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,AllocTRES"],
                                                       env=env).stdout.splitlines())
        for r in runs:
            assert "gres/gpu=1," in steps[f"{job_id}.{r['SLURM_STEP_ID']}"], steps


def test_each_packed_run_ends_with_the_weights_of_the_same_seed_unpacked(packed):
    work, _, _ = packed
    for seed in SEEDS:
        paths = [read_json(work / f"results/{r}-seed{seed}/checkpoint.json")["path"] for r in ("p", "u")]
        ours, theirs = (torch.load(path, weights_only=True)["model"] for path in paths)
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), seed


def test_each_pack_staged_its_dataset_once(packed):
    work, _, _ = packed
    targets = {}
    for seed in SEEDS:
        stage = read_json(work / f"results/p-seed{seed}/stage.json")
        targets.setdefault(seen(work, f"p-seed{seed}")["SLURM_JOB_ID"], set()).add(stage["target"])
    assert all(len(t) == 1 for t in targets.values()), targets   # one copy per job, read by its three runs
    assert sum((work / f"logs/p-seed{seed}/stage.log").exists() for seed in SEEDS) == 2


def test_the_report_gives_each_packed_run_its_own_steps_share(packed):
    work, _, env = packed
    rows = {r["run"]: r for r in csv.DictReader(open(work / "results/report/efficiency.csv"))}
    for seed in SEEDS:
        ours, theirs = rows[f"p-seed{seed}"], rows[f"u-seed{seed}"]
        step = read_json(work / f"results/p-seed{seed}/train.json")["slurm_step"]
        assert step == f"{ours['job_id']}.{seen(work, f'p-seed{seed}')['SLURM_STEP_ID']}"
        elapsed = run(["sacct", "-n", "-P", "-j", step, "-o", "ElapsedRaw"], env=env).stdout.split()[0]
        # one GPU, a core and 2 GB: the same request as the run that had a job to itself, over its step's time
        assert (ours["gpus"], ours["cpus"], float(ours["mem_alloc_mb"])) == \
            (theirs["gpus"], theirs["cpus"], float(theirs["mem_alloc_mb"])) == ("1", "1", 2048.0)
        assert float(ours["elapsed_s"]) == float(elapsed)
    # a script's train.json is the launcher's, written outside its step: the step is found by its name in sacct
    for seed in (0, 1):
        ours = rows[f"sc-seed{seed}"]
        steps = [line.split("|") for line in run(["sacct", "-n", "-P", "-j", ours["job_id"], "-o",
                                                   "JobName,ElapsedRaw,AllocTRES"], env=env).stdout.splitlines()]
        [(elapsed, tres)] = [(e, t) for name, e, t in steps if name == f"sc-seed{seed}"]
        assert "gres/gpu=1," in tres and (ours["gpus"], float(ours["elapsed_s"])) == ("1", float(elapsed))
    # each job that runs shared keeps its own row: the whole allocation
    packs = {r["run"]: r for r in rows.values() if r["state"] == "pack"}
    assert set(packs) == {"pack-p-seed0", "pack-p-seed3", "pack-held-seed0", "pack-sc-seed0"}
    assert (packs["pack-p-seed0"]["gpus"], packs["pack-sc-seed0"]["gpus"]) == ("3", "2")


def test_a_packed_job_at_its_deadline_stops_every_run_requeues_once_and_each_resumes(packed):
    work, _, env = packed
    runs = work / "scratch" / "airetrain"
    jobs = set()
    for seed in (0, 1):
        lives = sessions(runs / f"held-seed{seed}")
        jobs |= {life["slurm_job_id"] for life in lives}
        assert len(lives) >= 2 and all(life["resumed_from_step"] > 0 for life in lives[1:]), lives
        assert {s["action"] for s in stops(runs / f"held-seed{seed}")} == {"stopped: its pack requeues the job"}
        trained = read_json(work / f"results/held-seed{seed}/train.json")
        steps = [json.loads(line)["step"] for line in open(work / f"results/held-seed{seed}/metrics.jsonl")
                 if '"loss"' in line]
        assert steps == sorted(set(steps)) and steps[-1] == trained["steps"]   # each step once, to the end
        # one W&B run across the requeue, by W&B's own offline files: each training session, then the promote's
        [(run_id, tracked)] = wandb_sessions(work / "scratch", f"held-seed{seed}").items()
        assert run_id == trained["tracking"]["wandb"]["id"] and len(tracked) >= 3
        assert each_step_once([row for rows in tracked for row in rows])["train/loss"] == steps
    assert len(jobs) == 1   # one job for both, requeued by SLURM rather than submitted again
    shown = run(["scontrol", "show", "job", jobs.pop()], env=env).stdout
    assert "Restarts=0" not in shown and "JobState=COMPLETED" in shown, shown
    assert_identical(final_state(work / "results/held-seed0", work), final_state(work / "results/ref-seed0", work))

