"""A packed dataset on the real SLURM cluster, on 2 nodes: staged once onto a fast root both nodes see
($TMP_SHARED, as on Aire), and on every node where the fast root is node-local ($TMPDIR)."""
import time

import pytest

from airetrain.stage.prepare import prepare_digits_images
from airetrain.stage.pack import pack
from conftest import read_json, slurm_state, write_config
from test_slurm import STAND_IN, sacct_jobs, slurm_snakemake, unique

pytestmark = pytest.mark.slurm


def shard_run(work, env):
    """One 2-node image_folder run from the digits packed into 19 shards; returns (stage.json, log, job)."""
    folder = prepare_digits_images(work / "scratch" / "digits")
    pack(folder, work / "scratch" / "digits-shards", shard_bytes=100_000, log=lambda line: None)
    cfg = write_config(work / "config.yaml", {
        "roots": {"scratch": str(work / "scratch")},
        "runs": {"s6": {**STAND_IN, "gpus": 6, "batch": {"global": 96, "per_device": 16},
                        "data": {"name": "image_folder", "path": "digits-shards", "shape": [1, 8, 8],
                                 "random_flip": False},
                        "train": {"epochs": 2, "log_every_steps": 5}}}})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    slurm_snakemake(work, cfg, env, "--jobs", "1")
    (job,) = sacct_jobs(env, since).values()
    assert job["State"] == "COMPLETED" and job["NNodes"] == "2"
    train = read_json(work / "results/s6/train.json")
    assert train["nodes"] == 2 and train["eval_accuracy"] > 0.5   # it trained on what it staged
    return read_json(work / "results/s6/stage.json"), (work / "logs/s6/stage.log").read_text(), job


@pytest.fixture(scope="module")
def node_tmp(tmp_path_factory):
    return lambda work: str(slurm_state() / "nodetmp" / "local" / unique(work))


def test_a_shared_fast_root_is_staged_once_per_job(slurm_cluster, tmp_path, node_tmp):
    shared = tmp_path / "flash" / "job"   # what $TMP_SHARED is on Aire: one directory every node sees
    env = {**slurm_cluster, "TMP_SHARED": str(shared), "TMPDIR": node_tmp(tmp_path)}
    stage, log, job = shard_run(tmp_path, env)
    assert stage["fast_root_source"] == "$TMP_SHARED" and stage["fast_root"] == str(shared)
    assert stage["format"] == "shards" and stage["mode"] == "copied" and stage["sha256_verified"]
    assert stage["nodes"] is None and stage["host"] in ("labgpu1", "labgpu2")
    assert stage["copied_files"] == stage["files"] == 19 + 3
    assert log.count("staged 22 files") == 1 and "node-local" not in log
    assert len(list((shared / "airetrain/s6/data").glob("shard-*.tar"))) == 19


def test_a_node_local_fast_root_is_staged_on_every_node(slurm_cluster, tmp_path, node_tmp):
    env = {**slurm_cluster, "TMPDIR": node_tmp(tmp_path)}
    env.pop("TMP_SHARED", None)
    stage, log, job = shard_run(tmp_path, env)
    assert stage["fast_root_source"] == "$TMPDIR" and sorted(stage["nodes"]) == ["labgpu1", "labgpu2"]
    assert "node-local: staging on each of 2 nodes" in log
    for host, record in stage["nodes"].items():
        assert record["format"] == "shards" and record["copied_files"] == 22 and record["host"] == host
