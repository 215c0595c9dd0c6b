"""plan/sbatch.py: the stand-alone batch script's directives and its embedded plan."""
import json

from airetrain.plan.planner import plan_all
from airetrain.plan.sbatch import PLAN_END, script
from airetrain.typed import to_dict
from conftest import ENV


def test_directives_follow_the_plan_and_the_plan_is_embedded_verbatim(tmp_path):
    config = {"runs": {"r": {"gpus": 6, "batch": {"global": 192},
                             "slurm": {"account": "lab_x", "qos": "high"}}}}
    plan = plan_all(config, env=ENV)["r"]
    text = script(plan, tmp_path, "/code/airetrain")
    directives = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert directives[:5] == ["--job-name=r", "--partition=gpu", "--account=lab_x", "--qos=high", "--nodes=2"]
    assert "--gres=gpu:3" in directives and "--ntasks-per-node=1" in directives
    assert f"--mem={plan.slurm.mem_mb}" in directives and "--requeue" in directives
    assert f"--output={tmp_path}/airetrain-r-%j.out" in directives
    embedded = text.split(f"<<'{PLAN_END}'\n", 1)[1].split(f"\n{PLAN_END}\n", 1)[0]
    assert json.loads(embedded) == to_dict(plan)
    assert "export PYTHONPATH=/code/airetrain" in text


def test_the_time_limit_is_the_plans_total_in_slurm_format(tmp_path):
    plan = plan_all({"runs": {"r": {"time_min": {"stage": 10, "train": 1430, "promote": 5}}}}, env=ENV)["r"]
    assert "#SBATCH --time=1-00:05:00" in script(plan, tmp_path, "/code").splitlines()
