"""A cluster that is not Aire: the SLURM test cluster started as another site (tests/slurm/up.sh's shape
variables), beside the default one, for these tests alone. 4 GPUs of type a100 per node in a partition
gpu-a100, a QoS gpulimits that caps a user at 8 GPUs (enforced, the user's default), no $TMP_SHARED.

`airetrain site` reads that site's facts; `airetrain init --partition gpu-a100` writes a project that
plans and runs a 2-node run of 8 processes there (CPU stand-ins for the GPUs) under that QoS; the report
names the job's GPU as SLURM gave it, a100, and says why its energy is unknown: that gres type fits
several A100s, and the GPU table never guesses.
"""
import csv
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import BIN, SLURM_DIR, SLURM_SNAKEMAKE, read_json, run

pytestmark = pytest.mark.slurm

SHAPE = {"AIRETRAIN_SLURM_GPU_TYPE": "a100", "AIRETRAIN_SLURM_GPUS_PER_NODE": "4",
         "AIRETRAIN_SLURM_GPU_PARTITION": "gpu-a100", "AIRETRAIN_SLURM_QOS_GPU_CAP": "8",
         "AIRETRAIN_SLURM_NODE_PREFIX": "site", "AIRETRAIN_SLURM_CLUSTER": "othersite",
         "AIRETRAIN_SLURM_PORT": "7117"}   # its daemons' ports apart from the default cluster's (6917 on)


@pytest.fixture(scope="module")
def other_site():
    """The other site's cluster, started for this module and wiped after it."""
    if os.geteuid() != 0:
        problem = "the SLURM test cluster needs root (tests/slurm/up.sh)"
        pytest.fail(problem) if os.environ.get("CI") else pytest.skip(problem)
    state = Path(tempfile.mkdtemp(prefix="airetrain-othersite-", dir="/tmp"))   # its daemons' users reach it
    state.chmod(0o755)
    env = {**os.environ, **SHAPE, "AIRETRAIN_SLURM_STATE": str(state)}
    try:
        run(["bash", str(SLURM_DIR / "up.sh")], env=env, timeout=600)
        yield {"SLURM_CONF": str(state / "etc" / "slurm.conf"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    finally:
        subprocess.run(["bash", str(SLURM_DIR / "down.sh")], env={**env, "AIRETRAIN_SLURM_WIPE": "1"},
                       capture_output=True, timeout=300)
        shutil.rmtree(state, ignore_errors=True)


def test_airetrain_site_reads_the_other_sites_facts(other_site, tmp_path):
    out = run([str(BIN / "airetrain"), "site", "--partition", "gpu-a100", "--write", str(tmp_path / "site.yaml")],
              env=other_site, cwd=tmp_path).stdout
    print(out)
    written = yaml.safe_load((tmp_path / "site.yaml").read_text())["site"]
    # up.sh with SHAPE: sitegpu[1-2], Gres=gpu:a100:4, CPUs=24, RealMemory=256000, MaxTime=2-00:00:00, and
    # the QoS gpulimits (MaxTRESPerUser=gres/gpu=8), the user's default
    assert written == {"max_wall_hours": 48.0, "gpus_per_node": 4, "gpu_type": "a100", "cores_per_node": 24,
                       "mem_gb_per_node": 250.0, "max_gpus_per_user": 8}


def test_aires_defaults_on_the_other_site_are_refused_or_warned_about_before_the_queue(other_site, tmp_path):
    """A project written for Aire (partition gpu, 3 GPUs a node) planned on this cluster: its GPU run is refused
    naming the partitions SLURM has; on the right partition, each of Aire's facts that differs is named."""
    env = {**other_site, "SCRATCH": str(tmp_path / "scratch")}
    run([str(BIN / "airetrain"), "init", "aire-project", "--gpus", "3"], env=env, cwd=tmp_path)
    project = tmp_path / "aire-project"
    refused = run([str(BIN / "airetrain"), "plan"], env=env, cwd=project, check=False)
    assert refused.returncode == 2, refused.stdout
    assert "runs.first.slurm.partition = 'gpu': this cluster has no partition gpu" in refused.stderr
    assert "its partitions: " in refused.stderr and "gpu-a100" in refused.stderr.split("its partitions: ")[1]
    warned = run([str(BIN / "airetrain"), "plan", "--config", "defaults={slurm: {partition: gpu-a100}}"],
                 env=env, cwd=project)
    assert "site: disagrees with SLURM's partition gpu-a100: site.gpus_per_node = 3, SLURM says 4" in warned.stderr


def test_a_project_for_the_other_site_runs_two_nodes_of_four_and_its_report_names_the_a100(other_site, tmp_path):
    env = other_site
    run([str(BIN / "airetrain"), "init", "project", "--gpus", "8", "--partition", "gpu-a100", "--account", "lab"],
        env=env, cwd=tmp_path)
    project = tmp_path / "project"
    config = yaml.safe_load((project / "config/config.yaml").read_text())
    assert config["site"]["gpus_per_node"] == 4 and config["site"]["gpu_type"] == "a100"
    assert config["defaults"]["slurm"] == {"partition": "gpu-a100"}
    # as written, the 8-GPU run plans: each rank gets a GPU's share of this site's node (6 cores, 60 GB)
    plan = run([str(BIN / "airetrain"), "plan"], env=env, cwd=project)
    assert "disagrees" not in plan.stderr, plan.stderr
    assert plan.stdout.split("\n")[2].split()[6:8] == ["24", "240G"], plan.stdout   # cores/node, mem/node
    # CPU stand-ins for the GPUs, as a user without GPUs would set them: 8 processes, 4 on each node
    config["defaults"].update({"device": "cpu", "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
                               "batch": {"global": 128, "per_device": 16}, "train": {"epochs": 1}})
    (project / "config/config.yaml").write_text(yaml.safe_dump(config))
    run([*SLURM_SNAKEMAKE, "--executor", "slurm", "--profile", "profiles/aire",
         "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "1"],
        env=env, cwd=project, timeout=900)
    train = read_json(project / "results/first/train.json")
    assert train["world_size"] == 8 and train["nodes"] == 2
    assert sorted(set(train["hostnames"])) == ["sitegpu1", "sitegpu2"]
    fields = ["JobID", "Partition", "QOS", "NodeList", "AllocTRES"]
    line = run(["sacct", "-X", "-n", "-P", "-j", train["slurm_job_id"], "-o", ",".join(fields)],
               env=env).stdout.splitlines()[0]
    job = dict(zip(fields, line.split("|")))
    assert job["Partition"] == "gpu-a100" and job["QOS"] == "gpulimits" and job["NodeList"] == "sitegpu[1-2]", job
    assert "gres/gpu:a100=8" in job["AllocTRES"], job
    with open(project / "results/report/efficiency.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["run"] == "first")
    print({k: row[k] for k in ("gpu_type", "gpus", "energy_kwh", "co2e_kg", "energy_source")})
    assert row["gpu_type"] == "a100" and row["gpus"] == "8"
    # gres type a100 fits a 40 and an 80 GB card, of 250 to 400 W: the GPU table guesses no figure (on a real
    # A100, train.json's CUDA name decides: tests/unit/test_report_advice.py, test_energy.py)
    assert row["energy_source"] == "unknown: no board power for GPU type a100", row["energy_source"]
