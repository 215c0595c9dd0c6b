"""Many small runs, few allocations, on the SLURM test cluster (Aire's shape: 3 GPUs a node): six one-GPU
seeds with pack: auto share two allocations, each run its own SLURM step with its own GPU; the same six
seeds with pack: none, in the same pipeline, are six jobs and the reference for the weights.

What each rank saw is written by the test's own model (its CUDA_VISIBLE_DEVICES, SLURM's job and step ids),
and the jobs and steps are SLURM's accounting; the weights are the checkpoints' bytes."""
import csv
import json

import pytest
import torch

from conftest import ending_what_it_starts, read_json, run, slurm_state, write_config
from test_slurm import slurm_snakemake, submitted_since, unique

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


@pytest.fixture(scope="module")
def packed(slurm_cluster, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("pack")
        (work / "gpulab.py").write_text(NOTED)
        (work / "seen").mkdir()
        model = {"name": "gpulab:noted", "options": {"log": str(work / "seen")}}
        cfg = write_config(work / "config.yaml", {
            "roots": {"scratch": str(work / "scratch")},
            "runs": {"p": {**ONE_GPU, "model": model, "pack": "auto"}, "u": {**ONE_GPU, "model": model}}})
        env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work)),
               "PYTHONPATH": str(work)}
        since = run(["date", "+%Y-%m-%dT%H:%M:%S"]).stdout.strip()
        slurm_snakemake(work, cfg, env, "--jobs", "8")
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
    assert len(unpacked) == 6 and set(jobs) == set(by_job) | unpacked   # nothing else was submitted
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
        ours, theirs = (torch.load(read_json(work / f"results/{r}-seed{seed}/checkpoint.json")["path"],
                                   weights_only=True)["model"] for r in ("p", "u"))
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
