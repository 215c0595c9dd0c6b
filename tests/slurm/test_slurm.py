"""On a real SLURM cluster (tests/slurm/up.sh): the aire profile, one job per run, 1- and 2-node torchrun.

The emulated GPUs have no CUDA, so GPU plans run with the explicit CPU stand-in (device: cpu, gloo).
TMPDIR points at the cluster's node-local directory, so $TMP_SHARED's fallback is node-local and the
2-node run must stage on both nodes.
"""
import time
from pathlib import Path

import pytest
import yaml

from airetrain.rundir import run_log
from conftest import (REPO, SLURM_SNAKEMAKE, SNAKEMAKE, assert_identical, ending_what_it_starts, final_state,
                      read_json, run, slurm_state, snakemake, unactivated_env, wait_for, write_config)
from user_code import write_ownlab

pytestmark = pytest.mark.slurm

# the GPU plans on CPU processes: one epoch (14 steps of 96 samples) is all their tests need
STAND_IN = {"device": "cpu", "precision": "fp32", "cpus_per_rank": 1, "mem_gb_per_rank": 2,
            "train": {"epochs": 1, "log_every_steps": 5}, "time_min": {"stage": 5, "train": 10, "promote": 5}}


def unique(path) -> str:
    """A name no earlier session used: pytest reuses basenames like slurm0 across sessions (and, with
    several workers, popen-gw1/slurm0), so the name is the whole path's."""
    return "-".join(Path(path).parts[-4:])


def sacct_jobs(env, since: str, workdir=None) -> dict[str, dict]:
    """{job id: sacct fields} of the allocations (no steps) submitted since `since`, and with workdir,
    only those of the workflow run there (each test's own directory).

    sacct -S alone also lists older jobs still running or pending then (another test's leftover)."""
    fields = ["JobID", "State", "NNodes", "AllocCPUS", "AllocTRES", "ReqMem", "NodeList", "QOS", "JobName", "Submit",
              "WorkDir", "Account"]
    out = run(["sacct", "-X", "-n", "-P", "-S", since, "-o", ",".join(fields)], env=env).stdout
    rows = (dict(zip(fields, line.split("|"))) for line in out.splitlines())
    return {row["JobID"]: row for row in rows if row["JobID"] and row["Submit"] >= since
            and (workdir is None or Path(row["WorkDir"]) == Path(workdir))}


def submitted_since(env, since: str, workdir) -> dict[str, dict]:
    """The jobs the workflow run in `workdir` submitted since `since`, once accounting has caught up:
    accounting records a submission a moment after it, so a marker job is submitted now and awaited
    in sacct first. By working directory, not by time alone: an earlier test's jobs (its own marker)
    can share the second `since` names."""
    from jobs import sbatch

    marker = sbatch("accounting-marker", ["-p", "standard", "-c", "1", "--mem=50M", "-t", "1", "--wrap=true"], env)
    wait_for(lambda: marker in sacct_jobs(env, since), 60, "the marker job in accounting", every=0.2)
    return {job_id: job for job_id, job in sacct_jobs(env, since, workdir).items() if job_id != marker}


# the aire profile, with status checks from 2 s after submission instead of 40 s, and then 1 s apart plus
# the executor's own 10 s more after each check that found no job finished (instead of 10 s plus that)
SLURM_ARGS = ["--executor", "slurm", "--profile", str(REPO / "aire"), "--slurm-init-seconds-before-status-checks", "2",
              "--seconds-between-status-checks", "1"]


def slurm_snakemake(work, cfg, env, *extra, check=True):
    return snakemake(work, cfg, *SLURM_ARGS, *extra, env=env, check=check)


