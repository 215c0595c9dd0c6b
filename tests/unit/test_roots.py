"""Where data lives: the durable root is decided once, where the workflow is planned, and never falls
back to a per-job directory; the fast root is resolved inside the job."""
import json
import logging
import os
from pathlib import Path

import pytest

from airetrain.fsutil import write_json_atomic
from airetrain.plan.planner import plan_all, plan_workflow
from airetrain.records import PlanRoots
from airetrain.typed import to_dict
from airetrain.roots import durable_root, fast_root

SUBMIT_HOST = {"HOME": "/nonexistent", "TMPDIR": "/tmp"}
# what the Snakefile's parse inside a SLURM job sees: the job id and the job's own TMPDIR
IN_JOB = {"HOME": "/nonexistent", "SLURM_JOB_ID": "4242", "TMPDIR": "/tmp/job.4242"}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_without_scratch_the_durable_root_is_the_working_directory_even_inside_a_job(workdir):
    for env in (SUBMIT_HOST, IN_JOB, {**IN_JOB, "TMP_SHARED": "/mnt/flash/tmp/job.4242"}):
        root = durable_root(None, env)
        assert root.path == workdir / ".airetrain" / "scratch" and root.source == "working directory"


def test_the_durable_root_follows_the_config_then_scratch(workdir):
    assert durable_root("/data/mine", IN_JOB).path == Path("/data/mine")
    assert durable_root(None, {**IN_JOB, "SCRATCH": "/mnt/scratch/me"}).source == "$SCRATCH"
    assert durable_root(None, {**IN_JOB, "SCRATCH": "  "}).source == "working directory"   # set but empty


def test_the_fallback_warns_once_and_names_the_key(workdir, caplog):
    with caplog.at_level(logging.WARNING, logger="airetrain.roots"):
        plan_all({"runs": {"a": {}, "b": {}}}, env=SUBMIT_HOST)
    warnings = [r.getMessage() for r in caplog.records if r.name == "airetrain.roots"]
    assert len(warnings) == 1 and "roots.scratch" in warnings[0] and "$SCRATCH is not set" in warnings[0]


def test_the_fast_root_is_still_resolved_inside_the_job(workdir):
    assert fast_root(None, {**IN_JOB, "TMP_SHARED": "/mnt/flash/tmp/job.4242"}).source == "$TMP_SHARED"
    local = fast_root(None, IN_JOB)
    assert local.path == Path("/tmp/job.4242/airetrain-tmp_shared") and local.node_local
    # outside a job, TMPDIR (Snakemake sets /tmp for every job) is not the job's own: not used
    assert fast_root(None, SUBMIT_HOST).path == workdir / ".airetrain" / "tmp_shared"


def test_the_parse_inside_a_job_plans_exactly_what_the_submit_host_planned(workdir):
    config = {"runs": {"one": {"gpus": 3, "batch": {"global": 96}}, "two": {"gpus": 6, "batch": {"global": 192}}}}
    assert plan_all(config, env=SUBMIT_HOST) == plan_all(config, env=IN_JOB)


def test_inside_a_job_the_root_recorded_by_the_submit_host_wins_over_this_environment(workdir, monkeypatch):
    """As when a site's job environment sets another $SCRATCH than the login shell had."""
    config = {"runs": {"a": {}}}
    monkeypatch.setenv("SCRATCH", str(workdir / "login-scratch"))
    submitted = plan_workflow(config, in_job=False)
    write_json_atomic(workdir / "results" / "a" / "plan.json", to_dict(submitted["a"]))
    # an older plan.json of another run, with another root, must not be taken
    stale = to_dict(submitted["a"].replace(roots=PlanRoots(Path("/elsewhere"), "config", None)))
    write_json_atomic(workdir / "results" / "old" / "plan.json", stale)
    os.utime(workdir / "results" / "old" / "plan.json", (1, 1))
    monkeypatch.setenv("SCRATCH", str(workdir / "job-scratch"))
    in_job = plan_workflow(config, in_job=True)
    assert in_job == submitted
    assert in_job["a"].dataset == workdir / "login-scratch" / "datasets" / "digits"
    assert plan_workflow(config, in_job=False)["a"].roots.scratch == workdir / "job-scratch"


def test_a_job_without_any_plan_file_plans_from_its_environment(workdir):
    (workdir / "results" / "a").mkdir(parents=True)
    (workdir / "results" / "a" / "plan.json").write_text("{not json")
    plans = plan_workflow({"runs": {"a": {}}}, in_job=True)
    assert plans["a"].roots.scratch == workdir / ".airetrain" / "scratch"
    assert json.dumps(to_dict(plans["a"]))  # still a plain record
