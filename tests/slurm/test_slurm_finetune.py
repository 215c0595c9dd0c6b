"""A fine-tuning pipeline on the real SLURM cluster: a pretraining run and a sweep of two fine-tunes
from it, in one config. Snakemake runs them in order, each in its own job (sacct's times show it);
the fine-tunes start from the pretraining run's promoted best weights and keep its frozen prefix."""
import time

import pytest
import torch

from conftest import read_json, run, slurm_state, snakemake, write_config
from test_slurm import SLURM_ARGS, slurm_snakemake, unique

pytestmark = pytest.mark.slurm

FROZEN = ["0.", "2."]   # small_cnn's convolutions
PIPELINE = {
    "defaults": {"gpus": 0, "processes": 1, "precision": "fp32", "slurm": {"partition": "standard"},
                 "batch": {"global": 64, "per_device": 32}, "train": {"epochs": 1, "log_every_steps": 10}},
    "runs": {
        "pretrain": {},
        "finetune": {"model": {"init_from": {"run": "pretrain"}, "freeze": FROZEN},
                     "sweep": {"optim.lr": ["1e-3", "3e-4"]}},
    },
}


def test_a_pretraining_run_and_two_fine_tunes_run_in_order_from_its_promoted_weights(slurm_cluster, tmp_path):
    from safetensors.torch import load_file

    work = tmp_path
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, **PIPELINE})
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.monotonic()
    slurm_snakemake(work, cfg, env, "--jobs", "3")
    print(f"pretrain + 2 fine-tunes on the test cluster: {time.monotonic() - t0:.0f} s wall")

    ids = {name: read_json(work / f"results/{name}/train.json")["slurm_job_id"]
           for name in ("pretrain", "finetune-lr1e-3", "finetune-lr3e-4")}
    times = {j["JobID"]: j for j in _times(env, since)}
    pre, tunes = times[ids["pretrain"]], [times[ids[n]] for n in ("finetune-lr1e-3", "finetune-lr3e-4")]
    assert len(set(ids.values())) == 3 and all(t["Start"] >= pre["End"] for t in tunes), (pre, tunes)
    print(f"pretrain {pre['Start']}-{pre['End']}; fine-tunes from {min(t['Start'] for t in tunes)} "
          f"to {max(t['End'] for t in tunes)}")

    best = read_json(work / "results/pretrain/checkpoint.json")["best"]["weights"]
    start = load_file(best["path"])
    for run_name in ("finetune-lr1e-3", "finetune-lr3e-4"):
        train = read_json(work / f"results/{run_name}/train.json")
        assert train["init"]["source"] == best["path"] and train["init"]["sha256"] == best["sha256"]
        tuned = load_file(read_json(work / f"results/{run_name}/checkpoint.json")["weights"]["path"])
        frozen = [k for k in tuned if k.startswith(tuple(FROZEN))]
        assert len(frozen) == 4 and all(torch.equal(tuned[k], start[k]) for k in frozen)
        assert not torch.equal(tuned["9.weight"], start["9.weight"])

    # retraining the pretraining run retrains its fine-tunes (a dry run lists them)
    dry = snakemake(work, cfg, *SLURM_ARGS, "-n", "--forcerun", "results/pretrain/train.json", env=env)
    assert "results/finetune-lr1e-3/train.json" in dry.stdout and "results/finetune-lr3e-4/train.json" in dry.stdout


def _times(env, since: str) -> list[dict]:
    fields = ["JobID", "Start", "End"]
    out = run(["sacct", "-X", "-n", "-P", "-S", since, "-o", ",".join(fields)], env=env).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]