@pytest.fixture(scope="module")
def cluster_runs(slurm_cluster, tmp_path_factory):
    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("slurm")
        cfg = write_config(work / "config.yaml", {
            "roots": {"scratch": str(work / "scratch")},
            "defaults": {"train": {"epochs": 3}},
            "runs": {
                "demo": {"gpus": 0, "processes": 2,
                         "slurm": {"mail_type": "END,FAIL,REQUEUE", "mail_user": "a.researcher@leeds.ac.uk"}},
                "g3": {**STAND_IN, "gpus": 3, "batch": {"global": 96, "per_device": 32}, "slurm": {"qos": "lab_high"}},
                # 6 GPUs chosen by a forecast (of one layout; test_slurm_forecast compares several): the
                # submit host asks sbatch --test-only, and every job's parse keeps the layout of its plan.json
                "g6": {**STAND_IN, "gpus": 3, "batch": {"global": 96, "per_device": 16},
                       "forecast": {"gpus": [6], "choose": "earliest_finish"}},
                # g6 again, with a model that hangs once on rank 1 in step 7 (its 9th forward pass;
                # tests/user_code.py)
                "h6": {**STAND_IN, "gpus": 6, "batch": {"global": 96, "per_device": 16},
                       "model": {"name": "ownlab.lab:hangs_once"},
                       "train": {**STAND_IN["train"], "hang_timeout_min": 0.1},
                       "checkpoint": {"every_steps": 3, "stop_margin_min": 0.05}},
            },
        })
        write_ownlab(work)   # importable from the working directory, as a user's package beside the config
        # node-local inside each node; a fresh subdirectory per session, as Aire's $TMPDIR is per job
        env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work)),
               "HANG_MARKER": str(work / "h6-blocked"), "HANG_AT": "9"}
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
        t0 = time.monotonic()
        proc = slurm_snakemake(work, cfg, env, "--jobs", "4")
        print(f"SLURM pipeline of 4 runs: {time.monotonic() - t0:.0f} s")
        return work, env, sacct_jobs(env, since), proc


def test_one_job_per_run_with_the_planned_resources(cluster_runs):
    work, env, jobs, _ = cluster_runs
    ids = {run: read_json(work / "results" / run / "train.json")["slurm_job_id"] for run in ("demo", "g3", "g6", "h6")}
    assert set(ids.values()) == set(jobs), (ids, jobs)   # exactly one allocation per run, nothing else
    for run_name, job_id in ids.items():
        plan = read_json(work / "results" / run_name / "plan.json")
        job = jobs[job_id]
        assert job["State"] == "COMPLETED"
        assert int(job["NNodes"]) == plan["nodes"]
        assert int(job["AllocCPUS"]) == plan["cpus_per_node"] * plan["nodes"]
        tres = dict(item.split("=", 1) for item in job["AllocTRES"].split(","))
        assert tres["mem"] == f"{plan['slurm']['mem_mb'] * plan['nodes'] // 1024}G"
        assert tres.get("gres/gpu") == (str(plan["gpus"]) if plan["gpus"] else None)
    forecast = read_json(work / "results/g6/plan.json")["forecast"]
    assert forecast["chosen_gpus"] == 6 and forecast["layouts"][0]["start_how"] == "sbatch --test-only"
    assert jobs[ids["g3"]]["QOS"] == "lab_high"   # slurm.qos reached the job's request (the default is normal)


def test_each_run_joins_its_history_with_sacct_figures_per_node(cluster_runs):
    from airetrain.rundir.history import everything
    work, _, jobs, _ = cluster_runs
    lines = {line["run"]: line for line in everything(work / "scratch")}
    assert {"demo", "g3", "g6", "h6"} <= set(lines)
    for name in ("demo", "g3", "g6", "h6"):
        line = lines[name]
        assert line["job_id"] in jobs and line["measured"]["source"] == "sacct"
        assert 0 < line["measured"]["busy_cores_per_node"] <= line["requested"]["cpus_per_node"]
    row = {r["run"]: r for r in __import__("csv").DictReader(open(work / "results/report/efficiency.csv"))}["g6"]
    assert lines["g6"]["measured"]["mem_peak_mb_per_node"] == pytest.approx(float(row["mem_used_mb"]) / 2, abs=0.1)
    assert lines["g6"]["profile"]["nodes"] == 2 and lines["g6"]["profile_id"] != lines["g3"]["profile_id"]


