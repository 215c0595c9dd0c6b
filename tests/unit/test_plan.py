"""plan: layout, resources, batch maths, and every refusal, before anything is submitted."""
import pytest

from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.records import BatchPlan

from conftest import ENV, run, write_config


def plan(run_cfg: dict, **top):
    return plan_all({"runs": {"r": run_cfg}, **top}, env=ENV)["r"]


def refused(run_cfg: dict, **top) -> str:
    with pytest.raises(ConfigError) as e:
        plan(run_cfg, **top)
    return str(e.value)


@pytest.mark.parametrize("gpus,nodes,per_node,gres", [(1, 1, 1, "gpu:1"), (2, 1, 2, "gpu:2"), (3, 1, 3, "gpu:3"),
                                                      (6, 2, 3, "gpu:3"), (12, 4, 3, "gpu:3")])
def test_gpus_to_nodes_gres_and_ranks(gpus, nodes, per_node, gres):
    p = plan({"gpus": gpus, "batch": {"global": 32 * gpus, "per_device": 32}})
    assert (p.nodes, p.nproc_per_node, p.world_size) == (nodes, per_node, gpus)
    assert p.slurm.gres == gres and p.slurm.nodes == nodes == p.slurm.tasks
    assert p.device == "cuda" and p.backend == "nccl"
    assert p.cpus_per_node == 8 * per_node            # Aire's share per GPU
    assert p.slurm.mem_mb == 80 * 1024 * per_node


def test_cpu_run_uses_processes_and_gloo():
    p = plan({"gpus": 0, "processes": 3, "batch": {"global": 96, "per_device": 16}})
    assert (p.nodes, p.nproc_per_node, p.world_size) == (1, 3, 3)
    assert p.device == "cpu" and p.backend == "gloo" and p.slurm.gres is None
    assert p.batch == BatchPlan(96, 16, 2)
    assert p.torchrun == ["--standalone", "--nnodes=1", "--nproc_per_node=3", "--max-restarts=1"]


def test_cpu_stand_in_for_gpu_plans_is_explicit():
    p = plan({"gpus": 6, "device": "cpu", "batch": {"global": 192}})
    assert p.device == "cpu" and p.backend == "gloo"
    assert p.slurm.gres == "gpu:3" and p.world_size == 6


def test_multi_node_torchrun_uses_c10d_rendezvous():
    p = plan({"gpus": 6, "batch": {"global": 192}})
    args = p.torchrun
    assert "--nnodes=2" in args and "--nproc_per_node=3" in args and "--rdzv_backend=c10d" in args
    assert "--node_rank=$SLURM_NODEID" in args and "--standalone" not in args
    assert p.env["NCCL_DEBUG"] == "WARN" and p.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_job_environment_threads_per_rank():
    p = plan({"gpus": 3, "cpus_per_rank": 6, "batch": {"global": 96}})
    assert p.env["OMP_NUM_THREADS"] == "6" == p.env["MKL_NUM_THREADS"]
    assert p.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "NCCL_DEBUG" not in p.env  # single node


def test_global_batch_to_accumulation():
    p = plan({"gpus": 3, "batch": {"global": 384, "per_device": 32}})
    assert p.batch.grad_accum == 4


@pytest.mark.parametrize("gpus", [4, 5, 7])
def test_gpus_that_do_not_fill_nodes_are_refused(gpus):
    msg = refused({"gpus": gpus, "batch": {"global": 32 * gpus}})
    assert f"runs.r.gpus = {gpus} is impossible" in msg and "a node has 3 GPUs" in msg
    assert "ask for gpus:" in msg


def test_four_gpus_forced_onto_one_node_is_refused():
    msg = refused({"gpus": 6, "nodes": 1, "batch": {"global": 192}})
    assert "runs.r.nodes = 1 is impossible" in msg and "set nodes: 2" in msg


def test_nproc_per_node_must_equal_gpus_per_node():
    msg = refused({"gpus": 3, "nproc_per_node": 1, "batch": {"global": 96}})
    assert "runs.r.nproc_per_node = 1" in msg and "set nproc_per_node: 3" in msg


