"""airetrain submit's pieces without a cluster: the batch script, and which lock files a workflow job may remove
(its SLURM round trip, cancel and resubmit: tests/slurm/test_slurm_submit.py)."""
import json
import os
import shlex

import pytest

from airetrain.commands import submit
from airetrain.errors import ConfigError
from airetrain.commands.submit import HELD, LOCKS, batch_script, job_name, stale_locks_of_ours


def test_the_batch_script_is_one_small_long_job_named_for_the_project(tmp_path):
    text = batch_script(tmp_path, ["--executor", "slurm", "--config", "defaults={gpus: 3}"], 2880, "long", "lab")
    options = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert f"--job-name={job_name(tmp_path)}" in options and "--cpus-per-task=1" in options
    assert {"--time=2-00:00:00", "--signal=B:USR1@300", "--requeue", "--open-mode=append", "--partition=long",
            "--account=lab"} <= set(options)
    spaced = tmp_path / "my project"   # its paths go to sbatch's command line, one argument each
    assert submit.paths(spaced) == [f"--output={spaced.resolve()}/logs/workflow/workflow.log",
                                    f"--chdir={spaced.resolve()}"]
    with pytest.raises(ConfigError) as refused:   # a partition reaches the script: one line, one name
        submit.submit(tmp_path, [], 60, "long\nrm -rf /", None)
    assert "--partition 'long\\nrm -rf /': a SLURM name is letters" in str(refused.value)
    words = shlex.split(text.splitlines()[-1])   # exec: the process SLURM's warning signal reaches
    assert words[0] == "exec" and words[2:6] == ["-m", "airetrain", "workflow-job", "--"] and words[6:] == \
        ["--executor", "slurm", "--config", "defaults={gpus: 3}"]   # one word each, whatever the shell
    assert job_name(tmp_path) == job_name(tmp_path / ".") != job_name(tmp_path / "other")


def lock(project, name="0.input.lock"):
    (project / LOCKS).mkdir(parents=True, exist_ok=True)
    (project / LOCKS / name).write_text("files")


def test_only_the_lock_files_this_projects_workflow_job_took_are_removed(tmp_path):
    assert stale_locks_of_ours(tmp_path, "7") is None   # no lock
    lock(tmp_path)
    assert stale_locks_of_ours(tmp_path, "7") is None   # a lock no workflow job recorded: a Snakemake by hand
    (tmp_path / HELD).parent.mkdir(parents=True)
    (tmp_path / HELD).write_text(json.dumps({"job": "7", "locks": submit._locks(tmp_path)}))
    assert "this job's own" in stale_locks_of_ours(tmp_path, "7")   # requeued: the same job id
    os.utime(tmp_path / LOCKS / "0.input.lock", ns=(1, 1))   # taken again since, by another Snakemake
    assert stale_locks_of_ours(tmp_path, "7") is None
    (tmp_path / HELD).write_text(json.dumps({"job": "7", "locks": submit._locks(tmp_path)}))
    lock(tmp_path, "1.output.lock")   # one more than recorded
    assert stale_locks_of_ours(tmp_path, "7") is None
