"""A packed dataset on the real SLURM cluster, on 2 nodes: staged once onto a fast root both nodes see
($TMP_SHARED, as on Aire). (Where the fast root is node-local, $TMPDIR, it is staged on every node:
test_slurm.py's site-default run.)"""
import time

import pytest

from airetrain.stage.pack import pack
from airetrain.stage.prepare import prepare_digits_images
from conftest import ending_what_it_starts, read_json, slurm_state, snakemake_cmd, spawn, write_config
from test_slurm import SLURM_ARGS, STAND_IN, sacct_jobs, unique

pytestmark = pytest.mark.slurm


def shard_workflow(work, env):
    """A 2-node image_folder run from the digits packed into 19 shards, started in the background."""
    folder = prepare_digits_images(work / "scratch" / "digits")
    pack(folder, work / "scratch" / "digits-shards", shard_bytes=100_000, log=lambda line: None)
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        "runs": {"s6": {**STAND_IN, "gpus": 6, "batch": {"global": 96, "per_device": 16},
                        "data": {"name": "image_folder", "path": "digits-shards", "shape": [1, 8, 8],
                                 "random_flip": False},
                        "train": {"epochs": 2, "log_every_steps": 5}}}})
    return spawn(snakemake_cmd(work, cfg, *SLURM_ARGS, "--jobs", "1"), work / "snakemake.log", cwd=work, env=env)


def finished(work, env, since, proc):
    """(stage.json, the stage log, the job) of a shard workflow, once it ended well."""
    assert proc.wait(timeout=600) == 0, (work / "snakemake.log").read_text()[-3000:]
    (job,) = sacct_jobs(env, since, workdir=work).values()
    assert job["State"] == "COMPLETED" and job["NNodes"] == "2"
    train = read_json(work / "results/s6/train.json")
    assert train["nodes"] == 2 and train["eval_accuracy"] > 0.5   # it trained on what it staged
    return read_json(work / "results/s6/stage.json"), (work / "logs/s6/stage.log").read_text(), job


@pytest.fixture(scope="module")
def staged(slurm_cluster, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("shared")
        shared = work / "flash" / "job"   # what $TMP_SHARED is on Aire: one directory every node sees
        node_tmp = slurm_state() / "nodetmp" / "local" / unique(work)
        env = {**slurm_cluster, "TMP_SHARED": str(shared), "TMPDIR": str(node_tmp)}
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
        return (shared, *finished(work, env, since, shard_workflow(work, env)))


def test_a_shared_fast_root_is_staged_once_per_job(staged):
    shared, stage, log, job = staged
    assert stage["fast_root_source"] == "$TMP_SHARED" and stage["fast_root"] == str(shared)
    assert stage["format"] == "shards" and stage["mode"] == "copied" and stage["sha256_verified"]
    assert stage["nodes"] is None and stage["host"] in ("labgpu1", "labgpu2")
    assert stage["copied_files"] == stage["files"] == 19 + 3
    assert log.count("staged 22 files") == 1 and "node-local" not in log
    assert len(list((shared / "airetrain/s6/data").glob("shard-*.tar"))) == 19
