"""A packed dataset on the real SLURM cluster, on 2 nodes: staged once onto a fast root both nodes see
($TMP_SHARED, as on Aire), and on every node where the fast root is node-local ($TMPDIR). The two
workflows run at once, each in its own directory, on the cluster's two GPU nodes."""
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
        shared_work, local_work = tmp_path_factory.mktemp("shared"), tmp_path_factory.mktemp("node-local")
        node_tmp = {work: str(slurm_state() / "nodetmp" / "local" / unique(work)) for work in (shared_work, local_work)}
        shared = shared_work / "flash" / "job"   # what $TMP_SHARED is on Aire: one directory every node sees
        shared_env = {**slurm_cluster, "TMP_SHARED": str(shared), "TMPDIR": node_tmp[shared_work]}
        local_env = {**slurm_cluster, "TMPDIR": node_tmp[local_work], "TMP_SHARED": ""}
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
        procs = {work: shard_workflow(work, env) for work, env in ((shared_work, shared_env), (local_work, local_env))}
        return {"shared": (shared, *finished(shared_work, shared_env, since, procs[shared_work])),
                "node-local": finished(local_work, local_env, since, procs[local_work])}


def test_a_shared_fast_root_is_staged_once_per_job(staged):
    shared, stage, log, job = staged["shared"]
    assert stage["fast_root_source"] == "$TMP_SHARED" and stage["fast_root"] == str(shared)
    assert stage["format"] == "shards" and stage["mode"] == "copied" and stage["sha256_verified"]
    assert stage["nodes"] is None and stage["host"] in ("labgpu1", "labgpu2")
    assert stage["copied_files"] == stage["files"] == 19 + 3
    assert log.count("staged 22 files") == 1 and "node-local" not in log
    assert len(list((shared / "airetrain/s6/data").glob("shard-*.tar"))) == 19


def test_a_node_local_fast_root_is_staged_on_every_node(staged):
    stage, log, job = staged["node-local"]
    assert stage["fast_root_source"] == "$TMPDIR" and sorted(stage["nodes"]) == ["labgpu1", "labgpu2"]
    assert "node-local: staging on each of 2 nodes" in log
    for host, record in stage["nodes"].items():
        assert record["format"] == "shards" and record["copied_files"] == 22 and record["host"] == host
