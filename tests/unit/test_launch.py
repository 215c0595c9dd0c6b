"""train/launch.py: the torchrun command, locally and as one srun task per node, and what a stop leads to."""
import shlex

from airetrain.plan.planner import plan_all
from airetrain.train.launcher.launch import EXIT_STOPPED, _continue, command, srun_command
from conftest import ENV


def plan(**run):
    return plan_all({"runs": {"r": {"device": "cpu", **run}}}, env=ENV)["r"]


def test_locally_it_is_torchrun_itself():
    cmd = command(plan(gpus=0), "/code/train.py", ["--out", "results/r"], env={})
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert cmd[-3:] == ["/code/train.py", "--out", "results/r"]


def test_in_a_job_one_srun_task_per_node_runs_torchrun_with_the_task_shells_variables():
    p = plan(gpus=6, nodes=2, batch={"global": 192})
    cmd = command(p, "/my code/train.py", ["--out", "results/r x"], env={"SLURM_JOB_ID": "42"})
    assert cmd[:7] == ["srun", "--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                       f"--cpus-per-task={p.cpus_per_node}", "--kill-on-bad-exit=1"]
    assert cmd[7:9] == ["bash", "-c"]
    script = cmd[9]
    words = shlex.split(script.split("exec ", 1)[1])
    assert words[-3:] == ["/my code/train.py", "--out", "results/r x"]   # quoted: spaces survive
    # torchrun's own $VARIABLES stay unquoted, to expand in each task's shell
    assert any(w.startswith("--rdzv_endpoint=$AIRETRAIN_MASTER_ADDR") for w in script.split())


def test_a_stop_outside_slurm_exits_75_to_be_run_again():
    stopped = {"reason": "deadline", "step": 3, "of_steps": 9, "checkpoint": {"path": "/c"}}
    assert _continue(plan(), stopped, {}) == (EXIT_STOPPED, f"exit {EXIT_STOPPED}")


def test_a_signal_in_slurm_is_left_to_slurm_and_requeue_false_to_snakemake():
    stopped = {"reason": "signal", "step": 3, "of_steps": 9, "checkpoint": {"path": "/c"}}
    assert _continue(plan(), stopped, {"SLURM_JOB_ID": "7"})[0] == EXIT_STOPPED
    no_requeue = plan(checkpoint={"requeue": False})
    assert _continue(no_requeue, {**stopped, "reason": "deadline"}, {"SLURM_JOB_ID": "7"})[0] == EXIT_STOPPED


def test_srun_command_quotes_everything_but_torchruns_own_variables():
    p = plan(gpus=6, nodes=2, batch={"global": 192})
    script = srun_command(p, ["python", "-m", "x", "--flag=$HOME", "a;b"], env={"SLURM_JOB_ID": "1"})[-1]
    assert "--flag=$HOME" in script and "'a;b'" in script
