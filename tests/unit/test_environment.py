"""plan/environment.py: what every rank's process gets, and the allocator settings for CPU training."""
import subprocess
import sys

import pytest

from airetrain.environment import CPU_MALLOC, with_user_settings
from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.plan.sbatch import script
from conftest import ENV

# 20 "steps", each allocating five 24 MB blocks, writing them once and freeing them all, as a training
# step's activations come and go
CHURN = """
import resource
import numpy as np
for _ in range(20):
    blocks = [np.empty(24 << 20, dtype=np.uint8) for _ in range(5)]
    for block in blocks:
        block.fill(1)
    del blocks, block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
"""


def page_faults(env: dict) -> int:
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's tunables")
def test_the_cpu_allocator_settings_keep_freed_blocks_for_the_next_step():
    """Without them freed blocks go back to the kernel and come back as fresh pages, one fault per
    4 KiB (measured here: 55,000 faults in all); with them the pages are kept for the next step
    (6,400, about the interpreter's and numpy's own)."""
    default, kept = page_faults({"PATH": "/usr/bin:/bin"}), page_faults({"PATH": "/usr/bin:/bin",
                                                                         "GLIBC_TUNABLES": CPU_MALLOC})
    assert default > 5 * kept, (default, kept)


def test_cpu_runs_get_the_allocator_settings_and_gpu_runs_do_not():
    runs = plan_all({"runs": {"cpu": {}, "gpu": {"gpus": 1}}}, env=ENV)
    assert runs["cpu"].env["GLIBC_TUNABLES"] == CPU_MALLOC
    assert "GLIBC_TUNABLES" not in runs["gpu"].env


def test_a_users_own_tunables_are_kept_after_the_plans_and_win():
    plan_env = {"GLIBC_TUNABLES": CPU_MALLOC, "OMP_NUM_THREADS": "4"}
    mine = "glibc.malloc.trim_threshold=0"
    env = with_user_settings(plan_env, {"GLIBC_TUNABLES": mine, "OMP_NUM_THREADS": "1", "HOME": "/h"})
    assert env == {"GLIBC_TUNABLES": f"{CPU_MALLOC}:{mine}", "OMP_NUM_THREADS": "4", "HOME": "/h"}
    assert with_user_settings(plan_env, env)["GLIBC_TUNABLES"] == env["GLIBC_TUNABLES"]   # merged once only
    assert with_user_settings(plan_env, {})["GLIBC_TUNABLES"] == CPU_MALLOC


def test_the_batch_script_keeps_a_users_tunables_too(tmp_path):
    plan = plan_all({"runs": {"r": {}}}, env=ENV)["r"]
    exports = [line for line in script(plan, tmp_path, "/code").splitlines() if line.startswith("export GLIBC_")]
    shown = subprocess.run(["bash", "-c", exports[0] + '; echo "$GLIBC_TUNABLES"'], capture_output=True, text=True,
                           env={"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}).stdout.strip()
    assert shown == f"{CPU_MALLOC}:glibc.malloc.trim_threshold=0"
    alone = subprocess.run(["bash", "-c", exports[0] + '; echo "$GLIBC_TUNABLES"'], capture_output=True, text=True,
                           env={}).stdout.strip()
    assert alone == CPU_MALLOC


def test_a_scripts_arguments_get_airetrains_values_as_a_shell_would_and_nothing_else():
    from airetrain.environment import expand_script_args

    env = {"AIRETRAIN_DATA_DIR": "/fast/d", "AIRETRAIN_RUN": "r1", "HOME": "/home/me"}
    assert expand_script_args(["$AIRETRAIN_DATA_DIR", "${AIRETRAIN_DATA_DIR}/train", "$AIRETRAIN_DATA_DIR/x",
                               "--name=run-$AIRETRAIN_RUN", "$AIRETRAIN_END_TIME", "$HOME", "${HOME}", "$(id)",
                               "$$AIRETRAIN_RUN", "cost $5"], env) == \
        ["/fast/d", "/fast/d/train", "/fast/d/x", "--name=run-r1", "", "$HOME", "${HOME}", "$(id)", "$r1", "cost $5"]


def test_an_unknown_airetrain_variable_in_a_scripts_arguments_is_refused_naming_the_valid_ones(tmp_path):
    from airetrain.errors import ConfigError

    script_path = tmp_path / "train.py"
    script_path.write_text("")
    with pytest.raises(ConfigError) as e:
        plan_all({"runs": {"r": {"train": {"script": str(script_path),
                                           "args": ["$AIRETRAIN_DATA", "${AIRETRAIN_X}"]}}}}, env=ENV)
    assert "runs.r.train.args name $AIRETRAIN_DATA, $AIRETRAIN_X, which airetrain does not set" in str(e.value)
    assert "may name $AIRETRAIN_RUN, $AIRETRAIN_DATA_DIR, $AIRETRAIN_CHECKPOINT_DIR" in str(e.value)
    plan = plan_all({"runs": {"r": {"train": {"script": str(script_path), "args": ["$AIRETRAIN_DATA_DIR", "-v"]}}}},
                    env=ENV)["r"]
    text = script(plan, tmp_path, "/code")   # airetrain sbatch shows what the job passes
    assert f"#   {script_path} '<the staged copy of the dataset on the fast root>' -v" in text


def test_the_script_environment_is_the_table_of_what_arguments_may_name(tmp_path):
    from airetrain.environment import BATCH_VARIABLES, JOB_VARIABLES, SCRIPT_VARIABLES
    from airetrain.train.launcher.script import script_env

    plan = plan_all({"runs": {"r": {}}}, env=ENV)["r"]
    env = script_env(plan, {"target": "/fast/d"}, tmp_path / "r", tmp_path / "ck")
    given = {"AIRETRAIN_END_TIME", "AIRETRAIN_MAX_EPOCHS", *BATCH_VARIABLES}   # in a job, a rung, a batch argument
    assert set(env) - set(JOB_VARIABLES) <= set(SCRIPT_VARIABLES) and set(SCRIPT_VARIABLES) - set(env) == given
    assert "AIRETRAIN_MAX_EPOCHS" in script_env(plan, {"target": None}, tmp_path / "r-t000-e3", tmp_path / "ck")


def test_a_script_is_given_the_batch_only_where_its_arguments_name_it_and_only_then_is_it_checked(tmp_path):
    """On 3 GPUs the default batch (64 of 32 per GPU) does not divide: a script that never reads it plans."""
    from airetrain.environment import BATCH_VARIABLES
    from airetrain.train.launcher.script import script_env

    script_path = tmp_path / "train.py"
    script_path.write_text("")
    plan = plan_all({"runs": {"r": {"gpus": 3, "train": {"script": str(script_path)}}}}, env=ENV)["r"]
    assert not set(BATCH_VARIABLES) & set(script_env(plan, {"target": None}, tmp_path / "r", tmp_path / "ck"))
    args = ["--bs", "$AIRETRAIN_BATCH_PER_DEVICE"]
    given = {"runs": {"r": {"gpus": 3, "train": {"script": str(script_path), "args": args}}}}
    with pytest.raises(ConfigError, match=r"runs.r.batch.global = 64 is not per_device \(32\) x world size \(3\)"):
        plan_all(given, env=ENV)
    given["runs"]["r"]["batch"] = {"global": 96, "per_device": 16}
    env = script_env(plan_all(given, env=ENV)["r"], {"target": None}, tmp_path / "r", tmp_path / "ck")
    assert [env[v] for v in BATCH_VARIABLES] == ["16", "96", "2"]