def test_the_job_asked_slurm_for_the_mail(cluster_runs):
    work, env, _, _ = cluster_runs
    job_id = read_json(work / "results/demo/train.json")["slurm_job_id"]
    shown = run(["scontrol", "show", "job", str(job_id)], env=env).stdout
    assert "MailUser=a.researcher@leeds.ac.uk" in shown and "MailType=END,FAIL,REQUEUE" in shown


def test_train_json_records_the_job_and_its_hosts(cluster_runs):
    work, _, jobs, _ = cluster_runs
    demo = read_json(work / "results/demo/train.json")
    assert demo["slurm_job_id"] in jobs and demo["hostnames"] and demo["eval_accuracy"] > 0.85
    assert demo["environment"]["OMP_NUM_THREADS"] == "1"


def test_six_gpu_plan_spans_two_nodes(cluster_runs):
    work, _, _, _ = cluster_runs
    g6 = read_json(work / "results/g6/train.json")
    assert g6["world_size"] == 6 and g6["nodes"] == 2
    assert g6["hostnames"] == ["labgpu1", "labgpu2"]
    assert g6["environment"]["NCCL_DEBUG"] == "WARN"


def test_two_node_run_trains_like_one_node_with_the_same_global_batch(cluster_runs):
    work, _, _, _ = cluster_runs
    g3, g6 = (read_json(work / f"results/{r}/train.json") for r in ("g3", "g6"))
    assert g3["global_batch"] == g6["global_batch"] == 96 and g3["steps"] == g6["steps"]
    # the same 96 samples make each step on both (DistributedSampler interleaves the same permutation)
    assert g6["final_loss"] == pytest.approx(g3["final_loss"], rel=0.02, abs=1e-3)
    assert abs(g6["eval_accuracy"] - g3["eval_accuracy"]) <= 0.02


def test_node_local_fast_root_is_staged_on_every_node(cluster_runs):
    work, _, _, _ = cluster_runs
    stage = read_json(work / "results/g6/stage.json")
    assert stage["fast_root_source"] == "$TMPDIR" and sorted(stage["nodes"]) == ["labgpu1", "labgpu2"]
    for node in ("labgpu1", "labgpu2"):
        node_tmp = slurm_state() / "nodetmp" / node / unique(work)
        assert (node_tmp / "airetrain-tmp_shared/airetrain/g6/data/meta.json").is_file()


def test_checkpoints_are_promoted_and_the_report_has_job_ids(cluster_runs):
    work, _, jobs, _ = cluster_runs
    for run_name in ("demo", "g3", "g6"):
        assert read_json(work / f"results/{run_name}/checkpoint.json")["verified"]
    md = (work / "results/report/efficiency.md").read_text()
    assert all(job_id in md for job_id in jobs)
    import csv
    rows = {r["run"]: r for r in csv.DictReader(open(work / "results/report/efficiency.csv"))}
    for run_name in ("demo", "g3", "g6"):   # from one sacct call, over the whole allocation
        row = rows[run_name]
        assert row["source"] == "sacct" and row["job_state"] == "COMPLETED"
        assert 0 < float(row["cpu_eff"]) <= 1.0 and float(row["mem_used_mb"]) > 100
        plan = read_json(work / f"results/{run_name}/plan.json")
        assert 0 < float(row["time_eff"]) < 1 and float(row["timelimit_s"]) == plan["time_min"]["total"] * 60
    assert float(rows["g6"]["gpu_hours"]) == pytest.approx(6 * float(rows["g6"]["elapsed_s"]) / 3600, rel=1e-3)
    assert float(rows["g6"]["mem_used_mb"]) > float(rows["g3"]["mem_used_mb"])   # two nodes' ranks summed
    assert (work / "results/report/efficiency.html").read_text().count("data:image/png;base64,") == 3


