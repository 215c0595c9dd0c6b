"""The site's facts read from the real SLURM test cluster (`airetrain site`), and a plan whose `site:` is another
cluster's warned about, naming each fact that differs."""
import os

import pytest
import yaml

from airetrain.schema import load_schema
from conftest import BIN, REPO, run, write_config

pytestmark = pytest.mark.slurm
# another cluster's GPU nodes, as a user would copy them from its documentation
ELSEWHERE = {"gpus_per_node": 4, "gpu_type": "v100", "cores_per_node": 40, "mem_gb_per_node": 500,
             "max_wall_hours": 24}


@pytest.fixture
def gpu_cap(slurm_cluster):
    """A QoS of its own with a per-user GPU cap, as Aire's has, for this test only (no job runs under it)."""
    env = {**os.environ, **slurm_cluster}
    run(["sacctmgr", "-i", "add", "qos", "site_cap", "set", "MaxTRESPerUser=gres/gpu=12"], env=env)
    try:
        yield env
    finally:
        run(["sacctmgr", "-i", "delete", "qos", "site_cap"], env=env)


def test_airetrain_site_writes_the_facts_the_cluster_was_started_with(gpu_cap, tmp_path):
    env = {**gpu_cap, "PATH": f"{BIN}:{os.environ['PATH']}"}
    out = run([str(BIN / "airetrain"), "site", "--partition", "gpu", "--qos", "site_cap", "--write",
               str(tmp_path / "site.yaml")], env=env, cwd=tmp_path).stdout
    written = yaml.safe_load((tmp_path / "site.yaml").read_text())["site"]
    # tests/slurm/up.sh: labgpu[1-2], Gres=gpu:l40s:3, CPUs=24, RealMemory=256000, MaxTime=2-00:00:00
    assert written == {"max_wall_hours": 48.0, "gpus_per_node": 3, "gpu_type": "l40s", "cores_per_node": 24,
                       "mem_gb_per_node": 250.0, "max_gpus_per_user": 12}
    defaults = load_schema()["properties"]["site"]["properties"]   # read from SLURM, not the defaults printed
    assert written["max_gpus_per_user"] != defaults["max_gpus_per_user"]["default"]
    assert "# max_gpus_per_user: QoS site_cap (the job's) MaxTRESPerUser" in out
    assert "# not found: the fast root: not told on a login node" in out
    default = run([str(BIN / "airetrain"), "site"], env=env, cwd=tmp_path).stdout
    assert "# partition standard, read from SLURM" in default and "gpus_per_node: 0" in default


def test_a_plan_with_another_clusters_facts_is_warned_about_and_slurms_own_are_not(slurm_cluster, tmp_path):
    env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}"}
    run_cfg = {"gpus": 3, "device": "cpu", "batch": {"global": 96, "per_device": 32}}
    wrong = write_config(tmp_path / "wrong.yaml", {"site": ELSEWHERE, "runs": {"g3": run_cfg}})
    text = run([str(BIN / "airetrain"), "plan", "--configfile", str(wrong)], env=env, cwd=tmp_path).stderr
    assert ("site: disagrees with SLURM's partition gpu: site.gpus_per_node = 4, SLURM says 3; site.gpu_type = "
            "'v100', SLURM says 'l40s'; site.cores_per_node = 40, SLURM says 24; site.mem_gb_per_node = 500, "
            "SLURM says 250.0; site.max_wall_hours = 24, SLURM says 48.0") in text
    run([str(BIN / "airetrain"), "site", "--partition", "gpu", "--write", str(tmp_path / "site.yaml")], env=env,
        cwd=tmp_path)
    right = write_config(tmp_path / "right.yaml", {"runs": {"g3": run_cfg}})
    text = run([str(BIN / "airetrain"), "plan", "--configfile", str(right), str(tmp_path / "site.yaml")], env=env,
               cwd=tmp_path).stderr
    assert "disagrees" not in text and REPO.exists()


def test_init_on_a_cluster_writes_its_facts_and_the_project_plans_without_a_warning(slurm_cluster, tmp_path):
    env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}"}
    run([str(BIN / "airetrain"), "init", "project", "--gpus", "3", "--partition", "gpu"], env=env, cwd=tmp_path)
    config = yaml.safe_load((tmp_path / "project/config/config.yaml").read_text())
    assert config["defaults"]["slurm"] == {"partition": "gpu"}
    assert config["site"] == {"max_wall_hours": 48.0, "gpus_per_node": 3, "gpu_type": "l40s", "cores_per_node": 24,
                              "mem_gb_per_node": 250.0}
    text = run([str(BIN / "airetrain"), "plan"], env={**env, "SCRATCH": str(tmp_path / "scratch")},
               cwd=tmp_path / "project")
    assert "first" in text.stdout and "disagrees" not in text.stderr
    bad = run([str(BIN / "airetrain"), "init", "other", "--partition", "gpu;id"], env=env, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "--partition 'gpu;id': a SLURM name is" in bad.stderr


def test_the_gpu_cap_is_read_where_the_site_sets_it_and_the_one_that_binds_is_named(slurm_cluster, tmp_path):
    """Many sites cap GPUs in the partition's QoS, some in the user's association: both read, the smaller kept."""
    env = {**os.environ, **slurm_cluster, "PATH": f"{BIN}:{os.environ['PATH']}"}
    site = [str(BIN / "airetrain"), "site", "--partition", "gpu"]
    run(["sacctmgr", "-i", "add", "qos", "part_cap", "set", "MaxTRESPerUser=gres/gpu=7"], env=env)
    try:
        run(["scontrol", "update", "PartitionName=gpu", "QOS=part_cap"], env=env)
        out = run(site, env=env, cwd=tmp_path).stdout
        assert "max_gpus_per_user: 7\n" in out
        assert "# max_gpus_per_user: the partition's QoS part_cap MaxTRESPerUser" in out
        run(["sacctmgr", "-i", "modify", "user", "where", "name=root", "set", "GrpTRES=gres/gpu=5"], env=env)
        out = run(site, env=env, cwd=tmp_path).stdout
        assert "max_gpus_per_user: 5\n" in out and "# max_gpus_per_user: your association's GrpTRES" in out
    finally:
        run(["sacctmgr", "-i", "modify", "user", "where", "name=root", "set", "GrpTRES=gres/gpu=-1"], env=env)
        run(["scontrol", "update", "PartitionName=gpu", "QOS="], env=env)
        run(["sacctmgr", "-i", "delete", "qos", "part_cap"], env=env)