def test_batch_that_does_not_divide_names_values_that_would():
    msg = refused({"gpus": 3, "batch": {"global": 100, "per_device": 32}})
    assert "runs.r.batch.global = 100" in msg
    assert "batch.global: 96" in msg and "batch.global: 192" in msg


def test_dataset_under_home_is_refused():
    msg = refused({"data": {"path": "/home/user/data/digits"}})
    assert "runs.r.data.path" in msg and "$HOME" in msg


def test_scratch_root_under_home_is_refused():
    msg = refused({}, roots={"scratch": "/home/user/scratch"})
    assert "roots.scratch" in msg and "$HOME" in msg


def test_laptop_fallback_under_home_is_allowed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = plan_all({"runs": {"r": {}}}, env={"HOME": str(tmp_path)})["r"]
    assert p.roots.scratch_source == "working directory"
    assert p.dataset == tmp_path / ".airetrain/scratch/datasets/digits"


def test_too_many_cores_or_memory_per_node_is_refused():
    msg = refused({"gpus": 3, "cpus_per_rank": 10, "mem_gb_per_rank": 100, "batch": {"global": 96}})
    assert "cpus_per_rank = 10" in msg and "use cpus_per_rank: 8" in msg
    assert "mem_gb_per_rank = 100" in msg


def test_every_bad_run_is_reported_at_once():
    with pytest.raises(ConfigError) as e:
        plan_all({"runs": {"a": {"gpus": 4}, "b": {"gpus": 3, "nproc_per_node": 2}, "ok": {}}}, env=ENV)
    assert "run 'a' refused" in str(e.value) and "run 'b' refused" in str(e.value)


def test_cli_prints_a_table_and_refuses_with_exit_2(tmp_path):
    good = write_config(tmp_path / "good.yaml", {"runs": {"one": {"gpus": 1}, "six": {"gpus": 6,
                                                 "batch": {"global": 192}}}})
    out = run(["airetrain", "plan", "--configfile", str(good)], env=ENV).stdout
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "gpu:1" in lines["one"] and "gpu:3" in lines["six"]
    assert "192 = 32 x 6 x 1" in lines["six"]
    bad = write_config(tmp_path / "bad.yaml", {"runs": {"x": {"gpus": 4}}})
    proc = run(["airetrain", "plan", "--configfile", str(bad)], env=ENV, check=False)
    assert proc.returncode == 2 and "runs.x.gpus = 4 is impossible" in proc.stderr


def test_the_hang_watchdogs_timeout_is_checked_against_the_stop_margin_and_the_job():
    with pytest.raises(ConfigError, match=r"train.hang_timeout_min = 5 is not above checkpoint.stop_margin_min = 5"):
        plan({"train": {"hang_timeout_min": 5}})
    short = plan({"time_min": {"stage": 1, "train": 10, "promote": 1}})   # the default 15 min, a 12-min job
    assert any("hang_timeout_min = 15 is not shorter than the job (12 min)" in w for w in short.warnings)
    off = plan({"time_min": {"stage": 1, "train": 10, "promote": 1}, "train": {"hang_timeout_min": 0}})
    assert not any("hang_timeout_min" in w for w in off.warnings)
    gpu = plan({"gpus": 3, "batch": {"global": 96}})
    assert gpu.env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and gpu.env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert gpu.env["TORCH_FR_DUMP_TEMP_FILE"].endswith("/airetrain/r/hangs/nccl-timeout/rank_")


def test_a_stop_margin_that_leaves_no_training_time_is_refused():
    with pytest.raises(ConfigError, match="stop_margin_min = 30 leaves no time to train in a job of 30 min"):
        plan({"time_min": {"stage": 5, "train": 20, "promote": 5}, "checkpoint": {"stop_margin_min": 30}})
    p = plan({"checkpoint": {"requeue": True, "max_restarts": 2}})
    assert "--requeue" in p.slurm.extra and "--max-restarts=2" in p.torchrun
    assert "--requeue" not in plan({"checkpoint": {"requeue": False}}).slurm.extra