def test_dry_run_with_the_aire_profile_submits_nothing_and_shows_the_plan(slurm_cluster, tmp_path):
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    proc = run([SNAKEMAKE, "--executor", "slurm", "--profile", "aire", "-n", "-d", str(tmp_path),
                "--configfile", str(REPO / "config/config.yaml")],
               cwd=REPO, env=slurm_cluster)   # --profile aire resolves from the repository root
    out = proc.stdout + proc.stderr
    assert "airetrain plan:" in out and "digits-ddp" in out and "64 = 32 x 2 x 1" in out
    assert "group job run_digits-ddp" in out.lower()   # stage, train and promote as one job
    assert submitted_since(slurm_cluster, since, tmp_path) == {}
    assert not (tmp_path / "results").exists()


def test_impossible_request_is_refused_before_any_sbatch(slurm_cluster, tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", {"roots": {"scratch": str(tmp_path / "s")},
                                               "runs": {"four": {"gpus": 4}}})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    proc = slurm_snakemake(tmp_path, cfg, slurm_cluster, check=False)
    assert proc.returncode != 0
    assert "runs.four.gpus = 4 is impossible" in proc.stdout + proc.stderr
    assert submitted_since(slurm_cluster, since, tmp_path) == {}


def test_sbatch_export_runs_on_the_cluster_like_the_pipeline(cluster_runs, tmp_path):
    """`airetrain sbatch demo` (no Snakemake) gives the same training as the pipeline's job did."""
    work, env, _, _ = cluster_runs
    cfg = read_json_yaml(work / "config.yaml")
    cfg["roots"]["scratch"] = str(tmp_path / "scratch")       # fresh roots: nothing to resume from
    cfg_path = write_config(tmp_path / "config.yaml", cfg)
    env = {**env, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(tmp_path))}
    text = run(["airetrain", "sbatch", "demo", "--configfile", str(cfg_path), "--workdir", str(tmp_path)],
               env=env).stdout
    script = tmp_path / "demo.sbatch"
    script.write_text(text)
    run(["bash", "-n", str(script)])
    assert "#SBATCH --cpus-per-task=2" in text and "#SBATCH --open-mode=append" in text
    submitted = run(["sbatch", "--parsable", "--wait", str(script)], cwd=tmp_path, env=env, timeout=600)
    job_id = submitted.stdout.strip().split(";")[0]
    ours, pipeline = read_json(tmp_path / "results/demo/train.json"), read_json(work / "results/demo/train.json")
    assert ours["slurm_job_id"] == job_id and ours["steps"] == pipeline["steps"]
    assert ours["final_loss"] == pytest.approx(pipeline["final_loss"], rel=1e-5)
    assert ours["eval_accuracy"] == pipeline["eval_accuracy"]
    assert read_json(tmp_path / "results/demo/checkpoint.json")["verified"]
    assert read_json(tmp_path / "results/demo/run.json")["slurm_job_ids"] == [job_id]


def test_a_hang_on_two_nodes_is_dumped_on_both_restarted_and_ends_as_the_run_without_it(cluster_runs):
    """h6 is g6 with a model that blocks rank 1 once: every rank on both nodes dumps its stacks,
    torchrun's agents restart the group on both nodes, and it ends with g6's parameters."""
    work, _, jobs, _ = cluster_runs
    assert (work / "h6-blocked").exists()
    (hang,) = [s for s in run_log.stops(work / "scratch/airetrain/h6") if s["reason"] == "hang"]
    assert hang["action"] == "restart" and hang["step"] == 6 and hang["ranks_dumped"] == list(range(6))
    assert hang["slurm_job_id"] in jobs
    dump = Path(hang["dump"])
    for rank in range(6):   # no step finished on any rank of either node from the block to the hang
        assert "last finished step 6;" in (dump / f"rank{rank}-stacks.txt").read_text(), rank
    assert "in block_forever" in (dump / "rank1-stacks.txt").read_text()
    assert "on labgpu2" in (dump / "rank5-stacks.txt").read_text()   # the other node's ranks dumped too
    h6 = read_json(work / "results/h6/train.json")
    assert h6["resumed_from_step"] == 6 and h6["hostnames"] == ["labgpu1", "labgpu2"]
    assert_identical(final_state(work / "results/h6", work), final_state(work / "results/g6", work))
    assert read_json(work / "results/h6/run.json")["stops"][0]["reason"] == "hang"


