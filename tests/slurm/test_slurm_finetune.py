"""A fine-tuning pipeline on the real SLURM cluster: a pretraining run, a sweep of two fine-tunes from it
and two evaluation runs of it, in one config. Snakemake runs them in order, each in its own job (sacct's
times show it); the fine-tunes start from the pretraining run's promoted best weights and keep its frozen
prefix; the evaluations load its weights and evaluate them, one on its own data, one on a second dataset."""
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
        # on its own data, with DDP over 2 ranks where it trained on 1: its own figures
        "eval-same": {"evaluate": {"run": "pretrain", "which": "last"}, "processes": 2},
        "eval-other": {"evaluate": {"run": "pretrain"},                     # a second dataset of the same shape
                       "data": {"name": "synthetic", "shape": [1, 8, 8], "classes": 10, "samples": 256}},
    },
}


def test_a_pretraining_run_and_two_fine_tunes_run_in_order_from_its_promoted_weights(slurm_cluster, tmp_path):
    from safetensors.torch import load_file

    work = tmp_path
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    cfg = write_config(work / "config.yaml", {"roots": {"scratch": str(work / "scratch")}, **PIPELINE})
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.monotonic()
    slurm_snakemake(work, cfg, env, "--jobs", "4")
    print(f"pretrain + 2 fine-tunes + 2 evaluations on the test cluster: {time.monotonic() - t0:.0f} s wall")

    later = ("finetune-lr1e-3", "finetune-lr3e-4", "eval-same", "eval-other")
    ids = {name: read_json(work / f"results/{name}/train.json")["slurm_job_id"] for name in ("pretrain", *later)}
    times = {j["JobID"]: j for j in _times(env, since)}
    pre, tunes = times[ids["pretrain"]], [times[ids[n]] for n in later]
    assert len(set(ids.values())) == 5 and all(t["Start"] >= pre["End"] for t in tunes), (pre, tunes)
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

    # the evaluations: the pretraining run's weights, no step trained; on its own data, its own figures
    pretrain = read_json(work / "results/pretrain/train.json")
    final = read_json(work / "results/pretrain/checkpoint.json")["weights"]
    same, other = (read_json(work / f"results/{n}/train.json") for n in ("eval-same", "eval-other"))
    assert same["evaluates"] == {"run": "pretrain", "which": "last"} and same["steps"] == 0
    assert same["init"]["sha256"] == final["sha256"] and other["init"]["sha256"] == best["sha256"]
    assert same["eval_loss"] == pytest.approx(pretrain["eval_loss"], rel=1e-6)
    assert same["eval_accuracy"] == pytest.approx(pretrain["eval_accuracy"])
    assert other["eval_loss"] > 0 and other["eval_loss"] != pytest.approx(pretrain["eval_loss"])
    # the other dataset's evaluation trained nothing, and scored that dataset's test split: synthetic's
    # tenth of its 256 samples, not the digits' test split of the run it evaluates
    assert other["steps"] == 0 and other["steps_this_session"] == 0
    assert other["eval_samples"] == 256 // 10 != pretrain["eval_samples"]
    report = (work / "results/report/results.md").read_text()
    assert "| eval-same | pretrain (last) |" in report and "| eval-other | pretrain (best) |" in report
    assert "pretrain (last)" in (work / "results/report/efficiency.md").read_text()

    # retraining the pretraining run retrains its fine-tunes and evaluates again (a dry run lists them)
    dry = snakemake(work, cfg, *SLURM_ARGS, "-n", "--forcerun", "results/pretrain/train.json", env=env)
    for name in later:
        assert f"results/{name}/train.json" in dry.stdout, name


def _times(env, since: str) -> list[dict]:
    fields = ["JobID", "Start", "End"]
    out = run(["sacct", "-X", "-n", "-P", "-S", since, "-o", ",".join(fields)], env=env).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]
