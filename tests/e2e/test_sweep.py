"""Sweeps, site limits, run records, and reruns of exactly the runs a config change affects."""
import subprocess

import pytest

from airetrain.plan import config
from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.plan.sweep import format_value

from conftest import ENV, read_json, snakemake, write_config


def test_grid_expands_with_readable_deterministic_names():
    _, runs = config.resolve({"runs": {"base": {}}, "defaults": {"batch": {"global": 192}},
                              "sweep": {"optim.lr": [1e-3, 3e-4], "gpus": [1, 3, 6]}})
    assert list(runs) == ["base-lr1e-3-g1", "base-lr1e-3-g3", "base-lr1e-3-g6",
                          "base-lr3e-4-g1", "base-lr3e-4-g3", "base-lr3e-4-g6"]
    assert runs["base-lr3e-4-g6"].optim.lr == 3e-4 and runs["base-lr3e-4-g6"].gpus == 6
    assert runs["base-lr3e-4-g6"].optim.name == "adamw"  # the rest of the section is kept


def test_runs_and_sweep_combine():
    _, runs = config.resolve({"runs": {"small": {"model": {"width": 16}}, "wide": {"model": {"width": 64}}},
                              "sweep": {"train.seed": [0, 1]}})
    assert sorted(runs) == ["small-seed0", "small-seed1", "wide-seed0", "wide-seed1"]
    assert runs["wide-seed1"].model.width == 64 and runs["wide-seed1"].train.seed == 1


@pytest.mark.parametrize("value,text", [(0.0003, "3e-4"), (0.5, "0.5"), (0.001, "1e-3"), (64, "64"),
                                        (True, "true"), ("small cnn", "small_cnn")])
def test_values_format_compactly_and_safely(value, text):
    assert format_value(value) == text


def test_unknown_sweep_key_is_an_error():
    with pytest.raises(ConfigError, match="unknown key.*'optim.lrr'"):
        config.resolve({"runs": {"a": {}}, "sweep": {"optim.lrr": [1]}})


def test_name_collision_is_an_error():
    with pytest.raises(ConfigError, match="both expand to 'a-lr1e-3'"):
        config.resolve({"runs": {"a": {}}, "sweep": {"optim.lr": [0.001, 0.001]}})


def test_bad_sweep_value_is_reported_where_it_lands():
    with pytest.raises(ConfigError, match="gpus"):
        config.resolve({"runs": {"a": {}}, "sweep": {"gpus": ["many"]}})


def test_site_limits_refuse_runs_that_cannot_start():
    with pytest.raises(ConfigError, match="exceeds site.max_gpus_per_user = 15"):
        plan_all({"runs": {"x": {"gpus": 18, "batch": {"global": 576}}}}, env=ENV)
    with pytest.raises(ConfigError, match="over site.max_wall_hours = 48"):
        plan_all({"runs": {"x": {"time_min": {"train": 48 * 60}}}}, env=ENV)
    with pytest.raises(ConfigError, match="exceeds site.max_gpus_per_user = 6"):
        plan_all({"site": {"max_gpus_per_user": 6}, "runs": {"x": {"gpus": 9, "batch": {"global": 288}}}}, env=ENV)


def test_sweep_over_the_gpu_limit_is_warned_about(caplog):
    plans = plan_all({"runs": {"b": {}}, "defaults": {"batch": {"global": 192}},
                      "sweep": {"gpus": [3, 6], "train.seed": [0, 1]}}, env=ENV)
    assert len(plans) == 4
    assert "ask for 18 GPUs together, over the per-user limit of 15" in caplog.text


@pytest.mark.e2e
def test_manifest_and_rerunning_only_what_a_change_affects(tmp_path):
    base = {"roots": {"scratch": str(tmp_path / "scratch"), "tmp_shared": str(tmp_path / "fast")},
            "defaults": {"precision": "fp32", "train": {"epochs": 2}}, "runs": {"a": {}, "b": {}}}
    cfg = write_config(tmp_path / "c.yaml", base)
    # the working directory is the project: a git repository of its own, whose commit the record names
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the project"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    snakemake(tmp_path, cfg, "--cores", "2")
    m = read_json(tmp_path / "results/a/run.json")
    assert m["config"]["optim"]["lr"] == 0.003 and m["seed"] == 0 and len(m["config_sha256"]) == 64
    assert m["project"] == {"commit": head, "dirty": False}
    assert m["airetrain"]["version"] and m["airetrain"]["commit"] != head   # this checkout's, not the project's
    assert m["versions"]["torch"] and m["versions"]["snakemake"] and "nccl" in m["versions"]
    assert m["hostnames"] and m["slurm_job_ids"] == [] and len(m["sessions"]) == 1
    assert m["checkpoint"]["sha256"] == read_json(tmp_path / "results/a/checkpoint.json")["sha256"]

    assert "Nothing to be done" in snakemake(tmp_path, cfg, "--cores", "2", "-n").stdout
    changed = write_config(tmp_path / "c.yaml", {**base, "runs": {"a": {}, "b": {"optim": {"lr": 0.001}}}})
    dry = snakemake(tmp_path, changed, "--cores", "2", "-n", "--quiet", "rules").stdout
    jobs = {line.split()[0]: int(line.split()[1]) for line in dry.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert jobs.get("train") == 1 and jobs.get("stage") == 1 and jobs.get("plan") == 1   # run b only
    out = snakemake(tmp_path, changed, "--cores", "2", "-n").stdout
    assert "results/b/train.json" in out and "results/a/train.json" not in out