def read_json_yaml(path):
    import yaml
    return yaml.safe_load(path.read_text())


def test_two_node_run_resumes_from_a_checkpoint_only_node_0_has(cluster_runs):
    """The fast root is node-local here: g6's checkpoints on it exist on the first node only. With the
    copies on scratch removed, a longer rerun still resumes: rank 0 reads the file and sends the state.
    (Runs last: it changes g6's results.)"""
    import shutil

    import yaml
    work, env, _, _ = cluster_runs
    before = read_json(work / "results/g6/train.json")
    shutil.rmtree(work / "scratch/airetrain/g6/checkpoints")
    cfg = yaml.safe_load((work / "config.yaml").read_text())
    cfg["runs"]["g6"]["train"] = {**cfg["runs"]["g6"]["train"], "epochs": before["epochs"] + 1}
    write_config(work / "config-longer.yaml", cfg)
    proc = slurm_snakemake(work, work / "config-longer.yaml", env, "--jobs", "3")
    after = read_json(work / "results/g6/train.json")
    per_epoch = before["steps"] // before["epochs"]
    assert after["resumed_from_step"] == before["steps"] and after["steps"] == before["steps"] + per_epoch
    assert after["hostnames"] == ["labgpu1", "labgpu2"]
    out = proc.stdout + proc.stderr
    assert "results/demo/train.json" not in out and "results/g3/train.json" not in out   # the others stay done


@pytest.fixture(scope="module")
def site_default_runs(slurm_cluster, tmp_path_factory):
    """What a user gets on a site without $SCRATCH: no roots in the config, TMPDIR set by the site per
    job and purged when the job ends (the cluster's TaskProlog and Epilog, as on Aire), and
    `.venv/bin/snakemake` called from a shell that has not activated the venv. One run on two nodes,
    of a dataset packed into shards: staged onto each node's own fast root."""
    from airetrain.stage.pack import pack
    from airetrain.stage.prepare import prepare_digits_images

    with ending_what_it_starts(slurm_cluster):
        work = tmp_path_factory.mktemp("site-defaults")
        scratch = work / ".airetrain" / "scratch"   # where the durable root falls back to
        folder = prepare_digits_images(scratch / "digits")
        pack(folder, scratch / "digits-shards", shard_bytes=100_000, log=lambda line: None)   # 19 shards
        cfg = write_config(work / "config.yaml", {"runs": {
            "s6": {**STAND_IN, "gpus": 6, "batch": {"global": 96, "per_device": 16},
                   "data": {"name": "image_folder", "path": "digits-shards", "shape": [1, 8, 8],
                            "random_flip": False}, "train": {**STAND_IN["train"], "epochs": 2}}}})
        env = unactivated_env(work, **slurm_cluster, AIRETRAIN_LAB_JOB_TMPDIR="1")
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
        proc = snakemake(work, cfg, *SLURM_ARGS, "--jobs", "1", env=env, exact_env=True, check=False)
        return work, proc, sacct_jobs(slurm_cluster, since)


def test_without_scratch_a_two_node_run_succeeds(site_default_runs):
    work, proc, jobs = site_default_runs
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    (job,) = jobs.values()
    train = read_json(work / "results/s6/train.json")
    assert job["State"] == "COMPLETED" and job["NNodes"] == "2" and train["nodes"] == 2
    assert train["eval_accuracy"] > 0.5   # it trained on what it staged