def test_a_monitored_figure_the_run_will_not_report_is_refused_with_the_nearest_name():
    """Caught before the queue, not inside the job after the first epoch."""
    msg = refused({"checkpoint": {"monitor": "eval_acc"}})
    assert ("runs.r.checkpoint.monitor = 'eval_acc' is not a figure this run reports (did you mean 'eval_accuracy'?); "
            "small_cnn with its loss reports eval_loss, eval_accuracy") in msg
    assert "reports eval_loss" in refused({"train": {"loss": "mse"}, "checkpoint": {"monitor": "eval_accuracy"}})
    tuned = {"tune": {"space": {"optim.lr": {"uniform": [0.1, 0.2]}}, "metric": "eval_dise"}}
    unet = {"model": {"name": "unet"}, "data": {"name": "shapes"}}
    assert "runs.r.tune.metric = 'eval_dise'" in refused({**unet, **tuned})
    assert plan({"model": {"name": "unet"}, "data": {"name": "shapes"}, "checkpoint": {"monitor": "eval_dice"}})
    # a user's metrics (or model) decide their own names: not checked
    assert plan({"train": {"metrics": "mylab.metrics:dice"}, "checkpoint": {"monitor": "eval_dice"}})


def test_a_search_without_optuna_is_refused_with_its_pip_command(monkeypatch):
    """This machine has Optuna; the plan is asked as on one without it."""
    import importlib.util
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else found(name, *a))
    msg = refused({"tune": {"space": {"optim.lr": {"uniform": [0.1, 0.2]}}}})
    assert "runs.r.tune needs the optuna package, which is not installed here: pip install 'airetrain[tune]'" in msg


def test_runs_sharing_one_sqlite_mlflow_store_are_warned_about(caplog):
    sqlite = {"tracking": {"mlflow": {"tracking_uri": "sqlite:///mlflow.db"}}}
    plan_all({"defaults": {**sqlite, "seeds": [0, 1]}, "runs": {"a": {}}}, env=ENV)
    assert "runs a-seed0, a-seed1 would write one SQLite MLflow store, sqlite:///mlflow.db, at once" in caplog.text
    assert "Use an MLflow server" in caplog.text
    caplog.clear()
    plan_all({"runs": {"a": sqlite, "b": {"tracking": {"mlflow": {"tracking_uri": "sqlite:///b.db"}}}}}, env=ENV)
    assert "SQLite" not in caplog.text   # a store each


def test_a_gpus_share_of_cores_and_memory_follows_the_sites_facts():
    """Aire (24 cores, 250 GB, 3 GPUs a node): 8 cores and 80 GB a GPU; a node of 4 A100s: 6 and 60."""
    aire = plan({"gpus": 3, "batch": {"global": 96}})
    assert (aire.cpus_per_rank, aire.mem_gb_per_node) == (8, 240)
    a100 = {"gpus_per_node": 4, "gpu_type": "a100", "cores_per_node": 24, "mem_gb_per_node": 250}
    other = plan({"gpus": 8, "batch": {"global": 256}}, site=a100)
    assert (other.nodes, other.cpus_per_rank, other.cpus_per_node, other.mem_gb_per_node) == (2, 6, 24, 240)


def test_a_profile_on_ranks_the_run_lacks_or_of_a_script_is_refused_and_a_wrong_key_named():
    cpu = {"device": "cpu", "processes": 2, "data": {"name": "synthetic"}}
    assert plan({**cpu, "train": {"profile": {"ranks": [1]}}}).config.train.profile.ranks == [1]
    msg = refused({**cpu, "train": {"profile": {"ranks": [0, 2, 3]}}})
    assert "runs.r.train.profile.ranks: 2, 3 not among the run's 2 ranks (0-1)" in msg
    msg = refused({**cpu, "train": {"script": "train.py", "profile": {}}})
    assert "runs.r.train.profile is the built-in trainer's" in msg
    msg = refused({**cpu, "train": {"profile": {"step": 3}}})
    assert "step" in msg and "start_step" in msg