def test_without_scratch_the_durable_root_is_the_working_directory_on_both_sides(site_default_runs):
    """The submit host planned it, and the job (which parsed the Snakefile again, with SLURM_JOB_ID
    and the per-job TMPDIR set) used the same root: the durable copy is under ./.airetrain/scratch."""
    work, proc, _ = site_default_runs
    durable = (work / ".airetrain" / "scratch").resolve()
    plan = read_json(work / "results/s6/plan.json")
    assert plan["roots"] == {"scratch": str(durable), "scratch_source": "working directory", "tmp_shared": None}
    checkpoint = read_json(work / "results/s6/checkpoint.json")
    assert checkpoint["verified"] and Path(checkpoint["path"]).is_relative_to(durable)
    assert Path(checkpoint["path"]).is_file()
    out = proc.stdout + proc.stderr
    assert out.count("roots.scratch") == 1, out   # one warning, naming the key that fixes it


def test_the_per_job_tmpdir_was_the_fast_root_on_every_node_and_was_purged_with_the_job(site_default_runs):
    """The site's TMPDIR was the fast root, node-local: the shards were staged on each of the two nodes,
    and are gone now that the job has ended: anything durable left there would have been lost."""
    work, _, jobs = site_default_runs
    job_id = read_json(work / "results/s6/train.json")["slurm_job_id"]
    assert job_id in jobs
    stage = read_json(work / "results/s6/stage.json")
    assert stage["fast_root_source"] == "$TMPDIR"
    assert stage["fast_root"] == str(slurm_state() / "nodetmp" / "local" / f"job.{job_id}" / "airetrain-tmp_shared")
    assert sorted(stage["nodes"]) == ["labgpu1", "labgpu2"]
    assert "node-local: staging on each of 2 nodes" in (work / "logs/s6/stage.log").read_text()
    for host, record in stage["nodes"].items():
        assert record["format"] == "shards" and record["copied_files"] == 22 and record["host"] == host
    for node in ("labgpu1", "labgpu2"):
        assert not (slurm_state() / "nodetmp" / node / f"job.{job_id}").exists()


def test_a_users_own_script_runs_on_two_nodes_from_a_project_of_its_own(slurm_cluster, tmp_path):
    """Script mode on the cluster, from a project that `airetrain init` wrote (its Snakefile uses the installed
    workflow as a module, its profiles/aire names the account): torchrun on both nodes from one srun step,
    the script's checkpoint directory on the node-local fast root made durable on scratch and verified."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "torchrun"))
    from script_mode import WITH_JOB

    work = tmp_path / "project"
    run([sys.executable, "-m", "airetrain", "init", str(work), "--script", "train.py", "--gpus", "6",
         "--account", "lab_project"])
    (work / "train.py").write_text(WITH_JOB)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())   # init's run, on the CPU stand-in
    cfg["defaults"].update({**STAND_IN, "train": {**cfg["defaults"]["train"], "args": ["--steps", "12"]},
                            "batch": {"global": 96, "per_device": 16}})
    cfg.update(roots={"scratch": str(work / "scratch")}, runs={"mine": {}})
    write_config(work / "config/config.yaml", cfg)
    env = {**slurm_cluster, "TMPDIR": str(slurm_state() / "nodetmp" / "local" / unique(work))}
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    run([*SLURM_SNAKEMAKE, "--profile", "profiles/aire", *SLURM_ARGS[4:], "--jobs", "1"], cwd=work, env=env,
        timeout=900)
    (job,) = sacct_jobs(env, since).values()
    assert job["Account"] == "lab_project"   # the profile's, not root's default (lab): the config names none
    train = read_json(work / "results/mine/train.json")
    assert job["State"] == "COMPLETED" and job["NNodes"] == "2" and train["slurm_job_id"] == job["JobID"]
    assert train["world_size"] == 6 and train["steps"] == 12
    checkpoint = read_json(work / "results/mine/checkpoint.json")
    assert checkpoint["kind"] == "mirror" and checkpoint["verified"]
    assert sorted(checkpoint["files"]) == ["step-00000004.pt", "step-00000008.pt", "step-00000012.pt"]
    assert (work / "scratch/airetrain/mine/checkpoints/step-00000012.pt").is_file()
